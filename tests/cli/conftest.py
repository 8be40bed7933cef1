"""The finished tiny Kuhn run that the command modules' tests resume and refuse to overwrite."""

from tests.test_cli import kuhn_run  # noqa: F401  (a fixture, found by name)
