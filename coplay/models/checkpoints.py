"""Which saved policy a path means, and which game it plays: one answer for every command.

A path may be a checkpoint folder, a run directory (its final checkpoint), a LoRA
adapter folder (``<run>/checkpoints/final/<role>``, loaded onto its ``base``), or a
roster run, whose final folder holds one policy per learner: ``role`` picks one. The
``base`` of a LoRA roster run is the untrained start of every role; it is loaded only
when asked for by name (``role="base"``), never in place of a trained role.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coplay.models.hf_folder import INTERMEDIATE, resolve_checkpoint
from coplay.models.loading import PlayedGame, checkpoint_game, load_policy, read_meta
from coplay.policies.lm import LMPolicy
from coplay.report.runfiles import read_yaml

BASE = "base"
"""The folder of a LoRA roster run's shared base model (``coplay.models.lora.BASE``,
not imported from there so that finding a policy needs no peft)."""


@dataclass(frozen=True)
class SavedPolicy:
    """A policy folder found from a path: a full checkpoint or a LoRA adapter."""

    folder: Path
    adapter: bool
    """True: ``folder`` holds a peft adapter whose base is ``folder.parent / "base"``."""

    def load(self, *, seed: int = 0) -> LMPolicy:
        if not self.adapter:
            return load_policy(self.folder, seed=seed)
        from coplay.models.lora import load_roles  # peft only where an adapter is loaded

        return load_roles(self.folder.parent, [self.folder.name], seed=seed)[self.folder.name]

    def game(self) -> PlayedGame | None:
        """The game the folder records, else the run config's (older checkpoints)."""
        return checkpoint_game(self.folder) or _run_config_game(self.folder)


def _is_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def _is_adapter(folder: Path) -> bool:
    return (folder / "adapter_config.json").is_file()


def roles_in(folder: Path) -> list[str]:
    """Policies of a roster run's final folder (one checkpoint or adapter each), less
    the base of a LoRA run: a learner of another roster may be named ``base``."""
    if not folder.is_dir():
        return []
    return sorted(
        p.name
        for p in folder.iterdir()
        if (_is_checkpoint(p) or _is_adapter(p)) and not (p.name == BASE and lora_roles_of(p))
    )


def lora_roles_of(folder: Path) -> list[str]:
    """The roles whose base ``folder`` is ([] when it is no LoRA base)."""
    recorded = read_meta(folder).get("lora_roles")
    if recorded:
        return list(recorded)
    if folder.name != BASE:
        return []
    # Saved before bases recorded their roles: adapters beside a folder named base.
    return sorted(p.name for p in folder.parent.iterdir() if _is_adapter(p))


def find_policy(path: str | Path, role: str | None = None) -> SavedPolicy:
    """The policy ``path`` (and ``role`` for roster runs) means; one-line errors naming
    the path and what to pass instead."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (expected a run directory or checkpoint)")
    final = path / "checkpoints" / "final"
    if not final.is_dir() and (path / "roster.yaml").is_file():
        # A roster run saves its policies once, at its end: until then there is none.
        raise FileNotFoundError(
            f"{path} is a roster run that has not saved its policies yet (they are saved "
            "in checkpoints/final when it ends; finish it with coplay train --resume)"
        )
    holder = final if final.is_dir() else path
    if role is not None:
        # The base folder of a LoRA run was named: its roles are its siblings.
        return _role_policy(path, holder.parent if lora_roles_of(holder) else holder, role)
    if _is_adapter(path):
        return SavedPolicy(path, adapter=True)
    if _is_checkpoint(holder):
        _refuse_lora_base(holder)
        return SavedPolicy(holder, adapter=False)
    roles = roles_in(holder)
    if roles and all(r == "final" or INTERMEDIATE.fullmatch(r) for r in roles):
        # A run's checkpoints folder: its checkpoints are not roster roles.
        raise ValueError(
            f"{path} is the checkpoints folder of the run {path.parent}: pass the run "
            f"(its final or latest checkpoint) or one checkpoint, such as {holder / roles[0]}"
        )
    if roles:
        raise ValueError(
            f"{path} is a roster run with policies {', '.join(roles)}: pick one with "
            f"--role NAME (or pass its folder, {holder / roles[0]})"
        )
    return SavedPolicy(resolve_checkpoint(path), adapter=False)  # an intermediate checkpoint


def _role_policy(path: Path, holder: Path, role: str) -> SavedPolicy:
    folder = holder / role
    if role == BASE and _is_checkpoint(folder):
        return SavedPolicy(folder, adapter=False)  # asked for by name
    if _is_adapter(folder) or _is_checkpoint(folder):
        return SavedPolicy(folder, adapter=_is_adapter(folder))
    roles = roles_in(holder)
    if not roles:
        raise ValueError(f"{path} is not a roster run (it has one policy); drop --role {role}")
    raise ValueError(f"{path} has no policy {role!r}; its policies: {', '.join(roles)}")


def _refuse_lora_base(folder: Path) -> None:
    roles = lora_roles_of(folder)
    if roles:
        raise ValueError(
            f"{folder} is the untrained base of a LoRA roster run (roles: {', '.join(roles)}); "
            f"evaluate a role with --role NAME, or pass --role {BASE} to score the base itself"
        )


RUN_CONFIG_DEPTH = 3
"""Parents of a checkpoint searched for its run's config.yaml (``run/checkpoints/final/role``
is three below its run)."""


def run_config_file(folder: Path) -> Path | None:
    """The ``config.yaml`` of the run ``folder`` belongs to: the nearest one in it or
    up to ``RUN_CONFIG_DEPTH`` parents above; None outside any run."""
    for parent in (folder, *list(folder.parents)[:RUN_CONFIG_DEPTH]):
        if (parent / "config.yaml").is_file():
            return parent / "config.yaml"
    return None


def _run_config_game(folder: Path) -> PlayedGame | None:
    """The game of the run ``folder`` belongs to, from its ``config.yaml``
    (Kuhn poker, the config's default, where it names none); one-line errors naming
    the file for one that cannot say."""
    cfg_file = run_config_file(folder)
    if cfg_file is None:
        return None
    game = read_yaml(cfg_file).get("game") or {}
    if isinstance(game, dict):
        name, params = game.get("name", "kuhn_poker"), game.get("params") or {}
        if isinstance(name, str) and isinstance(params, dict):
            return PlayedGame(name, params)
    raise ValueError(f"{cfg_file}: game must be a mapping with a name and a params mapping")
