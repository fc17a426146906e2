"""Metric family sweep (``--sweep``): entity and triplet P/R/F1 at the similarity
thresholds k/20, k = 10..20, by hand; the run's own threshold equals the summary; the
lexical memo and the embeddings are never reused across gates wrongly / recomputed.
"""

from __future__ import annotations

import math
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
from helpers import T, entry

import evaluate as ev

ROOT = Path(__file__).resolve().parents[1]
MICRO = ("entity_precision", "entity_recall", "entity_f1", "triplet_precision", "triplet_recall", "triplet_f1")


class TableSimilarity(ev.Similarity):
    """Raw similarities from a table (unlisted pairs 0.0), gated like the lexical backend."""

    def __init__(self, table, threshold=ev.DEFAULT_SIM_THRESHOLD):
        super().__init__(threshold)
        self.table = table

    def raw(self, a, b):
        return 1.0 if a == b else self.table.get((a, b), 0.0)

    def _gated(self, a, b):
        value = self.raw(a, b)
        return value if value >= self.threshold else 0.0


TABLE = {("alpha", "alfa"): 0.62, ("rel a", "rel b"): 0.9}


def hand_entries():
    """gold: alpha-based_on-beta, gamma-rel_a-delta, x-part_of-y; predictions: alfa-based_on-beta
    (source similarity 0.62), gamma-rel_b-delta (relation similarity 0.90), x-part_of-y (exact)."""
    return [entry([T("alpha", "based_on", "beta"), T("gamma", "rel_a", "delta"), T("x", "part_of", "y")],
                  [T("alfa", "based_on", "beta"), T("gamma", "rel_b", "delta"), T("x", "part_of", "y")])]


def test_thresholds_are_fractions():
    assert ev.SWEEP_THRESHOLDS == tuple(float(F(k, 20)) for k in range(10, 21))
    assert ev.SWEEP_THRESHOLDS[6] == 0.8 == ev.DEFAULT_SIM_THRESHOLD
    assert len(ev.SWEEP_THRESHOLDS) == 11 and ev.SWEEP_THRESHOLDS[0] == 0.5 and ev.SWEEP_THRESHOLDS[-1] == 1.0


def test_hand_computed_sweep():
    report = ev.evaluate_entries(hand_entries(), similarity=TableSimilarity(TABLE), families=("hgr", "sweep"))
    rows = {r["threshold"]: r for r in report["sweep"]["rows"]}
    assert list(rows) == list(ev.SWEEP_THRESHOLDS)
    assert report["sweep"]["gold_triplets"] == 3 and report["sweep"]["pred_triplet_items"] == 3
    # t <= 0.62 (0.50, 0.55, 0.60): alpha~alfa kept -> 3 entity, 3 full matches: P = R = F1 = 1
    # 0.62 < t <= 0.90: src(alpha, alfa) = 0 -> align 0.45*0 + 0.45*1 + 0.10*1 = 0.55 >= 0.50,
    #   accepted but not an entity match -> entity 2, full 2: P = R = F1 = 2/3
    # t > 0.90 (0.95, 1.00): the relation similarity 0.90 is gated too -> entity 2, full 1: 1/3
    expected = {0.5: (3, 3), 0.55: (3, 3), 0.6: (3, 3), 0.65: (2, 2), 0.7: (2, 2), 0.75: (2, 2), 0.8: (2, 2),
                0.85: (2, 2), 0.9: (2, 2), 0.95: (2, 1), 1.0: (2, 1)}
    for t, (entity_tp, full_tp) in expected.items():
        row = rows[t]
        assert (row["entity_true_positives"], row["full_triplet_true_positives"]) == (entity_tp, full_tp), t
        assert row["entity_precision"] == row["entity_recall"] == row["entity_f1"] == entity_tp / 3
        assert row["triplet_precision"] == row["triplet_recall"] == full_tp / 3
        # F1 = 2PR / (P + R) with P = R: equal to P up to one rounding
        assert math.isclose(row["triplet_f1"], full_tp / 3, rel_tol=1e-15)
    # a value equal to the threshold survives (v >= t): 0.90 at t = 0.90 is a relation match
    assert rows[0.9]["full_triplet_true_positives"] == 2


@pytest.mark.parametrize("threshold", [0.8, 0.65, 0.9, 0.95])
def test_row_of_the_run_threshold_equals_the_run(threshold):
    report = ev.evaluate_entries(hand_entries(), similarity=TableSimilarity(TABLE, threshold),
                                 families=("hgr", "sweep"))
    row = next(r for r in report["sweep"]["rows"] if r["threshold"] == threshold)
    assert {k: row[k] for k in MICRO} == {k: report["summary"]["micro"][k] for k in MICRO}


def _sample(pred="finetuned.jsonl"):
    return ev.load_inputs(ROOT / "predictions" / pred, ROOT / "gold" / "gold.jsonl").entries


@pytest.mark.parametrize("pred", ["finetuned.jsonl", "base.jsonl"])
def test_sample_row_080_equals_the_main_run_exactly(pred):
    report = ev.evaluate_entries(_sample(pred), similarity=ev.Similarity(), families=("hgr", "sweep"))
    row = next(r for r in report["sweep"]["rows"] if r["threshold"] == 0.8)
    summary = report["summary"]
    assert {k: row[k] for k in MICRO} == {k: summary["micro"][k] for k in MICRO}
    assert row["entity_true_positives"] == summary["totals"]["entity_true_positives"]
    assert row["full_triplet_true_positives"] == summary["totals"]["full_triplet_true_positives"]
    # and every other row equals a run gated at that threshold (the lexical bounds of a run at
    # 0.80 must not leak into the 0.50 twin, nor its memo)
    for t in (0.5, 0.65, 0.9):
        other = ev.evaluate_entries(_sample(pred), similarity=ev.Similarity(t), families=("hgr",))
        row = next(r for r in report["sweep"]["rows"] if r["threshold"] == t)
        assert {k: row[k] for k in MICRO} == {k: other["summary"]["micro"][k] for k in MICRO}, t
    # F1 falls (weakly) as the gate rises: fewer accepted similarities
    f1 = [r["entity_true_positives"] for r in report["sweep"]["rows"]]
    assert f1 == sorted(f1, reverse=True) and f1[0] > f1[-1]


def test_halves_merged_equal_the_whole():
    entries = _sample()
    family = ev.SweepFamily()
    ctx = ev.ScoringContext(ev.Similarity())
    whole = ev.score_entries(entries, [ev.HgrFamily(), family], ctx).records
    parts = [ev.score_entries(part, [ev.HgrFamily(), family], ctx).records for part in (entries[:9], entries[9:])]
    assert family.finish(ev.merge_records([family], parts)["sweep"]) == family.finish(whole["sweep"])


def test_with_threshold_does_not_reuse_gated_values():
    sim = ev.Similarity(0.8)
    a, b = "graph neural network", "graph neural networks model"
    value = ev.lexical_similarity(a, b)
    assert 0.5 <= value < 0.8
    assert sim.field(a, b) == 0.0                      # memoised at 0.80
    low = sim.with_threshold(0.5)
    assert low.field(a, b) == value and low.threshold == 0.5
    assert sim.field(a, b) == 0.0 and sim.threshold == 0.8   # the original is untouched


class CountingEmbedder:
    """2-D unit vectors at chosen angles (cosines known); counts every string embedded."""

    backend = "fake"
    model_name = "fake-2d"

    def __init__(self, angles):
        self.angles = angles
        self.embedded = []

    def embed(self, texts):
        self.embedded += list(texts)
        return np.array([(math.cos(self.angles.get(t, 1.5)), math.sin(self.angles.get(t, 1.5))) for t in texts],
                        dtype=np.float32)


def test_embedding_backend_is_never_re_embedded_and_rows_match_runs():
    # cos(alpha, alfa) = cos(0.9) ~ 0.62; every other string is far from the others
    angles = {"alpha": 0.0, "alfa": 0.9, "beta": 3.0, "gamma": 4.5, "delta": 6.0, "x": 2.0, "y": 5.2,
              "rel a": 1.2, "rel b": 1.2 + math.acos(0.9)}
    embedder = CountingEmbedder(angles)
    report = ev.evaluate_entries(hand_entries(), similarity=ev.EmbeddingSimilarity(embedder), families=("hgr", "sweep"))
    assert sorted(embedder.embedded) == sorted(set(embedder.embedded))   # each string embedded once
    rows = {r["threshold"]: r for r in report["sweep"]["rows"]}
    assert rows[0.5]["entity_true_positives"] == 3 and rows[0.8]["entity_true_positives"] == 2
    for t in (0.5, 0.8, 0.95):
        run = ev.evaluate_entries(hand_entries(), similarity=ev.EmbeddingSimilarity(CountingEmbedder(angles), t),
                                  families=("hgr",))
        assert {k: rows[t][k] for k in MICRO} == {k: run["summary"]["micro"][k] for k in MICRO}, t


def test_self_loops_and_unparseable_entries_count_as_items():
    # a self-loop is an item (precision denominator) but never matched; an unparseable
    # answer has 0 items
    entries = [entry([T("A", "based_on", "B")], [T("A", "based_on", "B"), T("C", "part_of", "C")], k=0),
               entry([T("D", "part_of", "E")], None, k=1)]
    section = ev.evaluate_entries(entries, similarity=ev.Similarity(), families=("hgr", "sweep"))["sweep"]
    # gold 2, items 2; entity tp 1 at every threshold: P = 1/2, R = 1/2
    assert (section["gold_triplets"], section["pred_triplet_items"]) == (2, 2)
    assert all(r["entity_precision"] == 0.5 and r["entity_recall"] == 0.5 for r in section["rows"])


PARITY = ROOT.parent / "shared" / "data" / "parity-sample" / "combined.jsonl"


def test_parity_sample_row_080_equals_the_summary():
    if not PARITY.is_file():
        pytest.skip(f"shared parity sample absent ({PARITY})")
    entries = ev.load_inputs(PARITY, None).entries
    report = ev.evaluate_entries(entries, similarity=ev.Similarity(), families=("hgr", "sweep"))
    row = next(r for r in report["sweep"]["rows"] if r["threshold"] == 0.8)
    assert {k: row[k] for k in MICRO} == {k: report["summary"]["micro"][k] for k in MICRO}


def test_real_embedding_model_rows_equal_runs_at_their_threshold(minilm_dir):
    """all-MiniLM-L6-v2 (ONNX, offline): every string embedded once for the whole run with
    --sweep, and the rows at 0.80 and 0.65 equal runs gated there."""
    embedder = ev.load_embedder(str(minilm_dir), progress=False)
    calls = []
    embed = embedder.embed
    embedder.embed = lambda texts: calls.append(list(texts)) or embed(texts)
    entries = _sample()
    report = ev.evaluate_entries(entries, similarity=ev.EmbeddingSimilarity(embedder), families=("hgr", "sweep"))
    embedded = [t for call in calls for t in call]
    assert embedded and len(embedded) == len(set(embedded))          # never re-embedded
    rows = {r["threshold"]: r for r in report["sweep"]["rows"]}
    assert {k: rows[0.8][k] for k in MICRO} == {k: report["summary"]["micro"][k] for k in MICRO}
    other = ev.evaluate_entries(entries, similarity=ev.EmbeddingSimilarity(embedder, 0.65), families=("hgr",))
    assert {k: rows[0.65][k] for k in MICRO} == {k: other["summary"]["micro"][k] for k in MICRO}
