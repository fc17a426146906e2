"""Hand-computed tests of the scoring core of evaluate.py (SPEC.md stages 1-6).

Every expected value is derived by hand from SPEC.md (the arithmetic is in the comments),
never copied from the implementation's output. Exact fractions are used where possible.
"""

from __future__ import annotations

import difflib
import json
import math
from fractions import Fraction as F

import numpy as np
import pytest

import evaluate as ev

VOCAB = frozenset(ev.SPEC_RELATIONS)


def trip(src, rel, tgt, w=0.8, st="entity", tt="concept"):
    """A typed triplet item (SPEC.md section 1)."""
    return {"source": {"title": src, "type": st},
            "relation": {"type": rel, "weight": w},
            "target": {"title": tgt, "type": tt}}


def norm(item):
    """Normalise one schema-valid item into an ev.Triplet."""
    assert ev.validate_hgr_item(item, 0) is None
    return ev.normalize_triplets([item])[0]


def score(gold, pred, prompt="", **kw):
    return ev.score_entry(gold, pred, prompt, similarity=ev.Similarity(), **kw).metrics


def fl(x: F) -> float:
    return float(x)


# ======================================================================================
# Stage 1 - schema (SPEC.md sections 1-2)
# ======================================================================================

def with_weight(w):
    item = trip("A", "based_on", "B")
    item["relation"]["weight"] = w
    return item


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


# ======================================================================================
# Stage 2 - normalisation (SPEC.md section 3)
# ======================================================================================

@pytest.mark.parametrize("raw, expected", [
    ("Foo Co., Ltd", "foo"),              # "foo co., ltd" -> "foo co." -> "foo"
    ("Acme Inc.", "acme"),
    ("Acme Inc. Ltd.", "acme"),           # repeated suffixes
    ("Foo, Inc, Ltd, Co.", "foo"),
    ("foo co co", "foo"),
    ("Foo,Inc", "foo"),                   # commas alone separate a suffix
    ("Bayer AG", "bayer"),
    ("Disco", "disco"),                   # no separator: "co" is not a suffix
    ("ag", "ag"),                         # a suffix alone has no separator before it
    ("Foo Inc.)", "foo inc"),             # suffix must be at the end: ")" blocks it, then stripped
    ("ＯｐｅｎＡＩ", "openai"),          # NFKC full-width -> ASCII
    ("Ａｃｍｅ\u3000Ｃｏｒｐ", "acme"),  # NFKC ideographic space -> " ", then suffix
    ("self_attention", "self attention"), # "_" -> space
    ("  Deep   Learning \n", "deep learning"),
    ('"(Transformer)"', "transformer"),   # leading/trailing quotes and brackets
    ("'BERT'.", "bert"),
    ("[x]", "x"),
    ("`{GPT-4};`", "gpt-4"),
    ("Sandesh (confectionery)", "sandesh (confectionery"),  # trailing ")" stripped, "(" inside kept
    ("...", ""),
    ("", ""),
])
def test_normalize_title(raw, expected):
    assert ev.normalize_title(raw) == expected


@pytest.mark.parametrize("value", [None, 5, 0.5, ["a"], {"title": "a"}, True])
def test_normalize_title_non_string(value):
    assert ev.normalize_title(value) == ""


def test_normalize_label_and_triplets_keep_raw():
    assert ev.normalize_label(" Based_On ") == "based_on"   # trim + lowercase only
    assert ev.normalize_label("based on") == "based on"
    assert ev.normalize_label(None) == ""
    t = norm(trip("Foo Co., Ltd", " Based_On ", "Self_Attention", w=1, st=" Entity ", tt="CONCEPT"))
    assert (t.source, t.relation, t.target) == ("foo", "based_on", "self attention")
    assert (t.source_raw, t.relation_raw, t.target_raw) == ("Foo Co., Ltd", " Based_On ", "Self_Attention")
    assert (t.source_type, t.target_type) == ("entity", "concept")
    assert (t.source_type_raw, t.target_type_raw) == (" Entity ", "CONCEPT")
    assert t.weight == 1.0
    assert ev.relation_text("based_on") == "based on"


# ======================================================================================
# Similarity (SPEC.md section 4)
# ======================================================================================

def test_lexical_neural_network():
    # "neural network" (14 chars) vs "neural networks" (15): the longest match is the
    # whole first string, M = 14, ratio = 2*14/29 = 28/29.
    # tokens {neural, network} vs {neural, networks}: Jaccard = 1/3.
    # 0.5*28/29 + 0.5*1/3 = 14/29 + 1/6 = 113/174 = 0.6494...
    a, b = "neural network", "neural networks"
    assert difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() == pytest.approx(28 / 29, abs=1e-15)
    assert ev.lexical_similarity(a, b) == pytest.approx(fl(F(113, 174)), abs=1e-15)
    assert ev.Similarity().field(a, b) == 0.0          # 0.649 < 0.80 -> 0.0
    assert ev.Similarity(threshold=0.6).field(a, b) == pytest.approx(113 / 174, abs=1e-15)


def test_lexical_hyphen():
    # "self attention" vs "self-attention": 13 of 14 chars match, ratio = 26/28 = 13/14;
    # tokens {self, attention} on both sides: Jaccard 1. 0.5*13/14 + 0.5 = 27/28 >= 0.80.
    assert ev.lexical_similarity("self attention", "self-attention") == pytest.approx(27 / 28, abs=1e-15)
    assert ev.Similarity().field("self attention", "self-attention") == pytest.approx(27 / 28, abs=1e-15)
    assert ev.Similarity(threshold=0.97).field("self attention", "self-attention") == 0.0


def test_lexical_equal_and_empty():
    assert ev.lexical_similarity("", "") == 1.0        # equality checked first
    assert ev.lexical_similarity("a", "") == 0.0
    assert ev.lexical_similarity("", "a") == 0.0
    assert ev.lexical_similarity("abc", "abc") == 1.0
    s = ev.Similarity()
    assert s.field("", "") == 1.0
    assert s.field("x", "") == 0.0 and s.field("", "x") == 0.0
    assert s.field("bert", "bert") == 1.0
    # no common char, no common token -> 0.0 (also below the gate)
    assert ev.lexical_similarity("abc", "xyz") == 0.0


def test_lexical_autojunk_false_on_long_strings():
    # s = the binary numerals of 8..63 ("1000" ... "111111"), space-separated: 56 distinct
    # tokens, 8*4 + 16*5 + 32*6 + 55 = 359 chars. a = "x " + s, b = "y " + s (361 chars).
    # autojunk=False: everything but the first char matches: M = 360, ratio = 720/722.
    # tokens {x} + 56 vs {y} + 56: Jaccard = 56/58.
    # similarity = 0.5*360/361 + 0.5*56/58 = 0.98148... (>= 0.80, kept by the gate)
    s = " ".join(format(i, "b") for i in range(8, 64))
    a, b = "x " + s, "y " + s
    assert len(s) == 359 and len(a) == 361
    expected = F(1, 2) * F(360, 361) + F(1, 2) * F(56, 58)
    assert ev.lexical_similarity(a, b) == pytest.approx(fl(expected), abs=1e-15)
    assert ev.Similarity().field(a, b) == pytest.approx(fl(expected), abs=1e-15)
    # With difflib's default autojunk=True, "0", "1" and " " are "popular" (> 1% of 361)
    # and "x"/"y" never match: the ratio collapses to 0 and the score would be 28/58 < 0.8.
    # This is the documented deviation (SPEC section 4).
    assert difflib.SequenceMatcher(None, a, b).ratio() == 0.0


def test_relation_similarity():
    s = ev.Similarity()
    assert s.relation("based_on", "based_on") == 1.0
    assert s.relation("based_on", "based on") == 1.0   # natural-language forms equal
    assert s.relation("based on", "based_on") == 1.0
    # "based on" vs "depends on": M = 6 ("e", "s", " on" ...) -> at most 0.5*ratio + 0.5*1/3
    # which is < 0.8, so gated to 0.
    assert s.relation("based_on", "depends_on") == 0.0
    assert s.relation("", "") == 1.0                   # field("", "") = 1.0 (section 4)
    assert s.relation("", "based_on") == 0.0


def test_similarity_matrix_shapes_and_values():
    s = ev.Similarity()
    m = s.matrix(["bert", "gpt"], ["bert", "self attention", "gpt"])
    assert m.shape == (2, 3) and m.dtype == np.float64
    assert m.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    assert s.matrix(["a"], []).shape == (1, 0)
    r = s.matrix(["based_on"], ["based on", "part_of"], relation=True)
    assert r.tolist() == [[1.0, 0.0]]


# ======================================================================================
# Stage 4 - weight agreement (SPEC.md section 6)
# ======================================================================================

@pytest.mark.parametrize("g, p, expected", [
    (0.8, 0.7, 0.5),     # |0.8-0.7| = 0.10000000000000009 > 0.1 -> 0.5 band
    (0.1, 0.0, 1.0),     # exactly 0.1 -> 1.0
    (0.5, 0.4, 1.0),     # 0.09999999999999998
    (0.2, 0.0, 0.5),     # exactly 0.2 -> 0.5
    (0.9, 0.7, 0.0),     # 0.20000000000000007 > 0.2 -> 0.0
    (0.3, 0.0, 0.0),
    (1, 1, 1.0),         # ints
    (1, 0, 0.0),
    (0.7, 0.8, 0.5),     # symmetric
    ("0.8", 0.8, 0.0),   # non-numeric -> 0.0
    (None, 0.8, 0.0),
    (True, 1.0, 0.0),
])
def test_weight_agreement(g, p, expected):
    assert ev.weight_agreement(g, p) == expected


def test_weight_band_edge_is_ieee():
    assert abs(0.8 - 0.7) == 0.10000000000000009
    assert abs(0.9 - 0.7) == 0.20000000000000007


# ======================================================================================
# Stage 5 - hallucination check (SPEC.md section 7)
# ======================================================================================

PROMPT = "The Transformer architecture relies on self-attention."


@pytest.fixture
def ctx():
    c = ev.PromptContext.from_prompt(PROMPT)
    # normalised: lowercase, trailing "." stripped
    assert c.text == "the transformer architecture relies on self-attention"
    assert c.tokens == frozenset({"the", "transformer", "architecture", "relies", "on", "self", "attention"})
    return c


def test_is_grounded(ctx):
    assert ev.is_grounded("transformer", ctx)
    assert ev.is_grounded("former", ctx)                     # plain substring, no word boundaries
    assert ev.is_grounded("self-attention", ctx)
    # tokens {transformer, relies, heavily}: 2/3 = 0.667 >= 0.6
    assert ev.is_grounded("transformer relies heavily", ctx)
    # tokens {transformer, relies, on, foo, bar}: 3/5 = 0.6 >= 0.6 (boundary)
    assert ev.is_grounded("transformer relies on foo bar", ctx)
    # tokens {transformer, model}: 1/2 = 0.5 < 0.6, and not a substring
    assert not ev.is_grounded("transformer model", ctx)
    assert not ev.is_grounded("", ctx)                       # empty never grounded
    assert not ev.is_grounded("#", ctx)                      # no tokens, not a substring
    assert not ev.is_grounded("quantum widget", ctx)


def test_prompt_normalisation_applies_to_grounding():
    c = ev.PromptContext.from_prompt("Made by Acme_Robotics Inc.")
    assert c.text == "made by acme robotics"
    assert ev.is_grounded("acme robotics", c)
    assert ev.PromptContext.from_prompt(None).text == ""


@pytest.mark.parametrize("item, vocab, expected", [
    # "based on" (space) is not the vocabulary string "based_on"
    (trip("Transformer", "based on", "self-attention"), VOCAB, "hallucinated_relation"),
    (trip("Transformer", "", "self-attention"), VOCAB, "hallucinated_relation"),
    (trip("Transformer", "inspired_by", "self-attention"), VOCAB, "hallucinated_relation"),
    # trim + lowercase makes " Based_On " the vocabulary string based_on; both grounded
    (trip("Transformer", " Based_On ", "self-attention"), VOCAB, "novel_grounded"),
    # "bert" is a gold title, "transformer" a prompt substring
    (trip("BERT", "extends", "Transformer"), VOCAB, "novel_grounded"),
    # token overlap 2/3 for the source
    (trip("Transformer relies heavily", "uses", "attention"), None, "novel_grounded"),
    # vocabulary None: relation check skipped, so this is decided by grounding
    (trip("Transformer", "based on", "self-attention"), None, "novel_grounded"),
    (trip("Transformer model", "extends", "self-attention"), VOCAB, "ungrounded"),   # 1/2 < 0.6
    (trip("", "extends", "Transformer"), VOCAB, "ungrounded"),                       # empty title
    (trip("Quantum Widget", "extends", "Transformer"), VOCAB, "ungrounded"),
    (trip("Quantum Widget", "based on", "Transformer"), VOCAB, "hallucinated_relation"),  # relation first
])
def test_final_hallucination_check(ctx, item, vocab, expected):
    gold_titles = frozenset({"bert", "gpt"})
    assert ev.final_hallucination_check(norm(item), gold_titles, ctx, vocab) == expected


def test_is_self_loop():
    assert ev.is_self_loop(norm(trip("Foo Inc.", "part_of", "foo")))        # equal after normalisation
    assert ev.is_self_loop(norm(trip("A_B", "part_of", "a b")))
    assert not ev.is_self_loop(norm(trip("", "part_of", "")))               # empty is no self-loop
    assert not ev.is_self_loop(norm(trip("foo", "part_of", "foo bar")))


# ======================================================================================
# Stage 3 - matching and the tie rule (SPEC.md section 5)
# ======================================================================================

def test_hungarian_tie_rule_hand_trace():
    # cost = [[0, 0.5], [0.5, 1]]: both assignments cost 1.0. Identity accepts only
    # (0,0) (align 1.0; (1,1) has align 0.0); the anti-diagonal would accept (0,1) and
    # (1,0) (align 0.5 each). Classic algorithm, rows added in order (1-based below):
    #  row 1: minv = [0, 0.5] -> first strict minimum col 1 (delta 0), col 1 free -> row1->col1.
    #  row 2: minv = [0.5, 1], way = [0, 0]; delta = 0.5 at col 1 (first min);
    #         u2 = 0.5, v0 = -0.5, minv -> [0, 0.5]; col 1 taken by row 1, scan from row 1:
    #         cur(col 2) = 0.5 - u1(0) - v2(0) = 0.5, NOT strictly < minv[2] = 0.5, so
    #         way[2] stays 0; delta = 0.5 at col 2, free -> augment p[2] = row 2.
    #  result: [0, 1] (identity).
    assert ev.hungarian([[0.0, 0.5], [0.5, 1.0]]) == [0, 1]
    assert ev._hungarian_python([[0.0, 0.5], [0.5, 1.0]], 2, 2) == [0, 1]
    assert ev._hungarian_numpy(np.array([[0.0, 0.5], [0.5, 1.0]])) == [0, 1]
    # all-equal: columns taken in order
    assert ev.hungarian([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]) == [0, 1]
    assert ev.hungarian([[1.0, 1.0]]) == [0]
    # a unique optimum that is not the identity
    assert ev.hungarian([[0.0, 0.0], [0.0, 1.0]]) == [1, 0]


def test_tie_rule_in_scoring():
    # gold G1 = (alpha, based_on, beta), G2 = (gamma, part_of, beta)
    # preds P1 = (alpha, based_on, beta), P2 = (alpha, based_on, delta)
    # (distinct single-token words: Jaccard 0 caps the lexical score at 0.5 < 0.8 -> 0)
    # align: G1-P1 = 1.0; G1-P2 = 0.45 + 0.10 = 0.55 (src + rel); G2-P1 = 0.45 (tgt);
    # G2-P2 = 0. cost = [[0, 1-0.55 = 0.44999999999999996], [0.55, 1]].
    # Identity costs 1.0, the anti-diagonal 0.44999999999999996 + 0.55 = 1.0 too: a tie.
    # Trace: row 1 -> col 1 (cost 0). Row 2: delta 0.55 at col 1, minv[2] -> 1 - 0.55 =
    # 0.44999999999999996; from row 1, cur(col 2) = 0.44999999999999996 is not strictly
    # smaller, so way[2] = 0 and row 2 takes col 2: identity. Accepted: (G1, P1) only
    # (align 0 < 0.5 for G2-P2). The anti-diagonal would have accepted (G1, P2), which is
    # not even an entity match (tgt 0): entity_tp would be 0 instead of 1.
    assert 0.45 * 1 + 0.45 * 0 + 0.1 * 1 == 0.55 and (1 - 0.55) + 0.55 == 1.0
    gold = [trip("alpha", "based_on", "beta"), trip("gamma", "part_of", "beta")]
    preds = [trip("alpha", "based_on", "beta"), trip("alpha", "based_on", "delta")]
    res = ev.match_triplets(ev.normalize_triplets(gold), ev.normalize_triplets(preds), ev.Similarity())
    assert [(p.gold, p.pred) for p in res.pairs] == [(0, 0)]
    assert res.unmatched_gold == (1,) and res.unmatched_pred == (1,)
    m = score(gold, preds, "alpha beta gamma delta")
    assert (m["entity_tp"], m["full_tp"]) == (1, 1)


def test_gate_after_assignment():
    # SPEC section 5: the gate is applied after the assignment.
    # gold G1 = (alpha, based_on, beta), G2 = (gamma, part_of, delta)
    # P1 = (alpha, part_of, delta): align(G1,P1) = 0.45 (src), align(G2,P1) = 0.45 + 0.1 = 0.55
    # P2 = (omega, part_of, beta):  align(G1,P2) = 0.45 (tgt), align(G2,P2) = 0.1 (rel)
    # identity = 0.45 + 0.1 = 0.55, anti-diagonal = 0.45 + 0.55 = 1.0 -> anti wins:
    # (G1,P2) align 0.45 rejected, (G2,P1) align 0.55 accepted.
    gold = [trip("alpha", "based_on", "beta"), trip("gamma", "part_of", "delta")]
    preds = [trip("alpha", "part_of", "delta"), trip("omega", "part_of", "beta")]
    res = ev.match_triplets(ev.normalize_triplets(gold), ev.normalize_triplets(preds), ev.Similarity())
    assert [(p.gold, p.pred) for p in res.pairs] == [(1, 0)]
    pair = res.pairs[0]
    assert (pair.source_sim, pair.target_sim, pair.relation_sim) == (0.0, 1.0, 1.0)
    assert pair.align_sim == pytest.approx(0.55, abs=1e-15)
    # align_accept = 0.4 accepts both
    res = ev.match_triplets(ev.normalize_triplets(gold), ev.normalize_triplets(preds), ev.Similarity(), 0.4)
    assert sorted((p.gold, p.pred) for p in res.pairs) == [(0, 1), (1, 0)]


# ======================================================================================
# Stage 6 - scoring (SPEC.md section 8)
# ======================================================================================

A = trip("Transformer", "based_on", "self-attention", w=0.8, st="concept", tt="concept")
B = trip("BERT", "extends", "Transformer", w=0.9, st="entity", tt="concept")


def test_empty_gold_empty_pred():
    m = score([], [])
    assert m["composite"] == 1.0
    assert m["entity_f1"] == 0.0 and m["triplet_f1"] == 0.0       # never N/A
    assert m["schema_score"] == 1.0 and m["grounding"] == 1.0
    assert m["relation_accuracy"] is None and m["weight_score"] is None
    assert m["type_agreement"] is None
    assert m["hallucination_rate"] == 0.0


def test_empty_gold_one_pred():
    m = score([], [A], "Transformer self-attention")
    assert m["composite"] == 0.0
    assert m["n_pred_raw_items"] == 1 and m["entity_tp"] == 0
    assert m["novel_grounded"] == 1 and m["hard_hallucinations"] == 0


def test_gold_one_pred_empty():
    # schema and grounding N/A inside the composite (n_items = 0); relation/weight N/A
    # (entity_tp = 0); only entity_f1 = 0 remains: 0.25*0 / 0.25 = 0.0.
    m = score([A], [])
    assert m["composite"] == 0.0
    assert m["schema_score"] == 1.0 and m["grounding"] == 1.0      # per-entry values exist
    assert m["entity_precision"] == 0.0 and m["entity_recall"] == 0.0 and m["entity_f1"] == 0.0
    assert m["relation_accuracy"] is None and m["weight_score"] is None


def test_unparseable_prediction():
    m = score([A], None)
    assert m["schema_score"] == 0.0
    assert m["n_pred_raw_items"] == 0 and m["n_pred_valid"] == 0
    assert m["composite"] == 0.0
    assert m["grounding"] == 1.0
    # unparseable with empty gold: n_items = 0 -> composite 1.0 (section 8 rule)
    assert score([], None)["composite"] == 1.0


def test_all_invalid_prediction():
    # 2 invalid items: schema 0/2 = 0; entity F1 0; grounding: hard = 0 -> 1.0
    # composite = (0.30*0 + 0.25*0 + 0.15*1) / (0.30+0.25+0.15) = 0.15/0.70 = 3/14
    m = score([A], [with_weight(True), "junk"])
    assert m["schema_score"] == 0.0 and m["n_pred_raw_items"] == 2 and m["n_pred_valid"] == 0
    assert m["grounding"] == 1.0
    assert m["composite"] == pytest.approx(3 / 14, abs=1e-12)


def test_no_entity_match_gives_na_relation_and_weight():
    # pred shares only the relation -> align 0.1 < 0.5, no pair accepted
    m = score([A], [trip("Quantum Widget", "based_on", "Gizmo")])
    assert m["entity_tp"] == 0
    assert m["relation_accuracy"] is None and m["weight_score"] is None and m["type_agreement"] is None
    assert m["hard_hallucinations"] == 1        # ungrounded (empty prompt, titles not gold)
    # composite = (0.30*1 + 0.25*0 + 0.15*0) / 0.70 = 3/7
    assert m["composite"] == pytest.approx(3 / 7, abs=1e-12)


def test_entity_match_without_relation_match_weight_na():
    # same endpoints, relation "part_of" vs "based_on" -> rel 0; align 0.9 accepted;
    # entity match, no full match: relation_acc = 0/1, weight N/A.
    # P = R = 1 -> entity F1 = 1; composite = (0.30*1 + 0.25*1 + 0.20*0 + 0.15*1)/0.90 = 0.7/0.9
    m = score([A], [trip("Transformer", "part_of", "self-attention", st="concept", tt="concept")])
    assert m["entity_tp"] == 1 and m["full_tp"] == 0
    assert m["relation_accuracy"] == 0.0
    assert m["weight_score"] is None
    assert m["type_agreement"] == 1.0
    assert m["composite"] == pytest.approx(7 / 9, abs=1e-12)


def test_three_copies_of_a_correct_triplet():
    # Only one copy can be matched (no set semantics): entity_tp = 1,
    # P = 1/3, R = 1, F1 = 2*(1/3)*1/(4/3) = 1/2. The two extra copies have a vocabulary
    # relation and gold titles -> novel_grounded, not hard. composite =
    # 0.30*1 + 0.25*0.5 + 0.20*1 + 0.10*1 + 0.15*1 = 0.875
    m = score([A], [A, A, A])
    assert m["entity_tp"] == 1 and m["full_tp"] == 1
    assert m["entity_precision"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["entity_recall"] == 1.0
    assert m["entity_f1"] == pytest.approx(0.5, abs=1e-15)
    assert m["novel_grounded"] == 2 and m["hard_hallucinations"] == 0
    assert m["composite"] == pytest.approx(0.875, abs=1e-12)


def test_duplicated_gold_vs_itself():
    m = score([A, A], [A, A])
    assert m["entity_tp"] == 2 and m["full_tp"] == 2
    for key in ("entity_f1", "triplet_f1", "relation_accuracy", "weight_score", "type_agreement",
                "schema_score", "grounding", "composite"):
        assert m[key] == 1.0, key


def test_self_loop_prediction():
    # gold self-loop X->X; the identical prediction is a self-loop: removed before
    # matching, a hard hallucination. schema 1, entity F1 0, grounding 1 - 1/1 = 0:
    # composite = 0.30*1 / (0.30 + 0.25 + 0.15) = 3/7
    loop = trip("Foo Inc.", "part_of", "foo")
    m = score([loop], [loop], "foo")
    assert m["self_loops_removed"] == 1 and m["hard_hallucinations"] == 1
    assert m["entity_tp"] == 0 and m["n_pred_valid"] == 1
    assert m["grounding"] == 0.0
    assert m["composite"] == pytest.approx(3 / 7, abs=1e-12)


WORKED_PROMPT = "Transformer is based on self-attention. BERT extends Transformer. ImageNet is used for evaluation."
WORKED_GOLD = [
    A,                                                                              # G1
    B,                                                                              # G2
    trip("ImageNet", "used_for", "evaluation", w=0.6, st="entity", tt="concept"),   # G3
]
WORKED_PRED = [
    # P1: equal to G1 after normalisation; weight |0.8-0.7| = 0.10000000000000009 -> 0.5
    trip("transformer", "Based_On", "Self-Attention", w=0.7, st="Concept", tt="concept"),
    # P2: endpoints of G2, relation depends_on ("depends on" vs "extends" < 0.8 -> 0):
    # align = 0.9, entity match, no relation match; target type entity != concept
    trip("BERT", "depends_on", "Transformer", w=0.9, st="entity", tt="entity"),
    # P3: invalid (weight 1.5): stays in the precision denominator
    trip("ImageNet", "used_for", "evaluation", w=1.5, st="entity", tt="concept"),
    # P4: relation "based on" (space) not in the vocabulary -> hallucinated_relation (hard);
    # assigned to G3 with align 0 (no field similar), rejected
    trip("GPT", "based on", "attention mechanism", w=0.5, st="entity", tt="concept"),
]


def test_worked_example():
    s = ev.score_entry(WORKED_GOLD, WORKED_PRED, WORKED_PROMPT, similarity=ev.Similarity())
    m = s.metrics
    # n_gold = 3, n_items = 4 (3 valid), entity_tp = 2 (P1, P2), full_tp = 1 (P1)
    assert (m["n_gold"], m["n_pred_raw_items"], m["n_pred_valid"]) == (3, 4, 3)
    assert (m["entity_tp"], m["full_tp"]) == (2, 1)
    assert (m["hard_hallucinations"], m["hallucinated_relations"], m["novel_grounded"], m["ungrounded"]) == (1, 1, 0, 0)
    # entity P = 2/4, R = 2/3, F1 = 2*(1/2)*(2/3) / (1/2 + 2/3) = (2/3)/(7/6) = 4/7
    ep, er = F(2, 4), F(2, 3)
    ef1 = 2 * ep * er / (ep + er)
    assert ef1 == F(4, 7)
    assert m["entity_precision"] == pytest.approx(fl(ep), abs=1e-15)
    assert m["entity_recall"] == pytest.approx(fl(er), abs=1e-15)
    assert m["entity_f1"] == pytest.approx(fl(ef1), abs=1e-15)
    # triplet P = 1/4, R = 1/3, F1 = 2*(1/12)/(7/12) = 2/7
    assert m["triplet_precision"] == pytest.approx(0.25, abs=1e-15)
    assert m["triplet_recall"] == pytest.approx(1 / 3, abs=1e-15)
    assert m["triplet_f1"] == pytest.approx(2 / 7, abs=1e-15)
    assert m["relation_accuracy"] == 0.5          # 1 full / 2 entity
    assert m["weight_score"] == 0.5               # one full match, 0.5 band
    assert m["type_agreement"] == 0.5             # P1 agrees, P2 target type differs
    assert m["schema_score"] == 0.75              # 3 valid / 4
    assert m["hallucination_rate"] == 0.25 and m["grounding"] == 0.75
    # composite = 0.30*3/4 + 0.25*4/7 + 0.20*1/2 + 0.10*1/2 + 0.15*3/4   (sum w = 1)
    #           = 0.225 + 1/7 + 0.1 + 0.05 + 0.1125 = 39/80 + 1/7 = 353/560 = 0.63035714...
    comp = F(3, 10) * F(3, 4) + F(1, 4) * F(4, 7) + F(1, 5) * F(1, 2) + F(1, 10) * F(1, 2) + F(3, 20) * F(3, 4)
    assert comp == F(353, 560)
    assert m["composite"] == pytest.approx(fl(comp), abs=1e-12)
    # explanation fields
    assert [(p["gold_index"], p["pred_index"], p["full_match"]) for p in s.pairs] == [(0, 0, True), (1, 1, False)]
    assert s.pairs[0]["exact"] is True and s.pairs[0]["weight_score"] == 0.5
    assert s.pairs[1]["entity_match"] is True and s.pairs[1]["relation_match"] is False
    assert s.pairs[1]["align_sim"] == pytest.approx(0.9, abs=1e-15)
    assert s.unmatched_predictions == [{"pred_index": 3, "class": "hallucinated_relation"}]
    assert s.invalid_items == ["[2].relation.weight: 1.5 is not a number in [0, 1]"]


def test_invalid_gold_items_excluded_and_reported():
    m = ev.score_entry([A, with_weight(2)], [A], "", similarity=ev.Similarity())
    assert m.metrics["n_gold"] == 1
    assert m.invalid_gold_items == ["[1].relation.weight: 2 is not a number in [0, 1]"]
    assert m.metrics["composite"] == 1.0


def test_composite_score_function():
    assert ev.composite_score({"schema": 1.0, "entity_f1": 0.0, "relation_acc": None,
                               "weight": None, "grounding": 1.0}) == pytest.approx(0.45 / 0.70, abs=1e-15)
    assert ev.composite_score({}) == 0.0
    assert dict(ev.COMPOSITE_WEIGHTS) == {"schema": 0.30, "entity_f1": 0.25, "relation_acc": 0.20,
                                          "weight": 0.10, "grounding": 0.15}


def test_safe_ratio_and_f1():
    assert ev.safe_ratio(1, 0) == 0.0
    assert ev.f1_score(0.0, 0.0) == 0.0
    assert ev.f1_score(0.5, 1.0) == pytest.approx(2 / 3, abs=1e-15)


# ======================================================================================
# Corpus aggregation (SPEC.md section 8)
# ======================================================================================

def test_score_corpus_micro_and_macro():
    e1 = score(WORKED_GOLD, WORKED_PRED, WORKED_PROMPT)   # worked example
    e2 = score([A], [])                                    # empty prediction
    e3 = score([A], [A, A, A])                             # three copies
    e4 = score([A], None)                                  # unparseable
    out = ev.score_corpus([e1, e2, e3, e4], unparseable=1, missing=0)
    t, mi, ma = out["totals"], out["micro"], out["macro"]
    # totals: gold 3+1+1+1 = 6, items 4+0+3+0 = 7, entity_tp 2+0+1+0 = 3, full 1+0+1+0 = 2,
    # hard 1+0+0+0 = 1, empty predictions e2 + e4 = 2, schema-invalid entries: e1 only.
    assert t == {"gold_triplets": 6, "pred_triplet_items": 7, "entity_true_positives": 3,
                 "full_triplet_true_positives": 2, "hard_hallucinations": 1, "empty_predictions": 2,
                 "schema_invalid_entries": 1, "unparseable_predictions": 1, "missing_predictions": 0}
    # micro entity P = 3/7, R = 3/6, F1 = 2*(3/7)(1/2)/(3/7+1/2) = (3/7)/(13/14) = 6/13
    assert mi["entity_precision"] == pytest.approx(3 / 7, abs=1e-15)
    assert mi["entity_recall"] == pytest.approx(0.5, abs=1e-15)
    assert mi["entity_f1"] == pytest.approx(6 / 13, abs=1e-15)
    # micro triplet P = 2/7, R = 2/6, F1 = 2*(2/7)(1/3)/(2/7+1/3) = (4/21)/(13/21) = 4/13
    assert mi["triplet_precision"] == pytest.approx(2 / 7, abs=1e-15)
    assert mi["triplet_recall"] == pytest.approx(1 / 3, abs=1e-15)
    assert mi["triplet_f1"] == pytest.approx(4 / 13, abs=1e-15)
    assert mi["hallucination_rate"] == pytest.approx(1 / 7, abs=1e-15)
    # macro: mean over entries, N/A skipped
    assert ma["entity_f1"] == pytest.approx((4 / 7 + 0 + 0.5 + 0) / 4, abs=1e-15)
    assert ma["triplet_f1"] == pytest.approx((2 / 7 + 0 + 0.5 + 0) / 4, abs=1e-15)
    assert ma["relation_accuracy"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)   # e2, e4 N/A
    assert ma["weight_score"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)
    assert ma["type_agreement"] == pytest.approx((0.5 + 1.0) / 2, abs=1e-15)
    assert ma["schema_score"] == pytest.approx((0.75 + 1.0 + 1.0 + 0.0) / 4, abs=1e-15)
    assert ma["grounding"] == pytest.approx((0.75 + 1.0 + 1.0 + 1.0) / 4, abs=1e-15)
    assert ma["composite"] == pytest.approx((353 / 560 + 0.0 + 0.875 + 0.0) / 4, abs=1e-12)


def test_score_corpus_all_na_macro():
    out = ev.score_corpus([score([], [])])
    assert out["macro"]["relation_accuracy"] is None and out["macro"]["weight_score"] is None
    assert out["macro"]["composite"] == 1.0
    assert out["micro"]["entity_f1"] == 0.0 and out["micro"]["hallucination_rate"] == 0.0


def test_evaluate_entries_counts_statuses():
    def entry(i, gold, items, status):
        return ev.Entry(ev.GoldRecord(f"id{i}", WORKED_PROMPT, gold, i),
                        ev.Prediction(f"id{i}", items, status, "", i if status != "missing" else None))
    entries = [entry(1, WORKED_GOLD, WORKED_PRED, "ok"), entry(2, [A], None, "unparseable"),
               entry(3, [A], [], "missing"), entry(4, [], [], "empty")]
    rep = ev.evaluate_entries(entries, similarity=ev.Similarity())
    s = rep["summary"]
    assert s["n_entries"] == 4 and s["embedding_backend"] == "lexical"
    assert s["sim_threshold"] == 0.8 and s["align_accept"] == 0.5
    assert s["totals"]["unparseable_predictions"] == 1 and s["totals"]["missing_predictions"] == 1
    assert s["totals"]["empty_predictions"] == 3
    assert s["totals"]["schema_invalid_entries"] == 1
    assert s["parse_status"]["ok"] == 1 and s["parse_status"]["empty"] == 1
    # composites: 353/560, 0, 0, 1 -> macro (353/560 + 1)/4
    assert s["macro"]["composite"] == pytest.approx((353 / 560 + 1.0) / 4, abs=1e-12)
    assert [e["id"] for e in rep["per_entry"]] == ["id1", "id2", "id3", "id4"]
    assert rep["per_entry"][0]["invalid_items"] == ["[2].relation.weight: 1.5 is not a number in [0, 1]"]
    assert s["invalid_item_reasons"] == {"relation.weight: 1.5 is not a number in [0, 1]": 1}


# ======================================================================================
# Embedding backend with a fake embedder (SPEC.md section 4: cosine, negatives clamped)
# ======================================================================================

class FakeEmbedder:
    """Hand-chosen 2-D unit vectors, so every cosine is known exactly (up to float32)."""

    backend = "fake"
    model_name = "fake-2d"
    VECTORS = {
        "cat": (1.0, 0.0),
        "kitten": (0.9, math.sqrt(1 - 0.81)),   # cos(cat, kitten) = 0.9
        "dog": (0.0, 1.0),                      # cos(cat, dog) = 0
        "anti cat": (-1.0, 0.0),                # cos(cat, anti cat) = -1 -> clamped to 0
        "based on": (0.6, 0.8),
        "part of": (0.8, 0.6),                  # cos(based on, part of) = 0.96
    }

    def __init__(self):
        self.calls = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


def test_embedding_similarity_field_and_matrix():
    sim = ev.EmbeddingSimilarity(FakeEmbedder())
    assert sim.backend == "fake" and sim.model == "fake-2d"
    assert sim.field("cat", "kitten") == pytest.approx(0.9, abs=1e-6)
    assert sim.field("cat", "dog") == 0.0
    assert sim.field("cat", "anti cat") == 0.0
    assert sim.raw("cat", "anti cat") == 0.0          # negative cosine clamped
    assert sim.field("cat", "cat") == 1.0
    assert sim.field("cat", "") == 0.0 and sim.field("", "") == 1.0
    assert ev.EmbeddingSimilarity(FakeEmbedder(), threshold=0.95).field("cat", "kitten") == 0.0
    m = sim.matrix(["cat", "dog", ""], ["kitten", "anti cat", "dog", ""])
    expected = [[0.9, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    assert m == pytest.approx(np.array(expected), abs=1e-6)
    # matrix and field agree element by element
    for i, a in enumerate(["cat", "dog", ""]):
        for j, b in enumerate(["kitten", "anti cat", "dog", ""]):
            assert m[i, j] == pytest.approx(sim.field(a, b), abs=1e-12)


def test_embedding_similarity_relation():
    sim = ev.EmbeddingSimilarity(FakeEmbedder())
    assert sim.relation("based_on", "based_on") == 1.0
    assert sim.relation("based_on", "based on") == 1.0
    assert sim.relation("based_on", "part_of") == pytest.approx(0.96, abs=1e-6)
    r = sim.matrix(["based_on"], ["based on", "part_of", "based_on"], relation=True)
    assert r == pytest.approx(np.array([[1.0, 0.96, 1.0]]), abs=1e-6)


def test_embedding_matching_shapes():
    gold = ev.normalize_triplets([trip("cat", "based_on", "dog")])
    preds = ev.normalize_triplets([trip("kitten", "part_of", "dog"), trip("dog", "based on", "cat")])
    src, tgt, rel = ev.embedding_matching(gold, preds, ev.EmbeddingSimilarity(FakeEmbedder()))
    assert src.shape == tgt.shape == rel.shape == (1, 2)
    assert src == pytest.approx(np.array([[0.9, 0.0]]), abs=1e-6)
    assert tgt == pytest.approx(np.array([[1.0, 0.0]]), abs=1e-6)
    assert rel == pytest.approx(np.array([[0.96, 1.0]]), abs=1e-6)


def test_empty_title_known_only_through_an_empty_gold_title(ctx):
    # SPEC section 7: "known" = equal to a normalised gold endpoint title, OR grounded.
    # An empty title is never grounded, but a valid gold triplet may have an empty title
    # (empty strings pass the schema), and then "" equals a gold title.
    pred = norm(trip("", "extends", "Transformer"))
    assert ev.final_hallucination_check(pred, frozenset({"bert"}), ctx, VOCAB) == "ungrounded"
    assert ev.final_hallucination_check(pred, frozenset({"", "bert"}), ctx, VOCAB) == "novel_grounded"
