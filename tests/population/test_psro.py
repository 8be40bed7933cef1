"""PSRO / JPSRO with a language-model best response: meta-games, seats, frozen members."""

import hashlib
import json
from dataclasses import replace

import numpy as np
import pyspiel
import pytest
import yaml
from open_spiel.python.algorithms import best_response, expected_game_score

from coplay.envs.gameref import GameRef
from coplay.eval.exact import to_openspiel_policy
from coplay.eval.meta_solution import MetaSolution, MetaSolverError
from coplay.eval.metasolvers import META_SOLVERS
from coplay.eval.mixture import aggregate_tables
from coplay.policies.scripted import RandomPolicy, TablePolicy
from coplay.population import oracles
from coplay.population.metagame import opponent_distributions
from coplay.population.oracles import ORACLES, Oracle, Target
from coplay.population.psro import run_psro
from coplay.population.psro_config import PsroConfig
from coplay.report import sinks
from coplay.train.config import ConfigError
from coplay.train.parts.seating import FromPool
from coplay.train.settings import build_config
from tests.population.psro_runs import TINY, tiny_psro

KUHN = GameRef("kuhn_poker")


def weights_digest(folder) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_psro_grows_population_logs_and_never_changes_frozen_members(tmp_path):
    digests = {}

    def watch(step):
        if step.iteration == 0:  # member 01 was just added; later responses start from it
            digests["01"] = weights_digest(tmp_path / "members" / "01")

    res = run_psro(tiny_psro(iterations=2, initial="random"), tmp_path, progress=watch)
    assert res.members == ("psro:00", "psro:01", "psro:02")
    assert [s.members for s in res.steps] == [1, 2, 3]
    # One uniform random member: its mixture is uniform random Kuhn, exploitability 11/24.
    assert res.steps[0].exploitability == pytest.approx(11 / 24)
    assert all(np.isfinite(s.exploitability) for s in res.steps)
    assert res.payoffs[0].shape == (3, 3)
    np.testing.assert_allclose(res.payoffs[0] + res.payoffs[1], 0.0, atol=1e-12)  # zero-sum
    assert weights_digest(tmp_path / "members" / "01") == digests["01"]
    assert len((tmp_path / "psro.jsonl").read_text().splitlines()) == 3
    assert (tmp_path / "responses" / "02" / "metrics.jsonl").read_text().count("\n") == 2


def test_psro_with_seat_weights_trains_responses_in_the_weighted_seats(tmp_path, monkeypatch):
    seen: list[tuple[str, ...]] = []

    class Spy(FromPool):
        def rows(self, groups, rng, tally=()):
            out = super().rows(groups, rng, tally)
            seen.extend(out)
            return out

    monkeypatch.setattr(oracles, "FromPool", Spy)
    res = run_psro(tiny_psro(iterations=1, initial="random", seat_weights=[1, 3]), tmp_path)
    assert res.members == ("psro:00", "psro:01")
    # 2 iterations of 4 groups (16 games, groups of 4): a quarter with the learner in seat 0
    assert len(seen) == 8
    assert sum(r[0] == "learner" for r in seen) == 2
    assert sum(r[1] == "learner" for r in seen) == 6
    assert all("psro:00" in r for r in seen)
    rows = (tmp_path / "responses" / "01" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in rows] == [1, 2]


def test_jpsro_with_a_correlated_solver_runs_end_to_end(tmp_path):
    res = run_psro(tiny_psro(iterations=1, initial="random", meta_solver="ce"), tmp_path)
    assert res.solution.correlated and res.solution.joint.shape == (2, 2)
    assert res.solution.joint.sum() == pytest.approx(1.0)
    assert np.isfinite(res.steps[-1].exploitability)


def test_jpsro_logs_the_cce_gap_of_its_joint_beside_its_marginals_exploitability(
    tmp_path, monkeypatch
):
    # A correlated solver: both seats play the same member, each member alike. The
    # marginals are uniform and their product is not the joint; the logged gap must be
    # the joint's: per seat, the exact best response to the other seat's marginal less
    # the joint's value (a deviation chosen before the draw sees only the marginal).
    joints = []

    def same_member(payoffs):
        k = len(payoffs[0])
        joints.append(np.eye(k) / k)
        uniform = np.full(k, 1 / k)
        return MetaSolution(marginals=(uniform, uniform), joint=joints[-1], correlated=True)

    monkeypatch.setitem(META_SOLVERS, "ce", same_member)
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact", meta_solver="ce")
    res = run_psro(cfg, tmp_path)
    rows = sinks.read_metrics(tmp_path / "psro.jsonl")
    kuhn = pyspiel.load_game("kuhn_poker")
    tables = [to_openspiel_policy(RandomPolicy(), "kuhn_poker")] + [
        to_openspiel_policy(_table_member(tmp_path, i), "kuhn_poker") for i in (1, 2)
    ]
    product_gaps = []
    for row, joint in zip(rows, [np.ones((1, 1)), *joints], strict=True):
        k = len(joint)
        joint_gaps, product = _cce_gaps(kuhn, tables[:k], joint, res.payoffs, k)
        assert [row[f"psro/cce_gap_seat{p}"] for p in (0, 1)] == pytest.approx(joint_gaps)
        assert row["psro/cce_gap"] == pytest.approx(sum(joint_gaps))
        product_gaps.append(product)
    # Kuhn is zero-sum, so the joint's value sums to 0 as the product's does and the
    # seats' sum is the marginals' NashConv; the seats tell the joint from the product
    # (the general-sum case is in tests/eval/test_mixture.py).
    assert rows[-1]["psro/cce_gap_seat0"] != pytest.approx(product_gaps[-1][0], abs=1e-3)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final/cce_gap"] == pytest.approx(rows[-1]["psro/cce_gap"])
    assert summary["cce_gap"] == pytest.approx([r["psro/cce_gap"] for r in rows])


def _table_member(out, index):
    table = json.loads((out / "members" / f"{index:02d}" / "table.json").read_text())
    return TablePolicy(table, policy_id=f"psro:{index:02d}")


def _cce_gaps(game, tables, joint, payoffs, k):
    """Per seat, the gap of ``joint`` and of its marginals' product: the value of a best
    response to the other seat's marginal less the distribution's value."""
    marginals = [joint.sum(axis=1), joint.sum(axis=0)]
    mixture = aggregate_tables(game, tables, marginals)
    root = game.new_initial_state()
    best = [best_response.BestResponsePolicy(game, p, mixture).value(root) for p in (0, 1)]
    product = np.outer(*marginals)
    gaps = {}
    for name, dist in (("joint", joint), ("product", product)):
        values = [float(np.sum(dist * payoffs[p][:k, :k])) for p in (0, 1)]
        gaps[name] = [max(0.0, b - v) for b, v in zip(best, values, strict=True)]
    return gaps["joint"], gaps["product"]


def test_jpsro_ce_logs_the_ce_gap_of_its_joint(tmp_path, monkeypatch):
    # Both seats told the same member, each member alike: told r, a seat knows the other
    # plays r, so its term is (1/k) * (best response to r in the other seat - u(r, r)).
    # That is no CCE gap: a deviation fixed before the draw faces the uniform marginal.
    def same_member(payoffs):
        k = len(payoffs[0])
        uniform = np.full(k, 1 / k)
        return MetaSolution(marginals=(uniform, uniform), joint=np.eye(k) / k, correlated=True)

    monkeypatch.setitem(META_SOLVERS, "ce", same_member)
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact", meta_solver="ce")
    res = run_psro(cfg, tmp_path)
    rows = sinks.read_metrics(tmp_path / "psro.jsonl")
    kuhn = pyspiel.load_game("kuhn_poker")
    tables = [to_openspiel_policy(RandomPolicy(), "kuhn_poker")] + [
        to_openspiel_policy(_table_member(tmp_path, i), "kuhn_poker") for i in (1, 2)
    ]
    root = kuhn.new_initial_state()

    def gain(p, r):  # seat p told r: the other seat plays r
        best = best_response.BestResponsePolicy(kuhn, p, tables[r]).value(root)
        return best - res.payoffs[p][r, r]

    for k, row in enumerate(rows, start=1):
        gains = [sum(gain(p, r) for r in range(k)) / k for p in (0, 1)]
        assert [row[f"psro/ce_gap_seat{p}"] for p in (0, 1)] == pytest.approx(gains)
        assert row["psro/ce_gap"] == pytest.approx(sum(gains))
        for p in (0, 1):
            assert row[f"psro/ce_gap_seat{p}"] >= row[f"psro/cce_gap_seat{p}"] - 1e-12
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["final/ce_gap"] == pytest.approx(rows[-1]["psro/ce_gap"])
    assert summary["ce_gap"] == pytest.approx([r["psro/ce_gap"] for r in rows])


def test_a_two_seat_joints_gap_walks_the_game_no_second_time(tmp_path, monkeypatch):
    # A seat's deviation faces the other seat's marginal, whose best response the
    # marginals' exploitability has just computed. cce_dist walked the game again for
    # each seat: on Leduc at 12 members, 3.7 s an iteration beside the mixture's 1.7 s.
    # The values are checked against a reference in the test of the logged gap above.
    def walks_again(*args, **kwargs):
        raise AssertionError("cce_dist recomputed the best responses")

    monkeypatch.setattr(pyspiel, "cce_dist", walks_again)
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact", meta_solver="cce")
    res = run_psro(cfg, tmp_path)
    assert res.solution.correlated
    assert all(np.isfinite(s.cce_gap) and len(s.cce_gaps) == 2 for s in res.steps)
    # The CE gap is JPSRO(CE)'s measure: a CCE solver's run leaves it out.
    assert all(np.isnan(s.ce_gap) and s.ce_gaps == () for s in res.steps)
    assert not any("psro/ce_gap" in row for row in sinks.read_metrics(tmp_path / "psro.jsonl"))
    assert "final/ce_gap" not in json.loads((tmp_path / "summary.json").read_text())


def test_a_product_joints_gap_is_its_mixtures_nash_conv_to_the_bit(tmp_path):
    # The console tells a correlated joint's gap by its differing from the NashConv. At
    # Kuhn's equilibrium (iteration 6) the gap summed from each seat's best-response and
    # on-policy values came out 6e-17 where the NashConv was 0, and a Nash run printed
    # "joint's CCE gap 0.0000".
    res = run_psro(tiny_psro(iterations=8, initial="random", oracle="exact"), tmp_path)
    assert [s.cce_gap for s in res.steps] == [s.nash_conv for s in res.steps]


def test_a_failing_meta_solver_falls_back_and_is_logged(tmp_path, monkeypatch):
    def failing(payoffs):
        raise MetaSolverError("no answer")

    monkeypatch.setitem(META_SOLVERS, "nash", failing)
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact")
    with pytest.warns(RuntimeWarning, match="meta-solver 'nash' failed, playing 'mwce'"):
        res = run_psro(cfg, tmp_path)
    rows = sinks.read_metrics(tmp_path / "psro.jsonl")
    # One member needs no solver; then max-welfare CE stands in for the failing Nash.
    assert [r["psro/meta_fallback"] for r in rows] == [0, 1, 1]
    assert res.solution.correlated and np.isfinite(res.steps[-1].exploitability)


def test_exact_oracle_drives_kuhn_mixture_to_equilibrium(tmp_path):
    # Classic PSRO with exact best responses: Kuhn's mixture is exact Nash within a
    # handful of responses (measured: 6), and each response's value against the
    # meta-strategy is the mixture's exploitability (2-player zero-sum).
    res = run_psro(tiny_psro(iterations=8, initial="random", oracle="exact"), tmp_path)
    assert res.steps[-1].exploitability < 1e-6
    for step in res.steps[:-1]:
        assert step.response_value == pytest.approx(step.best_value)
        assert step.best_value == pytest.approx(step.exploitability, abs=1e-9)
    # Nash's joint is the product of its marginals: its CCE gap is their NashConv.
    assert [s.cce_gap for s in res.steps] == pytest.approx([s.nash_conv for s in res.steps])
    table = json.loads((tmp_path / "members" / "01" / "table.json").read_text())
    assert all(sorted(p.values()) == [0.0, 1.0] for p in table.values())  # pure responses
    # the report's inputs: each member's weight per iteration and the latest meta-game
    last = sinks.read_metrics(tmp_path / "psro.jsonl")[-1]
    weights = {k: v for k, v in last.items() if k.startswith("psro/weight_seat0/")}
    assert list(weights.values()) == pytest.approx(res.steps[-1].marginals[0])
    metagame = json.loads((tmp_path / "metagame.json").read_text())
    assert metagame["members"] == list(res.members)
    np.testing.assert_allclose(metagame["payoffs"], res.payoffs)


def test_the_metagame_file_names_the_members_its_payoffs_cover_at_every_step(tmp_path):
    seen = []

    def check(step):
        metagame = json.loads((tmp_path / "metagame.json").read_text())
        seen.append((len(metagame["members"]), np.shape(metagame["payoffs"])))

    run_psro(tiny_psro(iterations=2, initial="random", oracle="exact"), tmp_path, progress=check)
    assert seen == [(n, (2, n, n)) for n in (1, 2, 3)]


def test_restarts_keep_the_response_with_the_highest_value(tmp_path):
    res = run_psro(tiny_psro(iterations=1, initial="random", restarts=3), tmp_path)
    values = [
        json.loads((tmp_path / "responses" / f"01-r{r}" / "summary.json").read_text())["value"]
        for r in range(3)
    ]
    assert res.steps[0].response_value == pytest.approx(max(values))
    assert len(set(values)) == 3  # seeds differ, so the tries differ


def test_lm_psro_on_a_simultaneous_game_samples_its_meta_game(tmp_path):
    over = [*TINY, "game.name=openspiel:matrix_rps", "train.eval_opponents=[]"]
    cfg = PsroConfig(run=build_config(preset="kuhn-selfplay", overrides=over), iterations=1)
    res = run_psro(cfg, tmp_path)
    assert res.members == ("psro:00", "psro:01")
    assert np.isnan(res.steps[0].exploitability)  # sampled: no exact number


def test_a_registered_oracle_answers_every_iteration(tmp_path, monkeypatch):
    # An oracle is a registry entry: this one plays the exact best response but reports
    # a made-up value, so the step shows that the loop took member and value from it.
    targets: list[Target] = []

    def exact_but_told(t: Target):
        targets.append(t)
        return TablePolicy(t.best_table, policy_id=f"psro:{t.index:02d}"), 0.125

    monkeypatch.setitem(ORACLES, "told", Oracle(exact_but_told))
    res = run_psro(tiny_psro(iterations=2, initial="random", oracle="told"), tmp_path)
    assert [t.index for t in targets] == [1, 2] and res.members[-1] == "psro:02"
    values = [s.response_value for s in res.steps]
    assert values[:2] == [0.125, 0.125] and np.isnan(values[2])  # the last trains none
    # The first target faces the uniform random member alone; the exact best response's
    # value against it is uniform random Kuhn's exploitability, 11/24.
    assert targets[0].best == pytest.approx(11 / 24) == res.steps[0].best_value
    np.testing.assert_allclose(targets[0].by_seat, [[1.0], [1.0]])
    assert [m.policy_id for m in targets[1].members] == ["psro:00", "psro:01"]


@pytest.mark.parametrize(
    "override,diff",
    [
        ("game.name=tic_tac_toe", "game.name: 'kuhn_poker' -> 'tic_tac_toe'"),
        ("train.seed=5", "train.seed: 0 -> 5"),
    ],
)
def test_psro_resume_refuses_overrides_the_members_weights_do_not_fit(tmp_path, override, diff):
    # Resumed as Kuhn's PSRO on tic-tac-toe it finished silently with mixed rows; a new
    # seed was taken too, and the run no longer equalled an uninterrupted one.
    run_psro(tiny_psro(iterations=2, initial="random"), tmp_path, stop_after=0)
    before = {f: (tmp_path / f).read_bytes() for f in ("config.yaml", "psro.jsonl")}
    moved = PsroConfig(
        run=build_config(preset="kuhn-selfplay", overrides=[*TINY, override]),
        iterations=2,
        initial="random",
    )
    with pytest.raises(ConfigError, match=f"cannot resume {tmp_path}: .*{diff}"):
        run_psro(moved, tmp_path, resume=True)
    assert {f: (tmp_path / f).read_bytes() for f in before} == before  # nothing written


def test_psro_resume_refuses_to_switch_from_the_exact_metagame_to_a_sampled_one(tmp_path):
    # train.exact=off keeps the weights but samples the meta-game, whose layout is not
    # the exact one's: the run's rows and payoffs would have mixed the two.
    run_psro(tiny_psro(iterations=2, initial="random"), tmp_path, stop_after=0)
    before = (tmp_path / "psro.jsonl").read_bytes()
    sampled = PsroConfig(
        run=build_config(preset="kuhn-selfplay", overrides=[*TINY, "train.exact=off"]),
        iterations=2,
        initial="random",
    )
    with pytest.raises(
        ConfigError, match="its meta-game is exact and the new config's would be sampled"
    ):
        run_psro(sampled, tmp_path, resume=True)
    assert (tmp_path / "psro.jsonl").read_bytes() == before


def test_psro_resume_records_its_trainer_overrides_in_config_yaml(tmp_path):
    run_psro(tiny_psro(iterations=2, initial="random"), tmp_path, stop_after=0)
    more = PsroConfig(
        run=build_config(preset="kuhn-selfplay", overrides=[*TINY, "train.iterations=3"]),
        iterations=2,
        initial="random",
    )
    run_psro(more, tmp_path, resume=True)
    # The next resume reads config.yaml: it must be what the later responses trained with.
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["train"]["iterations"] == 3
    rows = (tmp_path / "responses" / "02" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3


def test_psro_without_exact_evaluation_starts_from_a_one_member_meta_game(tmp_path):
    # The first meta-game has one member, which cross-play refused: every game without
    # exact evaluation failed at iteration 0.
    cfg = PsroConfig(
        run=build_config(preset="kuhn-selfplay", overrides=[*TINY, "train.exact=off"]),
        iterations=1,
        initial="random",
    )
    res = run_psro(cfg, tmp_path)
    assert res.members == ("psro:00", "psro:01")
    meta = json.loads((tmp_path / "metagame.json").read_text())
    assert len(meta["members"]) == 2


def test_resuming_a_finished_run_counts_the_responses_iterations_asked_for(tmp_path):
    # It said "has already run its 3 PSRO iterations" of a run of iterations=2: the
    # count held the last iteration, which solves the final meta-game and adds no one.
    cfg = tiny_psro(iterations=2, initial="random", oracle="exact")
    assert len(run_psro(cfg, tmp_path).steps) == 3
    with pytest.raises(ValueError) as err:
        run_psro(cfg, tmp_path, resume=True)
    assert str(err.value) == (
        f"{tmp_path} has already run PSRO iterations 0..2 (2 best responses added, and the "
        "final meta-game solved); nothing is left to resume"
    )


def _spy_joints(monkeypatch, solver: str) -> list[np.ndarray]:
    """The joint of every meta-game ``solver`` solves (a one-member one it does not)."""
    joints = [np.ones((1, 1))]
    real = META_SOLVERS[solver]

    def spy(payoffs):
        solution = real(payoffs)
        joints.append(solution.joint)
        return solution

    monkeypatch.setitem(META_SOLVERS, solver, spy)
    return joints


def _spy_targets(monkeypatch) -> list[Target]:
    targets: list[Target] = []

    def exact(t: Target):
        targets.append(t)
        return oracles.exact_oracle(t)

    monkeypatch.setitem(ORACLES, "exact", replace(ORACLES["exact"], respond=exact))
    return targets


def _conditionals(joint: np.ndarray, member: int) -> list[np.ndarray | None]:
    """Per seat, the opponent's distribution given ``member`` is recommended there, or
    None where it never is (entries under 1e-8 are the solver's rounding)."""
    joint = np.where(joint < 1e-8, 0.0, joint)
    told = [joint[member], joint[:, member]]
    return [t / t.sum() if t.sum() > 0 else None for t in told]


def test_jpsro_ce_each_answers_every_recommended_member_with_its_best_response(
    tmp_path, monkeypatch
):
    # JPSRO(CE) (Marris et al. 2021): every member recommended in either seat is
    # answered by the exact best response, seat by seat, to the opponent given it; the
    # grown population plays it, as a new member or as one it held already.
    joints, targets = _spy_joints(monkeypatch, "ce"), _spy_targets(monkeypatch)
    cfg = tiny_psro(
        iterations=6, initial="random", oracle="exact", meta_solver="ce", recommendations="each"
    )
    res = run_psro(cfg, tmp_path)
    tables = [to_openspiel_policy(RandomPolicy(), "kuhn_poker")] + [
        to_openspiel_policy(_table_member(tmp_path, i), "kuhn_poker")
        for i in range(1, len(res.members))
    ]
    asked = iter(targets)
    for step, after, joint in zip(res.steps, res.steps[1:], joints, strict=False):
        k = step.members
        told = [i for i in range(k) if any(c is not None for c in _conditionals(joint, i))]
        assert len(step.response_values) == len(told)  # every recommendation answered
        for n, member in enumerate(told):
            best = _best_response_values(tables[: after.members], joint, k, member)
            assert step.response_values[n] == pytest.approx(np.mean(best), abs=1e-9)
        # The new members, numbered in order, answer recommendations in member order.
        joined = [next(asked) for _ in range(after.members - k)]
        assert [t.index for t in joined] == list(range(k, after.members))
        answering = [_recommended(t, joint, told) for t in joined]
        assert answering == sorted(set(answering))
        assert step.response_value == pytest.approx(np.mean(step.response_values))
        assert step.best_values == pytest.approx(step.response_values)
    assert next(asked, None) is None and len(targets) == len(res.members) - 1
    rows = sinks.read_metrics(tmp_path / "psro.jsonl")
    assert [r["psro/response_value"] for r in rows[:-1]] == pytest.approx(
        [s.response_value for s in res.steps[:-1]]
    )
    # Kuhn's joint reaches a CE of the full game.
    assert res.steps[-1].ce_gap < 1e-6


def _best_response_values(tables, joint, k, member) -> list[float]:
    """The exact best response's value against the mixture given ``member``, in each
    seat that recommends it; asserts that a member of ``tables`` attains them all."""
    kuhn = pyspiel.load_game("kuhn_poker")
    root = kuhn.new_initial_state()
    best, attained = [], np.ones(len(tables), dtype=bool)
    for s, given in enumerate(_conditionals(joint, member)):
        if given is None:
            continue
        # The other seat plays the conditional mixture (the learner's own seat of it
        # is never read).
        weights = [np.full(k, 1 / k)] * 2
        weights[1 - s] = given
        mixture = aggregate_tables(kuhn, tables[:k], weights)
        best.append(best_response.BestResponsePolicy(kuhn, s, mixture).value(root))
        seated = [[t, mixture][:: 1 - 2 * s] for t in tables]
        values = [expected_game_score.policy_value(root, pair)[s] for pair in seated]
        attained &= np.isclose(values, best[-1], rtol=0, atol=1e-9)
    assert attained.any(), f"no member is a best response given member {member}"
    return best


def _recommended(t: Target, joint, told) -> int:
    """The recommended member whose conditionals the target's opponent plays."""
    for i in told:
        given = _conditionals(joint, i)
        if t.seats == tuple(s for s in (0, 1) if given[s] is not None) and all(
            np.allclose(t.by_seat[s], given[s], atol=1e-12) for s in t.seats
        ):
            return i
    raise AssertionError(f"target {t.index} answers no recommendation")


def test_jpsro_ce_each_adds_no_copy_of_a_member(tmp_path):
    # One response per recommendation joined even where the exact best response was a
    # member's table already, or another response's of the same iteration: on Kuhn 15 of
    # the 23 members after 6 iterations (72 of 86 after 8) were copies, each one more
    # row and column of the meta-game and more recommendations to answer.
    cfg = tiny_psro(
        iterations=6, initial="random", oracle="exact", meta_solver="ce", recommendations="each"
    )
    res = run_psro(cfg, tmp_path)
    tables = [
        (tmp_path / "members" / f"{i:02d}" / "table.json").read_text()
        for i in range(1, len(res.members))
    ]
    assert len(set(tables)) == len(tables)
    answered = sum(len(s.response_values) for s in res.steps)
    assert len(res.members) - 1 < answered  # some answers were copies, and did not join
    assert sorted(p.name for p in (tmp_path / "members").iterdir()) == [
        f"{i:02d}" for i in range(1, len(res.members))
    ]
    assert res.steps[-1].ce_gap < 1e-6


def test_jpsro_ce_likeliest_trains_one_response_per_iteration(tmp_path, monkeypatch):
    # The default: one response, in each seat against the opponent given that seat's
    # most likely recommendation; runs made before the setting existed are unchanged.
    joints, targets = _spy_joints(monkeypatch, "ce"), _spy_targets(monkeypatch)
    cfg = tiny_psro(iterations=4, initial="random", oracle="exact", meta_solver="ce")
    res = run_psro(cfg, tmp_path)
    assert [t.index for t in targets] == [1, 2, 3, 4] and len(res.members) == 5
    for t, joint in zip(targets, joints, strict=False):
        k = len(joint)
        sol = MetaSolution((joint.sum(1), joint.sum(0)), joint, correlated=k > 1)
        assert t.seats == (0, 1)
        np.testing.assert_array_equal(t.by_seat, opponent_distributions(sol, conditional=k > 1))
    assert [s.response_values for s in res.steps[:-1]] == [
        (s.response_value,) for s in res.steps[:-1]
    ]


def test_a_member_recommended_only_in_a_seat_without_games_gets_no_response(tmp_path, monkeypatch):
    # Told member 0, seat 0 faces 0 or 1; member 1 is only ever told to seat 1. With
    # seat_weights [1, 0] no game trains in seat 1, so nothing answers member 1.
    def seat1_only(payoffs):
        joint = np.zeros_like(payoffs[0])
        joint[0, :2] = 0.5
        return MetaSolution((joint.sum(1), joint.sum(0)), joint, correlated=True)

    targets: list[Target] = []

    def exact_but_told(t: Target):
        targets.append(t)
        return TablePolicy(t.best_table, policy_id=f"psro:{t.index:02d}"), t.best

    monkeypatch.setitem(META_SOLVERS, "ce", seat1_only)
    monkeypatch.setitem(ORACLES, "told", Oracle(exact_but_told))
    settings = dict(iterations=2, initial="random", oracle="told", meta_solver="ce")
    run_psro(tiny_psro(**settings, recommendations="each"), tmp_path / "both")
    assert [t.seats for t in targets] == [(0, 1), (0, 1), (1,)]
    targets.clear()
    run_psro(tiny_psro(**settings, recommendations="each", seat_weights=[1, 0]), tmp_path / "one")
    assert [t.seats for t in targets] == [(0, 1), (0, 1)]
