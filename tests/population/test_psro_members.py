"""PSRO's members: the first one made again and the others reloaded on resume."""

import pytest

from coplay.population.psro import run_psro
from coplay.population.psro_members import INITIAL_MEMBERS
from coplay.train.checkpoints.rundir import RunRepaired
from tests.population.psro_runs import psro_rows, tiny_psro


def test_psro_with_exact_oracle_and_random_first_member_resumes(tmp_path):
    # The random first member is built again and the exact responses reload from their
    # tables: the resumed run ends where the uninterrupted one does.
    assert set(INITIAL_MEMBERS) == {"lm", "random"}
    cfg = tiny_psro(iterations=3, initial="random", oracle="exact")
    whole = run_psro(cfg, tmp_path / "whole")
    run_psro(cfg, tmp_path / "split", stop_after=1)
    with (tmp_path / "split" / "psro.jsonl").open("a") as f:
        f.write('{"iteration": 2, "psro/expl')  # torn by a kill during the next append
    with pytest.warns(RunRepaired, match="dropped a half-written last line"):
        split = run_psro(cfg, tmp_path / "split", resume=True)
    assert split.members == whole.members
    assert [s.exploitability for s in split.steps] == [s.exploitability for s in whole.steps]
    assert psro_rows(tmp_path / "split") == psro_rows(tmp_path / "whole")
