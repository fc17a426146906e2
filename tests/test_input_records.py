"""Input: records, fields, joining gold and predictions (load_inputs, load_vocabulary):
encodings, chat-format gold, ids and line order, duplicates, bad gold lines
(``--skip-bad-gold``), predictions without gold, invalid gold items named with file and
line. Each case goes through the real input layer and the scoring, or through the CLI
(``evaluate.main``) when it is about exit codes, stderr or the report file.

Reference triplets: A = Acme Inc -located_in-> City Y (0.9), B = Acme Inc -founded_by->
Person Z (0.8), all endpoints of type ``entity`` (conftest.py).

Which field of a line holds the triplets (``--pred-field``/``--gold-field``), lines without
one, fields that disagree, how gold and prediction lines are paired (``--join``), gold
items that are invalid or all empty (issue 9 items 1 and 7).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from conftest import ACME_A, ACME_B, run_main
from helpers import (
    ACME_PROMPT,
    assert_perfect,
    b,
    cli_files,
    gold_rec,
    line,
    score_files,
    write,
    write_jsonl,
)

import evaluate as ev


def test_bom_crlf_blank_and_whitespace_lines(tmp_path):
    gold = (b"\xef\xbb\xbf" + line(gold_rec("r1", [ACME_A])).rstrip(b"\n") + b"\r\n"
            + b"\r\n"
            + line(gold_rec("r2", [ACME_B])).rstrip(b"\n") + b"\r\n"
            + b"  \t ")
    pred = (b"\xef\xbb\xbf" + line({"id": "r1", "triplets": [ACME_A]}).rstrip(b"\n") + b"\r\n"
            + b"\r\n"
            + line({"id": "r2", "triplets": [ACME_B]}).rstrip(b"\n") + b"\r\n"
            + b"   ")
    rep = score_files(tmp_path, gold, pred)
    assert rep["summary"]["n_entries"] == 2
    assert [e["id"] for e in rep["per_entry"]] == ["r1", "r2"]
    # gold lines are physical lines 1 and 3 (line 2 is the blank CRLF line)
    assert [e["gold_line"] for e in rep["per_entry"]] == [1, 3]
    for row in rep["per_entry"]:
        assert_perfect(row)
        assert row["metrics"]["composite"] == 1.0
    micro = rep["summary"]["micro"]
    assert micro["entity_f1"] == micro["triplet_f1"] == 1.0
    assert rep["summary"]["input_problems"] == []


def test_invalid_utf8_prediction_line_is_reported_and_scored_unparseable(tmp_path):
    gold = [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])]
    bad = b'{"id": "r2", "output": "[' + b.encode() + b' caf\xff"}\n'
    pred = [{"id": "r1", "triplets": [ACME_A]}, bad]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 0, err
    # reported on stderr and in the report, with its line number
    assert "line 2" in err and "UTF-8" in err
    problems = rep["summary"]["input_problems"]
    assert len(problems) == 1 and "line 2" in problems[0] and "UTF-8" in problems[0]
    r1, r2 = rep["per_entry"]
    assert r1["id"] == "r1" and r2["id"] == "r2"
    assert_perfect(r1)
    assert r2["parse_status"] == "unparseable"
    assert r2["pred_line"] == 2
    assert r2["metrics"]["n_pred_raw_items"] == 0
    assert r2["metrics"]["schema_score"] == 0.0
    assert r2["metrics"]["composite"] == 0.0
    assert rep["summary"]["totals"]["unparseable_predictions"] == 1


def test_gold_id_without_prediction_line_is_missing(tmp_path):
    rep = score_files(tmp_path, [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])], [{"id": "r1", "triplets": [ACME_A]}])
    r1, r2 = rep["per_entry"]
    assert_perfect(r1)
    assert r2["parse_status"] == "missing"
    assert r2["pred_line"] is None
    assert r2["metrics"]["n_pred_raw_items"] == 0
    assert r2["metrics"]["composite"] == 0.0
    assert rep["summary"]["totals"]["missing_predictions"] == 1
    assert rep["summary"]["parse_status"]["missing"] == 1


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xef\xbb\xbf"], ids=["zero-bytes", "blank-lines", "bom-only"])
def test_empty_gold_file_exits_2(tmp_path, content):
    rc, out, err, rep = cli_files(tmp_path, content, [{"id": "r1", "triplets": [ACME_A]}])
    assert rc == 2
    assert "no gold records" in err and "gold.jsonl" in err
    assert rep is None


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"], ids=["utf16-bom", "utf16-no-bom"])
def test_utf16_gold_file_exits_2(tmp_path, encoding):
    text = line(gold_rec("r1", [ACME_A])).decode() * 3
    rc, out, err, rep = cli_files(tmp_path, text.encode(encoding), [{"id": "r1", "triplets": [ACME_A]}])
    assert rc == 2
    assert "not UTF-8 JSONL" in err and "gold.jsonl" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_binary_gold_file_exits_2(tmp_path):
    rc, out, err, rep = cli_files(tmp_path, bytes(range(256)) * 8, [{"id": "r1", "triplets": [ACME_A]}])
    assert rc == 2
    assert "not UTF-8 JSONL" in err
    assert len(err.strip().splitlines()) == 1, err


def test_invalid_json_in_gold_exits_2_naming_file_and_line(tmp_path):
    gold = [gold_rec("r1", [ACME_A]), b'{"id": "r2", "prompt": "x", "triplets": [\n', gold_rec("r3", [ACME_B])]
    pred = [{"id": "r1", "triplets": [ACME_A]}, {"id": "r3", "triplets": [ACME_B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    assert "gold.jsonl" in err and "line 2" in err
    assert "Traceback" not in err
    assert rep is None


def test_skip_bad_gold_reports_and_excludes(tmp_path):
    gold = [gold_rec("r1", [ACME_A]), b'{"id": "r2", "prompt": "x", "triplets": [\n', gold_rec("r3", [ACME_B])]
    pred = [{"id": "r1", "triplets": [ACME_A]}, {"id": "r3", "triplets": [ACME_B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--skip-bad-gold")
    assert rc == 0, err
    assert "line 2" in err
    assert [e["id"] for e in rep["per_entry"]] == ["r1", "r3"]
    assert rep["summary"]["n_entries"] == 2
    problems = rep["summary"]["input_problems"]
    assert len(problems) == 1 and "line 2" in problems[0] and "gold.jsonl" in problems[0]
    for row in rep["per_entry"]:
        assert_perfect(row)


def test_skip_bad_gold_drops_the_prediction_of_the_excluded_line(tmp_path):
    # the usual case: the prediction file has a line for every gold id, including the
    # id of the unreadable gold line (readable from its raw bytes). Excluding the gold
    # line must not turn its prediction into a "prediction id with no gold" error.
    gold = [gold_rec("r1", [ACME_A]), b'{"id": "r2", "prompt": "x", "triplets": [\n', gold_rec("r3", [ACME_B])]
    pred = [{"id": "r1", "triplets": [ACME_A]}, {"id": "r2", "triplets": [ACME_A]}, {"id": "r3", "triplets": [ACME_B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--skip-bad-gold")
    assert rc == 0, err
    assert [e["id"] for e in rep["per_entry"]] == ["r1", "r3"]


def test_duplicate_ids_exit_2_listing_them(tmp_path):
    gold = [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])]
    pred = [{"id": "r1", "triplets": []}, {"id": "r2", "triplets": [ACME_B]}, {"id": "r1", "triplets": [ACME_A]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    listed = re.search(r"duplicate prediction ids: ([^;]*);", err)
    assert listed is not None, err
    assert listed.group(1) == "'r1' ('r1' on lines 1, 3)"  # quoted (repr-like), so padded ids are visible
    assert rep is None


def test_a_number_id_and_its_string_are_one_id_named_with_both_lines(tmp_path):
    # ids are compared as text: gold 1 (line 2) and "1" (line 3) repeat; "r0" (line 1), written
    # alike, stays out of the clause; the same check for the prediction side
    gold = [gold_rec("r0", []), gold_rec(1, [ACME_A]), gold_rec("1", [ACME_B])]
    rc, _, err, _ = cli_files(tmp_path, gold, [{"id": "1", "triplets": []}])
    assert rc == 2
    assert err == (f"error: {tmp_path / 'gold.jsonl'}: duplicate gold ids: '1' (lines 2 and 3: 1 and \"1\" are the "
                   "same id; ids are compared as text); pass --duplicate-ids first|last to keep one copy of each "
                   "(--duplicate-ids last reproduces Text2KGBench's rule: its evaluator keeps the last line of a "
                   "repeated id)\n")
    pred = [{"id": "r1", "triplets": []}, {"id": "r1", "triplets": []}, {"id": 7, "triplets": []},
            {"id": "7", "triplets": []}]
    rc, _, err, _ = cli_files(tmp_path, [gold_rec("r1", []), gold_rec("7", [])], pred)
    assert rc == 2 and ("duplicate prediction ids: '7', 'r1' (lines 3 and 4: 7 and \"7\" are the same id; ids are "
                        "compared as text); pass") in err, err


def test_duplicate_ids_last_keeps_last_and_reports_count(tmp_path):
    gold = [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])]
    pred = [{"id": "r1", "triplets": []}, {"id": "r2", "triplets": [ACME_B]}, {"id": "r1", "triplets": [ACME_A]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--duplicate-ids", "last")
    assert rc == 0, err
    assert rep["summary"]["duplicates_dropped"] == 1
    assert any("1 duplicate" in p for p in rep["summary"]["input_problems"])
    # the notice names the repeated ids and the lines dropped (line 1: the first copy of 'r1')
    assert any("pred.jsonl: 1 duplicate prediction line(s) dropped (--duplicate-ids last; 1 id(s) repeated: "
               "'r1'; dropped line 1)" in p for p in rep["summary"]["input_problems"])
    r1, r2 = rep["per_entry"]
    assert r1["pred_line"] == 3  # the last copy, which holds [ACME_A]
    assert_perfect(r1)
    assert_perfect(r2)
    # and "first" keeps the empty first copy
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--duplicate-ids", "first")
    assert rc == 0
    assert any("1 id(s) repeated: 'r1'; dropped line 3)" in p for p in rep["summary"]["input_problems"])
    assert rep["per_entry"][0]["pred_line"] == 1
    assert rep["per_entry"][0]["metrics"]["n_pred_raw_items"] == 0


def test_deeply_nested_prediction_line_is_a_reported_bad_line(tmp_path):
    depth = 10 ** 5
    deep = b'{"id": "r2", "triplets": ' + b"[" * depth + b"]" * depth + b"}\n"
    gold = [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])]
    pred = [{"id": "r1", "triplets": [ACME_A]}, deep]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 0, err
    assert "Traceback" not in err
    assert "line 2" in err and "nested" in err
    r1, r2 = rep["per_entry"]
    assert_perfect(r1)
    assert r2["parse_status"] == "unparseable"
    assert any("line 2" in p and "nested" in p for p in rep["summary"]["input_problems"])


def test_prediction_id_without_gold_exits_2_listing_it(tmp_path):
    gold = [gold_rec("r1", [ACME_A])]
    pred = [{"id": "r1", "triplets": [ACME_A]}, {"id": "r9", "triplets": [ACME_B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    assert "r9" in err and "no gold" in err
    assert rep is None


def test_join_by_line_order_without_ids(tmp_path):
    gold = [gold_rec(None, [ACME_A]), gold_rec(None, [ACME_B])]
    pred = [{"triplets": [ACME_A]}, {"triplets": [ACME_B]}]
    rep = score_files(tmp_path, gold, pred)
    assert [e["pred_line"] for e in rep["per_entry"]] == [1, 2]
    for row in rep["per_entry"]:
        assert_perfect(row)
    # swapped order pairs A with B: nothing matches (entity F1 0 in both entries)
    rep = score_files(tmp_path, gold, list(reversed(pred)))
    assert [e["metrics"]["entity_tp"] for e in rep["per_entry"]] == [0, 0]


def test_non_object_prediction_line_never_mispairs_ids(tmp_path):
    # ids on every gold line and on every prediction object, predictions NOT in gold
    # order, and one prediction line that is valid JSON but not an object (a bare array).
    # Whatever the evaluator does with that line (report it, count r2 as missing, or
    # refuse the input), it must never pair a gold record with a prediction that carries
    # a different id: here gold r1 must get r1's prediction, not r3's.
    C = {"source": {"title": "Person Z", "type": "entity"}, "relation": {"type": "located_in", "weight": 0.8},
         "target": {"title": "City Q", "type": "entity"}}
    gold = [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B]), gold_rec("r3", [C])]
    pred = [{"id": "r3", "triplets": [C]}, json.dumps([ACME_B]).encode() + b"\n", {"id": "r1", "triplets": [ACME_A]}]
    g = write(tmp_path / "gold.jsonl", gold)
    p = write(tmp_path / "pred.jsonl", pred)
    try:
        loaded = ev.load_inputs(p, g)
    except ev.InputError:
        return  # refusing the input is acceptable; silently mis-pairing is not
    for entry in loaded.entries:
        assert entry.pred.id is None or entry.pred.id == entry.gold.id, (entry.gold.id, entry.pred.id)
    rows = {e["id"]: e for e in ev.evaluate_entries(loaded.entries, similarity=ev.Similarity())["per_entry"]}
    assert_perfect(rows["r1"])
    assert_perfect(rows["r3"])
    assert any("line 2" in problem for problem in loaded.problems), loaded.problems


def test_join_by_line_order_count_mismatch_exits_2(tmp_path):
    gold = [gold_rec(None, [ACME_A]), gold_rec(None, [ACME_B])]
    pred = [{"triplets": [ACME_A]}, {"triplets": [ACME_B]}, {"triplets": []}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    assert "line order" in err and "2" in err and "3" in err
    assert rep is None


def test_relations_file_with_inline_comments(tmp_path):
    path = tmp_path / "rel.txt"
    path.write_text("# vocabulary\nextends  # the usual one\n\nbased_on\n", encoding="utf-8")
    assert ev.load_vocabulary(path) == ("extends", "based_on")


def test_invalid_gold_items_are_named_with_file_and_line(tmp_path, capsys):
    bad = dict(ACME_A, relation={"type": "located_in", "weight": "0.9"})
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": "1", "prompt": "p", "triplets": [bad, ACME_B]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triplets": [ACME_B]}])
    report = tmp_path / "r.json"
    assert ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--report", str(report)]) == 0
    err = capsys.readouterr().err
    items = json.loads(report.read_text())["summary"]["invalid_gold_items"]
    assert items == ['gold.jsonl line 1: [0].relation.weight: expected a number in [0, 1], found "0.9"']
    assert "1 schema-invalid gold item(s) excluded" in err


def test_chat_format_gold_lines(tmp_path):
    gold = write_jsonl(tmp_path / "chat.jsonl", [
        {"id": "1", "messages": [{"role": "system", "content": "Extract triplets."},
                                 {"role": "user", "content": "Acme Inc is located in City Y."},
                                 {"role": "assistant", "content": "```json\n" + json.dumps([ACME_A]) + "\n```"}]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "output": json.dumps([ACME_A])}])
    loaded = ev.load_inputs(pred, gold)
    record = loaded.entries[0].gold
    # user content = prompt, assistant content = the gold JSON (parsed like model text)
    assert record.prompt == "Acme Inc is located in City Y."
    assert record.items == [ACME_A]
    report = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity())
    assert report["summary"]["macro"]["composite"] == 1.0


def test_chat_format_gold_without_assistant_message_is_exit_2(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "chat.jsonl", [{"id": "1", "messages": [{"role": "user", "content": "x"}]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triplets": []}])
    code = ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", str(tmp_path / "r.json")])
    assert code == 2
    assert "line 1" in capsys.readouterr().err


# ------------------------------------------------ fields and joining (issue 9 items 1, 7)


def gold_file(tmp_path: Path, ids: bool = True) -> Path:
    rows = [{"prompt": ACME_PROMPT, "triplets": [ACME_A]}, {"prompt": ACME_PROMPT, "triplets": [ACME_B]}]
    if ids:
        rows = [{"id": f"r{k + 1}", **r} for k, r in enumerate(rows)]
    return write_jsonl(tmp_path / "gold.jsonl", rows)


def evaluate(tmp_path: Path, pred_rows: list, *args: str) -> tuple[int, str, str, dict | None]:
    """Run the CLI on gold_file() and ``pred_rows``; (status, stdout, stderr, report or None)."""
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    pred = write_jsonl(tmp_path / "pred.jsonl", pred_rows)
    rc, out, err = run_main("--pred", pred, "--gold", gold_file(tmp_path), "--no-embeddings",
                            "--report", report, *args)
    return rc, out, err, json.loads(report.read_text()) if report.exists() else None


def kinds(report: dict) -> list[str]:
    return [n["kind"] for n in report["summary"]["notices"]]


# ------------------------------------------------------------------ item 1: unrecognised fields


@pytest.mark.parametrize("key, value", [
    ("generated_text", json.dumps([ACME_A])),   # raw text under an unknown key
    ("pred", [ACME_A]),                          # a parsed list under an unknown key
    ("answer", "[]"),
])
def test_no_line_with_a_prediction_field_is_exit_2_naming_keys(tmp_path, key, value):
    rc, out, err, rep = evaluate(tmp_path, [{"id": "r1", key: value}, {"id": "r2", key: value}])
    assert rc == 2 and rep is None
    assert "pred.jsonl" in err and "no line has a recognised prediction field" in err
    assert f"keys found: {', '.join(sorted(['id', key]))};" in err
    assert "accepted: triplets, pred_parsed, prediction, triples, output, pred_raw, response" in err
    assert "--pred-field NAME" in err


@pytest.mark.parametrize("key, value", [("generated_text", json.dumps([ACME_A])), ("pred", [ACME_A])])
def test_pred_field_names_the_field(tmp_path, key, value):
    # the named field holds raw text (a string: parsed) or a parsed list: both score [A] vs [A] perfectly
    rc, out, err, rep = evaluate(tmp_path, [{"id": "r1", key: value}, {"id": "r2", key: []}],
                                 "--pred-field", key)
    assert rc == 0, err
    r1, r2 = rep["per_entry"]
    assert r1["metrics"]["triplet_f1"] == 1.0 and r1["parse_status"] == "ok"
    assert r2["metrics"]["full_tp"] == 0 and r2["parse_status"] == "ok"
    assert rep["summary"]["config"]["pred_field"] == key
    assert rep["summary"]["notices"] == []


def test_some_lines_without_a_prediction_field_are_counted_missing_and_noticed(tmp_path):
    rc, out, err, rep = evaluate(tmp_path, [{"id": "r1", "triplets": [ACME_A]}, {"id": "r2", "pred": [ACME_B]}])
    assert rc == 0, err
    r1, r2 = rep["per_entry"]
    assert r1["metrics"]["triplet_f1"] == 1.0
    assert r2["parse_status"] == "missing"
    assert r2["parse_reason"] == "no prediction field (keys found: id, pred)"
    assert rep["summary"]["parse_status"]["missing"] == 1
    assert kinds(rep) == ["no_prediction_field"]
    message = rep["summary"]["notices"][0]["message"]
    assert "pred.jsonl: 1 line(s) without a prediction field" in message and "(line 2;" in message
    assert message in rep["summary"]["input_problems"]
    assert "no_prediction_field" in out and "(line 2;" in out  # on stdout, in the summary


def test_gold_file_passed_alone_as_pred_is_exit_2(tmp_path):
    rc, out, err = run_main("--pred", gold_file(tmp_path), "--no-embeddings", "--report", tmp_path / "r.json")
    assert rc == 2
    assert "looks like a gold file" in err and "--gold" in err and "--pred" in err
    assert "keys found: id, prompt, triplets" in err


def test_gold_field_names_the_gold_field(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": ACME_PROMPT, "expected": [ACME_A, ACME_B]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}])
    with pytest.raises(ev.InputError) as info:
        ev.load_inputs(pred, gold)
    message = str(info.value)
    assert "g.jsonl: line 1: no gold triplets: keys found: expected, id, prompt;" in message
    assert "accepted: triplets, gold, gold_parsed, triples, gold_raw (or 'messages')" in message
    assert "--gold-field NAME" in message
    loaded = ev.load_inputs(pred, gold, gold_field="expected")
    assert loaded.entries[0].gold.items == [ACME_A, ACME_B]
    # answer text under the named field is parsed like gold_raw
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": ACME_PROMPT, "expected": "```json\n[" +
                                               json.dumps(ACME_A) + "]\n```"}])
    assert ev.load_inputs(pred, gold, gold_field="expected").entries[0].gold.items == [ACME_A]


# --------------------------------------------------------- item 7: fields that disagree, joins


def test_two_prediction_fields_that_disagree_are_noticed_and_the_first_is_scored(tmp_path):
    rc, out, err, rep = evaluate(tmp_path, [{"id": "r1", "triplets": [ACME_A], "pred_parsed": [ACME_B]},
                                            {"id": "r2", "triplets": [ACME_B], "pred_parsed": [ACME_B]}])
    assert rc == 0, err
    r1, r2 = rep["per_entry"]
    assert r1["metrics"]["triplet_f1"] == 1.0  # 'triplets' ([ACME_A]) was scored against gold [ACME_A]
    assert "fields 'triplets', 'pred_parsed' disagree; scored 'triplets'" in r1["parse_reason"]
    assert r2["parse_reason"] == ""  # equal values are no problem
    assert kinds(rep) == ["conflicting_fields"]
    assert "1 line(s) with prediction fields that disagree (line 1;" in rep["summary"]["notices"][0]["message"]


def test_raw_fields_that_disagree_are_noticed_too():
    pred = ev.prediction_from_record({"output": json.dumps([ACME_A]), "response": "[]"}, 3)
    assert pred.items == [ACME_A] and pred.issue == "conflicting_fields"
    assert "fields 'output', 'response' disagree; scored 'output'" in pred.reason


@pytest.mark.parametrize("gold_ids, pred_ids", [(False, True), (True, False)])
def test_ids_on_one_side_only_are_refused_unless_join_order(tmp_path, gold_ids, pred_ids):
    # predictions in reverse order: pairing by line order would pair gold [A] with [B]
    preds = [{"triplets": [ACME_B]}, {"triplets": [ACME_A]}]
    if pred_ids:
        preds = [{"id": "r2", **preds[0]}, {"id": "r1", **preds[1]}]
    report = tmp_path / "r.json"
    args = ("--pred", write_jsonl(tmp_path / "p.jsonl", preds), "--gold", gold_file(tmp_path, gold_ids),
            "--no-embeddings", "--report", report)
    rc, out, err = run_main(*args)
    assert rc == 2 and not report.exists()
    assert "cannot pair the records safely" in err and "--join order" in err
    rc, out, err = run_main(*args, "--join", "order")
    assert rc == 0, err
    rep = json.loads(report.read_text())
    assert [row["metrics"]["full_tp"] for row in rep["per_entry"]] == [0, 0]  # asked for: ACME_A vs ACME_B, ACME_B vs ACME_A
    assert kinds(rep) == ["join_by_line_order"] and rep["summary"]["config"]["join"] == "order"


# ------------------------------------------- issue 17 item 1: a join the tool suggests never mis-pairs

_NB_PROMPTS = ["Alpha Corp makes Widget.", "Beta Labs introduced Gizmo, a tool for long documents.",
               "Gamma Group uses Theta.", "Delta Inc acquired Epsilon Ltd.", "Zeta Systems extends the Eta."]


def _notebook_files(tmp_path: Path, *, change_prompt: int | None = None) -> tuple[Path, Path]:
    """A gold file without ids (5 records; a blank line 3, so the records are lines 1, 2, 4,
    5, 6), and the notebook's output for it as generate_predictions.py writes it: longest
    prompt first, id = input_line, id_source "input_line", each answer the gold itself."""
    golds = [[{"source": {"title": p.split()[0], "type": "entity"}, "relation": {"type": "related_to", "weight": 0.8},
               "target": {"title": p.split()[-1].rstrip("."), "type": "entity"}}] for p in _NB_PROMPTS]
    rows = [{"prompt": p, "triplets": t} for p, t in zip(_NB_PROMPTS, golds)]
    gold = write_jsonl(tmp_path / "gold.jsonl", [*rows[:2], b"\n", *rows[2:]])
    lines = [1, 2, 4, 5, 6]
    out = [{"id": n, "prompt": p, "gold_parsed": t, "pred_raw": json.dumps(t), "input_line": n,
            "id_source": "input_line"} for n, p, t in zip(lines, _NB_PROMPTS, golds)]
    out.sort(key=lambda o: -len(o["prompt"]))  # batch order: lines 2, 5, 6, 1, 4
    if change_prompt is not None:
        out[change_prompt]["prompt"] = "Something else entirely, " + out[change_prompt]["prompt"]
    return gold, write_jsonl(tmp_path / "gen.jsonl", out)


def test_notebook_output_joins_its_input_gold_by_input_line(tmp_path):
    # Today: refused ("--join order" suggested), and --join order pairs line 2's answer with
    # gold line 1 and so on (entity F1 0.2105 on 5 perfect answers). Joined by input_line,
    # each of the 5 answers is its gold: entity F1 1.0 (micro: 10 of 10 entities).
    gold, gen = _notebook_files(tmp_path)
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", gen, "--gold", gold, "--no-embeddings", "--report", report)
    assert rc == 0, err
    rep = json.loads(report.read_text())
    assert rep["summary"]["micro"]["entity_f1"] == 1.0
    assert [row["gold_line"] for row in rep["per_entry"]] == [1, 2, 4, 5, 6]
    assert kinds(rep) == ["join_by_input_line"]
    assert rep["summary"]["notices"][0]["message"] == (
        f"records paired by input line: each line of {gen} (written by the notebook, id_source 'input_line') "
        f"with the line of {gold} its input_line names, their prompts equal")


def test_notebook_output_with_another_prompt_than_its_gold_line_is_refused(tmp_path):
    # the 4th line written (input line 1, "Alpha Corp makes Widget.") carries another prompt
    gold, gen = _notebook_files(tmp_path, change_prompt=3)
    rc, out, err = run_main("--pred", gen, "--gold", gold, "--no-embeddings", "--no-report")
    assert rc == 2
    assert (f"{gen}: line 4: its prompt differs from the prompt of {gold}: line 1 (its input_line): "
            "'Something else entirely, Alpha Corp makes Widget.' vs 'Alpha Corp makes Widget.'; the gold "
            "file may not be the notebook's input") in err


def test_refusal_does_not_suggest_join_order_for_ids_that_are_shuffled_line_numbers(tmp_path):
    # the notebook's output without id_source (an older notebook): ids "2", "5", "6", "1", "4"
    # are the gold's line numbers in another order; --join order would mis-pair them
    gold, gen = _notebook_files(tmp_path)
    rows = [{k: v for k, v in json.loads(x).items() if k != "id_source"} for x in gen.read_text().splitlines()]
    old = write_jsonl(tmp_path / "old.jsonl", rows)
    rc, out, err = run_main("--pred", old, "--gold", gold, "--no-embeddings", "--no-report")
    assert rc == 2 and "Pass --join order" not in err
    assert (f"the ids of {old} are the line numbers of {gold} in another order (line 1 has id '2', paired by "
            "line order with line 1)") in err
    assert "--join order would pair them wrongly" in err
    # and --join order itself is refused: it would pair input line 2's answer with gold line 1, and so on
    # (entity F1 0.2105 with exit 0 on main)
    rc, out, err = run_main("--pred", old, "--gold", gold, "--no-embeddings", "--no-report", "--join", "order")
    assert rc == 2
    assert (f"--join order: the ids of {old} are the line numbers of {gold} in another order (line 1 has id '2', "
            "paired by line order with line 1)") in err


def test_join_order_with_ids_that_disagree_is_refused():
    # predictions/finetuned.jsonl reversed against gold/gold.jsonl: every pair but the middle
    # one (s13 with s13) has two different ids: 24 of 25 (entity F1 0.0678 with exit 0 today)
    import tempfile
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        shuffled = Path(tmp) / "shuffled.jsonl"
        shuffled.write_text("".join(reversed((root / "predictions/finetuned.jsonl").read_text().splitlines(True))))
        rc, out, err = run_main("--pred", shuffled, "--gold", root / "gold/gold.jsonl", "--join", "order",
                                "--no-embeddings", "--no-report")
    assert rc == 2
    assert (f"--join order: the ids of 24 of the 25 pairs by line order differ (gold line 1 id 's01' with "
            "prediction line 1 id 's25'; gold line 2 id 's02' with prediction line 2 id 's24'; gold line 3 id "
            f"'s03' with prediction line 3 id 's23' ...): {shuffled} is not in the order of "
            f"{root / 'gold/gold.jsonl'}; join by id (--join auto) instead") in err


# ------------ issue 17 items 1, 8 (review): ids that are positions, the notebook's lines, no shared id
#
# Gold e1: [Acme -founded_by-> Alice, Acme -located_in-> Paris], e2: [Zeta -created_by-> Bob];
# answers: e1 [Acme -founded_by-> Alice], e2 [Zeta -created_by-> Bob, Zeta -located_in-> Mars].
# Paired right: e1 P 1/1, R 1/2 -> F1 2/3; e2 P 1/2, R 1/1 -> F1 2/3; entity and triplet F1
# 2/3 (macro and micro: 2 of 3 predicted, 2 of 3 gold). Paired the wrong way round: 0.

def _ent(title: str) -> dict:
    return {"title": title, "type": "entity"}


def _t(src: str, rel: str, tgt: str, w: float) -> dict:
    return {"source": _ent(src), "relation": {"type": rel, "weight": w}, "target": _ent(tgt)}


_E1_PROMPT, _E2_PROMPT = "Alice founded Acme. Acme is located in Paris.", "Bob wrote Zeta."
_E1_GOLD = [_t("Acme", "founded_by", "Alice", 1.0), _t("Acme", "located_in", "Paris", 0.9)]
_E2_GOLD = [_t("Zeta", "created_by", "Bob", 0.8)]
_E1_PRED = [_t("Acme", "founded_by", "Alice", 1.0)]
_E2_PRED = [_t("Zeta", "created_by", "Bob", 0.8), _t("Zeta", "located_in", "Mars", 0.5)]


def _review_gold(tmp_path: Path, ids: tuple = ("e1", "e2"), *, blank_first: bool = False,
                 name: str = "g.jsonl") -> Path:
    """The 2-entry gold (ids None: that line has none), a blank first line when asked."""
    rows = [{**({"id": rid} if rid is not None else {}), "prompt": p, "triplets": t}
            for rid, p, t in zip(ids, (_E1_PROMPT, _E2_PROMPT), (_E1_GOLD, _E2_GOLD))]
    return write_jsonl(tmp_path / name, ([b"\n"] if blank_first else []) + rows)


def _review_pred(tmp_path: Path, ids: tuple, *, reverse: bool = True, name: str = "p.jsonl") -> Path:
    """The answers, e2's first when ``reverse``; ``ids`` by line (None: no id on that line)."""
    answers = [_E2_PRED, _E1_PRED] if reverse else [_E1_PRED, _E2_PRED]
    rows = [{**({"id": rid} if rid is not None else {}), "triplets": t} for rid, t in zip(ids, answers)]
    return write_jsonl(tmp_path / name, rows)


def _notebook_lines(tmp_path: Path, ids: tuple, sources: tuple, *, instructions: tuple | None = None,
                    name: str = "nb.jsonl") -> Path:
    """generate_predictions.py's output for the 2 gold records, in batch order (input line 2, the
    shorter prompt "Bob wrote Zeta." here, then input line 1); ``ids``/``sources`` by written line."""
    rows = []
    for k, (rid, source, (n, prompt, gold, answer)) in enumerate(zip(ids, sources, [
            (2, _E2_PROMPT, _E2_GOLD, _E2_PRED), (1, _E1_PROMPT, _E1_GOLD, _E1_PRED)])):
        instruction = (instructions or ({"name": "schema", "sha256": "abcdef123456"},) * 2)[k]
        rows.append({**({"id": rid} if rid is not None else {}), "prompt": prompt, "gold_parsed": gold,
                     "pred_raw": json.dumps(answer), "finish_reason": "stop", "input_line": n,
                     "id_source": source, "instruction": instruction})
    return write_jsonl(tmp_path / name, rows)


def _f1s(report: dict) -> tuple[float, float]:
    return report["summary"]["micro"]["entity_f1"], report["summary"]["macro"]["entity_f1"]


def _run(pred: Path, gold: Path | None, *args: str) -> tuple[int, str, dict | None]:
    report = pred.with_suffix(".report.json")
    report.unlink(missing_ok=True)
    rc, out, err = run_main("--pred", pred, *(("--gold", gold) if gold else ()), "--no-embeddings",
                            "--report", report, *args)
    return rc, err, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("ids, blank_first, numbers, pair", [
    ((1, 0), False, "counted from 0 (0 to 1)", "line 1 has id '1', paired by line order with record 0, line 1"),
    (("2", "1"), True, "counted from 1 (1 to 2)", "line 1 has id '2', paired by line order with record 1, line 2"),
])
def test_ids_that_are_record_numbers_in_another_order_are_refused(tmp_path, ids, blank_first, numbers, pair):
    # 0-based indices 1, 0, and (gold with a blank first line: records on lines 2, 3) 1-based
    # record numbers 2, 1: on main the refusal said "Pass --join order", which scored 0.0000
    # instead of 0.6667 with exit 0
    gold = _review_gold(tmp_path, (None, None), blank_first=blank_first)
    pred = _review_pred(tmp_path, ids)
    rc, err, rep = _run(pred, gold)
    assert rc == 2 and rep is None and "Pass --join order" not in err
    wrong = (f"the ids of {pred} are the record numbers of {gold} {numbers} in another order ({pair}): they "
             "look like ids given from positions, and pairing by line order would mis-pair them")
    assert f"; {wrong}. --join order would pair them wrongly: give the gold lines the same ids" in err
    rc, err, rep = _run(pred, gold, "--join", "order")
    assert rc == 2 and rep is None
    assert (f"--join order: {wrong}; give the other side the same ids, or (the notebook's output) grade it "
            "against its input with --join auto") in err


@pytest.mark.parametrize("side", ["pred", "gold"])
def test_integer_ids_out_of_order_are_never_offered_join_order(tmp_path, side):
    # ids 3, 1 (a gap: not a permutation of positions) on one side, none on the other: on main
    # the refusal suggested --join order (F1 0.0000, exit 0); now it says why not, and an
    # explicit --join order is allowed (numeric dataset ids) with notice ids_out_of_order
    if side == "pred":
        gold, pred = _review_gold(tmp_path, (None, None)), _review_pred(tmp_path, ("3", "1"))
        path, other = pred, "gold"
    else:  # gold ids 3, 1; the answers in gold order, without ids: paired by line order, F1 2/3
        gold, pred = _review_gold(tmp_path, ("3", "1")), _review_pred(tmp_path, (None, None), reverse=False)
        path, other = gold, "prediction"
    rc, err, rep = _run(pred, gold)
    assert rc == 2 and rep is None and "Pass --join order" not in err and "--join order would" not in err
    assert (f"; the ids of {path} are integers out of increasing order (line 1 has id '3', line 2 has id '1'): "
            "they look like positions in another order (record numbers of a shuffled or batched file), so "
            f"pairing by line order would likely mis-pair them. Give the {other} lines the same ids, or, for the "
            "notebook's output, grade it against the notebook's input file") in err
    rc, err, rep = _run(pred, gold, "--join", "order")
    assert rc == 0, err
    assert kinds(rep) == ["ids_out_of_order", "join_by_line_order"]
    assert rep["summary"]["notices"][0]["message"] == (
        f"{path}: its ids are integers out of increasing order (line 1 has id '3', line 2 has id '1'), paired "
        "by line order as --join order asks: right for numeric dataset ids, wrong if they are positions in "
        f"another order (then give the {other} lines the same ids and join by id)")
    # pred side: the e2 answer with gold e1 and the reverse: 0; gold side: in order, 2/3
    assert _f1s(rep) == ((0.0, 0.0) if side == "pred" else (pytest.approx(2 / 3), pytest.approx(2 / 3)))
    # ids 10, 20 in increasing order are no sign of another order: as before, the refusal
    # suggests --join order, which pairs them in order (F1 2/3) with only the join notice
    if side == "pred":
        pred = _review_pred(tmp_path, ("10", "20"), reverse=False)
        rc, err, rep = _run(pred, gold)
        assert rc == 2 and "Pass --join order to pair the k-th prediction line with the k-th gold line" in err
        rc, err, rep = _run(pred, gold, "--join", "order")
        assert rc == 0, err
        assert kinds(rep) == ["join_by_line_order"] and _f1s(rep) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


@pytest.mark.parametrize("ids, sources, gold_ids, shown", [
    (("2", "e1"), ("input_line", "input"), (None, None), "'input' or 'input_line'"),  # input ids on some lines
    (("2", "e1"), ("input_line", "input"), ("e1", None), "'input' or 'input_line'"),  # the gold's too
    ((None, None), ("input_line", "input_line"), (None, None), "'input_line'"),       # lines without an id key
])
def test_notebook_lines_join_by_input_line_whatever_their_ids(tmp_path, ids, sources, gold_ids, shown):
    # on main: refused with each refusal pointing at the other, or (no id key) paired by line
    # order, F1 0; joined by input_line: each answer with its own gold, F1 2/3
    gold, gen = _review_gold(tmp_path, gold_ids), _notebook_lines(tmp_path, ids, sources)
    rc, err, rep = _run(gen, gold)
    assert rc == 0, err
    assert _f1s(rep) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert [row["gold_line"] for row in rep["per_entry"]] == [1, 2]
    assert kinds(rep) == ["join_by_input_line"]
    assert rep["summary"]["notices"][0]["message"] == (
        f"records paired by input line: each line of {gen} (written by the notebook, id_source {shown}) with the "
        f"line of {gold} its input_line names, their prompts equal")
    rc, err, rep = _run(gen, gold, "--join", "order")
    assert rc == 2 and rep is None
    assert (f"--join order: line 1 of {gen} was written by the notebook for input line 2 (its input_line), but "
            f"pairing by line order puts it with line 1 of {gold} (the notebook writes the longest prompts first): "
            "use --join auto, which pairs each such line with the gold line its input_line names") in err
    # written in input order (input_line 1, 2 on lines 1, 2), --join order pairs them right: F1 2/3
    rows = [json.loads(x) for x in gen.read_text().splitlines()]
    in_order = write_jsonl(tmp_path / "in_order.jsonl", rows[::-1])
    rc, err, rep = _run(in_order, gold, "--join", "order")
    assert rc == 0, err
    assert kinds(rep) == ["join_by_line_order"] and _f1s(rep) == (pytest.approx(2 / 3), pytest.approx(2 / 3))


def test_notebook_line_whose_id_differs_from_its_gold_lines_is_refused(tmp_path):
    # input line 1 has id 'x1' in this gold, 'e1' in the notebook's input: not the same file
    gold, gen = _review_gold(tmp_path, ("x1", None)), _notebook_lines(tmp_path, ("2", "e1"), ("input_line", "input"))
    rc, err, rep = _run(gen, gold)
    assert rc == 2 and rep is None
    assert (f"{gen}: line 2: its id 'e1' differs from the id 'x1' of {gold}: line 1 (its input_line); the gold "
            "file may not be the notebook's input, so its lines cannot be paired by input_line") in err


def test_missing_prediction_of_a_gold_line_without_id_names_the_line(tmp_path):
    # the notebook's output for input line 2 only: gold line 1 has no prediction (entity F1 0),
    # line 2 2/3: macro (0 + 2/3) / 2 = 1/3; on main the notice said "(ids None)"
    gold = _review_gold(tmp_path, (None, None))
    rows = [json.loads(x) for x in _notebook_lines(tmp_path, ("2", "1"), ("input_line",) * 2).read_text().splitlines()]
    gen = write_jsonl(tmp_path / "one.jsonl", rows[:1])
    rc, err, rep = _run(gen, gold)
    assert rc == 0, err
    assert rep["summary"]["macro"]["entity_f1"] == pytest.approx(1 / 3)
    assert kinds(rep) == ["join_by_input_line", "missing_predictions"]
    assert rep["summary"]["notices"][1]["message"] == (
        f"{gen}: 1 gold entry has no prediction line, scored as empty predictions (gold line 1)")


@pytest.mark.parametrize("notebook", [False, True])
def test_files_without_a_single_shared_id_are_refused_even_with_ignore_extra_predictions(tmp_path, notebook):
    # prediction ids 1, 2 (line numbers) against gold ids e1, e2: on main the refusal named
    # --ignore-extra-predictions, which scored every entry missing, F1 0.0000, exit 0
    gold = _review_gold(tmp_path)
    pred = (_notebook_lines(tmp_path, ("2", "1"), ("input_line",) * 2) if notebook
            else _review_pred(tmp_path, ("1", "2"), reverse=False))
    refusal = (f"{pred} and {gold} do not share a single id: none of the 2 prediction id(s) is a gold id "
               "(prediction ids: '1', '2'; gold ids: 'e1', 'e2'), so every gold record would be scored as missing")
    tail = (": check that both files hold the same records (the notebook's output is graded against the "
            "notebook's input file)")
    rc, err, rep = _run(pred, gold)
    assert rc == 2 and rep is None and "--ignore-extra-predictions" not in err
    assert refusal + tail in err
    rc, err, rep = _run(pred, gold, "--ignore-extra-predictions")
    assert rc == 2 and rep is None
    assert refusal + " and every prediction line left out (--ignore-extra-predictions)" + tail in err
    rc, err, rep = _run(pred, gold, "--join", "order")  # and --join order does not point back at --join auto
    assert rc == 2 and rep is None and "(--join auto) instead" not in err
    assert ("grade it against the notebook's input file (whose lines have no ids) with --join auto" if notebook
            else "the two files do not share a single id: check that both files hold the same records") in err


def test_prediction_lines_with_several_instructions_get_a_notice(tmp_path):
    # the lines of one file generated with two instructions: notice mixed_instructions, graded
    # against the gold (F1 2/3) and alone as a combined file; no number changes
    gold = _review_gold(tmp_path, (None, None))
    two = ({"name": "schema", "sha256": "abcdef123456"}, {"name": "none", "sha256": "111111111111"})
    gen = _notebook_lines(tmp_path, ("2", "1"), ("input_line",) * 2, instructions=two)
    message = (f"{gen}: its lines record 2 instructions, none (sha256 111111111111) + schema (sha256 "
               "abcdef123456): not every line was prompted the same way (a chat input keeps its own turns; "
               "prompt/text inputs follow generate_predictions.ipynb's instruction parameter, which differs "
               "between runs written to one file)")
    for with_gold in (gold, None):
        rc, err, rep = _run(gen, with_gold)
        assert rc == 0, err
        assert [n for n in rep["summary"]["notices"] if n["kind"] == "mixed_instructions"] == [
            {"kind": "mixed_instructions", "message": message}]
        assert _f1s(rep) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    one = _notebook_lines(tmp_path, ("2", "1"), ("input_line",) * 2, name="one.jsonl")
    rc, err, rep = _run(one, gold)
    assert rc == 0 and kinds(rep) == ["join_by_input_line"]


# ------------------------------------------ issue 17 item 8: a gold subset (--ignore-extra-predictions)


def _split_files(tmp_path: Path) -> tuple[Path, Path]:
    """Gold: the test split (r1, r2, from gold_file()); predictions for every split: r1 and
    r2 perfect, then 12 ids of other splits (v01..v12) on lines 3-14."""
    extra = [{"id": f"v{k:02d}", "triplets": [ACME_B]} for k in range(1, 13)]
    pred = write_jsonl(tmp_path / "all_splits.jsonl", [{"id": "r1", "triplets": [ACME_A]},
                                                        {"id": "r2", "triplets": [ACME_B]}, *extra])
    return gold_file(tmp_path), pred


def test_extra_prediction_ids_are_refused_naming_the_option(tmp_path):
    gold, pred = _split_files(tmp_path)
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--no-report")
    assert rc == 2
    assert (f"{pred}: 12 prediction id(s) have no gold record in {gold}: 'v01', 'v02', 'v03', 'v04', 'v05', "
            "'v06', 'v07', 'v08', 'v09', 'v10' ... (12 ids); pass --ignore-extra-predictions to leave them out "
            "(the gold file is a subset, e.g. one split)") in err


@pytest.mark.parametrize("extra_args", [(), ("--workers", "2"), ("--shard", "1/2")])
def test_ignore_extra_predictions_scores_the_gold_subset_with_a_notice(tmp_path, extra_args):
    # r1 and r2 answered perfectly: triplet F1 1.0 over the 2 gold entries (shard 1/2: r1 alone);
    # the 12 lines of other splits are left out, counted in a notice
    gold, pred = _split_files(tmp_path)
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--report", report,
                            "--ignore-extra-predictions", *extra_args)
    assert rc == 0, err
    rep = json.loads(report.read_text())
    assert [row["id"] for row in rep["per_entry"]] == (["r1"] if extra_args[:1] == ("--shard",) else ["r1", "r2"])
    assert rep["summary"]["micro"]["triplet_f1"] == 1.0
    assert kinds(rep)[0] == "extra_predictions_ignored"  # (a shard adds its own notice after it)
    assert rep["summary"]["notices"][0]["message"] == (
        f"{pred}: 12 prediction id(s) have no gold record in {gold}, their lines left out "
        "(--ignore-extra-predictions): 'v01', 'v02', 'v03', 'v04', 'v05', 'v06', 'v07', 'v08', 'v09', 'v10' ... "
        "(12 ids)")
    assert rep["summary"]["config"]["ignore_extra_predictions"] is True
    assert "|ignore-extra-preds:yes|" in rep["summary"]["signature"]


def test_ignore_extra_predictions_with_several_systems_and_in_config_only_when_given(tmp_path):
    # two systems: one with the 12 extra lines, one with r1, r2 only; both score F1 1.0 on r1, r2
    gold, pred = _split_files(tmp_path)
    exact = write_jsonl(tmp_path / "exact.jsonl", [{"id": "r1", "triplets": [ACME_A]},
                                                    {"id": "r2", "triplets": [ACME_B]}])
    report = tmp_path / "cmp.json"
    rc, out, err = run_main("--pred", pred, "--pred", exact, "--gold", gold, "--no-embeddings", "--trials", "0",
                            "--bootstrap", "0", "--report", report, "--ignore-extra-predictions")
    assert rc == 0, err
    systems = json.loads(report.read_text())["systems"]
    assert [n["kind"] for n in systems["all_splits"]["summary"]["notices"]] == ["extra_predictions_ignored"]
    assert systems["exact"]["summary"]["notices"] == []
    assert [s["summary"]["micro"]["triplet_f1"] for s in systems.values()] == [1.0, 1.0]
    plain = tmp_path / "plain.json"
    rc, out, err = run_main("--pred", exact, "--gold", gold, "--no-embeddings", "--report", plain)
    assert rc == 0, err
    summary = json.loads(plain.read_text())["summary"]
    assert "ignore_extra_predictions" not in summary["config"] and "ignore-extra" not in summary["signature"]


def test_reports_with_and_without_ignore_extra_predictions_compare(tmp_path):
    # no number depends on the option: --compare accepts the two reports, notes the difference,
    # and the signature lists each system's value (none for the baseline, yes for the other)
    gold, pred = _split_files(tmp_path)
    exact = write_jsonl(tmp_path / "exact.jsonl", [{"id": "r1", "triplets": [ACME_A]},
                                                    {"id": "r2", "triplets": [ACME_B]}])
    a, b, cmp = tmp_path / "exact.json", tmp_path / "all.json", tmp_path / "cmp.json"
    assert run_main("--pred", exact, "--gold", gold, "--no-embeddings", "--report", a)[0] == 0
    assert run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--report", b,
                    "--ignore-extra-predictions")[0] == 0
    rc, out, err = run_main("--compare", a, b, "--trials", "0", "--bootstrap", "0", "--report", cmp)
    assert rc == 0, err
    comparison = json.loads(cmp.read_text())["comparison"]
    assert "|ignore-extra-preds:none+yes|" in comparison["signature"]
    assert "all was scored with ignore_extra_predictions yes, the baseline exact with none" in comparison["notes"]


def test_duplicate_ids_notice_shows_the_first_ids_and_lines(tmp_path):
    # 12 ids, each on two gold lines (lines 1-12, then 13-24): "last" drops lines 1-12, "first"
    # drops 13-24; the notice shows the first 10 ids and lines, then "..."
    ids = [f"r{k:02d}" for k in range(12)]
    g = write_jsonl(tmp_path / "g.jsonl", [{"id": rid, "triplets": []} for rid in ids + ids])
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": rid, "triplets": []} for rid in ids])
    shown_ids = ", ".join(repr(rid) for rid in ids[:10]) + " ... (12 ids)"
    for policy, dropped in [("last", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 ..."),
                            ("first", "13, 14, 15, 16, 17, 18, 19, 20, 21, 22 ...")]:
        loaded = ev.load_inputs(p, g, duplicate_ids=policy)
        assert len(loaded.entries) == 12
        assert [n["message"] for n in loaded.notices if n["kind"] == "duplicate_ids"] == [
            f"{g}: 12 duplicate gold line(s) dropped (--duplicate-ids {policy}; 12 id(s) repeated: "
            f"{shown_ids}; dropped lines {dropped})"]


def test_gold_lines_without_ids_among_lines_with_ids_are_named(tmp_path):
    # gold lines 2 and 4 carry no id (line 4: an empty id), lines 1 and 3 do; the predictions carry ids
    g = write_jsonl(tmp_path / "gold.jsonl", [{"id": "r1", "triplets": []}, {"triplets": []},
                                              {"id": "r3", "triplets": []}, {"id": "", "triplets": []}])
    p = write_jsonl(tmp_path / "pred.jsonl", [{"id": "r1", "triplets": []}, {"id": "r3", "triplets": []}])
    with pytest.raises(ev.InputError) as caught:
        ev.load_inputs(p, g)
    assert (f"cannot pair the records safely: {p} carries ids but 2 line(s) of {g} do not (lines 2, 4); "
            "pairing by line order could mis-pair them") in str(caught.value)
    g1 = write_jsonl(tmp_path / "gold1.jsonl", [{"id": "r1", "triplets": []}, {"triplets": []}])
    with pytest.raises(ev.InputError, match=r"1 line\(s\) of .*gold1\.jsonl do not \(line 2\); pairing"):
        ev.load_inputs(p, g1)


@pytest.mark.parametrize("rid, found", [([1], "a list of 1"), ({"n": 1}, "an object"), ("", '""')])
def test_a_gold_id_that_cannot_be_read_is_named_with_what_it_holds(tmp_path, rid, found):
    """A gold line whose "id" is there but unreadable (an array, an object, "") counts as a
    line without an id, and the refusal says what its id holds (by join auto and --join id)."""
    g = write_jsonl(tmp_path / "gold.jsonl", [{"id": "r1", "triplets": []}, {"id": rid, "triplets": []}])
    p = write_jsonl(tmp_path / "pred.jsonl", [{"id": "r1", "triplets": []}, {"id": "r2", "triplets": []}])
    why = f"line 2's id is {found}: an id is a non-empty string or a number, matched by its text"
    with pytest.raises(ev.InputError) as caught:
        ev.load_inputs(p, g)
    assert f"carries ids but 1 line(s) of {g} do not (line 2; {why})" in str(caught.value)
    with pytest.raises(ev.InputError) as caught:
        ev.load_inputs(p, g, join="id")
    assert str(caught.value) == f"--join id: {g}: 1 gold line(s) without an id (first: line 2; {why})"


def test_join_id_needs_ids_and_join_auto_without_ids_is_line_order(tmp_path):
    gold = gold_file(tmp_path, ids=False)
    pred = write_jsonl(tmp_path / "p.jsonl", [{"triplets": [ACME_A]}, {"triplets": [ACME_B]}])
    with pytest.raises(ev.InputError, match=r"--join id: .*gold.jsonl: 2 gold line\(s\) without an id"):
        ev.load_inputs(pred, gold, join="id")
    loaded = ev.load_inputs(pred, gold)
    assert [n["kind"] for n in loaded.notices] == ["join_by_line_order"]
    assert [e.pred.items for e in loaded.entries] == [[ACME_A], [ACME_B]]


def test_limit_is_a_notice(tmp_path):
    loaded = ev.load_inputs(write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": []}]), gold_file(tmp_path),
                            limit=1)
    assert loaded.notices == [{"kind": "limit", "message": "--limit 1: scored the first 1 of 2 entries"}]


def test_limit_with_line_order_join_still_refuses_extra_prediction_lines(tmp_path):
    # Gold a, b (no ids); predictions [], a's answer, b's answer: shifted by one line. Without
    # --limit this is a count mismatch; --limit must not turn it into a silently shifted pairing.
    gold = gold_file(tmp_path, ids=False)
    pred = write_jsonl(tmp_path / "p.jsonl", [{"triplets": []}, {"triplets": [ACME_A]}, {"triplets": [ACME_B]}])
    for limit in (1, 2, 5):
        with pytest.raises(ev.InputError, match=r"has 2 records, .*p.jsonl has 3 \(more prediction lines"):
            ev.load_inputs(pred, gold, limit=limit)
    # Fewer prediction lines than gold lines is fine under --limit (predictions for the first
    # gold lines only), and said in a notice.
    short = write_jsonl(tmp_path / "short.jsonl", [{"triplets": [ACME_A]}])
    loaded = ev.load_inputs(short, gold, limit=1)
    assert [e.pred.items for e in loaded.entries] == [[ACME_A]]
    assert any(n["kind"] == "limit" and "1 prediction line(s) for 2 gold line(s)" in n["message"]
               for n in loaded.notices)


def test_empty_answer_next_to_an_unrecognised_triplets_field_is_a_notice(tmp_path):
    # {"Triplets": [A, B], "output": ""}: the capitalised key is not a prediction field, so
    # the answer is the empty raw text (status "empty", 0 items, scored as it is), and a
    # notice names the stray field and --pred-field.
    gold = gold_file(tmp_path)
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "Triplets": [ACME_A, ACME_B], "output": ""},
                                              {"id": "r2", "triplets": [ACME_B]}])
    loaded = ev.load_inputs(pred, gold)
    assert [(e.pred.status, e.pred.items) for e in loaded.entries] == [("empty", []), ("ok", [ACME_B])]
    [note] = [n for n in loaded.notices if n["kind"] == "unscored_triplets_field"]
    assert "1 line(s)" in note["message"] and "'Triplets'" in note["message"]
    assert "--pred-field Triplets" in note["message"]
    # The same line with a real answer is not flagged.
    ok = write_jsonl(tmp_path / "ok.jsonl", [{"id": "r1", "Triplets": [ACME_A], "output": json.dumps([ACME_A])},
                                             {"id": "r2", "triplets": [ACME_B]}])
    assert not [n for n in ev.load_inputs(ok, gold).notices if n["kind"] == "unscored_triplets_field"]


# -------------------------------------------------------------- item 5: gold problems


def run_gold(tmp_path: Path, gold_rows: list, pred_rows: list, *args: str) -> tuple[int, str, str, dict | None]:
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    rc, out, err = run_main("--pred", write_jsonl(tmp_path / "p.jsonl", pred_rows),
                            "--gold", write_jsonl(tmp_path / "g.jsonl", gold_rows),
                            "--no-embeddings", "--quiet", "--report", report, *args)
    return rc, out, err, json.loads(report.read_text()) if report.exists() else None


def test_schema_invalid_gold_items_are_counted_and_on_stdout_under_quiet(tmp_path):
    bad = {"source": {"title": "Acme Inc", "type": "entity"}, "relation": {"type": "located_in", "weight": 0.9}}
    rc, out, err, rep = run_gold(tmp_path, [{"id": "r1", "prompt": ACME_PROMPT, "triplets": [ACME_A, bad]}],
                                 [{"id": "r1", "triplets": [ACME_A]}])
    assert rc == 0, err
    assert rep["summary"]["n_invalid_gold_items"] == 1
    assert rep["summary"]["invalid_gold_items"] == ["g.jsonl line 1: [1].target: missing"]
    assert kinds(rep) == ["invalid_gold_items"]
    assert "invalid_gold_items: 1 schema-invalid gold item(s) excluded from scoring: g.jsonl line 1: " \
           "[1].target: missing" in out
    assert rep["per_entry"][0]["metrics"]["triplet_f1"] == 1.0  # [ACME_A] vs the one valid gold item [ACME_A]


def test_nan_weight_in_gold_is_an_invalid_item_and_visible(tmp_path):
    # a NaN literal (accepted by Python's JSON reader) as gold weight: the item is invalid
    # (SPEC section 2), so the correct prediction A is unmatched: triplet P = 1/2 (B matched), R = 1/1
    line = json.dumps({"id": "r1", "prompt": ACME_PROMPT, "triplets": [
        {**ACME_A, "relation": {"type": "located_in", "weight": float("nan")}}, ACME_B]}).encode() + b"\n"
    assert b"NaN" in line
    rc, out, err, rep = run_gold(tmp_path, [line], [{"id": "r1", "triplets": [ACME_A, ACME_B]}])
    assert rc == 0, err
    m = rep["per_entry"][0]["metrics"]
    assert (m["triplet_precision"], m["triplet_recall"]) == (0.5, 1.0)
    assert rep["summary"]["n_invalid_gold_items"] == 1
    assert "[0].relation.weight: NaN is not a number in [0, 1]" in rep["summary"]["notices"][0]["message"]
    assert "NaN is not a number" in out


@pytest.mark.parametrize("schema, expected", [
    ("hgr", "--schema hgr: every gold item (2) is invalid for the hgr profile, which expects typed (source, "
            "relation, target) objects (first: g.jsonl line 1: [0]: expected a triplet object, found a list "
            "of 3); try --schema triples or auto"),
])
def test_gold_with_no_valid_item_under_the_profile_is_exit_2_with_a_schema_hint(tmp_path, schema, expected):
    gold = [{"id": "r1", "prompt": "a b c", "triplets": [["a", "b", "c"], ["a", "b", "d"]]}]
    rc, out, err, rep = run_gold(tmp_path, gold, [{"id": "r1", "triplets": [["a", "b", "c"]]}], "--schema", schema)
    assert rc == 2 and rep is None
    assert expected in err
    rc, out, err, rep = run_gold(tmp_path, gold, [{"id": "r1", "triplets": [["a", "b", "c"]]}], "--schema", "auto")
    assert rc == 0 and rep["summary"]["schema_profile"] == "triples"


def test_gold_that_is_legitimately_all_empty_stays_valid(tmp_path):
    rc, out, err, rep = run_gold(tmp_path, [{"id": "r1", "prompt": ACME_PROMPT, "triplets": []}],
                                 [{"id": "r1", "triplets": []}])
    assert rc == 0, err
    assert rep["summary"]["n_invalid_gold_items"] == 0 and rep["summary"]["notices"] == []


# ------------------------------------------------------------ gold values that are not gold


@pytest.mark.parametrize("value, found", [(None, "null"), ("", '""'), ("  ", '"  "')])
def test_null_or_empty_text_gold_is_an_input_error_naming_file_line_and_field(tmp_path, value, found):
    gold = [{"id": "r1", "prompt": ACME_PROMPT, "triplets": [ACME_A]},
            {"id": "r2", "prompt": ACME_PROMPT, "triplets": value}]
    pred = [{"id": "r1", "triplets": [ACME_A]}, {"id": "r2", "triplets": [ACME_B]}]
    rc, out, err, rep = run_gold(tmp_path, gold, pred)
    assert rc == 2 and rep is None
    assert f"g.jsonl: line 2: gold triplets: expected a JSON array (or answer text), found {found}" in err
    # --skip-bad-gold excludes the line (and its prediction) with notices: r1 alone scores 1.0
    rc, out, err, rep = run_gold(tmp_path, gold, pred, "--skip-bad-gold")
    assert rc == 0, err
    assert kinds(rep) == ["excluded_gold_line", "dropped_with_excluded_gold"]
    assert rep["summary"]["n_entries"] == 1 and rep["summary"]["micro"]["triplet_f1"] == 1.0


def test_null_parsed_gold_next_to_gold_raw_text_uses_the_text(tmp_path):
    rows = [{"id": "r1", "prompt": ACME_PROMPT, "gold_parsed": None, "gold_raw": json.dumps([ACME_A]), "pred_parsed": [ACME_A]}]
    loaded = ev.load_inputs(write_jsonl(tmp_path / "c.jsonl", rows), None)
    assert loaded.entries[0].gold.items == [ACME_A] and loaded.notices == []


# ------------------------------------------------- a parsed field that disagrees with the raw text


def test_parsed_field_that_disagrees_with_the_raw_text_is_noticed_and_the_parsed_field_scored(tmp_path):
    pred = [{"id": "r1", "triplets": [], "output": json.dumps([ACME_A])},   # disagrees: 0 vs 1 item
            {"id": "r2", "triplets": [ACME_B], "output": json.dumps([ACME_B])}]  # agrees
    rc, out, err, rep = evaluate(tmp_path, pred, "--quiet")
    assert rc == 0, err
    assert kinds(rep) == ["parsed_raw_disagree"]
    message = rep["summary"]["notices"][0]["message"]
    assert "1 line(s) whose parsed prediction field disagrees with the raw text" in message
    assert "(line 1; line 1: 'triplets' (0 item(s)) disagrees with the raw text 'output' (1 item(s), ok)" in message
    assert "--reparse scores the raw text" in message and "parsed_raw_disagree" in out
    # scored: the parsed [] for r1 (triplet F1 0), [ACME_B] for r2 (1): macro triplet F1 = (0 + 1) / 2
    assert rep["summary"]["macro"]["triplet_f1"] == 0.5
    # --reparse scores the raw text: both perfect, and nothing to report
    rc, out, err, rep = evaluate(tmp_path, pred, "--quiet", "--reparse")
    assert rc == 0 and kinds(rep) == [] and rep["summary"]["macro"]["triplet_f1"] == 1.0


# ---------------------------------------------------------------- gold ids without a prediction


def test_gold_id_without_a_prediction_line_is_a_missing_predictions_notice(tmp_path):
    rc, out, err, rep = evaluate(tmp_path, [{"id": "r1", "triplets": [ACME_A]}], "--quiet")
    assert rc == 0, err
    assert rep["summary"]["notices"] == [{"kind": "missing_predictions", "message": f"{tmp_path / 'pred.jsonl'}: "
                                          "1 gold entry has no prediction line, scored as empty predictions (ids 'r2')"}]
    assert rep["summary"]["totals"]["missing_predictions"] == 1 and "missing_predictions: " in out
    # r1 perfect (composite 1), r2 gold [ACME_B] with an empty prediction (composite 0): macro composite 1/2
    assert rep["summary"]["macro"]["composite"] == 0.5


# --------------------------------------------------- gold lines without a prompt, gold fields that disagree


def test_gold_lines_without_a_prompt_field_are_a_no_prompt_notice(tmp_path):
    gold = [{"id": "r1", "question": ACME_PROMPT, "triplets": [ACME_A]}, {"id": "r2", "prompt": ACME_PROMPT, "triplets": [ACME_B]}]
    rc, out, err, rep = run_gold(tmp_path, gold, [{"id": "r1", "triplets": [ACME_A, ACME_B]}, {"id": "r2", "triplets": [ACME_A, ACME_B]}])
    assert rc == 0, err
    assert rep["summary"]["notices"] == [{"kind": "no_prompt", "message": f"{tmp_path / 'g.jsonl'}: 1 gold line(s) "
                                          "have no prompt field (line 1; keys found: id, question, triplets; "
                                          "accepted: prompt, text, sent or chat 'messages'): grounding and "
                                          "hallucination are checked against an empty prompt"}]
    assert "no_prompt: " in out
    # the extra (unmatched) prediction is checked against the prompt: r1's ACME_B against the empty
    # prompt is ungrounded; r2's ACME_A is found in ACME_PROMPT (a novel grounded triplet)
    assert [(e["metrics"]["ungrounded"], e["metrics"]["novel_grounded"]) for e in rep["per_entry"]] == [(1, 0), (0, 1)]


def test_gold_prompt_fields_that_disagree_are_noticed_and_the_first_is_scored(tmp_path):
    gold = [{"id": "r1", "prompt": ACME_PROMPT, "text": ACME_PROMPT, "sent": "Nothing here.", "triplets": [ACME_A]}]
    pred = [{"id": "r1", "triplets": [ACME_A, ACME_B]}]
    rc, out, err, rep = run_gold(tmp_path, gold, pred)
    assert rc == 0, err
    assert kinds(rep) == ["conflicting_fields"]
    assert rep["summary"]["notices"][0]["message"].endswith(
        "1 gold line(s) with prompt fields that disagree (line 1; line 1: fields 'prompt', 'sent' disagree; "
        "scored 'prompt' (the first accepted field); accepted prompt fields, first one scored: prompt, text, "
        "sent): grounding and hallucination are checked against the scored prompt")
    assert "conflicting_fields: " in out
    # the extra ACME_B (founded_by Person Z) is checked against 'prompt' (ACME_PROMPT names Person Z):
    # grounded, not ungrounded as it would be against the 'sent' text "Nothing here."
    assert [(e["metrics"]["ungrounded"], e["metrics"]["novel_grounded"]) for e in rep["per_entry"]] == [(0, 1)]
    # equal prompt fields are no disagreement
    rc, out, err, rep = run_gold(tmp_path, [{**gold[0], "sent": ACME_PROMPT}], pred)
    assert rc == 0 and kinds(rep) == []


def test_gold_fields_that_disagree_are_noticed_and_the_first_is_scored(tmp_path):
    gold = [{"id": "r1", "prompt": ACME_PROMPT, "triplets": [ACME_A, ACME_B], "gold": [ACME_A]}]
    rc, out, err, rep = run_gold(tmp_path, gold, [{"id": "r1", "triplets": [ACME_A, ACME_B]}])
    assert rc == 0, err
    assert kinds(rep) == ["conflicting_fields"]
    assert ("1 gold line(s) with gold fields that disagree (line 1; line 1: fields 'triplets', 'gold' disagree; "
            "scored 'triplets' (the first accepted field)") in rep["summary"]["notices"][0]["message"]
    assert rep["summary"]["micro"]["triplet_f1"] == 1.0  # [ACME_A, ACME_B] vs the scored gold [ACME_A, ACME_B]
    # the same value under two fields is not a disagreement
    rc, out, err, rep = run_gold(tmp_path, [{**gold[0], "gold": [ACME_A, ACME_B]}], [{"id": "r1", "triplets": [ACME_A, ACME_B]}])
    assert rc == 0 and kinds(rep) == []


# ----------------------------------------------------- answers that hold no triplet-like content


@pytest.mark.parametrize("pred_r1", [
    {"id": "r1", "output": {"text": json.dumps([ACME_A])}},                 # nested answer object
    {"id": "r1", "output": json.dumps({"knowledge_graph": [ACME_A]})},      # an unknown wrapper key
])
def test_answer_without_triplet_like_content_is_noticed_with_a_pred_field_hint(tmp_path, pred_r1):
    rc, out, err, rep = evaluate(tmp_path, [pred_r1, {"id": "r2", "triplets": [ACME_B]}], "--quiet")
    assert rc == 0, err
    assert kinds(rep) == ["no_triplet_content"]
    message = rep["summary"]["notices"][0]["message"]
    assert "1 prediction(s) whose answer holds no triplet-like content, scored as schema-invalid items (line 1; " \
           "line 1: " in message and "name the field with --pred-field NAME" in message
    # numbers and statuses unchanged (the method): r1 is one schema-invalid item, status ok
    assert rep["per_entry"][0]["parse_status"] == "ok"
    m = rep["per_entry"][0]["metrics"]
    assert (m["n_pred_raw_items"], m["n_pred_valid"], m["schema_score"]) == (1, 0, 0.0)


# ------------------------------------------------------------------ ids in messages, empty ids


def test_ids_in_messages_are_quoted_so_padded_ids_are_visible(tmp_path):
    gold = [gold_rec("1", [ACME_A])]
    rc, out, err, rep = run_gold(tmp_path, gold, [{"id": "1", "triplets": [ACME_A]}, {"id": " 2", "triplets": []},
                                                  {"id": "1 ", "triplets": []}])
    assert rc == 2 and "2 prediction id(s) have no gold record in " in err and ": ' 2', '1 '" in err
    rc, out, err, rep = run_gold(tmp_path, [gold_rec("1", [ACME_A]), gold_rec(" 2", [ACME_B])],
                                 [{"id": "1", "triplets": [ACME_A]}])
    assert rc == 0 and "(ids ' 2')" in rep["summary"]["notices"][0]["message"]


def test_an_empty_string_id_is_no_readable_id_like_null(tmp_path):
    # documented choice: "" names no record, exactly like null: a no_readable_id notice, and
    # the gold id it should have matched counts as missing
    for empty in ("", None):
        rc, out, err, rep = run_gold(tmp_path, [gold_rec("1", [ACME_A]), gold_rec("2", [ACME_B])],
                                     [{"id": "1", "triplets": [ACME_A]}, {"id": empty, "triplets": [ACME_B]}])
        assert rc == 0, err
        assert kinds(rep) == ["no_readable_id", "missing_predictions"]
        assert "(line 2) cannot be attributed" in rep["summary"]["notices"][0]["message"]
        assert rep["summary"]["totals"]["missing_predictions"] == 1
    assert ev.load_inputs(write_jsonl(tmp_path / "c.jsonl", [{"id": "", "prompt": "p", "triplets": [],
                                                               "pred_parsed": []}]), None).entries[0].gold.id is None


def test_raw_text_without_a_parseable_answer_is_not_a_disagreement():
    # Text2KGBench lines: raw text in rel(s, o) form (unparseable here) next to the parsed triples
    pred = ev.prediction_from_record({"id": "x", "response": "creator(Arion, Jan Duursema)",
                                      "triples": [["Arion", "creator", "Jan Duursema"]]}, 1)
    assert (pred.status, pred.issue, pred.items) == ("ok", "", [["Arion", "creator", "Jan Duursema"]])


# ----------------------------------------------------- raw text holding several separate answers


def test_several_separate_answers_in_raw_text_give_one_discarded_answers_notice(tmp_path):
    a, b = json.dumps(ACME_A), json.dumps(ACME_B)
    preds = [{"id": "r1", "output": f"1. {a}\n2. {b}"},           # only B scored, A passed over
             {"id": "r2", "output": f"- {b}\n- {a}\n- {b}"}]      # the last B scored, 2 passed over
    rc, out, err, rep = evaluate(tmp_path, preds, "--quiet")
    assert rc == 0, err
    assert kinds(rep) == ["discarded_answers"]
    message = rep["summary"]["notices"][0]["message"]
    assert ("2 prediction(s) whose raw text holds several separate triplet answers; only the last one (fenced "
            "first) is scored (lines 1, 2; line 1: 1 other answer(s) not scored)") in message
    assert "check the raw text" in message and 'README "Parse statuses"' in message
    # statuses and scored items unchanged (the published rule): status ok, one item each
    assert [e["parse_status"] for e in rep["per_entry"]] == ["ok", "ok"]
    assert [e["metrics"]["n_pred_raw_items"] for e in rep["per_entry"]] == [1, 1]
    # an answer written once: no notice
    rc, out, err, rep = evaluate(tmp_path, [{"id": "r1", "output": f"[{a}]"}, {"id": "r2", "triplets": [ACME_B]}],
                                 "--quiet")
    assert rc == 0 and kinds(rep) == []


# --- Entries kept as line offsets (LineStore, EntryTable): flat memory, same entries ---

def _eager_entries(gold_path: Path, pred_path: Path) -> dict[str, tuple]:
    """An independent reference: every line parsed with read_jsonl and the record
    functions, keyed by id (the files below join by id)."""
    gold = {}
    for row in ev.read_jsonl(gold_path):
        rec = ev.gold_from_record(row.value, row.line_no, f"{gold_path}: line {row.line_no}")
        gold[rec.id] = rec
    preds = {}
    for row in ev.read_jsonl(pred_path):
        if row.error is None:
            pred = ev.prediction_from_record(row.value, row.line_no)
            preds[pred.id] = pred
    return {rid: (g, preds.get(rid)) for rid, g in gold.items()}


@pytest.fixture
def reparsed(monkeypatch):
    """Entries parsed again from their lines, whatever the size of the files (no records kept)."""
    monkeypatch.setattr(ev, "KEEP_PARSED_MAX_BYTES", 0)


def test_entry_table_rebuilds_each_entry_from_its_lines(tmp_path, reparsed):
    # gold with a BOM, CRLF ends and a blank line; predictions in another order, one line of
    # raw text, one invalid JSON line, one id without a prediction line (r4)
    gold = (b"\xef\xbb\xbf" + line(gold_rec("r1", [ACME_A])).rstrip(b"\n") + b"\r\n\r\n"
            + line(gold_rec("r2", [ACME_B])) + line(gold_rec("r3", [ACME_A, ACME_B])) + line(gold_rec("r4", [])))
    pred = (line({"id": "r3", "output": "Answer: " + json.dumps([ACME_B])}) + b'{"id": "r2", "triplets": [\n'
            + line({"id": "r1", "triplets": [ACME_A]}))
    g, p = write(tmp_path / "g.jsonl", gold), write(tmp_path / "p.jsonl", pred)
    loaded = ev.load_inputs(p, g)
    entries = loaded.entries
    assert isinstance(entries, ev.EntryTable) and len(entries) == 4
    reference = _eager_entries(g, p)
    for entry in entries:
        ref_gold, ref_pred = reference[entry.gold.id]
        assert entry.gold == ref_gold
        if entry.gold.id == "r2":  # the invalid JSON line: kept as read, attributed by its raw id
            assert (entry.pred.id, entry.pred.items, entry.pred.status, entry.pred.line) == ("r2", None, "unparseable", 2)
            assert entry.pred.reason.startswith("line 2: invalid JSON")
        elif entry.gold.id == "r4":
            assert entry.pred == ev.Prediction("r4", [], "missing", "no prediction line for this id", None)
        else:
            assert entry.pred == ref_pred
    assert [e.gold.line for e in entries] == [1, 3, 4, 5]
    # a slice is a table over the same lines; negative indices work; reading twice gives equal entries
    part = entries[1:3]
    assert isinstance(part, ev.EntryTable) and [e.gold.id for e in part] == ["r2", "r3"]
    assert entries[-1] == entries[3] and entries[2] == part[1]
    assert [gr.id for gr in entries.golds()] == ["r1", "r2", "r3", "r4"]
    with pytest.raises(IndexError):
        entries[4]


def test_entry_table_combined_file_and_line_order(tmp_path):
    combined = [{"id": "c1", "prompt": ACME_PROMPT, "gold_parsed": [ACME_A], "pred_parsed": [ACME_B]},
                {"id": "c2", "prompt": ACME_PROMPT, "gold_parsed": [ACME_B], "pred_raw": json.dumps([ACME_B])}]
    path = write_jsonl(tmp_path / "c.jsonl", combined)
    entries = ev.load_inputs(path, None).entries
    assert [(e.gold.items, e.pred.items, e.pred.status, e.pred.line) for e in entries] == [
        ([ACME_A], [ACME_B], "ok", 1), ([ACME_B], [ACME_B], "ok", 2)]
    # no ids: paired by position; --limit 1 keeps the first pair
    g = write_jsonl(tmp_path / "g.jsonl", [{"prompt": ACME_PROMPT, "triplets": [ACME_A]},
                                           {"prompt": ACME_PROMPT, "triplets": [ACME_B]}])
    p = write_jsonl(tmp_path / "p.jsonl", [{"triplets": [ACME_B]}, {"triplets": [ACME_A]}])
    entries = ev.load_inputs(p, g, limit=1).entries
    assert [(e.gold.items, e.pred.items, e.pred.line) for e in entries] == [([ACME_A], [ACME_B], 1)]


def test_entry_table_refuses_a_file_changed_before_scoring(tmp_path, reparsed):
    g = write_jsonl(tmp_path / "g.jsonl", [gold_rec("r1", [ACME_A])])
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}])
    entries = ev.load_inputs(p, g).entries
    p.write_bytes(b'{"id": "r1", "trip')  # shorter than the line read
    with pytest.raises(ev.InputError, match=r"p\.jsonl: line 1 changed while the file was being evaluated"):
        entries[0]


def test_problem_lines_past_the_kept_sample_are_counted(tmp_path):
    # 13 prediction lines without a prediction field: the notice counts 13 and shows the
    # first 10 lines and "..." (the reader keeps 11 of them, _SAMPLE_KEPT)
    n = 13
    g = write_jsonl(tmp_path / "g.jsonl", [gold_rec(f"r{k}", [ACME_A]) for k in range(n + 1)])
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": f"r{k}", "note": 1} for k in range(n)]
                    + [{"id": f"r{n}", "triplets": [ACME_A]}])
    loaded = ev.load_inputs(p, g)
    (problem,) = [x for x in loaded.notices if x["kind"] == "no_prediction_field"]
    assert f"{n} line(s) without a prediction field" in problem["message"]
    assert "(lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 ...; line 1: no prediction field" in problem["message"]


def test_gold_duplicates_are_reported_after_the_prediction_problems(tmp_path):
    # the predictions file is read before the gold ids are de-duplicated: its problems come
    # first, then the duplicates, then the join's (the bad line has no readable id)
    g = write_jsonl(tmp_path / "g.jsonl", [gold_rec("r1", [ACME_A]), gold_rec("r1", [ACME_B])])
    p = write(tmp_path / "p.jsonl", line({"id": "r1", "triplets": [ACME_A]}) + b"{bad\n")
    loaded = ev.load_inputs(p, g, duplicate_ids="last")
    assert [x["kind"] for x in loaded.notices] == ["bad_prediction_line", "duplicate_ids", "no_readable_id"]
    assert [e.gold.items for e in loaded.entries] == [[ACME_B]]


def test_id_column_round_trips_ids():
    ids = ev.IdColumn()
    values = ["r1", None, "", "é\u4e2d", "\ud800lone", "r1", None, " padded "]
    for rid in values:
        ids.append(rid)
    assert [ids[k] for k in range(len(ids))] == values
    assert ids.present().tolist() == [v is not None for v in values]


@pytest.mark.parametrize("collide", [False, True])
def test_join_by_id_is_exact_when_every_id_has_the_same_hash(tmp_path, monkeypatch, collide):
    # with every hash equal (monkeypatched), ids are told apart by their strings: the same
    # entries, duplicates, excluded lines and unknown ids as with real hashes
    if collide:
        monkeypatch.setattr(ev, "hash", lambda rid: 7, raising=False)
    gold = [gold_rec("a", [ACME_A]), gold_rec("b", [ACME_B]), gold_rec("a", [ACME_B]), gold_rec("c", [])]
    g = write(tmp_path / "g.jsonl", b"".join(line(x) for x in gold) + b'{"id": "x", "triplets": 3}\n')
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": "b", "triplets": [ACME_B]}, {"id": "x", "triplets": []},
                                           {"id": "a", "triplets": [ACME_A]}, {"id": "b", "triplets": []},
                                           {"id": "a", "triplets": [ACME_B]}])
    loaded = ev.load_inputs(p, g, duplicate_ids="first", skip_bad_gold=True)
    assert [(e.gold.id, e.gold.line, e.pred.line, e.pred.status) for e in loaded.entries] == [
        ("a", 1, 3, "ok"), ("b", 2, 1, "ok"), ("c", 4, None, "missing")]
    assert [x["kind"] for x in loaded.notices] == [
        "excluded_gold_line", "duplicate_ids", "dropped_with_excluded_gold", "duplicate_ids", "missing_predictions"]
    # gold: 'a' on lines 1 and 3 (first kept: line 3 dropped); predictions: 'b' on lines 1 and 4,
    # 'a' on lines 3 and 5 (line 2, id 'x', goes with its excluded gold line): lines 4 and 5 dropped
    assert ("g.jsonl: 1 duplicate gold line(s) dropped (--duplicate-ids first; 1 id(s) repeated: 'a'; "
            "dropped line 3)") in loaded.notices[1]["message"]
    assert ("p.jsonl: 2 duplicate prediction line(s) dropped (--duplicate-ids first; 2 id(s) repeated: 'a', 'b'; "
            "dropped lines 4, 5)") in loaded.notices[3]["message"]
    assert "(ids 'x')" in loaded.notices[2]["message"]
    p2 = write_jsonl(tmp_path / "p2.jsonl", [{"id": "b", "triplets": []}, {"id": "zz", "triplets": []},
                                             {"id": "y", "triplets": []}])
    with pytest.raises(ev.InputError, match=r"2 prediction id\(s\) have no gold record in .*: 'y', 'zz'"):
        ev.load_inputs(p2, g, duplicate_ids="last", skip_bad_gold=True)


# --- The reading pass in ranges (load_inputs(map_ranges=...)): the same result as one reading ---

import random  # noqa: E402

_A, _B = json.dumps(ACME_A), json.dumps(ACME_B)


def _gold_line(rng: random.Random, rid: str | None, bad: bool) -> bytes:
    """One gold line of a random kind (id ``rid``, or none)."""
    ids = rid is not None
    head = {"id": rid} if ids else {}
    kinds = [
        lambda: line(gold_rec(rid, rng.choice([[], [ACME_A], [ACME_A, ACME_B]]))),
        lambda: line({**head, "triplets": [ACME_B]}),                                    # no prompt
        lambda: line({**head, "prompt": ACME_PROMPT, "triplets": [ACME_A], "gold": [ACME_B]}),  # gold fields disagree
        lambda: line({**head, "prompt": "p", "text": "q", "triplets": []}),               # prompt fields disagree
        lambda: line({**head, "prompt": "p", "gold_raw": f"[{_A}]"}),                     # answer text
    ]
    if bad:
        kinds += [
            lambda: (b'{"id": "%s", "triplets": [' % (rid or "x").encode()) + b"\n",      # invalid JSON, raw id
            lambda: b'{"id": "%s", "prompt": "caf\xff", "triplets": []}\n' % (rid or "").encode(),  # invalid UTF-8
            lambda: b'{"id": "%s", "v": %s}\n' % ((rid or "").encode(), b"[" * 120 + b"]" * 120),  # too deep
            lambda: line({**head, "prompt": "x" * 700, "triplets": []}),                   # over the 600-byte cap
            lambda: line({**head, "prompt": "p"}),                                         # no gold field
            lambda: b"[1, 2]\n",                                                           # not an object
        ]
    text = rng.choice(kinds)()
    return text[:-1] + b"\r\n" if rng.random() < 0.2 else text


def _pred_line(rng: random.Random, rid: str | None, bad: bool) -> bytes:
    """One prediction line of a random kind for gold id ``rid``."""
    head = {"id": rid} if rid is not None else {}
    kinds = [
        lambda: line({**head, "triplets": rng.choice([[], [ACME_A], [ACME_B, ACME_A]])}),
        lambda: line({**head, "output": f"Answer: [{_B}]"}),
        lambda: line({**head, "output": f"1. {_A}\n2. {_B}"}),                            # discarded answers
        lambda: line({**head, "output": {"text": f"[{_A}]"}}),                           # no triplet-like content
        lambda: line({**head, "note": 1}),                                               # no prediction field
        lambda: line({**head, "triplets": [ACME_A], "pred_parsed": [ACME_B]}),           # fields disagree
        lambda: line({**head, "triplets": [ACME_A], "output": f"[{_B}]"}),               # parsed vs raw text
        lambda: line({**head, "output": "", "Triplets": [ACME_A]}),                      # unscored triplets field
        lambda: line({**head, "triplets": "oops"}),                                      # unparseable value
    ]
    if bad:
        kinds += [
            lambda: (b'{"id": "%s", "triplets": [' % (rid or "").encode()) + b"\n",       # invalid JSON
            lambda: b'{"triplets": [}\n',                                                 # invalid JSON, no id
            lambda: b'{"id": "%s", "v": "caf\xff"}\n' % (rid or "").encode(),               # invalid UTF-8
            lambda: line({**head, "output": "y" * 700}),                                  # over the 600-byte cap
            lambda: b'"just text"\n',                                                     # not an object
        ]
    return rng.choice(kinds)()


def _blanks(rng: random.Random) -> bytes:
    return rng.choice([b"", b"", b"", b"\n", b"  \t \n", b"\r\n"])


def _input_files(folder: Path, seed: int, *, ids: bool = True, bad_gold: bool = True,
                 bad_pred: bool = True) -> tuple[Path, Path]:
    """A seeded gold file and predictions file with every kind of line, in random order,
    among blank lines; a BOM and a last line without LF now and then."""
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    gold_ids = [(f"g{k}" if rng.random() > 0.05 else f"g{max(k - 1, 0)}") if ids else None for k in range(n)]
    gold_lines = [_gold_line(rng, rid, bad_gold) for rid in gold_ids]
    pred_ids = [rid for rid in dict.fromkeys(gold_ids) if not ids or rng.random() > 0.1] if ids else gold_ids
    rng.shuffle(pred_ids)
    pred_lines = [_pred_line(rng, rid, bad_pred) for rid in pred_ids] or [line({"triplets": []})]

    def body(lines: list[bytes]) -> bytes:
        data = b"".join(_blanks(rng) + x for x in lines) + _blanks(rng)
        if rng.random() < 0.2:
            data = b"\xef\xbb\xbf" + data
        return data.rstrip(b"\r\n") if rng.random() < 0.3 else data

    return (write(folder / "g.jsonl", body(gold_lines)), write(folder / "p.jsonl", body(pred_lines)))


def _read(pred: Path, gold: Path | None, map_ranges=None, **options) -> tuple:
    """Everything load_inputs gives (entries, notices, problems, what it keeps of each
    line), or its InputError."""
    try:
        loaded = ev.load_inputs(pred, gold, map_ranges=map_ranges, **options)
    except ev.InputError as exc:
        return ("InputError", str(exc))
    table = loaded.entries
    stores = [table._gold.store] + ([table._preds.store] if table._preds is not None else [])
    preds = table._preds or table._gold.combined
    kept = [(s.offset.tobytes(), s.size.tobytes(), s.line.tobytes(), s.crc.tobytes(), s.held) for s in stores]
    ids = [(bytes(c._bytes), c._end.tobytes(), c._hash.tobytes(), bytes(c._some)) for c in (table._gold.ids, preds.ids)]
    pred_lines = (bytes(preds.hollow), preds.discarded.tobytes(), preds.unread, preds.keys_found, preds.n_objects,
                  {kind: (list(sample), sample.total) for kind, sample in preds.issues.items()})
    gold_lines = (table._gold.positions.tolist(), table._gold.n_rows, table._gold.excluded_ids)
    return (list(table), loaded.notices, loaded.problems, loaded.duplicates_dropped, kept, ids, pred_lines,
            gold_lines, table._gold_rows.tolist(), table._pred_rows.tolist())


OPTION_SETS = [{}, {"skip_bad_gold": True, "duplicate_ids": "first"}, {"skip_bad_gold": True, "duplicate_ids": "last"},
               {"skip_bad_gold": True, "duplicate_ids": "last", "reparse": True, "limit": 5}]


@pytest.fixture
def small_ranges(monkeypatch):
    """Split files of any size (ranges of ``READ_RANGE_BYTES``, set by the test), with a
    600-byte line cap so that over-long lines are cheap to write."""
    monkeypatch.setattr(ev, "READ_PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(ev, "JSONL_MAX_LINE_BYTES", 600)
    return lambda size: monkeypatch.setattr(ev, "READ_RANGE_BYTES", size)


@pytest.mark.parametrize("seed", range(40))
def test_reading_in_ranges_equals_one_reading(tmp_path, small_ranges, monkeypatch, seed):
    # every kind of line at range starts (1-byte ranges: each line is a range of its own)
    # and at random places; ids or none (joined by line order); every option set; records
    # kept (a small run) or parsed again at each read
    rng = random.Random(seed)
    gold, pred = _input_files(tmp_path, seed, ids=seed % 4 != 3, bad_gold=seed % 2 == 0)
    monkeypatch.setattr(ev, "KEEP_PARSED_MAX_BYTES", 0 if seed % 3 else 1 << 20)
    for options in OPTION_SETS:
        if seed % 4 == 3:
            options = {**options, "join": "order", "duplicate_ids": "error"}
        expected = _read(pred, gold, **options)
        for size in (1, rng.randint(2, 400), rng.randint(400, 3000)):
            small_ranges(size)
            assert _read(pred, gold, map, **options) == expected, (options, size)


@pytest.mark.parametrize("seed", range(6))
def test_reading_a_combined_file_in_ranges_equals_one_reading(tmp_path, small_ranges, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(ev, "KEEP_PARSED_MAX_BYTES", 0 if seed % 2 else 1 << 20)
    rows = []
    for k in range(rng.randint(1, 30)):
        gold_part = json.loads(_gold_line(rng, f"g{k}", False))
        pred_part = rng.choice([{"pred_parsed": [ACME_A]}, {"pred_raw": f"[{_B}]"}, {"note": 1},
                                {"pred_parsed": [ACME_A], "pred_raw": f"[{_B}]"}, {"pred_parsed": "x"}])
        rows.append(line({**gold_part, **pred_part}) if rng.random() > 0.1 else b"{bad\n")
    path = write(tmp_path / "c.jsonl", b"".join(_blanks(rng) + x for x in rows))
    for options in ({}, {"skip_bad_gold": True, "duplicate_ids": "last"}):
        expected = _read(path, None, **options)
        for size in (1, rng.randint(2, 500)):
            small_ranges(size)
            assert _read(path, None, map, **options) == expected


@pytest.mark.parametrize("workers", [2, 3])
def test_reading_on_worker_processes_equals_one_reading(tmp_path, small_ranges, workers):
    # the real pool (forked workers): parts pickled back, ids hashed there
    for seed in (5, 8, 13):
        gold, pred = _input_files(tmp_path, seed)
        for options in OPTION_SETS[:2]:
            expected = _read(pred, gold, **options)
            small_ranges(97)
            assert _read(pred, gold, ev.worker_map(workers), **options) == expected


def test_the_first_error_in_file_order_wins(tmp_path, small_ranges):
    # bad gold lines 2 and 5 (each a range of its own), a predictions file that is not
    # JSONL: the gold file's first bad line is the error, as in one reading
    good = [line(gold_rec(f"g{k}", [ACME_A])) for k in range(6)]
    good[1], good[4] = b'{"id": "g1", "triplets": [\n', b'{"id": "g4"}\n'
    gold = write(tmp_path / "g.jsonl", b"".join(good))
    pred = write(tmp_path / "p.jsonl", b"\x1f\x8b\x08\x00" + b"\x00" * 40)
    small_ranges(1)
    for map_ranges in (None, map, ev.worker_map(2)):
        with pytest.raises(ev.InputError, match=r"g\.jsonl: line 2: invalid JSON: .*--skip-bad-gold"):
            ev.load_inputs(pred, gold, map_ranges=map_ranges)
        # with the bad gold lines excluded, the predictions file's check is the error
        with pytest.raises(ev.InputError, match=r"p\.jsonl: not UTF-8 JSONL \(gzip"):
            ev.load_inputs(pred, gold, map_ranges=map_ranges, skip_bad_gold=True)
    missing = tmp_path / "none.jsonl"
    for map_ranges in (None, map):
        with pytest.raises(FileNotFoundError):
            ev.load_inputs(missing, gold, map_ranges=map_ranges, skip_bad_gold=True)


def test_ids_hashed_by_another_process_are_hashed_again():
    # a column made where strings hash differently (a spawned process) is hashed again on joining
    ours, theirs = ev.IdColumn(), ev.IdColumn()
    ours.append("a")
    for rid in ("b", None, "c"):
        theirs.append(rid)
    theirs._hash = ev.array.array("q", [1, 0, 2])
    theirs._probe += 1
    ours.extend(theirs)
    assert [ours[k] for k in range(4)] == ["a", "b", None, "c"]
    assert ours.hashes().tolist() == [hash("a"), hash("b"), 0, hash("c")]


def test_a_same_length_edit_of_a_line_is_refused_at_scoring(tmp_path, reparsed):
    # the file changed between reading and scoring, every line still valid JSON of the same
    # length: the line's CRC-32 tells (gold and predictions alike)
    g = write_jsonl(tmp_path / "g.jsonl", [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])])
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}, {"id": "r2", "triplets": [ACME_B]}])
    entries = ev.load_inputs(p, g).entries
    assert entries[1].pred.items == [ACME_B]
    p.write_bytes(p.read_bytes().replace(b"Person Z", b"Person Q"))
    assert entries[0].pred.items == [ACME_A]  # line 1 unchanged
    with pytest.raises(ev.InputError, match=r"p\.jsonl: line 2 changed while the file was being evaluated"):
        entries[1]
    g.write_bytes(g.read_bytes().replace(b'"r1"', b'"r9"'))
    with pytest.raises(ev.InputError, match=r"g\.jsonl: line 1 changed while the file was being evaluated"):
        entries[0]


@pytest.mark.parametrize("which", ["pred", "gold"])
def test_a_file_appended_to_during_the_run_is_refused_with_no_report(tmp_path, monkeypatch, capsys, which):
    # an append keeps every line that was read (their CRC-32s agree), but the file's SHA-256
    # in the report would describe a line that was never scored: exit 2, nothing written
    g = write_jsonl(tmp_path / "g.jsonl", [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])])
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}, {"id": "r2", "triplets": [ACME_B]}])
    grown = p if which == "pred" else g
    size = grown.stat().st_size
    scorer = ev.score_entries_parallel

    def score_then_append(*args, **kwargs):
        scored = scorer(*args, **kwargs)
        with open(grown, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"id": "r3", "triplets": [ACME_A]}) + "\n")
        return scored

    monkeypatch.setattr(ev, "score_entries_parallel", score_then_append)
    report = tmp_path / "report.json"
    assert ev.main(["--pred", str(p), "--gold", str(g), "--no-embeddings", "--quiet", "--report", str(report)]) == 2
    after = grown.stat().st_size
    assert (f"error: {grown}: changed while it was being evaluated ({size} -> {after} bytes); no report written"
            in capsys.readouterr().err)
    assert not report.exists()


@pytest.mark.parametrize("seed", range(12))
def test_records_kept_by_a_small_run_equal_those_parsed_again(tmp_path, monkeypatch, seed):
    # a small run makes its entries from the records its reading parsed; a large one parses
    # each entry's lines again: the same entries (combined files too), and scoring them does
    # not change them (the kept records are read again by the workers and by each family)
    gold, pred = _input_files(tmp_path, seed, ids=seed % 4 != 3, bad_gold=False)
    combined = write(tmp_path / "c.jsonl", [{**gold_rec(f"c{k}", [ACME_A]), "pred_raw": f"1. {_A}\n2. {_B}"}
                                            for k in range(seed + 1)])
    for paths in ((pred, gold), (combined, None)):
        options = {"duplicate_ids": "last", **({"join": "order"} if seed % 4 == 3 else {})}
        kept = ev.load_inputs(*paths, **options)
        assert kept.entries._gold.kept is not None
        with monkeypatch.context() as m:
            m.setattr(ev, "KEEP_PARSED_MAX_BYTES", 0)
            again = ev.load_inputs(*paths, **options)
        assert again.entries._gold.kept is None
        before = copy.deepcopy(list(kept.entries))
        assert before == list(again.entries) and kept.notices == again.notices
        ev.evaluate_entries(kept.entries, similarity=ev.Similarity(), families=("hgr", "strict", "per-relation"))
        assert list(kept.entries) == before


def test_id_column_same_compares_the_ids_exactly():
    # seeded pairs of ids: equal, same length but other bytes, other lengths, None,
    # non-ASCII and lone surrogates; IdColumn.same against Python's string equality
    rng = random.Random(7)
    pool = ["a", "b", "ab", "ba", "é", "e\u0301", "\ud800", "\udc00x", "中文", "r10", "r01", " r1", "r1 ", None]
    a, b = ev.IdColumn(), ev.IdColumn()
    for rid in pool:
        a.append(rid)
        b.append(rid)
    rows_a = [rng.randrange(len(pool)) for _ in range(2000)]
    rows_b = [k if rng.random() < 0.3 else rng.randrange(len(pool)) for k in rows_a]
    expected = [pool[i] is not None and pool[i] == pool[j] for i, j in zip(rows_a, rows_b)]
    assert ev.IdColumn.same(a, ev.np.array(rows_a), b, ev.np.array(rows_b)).tolist() == expected
    assert ev.IdColumn.same(a, ev.np.array([], dtype=int), b, ev.np.array([], dtype=int)).tolist() == []


def test_join_by_id_tells_a_hash_collision_from_the_same_id(tmp_path, monkeypatch):
    # ids hashed by their first character: the gold hashes are distinct ('a1', 'b1'), and the
    # prediction id 'a2' has the hash of 'a1': not its gold record, but an unknown id
    monkeypatch.setattr(ev, "hash", lambda rid: ord(rid[0]), raising=False)
    g = write_jsonl(tmp_path / "g.jsonl", [gold_rec("a1", [ACME_A]), gold_rec("b1", [ACME_B])])
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": "b1", "triplets": [ACME_B]}, {"id": "a1", "triplets": []}])
    assert [(e.gold.id, e.pred.line) for e in ev.load_inputs(p, g).entries] == [("a1", 2), ("b1", 1)]
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": "b1", "triplets": [ACME_B]}, {"id": "a2", "triplets": []}])
    with pytest.raises(ev.InputError, match=r"p\.jsonl: 1 prediction id\(s\) have no gold record in .*: 'a2'"):
        ev.load_inputs(p, g)


# --- input formats: one reader per suffix or kind (INPUT_READERS) ---


class _TsvReader(ev.RecordReader):
    """A toy input format: one triplet a line, ``id<TAB>source<TAB>relation<TAB>target<TAB>weight``;
    the consecutive lines of one id are one record (its line: the first of them); a line
    without 5 fields is an unreadable record."""

    name = "TSV"

    @staticmethod
    def records(path):
        out = []
        for n, text in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            cells = text.split("\t")
            if len(cells) != 5:
                out.append(ev.JsonlLine(n, None, f"line {n}: expected 5 tab-separated fields, found {len(cells)}"))
                continue
            rid, source, relation, target, weight = cells
            item = {"source": {"title": source, "type": "entity"},
                    "relation": {"type": relation, "weight": float(weight)},
                    "target": {"title": target, "type": "entity"}}
            if out and out[-1].value is not None and out[-1].value["id"] == rid:
                out[-1].value["triplets"].append(item)
            else:
                out.append(ev.JsonlLine(n, {"id": rid, "triplets": [item]}, None))
        return out


def test_an_input_format_added_through_the_table_alone_is_scored_end_to_end(tmp_path, monkeypatch):
    # r1: gold A and B, predicted A and a wrong triplet; r2: gold A, predicted A twice (lines 3-4
    # of the TSV: one record, a duplicate item is not merged); line 5 is not a record (a bad
    # prediction line, named with its line). Micro: 2 of 4 predicted items right, 2 of 3 gold found.
    monkeypatch.setitem(ev.INPUT_READERS, ".tsv", _TsvReader)  # restored (removed) after the test
    gold = write_jsonl(tmp_path / "gold.jsonl", [gold_rec("r1", [ACME_A, ACME_B]), gold_rec("r2", [ACME_A])])
    pred = write(tmp_path / "pred.tsv", (
        "r1\tAcme Inc\tlocated_in\tCity Y\t0.9\n"
        "r1\tAcme Inc\tacquired\tGlobex\t0.5\n"
        "r2\tAcme Inc\tlocated_in\tCity Y\t0.9\n"
        "r2\tAcme Inc\tlocated_in\tCity Y\t0.9\n"
        "just one field\n").encode())
    assert ev.input_reader(pred) is _TsvReader and ev.input_reader(tmp_path / "p.TSV") is _TsvReader
    assert ev.input_reader(gold) is ev.JsonlInput and ev.input_reader(tmp_path / "refs.XML") is ev.WebNLGReader
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--report", report)
    assert rc == 0, err
    rep = json.loads(report.read_text())
    assert [(row["id"], row["pred_line"], row["gold_line"]) for row in rep["per_entry"]] == [("r1", 1, 1), ("r2", 3, 2)]
    micro = rep["summary"]["micro"]
    assert (micro["triplet_precision"], micro["triplet_recall"]) == (0.5, 2 / 3)
    problems = rep["summary"]["input_problems"]
    assert len(problems) == 2 and problems[0] == (f"{pred}: line 5: expected 5 tab-separated fields, found 1 (no "
                                                  "readable id: scored as an unparseable prediction when records "
                                                  "are paired by line order, else not attributable)")
    assert problems[1].startswith(f"{pred}: 1 line(s) without a readable id (line 5) cannot be attributed")


def test_read_records_goes_through_the_readers_table(tmp_path):
    # a .xml file is WebNLG (one record per <entry>); any other suffix is JSONL
    xml = write(tmp_path / "cands.XML", b"<benchmark><entries><entry><generatedtripleset><gtriple>A | p | B</gtriple>"
                                        b"</generatedtripleset></entry><entry></entry></entries></benchmark>")
    assert list(ev.read_records(xml)) == [ev.JsonlLine(1, {"triples": [["A", "p", "B"]]}, None),
                                          ev.JsonlLine(2, {"triples": []}, None)]
    text = write(tmp_path / "preds.txt", b'{"id": "r1"}\n\n[1]\n')
    assert [(r.line_no, r.value) for r in ev.read_records(text)] == [(1, {"id": "r1"}), (3, [1])]
    with pytest.raises(ev.InputError, match=r"cands\.xml: no <entry> elements found"):
        ev.read_records(write(tmp_path / "cands.xml", b"<benchmark></benchmark>"))
