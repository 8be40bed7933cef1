"""The trainer-side fixtures (a tiny Kuhn policy) for the population drivers' tests."""

from tests.train.conftest import tiny_policy  # noqa: F401  (a fixture, found by name)
