"""Best-response oracles and their seating (coplay.population.oracles)."""

import numpy as np
import pytest

from coplay.policies.scripted import RandomPolicy
from coplay.population import oracles
from coplay.population.oracles import ORACLES, SeatedPool, Target
from coplay.train.parts.seating import FromPool
from tests.population.psro_runs import tiny_psro


def test_seated_pool_draws_the_opponent_of_the_learners_seat():
    a, b = RandomPolicy(policy_id="a"), RandomPolicy(policy_id="b")
    pool = SeatedPool(members=[a, b], by_seat=(np.array([1.0, 0.0]), np.array([0.25, 0.75])))
    seating = FromPool("learner", pool, players=2)
    rows = seating.rows(4000, np.random.default_rng(0))
    seat0 = [r[1] for r in rows if r[0] == "learner"]
    seat1 = [r[0] for r in rows if r[1] == "learner"]
    assert len(seat0) == len(seat1) == 2000
    assert set(seat0) == {"a"}
    assert seat1.count("b") / len(seat1) == pytest.approx(0.75, abs=0.03)


def test_seat_weights_draw_each_opponent_for_the_seat_it_faces():
    # Refused before the loop was one: the pool now draws after the seat is decided.
    a, b = RandomPolicy(policy_id="a"), RandomPolicy(policy_id="b")
    pool = SeatedPool(members=[a, b], by_seat=(np.array([1.0, 0.0]), np.array([0.0, 1.0])))
    rows = FromPool("learner", pool, 2, seat_weights=(1.0, 3.0)).rows(400, np.random.default_rng(0))
    assert rows.count(("learner", "a")) == 100 and rows.count(("b", "learner")) == 300


@pytest.mark.parametrize(
    "user,seats,trained",
    [
        (None, (0, 1), None),  # all seats recommended: the user's setting as given
        ([1.0, 3.0], (0, 1), [1.0, 3.0]),
        (None, (1,), [0.0, 1.0]),  # JPSRO(CE): a member recommended in seat 1 only
        ([1.0, 3.0], (0,), [1.0, 0.0]),
    ],
)
def test_lm_oracle_trains_in_the_seats_that_recommend_what_it_answers(
    tmp_path, monkeypatch, tiny_policy, user, seats, trained
):
    asked = []

    def fake_train(cfg, out, pool, seat_weights=None):
        asked.append(seat_weights)
        out.mkdir(parents=True)
        return tiny_policy

    monkeypatch.setattr(oracles, "train_response", fake_train)
    cfg = tiny_psro(seat_weights=user)
    members = (RandomPolicy(policy_id="psro:00"),)
    by_seat = (np.ones(1), np.ones(1))
    target = Target(cfg, tmp_path, 1, members, by_seat, None, {}, float("nan"), seats)
    member, value = ORACLES["lm"].respond(target)
    assert asked == [trained] and member.policy_id == "psro:01" and np.isnan(value)
