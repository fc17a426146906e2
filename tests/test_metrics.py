"""Hand-computed tests of the extra metric families: strict, per-relation (table, confusion
matrix, swapped direction) and the --metrics plumbing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evaluate as ev


def T(s: str, r: str, o: str, w: float = 0.9) -> dict:
    return {"source": {"title": s, "type": "entity"}, "relation": {"type": r, "weight": w},
            "target": {"title": o, "type": "entity"}}


def entry(gold: list, pred: list | None, prompt: str = "", k: int = 0) -> ev.Entry:
    return ev.Entry(ev.GoldRecord(f"e{k}", prompt, gold, k + 1),
                    ev.Prediction(f"e{k}", pred, "ok" if pred is not None else "unparseable", "", k + 1))


def run(entries: list[ev.Entry], families=("hgr", "strict", "per-relation")) -> dict:
    return ev.evaluate_entries(entries, similarity=ev.Similarity(), families=families)


# --------------------------------------------------------------------------- strict

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


# -------------------------------------------------------------------- per-relation

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


def test_metric_families_are_separate_sections_and_hgr_is_unchanged():
    gold = [T("Alpha", "part_of", "Beta")]
    pred = [T("Alpha", "part_of", "Beta"), T("Beta", "part_of", "Alpha")]
    full = run([entry(gold, pred)])
    only = run([entry(gold, pred)], families=("hgr",))
    assert list(full) == ["summary", "strict", "per_relation", "per_entry"]
    assert list(only) == ["summary", "per_entry"]
    assert full["summary"] == only["summary"]
    assert [e["metrics"] for e in full["per_entry"]] == [e["metrics"] for e in only["per_entry"]]


def test_metric_list_parsing():
    assert ev._metric_list("strict") == ("hgr", "strict")
    assert ev._metric_list("all")[0] == "all"
    for bad in ("", "foo", "all,strict"):
        with pytest.raises(Exception):
            ev._metric_list(bad)


def test_webnlg_triples_excludes_what_the_official_scorer_would_crash_on():
    items = [["A", "b", "C"], {"sub": "A", "rel": "b", "obj": "C"}, T("A", "b", "C"),
             ["A", "", "C"], ["A", "b"], "A -> C", ["x | y", "b", "C"]]
    triples, excluded = ev.webnlg_triples(items)
    assert triples == [("A", "b", "C")] * 3
    assert excluded == 4


def test_cli_prints_each_family(tmp_path, capsys):
    gold = tmp_path / "g.jsonl"
    pred = tmp_path / "p.jsonl"
    gold.write_text(json.dumps({"id": "1", "prompt": "Alpha is part of Beta.",
                                "triplets": [T("Alpha", "part_of", "Beta")]}) + "\n")
    pred.write_text(json.dumps({"id": "1", "triplets": [T("Alpha", "part_of", "Beta")]}) + "\n")
    code = ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "strict (exact normalised source, relation, target; one-to-one)" in out
    assert "per relation (full matches)" in out
    assert "  part_of" in out
    report = json.loads(Path(tmp_path / "r.json").read_text())
    assert report["strict"]["micro"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_per_relation_precision_is_na_when_nothing_was_predicted_with_the_relation():
    gold = [T("Alpha", "based_on", "Beta")]
    pred = [T("Alpha", "based on", "Beta")]  # a full match (relation text equal) under another label
    pr = run([entry(gold, pred)])["per_relation"]
    row = pr["relations"][0]
    # predicted with "based_on": 0 -> precision N/A (not 0.0), F1 N/A; recall 1/1
    assert (row["predicted"], row["precision"], row["recall"], row["f1"]) == (0, None, 1.0, None)
    assert pr["relation_mismatches"] == 0
    assert "n/a" in ev.PerRelationFamily().format(pr, {})
