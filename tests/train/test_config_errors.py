"""One error line for a bad config: keys as the file spells them, values pydantic would
take without a word."""

from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from coplay.train.config import ConfigError
from coplay.train.config_errors import (
    LARGEST_INT,
    format_validation_error,
    refuse_bool_numbers,
    refuse_huge_numbers,
)


class Inner(BaseModel):
    lr: float = 1.0


class Outer(BaseModel):
    inner: Inner | None = None
    steps: list[int] = []
    exact: bool | Literal["auto"] = "auto"


def test_an_integer_past_64_bits_is_named_by_its_key_and_index():
    refuse_huge_numbers({"a": {"b": LARGEST_INT}, "c": [-LARGEST_INT]})  # the edges pass
    with pytest.raises(ConfigError, match=r"invalid roster: a\.c\[1\]: 9223372036854775808 is"):
        refuse_huge_numbers({"a": {"c": [0, LARGEST_INT + 1]}}, "roster")


def test_a_bool_that_validated_into_a_number_is_refused():
    raw = {"inner": {"lr": True}, "steps": [1, False]}
    with pytest.raises(ConfigError, match=r"inner\.lr: expected a number, got true; steps\[1\]"):
        refuse_bool_numbers(raw, Outer.model_validate(raw))


def test_a_key_leaves_out_the_union_members_pydantic_names():
    raw = {"exact": "maybe"}
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(raw)
    assert "exact.bool:" in format_validation_error(caught.value)  # no file holds that key
    line = format_validation_error(caught.value, raw)
    assert line.startswith("invalid config: exact: ") and ".bool" not in line
