"""Evaluation of a run's policy: exact exploitability, matches, exact matches, welfare."""

import sys
from types import SimpleNamespace

import pytest

from coplay.eval.exact import exploitability
from coplay.eval.exact_match import exact_outcomes
from coplay.eval.sampled import SampledPolicy
from coplay.models.loading import PlayedGame, save_policy
from coplay.policies.scripted import RandomPolicy, make_scripted
from coplay.train.evaluate import (
    SeatedPolicy,
    evaluate,
    evaluate_roster,
    final_policy,
    selfplay_metrics,
)
from coplay.train.roster import setup_roster, validate_roster
from coplay.train.settings import build_config
from coplay.train.trainer import setup
from tests.eval.writers import write_actions, writing_lm
from tests.train.rosters import TWO_ROLES
from tests.train.runs import TINY, iterate


def test_the_final_policy_is_the_learner_unless_the_magnet_is_asked_for(tmp_path):
    plain = setup(build_config(overrides=TINY), tmp_path / "a")
    assert final_policy(plain) is plain.trainees[0].policy
    average = setup(build_config(overrides=[*TINY, "magnet.ema=0.5"]), tmp_path / "b")
    assert final_policy(average) is average.trainees[0].policy
    magnet = setup(
        build_config(overrides=[*TINY, "magnet={ema: 0.5, final: true}"]), tmp_path / "c"
    )
    learner = magnet.trainees[0].learner
    assert learner.reference is not None and final_policy(magnet) is learner.reference


@pytest.mark.parametrize(("exact", "expected"), [("auto", True), ("off", False)])
def test_exact_exploitability_follows_train_exact(tmp_path, exact, expected):
    over = [*TINY, f"train.exact={exact}", "train.eval_opponents=[random]"]
    run = setup(build_config(overrides=over), tmp_path)
    m = evaluate(run)
    assert run.exact is expected and ("eval/exploitability" in m) is expected
    if expected:  # the untrained policy is close to uniform: Kuhn's uniform NashConv is 11/12
        assert m["eval/nash_conv"] == pytest.approx(11 / 12, abs=0.15)
        assert m["eval/exploitability"] == pytest.approx(m["eval/nash_conv"] / 2)
    rates = m["eval/random/win"] + m["eval/random/draw"] + m["eval/random/loss"]
    assert rates == pytest.approx(1.0)
    assert {"eval/random/loss_seat0", "eval/random/loss_seat1"} <= set(m)
    assert "eval/selfplay/welfare" not in m  # zero-sum: self-play welfare says nothing


def test_a_magnet_final_policy_is_evaluated_beside_the_learner(tmp_path):
    run = setup(build_config(overrides=[*TINY, "magnet={ema: 0.5, final: true}"]), tmp_path)
    for it in (1, 2):
        iterate(run, it)
    m = evaluate(run)
    own = exploitability(run.trainees[0].policy, "kuhn_poker").exploitability
    assert m["eval/learner/exploitability"] == pytest.approx(own)
    assert m["eval/exploitability"] != m["eval/learner/exploitability"]


def test_selfplay_metrics_welfare_is_zero_in_a_zero_sum_game(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path)
    m = selfplay_metrics(run)
    assert m["eval/selfplay/welfare"] == pytest.approx(0.0, abs=1e-12)
    assert m["eval/selfplay/return_seat0"] == pytest.approx(-m["eval/selfplay/return_seat1"])
    assert m["eval/selfplay/return_seat0"] != 0.0  # the seats do differ: Kuhn favours one


def test_a_general_sum_game_is_judged_by_self_play(tmp_path):
    over = [*TINY, "game.name=dilemma", "train.eval_episodes=4"]
    m = evaluate(setup(build_config(overrides=over), tmp_path))
    welfare = m["eval/selfplay/return_seat0"] + m["eval/selfplay/return_seat1"]
    assert m["eval/selfplay/welfare"] == pytest.approx(welfare)
    assert 0.0 <= m["eval/selfplay/fairness_jain"] <= 1.0


def test_evaluation_matches_play_the_game_as_trained(tmp_path, monkeypatch):
    # game.max_turns truncated training, but the evaluation's matches ran to the end.
    from coplay.eval import matches

    seen = []
    real = matches.play_episodes
    monkeypatch.setattr(
        matches, "play_episodes", lambda *a, **kw: seen.append(kw["max_turns"]) or real(*a, **kw)
    )
    over = [*TINY, "game.name=tic_tac_toe", "game.max_turns=4", "train.eval_opponents=[random]"]
    m = evaluate(setup(build_config(overrides=over), tmp_path))
    assert seen == [4] and "eval/random/win" in m


def test_seated_policy_routes_each_player_to_its_seat():
    nash, rand = make_scripted("nash", "kuhn_poker"), RandomPolicy(seed=0)
    same = exploitability(SeatedPolicy([rand, rand]), "kuhn_poker")
    assert same.exploitability == pytest.approx(11 / 24)
    exact = exploitability(SeatedPolicy([nash, rand]), "kuhn_poker")
    # Seat 1 plays uniformly, so a best responder in seat 1 gains and nash in seat 0 cannot.
    assert exact.on_policy_values[0] > 0 > exact.on_policy_values[1]
    assert exploitability(SeatedPolicy([nash, nash]), "kuhn_poker").nash_conv < 1e-3
    with pytest.raises(ValueError, match="player 1 has no seat"):
        exploitability(SeatedPolicy([nash]), "kuhn_poker")
    with pytest.raises(TypeError, match="cannot report action probabilities"):
        SeatedPolicy([nash, SimpleNamespace(policy_id="remote")])


@pytest.fixture(scope="module")
def tic_tac_toe_eval(tmp_path_factory) -> dict:
    """The evaluation of a tiny tic-tac-toe run with an averaged final policy after two
    updates. Each exact match against the perfect player walks the whole game tree, so
    the two tests share one, and the iterations run without hooks (``train`` would
    evaluate the initial policy too)."""
    over = [
        *TINY,
        "game.name=tic_tac_toe",
        "train.eval_opponents=[random, perfect]",
        "magnet={ema: 0.5, final: true}",
    ]
    run = setup(build_config(overrides=over), tmp_path_factory.mktemp("tic_tac_toe"))
    for it in (1, 2):
        iterate(run, it)
    return evaluate(run)


def test_tic_tac_toe_evaluation_adds_exact_matches_against_the_perfect_player(tic_tac_toe_eval):
    row = tic_tac_toe_eval
    assert "eval/exploitability" not in row  # perfect information: matches instead
    for seat in (0, 1):
        assert 0.0 <= row[f"eval/perfect/exact_loss_seat{seat}"] <= 1.0
        assert 0.0 <= row[f"eval/perfect/greedy_loss_seat{seat}"] <= 1.0
        assert row[f"eval/perfect/exact_win_seat{seat}"] == 0.0  # nobody beats perfect play
        assert f"eval/random/exact_loss_seat{seat}" not in row  # auto: optimal bots only
    # a barely trained model plays nearly uniformly: the second seat loses almost always
    assert row["eval/perfect/exact_loss_seat1"] > 0.8


def test_an_averaged_final_policy_is_matched_exactly_beside_the_learner(tic_tac_toe_eval):
    row = tic_tac_toe_eval
    for seat in (0, 1):
        mine, learner = (
            row[f"{p}perfect/exact_loss_seat{seat}"] for p in ("eval/", "eval/learner/")
        )
        assert 0.0 <= mine <= 1.0 and 0.0 <= learner <= 1.0
    # two updates apart, the average and the last iterate are different policies
    assert row["eval/perfect/exact_return_seat0"] != row["eval/learner/perfect/exact_return_seat0"]
    assert "eval/learner/random/win" not in row  # sampled matches: the final policy only


def test_a_text_run_reports_sampled_numbers_only(tmp_path):
    # The untrained tiny model writes garbage: almost every answer is invalid, and under
    # the forfeit treatment its sampled exploitability is far above the choice-mode
    # scores' (which the run must not report under its name).
    over = [
        *TINY,
        "model.mode=text",
        "model.max_new_tokens=4",
        "train.eval_samples=4",
        "train.eval_bootstrap=10",
        "train.eval_opponents=[nash]",
        "train.exact_matches=on",
    ]
    run = setup(build_config(overrides=over), tmp_path)
    m = evaluate(run)
    exact_keys = [k for k in m if "exploitability" in k or "nash_conv" in k or "exact_" in k]
    assert exact_keys and all("_sampled" in k for k in exact_keys)
    assert "eval/exploitability" not in m and "eval/nash/exact_loss_seat0" not in m
    e, low, high = (m[f"eval/exploitability_sampled{s}"] for s in ("", "_ci_low", "_ci_high"))
    assert low <= e <= high and m["eval/exploitability_sampled_k"] == 4
    assert m["eval/invalid_rate_sampled"] > 0.5
    # far above what any choice-mode scores of a tiny model give (about 0.46), and
    # the choice distribution itself is refused for a text policy
    assert e > 0.9
    with pytest.raises(ValueError, match="not what a model.mode=text policy plays"):
        exploitability(run.trainees[0].policy, "kuhn_poker")
    assert {
        "eval/nash/exact_loss_seat0_sampled",
        "eval/nash/exact_loss_seat0_sampled_ci_low",
    } <= set(m)


def test_one_evaluation_asks_each_state_of_a_text_policy_once(tmp_path, monkeypatch):
    # Exploitability and the exact matches against two opponents all read the final
    # policy's sampled distribution: its answers are asked once per state, not per metric.
    from coplay.eval import sampled

    asked = []

    def counting(policy, observations, *, k, seed):
        asked.extend((id(policy), policy.observation_key(o)) for o in observations)
        return sampled.sample_tallies(policy, observations, k=k, seed=seed)

    over = [
        *TINY,
        "model.mode=text",
        "model.max_new_tokens=4",
        "train.eval_samples=2",
        "train.eval_bootstrap=5",
        "train.eval_opponents=[nash,random]",
        "train.exact_matches=on",
    ]
    run = setup(build_config(overrides=over), tmp_path)
    module = sys.modules[evaluate.__module__]
    monkeypatch.setattr(module, "SampledPolicy", _counting_view(counting))
    m = evaluate(run)
    assert {"eval/nash/exact_loss_seat0_sampled", "eval/random/exact_loss_seat0_sampled"} <= set(m)
    assert len(asked) == len(set(asked)) == 12  # Kuhn's 12 information states


def _counting_view(sampler):
    from coplay.eval.sampled import SampledPolicy

    def view(policy, **kw):
        return SampledPolicy(policy, **{**kw, "sampler": sampler})

    return view


@pytest.fixture(scope="module")
def writer(tmp_path_factory) -> str:
    """A saved tiny text-mode Kuhn model: an evaluation opponent or frozen roster member
    whose choice scores are no distribution of its play. (The bias that makes it write
    legal actions is not saved; ``write_actions`` gives it back to the loaded model.)"""
    folder = tmp_path_factory.mktemp("writer") / "writer"
    save_policy(writing_lm(0), folder, game=PlayedGame("kuhn_poker", {}))
    return str(folder)


SAMPLED = ["train.eval_samples=4", "train.eval_bootstrap=5"]


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_a_text_opponent_is_matched_exactly_through_its_sampled_answers(tmp_path, writer, mode):
    # train.exact_matches=on with a writing checkpoint among the opponents died at the
    # first evaluation: its choice scores were asked for.
    over = [*TINY, *SAMPLED, f"train.eval_opponents=[{writer}]", "train.exact_matches=on"]
    if mode == "text":
        over += ["model.mode=text", "model.max_new_tokens=4"]
    run = setup(build_config(overrides=over), tmp_path)
    write_actions(run.eval_opponents[writer])
    m = evaluate(run)
    exact = [k for k in m if "/exact_" in k]
    assert exact and all("_sampled" in k for k in exact)
    for seat in (0, 1):
        row = f"eval/{writer}/exact_return_seat{seat}_sampled"
        assert m[f"{row}_ci_low"] <= m[row] <= m[f"{row}_ci_high"] and m[f"{row}_k"] == 4
    if mode == "choice":  # the point values: the learner, exactly, against the estimate
        cfg = run.cfg
        opp = SampledPolicy(
            run.eval_opponents[writer], k=4, invalid=cfg.game.invalid, seed=cfg.train.seed
        )
        for o in exact_outcomes(final_policy(run), opp, "kuhn_poker"):
            assert m[f"eval/{writer}/exact_loss_seat{o.seat}_sampled"] == pytest.approx(o.loss)
            assert m[f"eval/{writer}/exact_return_seat{o.seat}_sampled"] == pytest.approx(
                o.mean_return
            )


def test_a_roster_reads_a_text_opponent_through_its_sampled_answers(tmp_path, writer):
    # Kuhn with train.exact auto: the exact values against each opponent died here too.
    cfg = build_config(overrides=[*TINY, *SAMPLED, f"train.eval_opponents=[{writer}]"])
    run = setup_roster(validate_roster(TWO_ROLES), cfg, tmp_path)
    write_actions(run.eval_opponents[writer])
    m = evaluate_roster(run)
    for name, seat in (("first", 0), ("second", 1)):
        assert f"eval/{name}/{writer}/exact_value_seat{seat}_sampled" in m
        assert f"eval/{name}/{writer}/exact_value_seat{seat}" not in m
    # the seated profile's numbers read no sampled policy, and say so
    assert "eval/exploitability" in m and "eval/exploitability_sampled" not in m


def test_a_frozen_text_member_makes_the_rosters_exact_numbers_sampled(tmp_path, writer):
    # The seated profile reads the writer's sampled distribution: its exploitability is a
    # sampled estimate and must be named so, though no learner writes.
    roster = {
        "policies": {"me": {"kind": "learner"}, "writer": {"kind": "frozen", "path": writer}},
        "seats": ["me", "writer"],
    }
    cfg = build_config(overrides=[*TINY, *SAMPLED])
    run = setup_roster(validate_roster(roster), cfg, tmp_path)
    write_actions(run.policies["writer"])
    m = evaluate_roster(run)
    assert {"eval/exploitability_sampled", "eval/value_seat1_sampled"} <= set(m)
    assert "eval/exploitability" not in m and "eval/value_seat1" not in m
