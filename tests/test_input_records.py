"""Input: records, fields, joining gold and predictions (load_inputs, load_vocabulary):
encodings, chat-format gold, ids and line order, duplicates, bad gold lines
(``--skip-bad-gold``), predictions without gold, invalid gold items named with file and
line. Each case goes through the real input layer and the scoring, or through the CLI
(``evaluate.main``) when it is about exit codes, stderr or the report file.

Reference triplets: A = Acme Inc -located_in-> City Y (0.9), B = Acme Inc -founded_by->
Person Z (0.8), all endpoints of type ``entity`` (conftest.py).
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import ACME_A, ACME_B  # noqa: E402
from helpers import (
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
    assert listed.group(1) == "r1"
    assert rep is None


def test_duplicate_ids_last_keeps_last_and_reports_count(tmp_path):
    gold = [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])]
    pred = [{"id": "r1", "triplets": []}, {"id": "r2", "triplets": [ACME_B]}, {"id": "r1", "triplets": [ACME_A]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--duplicate-ids", "last")
    assert rc == 0, err
    assert rep["summary"]["duplicates_dropped"] == 1
    assert any("1 duplicate" in p for p in rep["summary"]["input_problems"])
    r1, r2 = rep["per_entry"]
    assert r1["pred_line"] == 3  # the last copy, which holds [ACME_A]
    assert_perfect(r1)
    assert_perfect(r2)
    # and "first" keeps the empty first copy
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--duplicate-ids", "first")
    assert rc == 0
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
