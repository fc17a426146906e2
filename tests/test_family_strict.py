"""Metric family strict: exact normalised (source, relation, target), one-to-one,
with the method's denominators; micro and macro by hand.
"""

from __future__ import annotations

import pytest
from helpers import T, entry, run

import evaluate as ev


def test_strict_one_to_one_with_normalisation_and_method_denominators():
    gold = [T("Acme Inc", "located_in", "City Y"), T("Acme", "founded_by", "Person Z")]
    pred = [
        T("ACME, Inc.", "Located_In", "city y"),   # normalises to (acme, located_in, city y): exact
        T("acme", "located_in", "City Y"),        # the same key again: gold used once -> extra
        T("Acme", "founded_by", "Person Q"),      # wrong target: not strict
        {"source": {"title": "x"}},               # invalid item: counts in the denominator
    ]
    row = ev.strict_entry(ev.normalize_triplets(gold), ev.normalize_triplets(pred[:3]), n_items=4)
    # tp = 1 (multiset intersection); P = 1/4 (4 produced items), R = 1/2, F1 = 2*(1/4)(1/2)/(3/4) = 1/3
    assert row == {"tp": 1, "n_pred": 4, "n_gold": 2, "precision": 0.25, "recall": 0.5,
                   "f1": pytest.approx(1 / 3, abs=1e-15)}


def test_strict_corpus_micro_and_macro():
    a = T("A", "part_of", "B")
    b = T("C", "part_of", "D")
    report = run([entry([a, b], [a]), entry([a], [a, b], k=1), entry([], [], k=2)])
    strict = report["strict"]
    # tp: 1 + 1 + 0 = 2; predicted 1 + 2 + 0 = 3; gold 2 + 1 + 0 = 3
    assert strict["totals"] == {"true_positives": 2, "pred_triplet_items": 3, "gold_triplets": 3}
    assert strict["micro"]["precision"] == pytest.approx(2 / 3)
    assert strict["micro"]["recall"] == pytest.approx(2 / 3)
    # per entry P/R: (1, 1/2), (1/2, 1), (0, 0) -> macro P = 1/2, R = 1/2
    # F1: 2/3, 2/3, 0 -> macro F1 = 4/9
    assert strict["macro"]["precision"] == pytest.approx(0.5)
    assert strict["macro"]["recall"] == pytest.approx(0.5)
    assert strict["macro"]["f1"] == pytest.approx(4 / 9)
    assert report["per_entry"][0]["strict"]["tp"] == 1


def test_strict_differs_from_fuzzy_matching():
    gold = [T("Transformer", "based_on", "self-attention")]
    pred = [T("Transformer", "based_on", "self attention")]
    report = run([entry(gold, pred)])
    # lexical("self-attention", "self attention") = 0.5 * ratio + 0.5 * Jaccard
    #   ratio = 2 * 13 / 28 (13 matching chars of 14 + 14), Jaccard = {self, attention} / same = 1
    #   = 0.5 * 26/28 + 0.5 = 0.9642... >= 0.80: a full match for the method, not for strict.
    assert report["summary"]["totals"]["full_triplet_true_positives"] == 1
    assert report["strict"]["totals"]["true_positives"] == 0
    assert report["per_entry"][0]["pairs"][0]["target_sim"] == pytest.approx(0.5 * 26 / 28 + 0.5)
