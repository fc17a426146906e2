"""Input edge cases found by fresh-user reviews: streams, vocabulary comments, CR-only files,
wrong files for a family, chat-format gold (raw fields and null parsed fields:
tests/test_input_parser.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import evaluate as ev
from conftest import ACME_A as A, ACME_B as B

ROOT = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_predictions_from_a_pipe_score_like_the_file(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triplets": [A, B]}])
    pred_rows = [{"id": "1", "triplets": [A]}]
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--pred", "/dev/stdin", "--gold", str(gold),
         "--no-embeddings", "--quiet", "--report", str(report)],
        input="".join(json.dumps(r) + "\n" for r in pred_rows), text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(report.read_text())["summary"]
    # 1 of 2 gold triplets found: entity P = 1/1, R = 1/2
    assert summary["micro"]["entity_precision"] == 1.0
    assert summary["micro"]["entity_recall"] == 0.5
    assert summary["parse_status"]["missing"] == 0


def test_relations_file_with_inline_comments(tmp_path):
    path = tmp_path / "rel.txt"
    path.write_text("# vocabulary\nextends  # the usual one\n\nbased_on\n", encoding="utf-8")
    assert ev.load_vocabulary(path) == ("extends", "based_on")


def test_cr_only_line_endings_are_refused(tmp_path):
    path = tmp_path / "mac.jsonl"
    path.write_bytes(b'{"id": "1", "triplets": []}\r{"id": "2", "triplets": []}\r{"id": "3", "triplets": []}\r')
    with pytest.raises(ev.InputError, match="CR-only"):
        list(ev.read_jsonl(path))


def test_text2kgbench_on_typed_gold_names_the_expected_triple_shape(tmp_path, capsys):
    onto = tmp_path / "onto.json"
    onto.write_text(json.dumps({"concepts": [{"label": "Company"}], "relations": [{"label": "located_in"}]}))
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triplets": [A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triplets": [A]}])
    code = ev.main(["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "text2kgbench",
                    "--no-embeddings", "--quiet", "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2
    # the gold items are typed HGR triplets, not Text2KGBench's {sub, rel, obj} triples
    assert "text2kgbench: triple dict needs keys sub/rel/obj" in err
    assert "Punkt" not in err


def test_xml_without_entries_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "cand.xml"
    bad.write_text("<benchmark><entries><entry", encoding="utf-8")
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triplets": [A]}])
    code = ev.main(["--pred", str(bad), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", str(tmp_path / "r.json")])
    assert code == 2
    assert "no <entry> elements" in capsys.readouterr().err


def test_invalid_gold_items_are_named_with_file_and_line(tmp_path, capsys):
    bad = dict(A, relation={"type": "located_in", "weight": "0.9"})
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": "1", "prompt": "p", "triplets": [bad, B]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triplets": [B]}])
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
                                 {"role": "assistant", "content": "```json\n" + json.dumps([A]) + "\n```"}]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "output": json.dumps([A])}])
    loaded = ev.load_inputs(pred, gold)
    record = loaded.entries[0].gold
    # user content = prompt, assistant content = the gold JSON (parsed like model text)
    assert record.prompt == "Acme Inc is located in City Y."
    assert record.items == [A]
    report = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity())
    assert report["summary"]["macro"]["composite"] == 1.0


def test_chat_format_gold_without_assistant_message_is_exit_2(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "chat.jsonl", [{"id": "1", "messages": [{"role": "user", "content": "x"}]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triplets": []}])
    code = ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", str(tmp_path / "r.json")])
    assert code == 2
    assert "line 1" in capsys.readouterr().err
