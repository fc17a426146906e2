"""Stage 6 - scoring (SPEC.md section 8): score_entry on hand-computed entries (empty
sides, unparseable, invalid items, N/A metrics, duplicates, self-loops, the worked example),
composite score, safe ratios.

Every expected value is derived by hand from SPEC.md (the arithmetic is in the comments).
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from helpers import (
    WORKED_GOLD,
    WORKED_PRED,
    WORKED_PROMPT,
    A,
    B,
    fl,
    score,
    trip,
    with_weight,
)

import evaluate as ev


def test_empty_gold_empty_pred():
    m = score([], [])
    assert m["composite"] == 1.0
    assert m["entity_f1"] == 0.0 and m["triplet_f1"] == 0.0       # never N/A
    assert m["schema_score"] == 1.0 and m["grounding"] == 1.0
    assert m["relation_accuracy"] is None and m["weight_score"] is None
    assert m["type_agreement"] is None
    assert m["hallucination_rate"] == 0.0


def test_empty_gold_one_pred():
    m = score([], [A], "Transformer self-attention")
    assert m["composite"] == 0.0
    assert m["n_pred_raw_items"] == 1 and m["entity_tp"] == 0
    assert m["novel_grounded"] == 1 and m["hard_hallucinations"] == 0


def test_gold_one_pred_empty():
    # schema and grounding N/A inside the composite (n_items = 0); relation/weight N/A
    # (entity_tp = 0); only entity_f1 = 0 remains: 0.25*0 / 0.25 = 0.0.
    m = score([A], [])
    assert m["composite"] == 0.0
    assert m["schema_score"] == 1.0 and m["grounding"] == 1.0      # per-entry values exist
    assert m["entity_precision"] == 0.0 and m["entity_recall"] == 0.0 and m["entity_f1"] == 0.0
    assert m["relation_accuracy"] is None and m["weight_score"] is None


def test_unparseable_prediction():
    m = score([A], None)
    assert m["schema_score"] == 0.0
    assert m["n_pred_raw_items"] == 0 and m["n_pred_valid"] == 0
    assert m["composite"] == 0.0
    assert m["grounding"] == 1.0
    # unparseable with empty gold: n_items = 0 -> composite 1.0 (section 8 rule)
    assert score([], None)["composite"] == 1.0


def test_all_invalid_prediction():
    # 2 invalid items: schema 0/2 = 0; entity F1 0; grounding: hard = 0 -> 1.0
    # composite = (0.30*0 + 0.25*0 + 0.15*1) / (0.30+0.25+0.15) = 0.15/0.70 = 3/14
    m = score([A], [with_weight(True), "junk"])
    assert m["schema_score"] == 0.0 and m["n_pred_raw_items"] == 2 and m["n_pred_valid"] == 0
    assert m["grounding"] == 1.0
    assert m["composite"] == pytest.approx(3 / 14, abs=1e-12)


def test_no_entity_match_gives_na_relation_and_weight():
    # pred shares only the relation -> align 0.1 < 0.5, no pair accepted
    m = score([A], [trip("Quantum Widget", "based_on", "Gizmo")])
    assert m["entity_tp"] == 0
    assert m["relation_accuracy"] is None and m["weight_score"] is None and m["type_agreement"] is None
    assert m["hard_hallucinations"] == 1        # ungrounded (empty prompt, titles not gold)
    # composite = (0.30*1 + 0.25*0 + 0.15*0) / 0.70 = 3/7
    assert m["composite"] == pytest.approx(3 / 7, abs=1e-12)


def test_entity_match_without_relation_match_weight_na():
    # same endpoints, relation "part_of" vs "based_on" -> rel 0; align 0.9 accepted;
    # entity match, no full match: relation_acc = 0/1, weight N/A.
    # P = R = 1 -> entity F1 = 1; composite = (0.30*1 + 0.25*1 + 0.20*0 + 0.15*1)/0.90 = 0.7/0.9
    m = score([A], [trip("Transformer", "part_of", "self-attention", st="concept", tt="concept")])
    assert m["entity_tp"] == 1 and m["full_tp"] == 0
    assert m["relation_accuracy"] == 0.0
    assert m["weight_score"] is None
    assert m["type_agreement"] == 1.0
    assert m["composite"] == pytest.approx(7 / 9, abs=1e-12)


def test_three_copies_of_a_correct_triplet():
    # Only one copy can be matched (no set semantics): entity_tp = 1,
    # P = 1/3, R = 1, F1 = 2*(1/3)*1/(4/3) = 1/2. The two extra copies have a vocabulary
    # relation and gold titles -> novel_grounded, not hard. composite =
    # 0.30*1 + 0.25*0.5 + 0.20*1 + 0.10*1 + 0.15*1 = 0.875
    m = score([A], [A, A, A])
    assert m["entity_tp"] == 1 and m["full_tp"] == 1
    assert m["entity_precision"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["entity_recall"] == 1.0
    assert m["entity_f1"] == pytest.approx(0.5, abs=1e-15)
    assert m["novel_grounded"] == 2 and m["hard_hallucinations"] == 0
    assert m["composite"] == pytest.approx(0.875, abs=1e-12)


def test_duplicated_gold_vs_itself():
    # Duplicates are neither merged nor dropped: each copy is matched once, so a gold list
    # scored against itself is perfect, repeated triplets included.
    for gold in ([A, A], [A, A, B]):
        m = score(gold, list(gold))
        assert m["entity_tp"] == len(gold) and m["full_tp"] == len(gold)
        for key in ("entity_f1", "triplet_f1", "relation_accuracy", "weight_score", "type_agreement",
                    "schema_score", "grounding", "composite"):
            assert m[key] == 1.0, key


def test_self_loop_prediction():
    # gold self-loop X->X; the identical prediction is a self-loop: removed before
    # matching, a hard hallucination. schema 1, entity F1 0, grounding 1 - 1/1 = 0:
    # composite = 0.30*1 / (0.30 + 0.25 + 0.15) = 3/7
    loop = trip("Foo Inc.", "part_of", "foo")
    m = score([loop], [loop], "foo")
    assert m["self_loops_removed"] == 1 and m["hard_hallucinations"] == 1
    assert m["entity_tp"] == 0 and m["n_pred_valid"] == 1
    assert m["grounding"] == 0.0
    assert m["composite"] == pytest.approx(3 / 7, abs=1e-12)


def test_worked_example():
    s = ev.score_entry(WORKED_GOLD, WORKED_PRED, WORKED_PROMPT, similarity=ev.Similarity())
    m = s.metrics
    # n_gold = 3, n_items = 4 (3 valid), entity_tp = 2 (P1, P2), full_tp = 1 (P1)
    assert (m["n_gold"], m["n_pred_raw_items"], m["n_pred_valid"]) == (3, 4, 3)
    assert (m["entity_tp"], m["full_tp"]) == (2, 1)
    assert (m["hard_hallucinations"], m["hallucinated_relations"], m["novel_grounded"], m["ungrounded"]) == (1, 1, 0, 0)
    # entity P = 2/4, R = 2/3, F1 = 2*(1/2)*(2/3) / (1/2 + 2/3) = (2/3)/(7/6) = 4/7
    ep, er = F(2, 4), F(2, 3)
    ef1 = 2 * ep * er / (ep + er)
    assert ef1 == F(4, 7)
    assert m["entity_precision"] == pytest.approx(fl(ep), abs=1e-15)
    assert m["entity_recall"] == pytest.approx(fl(er), abs=1e-15)
    assert m["entity_f1"] == pytest.approx(fl(ef1), abs=1e-15)
    # triplet P = 1/4, R = 1/3, F1 = 2*(1/12)/(7/12) = 2/7
    assert m["triplet_precision"] == pytest.approx(0.25, abs=1e-15)
    assert m["triplet_recall"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["triplet_f1"] == pytest.approx(2 / 7, abs=1e-15)
    assert m["relation_accuracy"] == 0.5          # 1 full / 2 entity
    assert m["weight_score"] == 0.5               # one full match, 0.5 band
    assert m["type_agreement"] == 0.5             # P1 agrees, P2 target type differs
    assert m["schema_score"] == 0.75              # 3 valid / 4
    assert m["hallucination_rate"] == 0.25 and m["grounding"] == 0.75
    # composite = 0.30*3/4 + 0.25*4/7 + 0.20*1/2 + 0.10*1/2 + 0.15*3/4   (sum w = 1)
    #           = 0.225 + 1/7 + 0.1 + 0.05 + 0.1125 = 39/80 + 1/7 = 353/560 = 0.63035714...
    comp = F(3, 10) * F(3, 4) + F(1, 4) * F(4, 7) + F(1, 5) * F(1, 2) + F(1, 10) * F(1, 2) + F(3, 20) * F(3, 4)
    assert comp == F(353, 560)
    assert m["composite"] == pytest.approx(fl(comp), abs=1e-12)
    # explanation fields
    assert [(p["gold_index"], p["pred_index"], p["full_match"]) for p in s.pairs] == [(0, 0, True), (1, 1, False)]
    assert s.pairs[0]["exact"] is True and s.pairs[0]["weight_score"] == 0.5
    assert s.pairs[1]["entity_match"] is True and s.pairs[1]["relation_match"] is False
    assert s.pairs[1]["align_sim"] == pytest.approx(0.9, abs=1e-15)
    assert s.unmatched_predictions == [{"pred_index": 3, "class": "hallucinated_relation"}]
    assert s.invalid_items == ["[2].relation.weight: 1.5 is not a number in [0, 1]"]


def test_invalid_gold_items_excluded_and_reported():
    m = ev.score_entry([A, with_weight(2)], [A], "", similarity=ev.Similarity())
    assert m.metrics["n_gold"] == 1
    assert m.invalid_gold_items == ["[1].relation.weight: 2 is not a number in [0, 1]"]
    assert m.metrics["composite"] == 1.0


def test_composite_score_function():
    assert ev.composite_score({"schema": 1.0, "entity_f1": 0.0, "relation_acc": None,
                               "weight": None, "grounding": 1.0}) == pytest.approx(0.45 / 0.70, abs=1e-15)
    assert ev.composite_score({}) == 0.0
    assert dict(ev.COMPOSITE_WEIGHTS) == {"schema": 0.30, "entity_f1": 0.25, "relation_acc": 0.20,
                                          "weight": 0.10, "grounding": 0.15}


def test_safe_ratio_and_f1():
    assert ev.safe_ratio(1, 0) == 0.0
    assert ev.f1_score(0.0, 0.0) == 0.0
    assert ev.f1_score(0.5, 1.0) == pytest.approx(2 / 3, abs=1e-15)


def test_entry_metrics_formulas():
    # 4 gold, 5 items (4 valid): 2 entity matches, 1 of them full (weight score 0.5, types
    # agree on 1 of 2); unmatched: a self-loop, a hallucinated relation, a novel grounded one
    tally = ev.MatchTally(entity_tp=2, full_tp=1, type_ok=1, weight_scores=[0.5])
    classes = {"self_loop": 1, "hallucinated_relation": 1, "novel_grounded": 1, "ungrounded": 0}
    m = ev.entry_metrics(4, 5, 4, False, tally, classes, True)
    assert (m.schema_score, m.entity_precision, m.entity_recall) == (0.8, 0.4, 0.5)
    assert (m.triplet_precision, m.triplet_recall) == (0.2, 0.25)
    assert m.entity_f1 == pytest.approx(4 / 9, abs=1e-15) and m.triplet_f1 == pytest.approx(2 / 9, abs=1e-15)
    assert (m.relation_accuracy, m.weight_score, m.type_agreement) == (0.5, 0.5, 0.5)
    assert (m.hard_hallucinations, m.hallucination_rate, m.grounding) == (2, 0.4, 0.6)
    assert (m.novel_grounded, m.hallucinated_relations, m.ungrounded, m.self_loops_removed) == (1, 1, 0, 1)
    composite = 0.30 * 0.8 + 0.25 * (4 / 9) + 0.20 * 0.5 + 0.10 * 0.5 + 0.15 * 0.6
    assert m.composite == pytest.approx(composite, abs=1e-15)
    # unparseable: schema 0; "triples" profile: no type axis; no entity match: N/A ratios
    none = {"self_loop": 0, "hallucinated_relation": 0, "novel_grounded": 0, "ungrounded": 0}
    m = ev.entry_metrics(2, 0, 0, True, ev.MatchTally(), none, False)
    assert (m.schema_score, m.relation_accuracy, m.weight_score, m.type_agreement) == (0.0, None, None, None)
    assert m.composite == 0.0 and m.grounding == 1.0 and m.hallucination_rate == 0.0
    assert ev.entry_metrics(0, 0, 0, False, ev.MatchTally(), none, True).composite == 1.0
    assert ev.entry_metrics(0, 1, 1, False, ev.MatchTally(), none, True).composite == 0.0


def test_entry_metrics_as_dict_holds_every_field_in_declaration_order():
    # as_dict copies the instance dict, which __init__ fills in the fields' declared order
    fields = [f.name for f in ev.dataclasses.fields(ev.EntryMetrics)]
    m = ev.EntryMetrics(*range(len(fields)))
    assert list(m.as_dict().items()) == list(zip(fields, range(len(fields))))
    assert m.as_dict() is not m.as_dict() and list(ev._ENTRY_METRIC_FIELDS) == fields
