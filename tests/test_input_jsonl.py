"""Input: read_jsonl, the strict JSONL reader: BOM, CRLF, CR-only files, invalid UTF-8,
invalid JSON, nesting depth, long lines in bounded memory, missing files.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest

import evaluate as ev
from evaluate import InputError, JsonlLine, read_jsonl


def test_cr_only_line_endings_are_refused(tmp_path):
    path = tmp_path / "mac.jsonl"
    path.write_bytes(b'{"id": "1", "triplets": []}\r{"id": "2", "triplets": []}\r{"id": "3", "triplets": []}\r')
    with pytest.raises(ev.InputError, match="CR-only"):
        list(ev.read_jsonl(path))


def test_jsonl_bom_crlf_blank_lines(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n\r\n[2, 3]\r\n   \t  ')
    recs = list(read_jsonl(p))
    assert recs == [JsonlLine(1, {"a": 1}, None), JsonlLine(3, [2, 3], None)]


def test_jsonl_invalid_utf8_is_a_line_error(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": "caf\xff"}\n{"c": 3}\n')
    recs = list(read_jsonl(p))
    assert [r.line_no for r in recs] == [1, 2, 3]
    assert recs[0].value == {"a": 1} and recs[2].value == {"c": 3}
    assert recs[1].value is None
    # b'{"b": "caf' is 10 bytes -> the \xff is at 0-based byte 10
    assert recs[1].error == "line 2: invalid UTF-8 at byte 10 of the line (0-based)"


def test_jsonl_invalid_json_message(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1 "b": 2}\n')
    (rec,) = read_jsonl(p)
    # the decoder expects ',' at 0-based char 8 -> column 9
    assert rec.error == "line 1: invalid JSON: Expecting ',' delimiter (column 9)"


@pytest.mark.parametrize(
    "data, why",
    [("ab".encode("utf-16"), "BOM"), ('{"a": 1}\n'.encode("utf-16-le"), "UTF-16"),
     ('{"a": 1}\n'.encode("utf-16-be"), "UTF-16"), (b"\x1f\x8b\x08\x00abc", "gzip"),
     (bytes(range(256)) * 4, "binary")],
)
def test_jsonl_not_utf8_raises(tmp_path, data, why):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(data)
    with pytest.raises(InputError) as ei:
        read_jsonl(p)
    msg = str(ei.value)
    assert "not UTF-8 JSONL" in msg and "bad.jsonl" in msg and why in msg
    assert "\n" not in msg
    assert isinstance(ei.value, ValueError)


def test_jsonl_deep_nesting_is_a_line_error(tmp_path):
    p = tmp_path / "deep.jsonl"
    p.write_text("[" * 100_000 + "]" * 100_000 + "\n" + "[" * 150 + "]" * 150 + '\n{"ok": 1}\n')
    recs = list(read_jsonl(p))
    assert [r.line_no for r in recs] == [1, 2, 3]
    assert recs[0].value is None and "nested deeper than 100 levels" in recs[0].error
    assert recs[1].value is None and recs[1].error == "line 2: JSON nested deeper than 100 levels"
    assert recs[2] == JsonlLine(3, {"ok": 1}, None)


def test_jsonl_depth_ignores_brackets_inside_strings(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps({"t": "[" * 500}) + "\n")
    assert list(read_jsonl(p)) == [JsonlLine(1, {"t": "[" * 500}, None)]


def test_jsonl_nan_is_accepted(tmp_path):
    p = tmp_path / "nan.jsonl"
    p.write_text('{"w": NaN, "x": Infinity}\n')
    (rec,) = read_jsonl(p)
    assert rec.error is None
    assert rec.value["w"] != rec.value["w"] and rec.value["x"] == float("inf")


def test_jsonl_long_line_bounded_memory(tmp_path):
    p = tmp_path / "long.jsonl"
    with open(p, "wb") as f:
        f.write(b'{"a": 1}\n["')
        chunk = b"x" * (1 << 20)
        for _ in range(100):  # a 100 MiB line
            f.write(chunk)
        f.write(b'"]\n{"b": 2}\n')
    tracemalloc.start()
    try:
        recs = list(read_jsonl(p, max_line_bytes=1 << 20))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.line_no for r in recs] == [1, 2, 3]
    assert recs[0].value == {"a": 1} and recs[2].value == {"b": 2}
    # 2 + 100 * 2**20 + 3 bytes = 104857605 bytes in line 2
    assert recs[1].error == "line 2: line longer than 1048576 bytes (104857605 bytes); skipped"
    assert peak < 8 * (1 << 20)


def test_jsonl_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "nope.jsonl")
