"""Tests for the parsing section: parse_model_output and read_jsonl."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluate import (
    PARSE_STATUSES,
    InputFormatError,
    JsonlLine,
    ParseResult,
    parse_model_output,
    read_jsonl,
)

# Reference triplets.
from conftest import ACME_A as A, ACME_B as B  # noqa: E402
a = json.dumps(A)
b = json.dumps(B)


def single_quoted(s: str) -> str:
    return s.replace('"', "'")


# ------------------------------------------------------------------ reasoning blocks


def test_think_block_with_bracketed_prose_is_dropped():
    r = parse_model_output("<think>\nlist [source, relation, target]…\n</think>\n\n[" + a + "]")
    assert r == ParseResult([A], "ok", r.reason)
    assert r.items[0] == A


def test_empty_and_multiple_think_blocks():
    assert parse_model_output("<think></think>[" + a + "]").items == [A]
    r = parse_model_output("<think>x [1]</think>\n<THINK>y {\"z\": 2}</THINK>\n[" + a + "]")
    assert (r.items, r.status) == ([A], "ok")


def test_lone_closing_think_drops_everything_before():
    # the prompt template opened <think>; the text before </think> holds a JSON-looking [2]
    r = parse_model_output("Okay, I guess [2] triplets.\n</think>\n\n[" + a + "]")
    assert (r.items, r.status) == ([A], "ok")


def test_unclosed_think_without_json_is_unparseable():
    r = parse_model_output("<think>\nI should list [source, relation, target] and then")
    assert (r.items, r.status) == ([], "unparseable")
    assert "think" in r.reason


def test_unclosed_think_with_triplet_json_after_it_is_used():
    r = parse_model_output("<think>\nhmm\n[" + a + "]")
    assert (r.items, r.status) == ([A], "ok")
    assert "unclosed" in r.reason


def test_only_reasoning_is_empty():
    assert parse_model_output("<think>[1, 2]</think>\n  ").status == "empty"


# ------------------------------------------------------------------ fences


def test_json_fence_preferred_over_text_fence():
    text = "Notes:\n```text\nlooked for companies [1]\n```\n```json\n[" + a + "]\n```"
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A], "ok")


def test_json_fence_preferred_over_earlier_bare_fence_with_triplet():
    text = "Example:\n```\n[" + b + "]\n```\nAnswer:\n```json\n[" + a + "]\n```"
    assert parse_model_output(text).items == [A]


def test_empty_json_fence_is_empty():
    r = parse_model_output("```json\n```")
    assert (r.items, r.status) == ([], "empty")


def test_backticks_inside_title_survive_byte_for_byte():
    title = "Acme ```x``` Inc `y`"
    t = dict(A, source={"title": title, "type": "entity"})
    text = "```json\n[" + json.dumps(t) + "]\n```\nThat's it ```"
    r = parse_model_output(text)
    assert r.status == "ok"
    assert r.items[0]["source"]["title"] == title
    assert r.items == [t]


# ------------------------------------------------------------------ prose around the payload


def test_prose_bracket_phrase_does_not_fool_the_scanner():
    text = 'Format is a list [source, relation, target] such as ["x"]. Answer:\n[' + a + ", " + b + "]\nDone."
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A, B], "ok")


def test_prose_only_is_unparseable():
    r = parse_model_output("I found no relations [source, relation, target] here.")
    assert (r.items, r.status) == ([], "unparseable")


def test_one_object_per_line_is_merged():
    r = parse_model_output("Triplets:\n" + a + "\n" + b + "\n")
    assert (r.items, r.status) == ([A, B], "ok")


# ------------------------------------------------------------------ almost-JSON


def test_single_quotes_are_repaired():
    r = parse_model_output("[" + single_quoted(a) + "]")
    assert (r.items, r.status) == ([A], "repaired")


def test_trailing_commas_are_repaired():
    text = "[" + a[:-1] + ",},\n]"
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A], "repaired")


def test_python_literals_and_unquoted_keys():
    text = ("[{source: {title: 'Acme Inc', type: 'entity', ok: True, x: None}, "
            "relation: {type: 'located_in', weight: 0.9}, target: {title: 'City Y', type: 'entity'}}]")
    r = parse_model_output(text)
    assert r.status == "repaired"
    want = {"source": {"title": "Acme Inc", "type": "entity", "ok": True, "x": None},
            "relation": {"type": "located_in", "weight": 0.9},
            "target": {"title": "City Y", "type": "entity"}}
    assert r.items == [want]


def test_apostrophe_in_title_double_and_single_quoted():
    t = dict(A, source={"title": "Children's Hospital", "type": "entity"})
    assert parse_model_output("[" + json.dumps(t) + "]").items == [t]
    # single-quoted almost-JSON: the ' in Children's is followed by "s", not by ,:]} -> kept
    r = parse_model_output("[" + json.dumps(t).replace('"', "'") + "]")
    assert (r.items, r.status) == ([t], "repaired")


def test_python_set_yields_one_invalid_item():
    r = parse_model_output("[{'Acme Inc', 'City Y'}]")
    # json_repair reads the set as {'Acme Inc': 'City Y'}: one (invalid) item
    assert (r.items, r.status) == ([{"Acme Inc": "City Y"}], "repaired")
    # a bare set is not an object after repair (json_repair gives a list): unparseable
    assert parse_model_output("{'Acme Inc', 'City Y'}")[:2] == ([], "unparseable")


def test_many_prose_brackets_before_a_repairable_payload():
    # 300 failing prose starts ([a] and {b}) exceed PARSE_MAX_LENIENT_STARTS (32), but the
    # JSON-looking start "[{" is tried first in the lenient phase
    text = "see [a] {b} " * 150 + "[" + single_quoted(a) + "]"
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A], "repaired")


def test_prose_braces_are_not_repaired_into_items():
    r = parse_model_output("Use {source} and {target} placeholders.")
    assert (r.items, r.status) == ([], "unparseable")


# ------------------------------------------------------------------ truncation


def test_truncated_array_keeps_only_complete_objects():
    text = "[" + a + ', {"source":{"title":"Acme Inc","type":"entity"},"target":{"title":"Pers'
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A], "truncated")


def test_truncated_after_complete_object_and_comma():
    assert parse_model_output("```json\n[" + a + ", " + b + ",").items == [A, B]
    r = parse_model_output("[" + a + ", " + b)
    assert (r.items, r.status) == ([A, B], "truncated")


def test_truncated_single_quoted_array():
    text = "[" + single_quoted(a) + ", " + single_quoted(b)[:50]
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A], "truncated")


def test_truncated_lone_object_gives_no_item():
    r = parse_model_output('{"source":{"title":"Acme Inc","type":"entity"},"target":{"title":"Pers')
    assert (r.items, r.status) == ([], "truncated")


def test_truncated_wrapper_salvages_inner_array():
    r = parse_model_output('{"triplets": [' + a + ", " + b[:30])
    assert (r.items, r.status) == ([A], "truncated")


# ------------------------------------------------------------------ shapes


@pytest.mark.parametrize(
    "text",
    [a, '{"triplets": [' + a + "]}", '{"Edges": [' + a + "]}", '{"output": {"triplets": [' + a + "]}}",
     "[[" + a + "]]", "[" + a + "]"],
)
def test_shapes_giving_exactly_A(text):
    r = parse_model_output(text)
    assert (r.items, r.status) == ([A], "ok")


def test_nested_lists_flattened_one_level():
    r = parse_model_output("[[" + a + "], [" + b + "]]")
    assert r.items == [A, B]


def test_flat_string_triplets_are_not_flattened():
    r = parse_model_output('[["Acme Inc", "located_in", "City Y"], ["Acme Inc", "founded_by", "Person Z"]]')
    assert r.items == [["Acme Inc", "located_in", "City Y"], ["Acme Inc", "founded_by", "Person Z"]]


def test_non_triplet_items_are_kept():
    r = parse_model_output("[" + a + ', "Acme Inc -> City Y"]')
    assert (r.items, r.status) == ([A, "Acme Inc -> City Y"], "ok")
    assert len(r.items) == 2


def test_blank_and_empty_list():
    assert parse_model_output("") == ParseResult([], "empty", "blank output")
    assert parse_model_output(" \n\t ").status == "empty"
    r = parse_model_output("[]")
    assert (r.items, r.status) == ([], "ok")
    assert parse_model_output('{"triplets": []}')[:2] == ([], "ok")


def test_non_str_input_does_not_raise():
    assert parse_model_output(None).status == "unparseable"  # type: ignore[arg-type]
    assert parse_model_output(b"[]").status == "unparseable"  # type: ignore[arg-type]


# ------------------------------------------------------------------ adversarial input


@pytest.mark.parametrize(
    "text",
    ["[" * 10_000_000, "{" * 1_000_000, '["' + "a" * 5_000_000, "[" * 900 + '"' + "a" * 100_000,
     "`" * 100_000, "<think>" * 50_000, "[{'a" * 50_000, "x [1] " * 100_000, "]" * 100_000],
)
def test_adversarial_inputs_do_not_raise(text):
    r = parse_model_output(text)
    assert r.status in PARSE_STATUSES
    assert isinstance(r.items, list)


# ------------------------------------------------------------------ fuzz
# 1000*5 + 700*4 + 500*6 = 10800 random strings in all (>= 10^4); each example parses
# several strings to amortise hypothesis' per-example overhead (generation dominates).

_json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)
_fragments = st.sampled_from(
    ["[", "]", "{", "}", ",", ":", '"', "'", "```", "```json\n", "\n```", "<think>", "</think>",
     a, b, a[:25], single_quoted(a), '"title"', "True", "None", "NaN", "\\", " ", "\n", "Acme's"]
)
_fragment_strings = st.lists(_fragments | st.characters(), max_size=15).map("".join)
_FUZZ = dict(deadline=None, suppress_health_check=list(HealthCheck))


def _check(r):
    assert isinstance(r, ParseResult)
    assert r.status in PARSE_STATUSES
    assert isinstance(r.items, list)
    assert isinstance(r.reason, str) and r.reason


@settings(max_examples=1000, **_FUZZ)
@given(st.lists(st.text(), min_size=5, max_size=5))
def test_fuzz_random_text(texts):
    for s in texts:
        _check(parse_model_output(s))


@settings(max_examples=700, **_FUZZ)
@given(st.lists(_fragment_strings, min_size=4, max_size=4))
def test_fuzz_fragments(texts):
    for s in texts:
        _check(parse_model_output(s))


@settings(max_examples=500, **_FUZZ)
@given(_json_values)
def test_fuzz_serialised_json(v):
    s = json.dumps(v)
    for prefix in ("", "```json\n", "<think>x</think>", "Answer: "):
        r = parse_model_output(prefix + s)
        _check(r)
        if isinstance(v, list) and not (v and all(isinstance(x, list) for x in v)):
            # a top-level list that is not a list of lists comes back unchanged
            assert r.status == "ok" and json.dumps(r.items) == s  # dumps: NaN-safe equality
    _check(parse_model_output(json.dumps(v, indent=2)[:-1]))  # cut: truncation paths
    _check(parse_model_output(s.replace('"', "'")))  # almost-JSON: repair paths


# ------------------------------------------------------------------ read_jsonl


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
    with pytest.raises(InputFormatError) as ei:
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
