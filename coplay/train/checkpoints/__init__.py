"""Run directories and saved states: safe trees, atomic saves, resume checks."""
