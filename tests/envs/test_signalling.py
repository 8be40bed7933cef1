"""Signalling: seeded scenes, shared payoff, no leak of the target, a perfect code."""

import re
from collections import Counter

import pytest

from coplay.envs.registry import make_env
from coplay.envs.signalling import (
    NUM_ITEMS,
    SignallingEnv,
    draw_scene,
    episode_metrics,
    item_name,
)
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.types import Decision
from tests.envs.players import Replay

NAMES = [item_name(i) for i in range(NUM_ITEMS)]


def test_scenes_are_seeded_and_well_formed():
    assert draw_scene(11) == draw_scene(11)
    assert len({draw_scene(s) for s in range(50)}) == 50
    for s in range(200):
        scene = draw_scene(s, candidates=5)
        assert len(set(scene.receiver_view)) == 5
        assert sorted(scene.receiver_view) == sorted((scene.target, *scene.others))


def test_target_position_in_the_receivers_view_is_uniform():
    positions = Counter(draw_scene(s).receiver_view.index(draw_scene(s).target) for s in range(800))
    assert sorted(positions) == [0, 1, 2, 3]
    assert all(150 <= n <= 250 for n in positions.values())  # 200 expected, sd ~12


def test_both_players_score_one_exactly_when_the_target_is_picked():
    for hit in (True, False):
        env = SignallingEnv()
        env.reset(5)
        env.step({0: "[Say C]"})
        item = env.scene.target if hit else env.scene.others[1]
        env.step({1: f"I pick [pick {item_name(item)}]"})
        assert env.is_terminal() and env.returns() == ([1.0, 1.0] if hit else [0.0, 0.0])


def test_receiver_never_sees_which_candidate_is_the_target():
    env = SignallingEnv(talk=False)
    env.reset(2)
    seen = env.observe(1).text
    for other in env.scene.others:
        env.scene = env.scene.__class__(
            target=other,
            others=tuple(sorted({*env.scene.others, env.scene.target} - {other})),
            receiver_view=env.scene.receiver_view,
        )
        assert env.observe(1).text == seen
    assert "target" not in seen.split("\n")[1].lower()


def test_symbol_message_reaches_the_receiver():
    env = SignallingEnv(symbols=3)
    env.reset(0)
    assert env.players_to_act() == [0]
    assert env.observe(0).legal_actions == ("[Say A]", "[Say B]", "[Say C]")
    assert f"Target: {item_name(env.scene.target)}." in env.observe(0).text
    env.step({0: "I say [say b]"})
    obs = env.observe(1)
    assert 'The sender says: "B"' in obs.text
    view = [item_name(c) for c in env.scene.receiver_view]
    assert f"Candidates: {', '.join(view)}." in obs.text
    assert obs.legal_actions == tuple(f"[Pick {name}]" for name in view)


def test_receiver_sees_its_text_under_every_message_it_could_have_received():
    env = SignallingEnv(symbols=3)
    env.reset(4)
    assert env.observe(0).counterfactuals == ()  # the sender received nothing
    env.step({0: "[Say B]"})
    obs = env.observe(1)
    assert len(obs.counterfactuals) == 3
    assert obs.counterfactuals[1] == obs.text
    for symbol, text in zip("ABC", obs.counterfactuals, strict=True):
        assert text == obs.text.replace('says: "B"', f'says: "{symbol}"')


def test_free_messages_have_no_counterfactuals():
    env = SignallingEnv(message="free")
    env.step({0: "red"})
    assert env.observe(1).counterfactuals == ()


def test_free_message_is_cleaned_and_bounded():
    env = SignallingEnv(message="free", max_message_chars=12)
    assert env.observe(0).legal_actions is None
    env.step({0: "the [red] circle, surely"})
    assert 'The sender says: "the (red) ci"' in env.observe(1).text


@pytest.mark.parametrize(
    ("player", "text"), [(0, "[Say Q]"), (0, "A"), (1, "[Pick 1]"), (1, "[Pick purple circle]")]
)
def test_unknown_symbols_and_picks_parse_to_none(player, text):
    env = SignallingEnv()
    env.reset(0)
    absent = next(i for i in range(NUM_ITEMS) if i not in env.scene.receiver_view)
    assert env.parse_action(1, f"[Pick {item_name(absent)}]") is None  # not the receiver's turn
    if player == 1:
        env.step({0: "[Say A]"})
        assert env.parse_action(1, f"[Pick {item_name(absent)}]") is None  # not a candidate
    assert env.parse_action(player, text) is None
    with pytest.raises(ValueError, match="is not legal now"):
        env.step({player: text})


def test_without_talk_the_receiver_guesses_at_one_in_k():
    bot = RandomPolicy(seed=0)
    make = lambda: make_env("signalling", talk=False)  # noqa: E731
    eps = play_episodes(make, [[bot, bot]] * 400, range(400))
    assert all(e.num_steps == 1 and not e.trajectories[0].turns for e in eps)
    assert episode_metrics(eps)["success_rate"] == pytest.approx(0.25, abs=0.07)


class Code:
    """A perfect 16-symbol code written against the observation texts."""

    policy_id, version = "code", 0

    def act(self, observations):
        out = []
        for obs in observations:
            if obs.player == 0:
                target = re.search(r"Target: (\w+ \w+)\.", obs.text).group(1)
                action = f"[Say {chr(ord('A') + NAMES.index(target))}]"
            else:
                said = re.search(r'says: "(\w)"', obs.text).group(1)
                action = f"[Pick {NAMES[ord(said) - ord('A')]}]"
                assert action in obs.legal_actions
            out.append(Decision(text=action, action=action, policy_id=self.policy_id))
        return out


def test_a_perfect_code_always_succeeds_and_episodes_end_within_max_turns():
    code = Code()
    env = make_env("signalling")
    eps = play_episodes(lambda: make_env("signalling"), [[code, code]] * 100, range(100))
    assert episode_metrics(eps) == {"success_rate": 1.0}
    assert all(e.num_steps == env.spec.max_turns == 2 and not e.truncated for e in eps)


def test_invalid_sender_answer_forfeits_for_both():
    bot = Replay(["[Say Z]"])
    ep = play_episodes(lambda: make_env("signalling"), [[bot, bot]], [0])[0]
    assert ep.forfeited_by == 0 and ep.returns == (0.0, 0.0)
    with pytest.raises(ValueError, match="at least one episode"):
        episode_metrics([])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"candidates": 1}, "candidates must be in 2..16"),
        ({"symbols": 27}, "symbols must be in 2..26"),
        ({"message": "semaphore"}, "message form must be one of"),
        ({"talk": "yes"}, "parameter 'talk' of game 'signalling' must be bool"),
    ],
)
def test_bad_parameters_are_one_line_errors(params, match):
    with pytest.raises(ValueError, match=match):
        make_env("signalling", **params)


def test_success_is_the_pick_of_the_target_whatever_the_penalty():
    from coplay.envs.signalling import pick
    from coplay.rollout.invalid import InvalidActionConfig

    # The receiver's nonsense is penalised and a random candidate played for it: the
    # target is hit about one time in four, each hit returning 1 - 0.5.
    bot = Replay(["nonsense"])
    eps = play_episodes(
        lambda: make_env("signalling", talk=False),
        [[bot, bot]] * 40,
        range(40),
        invalid=InvalidActionConfig(on_fail="penalty", penalty=-0.5),
    )
    hits = [e.turns[-1].played_action == pick(draw_scene(e.seed).target) for e in eps]
    assert 0 < sum(hits) < 40
    assert all(e.returns[1] == 0.5 for e, hit in zip(eps, hits, strict=True) if hit)
    assert episode_metrics(eps)["success_rate"] == pytest.approx(sum(hits) / 40)
    assert [e.trajectories[1].outcome for e in eps] == [float(h) for h in hits]


@pytest.mark.parametrize("seed", [-1, True])
def test_a_bad_seed_is_the_same_line_as_every_envs(seed):
    with pytest.raises(ValueError, match="^signalling: a seed must be a non-negative integer"):
        SignallingEnv().reset(seed)


def test_a_step_after_the_end_is_one_line():
    env = SignallingEnv(talk=False)
    env.step({1: env.observe(1).legal_actions[0]})
    # Nobody is to act, so {} passed the players check and raised IndexError.
    with pytest.raises(ValueError, match=r"^signalling: the game is over; call reset\(seed\)"):
        env.step({})
