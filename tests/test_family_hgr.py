"""Metric family hgr (the default method's corpus numbers, SPEC.md section 8): micro
from summed counts, macro as exact means over entries, N/A skipped.
"""

from __future__ import annotations

import pytest
from helpers import WORKED_GOLD, WORKED_PRED, WORKED_PROMPT, A, score, score_corpus

import evaluate as ev


def test_score_corpus_micro_and_macro():
    e1 = score(WORKED_GOLD, WORKED_PRED, WORKED_PROMPT)   # worked example
    e2 = score([A], [])                                    # empty prediction
    e3 = score([A], [A, A, A])                             # three copies
    e4 = score([A], None)                                  # unparseable
    out = score_corpus([e1, e2, e3, e4], unparseable=1, missing=0)
    t, mi, ma = out["totals"], out["micro"], out["macro"]
    # totals: gold 3+1+1+1 = 6, items 4+0+3+0 = 7, entity_tp 2+0+1+0 = 3, full 1+0+1+0 = 2,
    # hard 1+0+0+0 = 1, empty predictions e2 + e4 = 2, schema-invalid entries: e1 only.
    assert t == {"gold_triplets": 6, "pred_triplet_items": 7, "entity_true_positives": 3,
                 "full_triplet_true_positives": 2, "hard_hallucinations": 1, "empty_predictions": 2,
                 "schema_invalid_entries": 1, "unparseable_predictions": 1, "missing_predictions": 0}
    # micro entity P = 3/7, R = 3/6, F1 = 2*(3/7)(1/2)/(3/7+1/2) = (3/7)/(13/14) = 6/13
    assert mi["entity_precision"] == pytest.approx(3 / 7, abs=1e-15)
    assert mi["entity_recall"] == pytest.approx(0.5, abs=1e-15)
    assert mi["entity_f1"] == pytest.approx(6 / 13, abs=1e-15)
    # micro triplet P = 2/7, R = 2/6, F1 = 2*(2/7)(1/3)/(2/7+1/3) = (4/21)/(13/21) = 4/13
    assert mi["triplet_precision"] == pytest.approx(2 / 7, abs=1e-15)
    assert mi["triplet_recall"] == pytest.approx(1 / 3, abs=1e-15)
    assert mi["triplet_f1"] == pytest.approx(4 / 13, abs=1e-15)
    assert mi["hallucination_rate"] == pytest.approx(1 / 7, abs=1e-15)
    # macro: mean over entries, N/A skipped
    assert ma["entity_f1"] == pytest.approx((4 / 7 + 0 + 0.5 + 0) / 4, abs=1e-15)
    assert ma["triplet_f1"] == pytest.approx((2 / 7 + 0 + 0.5 + 0) / 4, abs=1e-15)
    assert ma["relation_accuracy"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)   # e2, e4 N/A
    assert ma["weight_score"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)
    assert ma["type_agreement"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)
    assert ma["schema_score"] == pytest.approx((0.75 + 1.0 + 1.0 + 0.0) / 4, abs=1e-15)
    assert ma["grounding"] == pytest.approx((0.75 + 1.0 + 1.0 + 1.0) / 4, abs=1e-15)
    assert ma["composite"] == pytest.approx((353 / 560 + 0.0 + 0.875 + 0.0) / 4, abs=1e-12)


def test_score_corpus_all_na_macro():
    out = score_corpus([score([], [])])
    assert out["macro"]["relation_accuracy"] is None and out["macro"]["weight_score"] is None
    assert out["macro"]["composite"] == 1.0
    assert out["micro"]["entity_f1"] == 0.0 and out["micro"]["hallucination_rate"] == 0.0
