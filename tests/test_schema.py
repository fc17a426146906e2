"""Stage 1 - validate_schema (SPEC.md sections 1-2): item shapes of the two schema
profiles, the reason of every invalid item, profile detection; malformed items and bad
weights end to end (reasons in the report, strict JSON).

Every expected value is derived by hand from SPEC.md, never copied from the output.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import ACME_A, ACME_B  # noqa: E402
from helpers import (
    _reject_constant,
    a,
    cli_files,
    gold_rec,
    score_files,
    trip,
    with_weight,
)

import evaluate as ev


def score_output(tmp_path: Path, output: str, gold_items: list | None = None) -> dict:
    """Score one raw model output against gold r1 (default [A]); returns the per-entry row."""
    gold_items = [ACME_A] if gold_items is None else gold_items
    rep = score_files(tmp_path, [gold_rec("r1", gold_items)], [{"id": "r1", "output": output}])
    assert rep["summary"]["n_entries"] == 1
    return rep["per_entry"][0]


def _without(item: dict, key: str) -> dict:
    return {k: v for k, v in item.items() if k != key}


BAD_WEIGHTS = ["NaN", "1e999", "-Infinity", "1.5", "true", '"0.8"']


@pytest.mark.parametrize("weight", [0, 1, 0.0, 1.0, 0.5, -0.0])
def test_weight_accepted(weight):
    # int 1 and 0 are numbers in [0, 1] (SPEC section 1: "int or float").
    assert ev.validate_hgr_item(with_weight(weight), 0) is None


@pytest.mark.parametrize("weight", [True, False, float("nan"), float("inf"), -float("inf"),
                                    json.loads("1e999"), "0.8", 1.5, -0.1, 2, None, [0.5], {"w": 1}])
def test_weight_rejected(weight):
    # bool is not a weight (even though True == 1); NaN/inf are not; "0.8" is a string;
    # 1.5, -0.1 and 2 are outside [0, 1]. 1e999 parses to +inf in Python's json.
    reason = ev.validate_hgr_item(with_weight(weight), 3)
    assert reason is not None and reason.startswith("[3].relation.weight")


def test_empty_strings_and_untrimmed_type_pass_schema():
    # SPEC section 1: empty strings pass; "Entity " is a valid type (only strings required).
    assert ev.validate_hgr_item(trip("", "", "", st="Entity ", tt=""), 0) is None
    item = trip("A", "based_on", "B")
    item["extra"] = 1  # extra keys are allowed
    assert ev.validate_hgr_item(item, 0) is None


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: t.pop("target"), "[1].target: missing"),
    (lambda t: t.pop("source"), "[1].source: missing"),
    (lambda t: t.pop("relation"), "[1].relation: missing"),
    (lambda t: t["relation"].pop("weight"), "[1].relation.weight: missing"),
    (lambda t: t["relation"].pop("type"), "[1].relation.type: missing"),
    (lambda t: t["source"].pop("type"), "[1].source.type: missing"),
    (lambda t: t["target"].pop("title"), "[1].target.title: missing"),
])
def test_missing_key_reason_paths(mutate, reason):
    item = trip("A", "based_on", "B")
    mutate(item)
    assert ev.validate_hgr_item(item, 1) == reason


@pytest.mark.parametrize("mutate, prefix", [
    (lambda t: t.__setitem__("relation", "based_on"), "[0].relation:"),  # bare string
    (lambda t: t["relation"].__setitem__("type", 5), "[0].relation.type:"),
    (lambda t: t["source"].__setitem__("title", 3), "[0].source.title:"),
    (lambda t: t["target"].__setitem__("type", None), "[0].target.type:"),
    (lambda t: t.__setitem__("source", "A"), "[0].source:"),
    (lambda t: t.__setitem__("target", None), "[0].target:"),
])
def test_wrong_field_types_rejected(mutate, prefix):
    item = trip("A", "based_on", "B")
    mutate(item)
    reason = ev.validate_hgr_item(item, 0)
    assert reason is not None and reason.startswith(prefix)


@pytest.mark.parametrize("item", ["text", 3, None, [1, 2, 3], ["A", "based_on", "B"], True])
def test_non_object_item_rejected(item):
    reason = ev.validate_hgr_item(item, 2)
    assert reason is not None and reason.startswith("[2]:")


def test_validate_schema_splits_valid_and_invalid():
    items = [trip("A", "r", "B"), {"source": {"title": "A", "type": "e"}}, with_weight(True), trip("C", "r", "D")]
    res = ev.validate_schema(items)
    assert [i for i, _ in res.valid] == [0, 3]
    assert [i for i, _ in res.invalid] == [1, 2]
    assert res.invalid[0][1] == "[1].relation: missing"
    assert res.n_items == 4
    with pytest.raises(ValueError):
        ev.validate_schema(items, profile="nope")


@pytest.mark.parametrize("item, fields", [
    (["A", "r", "B"], ("A", "r", "B")),
    (("A", "r", "B"), ("A", "r", "B")),
    ({"sub": "A", "rel": "r", "obj": "B"}, ("A", "r", "B")),
    ({"subject": "A", "predicate": "r", "object": "B"}, ("A", "r", "B")),
    ({"subject": "A", "relation": "r", "object": "B"}, ("A", "r", "B")),
    ({"head": "A", "type": "r", "tail": "B"}, ("A", "r", "B")),
    ({"head": "A", "relation": "r", "tail": "B"}, ("A", "r", "B")),
    (trip("A", "r", "B"), ("A", "r", "B")),
    ({"source": "A", "relation": "r", "target": "B"}, ("A", "r", "B")),
])
def test_flat_forms_accepted(item, fields):
    assert ev.flat_fields(item) == fields
    assert ev.validate_flat_item(item, 0) is None
    t = ev.normalize_triplets([item], profile="triples")[0]
    assert (t.source, t.relation, t.target) == ("a", "r", "b")
    assert t.weight is None and t.source_type is None


@pytest.mark.parametrize("item, prefix", [
    (["A", "r"], "[0]:"),
    (["A", "r", "B", "C"], "[0]:"),
    (["", "r", "B"], "[0].source:"),
    (["A", "  ", "B"], "[0].relation:"),
    (["A", "r", 5], "[0].target:"),
    ({"sub": "A", "rel": None, "obj": "B"}, "[0].relation:"),
    ({"foo": 1}, "[0]:"),
    ("A r B", "[0]:"),
])
def test_flat_invalid(item, prefix):
    reason = ev.validate_flat_item(item, 0)
    assert reason is not None and reason.startswith(prefix)


def test_detect_profile():
    assert ev.detect_profile([[trip("A", "r", "B")], [["A", "r", "B"]]]) == "hgr"
    assert ev.detect_profile([[["A", "r", "B"]], []]) == "triples"
    assert ev.detect_profile([[], []]) == "hgr"


@pytest.mark.parametrize("second, reason_prefix", [
    (_without(ACME_B, "target"), "[1].target: missing"),
    ({**ACME_B, "relation": "founded_by"}, "[1].relation"),
    (["Acme Inc", "founded_by", "Person Z", 0.8], "[1]"),
], ids=["no-target", "relation-string", "four-element-list"])
def test_malformed_second_item(tmp_path, second, reason_prefix):
    row = score_output(tmp_path, json.dumps([ACME_A, second]), gold_items=[ACME_A, ACME_B])
    assert len(row["invalid_items"]) == 1
    if reason_prefix.endswith("missing"):
        assert row["invalid_items"] == [reason_prefix]
    else:
        assert row["invalid_items"][0].startswith(reason_prefix)
    m = row["metrics"]
    assert m["entity_precision"] == 0.5  # 1 tp / 2 items
    assert m["entity_recall"] == 0.5     # 1 tp / 2 gold


def test_bad_weights_are_invalid_and_report_is_strict_json(tmp_path):
    golds, preds = [], []
    for k, w in enumerate(BAD_WEIGHTS):
        item_text = a.replace("0.9", w)
        assert item_text != a
        # raw model text ...
        golds.append(gold_rec(f"raw{k}", [ACME_A]))
        preds.append({"id": f"raw{k}", "output": "[" + item_text + "]"})
        # ... and a parsed JSONL line holding the literal (e.g. NaN) itself
        golds.append(gold_rec(f"parsed{k}", [ACME_A]))
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


def test_plainly_valid_shortcut_only_accepts_what_the_full_check_accepts():
    # validate_hgr_item decides plain items without building reasons; every item the
    # shortcut accepts is valid, and it accepts the ordinary valid ones (int weights too)
    from hypothesis import given, settings
    from hypothesis import strategies as st

    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=3))
    entity = st.one_of(leaf, st.fixed_dictionaries({}, optional={"title": leaf, "type": leaf}))
    relation = st.one_of(leaf, st.fixed_dictionaries({}, optional={"type": leaf, "weight": leaf}))
    item = st.one_of(leaf, st.lists(leaf, max_size=3),
                     st.fixed_dictionaries({}, optional={"source": entity, "relation": relation, "target": entity}))

    @settings(max_examples=1000, deadline=None)
    @given(item)
    def check(value):
        if ev._plainly_valid_hgr_item(value):
            assert ev.validate_hgr_item(value, 0) is None

    check()
    valid = {"source": {"title": "A", "type": "x"}, "relation": {"type": "r", "weight": 1},
             "target": {"title": "", "type": ""}}
    assert ev._plainly_valid_hgr_item(valid) and ev.validate_hgr_item(valid, 0) is None
    for weight in (True, math.nan, 1.5, -0.0 - 1e-300, "0.5"):
        bad = {**valid, "relation": {"type": "r", "weight": weight}}
        assert not ev._plainly_valid_hgr_item(bad) and ev.validate_hgr_item(bad, 3) is not None
