"""The run config's ``train`` section: one-line errors naming the key."""

import pytest

from coplay.train.config import ConfigError
from coplay.train.settings import build_config


@pytest.mark.parametrize("seed", ["-1", str(2**31)])
def test_a_seed_out_of_range_names_the_key(seed):
    with pytest.raises(ConfigError, match=r"^invalid config: train.seed: Input should be"):
        build_config(overrides=[f"train.seed={seed}"])
