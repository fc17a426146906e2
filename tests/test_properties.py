"""Property-based tests (hypothesis) of the scoring core of evaluate.py (SPEC.md)."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import score_corpus

import evaluate as ev

SETTINGS = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

# Small alphabet: collisions after normalisation are frequent, so the distinctness
# filter is actually exercised ("A_b" and "a b" normalise to the same title).
titles = st.text(alphabet="abcAB _.,()", min_size=1, max_size=7)
types = st.sampled_from(["entity", "concept", "Entity ", "CONCEPT"])
weights = st.one_of(st.floats(0, 1), st.integers(0, 1), st.sampled_from([0.1, 0.7, 0.8, 0.9]))
relations = st.sampled_from(ev.SPEC_RELATIONS)


@st.composite
def typed_triplet(draw, relation=relations):
    return {"source": {"title": draw(titles), "type": draw(types)},
            "relation": {"type": draw(relation), "weight": draw(weights)},
            "target": {"title": draw(titles), "type": draw(types)}}


def _key(item):
    return (ev.normalize_title(item["source"]["title"]), ev.normalize_label(item["relation"]["type"]),
            ev.normalize_title(item["target"]["title"]))


def _distinct_non_loop(items):
    keys = [_key(t) for t in items]
    return (len(set(keys)) == len(keys)
            and all(s and t and s != t for s, _, t in keys))


distinct_gold = st.lists(typed_triplet(), min_size=1, max_size=7).filter(_distinct_non_loop)

RATIO_KEYS = ("schema_score", "entity_precision", "entity_recall", "entity_f1", "triplet_precision",
              "triplet_recall", "triplet_f1", "relation_accuracy", "weight_score", "type_agreement",
              "hallucination_rate", "grounding", "composite")


@SETTINGS
@given(gold=distinct_gold, data=st.data())
def test_gold_against_itself_in_any_order_scores_one(gold, data):
    preds = data.draw(st.permutations(gold))
    m = ev.score_entry(gold, preds, "", similarity=ev.Similarity()).metrics
    assert m["entity_tp"] == m["full_tp"] == len(gold)
    for key in RATIO_KEYS:
        expected = 0.0 if key == "hallucination_rate" else 1.0
        assert m[key] == expected, (key, m[key])
    assert m["hard_hallucinations"] == 0 and m["novel_grounded"] == 0


# ---- arbitrary JSON-ish answers ------------------------------------------------------

json_leaves = (st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True, allow_infinity=True)
               | st.text(alphabet="abAB _", max_size=5))
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(
        st.sampled_from(["source", "relation", "target", "title", "type", "weight", "sub", "rel", "obj"]),
        children, max_size=4),
    max_leaves=8,
)
any_relation = st.one_of(relations, st.sampled_from(["based on", "", "Based_On ", "inspired_by"]))
items = st.one_of(
    typed_triplet(any_relation),
    typed_triplet(any_relation),
    st.lists(st.text(alphabet="abAB _", max_size=4), min_size=3, max_size=3),   # flat form
    json_values,
)
answers = st.lists(items, max_size=6)
prompts = st.text(alphabet="abcAB _.,()", max_size=30)


def _check_bounds(m):
    for key in RATIO_KEYS:
        value = m[key]
        if value is None:
            assert key in ("relation_accuracy", "weight_score", "type_agreement"), key
            continue
        assert isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0, (key, value)
    assert 0 <= m["full_tp"] <= m["entity_tp"] <= min(m["n_gold"], m["n_pred_raw_items"])
    assert 0 <= m["hard_hallucinations"] <= m["n_pred_raw_items"]
    assert m["n_pred_valid"] <= m["n_pred_raw_items"]


@SETTINGS
@given(gold=st.lists(items, min_size=1, max_size=6), data=st.data(), prompt=prompts,
       profile=st.sampled_from(["hgr", "triples"]))
def test_scores_bounded_and_finite(gold, data, prompt, profile):
    # predictions: None (unparseable) or random items mixed with copies of gold items,
    # so that accepted pairs occur often
    pool = st.one_of(items, st.sampled_from(gold))
    pred = data.draw(st.one_of(st.none(), st.lists(pool, max_size=6)))
    m = ev.score_entry(gold, pred, prompt, similarity=ev.Similarity(), profile=profile).metrics
    _check_bounds(m)
    corpus = score_corpus([m])
    for section in ("micro", "macro"):
        for key, value in corpus[section].items():
            assert value is None or (math.isfinite(value) and 0.0 <= value <= 1.0), (section, key, value)


def _entries(spec):
    return [ev.Entry(ev.GoldRecord(f"id{i}", prompt, gold, i + 1),
                     ev.Prediction(f"id{i}", pred, "ok" if pred is not None else "unparseable", "", i + 1))
            for i, (gold, pred, prompt) in enumerate(spec)]


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.lists(st.tuples(answers, st.one_of(st.none(), answers), prompts), min_size=1, max_size=4))
def test_same_input_gives_byte_identical_report(spec):
    warm = ev.Similarity()
    ev.evaluate_entries(_entries(spec), similarity=warm)      # fill the memo first
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "a.json", Path(tmp) / "b.json", Path(tmp) / "c.json"]
        ev.write_json_atomic(paths[0], ev.evaluate_entries(_entries(spec), similarity=ev.Similarity()))
        ev.write_json_atomic(paths[1], ev.evaluate_entries(_entries(spec), similarity=ev.Similarity()))
        ev.write_json_atomic(paths[2], ev.evaluate_entries(_entries(spec), similarity=warm))
        data = [p.read_bytes() for p in paths]
    assert data[0] == data[1] == data[2]


# ---- the gated lexical similarity: the cheap upper bound must not change results -----

short_strings = st.text(alphabet="ab c1", max_size=12)


@settings(deadline=None, max_examples=400)
@given(a=short_strings, b=short_strings, threshold=st.sampled_from([0.0, 0.5, 0.8, 0.9, 1.0]))
def test_field_similarity_equals_gated_lexical(a, b, threshold):
    # SPEC section 4: field = 1.0 on exact non-empty equality, else the similarity if it is
    # >= threshold, else 0.0; a cheap upper bound may skip work but must give the same value.
    value = ev.lexical_similarity(a, b)
    expected = 1.0 if (a == b and a) else (value if value >= threshold else 0.0)
    sim = ev.Similarity(threshold)
    assert sim.field(a, b) == expected
    assert sim.field(a, b) == expected          # memoised value identical
    assert 0.0 <= value <= 1.0


@settings(deadline=None, max_examples=200)
@given(a=short_strings, b=short_strings)
def test_relation_similarity_uses_natural_language_forms(a, b):
    sim = ev.Similarity()
    ra, rb = a.replace(" ", "_"), b.replace(" ", "_")
    expected = 1.0 if (ra == rb and ra) else sim.field(ra.replace("_", " "), rb.replace("_", " "))
    assert sim.relation(ra, rb) == expected


# cydifflib against difflib: the ratio engine of the lexical similarity (SequenceRatio) must
# give difflib's float on any pair. Strings: any unicode (astral planes, combining marks,
# NUL), repetitive strings over 2-3 characters (many equal-length longest matches: the
# tie-breaking of find_longest_match), and strings of 200+ characters, where difflib's
# autojunk heuristic (off in the method, compared on and off here) drops characters
# that fill more than 1% of the second string.
ratio_texts = st.one_of(st.text(max_size=40), st.text(alphabet="ab ", max_size=60),
                        st.text(alphabet="aab c\u00e9\U0001f600", min_size=200, max_size=400),
                        st.lists(st.sampled_from(["graph", "net", " ", "work", "s"]), max_size=12).map("".join))


@settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(a=ratio_texts, b=ratio_texts, autojunk=st.booleans())
def test_cydifflib_ratio_is_difflibs(a, b, autojunk):
    import difflib

    import cydifflib
    fast = cydifflib.SequenceMatcher(None, a, b, autojunk=autojunk)
    slow = difflib.SequenceMatcher(None, a, b, autojunk=autojunk)
    assert fast.ratio() == slow.ratio()
    assert [tuple(m) for m in fast.get_matching_blocks()] == [tuple(m) for m in slow.get_matching_blocks()]
