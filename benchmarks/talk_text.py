"""The text presets (negotiation-text, tictactoe-text): before and after RL.

    OMP_NUM_THREADS=1 python benchmarks/talk_text.py negotiation \\
        --before neg-sft/checkpoints/final --after neg-text/checkpoints/final
    OMP_NUM_THREADS=1 python benchmarks/talk_text.py tictactoe \\
        --before ttt-sft/checkpoints/final --after ttt-text/checkpoints/final

Each checkpoint plays ``--episodes`` games on the same fixed seeds (apart from every
training seed), under the preset's game parameters and invalid-answer treatment:

- *negotiation*: self-play; deal rate, walk rate, welfare (sum of both returns,
  invalid-answer penalties included) and game welfare (without them), invalid answers, mean response length in tokens; then the listener's dependence on
  the message (``coplay.eval.messages``: K answers per listener state with the real
  message and with one swapped in from another game, total variation, bootstrap CI);
- *tictactoe*: against the perfect player, half the games in each seat; loss, draw
  and win rate per seat, invalid answers, mean response length.

Prints a Markdown table and one transcript of the last checkpoint; ``--json`` writes
the numbers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from coplay.envs.negotiation import episode_metrics
from coplay.envs.registry import make_env
from coplay.eval.messages import listener_states, message_dependence
from coplay.models.loading import load_policy
from coplay.population.opponents import build_opponent
from coplay.rollout.engine import play_episodes
from coplay.train.settings import build_config
from coplay.types import Episode

EVAL_SEED = 900_000
PRESETS = {"negotiation": "negotiation-text", "tictactoe": "tictactoe-text"}


def _play(cfg, seatings, seed0: int = EVAL_SEED) -> list[Episode]:
    return play_episodes(
        lambda: make_env(cfg.game.name, **cfg.game.params),
        seatings,
        [seed0 + i for i in range(len(seatings))],
        invalid=cfg.game.invalid,
        max_turns=cfg.game.max_turns,
        rng=np.random.default_rng(0),
    )


def writing(episodes: list[Episode], policy_id: str) -> dict[str, float]:
    """Invalid answers and mean response length (tokens) of ``policy_id``'s turns."""
    turns = [t for e in episodes for t in e.turns if t.decision.policy_id == policy_id]
    tried = [d for t in turns for d in (*t.invalid_attempts, t.decision)]
    return {
        "invalid": float(np.mean([d.action is None for d in tried])),
        "response_tokens": float(np.mean([len(d.response_ids) for d in tried])),
    }


def game_welfare(episodes: list[Episode], penalty: float) -> float:
    """Mean sum of both players' game returns: the returns less invalid-answer penalties
    (which ``welfare`` of ``episode_metrics`` includes)."""
    fined = [sum(t.treatment == "penalty" for t in e.turns) for e in episodes]
    return float(
        np.mean([sum(e.returns) - penalty * n for e, n in zip(episodes, fined, strict=True)])
    )


def negotiation(cfg, policy, args) -> tuple[dict[str, float], list[Episode]]:
    eps = _play(cfg, [[policy, policy]] * args.episodes)
    out = episode_metrics(eps) | writing(eps, policy.policy_id)
    out["game_welfare"] = game_welfare(eps, cfg.game.invalid.penalty)
    states = listener_states(eps, seed=0, per_episode=args.per_episode)[: args.states]
    dep = message_dependence(policy, states, k=args.k, bootstrap=args.bootstrap, seed=0)
    out |= {
        "tv_swapped": dep.tv_swapped,
        "tv_swapped_lo": dep.tv_swapped_ci[0],
        "tv_swapped_hi": dep.tv_swapped_ci[1],
        "tv_noise": dep.tv_noise,
        "excess": dep.excess,
        "excess_lo": dep.excess_ci[0],
        "excess_hi": dep.excess_ci[1],
        "states": dep.states,
        "k": dep.k,
    }
    return out, eps


def tictactoe(cfg, policy, args) -> tuple[dict[str, float], list[Episode]]:
    perfect = build_opponent("perfect", cfg.game.name, seed=0)
    half = args.episodes // 2
    seats = [[policy, perfect]] * half + [[perfect, policy]] * half
    eps = _play(cfg, seats)
    out = writing(eps, policy.policy_id)
    for seat, games in ((0, eps[:half]), (1, eps[half:])):
        mine = np.array([e.returns[seat] for e in games])
        out |= {
            f"loss_seat{seat}": float(np.mean(mine < 0)),
            f"draw_seat{seat}": float(np.mean(mine == 0)),
            f"win_seat{seat}": float(np.mean(mine > 0)),
        }
    return out, eps


def transcript(episode: Episode, turns: int) -> str:
    lines = []
    for t in episode.turns[:turns]:
        lines.append(f"P{t.player} sees: {t.observation.text.splitlines()[-1]}")
        lines.append(f"P{t.player} writes: {t.decision.text}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("game", choices=sorted(PRESETS))
    ap.add_argument("--before", required=True, help="checkpoint before RL (the SFT one)")
    ap.add_argument("--after", nargs="+", required=True, help="checkpoint(s) after RL")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--k", type=int, default=16, help="answers per listener state")
    ap.add_argument("--states", type=int, default=60, help="listener states measured")
    ap.add_argument("--per-episode", type=int, default=2, help="listener states per game")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--transcript", type=int, default=6, help="turns of one game shown")
    ap.add_argument("--json", default=None, help="write the numbers here")
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the preset")
    args = ap.parse_args()
    cfg = build_config(preset=PRESETS[args.game], overrides=args.overrides)
    measure = negotiation if args.game == "negotiation" else tictactoe
    rows, eps = {}, []
    for name, path in [("before", args.before), *((f"after {p}", p) for p in args.after)]:
        policy = load_policy(path, seed=cfg.train.seed + 1)
        policy.policy_id = "policy"
        t0 = time.perf_counter()
        rows[name], eps = measure(cfg, policy, args)
        rows[name]["wall_s"] = time.perf_counter() - t0
    keys = list(next(iter(rows.values())))
    print("| checkpoint | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.3g}" for k in keys) + " |")
    print("\n" + transcript(eps[0], args.transcript))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
