"""Episode sources: a plan by policy id plays exactly what the engine plays by object."""

import copy
import pickle
from dataclasses import replace

import numpy as np
import pytest
import torch

from coplay.envs.gameref import GameRef
from coplay.envs.registry import make_env
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import Batch, LocalSource, Plan, decision_versions
from coplay.types import Opening

TTT = GameRef("tic_tac_toe")


@pytest.fixture(scope="module")
def tiny():
    env = make_env("tic_tac_toe")
    env.reset(0)
    text = env.observe(0).text
    corpus = [text, "Action: " + " ".join(f"[{i}]" for i in range(9))] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    return build_tiny_model(TinyModelConfig(vocab_size=320), vocab_size=len(tok), seed=0), tok


def players(tiny, version=0):
    """A fresh learner and a fresh bot, so that two plays draw from equal generators."""
    model, tok = tiny
    me = LMPolicy(model, tok, policy_id="me", seed=4)
    me.version = version
    return me, RandomPolicy(seed=9, policy_id="bot")


def plan(explore=None) -> Plan:
    """Fresh games in both seat orders, then restarted copies with assigned first moves."""
    prefix = (((0, "[4]"),),)
    return Plan(
        seatings=[("me", "bot"), ("bot", "me"), ("me", "me")] * 2 + [("bot", "me")] * 3,
        seeds=[0, 0, 1, 1, 2, 2, 7, 7, 7],
        group_ids=[0, 0, 1, 1, 2, 2, 3, 3, 3],
        prefixes=[()] * 6 + [prefix] * 3,
        openings=[None] * 6 + [Opening(player=1, index=i) for i in range(3)],
        explore=explore or {},
    )


@pytest.mark.parametrize("explore", [{}, {"me": 0.3}])
def test_local_source_plays_what_the_engine_plays_by_object(tiny, explore):
    invalid = InvalidActionConfig(on_fail="penalty", penalty=-1.0)
    p = plan(explore)
    played, bot = players(tiny)
    source = LocalSource(TTT, invalid=invalid, max_turns=7, rng=np.random.default_rng(3))
    batch = source.play(p, {"me": played, "bot": bot})

    me, bot = players(tiny)
    by_id = {"me": me.sampling(explore.get("me", 0.0)), "bot": bot}
    expected = play_episodes(
        lambda: make_env("tic_tac_toe"),
        [[by_id[pid] for pid in seats] for seats in p.seatings],
        p.seeds,
        group_ids=p.group_ids,
        invalid=invalid,
        max_turns=7,
        rng=np.random.default_rng(3),
        prefixes=p.prefixes,
        openings=p.openings,
        streams=p.streams,
    )
    assert list(batch.episodes) == expected  # every token id and log-prob
    # The learner's sampled moves record the mixture they came from (not the assigned
    # openings of the restarted games: a told move is not explored).
    mine = [t for e in expected[:6] for t in e.turns if t.decision.policy_id == "me"]
    explored = [t.decision.behavior_logprobs is not None for t in mine]
    assert mine and (all(explored) if explore else not any(explored))
    assert [e.opening for e in batch.episodes][6:] == list(p.openings[6:])
    # An exploring source plays a view: the policy stays on-policy, and every draw
    # came from the games' streams, so its own generator has not moved.
    assert played.explore == 0.0
    assert torch.equal(played.sampler_state(), players(tiny)[0].sampler_state())


@pytest.mark.parametrize("explore", [{}, {"me": 0.3}])
def test_any_split_into_whole_games_plays_the_same_episodes(tiny, explore):
    # Each seat draws from its game's own stream, so the games a batch holds besides
    # it change nothing: the seam that lets several engines play one plan.
    invalid = InvalidActionConfig(on_fail="penalty", penalty=-1.0)
    p = plan(explore)
    source = LocalSource(TTT, invalid=invalid, max_turns=7)
    me, bot = players(tiny)
    whole = source.play(p, {"me": me, "bot": bot}).episodes
    parts = [[4, 0, 8], [1, 5], [2, 3, 6, 7]]
    played = {}
    for games in parts:
        me, bot = players(tiny)
        batch = source.play(p.subset(games), {"me": me, "bot": bot})
        played |= dict(zip(games, batch.episodes, strict=True))
    split = [played[i] for i in range(len(whole))]
    # Every move, token and return alike; a log-prob may differ in its last bits, as a
    # batched forward pass rounds with the shapes of the batch it is in.
    assert [without_logprobs(e) for e in split] == [without_logprobs(e) for e in whole]
    logps = [d.logprobs for e in whole for t in e.turns for d in (t.decision,)]
    split_logps = [d.logprobs for e in split for t in e.turns for d in (t.decision,)]
    assert split_logps == [pytest.approx(lp, abs=1e-5) for lp in logps]


@pytest.mark.parametrize("waves", [2, 3, 20])
@pytest.mark.parametrize("explore", [{}, {"me": 0.3}])
def test_waves_play_the_same_episodes(tiny, explore, waves):
    # The parts take turns at the model, each game drawing from its own streams: the
    # overlap of a GPU's pass with the host's game steps changes no episode. More waves
    # than games leave one game a part.
    invalid = InvalidActionConfig(on_fail="penalty", penalty=-1.0)
    p = plan(explore)
    me, bot = players(tiny)
    whole = LocalSource(TTT, invalid=invalid, max_turns=7).play(p, {"me": me, "bot": bot})
    me, bot = players(tiny)
    source = LocalSource(TTT, invalid=invalid, max_turns=7, waves=waves)
    split = source.play(p, {"me": me, "bot": bot})
    assert [without_logprobs(e) for e in split.episodes] == [
        without_logprobs(e) for e in whole.episodes
    ]
    logps = [t.decision.logprobs for e in whole.episodes for t in e.turns]
    assert [t.decision.logprobs for e in split.episodes for t in e.turns] == [
        pytest.approx(lp, abs=1e-5) for lp in logps
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_waves_on_a_gpu_play_what_one_batch_plays_on_the_cpu(tiny):
    # On a GPU the parts' passes are queued and read later (``Submits``): the same
    # episodes as one batch on the CPU, up to the devices' rounding.
    model, tok = tiny
    invalid = InvalidActionConfig(on_fail="penalty", penalty=-1.0)
    p = plan({"me": 0.3})
    me, bot = players(tiny)
    cpu = LocalSource(TTT, invalid=invalid, max_turns=7).play(p, {"me": me, "bot": bot})
    me, bot = players((copy.deepcopy(model).to("cuda"), tok))
    gpu = LocalSource(TTT, invalid=invalid, max_turns=7, waves=2).play(p, {"me": me, "bot": bot})
    assert [without_logprobs(e) for e in gpu.episodes] == [
        without_logprobs(e) for e in cpu.episodes
    ]
    logps = [t.decision.logprobs for e in cpu.episodes for t in e.turns]
    assert [t.decision.logprobs for e in gpu.episodes for t in e.turns] == [
        pytest.approx(lp, abs=1e-4) for lp in logps
    ]


def test_waves_without_streams_draw_in_batch_order(tiny):
    # Without streams a policy draws from its own generator; the parts are contiguous
    # and asked in turn, so it meets the games in the order one batch would.
    seatings = [[None, "bot"], ["bot", None], [None, None]] * 3
    played = []
    for waves in (1, 2, 4):
        me, bot = players(tiny)
        by = {None: me, "bot": bot}
        played.append(
            play_episodes(
                lambda: make_env("tic_tac_toe"),
                [[by[s] for s in seats] for seats in seatings],
                range(len(seatings)),
                waves=waves,
            )
        )
    one, *others = [[without_logprobs(e) for e in eps] for eps in played]
    assert all(o == one for o in others)


def without_logprobs(episode):
    """``episode`` with every decision's log-probs blanked, the rest kept."""
    trajs = tuple(
        replace(
            t,
            turns=[
                replace(u, decision=replace(u.decision, logprobs=(), behavior_logprobs=None))
                for u in t.turns
            ],
        )
        for t in episode.trajectories
    )
    return replace(episode, trajectories=trajs)


def test_streams_default_to_one_per_game_and_survive_a_subset():
    p = Plan(seatings=[("a", "b")] * 4, seeds=[3, 3, 4, 4])
    assert len(set(p.streams)) == 4  # one group's games share a seed, not a stream
    assert Plan(seatings=[("a", "b")] * 4, seeds=[3, 3, 4, 4]).streams == p.streams
    sub = p.subset([2, 0])
    assert sub.seeds == (4, 3) and sub.streams == (p.streams[2], p.streams[0])


def test_a_subset_keeps_the_plans_learners():
    p = Plan(seatings=[("a", "b")] * 2, seeds=[1, 2], learners=["a"])
    assert p.learners == ("a",) and p.subset([1]).learners == ("a",)


def test_batch_is_stamped_with_the_version_that_played(tiny):
    me, bot = players(tiny, version=5)
    batch = LocalSource(TTT).play(plan(), {"me": me, "bot": bot})
    assert isinstance(batch, Batch)
    assert batch.versions == {"me": 5, "bot": 0}
    assert batch.seconds > 0
    only_bot = LocalSource(TTT).play(Plan([("bot", "bot")], [0]), {"bot": bot, "me": me})
    assert only_bot.versions == {"bot": 0}  # an id that did not decide is not listed


def test_versions_take_the_newest_of_one_id(tiny):
    me, bot = players(tiny, version=2)
    old = LocalSource(TTT).play(Plan([("me", "bot")], [0]), {"me": me, "bot": bot})
    me.version = 3
    new = LocalSource(TTT).play(Plan([("me", "bot")], [1]), {"me": me, "bot": bot})
    assert decision_versions([*old.episodes, *new.episodes]) == {"me": 3, "bot": 0}


def test_plan_defaults_are_fresh_games_grouped_by_seed():
    p = Plan(seatings=[["a", "b"], ["b", "a"]], seeds=[4, 5])
    assert p.seatings == (("a", "b"), ("b", "a"))
    assert p.group_ids == (4, 5) and p.prefixes == ((), ()) and p.openings == (None, None)
    assert p.explore == {} and p.policy_ids == ("a", "b")
    assert pickle.loads(pickle.dumps(p)) == p


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"seatings": [("a", "b")], "seeds": [0, 1]},
            r"a plan of 2 games \(seeds\) has 1 seatings",
        ),
        ({"group_ids": [0]}, r"a plan of 2 games \(seeds\) has 1 group_ids"),
        ({"prefixes": [()] * 3}, r"a plan of 2 games \(seeds\) has 3 prefixes"),
        ({"openings": [None]}, r"a plan of 2 games \(seeds\) has 1 openings"),
        ({"seatings": [("a", "b"), ("b", 3)]}, r"seats policy ids \(str\), but game 1 seats"),
        ({"explore": {"a": 1.0}}, r"plan.explore\['a'\] must be in \[0, 1\), got 1.0"),
        ({"explore": {"a": -0.1}}, r"plan.explore\['a'\] must be in \[0, 1\)"),
    ],
)
def test_a_bad_plan_is_one_clear_error(fields, message):
    base = {"seatings": [("a", "b"), ("b", "a")], "seeds": [0, 1]}
    with pytest.raises(ValueError, match=message) as err:
        Plan(**(base | fields))
    assert "\n" not in str(err.value)


def test_policies_must_cover_the_plan_under_their_own_ids():
    a, b = RandomPolicy(seed=0, policy_id="a"), RandomPolicy(seed=1, policy_id="b")
    source = LocalSource(GameRef("kuhn_poker"))
    p = Plan(seatings=[("a", "b")], seeds=[0])
    with pytest.raises(ValueError, match="the plan names policy 'b', but the policies are 'a'"):
        source.play(p, {"a": a})
    # Two ids on one object (or a policy filed under another id) would mix their
    # decisions under one key: refused.
    with pytest.raises(ValueError, match=r"policies\['b'\] plays as 'a'; key each policy"):
        source.play(p, {"a": a, "b": a})
    explore_missing = Plan(seatings=[("a", "b")], seeds=[0], explore={"c": 0.1})
    with pytest.raises(ValueError, match="the plan names policy 'c'"):
        source.play(explore_missing, {"a": a, "b": b})
    explore_bot = Plan(seatings=[("a", "b")], seeds=[0], explore={"a": 0.1})
    with pytest.raises(ValueError, match="plan.explore names 'a', but that policy cannot explore"):
        source.play(explore_bot, {"a": a, "b": b})
    (ep,) = source.play(
        Plan(seatings=[("a", "b")], seeds=[0], explore={"a": 0.0}), {"a": a, "b": b}
    ).episodes
    assert ep.seats == ("a", "b")  # a share of 0 asks nothing of the policy


def test_a_source_and_its_plan_cross_a_process_boundary_as_data():
    p = pickle.loads(pickle.dumps(plan({"me": 0.1})))
    assert p == plan({"me": 0.1})
    ref = pickle.loads(pickle.dumps(TTT))
    bot = RandomPolicy(seed=2, policy_id="bot")
    mine = LocalSource(TTT).play(Plan([("bot", "bot")] * 4, range(4)), {"bot": bot})
    bot = RandomPolicy(seed=2, policy_id="bot")
    theirs = LocalSource(ref).play(Plan([("bot", "bot")] * 4, range(4)), {"bot": bot})
    assert mine.episodes == theirs.episodes
