"""Save and load language-model policies; checkpoints are plain HF folders.

A checkpoint folder holds what ``save_pretrained`` writes for the model and the
tokenizer, so ``AutoModelForCausalLM.from_pretrained(folder)`` loads it without
coplay, plus ``coplay_policy.json`` with how the policy decides (mode, temperature),
the game it was trained on (``game``, ``game_params``) and its prompt format, so that
``coplay eval CHECKPOINT`` needs no ``--game``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from coplay.models.build import Dtype
from coplay.models.hf_folder import (
    POLICY_FILE,
    CheckpointError,
    load_hf,
    one_line,
    read_json,
    resolve_checkpoint,
)
from coplay.policies.lm import LMPolicy
from coplay.policies.text import TextConfig


@dataclass(frozen=True)
class PlayedGame:
    """The game a checkpoint was trained on, as the run config names it."""

    name: str
    params: Mapping[str, object] = field(default_factory=dict)


PromptFormat = Literal["chat_template", "plain"]
"""How observations become prompts (``LMPolicy._encode_prompt``): the tokenizer's chat
template, or the observation text followed by ``Action:``."""


def prompt_format(tokenizer) -> PromptFormat:
    """The prompt format a policy with ``tokenizer`` uses."""
    return "chat_template" if getattr(tokenizer, "chat_template", None) else "plain"


def save_policy(policy: LMPolicy, folder: str | Path, *, game: PlayedGame | None = None) -> Path:
    """Write the model, tokenizer, decision settings and (when given) the game it plays
    to ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    meta: dict[str, Any] = {
        "mode": policy.mode,
        "temperature": policy.temperature,
        "max_new_tokens": policy.max_new_tokens,
        "policy_id": policy.policy_id,
        "version": policy.version,
        "prompt_format": prompt_format(policy.tokenizer),
        "text": policy.text.model_dump(),
    }
    if game is not None:
        meta |= {"game": game.name, "game_params": dict(game.params)}
    write_meta(folder, meta)
    return folder


def read_meta(folder: str | Path) -> dict[str, Any]:
    """The ``coplay_policy.json`` record of a checkpoint folder ({} when it has none)."""
    file = Path(folder) / POLICY_FILE
    if not file.is_file():
        return {}
    meta = read_json(file)
    if not isinstance(meta, dict):
        raise CheckpointError(f"{file} is not a JSON object of policy settings")
    try:
        PolicyRecord.model_validate(meta)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise CheckpointError(f"{file}: {where}: {first['msg']}") from err
    return meta


class PolicyRecord(BaseModel):
    """The fields of ``coplay_policy.json`` that loading reads, as they must be; other
    keys (the game, its parameters, roles) are read where they are used."""

    model_config = ConfigDict(extra="allow")

    policy_id: StrictStr | None = None
    mode: Literal["choice", "text"] | None = None
    temperature: StrictFloat | StrictInt | None = Field(None, gt=0)
    max_new_tokens: StrictInt | None = Field(None, gt=0)
    version: StrictInt | None = Field(None, ge=0)
    text: TextConfig | None = None


def write_meta(folder: str | Path, meta: Mapping[str, Any]) -> None:
    """Write ``meta`` as the ``coplay_policy.json`` record of ``folder``."""
    (Path(folder) / POLICY_FILE).write_text(json.dumps(dict(meta), indent=2))


def checkpoint_game(folder: str | Path) -> PlayedGame | None:
    """The game a checkpoint (or adapter) folder records, None for older checkpoints;
    a ``CheckpointError`` naming the file for a game that cannot be played as recorded
    (checked as a run config's game is: a user's own game module is not imported)."""
    from coplay.envs.probe import check_game

    meta = read_meta(folder)
    if "game" not in meta:
        return None
    game, params = meta["game"], meta.get("game_params") or {}
    file = Path(folder) / POLICY_FILE
    if not isinstance(game, str) or not isinstance(params, dict):
        raise CheckpointError(f"{file}: game must be a name and game_params a mapping")
    try:
        check_game(game, params)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{file}: {one_line(err)}") from err
    return PlayedGame(game, params)


def _saved_dtype(folder: str | Path) -> Dtype:
    """The dtype ``config.json`` says the weights were saved in (``dtype`` since
    transformers 5, ``torch_dtype`` before); float32 where it names none we load."""
    config = read_json(Path(folder) / "config.json")
    if not isinstance(config, dict):
        return "float32"
    saved = config.get("dtype") or config.get("torch_dtype")
    return saved if saved in get_args(Dtype) else "float32"


def load_policy(
    path: str | Path,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
) -> LMPolicy:
    """Load a saved policy from a checkpoint folder or a run directory, in ``dtype``
    (None: the dtype it was saved in, so that a bf16 learner's snapshot plays as the
    learner did) on ``device``."""
    folder = resolve_checkpoint(path)
    meta = read_meta(folder)
    model, tok = load_hf(folder, dtype or _saved_dtype(folder))
    model.to(device)
    model.eval()
    # The backend is not saved with a policy: it is how a run executes (what engine the
    # machine has), not part of the weights, and a checkpoint stays a plain folder any
    # run can load. A reloaded policy (a frozen league or PSRO opponent, an evaluated
    # checkpoint) runs on "hf" in this process: its weights never change, so nothing
    # has to be pushed to an engine.
    policy = LMPolicy(
        model,
        tok,
        policy_id=meta.get("policy_id", folder.name),
        mode=meta.get("mode", "choice"),
        temperature=meta.get("temperature", 1.0),
        max_new_tokens=meta.get("max_new_tokens", 24),
        seed=seed,
        # A checkpoint from before answer formats read text answers leniently.
        text=TextConfig.model_validate(meta.get("text", {"answer": "free"})),
    )
    policy.version = int(meta.get("version", 0))
    return policy
