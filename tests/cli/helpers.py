"""What the command modules' tests share: tiny training settings, command lines, and
small helpers that read printed tables, make run directories and stand in for a driver."""

import shutil
from pathlib import Path

import yaml

TINY = [
    "train.iterations=2",
    "train.eval_every=1",
    "train.eval_episodes=20",
    "rollout.games_per_iter=16",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]
SHAPELESS = [o for o in TINY if not o.startswith("model.tiny.")]
"""TINY without the tiny model's shape: beside model.path that is named in a warning."""
TOURNEY = ["tournament", "--game", "kuhn_poker", "--episodes", "10"]


def config_values(out: str) -> dict[str, str]:
    """key -> value of the rows of a printed ``coplay config`` table."""
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    return {r[1].strip(): r[2].strip() for r in rows if r[1].strip()}


def copy(run, dest):
    shutil.copytree(run, dest)
    return dest


def penalty_run(writer: Path, out: Path, max_turns: int = 3) -> Path:
    """The writer's checkpoint as the final one of a run trained with
    game.invalid.on_fail=penalty and game.max_turns (its config.yaml)."""
    shutil.copytree(writer, out / "checkpoints" / "final")
    game = {"name": "kuhn_poker", "invalid": {"on_fail": "penalty"}, "max_turns": max_turns}
    (out / "config.yaml").write_text(yaml.safe_dump({"game": game}))
    return out


def stop_with(seen):
    """A stand-in for run_psro / run_league that keeps the config it is given."""

    def stop(cfg, out, **kwargs):
        seen.append(cfg)
        raise KeyboardInterrupt("stopped by the test")

    return stop
