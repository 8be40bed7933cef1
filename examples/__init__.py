"""Example games written against coplay's ``Env`` protocol (see docs/envs.md)."""
