"""GitHub issue "Robust input": end-to-end tests of the stated cases.

Every case goes through the real input layer (``read_jsonl`` -> ``load_inputs`` ->
``prediction_from_record``/``parse_model_output``) and the scoring (``evaluate_entries``
with the lexical similarity), or through the CLI (``evaluate.main``) when the case is about
exit codes, stderr or the report file. Files are written to ``tmp_path``.

Reference triplets (from the issue): A = Acme Inc -located_in-> City Y (0.9),
B = Acme Inc -founded_by-> Person Z (0.8), all endpoints of type ``entity``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evaluate as ev

from conftest import ACME_A as A, ACME_B as B  # noqa: E402
a = json.dumps(A)
b = json.dumps(B)
PROMPT = "Acme Inc is located in City Y. It was founded by Person Z."


# --------------------------------------------------------------------------- helpers


def line(obj: Any) -> bytes:
    """One JSONL line (LF-terminated bytes)."""
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def gold_rec(rid: str | None, items: list, prompt: str = PROMPT) -> dict:
    rec = {"prompt": prompt, "triplets": items}
    if rid is not None:
        rec = {"id": rid, **rec}
    return rec


def write(path: Path, data: bytes | list) -> Path:
    """Write raw bytes, or a list of records / raw byte lines as JSONL."""
    if isinstance(data, list):
        data = b"".join(x if isinstance(x, bytes) else line(x) for x in data)
    path.write_bytes(data)
    return path


def score(tmp_path: Path, gold: bytes | list, pred: bytes | list, **load_kw: Any) -> dict:
    """load_inputs + evaluate_entries (lexical similarity) on files written to tmp_path."""
    g = write(tmp_path / "gold.jsonl", gold)
    p = write(tmp_path / "pred.jsonl", pred)
    loaded = ev.load_inputs(p, g, **load_kw)
    report = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity())
    report["summary"]["input_problems"] = loaded.problems
    report["summary"]["duplicates_dropped"] = loaded.duplicates_dropped
    return report


def score_output(tmp_path: Path, output: str, gold_items: list | None = None) -> dict:
    """Score one raw model output against gold r1 (default [A]); returns the per-entry row."""
    gold_items = [A] if gold_items is None else gold_items
    rep = score(tmp_path, [gold_rec("r1", gold_items)], [{"id": "r1", "output": output}])
    assert rep["summary"]["n_entries"] == 1
    return rep["per_entry"][0]


def cli(tmp_path: Path, *args: str) -> tuple[int, str, str, dict | None]:
    """Run ``evaluate.main`` in-process with --no-embeddings and a report in tmp_path.

    Returns (exit status, stdout, stderr, parsed report or None). The report is parsed
    strictly: a NaN/Infinity token makes ``json.loads`` raise.
    """
    report = tmp_path / "report.json"
    if report.exists():
        report.unlink()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = ev.main([*args, "--no-embeddings", "--report", str(report)])
        except SystemExit as exc:  # argparse usage errors
            rc = exc.code
    data = None
    if report.exists():
        data = json.loads(report.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    return rc, out.getvalue(), err.getvalue(), data


def _reject_constant(token: str) -> Any:
    raise AssertionError(f"report contains the non-JSON token {token}")


def cli_files(tmp_path: Path, gold: bytes | list, pred: bytes | list, *extra: str):
    g = write(tmp_path / "gold.jsonl", gold)
    p = write(tmp_path / "pred.jsonl", pred)
    return cli(tmp_path, "--pred", str(p), "--gold", str(g), *extra)


def assert_perfect(row: dict) -> None:
    m = row["metrics"]
    for key in ("entity_precision", "entity_recall", "entity_f1",
                "triplet_precision", "triplet_recall", "triplet_f1"):
        assert m[key] == 1.0, (key, row)


# ------------------------------------------------------------- case 1: file encodings


def test_bom_crlf_blank_and_whitespace_lines(tmp_path):
    gold = (b"\xef\xbb\xbf" + line(gold_rec("r1", [A])).rstrip(b"\n") + b"\r\n"
            + b"\r\n"
            + line(gold_rec("r2", [B])).rstrip(b"\n") + b"\r\n"
            + b"  \t ")
    pred = (b"\xef\xbb\xbf" + line({"id": "r1", "triplets": [A]}).rstrip(b"\n") + b"\r\n"
            + b"\r\n"
            + line({"id": "r2", "triplets": [B]}).rstrip(b"\n") + b"\r\n"
            + b"   ")
    rep = score(tmp_path, gold, pred)
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
    gold = [gold_rec("r1", [A]), gold_rec("r2", [B])]
    bad = b'{"id": "r2", "output": "[' + b.encode() + b' caf\xff"}\n'
    pred = [{"id": "r1", "triplets": [A]}, bad]
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


# -------------------------------------------------------- case 2: reasoning blocks


@pytest.mark.parametrize("output", [
    "<think>\nlist [source, relation, target]…\n</think>\n\n[" + a + "]",
    "<think></think>\n[" + a + "]",
    "I should list the relation of Acme Inc.\n</think>\n[" + a + "]",
], ids=["think-with-bracketed-prose", "empty-think", "lone-closing-think"])
def test_reasoning_blocks_are_dropped(tmp_path, output):
    row = score_output(tmp_path, output)
    assert row["parse_status"] == "ok"
    assert row["metrics"]["n_pred_raw_items"] == 1
    assert_perfect(row)


def test_unclosed_think_without_json_is_unparseable_and_scored_empty(tmp_path):
    rep = score(tmp_path, [gold_rec("r1", [A])],
                [{"id": "r1", "output": "<think>\nAcme Inc is in City Y, so the answer is"}])
    row = rep["per_entry"][0]
    assert row["parse_status"] == "unparseable"
    m = row["metrics"]
    assert m["n_pred_raw_items"] == 0
    # n_items = 0: schema and grounding N/A in the composite, entity F1 = 0, relation and
    # weight N/A -> composite = 0.25*0 / 0.25 = 0.0
    assert m["composite"] == 0.0
    assert m["schema_score"] == 0.0  # unparseable answer (SPEC section 2)
    assert rep["summary"]["totals"]["unparseable_predictions"] == 1
    assert rep["summary"]["totals"]["empty_predictions"] == 1
    assert rep["summary"]["parse_status"]["unparseable"] == 1


# ------------------------------------------------------------------ case 3: fences


def test_json_fence_preferred_over_text_fence(tmp_path):
    output = "Notes:\n```text\nlooked for companies\n```\n```json\n[" + a + "]\n```"
    row = score_output(tmp_path, output)
    assert row["parse_status"] == "ok"
    assert_perfect(row)


def test_empty_json_fence_is_empty(tmp_path):
    row = score_output(tmp_path, "```json\n```")
    assert row["parse_status"] == "empty"
    assert row["metrics"]["n_pred_raw_items"] == 0
    assert row["metrics"]["composite"] == 0.0  # gold [A], empty answer


def test_backticks_inside_a_title_survive_byte_for_byte(tmp_path):
    title = "Acme ```json Inc``` Labs"
    item = json.loads(a)
    item["source"]["title"] = title
    output = "```json\n[" + json.dumps(item) + "]\n```"
    g = write(tmp_path / "gold.jsonl", [gold_rec("r1", [item])])
    p = write(tmp_path / "pred.jsonl", [{"id": "r1", "output": output}])
    loaded = ev.load_inputs(p, g)
    assert loaded.entries[0].pred.items[0]["source"]["title"] == title
    rep = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity())
    row = rep["per_entry"][0]
    assert_perfect(row)
    (pair,) = row["pairs"]
    assert pair["exact"] is True and pair["source_sim"] == 1.0


# ---------------------------------------------------------------- case 4: truncation


def test_truncated_array_keeps_complete_items(tmp_path):
    partial = '{"source":{"title":"Acme Inc","type":"entity"},"relation":{"type":"founded_by","weight":0.8},"target":{"title":"Pers'
    row = score_output(tmp_path, "[" + a + ", " + partial, gold_items=[A, B])
    assert row["parse_status"] == "truncated"
    m = row["metrics"]
    assert m["n_pred_raw_items"] == 1
    assert m["entity_precision"] == 1.0  # 1 tp / 1 item
    assert m["entity_recall"] == 0.5     # 1 tp / 2 gold


# ---------------------------------------------------------------- case 5: repairs


def test_single_quotes_are_repaired(tmp_path):
    row = score_output(tmp_path, "[" + a.replace('"', "'") + "]")
    assert row["parse_status"] == "repaired"
    assert_perfect(row)


def test_trailing_commas_are_repaired(tmp_path):
    output = ('[{"source": {"title": "Acme Inc", "type": "entity",}, '
              '"relation": {"type": "located_in", "weight": 0.9,}, '
              '"target": {"title": "City Y", "type": "entity",},},]')
    row = score_output(tmp_path, output)
    assert row["parse_status"] == "repaired"
    assert_perfect(row)


def test_python_set_is_one_invalid_item(tmp_path):
    row = score_output(tmp_path, "[{'Acme Inc', 'City Y'}]")
    m = row["metrics"]
    assert m["n_pred_raw_items"] == 1 and m["n_pred_valid"] == 0
    assert len(row["invalid_items"]) == 1
    assert m["entity_tp"] == 0 and m["schema_score"] == 0.0


# ------------------------------------------------------------------ case 6: shapes


@pytest.mark.parametrize("output", [a, json.dumps({"triplets": [A]}), "[[" + a + "]]"],
                         ids=["bare-object", "triplets-wrapper", "nested-list"])
def test_payload_shapes(tmp_path, output):
    row = score_output(tmp_path, output)
    assert row["metrics"]["n_pred_raw_items"] == 1
    assert_perfect(row)


def test_string_item_is_invalid_but_counted(tmp_path):
    row = score_output(tmp_path, json.dumps([A, "Acme Inc -> City Y"]))
    m = row["metrics"]
    assert m["n_pred_raw_items"] == 2 and m["n_pred_valid"] == 1
    assert m["entity_precision"] == 0.5  # 1 tp / 2 items
    assert m["entity_recall"] == 1.0     # 1 tp / 1 gold
    assert len(row["invalid_items"]) == 1 and row["invalid_items"][0].startswith("[1]")


# ----------------------------------------------------------- case 7: missing fields


def _without(item: dict, key: str) -> dict:
    return {k: v for k, v in item.items() if k != key}


@pytest.mark.parametrize("second, reason_prefix", [
    (_without(B, "target"), "[1].target: missing"),
    ({**B, "relation": "founded_by"}, "[1].relation"),
    (["Acme Inc", "founded_by", "Person Z", 0.8], "[1]"),
], ids=["no-target", "relation-string", "four-element-list"])
def test_malformed_second_item(tmp_path, second, reason_prefix):
    row = score_output(tmp_path, json.dumps([A, second]), gold_items=[A, B])
    assert len(row["invalid_items"]) == 1
    if reason_prefix.endswith("missing"):
        assert row["invalid_items"] == [reason_prefix]
    else:
        assert row["invalid_items"][0].startswith(reason_prefix)
    m = row["metrics"]
    assert m["entity_precision"] == 0.5  # 1 tp / 2 items
    assert m["entity_recall"] == 0.5     # 1 tp / 2 gold


# ------------------------------------------------------------------ case 8: weights

BAD_WEIGHTS = ["NaN", "1e999", "-Infinity", "1.5", "true", '"0.8"']


def test_bad_weights_are_invalid_and_report_is_strict_json(tmp_path):
    golds, preds = [], []
    for k, w in enumerate(BAD_WEIGHTS):
        item_text = a.replace("0.9", w)
        assert item_text != a
        # raw model text ...
        golds.append(gold_rec(f"raw{k}", [A]))
        preds.append({"id": f"raw{k}", "output": "[" + item_text + "]"})
        # ... and a parsed JSONL line holding the literal (e.g. NaN) itself
        golds.append(gold_rec(f"parsed{k}", [A]))
        preds.append(('{"id": "parsed%d", "triplets": [%s]}\n' % (k, item_text)).encode())
    rc, out, err, rep = cli_files(tmp_path, golds, preds)  # cli() parses the report strictly
    assert rc == 0, err
    assert rep["summary"]["n_entries"] == 12
    text = (tmp_path / "report.json").read_text(encoding="utf-8")
    json.loads(text, parse_constant=_reject_constant)
    for row in rep["per_entry"]:
        m = row["metrics"]
        assert m["n_pred_raw_items"] == 1 and m["n_pred_valid"] == 0, row
        assert len(row["invalid_items"]) == 1 and "weight" in row["invalid_items"][0], row
        assert math.isfinite(m["composite"])
        # schema 0 (0.30), entity F1 0 (0.25), grounding 1 (0.15; no valid prediction,
        # so no hallucination), relation/weight N/A -> 0.15 / 0.70
        assert m["composite"] == pytest.approx(0.15 / 0.70, abs=1e-12)
    assert rep["summary"]["totals"]["schema_invalid_entries"] == 12
    assert all(math.isfinite(v) for v in rep["summary"]["micro"].values())


# --------------------------------------------------------- case 9: Unicode titles


def test_unicode_normalisation_gives_exact_matches(tmp_path):
    def t(src, rel, tgt):
        return {"source": {"title": src, "type": "entity"}, "relation": {"type": rel, "weight": 0.9},
                "target": {"title": tgt, "type": "entity"}}

    gold = [t("Café Zürich", "located_in", "City Y"), t("Acme", "part_of", "ACME Labs")]
    pred = [t("Cafe\u0301 Zu\u0308rich", "located_in", "City Y"),
            t("\uff21\uff43\uff4d\uff45", "part_of", "acme labs")]
    assert gold[0]["source"]["title"] != pred[0]["source"]["title"]  # NFC vs NFD bytes differ
    rep = score(tmp_path, [gold_rec("r1", gold, "Café Zürich and Acme.")],
                [{"id": "r1", "triplets": pred}])
    row = rep["per_entry"][0]
    assert_perfect(row)
    assert len(row["pairs"]) == 2
    for pair in row["pairs"]:
        assert pair["exact"] is True
        assert pair["source_sim"] == pair["target_sim"] == 1.0


# ------------------------------------------------------ case 10: empty and missing


@pytest.mark.parametrize("gold_items, pred_items, composite", [
    ([], [A], 0.0),
    ([A], [], 0.0),
    ([], [], 1.0),
], ids=["empty-gold", "empty-prediction", "both-empty"])
def test_empty_sides(tmp_path, gold_items, pred_items, composite):
    rep = score(tmp_path, [gold_rec("r1", gold_items)], [{"id": "r1", "triplets": pred_items}])
    assert rep["per_entry"][0]["metrics"]["composite"] == composite


def test_gold_id_without_prediction_line_is_missing(tmp_path):
    rep = score(tmp_path, [gold_rec("r1", [A]), gold_rec("r2", [B])], [{"id": "r1", "triplets": [A]}])
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
    rc, out, err, rep = cli_files(tmp_path, content, [{"id": "r1", "triplets": [A]}])
    assert rc == 2
    assert "no gold records" in err and "gold.jsonl" in err
    assert rep is None


# ------------------------------------------------------------------- file problems


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le"], ids=["utf16-bom", "utf16-no-bom"])
def test_utf16_gold_file_exits_2(tmp_path, encoding):
    text = line(gold_rec("r1", [A])).decode() * 3
    rc, out, err, rep = cli_files(tmp_path, text.encode(encoding), [{"id": "r1", "triplets": [A]}])
    assert rc == 2
    assert "not UTF-8 JSONL" in err and "gold.jsonl" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_binary_gold_file_exits_2(tmp_path):
    rc, out, err, rep = cli_files(tmp_path, bytes(range(256)) * 8, [{"id": "r1", "triplets": [A]}])
    assert rc == 2
    assert "not UTF-8 JSONL" in err
    assert len(err.strip().splitlines()) == 1, err


def test_invalid_json_in_gold_exits_2_naming_file_and_line(tmp_path):
    gold = [gold_rec("r1", [A]), b'{"id": "r2", "prompt": "x", "triplets": [\n', gold_rec("r3", [B])]
    pred = [{"id": "r1", "triplets": [A]}, {"id": "r3", "triplets": [B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    assert "gold.jsonl" in err and "line 2" in err
    assert "Traceback" not in err
    assert rep is None


def test_skip_bad_gold_reports_and_excludes(tmp_path):
    gold = [gold_rec("r1", [A]), b'{"id": "r2", "prompt": "x", "triplets": [\n', gold_rec("r3", [B])]
    pred = [{"id": "r1", "triplets": [A]}, {"id": "r3", "triplets": [B]}]
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
    gold = [gold_rec("r1", [A]), b'{"id": "r2", "prompt": "x", "triplets": [\n', gold_rec("r3", [B])]
    pred = [{"id": "r1", "triplets": [A]}, {"id": "r2", "triplets": [A]}, {"id": "r3", "triplets": [B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--skip-bad-gold")
    assert rc == 0, err
    assert [e["id"] for e in rep["per_entry"]] == ["r1", "r3"]


def test_duplicate_ids_exit_2_listing_them(tmp_path):
    gold = [gold_rec("r1", [A]), gold_rec("r2", [B])]
    pred = [{"id": "r1", "triplets": []}, {"id": "r2", "triplets": [B]}, {"id": "r1", "triplets": [A]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    listed = re.search(r"duplicate prediction ids: ([^;]*);", err)
    assert listed is not None, err
    assert listed.group(1) == "r1"
    assert rep is None


def test_duplicate_ids_last_keeps_last_and_reports_count(tmp_path):
    gold = [gold_rec("r1", [A]), gold_rec("r2", [B])]
    pred = [{"id": "r1", "triplets": []}, {"id": "r2", "triplets": [B]}, {"id": "r1", "triplets": [A]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred, "--duplicate-ids", "last")
    assert rc == 0, err
    assert rep["summary"]["duplicates_dropped"] == 1
    assert any("1 duplicate" in p for p in rep["summary"]["input_problems"])
    r1, r2 = rep["per_entry"]
    assert r1["pred_line"] == 3  # the last copy, which holds [A]
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
    gold = [gold_rec("r1", [A]), gold_rec("r2", [B])]
    pred = [{"id": "r1", "triplets": [A]}, deep]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 0, err
    assert "Traceback" not in err
    assert "line 2" in err and "nested" in err
    r1, r2 = rep["per_entry"]
    assert_perfect(r1)
    assert r2["parse_status"] == "unparseable"
    assert any("line 2" in p and "nested" in p for p in rep["summary"]["input_problems"])


def test_prediction_id_without_gold_exits_2_listing_it(tmp_path):
    gold = [gold_rec("r1", [A])]
    pred = [{"id": "r1", "triplets": [A]}, {"id": "r9", "triplets": [B]}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    assert "r9" in err and "no gold" in err
    assert rep is None


def test_join_by_line_order_without_ids(tmp_path):
    gold = [gold_rec(None, [A]), gold_rec(None, [B])]
    pred = [{"triplets": [A]}, {"triplets": [B]}]
    rep = score(tmp_path, gold, pred)
    assert [e["pred_line"] for e in rep["per_entry"]] == [1, 2]
    for row in rep["per_entry"]:
        assert_perfect(row)
    # swapped order pairs A with B: nothing matches (entity F1 0 in both entries)
    rep = score(tmp_path, gold, list(reversed(pred)))
    assert [e["metrics"]["entity_tp"] for e in rep["per_entry"]] == [0, 0]


def test_non_object_prediction_line_never_mispairs_ids(tmp_path):
    # ids on every gold line and on every prediction object, predictions NOT in gold
    # order, and one prediction line that is valid JSON but not an object (a bare array).
    # Whatever the evaluator does with that line (report it, count r2 as missing, or
    # refuse the input), it must never pair a gold record with a prediction that carries
    # a different id: here gold r1 must get r1's prediction, not r3's.
    C = {"source": {"title": "Person Z", "type": "entity"}, "relation": {"type": "located_in", "weight": 0.8},
         "target": {"title": "City Q", "type": "entity"}}
    gold = [gold_rec("r1", [A]), gold_rec("r2", [B]), gold_rec("r3", [C])]
    pred = [{"id": "r3", "triplets": [C]}, json.dumps([B]).encode() + b"\n", {"id": "r1", "triplets": [A]}]
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
    gold = [gold_rec(None, [A]), gold_rec(None, [B])]
    pred = [{"triplets": [A]}, {"triplets": [B]}, {"triplets": []}]
    rc, out, err, rep = cli_files(tmp_path, gold, pred)
    assert rc == 2
    assert "line order" in err and "2" in err and "3" in err
    assert rep is None


# ------------------------------------------------------------ duplicate conventions


def test_gold_against_itself_with_duplicated_triplet(tmp_path):
    rep = score(tmp_path, [gold_rec("r1", [A, A, B])], [{"id": "r1", "triplets": [A, A, B]}])
    m = rep["per_entry"][0]["metrics"]
    assert m["entity_tp"] == 3 and m["full_tp"] == 3
    assert m["entity_f1"] == 1.0 and m["composite"] == 1.0


def test_three_copies_of_one_correct_triplet(tmp_path):
    rep = score(tmp_path, [gold_rec("r1", [A])], [{"id": "r1", "triplets": [A, A, A]}])
    m = rep["per_entry"][0]["metrics"]
    assert m["entity_tp"] == 1
    assert m["entity_precision"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["entity_recall"] == 1.0
    # the two extra copies: both titles are gold titles and the relation is in the
    # vocabulary -> novel_grounded, not hard hallucinations
    assert m["novel_grounded"] == 2 and m["hard_hallucinations"] == 0


# --------------------------------------------------------------------------- fuzzing

RATIO_KEYS = ("schema_score", "entity_precision", "entity_recall", "entity_f1",
              "triplet_precision", "triplet_recall", "triplet_f1", "relation_accuracy",
              "weight_score", "type_agreement", "hallucination_rate", "grounding", "composite")
COUNT_KEYS = ("n_gold", "n_pred_raw_items", "n_pred_valid", "entity_tp", "full_tp",
              "hard_hallucinations", "novel_grounded", "self_loops_removed")
FUZZ_GOLD = [A, B]
FUZZ_SIM = ev.Similarity()

titles = (st.sampled_from(["Acme Inc", "City Y", "Person Z"])
          | st.sampled_from(["acme", "", " ", "Acme Inc.", "ＡＣＭＥ", "City  y", "Persons Z"]) | st.text(max_size=12))
# mostly valid weights (so that items reach the matching), plus every invalid kind
weights = st.one_of(st.sampled_from([0.9, 0.8, 0, 1]), st.floats(0, 1),
                    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3),
                              st.booleans(), st.none(), st.text(max_size=4)))
relations = st.sampled_from(ev.SPEC_RELATIONS + ("based on", "", "made_by")) | st.text(max_size=8)
triplet_like = st.fixed_dictionaries({
    "source": st.fixed_dictionaries({"title": titles, "type": st.sampled_from(["entity", "concept", "Entity ", 1])}),
    "relation": st.fixed_dictionaries({"type": relations, "weight": weights}),
    "target": st.fixed_dictionaries({"title": titles, "type": st.sampled_from(["entity", "concept"])}),
})
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=10)
json_values = st.recursive(
    json_scalars | triplet_like,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["source", "target", "relation", "title", "type", "weight", "triplets", "x"]) | st.text(max_size=5),
        children, max_size=4),
    max_leaves=12,
)
#: random JSON, and answer-shaped lists that are mostly triplets (so matching is exercised)
fuzz_values = json_values | st.lists(st.one_of(triplet_like, triplet_like, json_scalars), max_size=5)


def check_pipeline(record: dict) -> None:
    pred = ev.prediction_from_record(record, 1)
    assert pred.status in ev.PREDICTION_STATUSES
    s = ev.score_entry(FUZZ_GOLD, pred.items, PROMPT, similarity=FUZZ_SIM)
    m = s.metrics
    for key in RATIO_KEYS:
        v = m[key]
        if v is None:
            continue
        assert isinstance(v, float) or isinstance(v, int), (key, v)
        assert math.isfinite(v) and 0.0 <= v <= 1.0, (key, v, record)
    for key in COUNT_KEYS:
        assert isinstance(m[key], int) and m[key] >= 0, (key, m[key])
    assert m["entity_tp"] <= min(m["n_gold"], m["n_pred_valid"])
    assert m["full_tp"] <= m["entity_tp"]
    json.dumps(m, allow_nan=False)


def fuzz(n: int) -> settings:
    """Settings of the fuzz tests: n examples, no deadline, reproducible."""
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.mark.slow
@fuzz(4000)
@given(st.text(max_size=80) | st.text(alphabet='[]{}"\',:<>/thinkjsonu` \n0123456789.-NaIfy', max_size=80))
def test_fuzz_random_strings_as_raw_output(text):
    check_pipeline({"id": "x", "output": text})


@pytest.mark.slow
@fuzz(3000)
@given(fuzz_values)
def test_fuzz_random_json_serialised_as_raw_output(value):
    check_pipeline({"id": "x", "output": json.dumps(value)})


@pytest.mark.slow
@fuzz(3000)
@given(fuzz_values)
def test_fuzz_random_json_as_parsed_triplets(value):
    check_pipeline({"id": "x", "triplets": value})
