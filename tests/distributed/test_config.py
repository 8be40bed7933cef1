"""The ray section, and the one-line error when workers are asked for without Ray."""

from __future__ import annotations

import importlib.util
import socket
import time

import pytest

from coplay.distributed import episode_source, evaluation_source
from coplay.distributed.config import RayConfig, check_reachable, require_ray
from coplay.envs.gameref import GameRef
from coplay.rollout.invalid import InvalidActionConfig
from coplay.rollout.source import LocalSource
from coplay.train.config import ConfigError
from coplay.train.settings import build_config


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


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}"])
def test_an_address_where_nothing_listens_is_one_line(closed_port, form):
    # Ray itself retries such an address for minutes without a word.
    address = form.format(closed_port)
    start = time.perf_counter()
    with pytest.raises(ConnectionError) as err:
        check_reachable(address)
    message = str(err.value)
    assert message.startswith(f"ray.address={address}: nothing accepts a connection")
    assert "ray start --head" in message and "\n" not in message
    assert time.perf_counter() - start < 2.0  # refused at once, not after Ray's retries


def test_a_listening_address_passes_and_ray_resolves_its_own_names(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"127.0.0.1:{s.getsockname()[1]}")

    def no_connection(*args, **kwargs):
        raise AssertionError("no connection is tried")

    monkeypatch.setattr(socket, "create_connection", no_connection)
    for address in (None, "auto", "local", "cluster-without-port"):
        check_reachable(address)


def test_evaluation_workers_play_the_evaluations_treatment_and_truncation(monkeypatch):
    import coplay.distributed.source as ray_source

    made = []

    class Workers:  # stands in for RaySource: no cluster started
        def __init__(self, game, **settings):
            made.append(settings)

        def close(self):
            pass

    monkeypatch.setattr(ray_source, "RaySource", Workers)
    bad = InvalidActionConfig(on_fail="penalty")
    with evaluation_source(
        GameRef("kuhn_poker"), workers=2, ray=RayConfig(), invalid=bad, max_turns=3
    ) as source:
        assert isinstance(source, Workers)
    assert made[0]["invalid"] == bad and made[0]["max_turns"] == 3
