"""The audit data model (chapter 2: a finished report's entries, their input lines read
again: AuditInputs, audit_entries -> AuditEntry) on the sample comparison, hand-checked,
and its refusals (files changed, moved, streamed, directory runs, no rows)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_main
from helpers import ROOT, T, load_report, write

import evaluate as ev

GOLD = ROOT / "gold" / "gold.jsonl"
BASE = ROOT / "predictions" / "base.jsonl"
FINETUNED = ROOT / "predictions" / "finetuned.jsonl"
FAST = ("--no-embeddings", "--quiet", "--bootstrap", "200")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample comparison's report (written to a temporary folder) and its audit entries
    by system and id."""
    folder = tmp_path_factory.mktemp("audit")
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *FAST, "--trials", "500",
                          "--report", folder / "r.json")
    assert rc == 0, err
    report = load_report(folder / "r.json")
    audits = {name: {e.id: e for e in ev.audit_entries(report["systems"][name], name)} for name in ("base", "finetuned")}
    return report, audits


def _gold_line(rid):
    return next(json.loads(x) for x in GOLD.read_text(encoding="utf-8").splitlines() if json.loads(x)["id"] == rid)


def test_s04_pairs_classes_and_reasons(sample):
    """finetuned s04 (gold line 4): three pairs, 0<->0 target 0 (wrong_target), 1<->1
    source 0 (wrong_source), 2<->2 full match; composite = (0.30 * 1 + 0.25 * 1/3 + 0.20 *
    1 + 0.10 * 1 + 0.15 * 1) / 1.0 = 0.8333 (entity F1 = 1/3: entity tp 1 of 3 and 3)."""
    report, audits = sample
    e = audits["finetuned"]["s04"]
    row = next(r for r in report["systems"]["finetuned"]["per_entry"] if r["id"] == "s04")
    assert (e.gold_line, e.pred_line, e.parse_status) == (4, 4, "ok")
    assert e.composite == pytest.approx(0.3 + 0.25 / 3 + 0.2 + 0.1 + 0.15)
    assert e.prompt == _gold_line("s04")["prompt"] and e.pairs == row["pairs"] and e.metrics == row["metrics"]
    assert [(p["gold_index"], p["pred_index"]) for p in e.pairs] == [(0, 0), (1, 1), (2, 2)]
    assert [p["class"] for p in e.pred] == ["wrong_target", "wrong_source", "match"]
    assert [g["class"] for g in e.gold] == ["wrong_target", "wrong_source", "found"]
    assert [p["reason"] for p in e.pred] == [
        "target `sudden algal growth` does not match gold `sudden algal growth triggered by volcanic ash` "
        "(field similarity 0)",
        "source `Kessler blooms` does not match gold `Kessler bloom` (field similarity 0)", ""]
    assert [g["reason"] for g in e.gold] == [
        "paired with predicted item 0, whose target `sudden algal growth` does not match",
        "paired with predicted item 1, whose source `Kessler blooms` does not match", ""]
    assert e.pred[1] == {"index": 1, "source": "Kessler blooms", "source_type": "concept", "relation": "measured_by",
                         "target": "chlorophyll-a concentration", "target_type": "concept", "weight": 0.6,
                         "valid": True, "class": "wrong_source", "flags": [], "reason": e.pred[1]["reason"]}
    assert all(g["in_prompt"] and g["valid"] for g in e.gold)
    assert list(e.as_json()) == ["id", "gold_line", "pred_line", "parse_status", "parse_reason", "composite",
                                 "metrics", "prompt", "gold", "pred", "pairs"]


def test_invalid_items_keep_the_reports_reasons_and_show_what_they_hold(sample):
    """base s02: items 0, 1 and 3 have a string relation (schema-invalid): their reasons are
    the row's invalid_items, their fields shown as written (no weight)."""
    report, audits = sample
    e = audits["base"]["s02"]
    row = next(r for r in report["systems"]["base"]["per_entry"] if r["id"] == "s02")
    invalid = [p for p in e.pred if p["class"] == "invalid"]
    assert [p["index"] for p in invalid] == [0, 1, 3] and not any(p["valid"] for p in invalid)
    assert [p["reason"] for p in invalid] == row["invalid_items"]
    assert (invalid[2]["source"], invalid[2]["relation"], invalid[2]["target"], invalid[2]["weight"]) == (
        "Fernbot 3", "made by", "Brightwater Robotics", None)
    assert [g["class"] for g in e.gold] == ["entities_absent", "entities_absent", "wrong_source", "entities_absent"]
    flat = audits["base"]["s25"].pred[1]    # {"subject", "predicate", "object"}: read as a flat triplet
    assert flat == {"index": 1, "source": "Lantern", "source_type": None, "relation": "developed by",
                    "target": "Mirehouse NLP group", "target_type": None, "weight": None, "valid": False,
                    "class": "invalid", "flags": [], "reason": "[1].source: missing"}
    assert e.gold[0]["reason"] == ("no prediction pairs with it; neither of its entities appears in the valid predictions "
                                 "(self-loops aside)")


def test_stage5_classes_and_flags_in_words(sample):
    _, audits = sample
    loop = audits["finetuned"]["s05"].pred[4]
    assert (loop["class"], loop["reason"]) == (
        "self_loop", "source and target are the same entity `Orrin-7 Sensor Array`: a self-loop, removed before matching")
    ungrounded = audits["finetuned"]["s08"].pred[3]
    assert (ungrounded["class"], ungrounded["reason"]) == (
        "ungrounded", "entity `Typeworks Foundry` is in neither the gold nor the prompt")
    swapped = audits["finetuned"]["s02"].pred[1]
    assert (swapped["class"], swapped["flags"]) == ("hallucinated_relation", ["reversed"])
    # the vocabulary in words a user can look up (before: "(SPEC.md (20 relations))", a file users do not have)
    assert swapped["reason"] == ("relation `works_for` is not in the vocabulary: the method (README, The method; 20 "
                                 "relations); reversed: its source and target are swapped against a gold triplet")
    duplicate = audits["base"]["s24"].pred[1]
    assert (duplicate["class"], duplicate["flags"]) == ("novel_grounded", ["duplicate"])
    assert duplicate["reason"].startswith("not in the gold, but both entities are gold titles or grounded")
    wrong_relation = audits["base"]["s24"].pred[2]
    assert wrong_relation["reason"] == "relation `native_to` does not match gold `located_in` (the entities match)"
    one = audits["base"]["s03"].gold[2]
    assert (one["class"], one["reason"]) == (
        "one_entity_predicted",
        "no prediction pairs with it; only one of its entities appears in the valid predictions (self-loops aside)")


def test_unparseable_answers_have_no_items(sample):
    """base s16: unparseable (no JSON array), composite 0.0 (only entity F1 = 0 is defined)."""
    _, audits = sample
    e = audits["base"]["s16"]
    assert (e.parse_status, e.pred, e.composite) == ("unparseable", [], 0.0)
    assert [g["class"] for g in e.gold] == ["entities_absent"] * 4


def test_every_entry_agrees_with_its_row(sample):
    """Identities against the report on all 2 x 25 entries: one predicted item per raw
    item, the classes the errors record holds, the gold items of the gold line."""
    report, audits = sample
    for name, entries in audits.items():
        rows = report["systems"][name]["per_entry"]
        assert list(entries) == [r["id"] for r in rows]
        for row in rows:
            e, items = entries[row["id"]], row["stats"]["errors"]["items"]
            assert len(e.pred) == row["metrics"]["n_pred_raw_items"]
            assert [p["class"] for p in e.pred] == items["pred"] and [g["class"] for g in e.gold] == items["gold"]
            assert len(e.gold) == len(_gold_line(row["id"])["triplets"])
            assert sum(p["valid"] for p in e.pred) == row["metrics"]["n_pred_valid"]


def test_a_report_without_the_errors_family_gets_the_classes_its_pairs_decide(tmp_path):
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--metrics", "hgr", *FAST, "--report", tmp_path / "r.json")
    assert rc == 0, err
    e = next(e for e in ev.audit_entries(load_report(tmp_path / "r.json")) if e.id == "s05")
    assert [p["class"] for p in e.pred] == ["wrong_target", "match", "match", "match", "self_loop"]
    assert [g["class"] for g in e.gold] == ["wrong_target", "found", "found", "found"]
    assert all(g["in_prompt"] for g in e.gold)   # grounded, computed here (no flags recorded)


def test_nan_and_infinite_numbers_are_shown_as_their_json_text(tmp_path):
    """A predicted weight NaN (the output text), a gold weight Infinity and a predicted
    title -Infinity: the audit entry shows the strings "NaN", "Infinity", "-Infinity"
    (JSON has no such number), and --html writes the page with them (before: ValueError
    "Out of range float values are not JSON compliant", exit 1)."""
    bad = T("Foo", "part_of", "Bar")
    bad["relation"]["weight"] = float("inf")
    gold = write(tmp_path / "g.jsonl", [{"id": "a", "prompt": "Foo is part of Bar.",
                                         "triplets": [bad, T("Foo", "part_of", "Baz")]}])
    pred = tmp_path / "p.jsonl"
    pred.write_text('{"id": "a", "output": "[{\\"source\\": {\\"title\\": \\"Foo\\", \\"type\\": \\"c\\"}, '
                    '\\"relation\\": {\\"type\\": \\"part_of\\", \\"weight\\": NaN}, \\"target\\": '
                    '{\\"title\\": -Infinity, \\"type\\": \\"c\\"}}]"}\n')
    rc, _, err = run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--quiet", "--report", tmp_path / "r.json",
                          "--html", tmp_path / "a.html")
    assert rc == 0, err
    (entry,) = ev.audit_entries(load_report(tmp_path / "r.json"), "p")
    assert (entry.gold[0]["weight"], entry.pred[0]["weight"], entry.pred[0]["target"]) == \
        ("Infinity", "NaN", "-Infinity")
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert '"weight":"Infinity"' in page and '"weight":"NaN"' in page and '"target":"-Infinity"' in page


def test_combined_file_missing_prediction_and_slices(tmp_path):
    """A gold id without a prediction line (pred_line null, status missing), and a
    combined file (gold and answer on one line)."""
    gold = write(tmp_path / "g.jsonl", [{"id": "a", "prompt": "X is based on Y.", "triplets": [T("X", "based_on", "Y")],
                                         "topic": "t1"},
                                        {"id": "b", "prompt": "P", "triplets": []}])
    pred = write(tmp_path / "p.jsonl", [{"id": "a", "triplets": [T("X", "based_on", "Y")]}])
    rc, _, err = run_main("--pred", pred, "--gold", gold, "--slice-by", "topic", *FAST, "--report", tmp_path / "r.json")
    assert rc == 0, err
    a, b = ev.audit_entries(load_report(tmp_path / "r.json"))
    assert (a.pred_line, a.slices, [p["class"] for p in a.pred]) == (1, {"topic": "t1"}, ["match"])
    assert (b.pred_line, b.parse_status, b.pred, b.gold, b.slices) == (None, "missing", [], [], {"topic": None})
    assert a.as_json()["slices"] == {"topic": "t1"}
    combined = write(tmp_path / "c.jsonl", [{"id": "c", "prompt": "X is based on Y.",
                                             "gold_parsed": [T("X", "based_on", "Y")],
                                             "pred_raw": json.dumps([T("X", "based_on", "Z")])}])
    rc, _, err = run_main("--pred", combined, *FAST, "--report", tmp_path / "c.json")
    assert rc == 0, err
    (c,) = ev.audit_entries(load_report(tmp_path / "c.json"))
    assert (c.gold_line, c.pred_line, [p["class"] for p in c.pred]) == (1, 1, ["wrong_target"])


# ------------------------------------------------------------------ refusals


@pytest.fixture
def copied(tmp_path):
    """A report of copies of the sample files (which the tests then change)."""
    gold, pred = shutil.copy(GOLD, tmp_path / "gold.jsonl"), shutil.copy(BASE, tmp_path / "base.jsonl")
    rc, _, err = run_main("--pred", pred, "--gold", gold, *FAST, "--report", tmp_path / "r.json")
    assert rc == 0, err
    return tmp_path, load_report(tmp_path / "r.json")


def test_a_changed_or_moved_file_is_refused(copied):
    folder, report = copied
    with (folder / "base.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("\n")
    with pytest.raises(ev.InputError, match=r"system base: .*base\.jsonl: the predictions file changed since it "
                                            r"was scored \(SHA-256"):
        ev.audit_entries(report, "base")
    (folder / "gold.jsonl").unlink()
    with pytest.raises(ev.InputError, match=r"gold\.jsonl: the gold file the report records no longer exists"):
        ev.AuditInputs.of_report(report, "base", pred_path=BASE)


@pytest.mark.parametrize("k, key, value, message", [
    (2, "id", "s99", r"gold\.jsonl: line 3: the gold line's id is 's03', the report's entry read from it is 's99'"),
    (0, "parse_status", "repaired", r"base\.jsonl: line 1: its answer parses as ok with 3 item\(s\) now, the report "
                                    r"records repaired with 3"),
], ids=["id", "parse"])
def test_a_line_that_is_not_the_rows_is_refused(copied, k, key, value, message):
    _, report = copied
    report["per_entry"][k][key] = value
    with pytest.raises(ev.InputError, match=message):
        ev.audit_entries(report, "base")


def test_streams_directories_and_reports_without_rows_are_refused(copied):
    _, report = copied
    streamed = json.loads(json.dumps(report))
    streamed["summary"]["inputs"]["pred"] = {"name": "stream", "sha256": "0" * 64, "path": None}
    with pytest.raises(ev.InputError, match="its predictions were read from a stream"):
        ev.audit_entries(streamed, "base")
    directory = {**report, "per_entry": [{**report["per_entry"][0], "ontology": "1_university"}]}
    with pytest.raises(ev.InputError, match="Text2KGBench directory run's entries cannot be audited"):
        ev.audit_entries(directory, "base")
    with pytest.raises(ev.InputError, match="system base: the report has no per-entry rows"):
        ev.audit_entries({"summary": report["summary"]}, "base")
