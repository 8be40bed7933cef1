"""One compute thread per test process.

The models under test are tiny: a second thread buys nothing, and on a busy machine
(``make test`` runs one pytest-xdist worker per core) the idle OpenMP threads spin for
their share of the cores: a tiny model's rollout took 30 to 50 times the CPU time with
two threads than with one. The variables are set before anything imports torch, so
the workers, which inherit this environment, start with one thread too."""

import os
import sys

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def pytest_configure(config):
    # A plugin may have imported torch before this file was read: set it directly.
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
