"""Statistics section: headline protocol, percentile bootstrap intervals, paired bootstrap,
paired approximate randomisation, Holm, compare_systems."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, SHARED_DATA, T, entry, run

import evaluate as ev

FAMILIES = ("hgr", "strict", "per-relation")


def sample_report(name: str) -> dict:
    loaded = ev.load_inputs(ROOT / "predictions" / f"{name}.jsonl", ROOT / "gold" / "gold.jsonl")
    return json.loads(json.dumps(ev.evaluate_entries(loaded.entries, similarity=ev.Similarity(), families=FAMILIES)))


@pytest.fixture(scope="module")
def sample_reports() -> dict:
    return {"base": sample_report("base"), "finetuned": sample_report("finetuned")}


def compare(reports: dict, baseline: str, **kw) -> dict:
    kw = {"bootstrap": 200, "trials": 500, "seed": 7, "correction": None, **kw}
    return ev.compare_systems(reports, baseline=baseline, families=ev.families_for(FAMILIES), **kw)


def test_identical_systems_give_delta_zero_and_p_one(sample_reports):
    same = {"a": sample_reports["finetuned"], "b": json.loads(json.dumps(sample_reports["finetuned"]))}
    out = compare(same, "a")
    for path, row in out["metrics"]["b"].items():
        assert row["delta"] == 0.0, path
        assert row["delta_ci"] == [0.0, 0.0], path
        assert row["p_value"] == 1.0, path  # every trial has |delta*| = 0 >= |delta| = 0: (R + 1)/(R + 1)
        assert row["significant"] is False
        assert row["estimate"] == out["metrics"]["a"][path]["estimate"]


def test_fixed_seed_gives_byte_identical_output(sample_reports):
    a = json.dumps(compare(sample_reports, "base", correction="holm"), allow_nan=False)
    b = json.dumps(compare(sample_reports, "base", correction="holm"), allow_nan=False)
    assert a == b
    c = json.dumps(compare(sample_reports, "base", correction="holm", seed=8), allow_nan=False)
    assert c != a
