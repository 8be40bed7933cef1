"""The training loop: the plan of an iteration's games, hooks, determinism, resume."""

import gc
from typing import ClassVar

import pytest
import torch

from coplay.backends import BACKENDS, HFBackend
from coplay.models.loading import load_policy
from coplay.policies.scripted import RandomPolicy
from coplay.population.opponents import OpponentPool, build_opponent
from coplay.rollout.source import Batch, Played, decision_versions
from coplay.train import loop
from coplay.train.checkpoints.state import RUN_KEYS, RUN_STATE, load_state, read_state, save_state
from coplay.train.hooks import Hook, Save
from coplay.train.loop import make_plan, run_loop
from coplay.train.parts.seating import Against, FromPool, SelfPlay
from coplay.train.settings import build_config
from coplay.train.trainer import setup, train
from tests.train.runs import RESTARTS, TINY, Capture, iterate, play, rows


def test_the_games_of_a_group_share_seed_seats_and_id(tmp_path):
    over = [*TINY, "train.opponent=random", "rollout.group_size=2"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    plan, _ = make_plan(run, 1)
    assert len(plan.seeds) == 8 and plan.group_ids == plan.seeds
    assert plan.seeds[::2] == plan.seeds[1::2] and len(set(plan.seeds)) == 4
    assert [row.index(me) for row in plan.seatings] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert all(set(row) == {me, "random"} for row in plan.seatings)
    assert plan.prefixes == ((),) * 8 and plan.openings == (None,) * 8 and plan.explore == {}
    assert plan.learners == (me,)  # "random" does not learn
    assert not set(plan.seeds) & set(make_plan(run, 2)[0].seeds)  # new deals every iteration
    other = setup(build_config(overrides=[*over, "train.seed=1"]), tmp_path / "s")
    assert not set(plan.seeds) & set(make_plan(other, 1)[0].seeds)


def test_self_play_seats_the_learner_everywhere(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path)
    plan, metrics = make_plan(run, 1)
    assert set(plan.seatings) == {(run.learner_ids[0],) * 2} and metrics == {}


def test_seat_weights_from_the_config_reach_the_plan(tmp_path):
    opponent = "train.opponent={name: random, seat_weights: [1, 3]}"
    over = [*TINY, opponent, "rollout.group_size=2", "rollout.games_per_iter=16"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    seats = [row.index(me) for row in make_plan(run, 1)[0].seatings]
    assert seats[::2] == seats[1::2]  # a group keeps its seat
    assert seats[::2] == [1, 0, 1, 1, 1, 0, 1, 1]


def test_a_pool_keeps_the_learners_seat_and_opponent_within_a_group(tmp_path):
    over = [*TINY, "rollout.group_size=4", "rollout.games_per_iter=16"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    bots = [RandomPolicy(seed=i, policy_id=f"bot{i}") for i in range(5)]
    run.policies |= {b.policy_id: b for b in bots}
    run.seating = FromPool(me, OpponentPool(bots), 2)
    batch, metrics = iterate(run, 1)  # the loop plays and learns from such a plan
    assert len(batch.episodes) == 16 and "loss/total" in metrics
    for g in range(4):
        group = batch.episodes[4 * g : 4 * g + 4]
        assert all(e.seats.index(me) == g % 2 for e in group)
        assert len({e.seats[1 - g % 2] for e in group}) == 1
        assert len({(e.seed, e.group_id) for e in group}) == 1


def test_restarts_now_work_with_an_opponent_pool(tmp_path):
    # A restarted group replays its source game's seats, so it needs no fixed opponent.
    run = setup(build_config(overrides=RESTARTS), tmp_path)
    me = run.learner_ids[0]
    bots = [build_opponent(name, "tic_tac_toe", seed=3) for name in ("perfect", "random")]
    run.policies |= {b.policy_id: b for b in bots}
    run.seating = FromPool(me, OpponentPool(bots), 2)
    first, _ = iterate(run, 1)
    second, metrics = iterate(run, 2)
    assert metrics["rollout/restart_groups"] == 2
    sources = {(e.seed, e.seats) for e in first.episodes}
    restarted = second.episodes[8:]
    assert all((e.seed, e.seats) in sources for e in restarted)
    assert all(len(e.prefix) % 2 == e.seats.index(me) for e in restarted)  # the learner moves


def test_the_seats_go_on_across_iterations(tmp_path):
    # Three groups an iteration: begun afresh each time, seat 0 would get two every time.
    over = [*TINY, "train.opponent=random", "rollout.group_size=2", "rollout.games_per_iter=6"]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    seats = [[row.index(me) for row in make_plan(run, it)[0].seatings[::2]] for it in (1, 2)]
    assert seats == [[0, 1, 0], [1, 0, 1]]


def test_restarted_groups_leave_the_seats_to_the_next_fresh_groups(tmp_path):
    # Two groups, the last one restarted: its seat passes to the next iteration's fresh
    # group. Begun afresh each iteration, the learner never started a game in seat 1.
    run = setup(build_config(overrides=[*RESTARTS, "rollout.games_per_iter=8"]), tmp_path)
    me = run.learner_ids[0]
    fresh, restarted = [], []
    for it in range(1, 6):
        batch, metrics = play(run, it)
        fresh.append(batch.episodes[0].seats.index(me))
        restarted.append(metrics["rollout/restart_groups"])
    assert restarted == [0, 1, 1, 1, 1]  # the first iteration had no lost game yet
    assert fresh == [0, 0, 1, 0, 1]
    assert run.plan_states[loop.SEATED] == (3, 3)


class Ahead:
    """A source that plays ahead (``lookahead`` 1) as Ray workers do: a plan handed over
    is played at once, at the weights of then, and its batch taken later; it records
    what it was handed."""

    lookahead = 1

    def __init__(self, source) -> None:
        self.source, self.submitted, self.restored, self.played = source, [], [], []
        self.held: dict[int, Batch] = {}

    def submit(self, plan, policies) -> None:
        self.submitted.append(plan)
        self.held[id(plan)] = self.source.play(plan, policies)

    def settle(self, plan) -> Played:
        return Played(self.held[id(plan)].episodes)

    def restore(self, plan, played) -> None:
        self.restored.append(plan)
        self.held[id(plan)] = Batch(played.episodes, decision_versions(played.episodes), 0.0)

    def play(self, plan, policies):
        self.played.append(plan)
        held = self.held.pop(id(plan), None)
        return held if held is not None else self.source.play(plan, policies)


def restarted_groups(plan) -> int:
    return len({g for g, seed in zip(plan.group_ids, plan.seeds, strict=True) if g != seed})


def test_a_plan_made_ahead_reports_its_own_restarts(tmp_path):
    run = setup(build_config(overrides=RESTARTS), tmp_path)
    run.source = Ahead(run.source)
    capture = Capture()
    run_loop(run, [capture], start=0, end=4)
    assert run.source.submitted == run.source.played[1:]
    reported = [m["rollout/restart_groups"] for m in capture.metrics]
    assert reported == [restarted_groups(p) for p in run.source.played] == [0, 0, 2, 2]


def _planning_ahead(out, fresh=True):
    """A 4-iteration run with restarts and weighted seats whose source plans ahead."""
    over = [*RESTARTS, "train.opponent={name: perfect, seat_weights: [1, 2]}"]
    run = setup(build_config(overrides=[*over, "train.iterations=4"]), out, fresh=fresh)
    run.source = Ahead(run.source)
    return run


def test_a_resume_plays_the_plans_made_ahead_before_the_stop(tmp_path):
    # Making the next plan moves the seat tally, the restart buffer's draws and the
    # generator; planning it again on resume gave another plan than the run made. Its
    # games were started at the weights before the saved update: played again at the
    # resumed ones, the run went on with other games and weights than the uninterrupted.
    whole = _planning_ahead(tmp_path / "whole")
    run_loop(whole, [], start=0, end=4)
    split = _planning_ahead(tmp_path / "split")
    with pytest.raises(Killed):
        run_loop(split, [SaveThenDie(at=2)], start=0, end=4)
    resumed = _planning_ahead(tmp_path / "split", fresh=False)
    assert load_state(resumed, []) == 2
    run_loop(resumed, [], start=2, end=4)
    assert resumed.source.restored == split.source.submitted[1:2]  # plan 3, as played then
    assert split.source.played[:2] + resumed.source.played == whole.source.played
    for p, q in zip(weights(whole), weights(resumed), strict=True):
        assert torch.equal(p, q)


def test_a_segment_that_stops_early_saves_the_plans_the_run_made_ahead(tmp_path):
    # A segment ending at stop_after planned ahead only to its own end: its saved state
    # held no plan for the next iteration, which the resume then planned afresh, with
    # other draws of the seats and restarts than the uninterrupted run made.
    whole = _planning_ahead(tmp_path / "whole")
    run_loop(whole, [], start=0, end=4)
    split = _planning_ahead(tmp_path / "split")
    run_loop(split, [Save(every=0, end=2, hooks=[])], start=0, end=2)  # as stop_after=2 does
    resumed = _planning_ahead(tmp_path / "split", fresh=False)
    assert load_state(resumed, []) == 2
    run_loop(resumed, [], start=2, end=4)
    assert split.source.played + resumed.source.played == whole.source.played
    for p, q in zip(weights(whole), weights(resumed), strict=True):
        assert torch.equal(p, q)


class Killed(Exception):
    pass


class SaveThenDie(Hook):
    """Saves the run's state after iteration ``at`` (the next plan is made by then),
    and stops the loop as a kill would, in the next iteration."""

    def __init__(self, at: int) -> None:
        self.at = at

    def before(self, run, it):
        if it > self.at:
            raise Killed
        return {}

    def after(self, run, it, batch, metrics):
        if it == self.at:
            save_state(run, [], it)
        return {}


def weights(run):
    return list(run.trainees[0].policy.model.parameters())


class Record(Hook):
    """Returns ``name/before`` and ``name/after``; keeps the metrics it was shown."""

    def __init__(self, name: str) -> None:
        self.label, self.seen = name, []

    def before(self, run, it):
        return {f"{self.label}/before": float(it)}

    def after(self, run, it, batch, metrics):
        self.seen.append(dict(metrics))
        return {f"{self.label}/after": float(it)}


def test_hooks_run_in_order_and_each_sees_the_metrics_so_far(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path)
    first, second, capture = Record("a"), Record("b"), Capture()
    run_loop(run, [first, second, capture], start=3, end=5)
    assert len(first.seen) == len(capture.metrics) == 2  # iterations 4 and 5
    assert first.seen[0]["a/before"] == first.seen[0]["b/before"] == 4.0
    assert "a/after" not in first.seen[0] and second.seen[0]["a/after"] == 4.0
    assert capture.metrics[1]["b/after"] == 5.0
    assert {"rollout/episode_len", "loss/total"} <= set(first.seen[0])


class Frozen(Hook):
    """Reads how many objects the garbage collector leaves alone, after each update."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def before(self, run, it):
        return {}

    def after(self, run, it, batch, metrics):
        self.counts.append(gc.get_freeze_count())
        return {}


def test_a_long_loop_freezes_the_heap_alive_at_its_start_and_thaws_it_after(tmp_path, monkeypatch):
    run = setup(build_config(overrides=TINY), tmp_path)
    hook = Frozen()
    run_loop(run, [hook], start=0, end=2)  # short: left as it is
    assert hook.counts == [0, 0]
    monkeypatch.setattr(loop, "FROZEN_FROM", 2)
    run_loop(run, [hook], start=2, end=4)
    # the model, the libraries and the run's parts: well over the run's own records
    assert len(hook.counts) == 4 and min(hook.counts[2:]) > 10_000
    assert gc.get_freeze_count() == 0


class Switch(Hook):
    """Seats a fixed opponent from iteration ``at`` on, as a league changes its pool."""

    def __init__(self, at: int) -> None:
        self.at = at

    def before(self, run, it):
        if it == self.at:
            run.seating = Against(run.learner_ids[0], "random", 2)
        return {}


def test_a_hook_before_the_plan_changes_that_iterations_seating(tmp_path):
    run = setup(build_config(overrides=[*TINY, "train.opponent=random"]), tmp_path)
    me = run.learner_ids[0]
    run.seating = SelfPlay(me, 2)
    capture = Capture()
    run_loop(run, [Switch(2), capture], start=0, end=2)
    assert {e.seats for e in capture.batches[0].episodes} == {(me, me)}
    assert {e.seats for e in capture.batches[1].episodes} == {(me, "random"), ("random", me)}


def test_a_roster_names_each_learners_metrics(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path)
    run.scope = True
    name = run.learner_ids[0]
    _, metrics = iterate(run, 1)
    assert f"rollout/{name}/episode_len" in metrics and f"loss/{name}/total" in metrics
    assert "rollout/episode_len" not in metrics and "loss/total" not in metrics
    assert "perf/rollout_s" in metrics


def test_same_seed_gives_the_same_run(tmp_path):
    def two_iterations(over, name):
        run = setup(build_config(overrides=over), tmp_path / name)
        out = [iterate(run, it)[1] for it in (1, 2)]
        metrics = [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in out]
        return metrics, [p.detach().clone() for p in run.trainees[0].policy.model.parameters()]

    (m1, w1), (m2, w2) = two_iterations(TINY, "a"), two_iterations(TINY, "b")
    assert m1 == m2
    assert all(torch.equal(p, q) for p, q in zip(w1, w2, strict=True))
    m3, _ = two_iterations([*TINY, "train.seed=1"], "c")
    assert m3 != m1


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["model.mode=text", "model.max_new_tokens=3", "game.invalid.on_fail=penalty"],
        ["algo.estimator=gae", "algo.params={}", "critic.clip=0.2"],
        [
            "loss.entropy={coef: 0.1, final_frac: 0.1}",  # the schedule resumes too
            "rollout.explore.share=0.3",  # and exploring draws from the saved samplers
        ],
        [
            "rollout.restarts.share=0.5",  # the restart buffer is saved,
            "rollout.group_size=2",
            # assigned first moves draw from the saved rng, and the memory of targets is saved
            "rollout.restarts.exploring_starts.target={coef: 1, memory: 64}",
        ],
        # The seats go on from the saved tally: (1, 0), (1, 1), then (0, 1), where a
        # tally begun afresh would seat (1, 0) again.
        ["train.opponent={name: random, seat_weights: [1, 2]}", "rollout.group_size=4"],
    ],
)
def test_resume_equals_uninterrupted(tmp_path, extra):
    over = [
        *TINY,
        "train.iterations=3",
        "train.eval_every=1",
        "train.save_every=0",
        "loss.kl.coef=0.1",
        "magnet.ema=0.1",
        "optim.lr_schedule=linear",
        "train.eval_opponents=[random]",
        *extra,
    ]
    cfg = build_config(overrides=over)
    train(cfg, tmp_path / "whole")
    train(cfg, tmp_path / "split", stop_after=2)
    # Pretend the interrupted job had logged a row past its saved state.
    with (tmp_path / "split" / "metrics.jsonl").open("a") as f:
        f.write('{"iteration": 3, "junk": 1}\n')
    train(cfg, tmp_path / "split", resume=True)
    whole = rows(tmp_path / "whole" / "metrics.jsonl")
    assert whole == rows(tmp_path / "split" / "metrics.jsonl")
    assert [r["iteration"] for r in whole] == [0, 1, 2, 3]
    a, b = load_policy(tmp_path / "whole"), load_policy(tmp_path / "split")
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)
    # Everything a next iteration would start from, which the metrics above only see
    # through one more step: the optimizers, the critic and its Adam moments, the
    # magnet, the estimator's and planning parts' states, the generators.
    runs = ("whole", "split")
    whole_state, split_state = (read_state(tmp_path / r, RUN_STATE, RUN_KEYS) for r in runs)
    for key in ("models", "trainees", "planning", "rngs"):
        assert_same_tree(whole_state[key], split_state[key], key)


def assert_same_tree(a, b, where: str) -> None:
    """``a`` and ``b`` equal leaf by leaf, tensors bit for bit; ``where`` names a leaf."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same_tree(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tree(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert a == b, where


class Recording(HFBackend):
    """A backend that asks for every version's weights, as one holding its own copy does
    (vLLM's engine), and logs each push: the version, whether the tensors were its
    model's own (same memory), and the sum of their values."""

    pushes: ClassVar[list[tuple[int, bool, float]]] = []

    def runs(self, model):
        return False

    def load_weights(self, state_dict, version):
        own = _pointers(state_dict) == _pointers(self.model.state_dict())
        total = sum(float(t.double().sum()) for t in state_dict.values())
        self.pushes.append((version, own, total))
        super().load_weights(state_dict, version)


def _pointers(state_dict) -> dict[str, int]:
    return {k: t.data_ptr() for k, t in state_dict.items()}


def test_each_update_pushes_the_weights_to_the_backend_and_resume_pushes_them_again(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(BACKENDS, "recording", Recording)
    over = [*TINY, "train.iterations=3", "train.save_every=0", "model.backend=recording"]
    cfg = build_config(overrides=over)

    def pushes(**kwargs):
        monkeypatch.setattr(Recording, "pushes", [])
        train(cfg, tmp_path / kwargs.pop("name"), **kwargs)
        return Recording.pushes

    whole = pushes(name="whole")
    assert [(v, own) for v, own, _ in whole] == [(1, True), (2, True), (3, True)]
    assert len({total for *_, total in whole}) == 3  # each update moved the weights
    assert pushes(name="split", stop_after=2) == whole[:2]
    # The resumed run pushes the restored weights at their saved version, then goes on.
    assert pushes(name="split", resume=True) == whole[1:]
