"""Tiny PSRO configs and a reader of a run's logs, shared by the PSRO test files."""

import json

from coplay.population.psro_config import PsroConfig
from coplay.train.settings import build_config

TINY = [
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "model.tiny.num_layers=1",
    "rollout.games_per_iter=16",
    "optim.minibatch_size=64",
    "train.iterations=2",
    "train.eval_opponents=[]",
]


def tiny_psro(**kwargs) -> PsroConfig:
    return PsroConfig(run=build_config(preset="kuhn-selfplay", overrides=TINY), **kwargs)


def psro_rows(out):
    skip = ("perf/",)
    files = sorted(out.rglob("*.jsonl"))
    return {
        str(f.relative_to(out)): [
            {k: v for k, v in json.loads(x).items() if not k.startswith(skip)}
            for x in f.read_text().splitlines()
        ]
        for f in files
    }
