"""Behaviour log-probs from an engine: the learner's recomputation becomes pi_old, the
engine's the behaviour, and the gap is measured; with vLLM (marked vllm) it is bounded,
and whole runs (one learner, and a roster of two with an engine each) log it."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from coplay.algos.losses.compose import LossConfig
from coplay.algos.losses.regularizers import EntropyConfig
from coplay.cli import main
from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.train.config import OptimConfig
from coplay.train.learner import Sample, make_learner, recall
from coplay.train.learner_update import update
from coplay.train.mismatch import measure, rebase_on_learner
from coplay.types import Observation

HEAD_32 = TinyModelConfig(vocab_size=320, hidden_size=64, num_heads=2)
TOLERANCE = 2e-4
"""Largest per-token |learner - vLLM| log-prob on this float32 model (measured: ~1e-5)."""


def text_policy(backend: str = "hf") -> LMPolicy:
    env = make_env("kuhn_poker")
    corpus = [env.observe(env.players_to_act()[0]).text, "Action: [Pass] [Bet] [Call] [Fold]"] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0).eval()
    return LMPolicy(model, tok, mode="text", backend=backend, temperature=0.8, max_new_tokens=8)


def samples_of(policy: LMPolicy, n: int = 6) -> list[Sample]:
    cards = ("J", "Q", "K")
    obs = [
        Observation(game="kuhn_poker", player=0, text=f"Your card: {cards[i % 3]}")
        for i in range(n)
    ]
    return [Sample(d, advantage=1.0 if i % 2 else -1.0) for i, d in enumerate(policy.act(obs))]


def _shift(logprobs):
    return tuple(x + (0.05 if k % 3 else -0.05) for k, x in enumerate(logprobs))


def test_measure_reports_the_gap_and_the_ratios_spread():
    m = measure([(0.0, -1.0), (-2.0,)], [(0.1, -1.1), (-2.3,)])
    assert m.tokens == 3
    assert m.mean_abs == pytest.approx(0.5 / 3) and m.max_abs == pytest.approx(0.3)
    ratios = np.exp([-0.1, 0.1, 0.3])
    assert m.ratio_std == pytest.approx(ratios.std())
    assert measure([(-1.0,)], [(-1.0,)]).ratio_std == 0.0


def test_an_inexact_engines_log_probs_become_the_behaviour_ones():
    policy = text_policy()
    learner = make_learner(policy, LossConfig(), OptimConfig(lr=1e-3, minibatch_size=8))
    samples = samples_of(policy)
    # An engine that records each token's log-prob 0.05 too high (one in three too low).
    shifted = [
        Sample(replace(s.decision, logprobs=_shift(s.decision.logprobs)), s.advantage)
        for s in samples
    ]
    assert rebase_on_learner(learner, shifted)[1] is None  # the HF backend is exact
    policy.backend.exact_logprobs = False
    rebased, gap = rebase_on_learner(learner, shifted)
    assert gap.tokens == sum(len(s.decision.logprobs) for s in samples) > 6
    assert gap.mean_abs == pytest.approx(0.05, abs=1e-5)
    assert gap.max_abs == pytest.approx(0.05, abs=1e-5)
    assert gap.ratio_std > 0.04
    for original, engine, new in zip(samples, shifted, rebased, strict=True):
        assert new.decision.behavior_logprobs == engine.decision.logprobs
        assert np.allclose(new.decision.logprobs, original.decision.logprobs, atol=1e-5)
    metrics = update(learner, shifted, np.random.default_rng(0))
    assert metrics["rollout/logp_mismatch_mean"] == pytest.approx(0.05, abs=1e-5)
    assert "perf/weight_sync_s" in metrics


def test_only_fresh_engine_written_text_is_rebased():
    # A replayed target, a choice (scored by the learner's model on every backend) and a
    # decision that already has its behaviour log-probs (exploration's mixture) keep
    # theirs; with none of the engine's own decisions left there is no gap to report.
    policy = text_policy()
    learner = make_learner(policy, LossConfig(), OptimConfig(lr=1e-3, minibatch_size=8))
    policy.backend.exact_logprobs = False
    fresh, replayed, choice, explored = samples_of(policy, n=4)
    kept = [
        replace(replayed, replay=True),
        replace(choice, decision=replace(choice.decision, choice_ids=((5,), (6,)), choice_index=0)),
        replace(explored, decision=replace(explored.decision, behavior_logprobs=(-9.0,))),
    ]
    rebased, gap = rebase_on_learner(learner, [fresh, *kept])
    assert rebased[1:] == kept
    assert rebased[0].decision.behavior_logprobs == fresh.decision.logprobs
    assert gap.tokens == len(fresh.decision.logprobs)
    assert rebase_on_learner(learner, kept) == (kept, None)


def test_the_action_entropy_bonus_survives_the_rebase():
    """The terms remember this update's samples at ``recall``; the rebase then hands the
    update copies of them. The bonus must reach the copies: an inexact engine's update
    moves the weights as the exact backend's does (it once silently got no bonus)."""
    moved = []
    for exact in (True, False):
        policy = text_policy()
        loss = LossConfig(entropy=EntropyConfig(coef=1.0, over="actions"))
        learner = make_learner(policy, loss, OptimConfig(lr=1e-2, minibatch_size=16))
        policy.backend.exact_logprobs = exact
        # Advantages 0: only the bonus can move the weights. Three states, four answers
        # each, one of them a different action (the untrained model's own rarely parse).
        samples = [
            replace(s, advantage=0.0, decision=replace(s.decision, action=_action(i)))
            for i, s in enumerate(samples_of(policy, n=12))
        ]
        before = [p.detach().clone() for p in policy.model.parameters()]
        recall(learner, samples)
        update(learner, samples, np.random.default_rng(0))
        moved.append(
            [p.detach() - b for p, b in zip(policy.model.parameters(), before, strict=True)]
        )
    exact_step, engine_step = (torch.cat([d.flatten() for d in step]) for step in moved)
    assert exact_step.abs().max() > 1e-3  # the bonus pushes
    # Adam's first step is about lr * sign(grad), so a gradient within float error of 0
    # may flip; the two steps agree in direction, not bit for bit.
    assert torch.cosine_similarity(exact_step, engine_step, dim=0) > 0.99


def _action(i: int) -> str:
    return "[Bet]" if i % 4 == 3 else "[Pass]"


@pytest.mark.vllm
def test_vllms_log_probs_are_within_tolerance_of_the_learners():
    pytest.importorskip("vllm")
    policy = text_policy("vllm")
    learner = make_learner(
        policy, LossConfig(), OptimConfig(lr=1e-2, minibatch_size=8), tis_cap=2.0
    )
    samples = samples_of(policy, n=16)
    rebased, gap = rebase_on_learner(learner, samples)
    assert gap.tokens > 16 and gap.max_abs < TOLERANCE and gap.ratio_std < TOLERANCE
    assert all(s.decision.behavior_logprobs is not None for s in rebased)
    metrics = update(learner, samples, np.random.default_rng(0))
    assert metrics["rollout/logp_mismatch_max"] < TOLERANCE
    assert metrics["loss/tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    # The update reached the engine: its answers are the new weights' own.
    assert policy.version == 1 and metrics["perf/weight_sync_s"] > 0
    _, after = rebase_on_learner(learner, samples_of(policy, n=8))
    assert after.max_abs < TOLERANCE and not math.isnan(after.mean_abs)


VLLM_RUN = [
    "model.mode=text",
    "model.backend=vllm",
    "model.max_new_tokens=12",
    "model.tiny.hidden_size=64",
    "model.tiny.num_heads=2",
    "model.tiny.intermediate_size=128",
    "model.engine.kv_cache_gb=0.1",
    "model.text.tis_cap=2.0",
    # An untrained model rarely writes a legal move: a random one is played for it, so
    # the game goes on and the second seat writes too.
    "game.invalid.on_fail=penalty",
    "rollout.games_per_iter=8",
    "train.iterations=2",
    "train.eval_every=1",
    "train.eval_episodes=8",
    "train.eval_opponents=[]",
    "train.transcripts=8",
]


def _logged(out) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def _stamps(out) -> set[tuple[int, str, int]]:
    """(iteration, policy, version) of every written turn in the run's transcripts."""
    games = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    return {
        (g["iteration"], t["policy_id"], t["policy_version"]) for g in games for t in g["turns"]
    }


@pytest.mark.vllm
def test_a_run_through_vllm_logs_the_gap_and_stamps_each_turn_with_its_version(tmp_path):
    pytest.importorskip("vllm")
    out = tmp_path / "run"
    extra = ["loss.entropy.coef=0.1", "loss.entropy.over=actions"]
    assert main(["train", "--quiet", "--out", str(out), *VLLM_RUN, *extra]) == 0
    rows = [r for r in _logged(out) if "loss/total" in r]
    assert len(rows) == 2
    for r in rows:
        assert 0 < r["rollout/logp_mismatch_max"] < TOLERANCE
        assert r["perf/weight_sync_s"] > 0 and "loss/action_entropy" in r
        assert 0 < r["loss/tis_weight_mean"] <= 2.0  # the engine's answers reweighted
    # Iteration i's games were written by the weights after i - 1 updates.
    assert {(it, v) for it, _, v in _stamps(out)} == {(1, 0), (2, 1)}


@pytest.mark.vllm
def test_each_roster_learner_on_vllm_runs_its_own_engine(tmp_path):
    pytest.importorskip("vllm")
    roster = tmp_path / "roster.yaml"
    roster.write_text(
        "policies: {first: {kind: learner}, second: {kind: learner}}\nseats: [first, second]\n"
    )
    out = tmp_path / "run"
    argv = ["train", "--quiet", "--roster", str(roster), "--out", str(out), *VLLM_RUN]
    assert main(argv) == 0
    last = _logged(out)[-1]
    for name in ("first", "second"):
        assert 0 < last[f"rollout/{name}/logp_mismatch_max"] < TOLERANCE
        assert last[f"perf/{name}/weight_sync_s"] > 0
    assert {(p, v) for it, p, v in _stamps(out) if it == 2} == {("first", 1), ("second", 1)}
