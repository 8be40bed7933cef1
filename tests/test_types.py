"""The shared records: a record built fast is the record built by its constructor."""

import dataclasses
import pickle

import pytest

from coplay.types import Decision, GameKind, GameSpec, Observation


def _same_record(fast, built, changed: dict) -> None:
    assert fast == built and hash(fast) == hash(built) and repr(fast) == repr(built)
    assert dataclasses.asdict(fast) == dataclasses.asdict(built)
    assert pickle.loads(pickle.dumps(fast)) == built
    assert dataclasses.replace(fast, **changed) == dataclasses.replace(built, **changed)
    name = next(iter(changed))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, name, changed[name])


def test_a_fast_decision_equals_the_constructed_one_and_stays_frozen():
    values = dict(
        text="[Bet]",
        action="[Bet]",
        policy_id="p",
        policy_version=3,
        prompt_ids=(1, 2),
        response_ids=(7,),
        logprobs=(-0.5,),
        choice_ids=((6,), (7,)),
        choice_index=1,
    )
    fast, built = Decision.fast(**values), Decision(**values)
    _same_record(fast, built, {"choice_index": 0})
    # Fields not given take their defaults, as in the constructor.
    assert fast.behavior_logprobs is None and fast.well_formed is None
    assert fast.counterfactual_prompt_ids == ()


def test_a_fast_observation_equals_the_constructed_one_and_stays_frozen():
    values = dict(
        game="kuhn_poker", player=1, text="You hold K.", legal_actions=("[Pass]", "[Bet]")
    )
    fast, built = Observation.fast(**values), Observation(**values)
    _same_record(fast, built, {"text": "You hold Q."})
    assert fast.info_key is None and fast.messages is None
    assert fast.counterfactuals == () and fast.history == ()


def test_a_game_states_its_return_bounds():
    # A forfeit pays the lowest return: a guessed bound could make it beat a real loss.
    with pytest.raises(TypeError, match="min_return.*max_return"):
        GameSpec("g", 2, GameKind.ZERO_SUM, 4, False)
    spec = GameSpec("g", 2, GameKind.ZERO_SUM, 4, False, min_return=-3, max_return=3)
    assert (spec.min_return, spec.max_return, spec.simultaneous) == (-3, 3, False)
