"""Three or more players: exact NashConv, seat-permutation of estimators, training runs."""

import json

import pyspiel
import pytest
from builders import permute_seats
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability as os_exploitability

from coplay.algos.advantages import ESTIMATORS, make_estimator
from coplay.cli import main
from coplay.envs.registry import make_env
from coplay.eval.exact import exploitability
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.train.settings import build_config

TINY = [
    "train.iterations=2",
    "train.eval_every=2",
    "train.eval_episodes=10",
    "rollout.games_per_iter=12",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]
PRESETS = ["kuhn3-selfplay", "goofspiel-selfplay", "ipd-selfplay", "bargaining-selfplay",
           "coop-selfplay"]  # fmt: skip


def test_uniform_three_player_kuhn_nash_conv_equals_openspiel():
    game = pyspiel.load_game("kuhn_poker", {"players": 3})
    want = os_exploitability.nash_conv(game, os_policy.UniformRandomPolicy(game))
    res = exploitability(RandomPolicy(), "kuhn_poker", params={"players": 3})
    assert res.nash_conv == pytest.approx(want, abs=1e-12)
    assert res.nash_conv == pytest.approx(2.0625)  # 33/16
    assert res.exploitability == pytest.approx(res.nash_conv / 3)
    assert res.num_info_states == 48 and len(res.best_response_values) == 3
    # Three-player Kuhn is zero-sum: the seats' values cancel.
    assert sum(res.on_policy_values) == pytest.approx(0.0, abs=1e-12)


def three_seat_episodes():
    """Real episodes: 3-player Kuhn (turns in sequence) and 3-player matching pennies
    (all seats act at the same step), in groups of 4 sharing a seed."""
    bot = RandomPolicy(seed=5)
    out = []
    for name, kw in [("kuhn_poker", {"players": 3}), ("openspiel:matching_pennies_3p", {})]:
        seeds = [i // 4 for i in range(16)]
        out += play_episodes(lambda n=name, k=kw: make_env(n, **k), [[bot] * 3] * 16, seeds)
    return out


CRITIC_FREE = {"alignment": {"base": "mars"}}
"""Parameters that run an estimator without critic values (GAE itself is tested below)."""


@pytest.mark.parametrize("name", sorted(n for n in ESTIMATORS if n != "gae"))
def test_permuting_three_seats_permutes_advantages(name):
    eps = three_seat_episodes()
    order = [2, 0, 1]
    est = make_estimator(name, **CRITIC_FREE.get(name, {}))
    base = est.estimate(eps, est.init()).advantages
    moved = est.estimate([permute_seats(e, order) for e in eps], est.init()).advantages
    for b_ep, m_ep in zip(base, moved, strict=True):
        assert len(m_ep) == 3
        for new_seat, old_seat in enumerate(order):
            assert list(m_ep[new_seat]) == pytest.approx(list(b_ep[old_seat]))
    assert any(a != 0.0 for ep in base for seat in ep for a in seat)


def test_gae_gives_every_seat_of_a_simultaneous_game_its_own_advantages():
    eps = three_seat_episodes()[16:]
    for ep in eps:
        for traj in ep.trajectories:
            for t in traj.turns:
                t.value = 0.0
    est = make_estimator("gae", gamma=1.0, lam=1.0, normalize=False)
    adv = est.estimate(eps, est.init()).advantages
    # Zero values and gamma = lam = 1: each seat's advantage is its own return.
    for ep, ep_adv in zip(eps, adv, strict=True):
        assert [list(a) for a in ep_adv] == [[r] for r in ep.returns]


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_build(preset):
    cfg = build_config(preset=preset)
    assert make_env(cfg.game.name, **cfg.game.params).spec.num_players >= 2


def train_tiny(tmp_path, args):
    out = tmp_path / "run"
    assert main(["train", "--quiet", "--out", str(out), *args, *TINY]) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_three_player_kuhn_trains_and_logs_nash_conv(tmp_path):
    rows = train_tiny(tmp_path, ["--preset", "kuhn3-selfplay", "train.eval_opponents=[]"])
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert 0.0 < rows[-1]["eval/nash_conv"] < 10.0
    assert "rollout/return_seat2" in rows[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        [
            "game.name=openspiel:liars_dice",
            "game.params={dice_sides: 3}",
            "train.eval_opponents=[random]",
        ],
        *(["--preset", p] for p in PRESETS[1:]),
    ],
)
def test_other_games_train_end_to_end(tmp_path, args):
    last = train_tiny(tmp_path, args)[-1]
    assert last["iteration"] == 2
    # Exact NashConv for imperfect-information games; the iterated dilemma has none.
    assert ("eval/nash_conv" in last) == ("ipd-selfplay" not in args)
    if "--preset" in args:
        assert "eval/selfplay/welfare" in last or "goofspiel-selfplay" in args
