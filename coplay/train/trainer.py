"""Training one learner: build the run's parts from a ``RunConfig``, then the loop.

``setup`` turns the config into a ``Run`` (the game by name, the episode source, the
seating, the learner and its parts, the planning parts, the evaluation opponents);
``train`` runs ``coplay.train.loop.run_loop`` over it with the standard hooks
(evaluate, log, save) and writes the run directory. Rosters (``roster.py``), leagues
and PSRO (``coplay.population``) build their runs and hooks from the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coplay.algos.advantages import make_estimator
from coplay.distributed import episode_source
from coplay.envs.gameref import GameRef
from coplay.eval.exact import decide_exact
from coplay.eval.exact_match import exact_match_opponents
from coplay.models.build import build_policy
from coplay.models.loading import PlayedGame, save_policy
from coplay.policies.lm import LMPolicy
from coplay.policies.scripted import RandomPolicy
from coplay.population.opponents import build_opponent
from coplay.report import sinks
from coplay.report.atomic import atomic_dir
from coplay.report.loggers import closed_after
from coplay.rollout.engine import play_episodes
from coplay.rollout.source import EpisodeSource
from coplay.train.checkpoints import rundir
from coplay.train.checkpoints.state import load_state
from coplay.train.config import ConfigError, RunConfig
from coplay.train.critic import make_critic
from coplay.train.evaluate import evaluate, final_policy
from coplay.train.hooks import Evaluate, Hook, Log, Progress, Report, Save, WriteReport
from coplay.train.learner import make_adapter_learner, make_learner
from coplay.train.loop import Run, run_loop
from coplay.train.parts.planning import planning_parts
from coplay.train.parts.seating import Against, SelfPlay
from coplay.train.trainee import Trainee
from coplay.types import Env, GameSpec, Policy

LOGS = ("metrics.jsonl", "transcripts.jsonl")
"""The run's append-only logs: emptied by a fresh run, repaired and cut back on resume."""


@dataclass(frozen=True)
class GameText:
    """Observations and action strings seen in random play of a game."""

    texts: list[str]
    actions: list[str]


def game_text(make: Callable[[], Env], *, episodes: int = 300, seed: int = 0) -> GameText:
    """Text of random play, for training the tiny model's tokenizer."""
    env = make()
    bot = RandomPolicy(seed=seed)
    eps = play_episodes(make, [[bot] * env.spec.num_players] * episodes, range(episodes))
    texts = [t.observation.text for e in eps for t in e.turns]
    actions = {a for e in eps for t in e.turns for a in (t.observation.legal_actions or ())}
    return GameText(texts=texts, actions=sorted(actions))


def wants_exact(cfg: RunConfig, spec: GameSpec) -> bool:
    """Whether evaluations compute exact exploitability (``train.exact``). A text-mode
    learner is then read through its sampled answers (``coplay.train.evaluate.writes``),
    never through the choice distribution it does not play."""
    return decide_exact(cfg.train.exact, spec, cfg.game.name, cfg.game.params)


def make_trainee(policy: LMPolicy, cfg: RunConfig, *, adapter: bool = False) -> Trainee:
    """A learning policy with its learner, estimator and, where the estimator reads
    values, critic. The learner's terms come from the loss sections, the magnet, and
    the rollout parts that change what a turn is trained toward: exploration's
    importance-weight cap and exploring starts' policy-iteration target. A LoRA role
    (``adapter``) trains only its adapter, against the frozen base as reference."""
    est = make_estimator(cfg.algo.estimator, **cfg.algo.params)
    restarts = cfg.rollout.restarts
    starts = restarts.exploring_starts if restarts is not None else None
    shared: dict[str, Any] = {
        "iterations": cfg.train.iterations,
        "tis_cap": tis_cap(cfg),
        "target": starts.target if starts is not None else None,
    }
    if adapter:
        learner = make_adapter_learner(policy, cfg.loss, cfg.optim, **shared)
    else:
        ema = cfg.magnet.ema if cfg.magnet is not None else 0.0
        learner = make_learner(policy, cfg.loss, cfg.optim, reference_ema=ema, **shared)
    return Trainee(
        name=policy.policy_id,
        learner=learner,
        estimator=est,
        adv_state=est.init(),
        algo=cfg.algo,
        critic=make_critic(policy, cfg.critic) if est.needs_values else None,
    )


def tis_cap(cfg: RunConfig) -> float | None:
    """The learner's one cap of truncated importance weights: exploration's, which
    corrects the choices it mixed, or else ``model.text.tis_cap``, which corrects an
    engine's text answers. In choice mode those are the messages of talk games, the
    moves being choices, whose weight is then min(1, cap): 1 for a cap of at least 1.
    The learner holds one cap for all its decisions, so the text cap is refused
    where it would not act as set."""
    text_cap, explore = cfg.model.text.tis_cap, cfg.rollout.explore
    if text_cap is None:
        return explore.tis_cap if explore is not None else None
    if explore is not None:
        raise ConfigError(
            "model.text.tis_cap cannot go with rollout.explore: the learner holds one cap "
            "for all its decisions, and exploration's (rollout.explore.tis_cap) takes it; "
            "drop model.text.tis_cap or rollout.explore"
        )
    if cfg.model.mode == "choice" and text_cap < 1.0:
        raise ConfigError(
            f"model.text.tis_cap={text_cap} below 1 would weight every choice by it too "
            "in choice mode (a choice's weight is min(1, cap)); use a cap of at least 1"
        )
    return text_cap


def eval_opponents(cfg: RunConfig) -> dict[str, Policy]:
    g = cfg.game
    return {
        name: build_opponent(name, g.name, seed=cfg.train.seed + 2 + i, params=g.params)
        for i, name in enumerate(cfg.train.eval_opponents)
    }


def setup(cfg: RunConfig, out: Path, *, fresh: bool = True) -> Run:
    """The run's parts for one learner. A fresh run creates ``out`` with its config and
    empty logs; a resumed one writes nothing here."""
    tis_cap(cfg)  # a cap that would not act as set is refused before anything is written
    torch.manual_seed(cfg.train.seed)
    game = GameRef(cfg.game.name, cfg.game.params)
    spec = game.make().spec
    text = game_text(game.make, seed=cfg.train.seed)
    policy = build_policy(cfg.model, corpus=text.texts, actions=text.actions, seed=cfg.train.seed)
    policies: dict[str, Policy] = {policy.policy_id: policy}
    opp = cfg.train.opponent
    seating: Any = SelfPlay(policy.policy_id, spec.num_players)
    if opp is not None:
        bot = build_opponent(opp.name, game.name, seed=cfg.train.seed + 1, params=game.params)
        policies[bot.policy_id] = bot
        weights = check_weights(opp.seat_weights, spec)
        seating = Against(policy.policy_id, bot.policy_id, spec.num_players, weights)
    evals = eval_opponents(cfg)
    # Built before the run directory is written: a Ray cluster that cannot be reached
    # (or any source refused) leaves no run behind that a second start would refuse.
    source = make_source(cfg, game)
    if fresh:  # a resumed run writes nothing until its state has loaded (see begin)
        rundir.start(out, cfg, LOGS)
    rng = np.random.default_rng(cfg.train.seed)
    exact = wants_exact(cfg, spec)
    planning = planning_parts(cfg.rollout)
    return Run(
        cfg=cfg,
        out=out,
        game=game,
        spec=spec,
        source=source,
        seating=seating,
        trainees=[make_trainee(policy, cfg)],
        policies=policies,
        rng=rng,
        planning=planning,
        plan_states={name: part.init() for name, part in planning.items()},
        eval_opponents=evals,
        exact=exact,
        exact_matches=exact_match_opponents(
            cfg.train.exact_matches, spec, game.name, cfg.game.params, evals, exact=exact
        ),
    )


def make_source(cfg: RunConfig, game: GameRef) -> EpisodeSource:
    """The run's episode source: this process's engine, or Ray workers
    (``rollout.workers``)."""
    r, g = cfg.rollout, cfg.game
    return episode_source(
        game,
        workers=r.workers,
        max_staleness=r.max_staleness,
        ray=cfg.ray,
        invalid=g.invalid,
        max_turns=g.max_turns,
    )


def check_weights(weights: Sequence[float] | None, spec: GameSpec) -> tuple[float, ...] | None:
    """Seat weights as a tuple, one per seat of the game."""
    if weights is not None and len(weights) != spec.num_players:
        raise ValueError(
            f"seat_weights has {len(weights)} weights; {spec.name} has {spec.num_players} seats"
        )
    return None if weights is None else tuple(weights)


def save_checkpoint(policy: Policy, folder: Path, *, game: PlayedGame | None = None) -> Path:
    """``save_policy`` into ``folder`` atomically: a kill leaves the old folder or none."""
    with atomic_dir(folder) as tmp:
        save_policy(policy, tmp, game=game)
    return folder


def checkpoint(run: Run, folder: Path) -> None:
    """The run's policy (``final_policy``: the learner or its magnet) as a checkpoint."""
    save_checkpoint(final_policy(run), folder, game=run.cfg.game.played())


def standard_hooks(
    run: Run,
    *,
    evaluate: Callable[[Run], dict[str, float]],
    save: Callable[[Run, Path], None] | None,
    end: int,
    progress: Progress | None = None,
    extra: Sequence[Hook] = (),
) -> tuple[Evaluate, Log, Save, list[Hook]]:
    """``extra`` hooks (a league), then evaluate, log, save and report, in that order."""
    t = run.cfg.train
    ev = Evaluate(evaluate, t.eval_every, t.iterations, transcripts=t.transcripts)
    log = Log(sinks=tuple(t.loggers), config=run.cfg.model_dump(mode="json"))
    hooks: list[Hook] = [*extra, ev, log]
    if t.report:
        hooks.append(WriteReport(t.eval_every, t.iterations))
    saver = Save(t.save_every, end, hooks, checkpoint=save)
    hooks.append(saver)
    if progress:
        hooks.append(Report(progress))
    return ev, log, saver, hooks


def begin(run: Run, hooks: Sequence[Hook], ev: Evaluate, log: Log, resume: bool) -> int:
    """Iterations already done. A fresh run evaluates its initial policy (row 0);
    resuming loads the state before writing anything."""
    if resume:
        done, _, log.before_s = rundir.resume(
            run.out, run.cfg, LOGS, lambda: (load_state(run, hooks), ev.evals)
        )
        log.open(run.out, done + 1)  # the sinks drop what a killed segment logged after
        return done
    loggers = log.open(run.out, 0)
    if initial := ev.initial(run):  # row 0; a run without evaluations has none
        loggers.log(0, initial)
    return 0


def drive(
    run: Run,
    *,
    evaluate: Callable[[Run], dict[str, float]],
    save: Callable[[Run, Path], None],
    final: Callable[[Run, Path], None],
    progress: Progress | None,
    resume: bool,
    stop_after: int | None,
    extra: Sequence[Hook] = (),
) -> tuple[int, Evaluate, float]:
    """Run the loop with the standard hooks from where the run stands to its end (or
    ``stop_after``), then the final checkpoint; returns (last iteration, evaluations,
    wall seconds over every segment). Ctrl-C raises ``RunInterrupted``."""
    iterations = run.cfg.train.iterations
    end = min(iterations, stop_after or iterations)
    ev, log, saver, hooks = standard_hooks(
        run, evaluate=evaluate, save=save, end=end, progress=progress, extra=extra
    )
    done: int | None = None
    # begin opens the loggers and evaluates: a Ctrl-C there closes them too
    with closed_after(log):
        try:
            done = begin(run, hooks, ev, log, resume)
            saver.saved = done if resume else None
            run_loop(run, hooks, start=done, end=end)
            if end == iterations:
                final(run, run.out / "checkpoints" / "final")
        except KeyboardInterrupt:
            if resume and done is None:
                # Stopped while loading: the saved state is as it was, and RunInterrupted
                # without a saved iteration would tell to start the run again.
                raise
            raise rundir.RunInterrupted(run.out, saver.saved) from None
    return end, ev, log.elapsed()


def summarize(run: Run, end: int, ev: Evaluate, wall_s: float) -> dict[str, Any]:
    summary = {
        "game": run.cfg.game.name,
        "iterations": end,
        "wall_s": wall_s,
        **{f"initial/{k}": v for k, v in ev.evals["initial"].items()},
        **{f"final/{k}": v for k, v in ev.evals["last"].items()},
    }
    sinks.write_summary(run.out / "summary.json", summary)
    return summary


def train(
    cfg: RunConfig,
    out: str | Path,
    *,
    progress: Progress | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Train the learner as configured, writing the run directory ``out``.

    A folder that already holds a run is refused unless ``resume`` continues it or
    ``force`` moves it to ``out.old-<time>`` first (``coplay train --force``).

    ``resume`` continues from the state saved in ``out`` (every ``train.save_every``
    iterations and at the end); the result equals an uninterrupted run, with Ray
    workers that play ahead (``rollout.max_staleness`` k > 0) too: the state keeps the
    plans made ahead and the games played for them at the older weights.
    ``stop_after`` ends after that iteration with the state saved, as a job with a
    time limit would. Each iteration logs its metrics, then saves its checkpoint, then
    its state: the state is the commit point, so a kill at any moment resumes into
    the same run. Ctrl-C raises ``RunInterrupted`` naming the last saved iteration.
    """
    if resume:
        rundir.check_resume(cfg, Path(out))  # before anything is written
    elif force and rundir.holds_run(Path(out)):
        rundir.move_aside(Path(out))
    run = setup(cfg, Path(out), fresh=not resume)
    end, ev, wall = drive(
        run,
        evaluate=evaluate,
        save=checkpoint,
        final=checkpoint,
        progress=progress,
        resume=resume,
        stop_after=stop_after,
    )
    return summarize(run, end, ev, wall)
