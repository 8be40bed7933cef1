"""Sampled evaluation of text policies: the treatment of invalid answers, the bootstrap,
and agreement with exact evaluation on a choice policy wrapped to be sampled."""

import numpy as np
import pytest

from coplay.envs.registry import make_env
from coplay.eval.costly import FORFEIT, costly_positions
from coplay.eval.exact import exploitability
from coplay.eval.exact_match import exact_outcomes
from coplay.eval.sampled import (
    SampledPolicy,
    bootstrap,
    outcomes_metric,
    per_call,
    sample_tallies,
    sampled_exploitability,
    treat,
)
from coplay.models.build import ModelConfig, build_policy
from coplay.policies.scripted import NashPolicy, RandomPolicy
from coplay.rollout.invalid import InvalidActionConfig
from coplay.train.trainer import game_text
from coplay.types import Decision
from tests.eval.writers import kuhn_observations, writing_lm

LEGAL = ["[Pass]", "[Bet]"]


@pytest.fixture(scope="module")
def choice_policy():
    text = game_text(lambda: make_env("kuhn_poker"), episodes=50)
    cfg = ModelConfig.model_validate({"tiny": {"hidden_size": 32, "intermediate_size": 64}})
    return build_policy(cfg, corpus=text.texts, actions=text.actions, seed=1)


class Scripted:
    """Answers from a fixed list, cycling: ``None`` is an invalid answer."""

    policy_id = "scripted-text"
    version = 0

    def __init__(self, answers):
        self.answers, self.i = answers, 0

    def act(self, observations):
        out = []
        for _ in observations:
            a = self.answers[self.i % len(self.answers)]
            self.i += 1
            out.append(Decision(text=str(a), action=a, policy_id=self.policy_id))
        return out


@pytest.mark.parametrize(
    ("cfg", "counts", "invalid", "expected"),
    [
        (InvalidActionConfig(), (3, 1), 0, (0.75, 0.25)),
        (InvalidActionConfig(), (2, 1), 1, (0.5, 0.25)),  # a quarter forfeits
        # One retry: fail 1/16; the rest in proportion 2:1.
        (InvalidActionConfig(retries=1), (2, 1), 1, (0.625, 0.3125)),
        (InvalidActionConfig(on_fail="penalty"), (2, 1), 1, (0.625, 0.375)),
        (InvalidActionConfig(on_fail="penalty"), (0, 0), 4, (0.5, 0.5)),
    ],
)
def test_treatment_of_invalid_answers(cfg, counts, invalid, expected):
    probs = treat(counts, invalid, LEGAL, cfg)
    assert tuple(probs.values()) == pytest.approx(expected)


def test_tallies_count_the_answers_and_are_asked_once():
    policy = Scripted(["[Bet]", None, "[Pass]", "[Bet]"])
    sampled = SampledPolicy(policy, k=4)
    obs = make_env("kuhn_poker")
    obs.reset(0)
    o = obs.observe(0)
    (t,) = sampled.tally([o])
    assert (t.counts, t.invalid, t.k) == ((1, 2), 1, 4)
    assert sampled.action_probs([o]) == [{"[Pass]": 0.25, "[Bet]": 0.5}]
    assert sampled.invalid_rate() == 0.25
    sampled.tally([o])
    assert policy.i == 4  # asked once


def test_sampled_agrees_with_exact_on_a_choice_policy(choice_policy):
    exact = exploitability(choice_policy, "kuhn_poker")
    est, invalid = sampled_exploitability(choice_policy, "kuhn_poker", k=256, replicates=200)
    e = est["exploitability"]
    assert invalid == 0.0
    assert (e.k, e.replicates) == (256, 200)
    assert e.ci_low <= exact.exploitability <= e.ci_high
    assert e.ci_high - e.ci_low < 0.1
    assert abs(e.value - exact.exploitability) < 0.05


def test_sampled_outcomes_agree_with_exact_ones(choice_policy):
    nash = NashPolicy("kuhn_poker")
    exact = exact_outcomes(choice_policy, nash, "kuhn_poker")
    sampled = SampledPolicy(choice_policy, k=256)
    est = bootstrap(outcomes_metric(nash, "kuhn_poker", None), sampled, replicates=100)
    for o in exact:
        e = est[f"exact_return_seat{o.seat}"]
        assert e.ci_low <= o.mean_return <= e.ci_high


def test_forfeits_are_scored_as_the_game_scores_them():
    # Always invalid under the forfeit treatment: every game is lost at -2 (Kuhn's minimum).
    never = SampledPolicy(Scripted([None]), k=3)
    for o in exact_outcomes(never, RandomPolicy(), "kuhn_poker"):
        assert (o.loss, o.mean_return) == pytest.approx((1.0, -2.0))
    est, invalid = sampled_exploitability(Scripted([None]), "kuhn_poker", k=3, replicates=5)
    assert invalid == 1.0
    assert est["nash_conv"].value == pytest.approx(4.0)
    # Under the penalty treatment the same answers play uniformly: uniform Kuhn's 11/12.
    penalty = InvalidActionConfig(on_fail="penalty")
    est, _ = sampled_exploitability(
        Scripted([None]), "kuhn_poker", k=3, invalid=penalty, replicates=5
    )
    assert est["nash_conv"].value == pytest.approx(11 / 12)


def test_costly_positions_show_a_forfeit_as_what_is_played():
    # Half the answers are invalid: the forfeit is the most likely answer at some states.
    sampled = SampledPolicy(Scripted([None, None, "[Pass]"]), k=3)
    found = costly_positions(sampled, RandomPolicy(), "kuhn_poker", top=20)
    positions = [c for seat in found for c in seat]
    assert any(c.played == FORFEIT for c in positions)
    assert all(c.best != FORFEIT for c in positions)


def test_a_choice_states_answers_depend_on_the_state_and_seed_only(choice_policy):
    obs = kuhn_observations()
    every = sample_tallies(choice_policy, obs, k=8, seed=3)
    assert len(set(every)) > 4  # the answers differ from state to state
    # Asked in another order, or alone, each state gets the very same answers...
    assert sample_tallies(choice_policy, obs[::-1], k=8, seed=3) == every[::-1]
    assert sample_tallies(choice_policy, obs[5:6], k=8, seed=3) == every[5:6]
    # ...and the policy's own generator plays no part.
    choice_policy.generator.manual_seed(99)
    assert sample_tallies(choice_policy, obs, k=8, seed=3) == every
    assert sample_tallies(choice_policy, obs, k=8, seed=4) != every


def test_a_text_lms_answers_are_asked_in_chunks_fixed_by_the_list():
    lm, obs = writing_lm(), kuhn_observations()
    assert per_call(128) == 4  # 12 states: 3 calls of 512 rows
    every = SampledPolicy(lm, k=128, seed=3).tally(obs)
    assert len(set(every)) > 4
    assert sum(sum(t.counts) for t in every) > 12 * 128 // 4  # many answers are valid
    # Split at chunk boundaries (as workers split it), the list is asked the same calls.
    split = sample_tallies(lm, obs[:4], k=128, seed=3) + sample_tallies(lm, obs[4:], k=128, seed=3)
    assert split == every
    lm.generator.manual_seed(99)  # the policy's own generator plays no part
    assert sample_tallies(lm, obs, k=128, seed=3) == every
    assert sample_tallies(lm, obs, k=128, seed=4) != every


def test_answers_are_asked_through_the_sampler():
    asked = []

    def sampler(policy, observations, *, k, seed):
        asked.append((len(observations), k, seed))
        return sample_tallies(policy, observations, k=k, seed=seed)

    sampled = SampledPolicy(Scripted(["[Bet]"]), k=2, seed=7, sampler=sampler)
    obs = kuhn_observations()
    sampled.tally(obs[:3])
    sampled.tally(obs[:5])  # only the two not asked yet
    assert asked == [(3, 2, 7), (2, 2, 7)]
    assert sampled.replicate(np.random.default_rng(0)).sampler is sampler


def test_outcomes_against_an_estimate_are_the_estimates_seen_from_the_other_seat():
    # Two-player zero-sum Kuhn: nash's outcome in one seat against the estimate is the
    # estimate's outcome in the other seat against nash, turned around (a forfeit of
    # the estimate is a win of nash's).
    from coplay.eval.sampled import outcomes_against_metric

    estimate = SampledPolicy(Scripted(["[Bet]", None, "[Pass]"]), k=3)
    nash = NashPolicy("kuhn_poker")
    theirs = outcomes_metric(nash, "kuhn_poker", None)(estimate)
    mine = outcomes_against_metric(nash, "kuhn_poker", None)(estimate)
    for seat, other in ((0, 1), (1, 0)):
        assert mine[f"exact_return_seat{seat}"] == pytest.approx(
            -theirs[f"exact_return_seat{other}"]
        )
        assert mine[f"exact_win_seat{seat}"] == pytest.approx(theirs[f"exact_loss_seat{other}"])
        assert mine[f"exact_loss_seat{seat}"] == pytest.approx(theirs[f"exact_win_seat{other}"])
    assert any(theirs[f"exact_loss_seat{s}"] > 0 for s in (0, 1))  # the case is not trivial


def test_outcomes_against_an_estimate_ask_the_fixed_policy_once_per_state():
    # Every bootstrap replicate walks the tree again; the fixed side's answers are kept.
    from coplay.eval.sampled import outcomes_against_metric

    asked = []

    class Counting(NashPolicy):
        def action_probs(self, observations):
            asked.extend(observations)
            return super().action_probs(observations)

    estimate = SampledPolicy(Scripted(["[Bet]", "[Pass]"]), k=2)
    metric = outcomes_against_metric(Counting("kuhn_poker"), "kuhn_poker", None)
    est = bootstrap(metric, estimate, replicates=5)
    assert len(asked) == len(set(asked)) <= 12  # Kuhn's 12 information states
    e = est["exact_return_seat0"]
    assert e.ci_low <= e.value <= e.ci_high and e.replicates == 5


def test_a_bootstrap_replicate_resamples_the_invalid_answers_too():
    from coplay.eval.sampled import Tally

    t = Tally(tuple(LEGAL), (2, 1), 1)
    # the reference: K = 4 answers drawn with replacement, the invalid one among them
    ref = np.random.default_rng(5)
    want = [ref.multinomial(4, [0.5, 0.25, 0.25]).tolist() for _ in range(200)]
    rng = np.random.default_rng(5)
    got = [t.resample(rng) for _ in range(200)]
    assert [[*r.counts, r.invalid] for r in got] == want
    assert len({r.invalid for r in got}) > 1
    assert all(r.k == 4 for r in got)


def test_no_answers_per_state_is_refused():
    with pytest.raises(ValueError, match="k >= 1"):
        SampledPolicy(Scripted(["[Bet]"]), k=0)


def test_bootstrap_interval_is_the_percentiles_of_the_replicates():
    # The metric counts its calls: the full sample is 0, the replicates 1 .. 100, whose
    # 2.5th and 97.5th percentiles (linear interpolation) are 3.475 and 97.525.
    calls = iter(range(1000))
    sampled = SampledPolicy(Scripted(["[Bet]"]), k=2)
    est = bootstrap(lambda _: {"x": float(next(calls))}, sampled, replicates=100)["x"]
    assert (est.value, est.ci_low, est.ci_high) == pytest.approx((0.0, 3.475, 97.525))
    assert (est.k, est.replicates) == (2, 100)
    # at another level: the 5th and 95th percentiles of 102 .. 201
    est = bootstrap(lambda _: {"x": float(next(calls))}, sampled, replicates=100, level=0.9)["x"]
    assert (est.ci_low, est.ci_high) == pytest.approx((106.95, 196.05))


def test_bootstrap_without_replicates_is_the_point_value():
    sampled = SampledPolicy(Scripted(["[Bet]"]), k=2)
    est = bootstrap(lambda _: {"x": 0.25}, sampled, replicates=0)["x"]
    assert (est.value, est.ci_low, est.ci_high, est.replicates) == (0.25, 0.25, 0.25, 0)


def test_more_answers_than_a_batch_are_asked_one_state_a_call():
    assert [per_call(k) for k in (1, 256, 512, 513, 4096)] == [512, 2, 1, 1, 1]


def test_rows_above_one_are_no_forfeit_and_are_refused():
    # A row short of 1 leaves a forfeit's share out; one over 1 was evaluated as if
    # it were a policy (NashConv 2.01 for rows of 0.9 + 0.9).
    from coplay.eval.sampled import forfeiting_exploitability

    class Over(RandomPolicy):
        def action_probs(self, observations):
            return [dict.fromkeys(o.legal_actions, 0.9) for o in observations]

    with pytest.raises(ValueError, match=r"sum to 1.800000 \(not 1\)"):
        forfeiting_exploitability(Over(), "kuhn_poker")
