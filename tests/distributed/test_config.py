"""The ray section, and the one-line error when workers are asked for without Ray."""

from __future__ import annotations

import importlib.util

import pytest

from coplay.distributed import episode_source
from coplay.distributed.config import RayConfig, require_ray
from coplay.envs.gameref import GameRef
from coplay.rollout.source import LocalSource
from coplay.train.config import ConfigError, build_config


@pytest.fixture
def no_ray(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        "coplay.distributed.config.find_spec",
        lambda name: None if name == "ray" else real(name),
    )


def test_workers_without_ray_is_one_line_naming_the_extra(no_ray):
    with pytest.raises(ConfigError) as err:
        build_config(overrides=["rollout.workers=2"])
    message = str(err.value)
    assert "rollout.workers=2 needs Ray" in message and "pip install 'coplay[ray]'" in message
    assert "\n" not in message
    build_config(overrides=["rollout.workers=0"])  # the default needs nothing
    with pytest.raises(ValueError, match=r"^distributed evaluation needs Ray"):
        require_ray("distributed evaluation")


def test_zero_workers_is_the_local_engine_and_the_ray_section_defaults_to_local():
    cfg = build_config(overrides=[])
    assert (cfg.rollout.workers, cfg.rollout.max_staleness) == (0, 0)
    assert cfg.ray == RayConfig() and cfg.ray.address is None
    source = episode_source(
        GameRef("kuhn_poker"), workers=0, max_staleness=0, ray=cfg.ray, invalid=None, max_turns=3
    )
    assert isinstance(source, LocalSource) and source.max_turns == 3
    assert build_config(overrides=["ray.address=auto"]).ray.address == "auto"
    with pytest.raises(ConfigError, match="max_staleness=2 lets Ray workers play ahead"):
        build_config(overrides=["rollout.max_staleness=2"])  # with no workers to play ahead
    with pytest.raises(ConfigError, match="max_staleness"):
        build_config(overrides=["rollout.max_staleness=-1"])
