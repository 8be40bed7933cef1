"""Registered parts get config sections, plugins register them, states may hold their records."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import dataclass

import pytest
from pydantic import BaseModel, ConfigDict, Field

from coplay.algos.losses.compose import LossConfig
from coplay.cli import main
from coplay.train.checkpoints.state import state_records
from coplay.train.config import ConfigError, RolloutConfig
from coplay.train.parts.planning import PLANNING
from coplay.train.parts.sections import open_sections, part_records
from coplay.train.parts.term import Term
from coplay.train.parts.terms import TERMS
from coplay.train.roster_config import LearnerEntry
from coplay.train.settings import build_config, to_yaml, validate
from tests.train.runs import TINY

# A plugin module: a term that adds coef * mean log-prob and a planning part whose
# state is a dataclass record; written to a file so the config's plugins import it.
PLUGIN = """
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, Field

from coplay.train.parts.planning import PLANNING
from coplay.train.parts.term import Term
from coplay.train.parts.terms import TERMS


class ToyTermConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    coef: float = Field(gt=0.0)


class ToyTerm(Term):
    per_unit = True
    section = ToyTermConfig

    def __init__(self, cfg):
        self.cfg = cfg

    def loss(self, context, micro):
        value = micro.aggregate(micro.logp, micro.mask, denom=micro.denom)
        return self.cfg.coef * value, {"loss/toy": float(value)}


class CountConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    every: int = Field(gt=0)


@dataclass(frozen=True)
class Counted:
    games: int


@dataclass(frozen=True)
class Count:
    section = CountConfig
    records = (Counted,)
    cfg: CountConfig

    def init(self):
        return Counted(0)

    def plan(self, state, plan, ctx):
        return plan, state, {}

    def observe(self, state, batch, ctx):
        return Counted(state.games + len(batch.episodes)), {"rollout/counted": 1.0}


TERMS["toy"] = ToyTerm
PLANNING["count"] = Count
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A module ``toyparts`` in the working directory; the registries and the module
    cache are put back afterwards."""
    (tmp_path / "toyparts.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    terms, planning = dict(TERMS), dict(PLANNING)
    yield "toyparts"
    sys.modules.pop("toyparts", None)
    for registry, before in ((TERMS, terms), (PLANNING, planning)):
        registry.clear()
        registry.update(before)


class _Conf(BaseModel):
    """A toy section."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    coef: float = Field(gt=0.0)


class _Toy(Term):
    section = _Conf


def test_open_sections_adds_an_optional_section_per_registered_part_only():
    opened = open_sections(LossConfig, {**TERMS, "toy": _Toy})
    assert opened is not LossConfig and issubclass(opened, LossConfig)
    assert opened.model_fields["toy"].default is None
    assert opened.model_validate({"toy": {"coef": 2}}).toy == _Conf(coef=2.0)
    # cached: the same registrations give the same class; none new give the base
    assert open_sections(LossConfig, {**TERMS, "toy": _Toy}) is opened
    assert open_sections(LossConfig, TERMS) is LossConfig
    # the policy-iteration target has no section here: it is configured under rollout
    assert "target" not in opened.model_fields


def test_a_registered_term_section_validates_prints_and_reads_back(monkeypatch):
    monkeypatch.setitem(TERMS, "toy", _Toy)
    cfg = build_config(preset="kuhn-selfplay", overrides=["loss.toy.coef=0.5"])
    assert cfg.loss.toy == _Conf(coef=0.5)
    again = validate(json.loads(json.dumps(cfg.model_dump(mode="json"))))
    assert again.loss.toy == _Conf(coef=0.5) and "toy:\n    coef: 0.5" in to_yaml(cfg)
    with pytest.raises(ConfigError, match=r"loss\.toy\.coef: Input should be greater than 0"):
        build_config(preset="kuhn-selfplay", overrides=["loss.toy.coef=-1"])
    with pytest.raises(ConfigError, match=r"loss\.toyy: unknown key"):
        build_config(preset="kuhn-selfplay", overrides=["loss.toyy.coef=1"])


def test_a_roster_learner_loss_takes_registered_terms(monkeypatch):
    monkeypatch.setitem(TERMS, "toy", _Toy)
    entry = LearnerEntry.model_validate({"kind": "learner", "loss": {"toy": {"coef": 1}}})
    assert entry.loss.toy == _Conf(coef=1.0)
    assert entry.model_dump()["loss"]["toy"] == {"coef": 1.0}


def test_a_registered_planning_part_gets_a_rollout_section_and_its_records_count(monkeypatch):
    @dataclass(frozen=True)
    class Marker:
        n: int

    class Part:
        section = _Conf
        records = (Marker,)

    monkeypatch.setitem(PLANNING, "mark", Part)
    assert open_sections(RolloutConfig, PLANNING).model_validate({"mark": {"coef": 1}}).mark
    assert Marker in part_records() and state_records()["Marker"] is Marker


def test_plugins_register_parts_for_the_cli_and_resume(plugin, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--quiet", "--out", str(out), *TINY, f"plugins=[{plugin}]"]
    assert main([*args, "loss.toy.coef=0.1", "rollout.count.every=3"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rollout/counted"] == 1.0 and "loss/toy" in r for r in rows if r["iteration"])
    saved = (out / "config.yaml").read_text()
    assert "plugins:\n- toyparts" in saved and "count:\n    every: 3" in saved
    # a new process knows nothing of the plugin: --resume imports it from config.yaml
    sys.modules.pop(plugin)
    TERMS.pop("toy")
    PLANNING.pop("count")
    assert main(["train", "--quiet", "--resume", str(out), "train.iterations=3"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if r["iteration"]] == [1, 2, 3]


def test_a_plugin_that_fails_to_import_is_one_error_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    for plugins, why in (
        ("[nosuchmodule]", "plugins: importing 'nosuchmodule' failed: ModuleNotFoundError"),
        ("[broken]", "plugins: importing 'broken' failed: RuntimeError: no GPU here"),
        ("['not a module']", "plugins: 'not a module' is not a module name"),
    ):
        code = main(["train", "--quiet", "--out", str(tmp_path / "r"), f"plugins={plugins}"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and why in err and len(err.splitlines()) == 1, err
    sys.modules.pop("broken", None)
    assert not (tmp_path / "r").exists()
