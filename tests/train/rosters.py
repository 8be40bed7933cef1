"""Run overrides and rosters shared by the roster test files."""

TINY = [
    "train.iterations=2",
    "train.eval_every=2",
    "train.eval_episodes=8",
    "train.eval_opponents=[]",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
]
TWO_ROLES = {
    "policies": {"first": {"kind": "learner"}, "second": {"kind": "learner"}},
    "seats": ["first", "second"],
}
