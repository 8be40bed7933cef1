"""Roster files: every malformed roster is a one-line error; seat mappings."""

import pytest

from coplay.train.config import ConfigError
from coplay.train.roster_config import load_roster, seats_from_roles, validate_roster
from tests.train.rosters import TWO_ROLES


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"policies": {"a": {"kind": "learner"}}, "seats": ["a", "b"]}, "unknown policy 'b'"),
        (
            {"policies": {"a": {"kind": "learner"}, "b": {"kind": "learner"}}, "seats": ["a", "a"]},
            "learner 'b' is listed but never seated",
        ),
        ({"policies": {"r": {"kind": "bot", "name": "random"}}, "seats": ["r", "r"]}, "no policy"),
        (
            {"policies": {"a": {"kind": "learner"}, "r": {"kind": "bot", "name": "wise"}}},
            "unknown bot 'wise'",
        ),
        (
            {"policies": {"a": {"kind": "frozen", "path": "/no/such/ckpt"}}, "seats": ["a"]},
            "does not exist",
        ),
        ({"policies": {"a": {"kind": "coach"}}, "seats": ["a"]}, "policies.a"),
        ({**TWO_ROLES, "seats": {"first": [0], "second": [0]}}, "seat 0 is assigned twice"),
        ({**TWO_ROLES, "seats": {"first": [0], "second": [2]}}, "seat 1 is not assigned"),
        ({**TWO_ROLES, "seats": []}, "seats is empty"),
        ({**TWO_ROLES, "seats": {"first": 0, "second": True}}, "seat True of policy 'second'"),
        ({**TWO_ROLES, "seats": {"first": 0, "second": "1"}}, "seat '1' of policy 'second'"),
        ({**TWO_ROLES, "extra": 1}, "extra: unknown key"),
        (
            {
                "policies": {"first": {"kind": "learner", "init": "ckpt"}},
                "seats": ["first", "first"],
                "lora": {"rank": 2},
            },
            "LoRA learners share",
        ),
        (
            {
                "policies": {"me": {"kind": "learner"}},
                "seats": ["me", "me"],
                "lora": {"rank": True},
            },
            "lora.rank: expected a number, got true",
        ),
        (
            {"policies": {"a": {"kind": "learner"}}, "seats": ["a", "a"], "lora": {}},
            "part of 'lora_'",
        ),
        *(
            (
                {"policies": {name: {"kind": "learner"}}, "seats": [name, name], "lora": {}},
                f"role name '{name}' is reserved",
            )
            for name in ("default", "base")
        ),
    ],
)
def test_bad_rosters_are_one_line_errors(data, match):
    data.setdefault("seats", ["a", "r"])
    with pytest.raises(ConfigError, match=match) as err:
        validate_roster(data)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("invalid roster:")


def test_roles_to_seats_mapping_equals_the_seat_list():
    assert seats_from_roles({"a": [0, 2], "b": [1]}) == ["a", "b", "a"]
    cfg = validate_roster({**TWO_ROLES, "seats": {"second": [1], "first": [0]}})
    assert cfg.seats == ["first", "second"]
    assert cfg.learners == ["first", "second"]


def test_a_roster_file_may_reuse_an_entry_with_a_merge_key(tmp_path):
    # ``<<: *learner`` was refused as "not valid YAML" by the duplicate-key check.
    path = tmp_path / "roster.yaml"
    path.write_text(
        "policies:\n"
        "  first: &learner {kind: learner, optim: {lr: 0.002, epochs: 2}}\n"
        "  second:\n    <<: *learner\n    algo: {estimator: rloo}\n"
        "seats: [first, second]\n"
    )
    cfg = load_roster(path)
    assert cfg.policies["second"].optim == cfg.policies["first"].optim
    assert cfg.policies["second"].algo.estimator == "rloo"


def test_a_learners_own_schedule_is_checked_against_the_registry():
    own = {"kind": "learner", "optim": {"lr_schedule": "cosine", "warmup_updates": 2}}
    cfg = validate_roster({"policies": {"a": own}, "seats": ["a", "a"]})
    assert cfg.policies["a"].optim.lr_schedule == "cosine"
    own["optim"]["lr_schedule"] = "step"
    with pytest.raises(ConfigError) as err:
        validate_roster({"policies": {"a": own}, "seats": ["a", "a"]})
    assert "optim.lr_schedule: unknown lr schedule 'step'; registered: constant" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"kind": "learner", "optim": {"lr": float("inf")}},
            "invalid roster: policies.a.optim.lr: Input should be a finite number (got inf)",
        ),
        ({"kind": "learner", "lr": 1}, "invalid roster: policies.a.lr: unknown key"),
        ({"kind": "frozen"}, "invalid roster: policies.a.path: Field required"),
    ],
)
def test_an_error_names_the_key_as_the_roster_spells_it(entry, message):
    # The kind's name, which pydantic puts in the location, is no key of the file:
    # the line said policies.a.learner.optim.lr.
    with pytest.raises(ConfigError) as err:
        validate_roster({"policies": {"a": entry}, "seats": ["a", "a"]})
    assert str(err.value) == message


def test_an_integer_beyond_64_bits_in_a_roster_is_refused_naming_its_key():
    entry = {"kind": "learner", "optim": {"minibatch_size": 10**23}}
    with pytest.raises(ConfigError) as err:
        validate_roster({"policies": {"a": entry}, "seats": ["a", "a"]})
    assert str(err.value).startswith(
        f"invalid roster: policies.a.optim.minibatch_size: {10**23} is beyond a 64-bit integer"
    )
