"""Metric family per-relation: the per-relation table, the confusion matrix and swapped
directions, by hand.
"""

from __future__ import annotations

from helpers import T, entry, run

import evaluate as ev


def test_per_relation_rows_confusion_and_swaps():
    gold = [
        T("Alpha", "part_of", "Beta"),
        T("Gamma", "part_of", "Delta"),
        T("Alpha", "located_in", "Omega"),
        T("Kappa", "created_by", "Sigma"),
    ]
    pred = [
        T("Alpha", "part_of", "Beta"),          # full match (part_of)
        T("Gamma", "located_in", "Delta"),      # entity match, relation wrong: part_of -> located_in
        T("Alpha", "located in", "Omega"),      # full match: "located in" == "located_in" as text
        T("Sigma", "created_by", "Kappa"),      # direction reversed: unmatched, swapped
        T("Zeta", "part_of", "Eta"),            # unrelated extra
    ]
    pr = run([entry(gold, pred)])["per_relation"]
    rows = {row["relation"]: row for row in pr["relations"]}
    # part_of: gold 2, predicted 2 (Alpha-Beta, Zeta-Eta); full matches with gold part_of: 1,
    # with predicted part_of: 1 -> P = 1/2, R = 1/2
    assert rows["part_of"] == {"relation": "part_of", "gold": 2, "predicted": 2, "tp_gold": 1,
                               "tp_pred": 1, "precision": 0.5, "recall": 0.5, "f1": 0.5}
    # located_in: gold 1; predicted 1 (Gamma-Delta; "located in" is a different label);
    # tp_gold 1 (Alpha-Omega matched), tp_pred 0 (the located_in prediction was wrong)
    assert rows["located_in"]["gold"] == 1
    assert rows["located_in"]["predicted"] == 1
    assert rows["located_in"]["tp_gold"] == 1 and rows["located_in"]["recall"] == 1.0
    assert rows["located_in"]["tp_pred"] == 0 and rows["located_in"]["precision"] == 0.0
    assert rows["created_by"]["tp_gold"] == 0
    # rows ordered by gold count (desc), then name
    assert [r["relation"] for r in pr["relations"]] == ["part_of", "created_by", "located_in"]
    # confusion over entity-matched pairs: (part_of, part_of) 1, (part_of, located_in) 1,
    # (located_in, located in) 1
    confusion = {(c["gold"], c["pred"]): c["count"] for c in pr["confusion"]}
    assert confusion == {("part_of", "part_of"): 1, ("part_of", "located_in"): 1,
                         ("located_in", "located in"): 1}
    # (part_of -> located_in) is a relation mismatch; (located_in -> "located in") matched
    assert pr["relation_mismatches"] == 1
    assert {(c["gold"], c["pred"]): c["relation_matched"] for c in pr["confusion"]} == {
        ("part_of", "part_of"): 1, ("part_of", "located_in"): 0, ("located_in", "located in"): 1}
    # Sigma->Kappa reverses gold Kappa->Sigma with the same relation
    assert pr["swapped_direction"] == 1
    assert pr["swapped_direction_same_relation"] == 1


def test_symmetric_pair_is_not_counted_as_swapped_when_matched():
    gold = [T("A1", "contrasts_with", "B1"), T("B1", "contrasts_with", "A1")]
    pred = [T("A1", "contrasts_with", "B1"), T("B1", "contrasts_with", "A1")]
    pr = run([entry(gold, pred)])["per_relation"]
    assert pr["swapped_direction"] == 0  # both predictions are entity-matched


def test_per_relation_precision_is_na_when_nothing_was_predicted_with_the_relation():
    gold = [T("Alpha", "based_on", "Beta")]
    pred = [T("Alpha", "based on", "Beta")]  # a full match (relation text equal) under another label
    pr = run([entry(gold, pred)])["per_relation"]
    row = pr["relations"][0]
    # predicted with "based_on": 0 -> precision N/A (not 0.0), F1 N/A; recall 1/1
    assert (row["predicted"], row["precision"], row["recall"], row["f1"]) == (0, None, 1.0, None)
    assert pr["relation_mismatches"] == 0
    assert "n/a" in ev.PerRelationFamily().format(pr, {})


def test_swaps_by_hand_and_with_another_backend():
    # a prediction is swapped against the first gold triplet (in order) whose source and
    # target its target and source match (field > 0); a backend of its own (the same
    # similarities behind an overridden field) gives the same record
    class PairByPair(ev.Similarity):
        def field(self, a, b):
            return super().field(a, b)

    # field("alpha beta gamma", "alpha beta gamma x") = 0.5 * 32/34 + 0.5 * 3/4 = 0.8456 >= 0.8
    gold = [T("Kappa", "created_by", "Sigma"), T("Alpha Beta Gamma", "part_of", "Delta"), T("", "part_of", "x")]
    pred = [T("Sigma", "created_by", "Kappa"),              # swapped, same relation
            T("Delta", "located_in", "Alpha Beta Gamma X"),  # swapped (a near title), other relation
            T("Sigma", "part_of", "Kappa Inc"),             # swapped with the first gold (suffix stripped)
            T("x", "part_of", "Nothing"),                   # not swapped ("nothing" vs the empty source)
            T("Zeta", "part_of", "Zeta")]                   # a self-loop: never counted
    e = entry(gold, pred)
    family = ev.PerRelationFamily()
    records = []
    for similarity in (ev.Similarity(), PairByPair()):
        score = ev.score_entry(e.gold.items, e.pred.items, "", similarity=similarity)
        records.append(family.entry_stats(e, score, ev.ScoringContext(similarity=similarity)))
    assert records[0] == records[1]
    assert (records[0]["swapped"], records[0]["swapped_same_relation"]) == (3, 1)
