"""Metric family calibration: ECE, Brier score and bins of the relation weights, by hand;
exact merging; the headline columns; N/A for a profile without weights.
"""

from __future__ import annotations

from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
from helpers import T, entry, run

import evaluate as ev

ROOT = Path(__file__).resolve().parents[1]


def flat(s, r, o):
    return [s, r, o]


def hand_entries():
    """Two entries. Entry 0: gold A-based_on-B, C-extends-D; predictions
    p1 A-based_on-B w 0.9 (full match, y = 1), p2 C-implements-D w 0.3 (entity match only:
    rel = 0, y = 0), p3 X-used_for-Y w 1.0 (unmatched, y = 0), p4 E-part_of-F w 0.1 (y = 0).
    Entry 1: gold G-part_of-H; predictions p5 G-part_of-H w 0.55 (y = 1) and the self-loop
    p6 K-part_of-K w 0.8 (never matched, y = 0)."""
    e0 = entry([T("A", "based_on", "B"), T("C", "extends", "D")],
               [T("A", "based_on", "B", 0.9), T("C", "implements", "D", 0.3),
                T("X", "used_for", "Y", 1.0), T("E", "part_of", "F", 0.1)], k=0)
    e1 = entry([T("G", "part_of", "H")], [T("G", "part_of", "H", 0.55), T("K", "part_of", "K", 0.8)], k=1)
    return [e0, e1]


def test_bins_edges():
    # [k/10, (k+1)/10), the edges being the doubles written 0.1 .. 0.9; 1.0 in the last bin
    assert ev.CALIBRATION_EDGES == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    assert [ev.calibration_bin(w) for w in (0.0, 0.05, 0.1, 0.3, 0.29999, 0.55, 0.9, 0.95, 1.0)] == \
        [0, 0, 1, 3, 2, 5, 9, 9, 9]


def test_hand_computed_ece_brier_bins():
    cal = run(hand_entries(), families=("hgr", "calibration"))["calibration"]
    # N = 6 predictions, correct: p1, p5 -> 2; accuracy 2/6
    assert cal["predictions"] == 6 and cal["correct"] == 2
    assert cal["accuracy"] == 2 / 6
    # mean weight (0.9 + 0.3 + 1.0 + 0.1 + 0.55 + 0.8) / 6 = 3.65 / 6, exact sum rounded once
    assert cal["mean_weight"] == float((F(0.9) + F(0.3) + F(1.0) + F(0.1) + F(0.55) + F(0.8)) / 6)
    # bins: b1 {0.1: y0}, b3 {0.3: y0}, b5 {0.55: y1}, b8 {0.8: y0}, b9 {0.9: y1, 1.0: y0}
    bins = {k: b for k, b in enumerate(cal["bins"]) if b["count"]}
    assert {k: b["count"] for k, b in bins.items()} == {1: 1, 3: 1, 5: 1, 8: 1, 9: 2}
    assert bins[9]["mean_weight"] == float((F(0.9) + 1) / 2) and bins[9]["accuracy"] == 0.5
    assert bins[5]["mean_weight"] == 0.55 and bins[5]["accuracy"] == 1.0
    assert cal["bins"][0] == {"low": 0.0, "high": 0.1, "count": 0, "mean_weight": None, "accuracy": None}
    # ECE = sum_b |correct_b - weight_sum_b| / N
    #     = (|0 - 0.1| + |0 - 0.3| + |1 - 0.55| + |0 - 0.8| + |1 - 1.9|) / 6
    #     = (0.1 + 0.3 + 0.45 + 0.8 + 0.9) / 6 = 2.55 / 6 = 0.425 (exact in the doubles' values)
    gap = F(0.1) + F(0.3) + (1 - F(0.55)) + F(0.8) + abs(1 - (F(0.9) + 1))
    assert cal["ece"] == float(gap / 6)
    assert cal["ece"] == pytest.approx(0.425, abs=1e-15)
    # Brier = ((0.9-1)^2 + 0.3^2 + 1^2 + 0.1^2 + (0.55-1)^2 + 0.8^2) / 6
    #       = (0.01 + 0.09 + 1 + 0.01 + 0.2025 + 0.64) / 6 = 1.9525 / 6
    squares = [(0.9 - 1) ** 2, 0.3 ** 2, 1.0, 0.1 ** 2, (0.55 - 1) ** 2, 0.8 ** 2]
    assert cal["brier"] == float(sum(map(F, squares)) / 6)
    assert cal["brier"] == pytest.approx(1.9525 / 6, abs=1e-15)
    assert cal["not_applicable"] is None


def test_correct_is_full_match_not_entity_match():
    # the relation is wrong but both titles match: an entity match, y = 0 (the hgr summary
    # counts it as entity tp 1, full tp 0); weight 0.7 -> ECE = |0 - 0.7| / 1, Brier 0.49
    report = run([entry([T("A", "based_on", "B")], [T("A", "extends", "B", 0.7)])],
                 families=("hgr", "calibration"))
    assert report["summary"]["totals"]["entity_true_positives"] == 1
    assert report["summary"]["totals"]["full_triplet_true_positives"] == 0
    cal = report["calibration"]
    assert (cal["predictions"], cal["correct"], cal["ece"], cal["brier"]) == (1, 0, 0.7, 0.7 ** 2)


def test_schema_invalid_items_are_left_out():
    bad = T("A", "based_on", "B", 0.9)
    bad["relation"]["weight"] = 1.5  # out of range: invalid, no weight to calibrate
    cal = run([entry([T("A", "based_on", "B")], [bad, T("A", "based_on", "B", 0.5)])],
              families=("hgr", "calibration"))["calibration"]
    # one valid prediction, correct, weight 0.5: ECE |1 - 0.5| = 0.5, Brier 0.25
    assert (cal["predictions"], cal["correct"], cal["ece"], cal["brier"]) == (1, 1, 0.5, 0.25)


def test_not_applicable_without_weights_and_without_predictions():
    e = ev.Entry(ev.GoldRecord("e0", "", [flat("a", "r", "b")], 1),
                 ev.Prediction("e0", [flat("a", "r", "b")], "ok", "", 1))
    report = ev.evaluate_entries([e], similarity=ev.Similarity(), profile="triples",
                                 families=("hgr", "calibration"))
    cal = report["calibration"]
    assert cal["ece"] is None and cal["brier"] is None and cal["predictions"] == 0
    assert "no relation weights" in cal["not_applicable"]
    assert "n/a: the schema profile has no relation weights" in ev.format_summary(report)
    empty = run([entry([T("A", "based_on", "B")], [])], families=("hgr", "calibration"))["calibration"]
    assert empty["ece"] is None and empty["not_applicable"] == "no schema-valid predicted triplets"


def test_not_in_the_default_metrics():
    assert "calibration" not in ev.DEFAULT_METRICS and "calibration" in ev.FAMILIES


def _sample_entries():
    gold, pred = ROOT / "gold" / "gold.jsonl", ROOT / "predictions" / "finetuned.jsonl"
    return ev.load_inputs(pred, gold).entries


def _records(entries):
    family = ev.CalibrationFamily()
    ctx = ev.ScoringContext(ev.Similarity())
    return family, ev.score_entries(entries, [ev.HgrFamily(), family], ctx)


def test_halves_merged_equal_the_whole():
    entries = _sample_entries()
    family, whole = _records(entries)
    _, first = _records(entries[:11])
    _, second = _records(entries[11:])
    merged = ev.merge_records([family], [second.records, first.records])
    assert family.finish(merged["calibration"]) == family.finish(whole.records["calibration"])
    # and from the per-entry statistics stored in the report (records_from_json)
    rows = [ev.records_from_json(row["stats"])["calibration"] for row in whole.rows]
    total = rows[0]
    for rec in rows[1:]:
        total = family.merge(total, rec)
    assert family.finish(total) == family.finish(whole.records["calibration"])


def test_headlines_equal_the_section():
    family, whole = _records(_sample_entries())
    section = family.finish(whole.records["calibration"])
    columns = [family.headline_columns(ev.records_from_json(row["stats"])["calibration"]) for row in whole.rows]
    names = sorted({k for c in columns for k in c})
    sums = {k: np.array([sum(c.get(k, 0.0) for c in columns)]) for k in names}
    heads = family.headlines(sums)
    # float column sums (documented: equal to the exact section to 1e-12)
    assert heads["calibration.ece"][0] == pytest.approx(section["ece"], abs=1e-12)
    assert heads["calibration.brier"][0] == pytest.approx(section["brier"], abs=1e-12)
    # N = 0 in a resample: NaN
    nan = family.headlines({"predictions": np.array([0.0, 6.0]), "brier_sum": np.array([0.0, 3.0])})
    assert np.isnan(nan["calibration.ece"][0]) and nan["calibration.brier"][1] == 0.5


def test_headlines_shape_with_absent_columns():
    # a resample of flat-profile entries: predictions 0 everywhere, no bin columns -> NaN, shape (R,)
    heads = ev.CalibrationFamily().headlines({"predictions": np.zeros(3)})
    assert heads["calibration.ece"].shape == heads["calibration.brier"].shape == (3,)
    assert np.isnan(heads["calibration.ece"]).all() and np.isnan(heads["calibration.brier"]).all()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_weights = st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.3, 0.5, 0.55, 0.7, 0.8, 0.9, 0.95, 1.0]) | st.floats(0, 1)
_entries = st.lists(st.lists(st.tuples(_weights, st.booleans()), max_size=5), min_size=1, max_size=6)


def _entry_of(k, predictions):
    """Prediction i is Pk_i -based_on-> Qk_i; it is in the gold (a full match) iff correct."""
    preds = [T(f"p{k} {i}", "based_on", f"q{k} {i}", w) for i, (w, _) in enumerate(predictions)]
    gold = [T(f"p{k} {i}", "based_on", f"q{k} {i}") for i, (_, y) in enumerate(predictions) if y]
    return entry(gold, preds, k=k)


@settings(max_examples=60, deadline=None)
@given(_entries, st.integers(0, 6))
def test_property_matches_an_independent_reference_and_any_split(data, cut):
    entries = [_entry_of(k, preds) for k, preds in enumerate(data)]
    family = ev.CalibrationFamily()
    ctx = ev.ScoringContext(ev.Similarity())
    whole = family.finish(ev.score_entries(entries, [family], ctx).records.get("calibration", {}))
    parts = [ev.score_entries(part, [family], ctx).records for part in (entries[:cut], entries[cut:]) if part]
    assert family.finish(ev.merge_records([family], parts[::-1])["calibration"]) == whole
    pairs = [p for preds in data for p in preds]
    if not pairs:
        assert whole["ece"] is None
        return
    # reference: bins by the decimal edges, exact Fractions
    gap = F(0)
    for k in range(10):
        low, high = ev.CALIBRATION_EDGES[k], ev.CALIBRATION_EDGES[k + 1]
        inside = [(w, y) for w, y in pairs if low <= w < high or (k == 9 and w == 1.0)]
        gap += abs(sum(y for _, y in inside) - sum(map(F, (w for w, _ in inside))))
    assert whole["ece"] == float(gap / len(pairs))
    assert whole["brier"] == float(sum(F((w - y) ** 2) for w, y in pairs) / len(pairs))
    assert whole["correct"] == sum(y for _, y in pairs)
