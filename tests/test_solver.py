"""ev.hungarian against scipy.optimize.linear_sum_assignment (test-only oracle), and the
pure-Python and numpy code paths against each other (SPEC.md section 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import evaluate as ev

scipy_optimize = pytest.importorskip("scipy.optimize")

KINDS = ("int_ties", "int_wide", "zeros", "equal", "dyadic", "float", "spec")
EXACT_KINDS = {"int_ties", "int_wide", "zeros", "equal", "dyadic"}
# align_sim values reachable with exact-only field similarities: 0.45*s + 0.45*t + 0.1*r
SPEC_ALIGNS = np.array([0.0, 0.1, 0.45, 0.55, 0.9, 1.0])


def random_shape(rng: np.random.Generator, max_size: int = 60) -> tuple[int, int]:
    bucket = rng.random()
    top = 8 if bucket < 0.6 else 20 if bucket < 0.9 else max_size
    m = int(rng.integers(0, top + 1))
    n = m if rng.random() < 0.5 else int(rng.integers(0, m + 1))
    return n, m


def random_cost(rng: np.random.Generator, kind: str, n: int, m: int) -> np.ndarray:
    if kind == "int_ties":
        return rng.integers(0, 3, size=(n, m)).astype(float)
    if kind == "int_wide":
        return rng.integers(-50, 100, size=(n, m)).astype(float)
    if kind == "zeros":
        return np.zeros((n, m))
    if kind == "equal":
        return np.full((n, m), float(rng.integers(1, 5)) / 2)
    if kind == "dyadic":
        return rng.integers(0, 9, size=(n, m)) / 8.0
    if kind == "float":
        return rng.random((n, m))
    # "spec": 1 - align_sim with padding 1, as match_triplets builds it
    cost = 1.0 - rng.choice(SPEC_ALIGNS, size=(n, m))
    cost[:, rng.integers(0, m + 1):] = 1.0
    return cost


def cases(seed: int, count: int, max_size: int = 60):
    rng = np.random.default_rng(seed)
    for k in range(count):
        kind = KINDS[k % len(KINDS)]
        n, m = random_shape(rng, max_size)
        yield kind, random_cost(rng, kind, n, m)


def check_assignment(cost: np.ndarray, assignment: list[int]) -> float:
    n, m = cost.shape
    assert len(assignment) == n
    assert all(0 <= j < m for j in assignment)
    assert len(set(assignment)) == n
    return sum(cost[i, j] for i, j in enumerate(assignment))


def test_hungarian_matches_scipy_on_1200_matrices():
    seen_sizes = set()
    for kind, cost in cases(seed=20240601, count=1200):
        n, m = cost.shape
        seen_sizes.add(m)
        assignment = ev.hungarian(cost)
        total = check_assignment(cost, assignment)
        rows, cols = scipy_optimize.linear_sum_assignment(cost)
        best = float(cost[rows, cols].sum())
        if kind in EXACT_KINDS:
            assert total == best, (kind, cost.shape)
        else:
            assert math.isclose(total, best, rel_tol=0, abs_tol=1e-9), (kind, cost.shape)
    assert 0 in seen_sizes and max(seen_sizes) >= 48   # both code paths were exercised


def test_hungarian_list_input_equals_array_input():
    for _, cost in cases(seed=7, count=100, max_size=20):
        assert ev.hungarian(cost.tolist()) == ev.hungarian(cost)


def test_python_and_numpy_paths_identical():
    # SPEC section 5: any solver is fine only if it gives the same assignment as the
    # classic algorithm; the numpy copy must agree with the scalar one, ties included.
    for kind, cost in cases(seed=99, count=500, max_size=30):
        n, m = cost.shape
        if n == 0:
            continue
        py = ev._hungarian_python(cost.tolist(), n, m)
        vec = ev._hungarian_numpy(cost)
        assert py == vec, (kind, cost.shape, cost.tolist())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_python_and_numpy_paths_identical_large(seed):
    rng = np.random.default_rng(seed)
    for kind in ("int_ties", "spec", "float"):
        cost = random_cost(rng, kind, 50, 55)
        assert ev._hungarian_python(cost.tolist(), 50, 55) == ev._hungarian_numpy(cost)


def test_ties_all_equal_take_columns_in_order():
    # all-equal costs: every row takes the first free column (strict < updates only)
    for n, m in [(1, 1), (3, 3), (3, 5), (50, 50)]:
        assert ev.hungarian(np.ones((n, m))) == list(range(n))


def test_empty_matrices():
    assert ev.hungarian([]) == []
    assert ev.hungarian(np.zeros((0, 0))) == []
    assert ev.hungarian(np.zeros((0, 4))) == []


@pytest.mark.parametrize("cost", [
    [[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]],         # n > m
    np.zeros((3, 0)),                              # n > m with m = 0
    [[0.0, float("nan")], [1.0, 0.0]],
    [[0.0, float("inf")], [1.0, 0.0]],
    [[0.0, 1.0], [1.0]],                           # ragged
    [1.0, 2.0],                                    # 1-D
])
def test_hungarian_errors(cost):
    with pytest.raises(ValueError):
        ev.hungarian(cost)
