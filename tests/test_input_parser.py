"""The input parser: ``parse_model_output`` (raw model text -> items and a parse status) and
``prediction_from_record`` (which field of a prediction line is the answer), and how their
statuses are counted in the summary.

Every parser case lives here once: the parse result, and where the scored value matters,
the per-entry metrics of the real input layer (``prediction_from_record`` ->
``evaluate_entries`` with the lexical similarity). The long fuzz tests are marked ``slow``
(``uv run pytest -m "not slow"`` skips them; CI runs them with their full example counts).

Reference triplets: A = Acme Inc -located_in-> City Y (0.9), B = Acme Inc -founded_by->
Person Z (0.8), both endpoints of type ``entity`` (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evaluate as ev
from conftest import ACME_A as A, ACME_B as B

a = json.dumps(A)
b = json.dumps(B)
PROMPT = "Acme Inc is located in City Y. It was founded by Person Z."
FENCE = "```"
#: Normal Qwen3 output: a reasoning block holding a draft (the wrong triplet B), then the
#: answer in a ```json fence.
QWEN = f"<think>\nThe passage says Acme Inc is in City Y. Draft: [{b}]\n</think>\n\n{FENCE}json\n[{a}]\n{FENCE}"


def single_quoted(s: str) -> str:
    return s.replace('"', "'")


def parse(text: str) -> tuple[list, str]:
    r = ev.parse_model_output(text)
    return r.items, r.status


def scored(record: dict | str, gold_items: list | None = None) -> dict:
    """Report of one entry: the prediction line ``record`` (a str is raw model text under
    ``output``) against gold ``gold_items`` (default [A]) and PROMPT."""
    record = {"id": "r1", "output": record} if isinstance(record, str) else record
    gold = ev.GoldRecord("r1", PROMPT, [A] if gold_items is None else gold_items, 1)
    return ev.evaluate_entries([ev.Entry(gold, ev.prediction_from_record(record, 1))], similarity=ev.Similarity())


def scored_row(record: dict | str, gold_items: list | None = None) -> dict:
    return scored(record, gold_items)["per_entry"][0]


def assert_perfect(row: dict) -> None:
    m = row["metrics"]
    for key in ("entity_precision", "entity_recall", "entity_f1", "triplet_precision", "triplet_recall",
                "triplet_f1", "composite"):
        assert m[key] == 1.0, (key, row)


def test_statuses():
    assert ev.PARSE_STATUSES == ("ok", "repaired", "truncated", "empty", "unparseable", "no_answer")
    assert ev.PREDICTION_STATUSES == ev.PARSE_STATUSES + ("missing",)
    assert ev.UNPARSEABLE_STATUSES == ("unparseable", "no_answer")


# ====================================================================== reasoning blocks


@pytest.mark.parametrize("output", [
    "<think>\nlist [source, relation, target]…\n</think>\n\n[" + a + "]",
    "<think></think>\n[" + a + "]",
    "<think>x [1]</think>\n<THINK>y {\"z\": 2}</THINK>\n[" + a + "]",
    "<thinking>[" + b + "]</thinking>[" + a + "]",
    # the prompt template opened <think>; the text before </think> holds a JSON-looking [2]
    "Okay, I guess [2] triplets.\n</think>\n\n[" + a + "]",
], ids=["bracketed-prose", "empty-block", "two-blocks-any-case", "thinking-tag", "lone-closing-tag"])
def test_reasoning_blocks_are_dropped(output):
    assert parse(output) == ([A], "ok")
    row = scored_row(output)
    assert row["parse_status"] == "ok" and row["metrics"]["n_pred_raw_items"] == 1
    assert_perfect(row)


def test_only_closed_reasoning_is_empty():
    assert ev.parse_model_output("<think>[1, 2]</think>\n  ") == ev.ParseResult([], "empty", "only reasoning, no answer")


def test_draft_in_closed_vs_unclosed_think():
    # Issue "Never silently wrong", item 3: the same draft inside a closed <think> with no
    # answer after it, and inside a <think> that never closes (out of tokens mid-thought).
    # Before: closed -> empty (0 items), unclosed -> the draft scored as "ok" (composite
    # 1.0 against gold [A]): the model that ran out of tokens got more credit.
    closed = scored("<think>\nDraft: [" + a + "]\n</think>\n")
    unclosed = scored("<think>\nDraft: [" + a + "]\n")
    c, u = closed["per_entry"][0], unclosed["per_entry"][0]
    assert (c["parse_status"], u["parse_status"]) == ("empty", "no_answer")
    # both: 0 items -> schema and grounding N/A in the composite, entity F1 0, relation
    # and weight N/A -> composite = 0.25*0 / 0.25 = 0.0
    assert c["metrics"]["n_pred_raw_items"] == u["metrics"]["n_pred_raw_items"] == 0
    assert c["metrics"]["composite"] == u["metrics"]["composite"] == 0.0
    # SPEC section 2: schema score 1.0 for an empty answer, 0.0 for an unparseable one
    assert (c["metrics"]["schema_score"], u["metrics"]["schema_score"]) == (1.0, 0.0)
    assert closed["summary"]["totals"]["unparseable_predictions"] == 0
    assert unclosed["summary"]["totals"]["unparseable_predictions"] == 1
    assert unclosed["summary"]["totals"]["empty_predictions"] == 1
    assert unclosed["summary"]["parse_status"]["no_answer"] == 1
    assert "never closed" in u["parse_reason"]


@pytest.mark.parametrize("output", [
    "<think>\nI should list [source, relation, target] and then",
    "<think>\n" + FENCE + "json\n[" + a + "]\n" + FENCE,  # a fenced draft inside open reasoning
    "Sure.\n<think>\n[" + a + "]",  # prose before the block is no answer
    "[1]\n<think>\n[" + a + "]",  # nor is a value without triplet-like items
    "<think>a</think>\n<think>\n[" + a + "]",  # a closed block, then one that never closes
], ids=["prose", "fenced-draft", "prose-before", "non-triplet-before", "second-block-open"])
def test_unclosed_reasoning_is_no_answer(output):
    r = ev.parse_model_output(output)
    assert (r.items, r.status) == ([], "no_answer")
    assert "<think>" in r.reason
    pred = ev.prediction_from_record({"id": "r1", "output": output}, 1)
    assert (pred.items, pred.status) == (None, "no_answer")  # scored as an unparseable answer


@pytest.mark.parametrize("output, items", [
    ("[" + a + "]\n<think>\nLet me double-check", [A]),
    ("[]\n<think>\nmaybe [" + a + "]", []),
], ids=["triplets", "empty-array"])
def test_answer_before_unclosed_reasoning_counts(output, items):
    r = ev.parse_model_output(output)
    assert (r.items, r.status) == (items, "ok")
    assert "never closed" in r.reason


def test_several_blocks_the_last_answer_outside_them_wins():
    assert parse("<think>a</think>[" + b + "]<think>b</think>[" + a + "]") == ([A], "ok")
    # an answer, then more reasoning that closes with nothing after it: still the answer
    assert parse("<think>a</think>[" + a + "]<think>b</think>") == ([A], "ok")
    # values on both sides of a block are never merged (the block is not whitespace)
    assert parse("<think>a</think>\n" + a + "\n<think>b</think>\n" + b) == ([B], "ok")


def test_lone_closing_tags_everything_before_the_last_is_reasoning():
    assert parse("draft [" + b + "]\n</think>\n[" + a + "]") == ([A], "ok")
    assert parse("a\n</think>\n[" + b + "]\n</think>\n") == ([], "empty")


def test_fence_inside_reasoning_is_not_a_candidate():
    # the fenced draft (json fence, highest priority) is inside the reasoning
    text = "<think>\n" + FENCE + "json\n[" + b + "]\n" + FENCE + "\n</think>\n[" + a + "]"
    assert parse(text) == ([A], "ok")


# ====================================================================== the final answer


def test_example_then_answer_scores_the_answer():
    # Issue item 3: the example format came first and was scored (entity F1 0 against [A])
    output = "Example format: [" + b + "]\nAnswer: [" + a + "]"
    assert parse(output) == ([A], "ok")
    assert_perfect(scored_row(output))


def test_correction_in_a_second_fence_scores_the_correction():
    # Issue item 3: a ```json draft, "Correction:", a second ```json fence
    output = f"{FENCE}json\n[{b}]\n{FENCE}\nCorrection:\n{FENCE}json\n[{a}]\n{FENCE}"
    assert parse(output) == ([A], "ok")
    assert_perfect(scored_row(output))


@pytest.mark.parametrize("output", [
    "[" + a + "]\n\nSources: [1], [see above]",
    FENCE + "json\n[" + a + "]\n" + FENCE + "\nsee [1]",
    "[" + a + "]\n\n(as listed [above])",
], ids=["numbers-and-words", "after-a-fence", "bracketed-words"])
def test_prose_arrays_after_the_answer_are_ignored(output):
    assert parse(output) == ([A], "ok")


def test_complete_answer_beats_a_truncated_array():
    cut = '{"source": {"title": "Acme Inc", "type": "entity"}, "target": {"title": "Pers'
    assert parse("[" + a + "]\n[" + b + ", " + cut) == ([A], "ok")
    # with no complete candidate, the truncated array counts (complete items only)
    assert parse("[" + a + ", " + b + ", " + cut) == ([A, B], "truncated")


def test_fenced_answer_first_then_the_last():
    assert parse(f"{FENCE}json\n[{a}]\n{FENCE}\nIn short: [{b}]") == ([A], "ok")
    # a ```json fence beats another fence, whatever the order
    assert parse(f"Example:\n{FENCE}\n[{b}]\n{FENCE}\nAnswer:\n{FENCE}json\n[{a}]\n{FENCE}") == ([A], "ok")
    assert parse(f"Notes:\n{FENCE}text\nlooked for companies [1]\n{FENCE}\n{FENCE}json\n[{a}]\n{FENCE}") == ([A], "ok")


@pytest.mark.parametrize("output", [
    "Triplets:\n" + a + "\n" + b + "\n",
    "[" + a + "]\n[" + b + "]",
    "[" + a + "],\n" + b,
], ids=["objects", "arrays", "array-and-object"])
def test_concatenated_values_are_one_answer(output):
    r = ev.parse_model_output(output)
    assert (r.items, r.status) == ([A, B], "ok")
    assert "2 concatenated" in r.reason


def test_values_separated_by_words_are_separate_answers():
    assert parse("[" + b + "]\nAnswer: [" + a + "]") == ([A], "ok")


def test_prose_array_swallowing_the_answer_does_not_hide_it():
    # "[B, and I stop here ... [A]" is salvaged as a truncated array of B and prose; the
    # complete [A] written inside that prose is still the last complete answer
    assert parse("Draft: [" + b + ", and I stop here\nFinal answer: [" + a + "]") == ([A], "ok")


@pytest.mark.parametrize("output", ["[]\n\nSee [1].", "Example: [1, 2]\nAnswer: []"])
def test_without_triplets_an_empty_array_is_the_answer(output):
    assert parse(output) == ([], "ok")


# ====================================================================== fences


def test_empty_json_fence_is_empty():
    assert parse(FENCE + "json\n" + FENCE) == ([], "empty")
    row = scored_row(FENCE + "json\n" + FENCE)
    assert row["parse_status"] == "empty" and row["metrics"]["n_pred_raw_items"] == 0
    assert row["metrics"]["composite"] == 0.0  # gold [A], empty answer


def test_backticks_inside_a_title_survive_byte_for_byte():
    title = "Acme ```json Inc``` `y`"
    item = dict(A, source={"title": title, "type": "entity"})
    output = f"{FENCE}json\n[{json.dumps(item)}]\n{FENCE}\nThat's it {FENCE}"
    assert parse(output) == ([item], "ok")
    row = scored_row(output, gold_items=[item])
    assert_perfect(row)
    (pair,) = row["pairs"]
    assert pair["exact"] is True and pair["source_sim"] == 1.0


# ====================================================================== prose around the payload


def test_prose_bracket_phrase_does_not_fool_the_scanner():
    text = 'Format is a list [source, relation, target] such as ["x"]. Answer:\n[' + a + ", " + b + "]\nDone."
    assert parse(text) == ([A, B], "ok")


@pytest.mark.parametrize("output", ["I found no relations [source, relation, target] here.",
                                    "Use {source} and {target} placeholders."])
def test_prose_only_is_unparseable(output):
    assert parse(output) == ([], "unparseable")


def test_many_prose_brackets_before_a_repairable_payload():
    # 300 failing prose starts ([a] and {b}) exceed MAX_LENIENT_STARTS (32), but the
    # JSON-looking start "[{" is tried first in the lenient phase
    assert ev.OutputParser.MAX_LENIENT_STARTS == 32
    assert parse("see [a] {b} " * 150 + "[" + single_quoted(a) + "]") == ([A], "repaired")


# ====================================================================== almost-JSON


def test_single_quotes_are_repaired():
    output = "[" + single_quoted(a) + "]"
    assert parse(output) == ([A], "repaired")
    assert_perfect(scored_row(output))


@pytest.mark.parametrize("output", [
    "[" + a[:-1] + ",},\n]",
    "[" + a + ",]",
    '[{"source": {"title": "Acme Inc", "type": "entity",}, "relation": {"type": "located_in", "weight": 0.9,}, '
    '"target": {"title": "City Y", "type": "entity",},},]',
], ids=["object-and-array", "array-only", "every-level"])
def test_trailing_commas_are_repaired_not_ok(output):
    assert parse(output) == ([A], "repaired")
    assert_perfect(scored_row(output))


def test_python_literals_and_unquoted_keys():
    text = ("[{source: {title: 'Acme Inc', type: 'entity', ok: True, x: None}, "
            "relation: {type: 'located_in', weight: 0.9}, target: {title: 'City Y', type: 'entity'}}]")
    want = {"source": {"title": "Acme Inc", "type": "entity", "ok": True, "x": None},
            "relation": {"type": "located_in", "weight": 0.9},
            "target": {"title": "City Y", "type": "entity"}}
    assert parse(text) == ([want], "repaired")


def test_apostrophe_in_title_double_and_single_quoted():
    t = dict(A, source={"title": "Children's Hospital", "type": "entity"})
    assert parse("[" + json.dumps(t) + "]") == ([t], "ok")
    # single-quoted almost-JSON: the ' in Children's is followed by "s", not by ,:]} -> kept
    assert parse("[" + single_quoted(json.dumps(t)) + "]") == ([t], "repaired")


def test_python_set_is_one_invalid_item():
    # json_repair reads the set as {'Acme Inc': 'City Y'}: one (invalid) item
    assert parse("[{'Acme Inc', 'City Y'}]") == ([{"Acme Inc": "City Y"}], "repaired")
    row = scored_row("[{'Acme Inc', 'City Y'}]")
    m = row["metrics"]
    assert m["n_pred_raw_items"] == 1 and m["n_pred_valid"] == 0 and len(row["invalid_items"]) == 1
    assert m["entity_tp"] == 0 and m["schema_score"] == 0.0
    # a bare set is not an object after repair (json_repair gives a list): unparseable
    assert parse("{'Acme Inc', 'City Y'}") == ([], "unparseable")


# ====================================================================== truncation


def test_truncated_array_keeps_only_complete_items():
    partial = '{"source":{"title":"Acme Inc","type":"entity"},"relation":{"type":"founded_by","weight":0.8},"target":{"title":"Pers'
    output = "[" + a + ", " + partial
    assert parse(output) == ([A], "truncated")
    row = scored_row(output, gold_items=[A, B])
    assert row["parse_status"] == "truncated" and row["metrics"]["n_pred_raw_items"] == 1
    assert row["metrics"]["entity_precision"] == 1.0  # 1 tp / 1 item
    assert row["metrics"]["entity_recall"] == 0.5     # 1 tp / 2 gold


@pytest.mark.parametrize("output, items", [
    (FENCE + "json\n[" + a + ", " + b + ",", [A, B]),
    ("[" + a + ", " + b, [A, B]),
    ("[" + single_quoted(a) + ", " + single_quoted(b)[:50], [A]),
    ('{"triplets": [' + a + ", " + b[:30], [A]),
    ('{"source":{"title":"Acme Inc","type":"entity"},"target":{"title":"Pers', []),
], ids=["after-comma", "after-item", "single-quoted", "inside-wrapper", "lone-object"])
def test_truncated(output, items):
    assert parse(output) == (items, "truncated")


# ====================================================================== shapes


@pytest.mark.parametrize("text", [
    a, '{"triplets": [' + a + "]}", '{"Edges": [' + a + "]}", '{"output": {"triplets": [' + a + "]}}",
    "[[" + a + "]]", "[" + a + "]",
], ids=["bare-object", "wrapper", "wrapper-any-case", "nested-wrapper", "nested-list", "array"])
def test_shapes_giving_exactly_A(text):
    assert parse(text) == ([A], "ok")
    row = scored_row(text)
    assert row["metrics"]["n_pred_raw_items"] == 1
    assert_perfect(row)


def test_nested_lists_flattened_one_level():
    assert parse("[[" + a + "], [" + b + "]]") == ([A, B], "ok")


def test_flat_string_triplets_are_not_flattened():
    flat = [["Acme Inc", "located_in", "City Y"], ["Acme Inc", "founded_by", "Person Z"]]
    assert parse(json.dumps(flat)) == (flat, "ok")


def test_non_triplet_items_are_kept_and_counted():
    assert parse(json.dumps([A, "Acme Inc -> City Y"])) == ([A, "Acme Inc -> City Y"], "ok")
    row = scored_row(json.dumps([A, "Acme Inc -> City Y"]))
    m = row["metrics"]
    assert m["n_pred_raw_items"] == 2 and m["n_pred_valid"] == 1
    assert m["entity_precision"] == 0.5  # 1 tp / 2 items
    assert m["entity_recall"] == 1.0     # 1 tp / 1 gold
    assert len(row["invalid_items"]) == 1 and row["invalid_items"][0].startswith("[1]")


def test_blank_and_empty_list():
    assert ev.parse_model_output("") == ev.ParseResult([], "empty", "blank output")
    assert parse(" \n\t ") == ([], "empty")
    assert parse("[]") == ([], "ok")
    assert parse('{"triplets": []}') == ([], "ok")


def test_non_str_input_does_not_raise():
    assert ev.parse_model_output(None).status == "unparseable"  # type: ignore[arg-type]
    assert ev.parse_model_output(b"[]").status == "unparseable"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    ["[" * 10_000_000, "{" * 1_000_000, '["' + "a" * 5_000_000, "[" * 900 + '"' + "a" * 100_000,
     "`" * 100_000, "<think>" * 50_000, "</think>" * 50_000, "[{'a" * 50_000, "x [1] " * 100_000,
     "]" * 100_000, (a + "\n") * 5000],
    ids=["brackets", "braces", "long-string", "deep-then-string", "backticks", "think-tags", "closing-tags",
         "sq-starts", "prose-arrays", "closers", "5000-objects"],
)
def test_adversarial_inputs_do_not_raise(text):
    r = ev.parse_model_output(text)
    assert r.status in ev.PARSE_STATUSES
    assert isinstance(r.items, list)


# ====================================================================== prediction_from_record


@pytest.mark.parametrize("record, combined", [
    ({"pred_parsed": None, "pred_raw": QWEN}, True),
    ({"pred_raw": QWEN}, True),
    ({"pred_parsed": None, "output": QWEN}, True),
    ({"pred_parsed": None, "response": QWEN}, True),
    ({"triplets": None, "output": QWEN}, False),
    ({"prediction": None, "response": QWEN}, False),
    ({"pred_parsed": None, "pred_raw": QWEN}, False),
    ({"triples": None, "output": QWEN}, False),
], ids=["combined-null", "combined-absent", "combined-output", "combined-response", "triplets-null",
        "prediction-null", "pred_parsed-null", "triples-null"])
def test_null_or_absent_parsed_field_uses_the_raw_text(record, combined):
    # SPEC section 1: raw text and a null/absent parsed field -> the raw text is parsed, and
    # the status is the parser's (before: 0 items, "empty", unless --reparse)
    pred = ev.prediction_from_record({"id": "r1", **record}, 7, combined=combined)
    assert (pred.items, pred.status, pred.line) == ([A], "ok", 7)


def test_a_parsed_value_wins_over_raw_text_unless_reparse():
    assert ev.prediction_from_record({"pred_parsed": [], "pred_raw": QWEN}, 1, combined=True).items == []
    assert ev.prediction_from_record({"triplets": [B], "output": QWEN}, 1).items == [B]
    # an empty value other than null counts as [] (SPEC section 1), raw text or not
    pred = ev.prediction_from_record({"pred_parsed": {}, "pred_raw": QWEN}, 1, combined=True)
    assert (pred.items, pred.status) == ([], "empty")
    assert ev.prediction_from_record({"triplets": [B], "output": QWEN}, 1, reparse=True).items == [A]


def test_null_everywhere_is_empty():
    pred = ev.prediction_from_record({"id": "r1", "pred_parsed": None, "pred_raw": None}, 1, combined=True)
    assert (pred.items, pred.status, pred.reason) == ([], "empty", "'pred_parsed' is null: counted as []")
    # no accepted field at all: an input problem, scored as a missing prediction (issue 9 item 1)
    pred = ev.prediction_from_record({"id": "r1"}, 1)
    assert (pred.items, pred.status, pred.reason, pred.issue) == (
        [], "missing", "no prediction field (keys found: id)", "no_prediction_field")


def test_raw_text_with_unclosed_reasoning_and_null_parsed_is_no_answer():
    pred = ev.prediction_from_record({"pred_parsed": None, "pred_raw": "<think>\n[" + a + "]"}, 1, combined=True)
    assert (pred.items, pred.status) == (None, "no_answer")


@pytest.mark.parametrize("raw, status, n_items", [
    ([A], "ok", 1),             # a JSON list under a raw-text key: parsed as its JSON text
    (A, "ok", 1),               # a bare object: one item, as in raw text
    (5, "unparseable", 0),      # a bare number: no array or object
    (None, "empty", 0),         # null raw field and no parsed field: nothing produced
])
def test_raw_text_field_holding_other_json(raw, status, n_items):
    pred = ev.prediction_from_record({"id": "1", "output": raw}, 1)
    assert pred.status == status
    assert len(pred.items or []) == n_items


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_null_gold_parsed_falls_back_to_gold_raw(tmp_path):
    combined = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "1", "prompt": "p", "gold_parsed": None, "gold_raw": json.dumps([A]), "pred_parsed": [A]}])
    loaded = ev.load_inputs(combined, None)
    assert loaded.entries[0].gold.items == [A]


def test_gold_raw_with_unclosed_reasoning_is_an_error(tmp_path):
    combined = write_jsonl(tmp_path / "c.jsonl", [
        {"id": "1", "prompt": "p", "gold_parsed": None, "gold_raw": "<think>\n[" + a + "]", "pred_parsed": [A]}])
    with pytest.raises(ev.InputError, match=r"c\.jsonl: line 1: gold answer text is no_answer"):
        ev.load_inputs(combined, None)


def test_combined_file_with_null_pred_parsed_scores_the_raw_answer(tmp_path):
    # Issue item 2 (its "composite 0.4688 vs 0.6281" file is not in the repository; this is
    # an equivalent hand-computed case). Two combined lines, prompt PROMPT:
    #   line 1: gold [A, B], pred_parsed [A]: schema 1, entity P 1 R 1/2 -> F1 2/3,
    #           relation 1, weight 1, grounding 1 -> composite
    #           (0.30 + 0.25*2/3 + 0.20 + 0.10 + 0.15) / 1.00 = 11/12
    #   line 2: gold [A], pred_parsed null, pred_raw QWEN (the draft B inside <think>, the
    #           answer [A] in a ```json fence): scored [A] -> composite 1
    # Macro composite: (11/12 + 1) / 2 = 23/24 = 0.9583, with or without --reparse. Before,
    # without --reparse line 2 scored as empty (composite 0): 11/24 = 0.4583.
    path = write_jsonl(tmp_path / "combined.jsonl", [
        {"id": "1", "prompt": PROMPT, "gold_parsed": [A, B], "pred_raw": "[" + a + "]", "pred_parsed": [A]},
        {"id": "2", "prompt": PROMPT, "gold_parsed": [A], "pred_raw": QWEN, "pred_parsed": None},
    ])
    for reparse in (False, True):
        report = ev.evaluate_entries(ev.load_inputs(path, None, reparse=reparse).entries, similarity=ev.Similarity())
        composites = [row["metrics"]["composite"] for row in report["per_entry"]]
        assert composites == pytest.approx([11 / 12, 1.0], abs=1e-12)
        assert report["summary"]["macro"]["composite"] == pytest.approx(float(Fraction(23, 24)), abs=1e-12)
        assert report["summary"]["parse_status"]["ok"] == 2
        assert re.search(r"composite\s+0\.9583\s+\(2 of 2 entries\)", ev.format_summary(report))


# ====================================================================== status counting


def run_main(*args: str) -> tuple[int, str]:
    """``evaluate.main`` in-process with --no-embeddings: (exit status, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = ev.main([*args, "--no-embeddings"])
    return rc, out.getvalue()


def test_every_status_is_counted_in_summary_totals_and_text(tmp_path):
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": f"r{k}", "prompt": PROMPT, "triplets": [A]} for k in range(6)])
    pred = write_jsonl(tmp_path / "pred.jsonl", [
        {"id": "r0", "output": "[" + a + "]"},                   # ok
        {"id": "r1", "output": "[" + single_quoted(a) + "]"},    # repaired
        {"id": "r2", "output": "<think>x</think>"},              # empty
        {"id": "r3", "output": "no JSON here"},                  # unparseable
        {"id": "r4", "output": "<think>\n[" + a + "]"},          # no_answer
    ])                                                           # r5: missing
    report_path = tmp_path / "r.json"
    rc, stdout = run_main("--pred", str(pred), "--gold", str(gold), "--report", str(report_path))
    assert rc == 0
    s = json.loads(report_path.read_text())["summary"]
    assert s["parse_status"] == {"ok": 1, "repaired": 1, "truncated": 0, "empty": 1, "unparseable": 1,
                                 "no_answer": 1, "missing": 1}
    assert s["totals"]["unparseable_predictions"] == 2  # unparseable + no_answer
    assert s["totals"]["missing_predictions"] == 1
    assert s["totals"]["empty_predictions"] == 4        # r2 .. r5: 0 items
    assert "predictions  ok 1  repaired 1  truncated 0  empty 1  unparseable 1  no_answer 1  missing 1" in stdout


def test_directory_mode_counts_no_answer(tmp_path):
    onto, gold_dir, pred_dir = (tmp_path / d for d in ("onto", "gold", "pred"))
    for d in (onto, gold_dir, pred_dir):
        d.mkdir()
    (onto / "1_x_ontology.json").write_text(json.dumps(
        {"id": "x", "concepts": [{"label": "Company"}], "relations": [{"label": "located_in"}]}))
    triple = {"sub": "Acme Inc", "rel": "located_in", "obj": "City Y"}
    write_jsonl(gold_dir / "ont_1_x_ground_truth.jsonl",
                [{"id": "s1", "sent": PROMPT, "triples": [triple]}, {"id": "s2", "sent": PROMPT, "triples": [triple]}])
    write_jsonl(pred_dir / "1_x_responses.jsonl",
                [{"id": "s1", "output": json.dumps([triple])}, {"id": "s2", "output": "<think>\n" + json.dumps([triple])}])
    report_path = tmp_path / "r.json"
    rc, stdout = run_main("--pred", str(pred_dir), "--gold", str(gold_dir), "--ontology", str(onto),
                             "--report", str(report_path))
    assert rc == 0
    s = json.loads(report_path.read_text())["summary"]
    assert s["parse_status"]["no_answer"] == 1 and s["parse_status"]["ok"] == 1
    assert s["totals"]["unparseable_predictions"] == 1
    assert "no_answer 1" in stdout


# ====================================================================== fuzz (slow)
# Every random string goes through the parser (its result is well-formed) and through the
# input layer and the scoring (every metric finite and in range).

RATIO_KEYS = ("schema_score", "entity_precision", "entity_recall", "entity_f1",
              "triplet_precision", "triplet_recall", "triplet_f1", "relation_accuracy",
              "weight_score", "type_agreement", "hallucination_rate", "grounding", "composite")
COUNT_KEYS = ("n_gold", "n_pred_raw_items", "n_pred_valid", "entity_tp", "full_tp",
              "hard_hallucinations", "novel_grounded", "self_loops_removed")
FUZZ_SIM = ev.Similarity()


def check_parse(text: str) -> ev.ParseResult:
    r = ev.parse_model_output(text)
    assert isinstance(r, ev.ParseResult)
    assert r.status in ev.PARSE_STATUSES
    assert isinstance(r.items, list)
    assert isinstance(r.reason, str) and r.reason
    return r


def check_pipeline(record: dict) -> None:
    pred = ev.prediction_from_record(record, 1)
    assert pred.status in ev.PREDICTION_STATUSES
    assert (pred.items is None) == (pred.status in ev.UNPARSEABLE_STATUSES)
    m = ev.score_entry([A, B], pred.items, PROMPT, similarity=FUZZ_SIM).metrics
    for key in RATIO_KEYS:
        v = m[key]
        if v is None:
            continue
        assert isinstance(v, (float, int)), (key, v)
        assert math.isfinite(v) and 0.0 <= v <= 1.0, (key, v, record)
    for key in COUNT_KEYS:
        assert isinstance(m[key], int) and m[key] >= 0, (key, m[key])
    assert m["entity_tp"] <= min(m["n_gold"], m["n_pred_valid"])
    assert m["full_tp"] <= m["entity_tp"]
    json.dumps(m, allow_nan=False)


def check_raw(text: str) -> None:
    check_parse(text)
    check_pipeline({"id": "x", "output": text})


def fuzz(n: int) -> settings:
    """Settings of the fuzz tests: n examples, no deadline, reproducible."""
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


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
json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=20))
#: JSON with triplet-shaped keys and triplets, and answer-shaped lists that are mostly
#: triplets (so matching is exercised)
answer_values = (
    st.recursive(json_scalars | triplet_like, lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["source", "target", "relation", "title", "type", "weight", "triplets", "x"])
        | st.text(max_size=5), children, max_size=4), max_leaves=12)
    | st.lists(st.one_of(triplet_like, triplet_like, json_scalars), max_size=5)
)
#: ... and random JSON (arbitrary keys, up to 20 leaves)
json_values = answer_values | st.recursive(
    json_scalars, lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children,
                                                                                     max_size=5), max_leaves=20)
fragments = st.sampled_from(
    ["[", "]", "{", "}", ",", ":", '"', "'", "```", "```json\n", "\n```", "<think>", "</think>",
     a, b, a[:25], single_quoted(a), '"title"', "True", "None", "NaN", "\\", " ", "\n", "Acme's", "[1]",
     "[see above]", "Answer: "]
)
fragment_strings = st.lists(fragments | st.characters(), max_size=15).map("".join)


@pytest.mark.slow
@fuzz(5000)
@given(st.text(), st.text(max_size=80)
       | st.text(alphabet='[]{}"\',:<>/thinkjsonu` \n0123456789.-NaIfy', max_size=80))
def test_fuzz_random_text(text, short):
    # 5000 unrestricted strings and 5000 short ones over a JSON/think/fence alphabet
    check_raw(text)
    check_raw(short)


@pytest.mark.slow
@fuzz(700)
@given(st.lists(fragment_strings, min_size=4, max_size=4))
def test_fuzz_fragments(texts):
    # 700 * 4 = 2800 strings glued from JSON, fence and reasoning fragments
    for s in texts:
        check_raw(s)


@pytest.mark.slow
@fuzz(3000)
@given(json_values)
def test_fuzz_serialised_json(v):
    s = json.dumps(v)
    check_pipeline({"id": "x", "output": s})
    for prefix in ("", "```json\n", "<think>x</think>", "Answer: "):
        r = check_parse(prefix + s)
        if isinstance(v, list) and not (v and all(isinstance(x, list) for x in v)):
            # a top-level list that is not a list of lists comes back unchanged
            assert r.status == "ok" and json.dumps(r.items) == s  # dumps: NaN-safe equality
    check_parse(json.dumps(v, indent=2)[:-1])  # cut: truncation paths
    check_parse(single_quoted(s))  # almost-JSON: repair paths


@pytest.mark.slow
@fuzz(3000)
@given(answer_values)
def test_fuzz_random_json_as_parsed_triplets(value):
    check_pipeline({"id": "x", "triplets": value})


# ----------------------------------------------------- several separate answers: the passed-over count


@pytest.mark.parametrize("output", [
    f"{FENCE}json\n[\n // first\n {a}, /* second */ {b}\n]\n{FENCE}",  # comments split the array
    f"1. {a}\n2. {b}",                                                     # numbered list of objects
    f"- {a}\n- {b}",                                                       # bulleted list
    f"Triplets:\n1) {a}\n2) {b}",
], ids=["json-with-comments", "numbered", "bulleted", "numbered-paren"])
def test_several_separate_answers_score_the_last_and_count_the_others(output):
    # the rule is unchanged (the last complete triplet candidate, status ok): only B is scored;
    # A, a separate complete candidate outside reasoning, is counted as passed over
    r = ev.parse_model_output(output)
    assert (r.items, r.status, r.discarded) == ([B], "ok", 1)
    assert "1 other complete triplet answer(s) outside the reasoning not scored" in r.reason


def test_discarded_counts_only_separate_complete_answers_outside_reasoning():
    assert ev.parse_model_output(f"[{a}, {b}]").discarded == 0            # one answer
    assert ev.parse_model_output(f"{a}\n{b}").discarded == 0              # a merged run is one answer
    assert ev.parse_model_output(QWEN).discarded == 0                     # the draft is in the reasoning
    assert ev.parse_model_output(f"[{a}]\n[{b}, {{\"source\": \"x").discarded == 0  # a cut array is not complete
    r = ev.parse_model_output(f"Example format: [{b}]\nAnswer: [{a}]\nAlso: [{b}]")
    assert (r.items, r.discarded) == ([B], 2)                              # [B] (example) and [A] passed over
    # backwards compatible: three positional fields, the fourth defaults to 0
    assert ev.ParseResult([], "empty", "x") == ([], "empty", "x", 0)
    assert ev.prediction_from_record({"id": "r1", "output": f"1. {a}\n2. {b}"}, 3).discarded == 1
    assert ev.prediction_from_record({"id": "r1", "triplets": [A, B]}, 3).discarded == 0


def _triplet_like_reference(item):
    """OutputParser.is_triplet_like as first written: the lowered keys hold a key pair."""
    if isinstance(item, dict):
        keys = {str(k).lower() for k in item}
        return any(a in keys and b in keys for a, b in ev.OutputParser.TRIPLET_KEY_PAIRS)
    if isinstance(item, list):
        return len(item) == 3 and all(isinstance(x, str) for x in item)
    return False


_KEYS = st.sampled_from(["source", "target", "Source", "TARGET", "subject", "object", "sub", "obj", "head",
                         "tail", "relation", "x", 1, None])
_ITEMS = st.one_of(st.dictionaries(_KEYS, st.integers(), max_size=5), st.lists(st.one_of(st.text(max_size=2),
                   st.integers()), max_size=4), st.text(max_size=3), st.none())


@settings(max_examples=500, deadline=None)
@given(items=st.lists(_ITEMS, max_size=6))
def test_triplet_like_shortcut_equals_the_lowered_keys(items):
    # the typed triplet's shortcut ("source" and "target" as they are) and has_triplet_like
    # (stops at the first) answer as the test of the lowered keys and the count
    assert [ev.OutputParser.is_triplet_like(x) for x in items] == [_triplet_like_reference(x) for x in items]
    assert ev.OutputParser.has_triplet_like(items) == (ev.OutputParser.count_triplet_like(items) > 0)
