"""Rollout engine throughput against a fair ceiling and against one-game-at-a-time loops.

Arms, timed alternately in one process (medians of ``--repeats``, decisions per second),
with the heap alive at the start left out of the garbage collector's passes, as the
training loop leaves it (``coplay.train.loop.heap_frozen``):

- ``engine``: ``play_episodes`` plays ``--games`` games at once, every round one batched
  forward pass per policy (choice mode, the tiny default model), each seat drawing
  from its own stream as in training.
- ``raw``: the ceiling. The same model computation the engine ran, on token tensors
  built before the clock starts: per recorded batch (its distinct prompts, as the
  engine scores a repeated one once), the shared-prefix pass, the rows'
  pass with logits kept only at the last position, the log-softmax gathered at the
  actions and renormalised over each row's actions (plus candidate continuations where
  an action spans several tokens). No environment, no tokenising, no sampling, no
  Python between the tensor ops.
- ``loop``: one game at a time through the public API (``Env.observe``, ``Policy.act``
  on one observation, ``Env.step``), as systems without a batched engine play.
- ``loop2``: the best arrangement of that loop on two cores: two one-thread processes,
  each playing half of the loop's games; the wall time from the first start to the
  last end counts.
- ``waves`` (``--waves N``, N > 1): the engine with its games in N parts that take turns
  at the model (``play_episodes(waves=)``): on a GPU one part's games step while the
  other's pass runs. The same games and draws as ``engine``.
- ``game``: the game alone, no model and no records: the engine's number of games
  played straight through pyspiel with uniform random moves, reading at each decision
  what a player must be shown (its information-state string and legal actions). Any
  engine that steps the game in Python between model calls pays at least this, so
  ``bound engine/raw`` = game / (game + raw), per decision, is the most engine / raw
  can reach without running the game beside the model.
- ``records``: the records alone: the engine's episodes of that repeat built again
  from their fields (a ``Decision`` and a ``Turn`` per decision, a ``Trajectory`` per
  seat and an ``Episode`` per game; the observations are the envs' own, kept per
  state), no game and no model. An engine returns these whatever it does inside, so
  ``bound with records`` = 1 / (1 + raw / game + raw / records), per decision, is the
  most engine / raw can reach for an engine that also returns them.

Printed: each arm's median, the ratios engine / raw, engine / loop and engine / loop2
(of the medians, and the median of each repeat's own ratio: "paired"), the two bounds
on engine / raw, the engine's own time per decision (``own us/decision``: its time
beyond the raw arm's, which does not depend on the model's size), each paired figure
with its lowest and highest repeat, and (``--json``) all of it as one JSON object.

The model is the tiny default unless ``model.*`` overrides shape it, as in a run's
config: engine / raw grows with the model's work per decision, since the engine's own
time does not. ``model.device=cuda`` runs the engine and the raw arm on a GPU: the
raw arm's tensors are moved there before its clock starts, and it waits for each
batch's results before the next batch, as the engine must; the loop arms need
``--loop-games 0`` there.

    python benchmarks/rollout_throughput.py --game kuhn_poker --games 512 --repeats 5
    python benchmarks/rollout_throughput.py --game tic_tac_toe --games 256 --repeats 5
    python benchmarks/rollout_throughput.py --game tic_tac_toe model.tiny.hidden_size=256
    python benchmarks/rollout_throughput.py --game tic_tac_toe --loop-games 0 model.device=cuda
    python benchmarks/rollout_throughput.py --game tic_tac_toe --loop-games 0 --waves 2 model.device=cuda
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import pyspiel
import torch
import torch.nn.functional as F

from coplay.envs.gameref import GameRef
from coplay.envs.openspiel_games import UnknownGameError
from coplay.models.build import ModelConfig, build_policy
from coplay.policies.choices import distinct_items
from coplay.policies.lm import LMPolicy
from coplay.policies.prefixes import left_pad, prefix_plan, shared_prefix_len
from coplay.rollout.engine import play_episodes
from coplay.train.config import ConfigError
from coplay.train.loop import heap_frozen
from coplay.train.settings import build_config
from coplay.train.trainer import game_text
from coplay.types import Decision, Episode, Observation, Trajectory, Turn


class Recording:
    """Wraps a policy and keeps the observations of every batched call."""

    def __init__(self, policy: LMPolicy) -> None:
        self.inner, self.batches = policy, []
        self.policy_id, self.version = policy.policy_id, policy.version

    def act(self, observations: Sequence[Observation]):
        self.batches.append(list(observations))
        return self.inner.act(observations)

    def act_streamed(self, observations: Sequence[Observation], streams):
        self.batches.append(list(observations))
        return self.inner.act_streamed(observations, streams)

    def submit(self, observations: Sequence[Observation], streams=None):
        self.batches.append(list(observations))
        return self.inner.submit(observations, streams)


def engine_run(
    policy: LMPolicy, game: GameRef, games: int, seed: int, waves: int = 1
) -> tuple[float, list, list[Episode]]:
    """Seconds to play ``games`` games at once (in ``waves`` parts); the observations of
    each batch; the episodes."""
    rec = Recording(policy)
    seats = [[rec] * game.spec.num_players] * games
    seeds = [seed + i for i in range(games)]
    start = time.perf_counter()
    # Per-seat streams, as training plays (``LocalSource``: ``Plan.streams``).
    episodes = play_episodes(game.make, seats, seeds, streams=seeds, waves=waves)
    return time.perf_counter() - start, rec.batches, episodes


# ----------------------------------------------------------------------- the ceiling
@dataclass
class Group:
    """One prefix group of one batch, as tensors ready for the model."""

    prefix: torch.Tensor | None  # (1, n) shared prefix, or None
    ids: torch.Tensor  # (B, W) rest of each prompt, left-padded
    attn: torch.Tensor  # (B, n + W)
    pos: torch.Tensor  # (B, W)
    first: torch.Tensor  # (N,) first token of each candidate
    owner: torch.Tensor  # (N,) row of each candidate
    cands: torch.Tensor | None  # (N, C) candidates padded on the right, if any is longer
    cand_mask: torch.Tensor | None  # (N, C)
    table_index: tuple[torch.Tensor, torch.Tensor]  # (row, col) of each candidate
    shape: tuple[int, int]  # (B, K) rows by most actions


def build_groups(policy: LMPolicy, batch: Sequence[Observation]) -> list[Group]:
    """Tokenise and group one batch exactly as the engine's scoring does: the distinct
    items only (``choice_table`` runs a repeated item once)."""
    items, _ = distinct_items([policy._choice_item(o) for o in batch])
    return item_groups(items, policy.tokenizer.pad_token_id or 0, device_of(policy.model))


def item_groups(items: Sequence[tuple], pad: int, device: str = "cpu") -> list[Group]:
    """Choice items (prompt ids, action ids) as the scoring groups them, as tensors on
    ``device``: prefix groups, or one plain batch where the scoring runs one
    (``prefix_plan``)."""
    out = []
    plan = prefix_plan([p for p, _ in items])
    plain = plan is None
    for rows in [range(len(items))] if plain else plan:
        part = [items[i] for i in rows]
        prompts = [p for p, _ in part]
        n = shared_prefix_len(prompts) if len(prompts) > 1 and not plain else 0
        ids, attn, pos = left_pad([p[n:] for p in prompts], pad)
        attn = torch.cat([torch.ones(len(part), n, dtype=attn.dtype), attn], dim=1)
        cands = [(r, j, c) for r, (_, cs) in enumerate(part) for j, c in enumerate(cs)]
        width = max(len(c) for _, _, c in cands)
        padded = torch.tensor([list(c) + [pad] * (width - len(c)) for _, _, c in cands])
        mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for _, _, c in cands])
        out.append(
            Group(
                prefix=torch.tensor([prompts[0][:n]]) if n else None,
                ids=ids,
                attn=attn,
                pos=pos + n,
                first=torch.tensor([c[0] for _, _, c in cands]),
                owner=torch.tensor([r for r, _, _ in cands]),
                cands=padded if width > 1 else None,
                cand_mask=mask if width > 1 else None,
                table_index=(
                    torch.tensor([r for r, _, _ in cands]),
                    torch.tensor([j for _, j, _ in cands]),
                ),
                shape=(len(part), max(len(cs) for _, cs in part)),
            )
        )
    return [moved(g, device) for g in out]


def moved(g: Group, device: str) -> Group:
    """``g`` with its tensors on ``device`` (built on the CPU, moved before any clock)."""
    if str(device) == "cpu":
        return g

    def on(value):
        if isinstance(value, torch.Tensor):
            return value.to(device)
        return tuple(map(on, value)) if isinstance(value, tuple) else value

    return Group(**{f.name: on(getattr(g, f.name)) for f in fields(g)})


@torch.no_grad()
def raw_group(model, g: Group, temperature: float) -> torch.Tensor:
    """The model's work for one group: (B, K) action log-probs."""
    return group_table(model, g, temperature)


def group_table(model, g: Group, temperature: float) -> torch.Tensor:
    """(B, K) action log-probs of one group, with gradients where they are on."""
    cache = None
    if g.prefix is not None:
        cache = model(input_ids=g.prefix, use_cache=True, logits_to_keep=1).past_key_values
        cache.batch_repeat_interleave(g.ids.shape[0])
    out = model(
        input_ids=g.ids,
        attention_mask=g.attn,
        position_ids=g.pos,
        past_key_values=cache,
        use_cache=g.cands is not None,
        logits_to_keep=1,
    )
    first = F.log_softmax(out.logits[:, -1].float() / temperature, dim=-1)  # (B, V)
    total = first[g.owner, g.first]  # (N,)
    if g.cands is not None:
        cache = out.past_key_values
        cache.batch_select_indices(g.owner)
        more = model(
            input_ids=g.cands[:, :-1],
            attention_mask=torch.cat([g.attn[g.owner], g.cand_mask[:, :-1]], dim=1),
            position_ids=g.pos[g.owner, -1:]
            + 1
            + torch.arange(g.cands.shape[1] - 1, device=g.pos.device),
            past_key_values=cache,
        )
        lp = F.log_softmax(more.logits.float() / temperature, dim=-1)  # (N, C - 1, V)
        tok = lp.gather(-1, g.cands[:, 1:, None]).squeeze(-1)
        total = total + (tok * g.cand_mask[:, 1:]).sum(-1)
    table = total.new_full(g.shape, -torch.inf).index_put(g.table_index, total)
    return F.log_softmax(table, dim=1)


def raw_run(policy: LMPolicy, groups: Sequence[Sequence[Group]]) -> float:
    device = device_of(policy.model)
    start = time.perf_counter()
    for batch in groups:
        for g in batch:
            raw_group(policy.model, g, policy.temperature)
        # On a GPU each batch's results are waited for, as an engine waits for them:
        # the next round's prompts follow from the actions drawn. Queued back to back
        # instead, the CPU would launch a batch while the GPU runs the one before.
        synchronize(device)
    return time.perf_counter() - start


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def synchronize(device: torch.device) -> None:
    """Wait for the kernels queued on ``device`` (none on a CPU), so a clock read after
    it counts their time: the engine's records read every result back anyway."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------------ one game at a time
def loop_games(policy: LMPolicy, game: GameRef, seeds: Sequence[int]) -> int:
    """Play each game alone through the public API; returns the decisions taken."""
    decisions = 0
    for seed in seeds:
        env = game.make()
        env.reset(seed)
        while not env.is_terminal():
            actions = {}
            for p in env.players_to_act():
                actions[p] = policy.act([env.observe(p)])[0].action
                decisions += 1
            env.step(actions)
    return decisions


def loop_run(policy: LMPolicy, game: GameRef, seeds: Sequence[int]) -> tuple[float, int]:
    start = time.perf_counter()
    decisions = loop_games(policy, game, seeds)
    return time.perf_counter() - start, decisions


_WORKER: dict = {}


def _worker_play(seeds: Sequence[int]) -> tuple[float, float, int]:
    """In a forked one-thread worker: (start, end, decisions) of a loop over ``seeds``."""
    torch.set_num_threads(1)
    start = time.time()
    decisions = loop_games(_WORKER["policy"], _WORKER["game"], seeds)
    return start, time.time(), decisions


def loop2_run(pool, seeds: Sequence[int]) -> tuple[float, int]:
    """Two one-thread processes, half the games each: wall time first start to last end."""
    halves = [seeds[0::2], seeds[1::2]]
    done = pool.map(_worker_play, halves)
    return max(e for _, e, _ in done) - min(s for s, _, _ in done), sum(d for _, _, d in done)


# ----------------------------------------------------------------------- the game alone
def game_run(game: GameRef, seeds: Sequence[int]) -> tuple[float, int]:
    """Seconds and decisions of ``seeds`` games straight through pyspiel (see ``game``
    in the module's docstring): the game's own cost, under any engine."""
    loaded = pyspiel.load_game(game.spec.openspiel_name)
    keyed = loaded.get_type().provides_information_state_string
    decisions = 0
    start = time.perf_counter()
    for seed in seeds:
        pick = random.Random(seed).random
        state = loaded.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes = state.chance_outcomes()
                state.apply_action(outcomes[int(pick() * len(outcomes))][0])
                continue
            player = state.current_player()
            _ = (
                state.information_state_string(player)
                if keyed
                else state.observation_string(player)
            )
            legal = state.legal_actions(player)
            state.apply_action(legal[int(pick() * len(legal))])
            decisions += 1
        state.returns()
    return time.perf_counter() - start, decisions


# -------------------------------------------------------------------- the records alone
def records_run(episodes: Sequence[Episode]) -> tuple[float, int]:
    """Seconds and decisions to build, from fields already at hand, the records the
    engine hands back for ``episodes`` (see ``records`` in the module's docstring)."""
    fields = [
        (
            ep,
            [(t, [(turn, dict(vars(turn.decision))) for turn in t.turns]) for t in ep.trajectories],
        )
        for ep in episodes
    ]
    decisions = 0
    start = time.perf_counter()
    for ep, trajs in fields:
        built = []
        for t, turns in trajs:
            own = [
                Turn(
                    player=turn.player,
                    observation=turn.observation,  # an env's view, kept per state
                    decision=Decision.fast(**dec),
                    step=turn.step,
                    played_action=turn.played_action,
                    reward=turn.reward,
                )
                for turn, dec in turns
            ]
            decisions += len(own)
            built.append(Trajectory(player=t.player, policy_id=t.policy_id, turns=own, ret=t.ret))
        Episode(
            game=ep.game,
            seed=ep.seed,
            group_id=ep.group_id,
            seats=ep.seats,
            trajectories=tuple(built),
            returns=ep.returns,
            num_steps=ep.num_steps,
        )
    return time.perf_counter() - start, decisions


# ------------------------------------------------------------------------------ main
def measure(args: argparse.Namespace) -> dict:
    game = GameRef(args.game)
    text = game_text(game.make)
    policy = build_policy(args.model, corpus=text.texts, actions=text.actions, seed=0)
    _WORKER.update(policy=policy, game=game)
    engine_run(policy, game, 32, seed=10**6)  # warm-up
    loop_seeds = list(range(10**7, 10**7 + args.loop_games))
    pool = mp.get_context("fork").Pool(2) if args.loop_games else None
    rates: dict[str, list[float]] = {
        "engine": [],
        "raw": [],
        "loop": [],
        "loop2": [],
        "game": [],
        "records": [],
        "waves": [],
    }
    batches: list = []
    # The heap alive now left out of the collector's passes, as the loop leaves it.
    with heap_frozen():
        for r in range(args.repeats):
            arms = ["engine", "raw"] if r % 2 == 0 or not batches else ["raw", "engine"]
            if args.waves > 1:
                arms.insert(1, "waves")  # between the other two, whichever goes first
            if game.spec.openspiel_name:  # the game alone: OpenSpiel games
                arms += ["game", "records"]
            if args.loop_games:
                arms += ["loop", "loop2"] if r % 2 == 0 else ["loop2", "loop"]
            for arm in arms:
                if arm == "engine":
                    secs, batches, episodes = engine_run(
                        policy, game, args.games, seed=r * args.games
                    )
                    decisions = sum(map(len, batches))
                elif arm == "waves":  # the same games and draws: the same episodes
                    secs, parts, _ = engine_run(
                        policy, game, args.games, seed=r * args.games, waves=args.waves
                    )
                    decisions = sum(map(len, parts))
                elif arm == "records":
                    secs, decisions = records_run(episodes)
                elif arm == "raw":
                    groups = [build_groups(policy, b) for b in batches]
                    secs, decisions = raw_run(policy, groups), sum(map(len, batches))
                elif arm == "game":
                    secs, decisions = game_run(game, range(r * args.games, (r + 1) * args.games))
                elif arm == "loop":
                    secs, decisions = loop_run(policy, game, loop_seeds)
                else:
                    secs, decisions = loop2_run(pool, loop_seeds)
                rates[arm].append(decisions / secs)
    if pool is not None:
        pool.close()
    med = {arm: statistics.median(v) for arm, v in rates.items() if v}
    bounds = ("engine", "game", "records", "waves")
    ratios = {f"engine/{arm}": med["engine"] / med[arm] for arm in med if arm not in bounds}
    # The machine's speed drifts between repeats (a shared host): the median of each
    # repeat's own ratio, its arms run back to back, cancels what a ratio of medians
    # taken at different moments does not.
    paired = {
        f"paired engine/{arm}": [e / a for e, a in zip(rates["engine"], rates[arm], strict=True)]
        for arm in med
        if arm not in bounds
    }
    if rates["waves"]:
        for arm in ("raw", "engine"):
            paired[f"paired waves/{arm}"] = [
                w / a for w, a in zip(rates["waves"], rates[arm], strict=True)
            ]
            ratios[f"waves/{arm}"] = med["waves"] / med[arm]
    ratios |= {name: statistics.median(v) for name, v in paired.items()}
    # Per decision the engine spends at least the raw arm's model time plus the game's,
    # and, returning its records, their building too.
    if "game" in med:
        ratios["bound engine/raw"] = med["game"] / (med["game"] + med["raw"])
        ratios["paired bound engine/raw"] = statistics.median(
            g / (g + w) for g, w in zip(rates["game"], rates["raw"], strict=True)
        )
        ratios["bound with records"] = _bound(med["raw"], med["game"], med["records"])
        ratios["paired bound with records"] = statistics.median(
            map(_bound, rates["raw"], rates["game"], rates["records"])
        )
    # What the engine adds to the model's time, per decision: the same whatever the
    # model's size, so it says for which models engine / raw reaches a given ratio.
    owns = [1e6 / e - 1e6 / w for e, w in zip(rates["engine"], rates["raw"], strict=True)]
    paired["own us/decision"] = owns
    return {
        "game": args.game,
        "games": args.games,
        "loop_games": args.loop_games,
        "waves": args.waves,
        "repeats": args.repeats,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch thread(s)",
        "model": args.model.model_dump(),
        "median_decisions_per_s": med,
        "ratios": ratios,
        "own_us_per_decision": statistics.median(owns),
        # The lowest and highest repeat of each paired figure: how far one repeat can
        # stray on this machine, against which a change between runs is read.
        "spread": {name: [min(v), max(v)] for name, v in paired.items()},
        "decisions_per_s": rates,
    }


def model_config(overrides: Sequence[str]) -> ModelConfig:
    """The model ``model.KEY=VALUE`` overrides describe (the tiny default without any);
    a bad one raises a ConfigError of one line."""
    for item in overrides:
        if not item.startswith("model."):
            raise ConfigError(f"override {item!r}: only model.* keys shape this benchmark")
    return build_config(overrides=list(overrides)).model


def _bound(raw: float, *others: float) -> float:
    """engine / raw at most, for an engine that pays per decision the raw arm's time
    and each of ``others``' (rates, decisions per second)."""
    return (1 / raw) / (1 / raw + sum(1 / x for x in others))


def main(argv: Sequence[str] | None = None, *, report: Callable[[str], None] = print) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--game", default="kuhn_poker")
    ap.add_argument("--games", type=int, default=512, help="games at once in the engine")
    ap.add_argument("--loop-games", type=int, default=128, help="games of the loop arms (0: off)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of this process")
    ap.add_argument(
        "--waves",
        type=int,
        default=1,
        help="also time the engine with its games in this many parts (arm 'waves'; 1: off)",
    )
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument(
        "overrides", nargs="*", metavar="model.KEY=VALUE", help="the model, as in a run's config"
    )
    args = ap.parse_args(argv)
    try:
        # The run's own setting, so that building the policy keeps the count asked for.
        args.model = model_config([f"model.threads={args.threads}", *args.overrides])
        _ = GameRef(args.game).spec  # an unknown game: one line, before a model is built
    except (ConfigError, UnknownGameError) as err:
        ap.error(str(err))
    if args.waves < 1:
        ap.error(f"--waves {args.waves}: at least 1")
    if args.loop_games and args.model.device != "cpu":
        # loop2's processes are forked from this one, and CUDA does not survive a fork.
        ap.error(
            f"model.device={args.model.device}: the loop arms run on the CPU only; add --loop-games 0"
        )
    torch.set_num_threads(args.threads)
    result = measure(args)
    for arm, rate in result["median_decisions_per_s"].items():
        report(f"{arm:7s} {rate:10.1f} decisions/s (median of {args.repeats})")
    spread = result["spread"]
    for name, ratio in result["ratios"].items():
        lo_hi = f" (repeats {spread[name][0]:.3f}-{spread[name][1]:.3f})" if name in spread else ""
        report(f"{name:20s} {ratio:.3f}{lo_hi}")
    lo, hi = spread["own us/decision"]
    report(f"own us/decision      {result['own_us_per_decision']:.1f} (repeats {lo:.1f}-{hi:.1f})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
