"""The shared records: a decision built fast is the decision built by its constructor."""

import dataclasses
import pickle

import pytest

from coplay.types import Decision


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
    assert fast == built and hash(fast) == hash(built) and repr(fast) == repr(built)
    # Fields not given take their defaults, as in the constructor.
    assert fast.behavior_logprobs is None and fast.well_formed is None
    assert fast.counterfactual_prompt_ids == ()
    assert dataclasses.asdict(fast) == dataclasses.asdict(built)
    assert pickle.loads(pickle.dumps(fast)) == built
    assert dataclasses.replace(fast, choice_index=0) == dataclasses.replace(built, choice_index=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.action = "[Pass]"
