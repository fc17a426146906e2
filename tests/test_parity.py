"""Parity with an independent implementation of SPEC.md on ../shared/data/parity-sample/.

The expected numbers (lexical similarity, thresholds 0.80 / 0.50) were produced by an
independent implementation of the method; every number must match to 1e-9.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import evaluate as ev

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT.parent / "shared" / "data" / "parity-sample"
TOL = 1e-9


@pytest.fixture(scope="module")
def sample() -> Path:
    if not (SAMPLE / "combined.jsonl").is_file():
        pytest.skip(f"parity sample not available at {SAMPLE} (shared test data is not shipped)")
    return SAMPLE


@pytest.fixture(scope="module")
def expected(sample):
    summary = json.loads((sample / "expected_summary_lexical.json").read_text(encoding="utf-8"))
    per_entry = json.loads((sample / "expected_per_entry_lexical.json").read_text(encoding="utf-8"))
    return summary, per_entry


def _close(found, want) -> bool:
    if want is None or found is None:
        return found is None and want is None
    if isinstance(want, str):
        return found == want
    return abs(found - want) <= TOL


def assert_summary(summary, want):
    assert summary["n_entries"] == want["n_entries"]
    assert summary["embedding_backend"] == want["embedding_backend"]
    assert summary["sim_threshold"] == want["sim_threshold"]
    assert summary["align_accept"] == want["align_accept"]
    for key, value in want["totals"].items():
        assert summary["totals"][key] == value, key
    for section in ("micro", "macro"):
        assert set(want[section]) <= set(summary[section])
        bad = {k: (summary[section][k], v) for k, v in want[section].items() if not _close(summary[section][k], v)}
        assert not bad, f"{section}: (found, expected) {bad}"


def assert_per_entry(per_entry, want):
    assert len(per_entry) == len(want)
    bad = []
    for index, (row, exp) in enumerate(zip(per_entry, want)):
        metrics = row["metrics"] if "metrics" in row else row
        for key, value in exp.items():
            if not _close(metrics[key], value):
                bad.append((index, key, metrics[key], value))
    assert not bad, f"(entry, key, found, expected), first 10: {bad[:10]} ({len(bad)} in all)"


def _expected_unparseable(sample) -> int:
    # SPEC section 1: null, {}, "", 0, false count as []; any other non-array is unparseable
    count = 0
    for line in (sample / "combined.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            value = json.loads(line).get("pred_parsed")
            if not isinstance(value, list) and value not in (None, {}, "", 0, False):
                count += 1
    return count


def test_scoring_parity_without_file_loader(sample, expected):
    # Scoring only: records built from the parsed lines with the record-level helpers.
    entries = []
    lines = (sample / "combined.jsonl").read_text(encoding="utf-8").splitlines()
    for line_no, line in enumerate(lines, 1):
        obj = json.loads(line)
        entries.append(ev.Entry(ev.gold_from_record(obj, line_no, f"combined.jsonl:{line_no}"),
                                ev.prediction_from_record(obj, line_no, combined=True)))
    report = ev.evaluate_entries(entries, similarity=ev.Similarity(), profile="hgr")
    assert_summary(report["summary"], expected[0])
    assert_per_entry(report["per_entry"], expected[1])
    unparseable = _expected_unparseable(sample)
    assert unparseable > 0
    assert report["summary"]["totals"]["unparseable_predictions"] == unparseable
    assert report["summary"]["totals"]["missing_predictions"] == 0


def test_parity_combined_file(sample, expected):
    loaded = ev.load_inputs(sample / "combined.jsonl", None)
    report = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity(), profile="hgr")
    assert_summary(report["summary"], expected[0])
    assert_per_entry(report["per_entry"], expected[1])
    assert report["summary"]["totals"]["unparseable_predictions"] == _expected_unparseable(sample)


def test_parity_split_files(sample, expected):
    loaded = ev.load_inputs(sample / "pred.jsonl", sample / "gold.jsonl")
    assert len(loaded.entries) == expected[0]["n_entries"]
    report = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity(), profile="hgr")
    assert_summary(report["summary"], expected[0])
    assert_per_entry(report["per_entry"], expected[1])
    assert report["summary"]["totals"]["unparseable_predictions"] == _expected_unparseable(sample)


def test_parity_profile_detected_as_hgr(sample):
    loaded = ev.load_inputs(sample / "combined.jsonl", None)
    assert ev.detect_profile(e.gold.items for e in loaded.entries) == "hgr"


def test_parity_cli(sample, expected, tmp_path):
    report_path = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "evaluate.py", "--pred", str(sample / "combined.jsonl"), "--no-embeddings",
         "--report", str(report_path), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert_summary(report["summary"], expected[0])
    assert_per_entry(report["per_entry"], expected[1])
