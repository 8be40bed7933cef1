"""Textbook meta-games, shared by the meta-solver test files."""

import numpy as np

RPS = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], dtype=float)
PENNIES = np.array([[1, -1], [-1, 1]], dtype=float)
PD = np.array([[-1, -3], [0, -2]], dtype=float)  # row payoff; strategies (cooperate, defect)
CHICKEN = np.array([[0, 7], [2, 6]], dtype=float)  # row payoff; strategies (dare, chicken)
FAST_PRD = {"iterations": 2_000, "dt": 1e-2, "average_last": 200}


def zero_sum(m):
    return [m, -m]


def symmetric(m):
    return [m, m.T]
