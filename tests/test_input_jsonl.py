"""Input: read_jsonl, the strict JSONL reader: BOM, CRLF, CR-only files, invalid UTF-8,
invalid JSON, nesting depth, long lines in bounded memory, missing files; msgspec's
fast path and its exact fallbacks (orjson, then the json module).
"""

from __future__ import annotations

import contextlib
import json
import math
import tracemalloc

import pytest

import evaluate as ev
from evaluate import InputError, JsonlLine, read_jsonl

from conftest import run_main


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


def test_jsonl_long_first_line_after_a_bom_is_one_line(tmp_path):
    # the cap counts a line's bytes without its BOM: 40 bytes after a BOM are accepted, 41
    # are one over-long line (it used to be cut 3 bytes early and read as two lines)
    p = tmp_path / "bom.jsonl"
    exact = b'"' + b"x" * 38 + b'"'                        # 40 bytes
    p.write_bytes(b"\xef\xbb\xbf" + exact + b"\n[1]\n")
    assert [(r.line_no, r.value, r.error) for r in read_jsonl(p, max_line_bytes=40)] == [
        (1, "x" * 38, None), (2, [1], None)]
    p.write_bytes(b"\xef\xbb\xbf" + b"[" * 30 + b"]" * 30 + b"\n[1]\n")
    # 60 bytes + LF = 61 bytes on line 1 (BOM excluded)
    assert [(r.line_no, r.error) for r in read_jsonl(p, max_line_bytes=40)] == [
        (1, "line 1: line longer than 40 bytes (61 bytes); skipped"), (2, None)]


def test_jsonl_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------------------
# msgspec reads the lines; every line it refuses takes the steps (orjson, then json.loads)
# --------------------------------------------------------------------------------------

def same_json(a, b) -> bool:
    """Equal values of equal types, NaN equal to NaN, dict key order included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)           # nan == nan, -0.0 vs 0.0 told apart
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    return a == b


# (line, orjson reads it differently from json.loads: rejects it or changes its value)
SPECIAL_LINES = [
    ('{"x": NaN}', True),
    ('[Infinity, -Infinity]', True),
    ('{"w": 1e999}', True),                          # json: inf; orjson: rejected
    ('{"w": -1e999, "v": 1.7976931348623159e308}', True),
    ('{"s": "\\ud800"}', True),                       # lone high surrogate
    ('{"s": "x\\udc00y"}', True),                     # lone low surrogate
    ('{"s": "\\ud800\\u0041"}', True),                # high surrogate without its pair
    ('{"id": 18446744073709551616}', True),          # 2**64: orjson -> 1.8446744073709552e+19
    ('{"id": -9223372036854775809}', True),          # below -2**63: orjson -> float
    ('{"id": 123456789012345678901234567890}', True),
    ('{"id": 18446744073709551615}', False),          # 2**64 - 1: orjson keeps the int
    ('{"id": -9223372036854775808}', False),
    ('{"a": 1, "b": 0, "a": 2}', False),              # duplicates: last value, first place
    ('{"a": {"a": 1}, "a": [2]}', False),
    ('{"s": "\\ud83d\\ude00", "t": "\\u0000\\u2028"}', False),   # a surrogate pair, NUL, LS
    ('[-0, -0.0, 0e0, 1E2, 1e-400, 4.9e-324, 2.2250738585072011e-308]', False),
    ('{"f": 0.30000000000000004, "g": 1.7976931348623157e308}', False),
]


@pytest.mark.parametrize("line, differs", SPECIAL_LINES)
def test_jsonl_values_equal_json_loads(tmp_path, line, differs):
    orjson = pytest.importorskip("orjson")
    try:
        direct = ("value", orjson.loads(line))
    except orjson.JSONDecodeError:
        direct = ("rejected", None)
    # the case is what it claims: orjson alone would get this line wrong (or right)
    assert (direct[0] == "rejected" or not same_json(direct[1], json.loads(line))) == differs
    path = tmp_path / "x.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    [rec] = read_jsonl(path)
    key = _repeated_top_level_key(line)  # the values are json's (last value, first place), the line an error
    if key is not None:
        assert (rec.value, rec.error) == (None, f"line 1: the key {key!r} is given more than once (a JSON reader "
                                                "keeps only the last value): give each key once")
    else:
        assert rec.error is None
        assert same_json(rec.value, json.loads(line))
    assert same_json(ev.JsonlReader.loads(line), json.loads(line))
    decode, refused = ev.JsonlReader._msgspec()   # the first reader: json's value, or it refuses the line
    with contextlib.suppress(*refused):
        assert same_json(decode(line.encode("utf-8", "surrogatepass")), json.loads(line))


@pytest.mark.parametrize("line", ['[1,]', '{"a": 1} x', '01', '"\x01"', '{"a" 1}', "{'a': 1}", '[1]\x0c'])
def test_jsonl_invalid_lines_keep_json_messages(tmp_path, line):
    # orjson rejects them too; the error (message and column) is json's, as before
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(line)
    path = tmp_path / "x.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    [rec] = read_jsonl(path)
    assert rec.value is None
    assert rec.error == f"line 1: invalid JSON: {expected.value.msg} (column {expected.value.colno})"


def test_jsonl_ordinary_lines_go_through_msgspec(tmp_path, monkeypatch):
    # the fast path is really taken: msgspec reads every line first, and only the lines it
    # refuses take the steps (orjson, then the json module where orjson refuses them too)
    orjson = pytest.importorskip("orjson")
    calls = {"msgspec": 0, "orjson": 0, "json": 0}
    decode, refused = ev.JsonlReader._msgspec()
    real_orjson, real_json = orjson.loads, json.loads

    def spy_msgspec(raw):
        calls["msgspec"] += 1
        return decode(raw)

    def spy_orjson(text):
        calls["orjson"] += 1
        return real_orjson(text)

    def spy_json(text, *args, **kwargs):
        calls["json"] += 1
        return real_json(text, *args, **kwargs)

    monkeypatch.setattr(ev.JsonlReader, "_msgspec", staticmethod(lambda: (spy_msgspec, refused)))
    monkeypatch.setattr(ev.orjson, "loads", spy_orjson)
    monkeypatch.setattr(ev.json, "loads", spy_json)
    path = tmp_path / "x.jsonl"
    path.write_text('{"id": "1", "triplets": []}\n{"id": 2, "w": 0.5}\n{"x": NaN}\n'
                    '{"id": 1234567890123456789012}\n', encoding="utf-8")
    recs = list(read_jsonl(path))
    assert [r.error for r in recs] == [None] * 4
    # msgspec reads lines 1, 2 and 4 (an integer beyond 64 bits: exact); line 3 (NaN) goes
    # to orjson, which refuses it too, and then to json.loads
    assert calls == {"msgspec": 4, "orjson": 1, "json": 1}
    assert recs[3].value == {"id": 1234567890123456789012} and type(recs[3].value["id"]) is int
    assert math.isnan(recs[2].value["x"])


def test_an_integer_beyond_the_interpreters_digit_limit_is_the_lines_error(tmp_path):
    # json.loads raises a plain ValueError for an integer of more digits than
    # sys.get_int_max_str_digits() (4300 by default): the line is bad, not the run
    import sys

    digits = sys.get_int_max_str_digits() + 1
    raw = b'{"id": "e1", "x": ' + b"1" * digits + b"}\n"
    got = ev.JsonlReader.decode_line(raw, 3, 20)
    assert got.value is None and got.error.startswith(
        f"line 3: a JSON number this reader cannot read (Exceeds the limit ({digits - 1} digits) for integer string "
        f"conversion: value has {digits} digits")
    (tmp_path / "g.jsonl").write_text('{"id": "e1", "prompt": "Ada wrote notes.", "triplets": []}\n'
                                      '{"id": "e2", "prompt": "x", "triplets": []}\n')
    (tmp_path / "p.jsonl").write_bytes(raw + b'{"id": "e2", "triplets": []}\n')
    rc, out, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings",
                            "--no-report")
    assert rc == 0 and "unparseable 1" in out
    assert f"{tmp_path / 'p.jsonl'}: line 1: a JSON number this reader cannot read (" in err


def test_a_line_with_many_brackets_takes_the_steps_with_the_same_value():
    # more than FAST_MAX_BRACKETS brackets: msgspec's value is not taken, the steps read it
    # (the same value); a max_depth below the bracket count still gives the depth error
    nested = "[" * 300 + "]" * 300
    raw = ('{"a": ' + nested + ', "b": ' + nested + '}').encode()
    assert raw.count(b"[") > ev.JsonlReader.FAST_MAX_BRACKETS
    got = ev.JsonlReader.decode_line(raw, 1, 1000)
    assert got.error is None and got.value == json.loads(raw)
    assert ev.JsonlReader.decode_line(raw, 1, 299).error == "line 1: JSON nested deeper than 299 levels"
    assert ev.JsonlReader.decode_line(raw, 1, 301).error is None


def _json_or_refused(raw: bytes):
    """The reference reading of a line's bytes: ("value", json.loads of its strict UTF-8
    text) or ("refused", None) where either step raises."""
    try:
        return "value", json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return "refused", None


#: Pieces of JSON text and of bytes that are not: mutations of valid lines (below) insert them.
_FUZZ_PIECES = [b"{", b"}", b"[", b"]", b'"', b":", b",", b"\\", b"u", b"d8", b"00", b"e", b"E", b"-", b"+", b".",
                b"0", b"1", b"9", b" ", b"\t", b"\r", b"\n", b"\xc3", b"\xa9", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80",
                b"\xff", b"\xc0\x80", b"\xef\xbb\xbf", b"true", b"null", b"NaN", b"Infinity", b"a", b"\x00", b"\x1f",
                b"\x7f", b"\\ud800", b"\\udc00", b"1e999", b"12345678901234567890"]


def test_msgspec_reads_what_json_loads_reads_or_refuses_the_line():
    # seeded fuzz: 30,000 byte strings (mutated report-like lines, random pieces, numbers of
    # up to 40 digits with fractions and exponents up to 400): wherever msgspec reads a line,
    # json.loads of its text reads the same value (types, key order, -0.0, big integers);
    # where json reads it otherwise or not at all, msgspec refuses it (decode_line then takes
    # the steps)
    import random

    rng = random.Random(20261203)
    decode, refused = ev.JsonlReader._msgspec()
    base = [json.dumps({"id": f"e{k}", "prompt": "Ada Lovelace wrote notes \u00e9.", "triplets": [
        {"source": {"title": "Ada", "type": "person"}, "relation": {"type": "wrote", "weight": 0.5 + k / 7},
         "target": {"title": "Notes", "type": "work"}}] * (k % 3)}, ensure_ascii=k % 2 == 0).encode()
        for k in range(12)]
    read = 0
    for _ in range(30_000):
        kind = rng.random()
        if kind < 0.5:
            raw = bytearray(rng.choice(base))
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(raw) + 1)
                op = rng.random()
                if op < 0.4:
                    raw[at:at] = rng.choice(_FUZZ_PIECES)
                elif op < 0.7:
                    del raw[at:at + rng.randint(1, 3)]
                elif at < len(raw):
                    raw[at] = rng.randrange(256)
            raw = bytes(raw)
        elif kind < 0.8:
            raw = b"".join(rng.choice(_FUZZ_PIECES) for _ in range(rng.randint(1, 12)))
        else:
            text = rng.choice(["", "-"]) + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))
            if rng.random() < 0.5:
                text += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30)))
            if rng.random() < 0.5:
                text += rng.choice("eE") + rng.choice(["", "-", "+"]) + str(rng.randint(0, 400))
            raw = f"[{text}]".encode()
        try:
            got = decode(raw)
        except refused:
            continue
        read += 1
        kind, expected = _json_or_refused(raw)
        assert kind == "value" and same_json(got, expected), raw
    assert read > 5_000   # the comparison is not empty: many lines are read (the valid ones)


def test_jsonl_floats_equal_json_loads():
    # correctly rounded in both: random decimal strings and the repr of random doubles
    import random
    import struct

    orjson = pytest.importorskip("orjson")
    rng = random.Random(20261201)
    for k in range(20_000):
        if k % 2:
            digits = str(rng.randint(0, 10 ** rng.randint(1, 18)))
            text = f"{digits[:1]}.{digits[1:] or '0'}e{rng.randint(-330, 307)}"
        else:
            text = repr(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
            if "n" in text:         # nan, inf
                continue
        assert same_json(ev.JsonlReader.loads(text), json.loads(text)), text
        with contextlib.suppress(orjson.JSONDecodeError):
            assert same_json(orjson.loads(text), json.loads(text)), text


# --- Reading a file in byte ranges (JsonlReader.line_ranges + located(start, stop, line_no)) ---

#: Lines of every kind the reader tells apart (each without its line end; the line end is
#: drawn separately): valid, blank, whitespace-only, invalid JSON, invalid UTF-8, too deep,
#: over-long (longer than the 40-byte cap used below), exactly at the cap, and a lone CR.
RANGE_LINES = [b'{"id": "1", "v": [1, 2]}', b"", b"  \t ", b'{"id": "2", "v": [', b'{"id": "3", "v": "caf\xff"}',
               b"[" * 30 + b"]" * 30, b'{"id": "4", "v": "' + b"x" * 60 + b'"}', b'{"v": "' + b"y" * 31 + b'"}',
               b"\r", b"7", b'"\xc3\xa9"']


def ranged(path, size, max_line_bytes, max_depth=20):
    """Every row of ``path`` read range by range (ranges of ``size`` bytes), and the ranges."""
    ranges = list(ev.JsonlReader.line_ranges(path, size))
    rows = [row for start, stop, line_no in ranges
            for row in ev.JsonlReader.located(path, max_line_bytes, max_depth, start=start, stop=stop, line_no=line_no)]
    return rows, ranges


def check_ranges_cover(data: bytes, ranges) -> None:
    """The ranges tile the file, each starting at a line start, with the right line count."""
    assert ranges[0][:1] == (0,) and ranges[-1][1] is None
    for (start, stop, line_no), nxt in zip(ranges, ranges[1:] + [None]):
        assert start == 0 or data[start - 1:start] == b"\n"
        assert line_no == data[:start].count(b"\n")
        if nxt is not None:
            assert stop == nxt[0] and stop > start


def test_ranges_read_every_line_as_one_reading_does(tmp_path):
    # a BOM, CRLF and LF ends, blank lines, an over-long line across several ranges, and
    # a last line without a line end; every range size from 1 byte to past the file size
    data = (b"\xef\xbb\xbf" + RANGE_LINES[0] + b"\r\n" + b"\n" + RANGE_LINES[6] + RANGE_LINES[6] + b"\n"
            + RANGE_LINES[3] + b"\r\n" + RANGE_LINES[4] + b"\n  \n" + RANGE_LINES[7] + b"\n" + RANGE_LINES[0])
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    whole = list(ev.JsonlReader.located(path, 40, 20))
    # lines 1 (BOM, offset 3), 3 (over-long: 2 x 80 bytes, skipped; CRC 0), 4, 5, 7, 8 (no LF)
    assert [(r.line_no, r.error is None) for r, *_ in whole] == [
        (1, True), (3, False), (4, False), (5, False), (7, True), (8, True)]
    assert whole[0][1:3] == (3, len(RANGE_LINES[0]) + 2) and whole[1][3] == 0
    assert whole[1][0].error == "line 3: line longer than 40 bytes (161 bytes); skipped"
    for size in range(1, len(data) + 2):
        rows, ranges = ranged(path, size, 40)
        check_ranges_cover(data, ranges)
        assert rows == whole, size


@pytest.mark.parametrize("data", [b"", b"\n", b"\n\n", b"7", b"7\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf7\r\n8"])
def test_ranges_of_tiny_files(tmp_path, data):
    path = tmp_path / "x.jsonl"
    path.write_bytes(data)
    whole = list(ev.JsonlReader.located(path, 40, 20))
    for size in (1, 2, 3, 100):
        rows, ranges = ranged(path, size, 40)
        check_ranges_cover(data, ranges)
        assert rows == whole


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.tuples(st.sampled_from(RANGE_LINES), st.sampled_from([b"\n", b"\r\n"])), max_size=25),
       last_end=st.booleans(), bom=st.booleans(), size=st.integers(1, 300))
def test_ranges_equal_one_reading_property(tmp_path_factory, lines, last_end, bom, size):
    data = (b"\xef\xbb\xbf" if bom else b"") + b"".join(text + end for text, end in lines)
    if lines and not last_end:
        data = data[:-len(lines[-1][1])]
    path = tmp_path_factory.mktemp("ranges") / "x.jsonl"
    path.write_bytes(data)
    rows, ranges = ranged(path, size, 40)
    check_ranges_cover(data, ranges)
    assert rows == list(ev.JsonlReader.located(path, 40, 20))


# --- Reading a kept line again (JsonlReader.read_again: LineStore.value) ---


def _decode_steps(raw: bytes, line_no: int, max_depth: int):
    """JsonlReader.decode_line as first written (the reference): strict UTF-8, blank lines
    None, JsonlReader.loads of the text, then the depth test."""
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return ev.JsonlLine(line_no, None, f"line {line_no}: invalid UTF-8 at byte {e.start} of the line (0-based)",
                            raw[:ev.JsonlReader.RAW_HEAD])
    if not s.strip():
        return None
    s = s.rstrip("\r\n")
    try:
        value = ev.JsonlReader.loads(s, raw)
    except RecursionError:
        return ev.JsonlLine(line_no, None, f"line {line_no}: JSON nested deeper than {max_depth} levels (exceeds "
                                           "the decoder's recursion limit)", raw[:ev.JsonlReader.RAW_HEAD])
    except json.JSONDecodeError as e:
        return ev.JsonlLine(line_no, None, f"line {line_no}: invalid JSON: {e.msg} (column {e.colno})",
                            raw[:ev.JsonlReader.RAW_HEAD])
    if ev.JsonlReader.depth_exceeds(raw, max_depth):
        return ev.JsonlLine(line_no, None, f"line {line_no}: JSON nested deeper than {max_depth} levels",
                            raw[:ev.JsonlReader.RAW_HEAD])
    key = _repeated_top_level_key(s)
    if key is not None:
        return ev.JsonlLine(line_no, None, f"line {line_no}: the key {key!r} is given more than once (a JSON reader "
                                           "keeps only the last value): give each key once", raw[:ev.JsonlReader.RAW_HEAD])
    return ev.JsonlLine(line_no, value, None)


def _repeated_top_level_key(text: str) -> str | None:
    """The first key that the line's top-level object gives twice (the reference: every
    object's pairs, the top level's last), or None."""
    objects: list[list[tuple[str, object]]] = []
    json.loads(text.lstrip("\ufeff"), object_pairs_hook=lambda pairs: objects.append(pairs) or dict(pairs))
    if not objects or not text.strip().lstrip("\ufeff").startswith("{"):
        return None
    keys = [k for k, _ in objects[-1]]
    return next((k for i, k in enumerate(keys) if k in keys[:i]), None)


@pytest.mark.parametrize("line, key", [
    ('{"id": "s03", "output": "[x]", "output": "[]"}', "output"),       # the answer given twice: the last kept
    ('{"id": "s05", "triplets": [1], "triplets": []}', "triplets"),
    ('{"id": "a", "x": 1, "id": "b"}', "id"),
    ('{"out\\u0070ut": "[x]", "output": "[]"}', "output"),            # one of them written with an escape
    ('{"a": 1, "a": 1}', "a"),                                           # even the same value twice
    ('{"id": "a", "triplets": [{"id": 1, "id": 2}]}', None),             # nested: not the fields a line gives
    ('{"id": "a", "triplets": [{"id": 1}], "x": {"id": 2}}', None),     # a top-level name used again inside
    ('{"id": "a", "s": "\\"id\\": \\"b\\""}', None),             # "id" inside a string
    ('[{"a": 1, "a": 2}]', None),                                        # not an object line
])
def test_a_key_given_twice_at_the_top_level_is_the_lines_error(line, key):
    raw = line.encode() + b"\n"
    got = ev.JsonlReader.decode_line(raw, 4, 20)
    assert _same_line(got, _decode_steps(raw, 4, 20))
    if key is None:
        assert got.error is None and got.value == json.loads(line)
    else:
        assert got == ev.JsonlLine(4, None, f"line 4: the key {key!r} is given more than once (a JSON reader keeps "
                                            "only the last value): give each key once", raw[:ev.JsonlReader.RAW_HEAD])


def test_a_repeated_key_makes_a_prediction_unparseable_and_a_gold_line_bad(tmp_path):
    # the prediction of s02 names its answer twice: scored as an unparseable prediction, with
    # the warning and notice naming file, line and key; the gold line is a bad gold line
    gold = [{"id": f"s0{i}", "prompt": "Ada wrote notes.", "triplets": []} for i in (1, 2)]
    (tmp_path / "g.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gold))
    (tmp_path / "p.jsonl").write_text('{"id": "s01", "output": "[]"}\n{"id": "s02", "output": "[]", "output": "[]"}\n')
    rc, out, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings",
                            "--no-report")
    message = ("line 2: the key 'output' is given more than once (a JSON reader keeps only the last value): give "
               "each key once (scored as an unparseable prediction for id 's02')")
    assert rc == 0 and f"warning: {tmp_path / 'p.jsonl'}: {message}" in err
    assert f"bad_prediction_line: {tmp_path / 'p.jsonl'}: {message}" in out and "unparseable 1" in out
    (tmp_path / "g2.jsonl").write_text(json.dumps(gold[0]) + '\n{"id": "s02", "triplets": [], "id": "s03"}\n')
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g2.jsonl", "--no-embeddings",
                          "--no-report")
    assert (rc, err) == (2, f"error: {tmp_path / 'g2.jsonl'}: line 2: the key 'id' is given more than once (a JSON "
                            "reader keeps only the last value): give each key once (pass --skip-bad-gold to report "
                            "and exclude such lines)\n")


def _same_line(a, b) -> bool:
    return (a is None) == (b is None) and (a is None or (a.line_no, a.error, a.raw_head) == (b.line_no, b.error, b.raw_head)
                                           and same_json(a.value, b.value))


def _check_read_again(raw: bytes) -> None:
    """read_again of a line that decode_line reads without an error is that same value."""
    first = ev.JsonlReader.decode_line(raw, 7, 20)
    assert _same_line(first, _decode_steps(raw, 7, 20)), raw   # orjson on the bytes first: the same line
    if first is None or first.error is not None:
        return
    again = ev.JsonlReader.read_again(raw, 7, 20)
    assert again.error is None and again.line_no == 7
    assert same_json(again.value, first.value), raw


@pytest.mark.parametrize("line", [text for text, _ in SPECIAL_LINES] + [
    '{"id": "a", "s": "caf\u00e9 \u2028 \U0001f600"}', '  {"a": 1}  ', '"x"', '7', 'null', '[]',
    '{"id": 1234567890123456789}', '{"id": 123456789012345678}', '', '  \t', '\x0c', '\ufeff{}', '[1,]',
    '{"a": 1} x', '[' * 30 + ']' * 30, '[' * 1100 + ']' * 1100, '{"s": "\x01"}', '"\ud800"'])
@pytest.mark.parametrize("end", [b"", b"\n", b"\r\n", b"\r\r\n", b"\x0c\n"])
def test_read_again_equals_the_first_reading(line, end):
    _check_read_again(line.encode("utf-8", "surrogatepass") + end)


@pytest.mark.parametrize("raw", [b'{"s": "caf\xff"}\n', b'{"s": "\xed\xa0\x80"}', b'\xef\xbb\xbf{}', b"\xc3",
                                 b'{"a": 1}\x00', b"\x85\n"])
def test_decode_line_of_invalid_bytes_equals_the_steps(raw):
    # bytes orjson refuses (invalid UTF-8, a BOM, a NUL) take the steps: the same errors
    assert _same_line(ev.JsonlReader.decode_line(raw, 3, 20), _decode_steps(raw, 3, 20))


@settings(max_examples=500, deadline=None)
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12), ascii_only=st.booleans(), end=st.sampled_from([b"\n", b"\r\n", b""]))
def test_read_again_equals_the_first_reading_property(value, ascii_only, end):
    """Any JSON value json.dumps writes (NaN, Infinity, big integers, lone surrogates,
    non-ASCII text included), as UTF-8 bytes: read_again gives decode_line's value."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    _check_read_again(text.encode("utf-8", "surrogatepass") + end)


_KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
                       max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, min_size=1, max_size=5), st.booleans(), st.data())
def test_the_repeated_key_test_agrees_with_every_pair_of_the_object(obj, ascii_only, data):
    # a line json.dumps writes (keys escaped or not) is never refused; the same line with one
    # of its top-level members written again (any key spelling json.dumps gives) always is
    line = json.dumps(obj, ensure_ascii=ascii_only)
    assert ev.JsonlReader.decode_line(line.encode(), 1, 50).error is None
    key = data.draw(st.sampled_from(sorted(obj)))
    again = json.dumps({key: data.draw(_VALUES)}, ensure_ascii=data.draw(st.booleans()))[1:-1]
    twice = line[:-1] + ", " + again + "}"
    got = ev.JsonlReader.decode_line(twice.encode(), 1, 50)
    assert got.error == (f"line 1: the key {_repeated_top_level_key(twice)!r} is given more than once (a JSON reader "
                         "keeps only the last value): give each key once")
