"""Choice mode: exact constrained distributions, forced moves, the exploration
mixture, counterfactual prompts."""

import copy
import math
from dataclasses import replace

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.policies.lm import LMPolicy
from coplay.policies.lm_choice import explore_mixture, sample_rows
from coplay.rollout.engine import play_episodes
from coplay.types import Observation
from tests.policies.test_lm import kuhn_observations, message_turns


def test_choice_logprobs_recomputed_by_learner_match(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice", seed=1)
    decisions = policy.act(kuhn_observations())
    scored = policy.scorer.score(decisions)
    sampled = torch.tensor([d.logprobs[0] for d in decisions])
    assert scored.logp.shape == (len(decisions), 1)
    assert torch.allclose(scored.logp[:, 0], sampled, atol=1e-5)


def test_choice_scores_do_not_depend_on_batch_composition(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice")
    obs = kuhn_observations(6)
    together = policy.action_probs(obs)
    alone = [policy.action_probs([o])[0] for o in obs]
    for a, b in zip(together, alone, strict=True):
        for k in a:
            assert a[k] == pytest.approx(b[k], abs=1e-6)


def test_action_probs_is_a_distribution_over_legal_actions(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    for obs, probs in zip(
        kuhn_observations(), policy.action_probs(kuhn_observations()), strict=True
    ):
        assert tuple(probs) == obs.legal_actions
        assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-6)


def test_sampled_frequencies_follow_action_probs(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=3)
    obs = kuhn_observations(1)[0]
    probs = policy.action_probs([obs])[0]
    picks = [d.action for d in policy.act([obs] * 4000)]
    for action, p in probs.items():
        assert picks.count(action) / len(picks) == pytest.approx(p, abs=0.03)


def test_explore_mixture_floors_every_choice():
    logp = torch.log(torch.tensor([0.97, 0.02, 0.01]))
    mix = explore_mixture(logp, 0.3).exp()
    assert mix.sum().item() == pytest.approx(1.0)
    assert mix.tolist() == pytest.approx([0.7 * 0.97 + 0.1, 0.7 * 0.02 + 0.1, 0.7 * 0.01 + 0.1])
    assert torch.equal(explore_mixture(logp, 0.0), logp)


def test_a_forced_move_is_scored_as_the_policys_own(tiny):
    # The assigned move (index modulo the legal count) carries the policy's log-prob
    # and no behaviour log-prob, even from an exploring view.
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=3)
    obs = kuhn_observations(1)[0]
    probs = policy.action_probs([obs])[0]
    k = len(obs.legal_actions)
    decisions = policy.sampling(0.5).act_forced([obs] * 3, [0, k + 1, 2 * k - 1])
    expected = [obs.legal_actions[0], obs.legal_actions[1], obs.legal_actions[k - 1]]
    assert [d.action for d in decisions] == expected
    for d in decisions:
        assert d.logprobs[0] == pytest.approx(math.log(probs[d.action]), abs=1e-5)
        assert d.behavior_logprobs is None
        assert d.choice_ids[d.choice_index] == d.response_ids


def test_a_forced_move_needs_listed_actions(tiny):
    model, tok = tiny
    obs = kuhn_observations(1)[0]
    with pytest.raises(ValueError, match="needs model.mode=choice"):
        LMPolicy(model, tok, mode="text").act_forced([obs], [0])
    talk = message_turns(1)
    with pytest.raises(ValueError, match="has none listed here"):
        LMPolicy(model, tok).act_forced(talk, [0])
    with pytest.raises(ValueError, match="1 observations but 2 indices"):
        LMPolicy(model, tok).act_forced([obs], [0, 1])


def test_choice_mode_refuses_an_empty_legal_list(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok)
    obs = Observation(game="x", player=0, text="nothing to do", legal_actions=())
    with pytest.raises(ValueError, match="a choice needs at least one legal action"):
        policy.act([obs])


def test_text_mode_refuses_exact_action_probs(tiny):
    model, tok = tiny
    with pytest.raises(ValueError, match="not what a model.mode=text policy plays"):
        LMPolicy(model, tok, mode="text").action_probs(kuhn_observations(1))


def test_engine_episodes_keep_sampled_tokens(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, seed=4)
    eps = play_episodes(lambda: make_env("kuhn_poker"), [[policy, policy]] * 8, list(range(8)))
    decisions = [t.decision for e in eps for t in e.turns]
    scored = policy.scorer.score(decisions)
    assert torch.allclose(
        scored.logp[:, 0], torch.tensor([d.logprobs[0] for d in decisions]), atol=1e-5
    )
    for d in decisions:
        assert d.response_ids == d.choice_ids[d.choice_index]


def test_folding_the_common_prefix_keeps_the_distribution(tiny):
    import torch.nn.functional as F

    from coplay.policies.scoring import sequence_logps

    model, tok = tiny
    policy = LMPolicy(model, tok)
    obs = kuhn_observations(3)
    folded = policy.action_probs(obs)
    with torch.no_grad():
        for o, probs in zip(obs, folded, strict=True):
            pairs = [(policy.prompt_ids(o), policy.action_ids(a)) for a in o.legal_actions]
            full = F.softmax(sequence_logps(model, pairs, temperature=1.0), dim=0)
            assert torch.allclose(full, torch.tensor(list(probs.values())), atol=1e-5)


def test_counterfactual_observations_become_prompts_folded_like_the_actual_one(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    obs = kuhn_observations(1)[0]
    other = obs.text + " Think first."
    (dec,) = policy.act([replace(obs, counterfactuals=(other, obs.text))])
    assert dec.counterfactual_prompt_ids[1] == dec.prompt_ids
    (alt,) = policy.act([replace(obs, text=other)])
    assert dec.counterfactual_prompt_ids[0] == alt.prompt_ids != dec.prompt_ids
    (plain,) = policy.act([obs])
    assert plain.counterfactual_prompt_ids == ()


def test_counterfactuals_with_a_chat_form_are_refused(tiny):
    model, tok = tiny
    policy = LMPolicy(model, tok, mode="choice", seed=0)
    obs = replace(kuhn_observations(1)[0], counterfactuals=("x",), messages=(("user", "x"),))
    with pytest.raises(ValueError, match="chat form must be None"):
        policy.act([obs])


def _diverged(model):
    """A copy of ``model`` whose weights hold a NaN, as after a diverged update."""
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.model.norm.weight[0] = math.nan
    return broken


def test_nan_scores_are_one_error_line_not_a_recorded_choice(tiny):
    # Sampled, NaN scores would pick the first action and record a NaN log-prob.
    model, tok = tiny
    policy = LMPolicy(_diverged(model), tok)
    obs = kuhn_observations(3)
    match = rf"player {obs[0].player} in 'kuhn_poker' are NaN.*not finite"
    for act in (
        policy.act,
        lambda o: policy.sampling(0.2).act(o),
        lambda o: policy.act_forced(o, [0] * len(o)),
        policy.action_probs,
    ):
        with pytest.raises(ValueError, match=match):
            act(obs)


def test_action_probs_of_no_observations_is_an_empty_list(tiny):
    model, tok = tiny
    assert LMPolicy(model, tok).action_probs([]) == []


def test_rows_drawn_together_are_multinomial_draws_row_by_row():
    sizes = [2, 3, 1, 4, 2] * 8
    gen = torch.Generator().manual_seed(0)
    probs = torch.cat([torch.rand(k, generator=gen).softmax(0) for k in sizes])
    together = sample_rows(probs, sizes, torch.Generator().manual_seed(5))
    one, apart = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    rows = probs.split(sizes)
    assert together == [torch.multinomial(r, 1, generator=one).item() for r in rows]
    assert together == [sample_rows(r, [len(r)], apart)[0] for r in rows]
    assert len(set(together)) > 1
