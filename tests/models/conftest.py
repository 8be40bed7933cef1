"""A saved tiny checkpoint, for the tests of checking and loading checkpoint folders."""

import pytest

from coplay.models.loading import save_policy
from tests.models.tiny_policies import tiny_policy


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_policy(tiny_policy(), tmp_path_factory.mktemp("ckpt") / "final")
