"""Stage 5 - final_hallucination_check (SPEC.md section 7): grounding in the prompt,
hallucination classes, self-loops.
"""

from __future__ import annotations

import pytest
from helpers import PROMPT, norm, trip

import evaluate as ev

VOCAB = frozenset(ev.SPEC_RELATIONS)


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
    assert ev.final_hallucination_check([norm(item)], gold_titles, ctx, vocab) == [expected]
    # the prompt itself (normalised in the check) classifies as its PromptContext does
    assert ev.final_hallucination_check([norm(item)], gold_titles, PROMPT, vocab) == [expected]


def test_final_hallucination_check_classifies_each_prediction_in_order(ctx):
    preds = [norm(trip("BERT", "extends", "GPT")), norm(trip("Quantum Widget", "extends", "Transformer")),
             norm(trip("Transformer", "based on", "BERT")), norm(trip("Self-Attention", "extends", "Transformer"))]
    expected = ["novel_grounded", "ungrounded", "hallucinated_relation", "novel_grounded"]
    assert ev.final_hallucination_check(preds, {"bert", "gpt"}, ctx, VOCAB) == expected
    assert ev.final_hallucination_check(preds, {"bert", "gpt"}, PROMPT, VOCAB) == expected
    assert ev.final_hallucination_check([], {"bert"}, PROMPT, VOCAB) == []
    # no prompt (not a string): only gold titles are known
    assert ev.final_hallucination_check(preds, {"bert", "gpt"}, None, VOCAB)[3] == "ungrounded"


def test_is_self_loop():
    assert ev.is_self_loop(norm(trip("Foo Inc.", "part_of", "foo")))        # equal after normalisation
    assert ev.is_self_loop(norm(trip("A_B", "part_of", "a b")))
    assert not ev.is_self_loop(norm(trip("", "part_of", "")))               # empty is no self-loop
    assert not ev.is_self_loop(norm(trip("foo", "part_of", "foo bar")))


def test_empty_title_known_only_through_an_empty_gold_title(ctx):
    # SPEC section 7: "known" = equal to a normalised gold endpoint title, OR grounded.
    # An empty title is never grounded, but a valid gold triplet may have an empty title
    # (empty strings pass the schema), and then "" equals a gold title.
    pred = norm(trip("", "extends", "Transformer"))
    assert ev.final_hallucination_check([pred], frozenset({"bert"}), ctx, VOCAB) == ["ungrounded"]
    assert ev.final_hallucination_check([pred], frozenset({"", "bert"}), ctx, VOCAB) == ["novel_grounded"]


def test_prompt_context_is_normalised_like_a_title_without_the_title_memo():
    # NFKC, "_" -> space, whitespace collapsed, lowercase; the company suffix is not at the
    # end (the closing quote is), then the edge quotes and dot go: exactly normalize_title.
    # The prompt (long, seen once) stays out of the titles' memo.
    prompt = '"Acme_Labs  builds the Bridge, Inc."'
    ev._normalize_title_cached.cache_clear()
    context = ev.PromptContext.from_prompt(prompt)
    assert context.text == "acme labs builds the bridge, inc"
    assert context.tokens == {"acme", "labs", "builds", "the", "bridge", "inc"}
    assert ev._normalize_title_cached.cache_info().currsize == 0
    assert context.text == ev.normalize_title(prompt)
    assert ev.PromptContext.from_prompt(None) == ev.PromptContext("", frozenset())


def test_the_prompt_is_normalised_once_per_entry_and_only_when_needed(monkeypatch):
    """Stage 5 normalises the prompt only for a title that is neither a gold title nor
    empty; the entry's score keeps that context, so the errors family (which grounds the
    gold titles: in_prompt) normalises it at most once more, and not again when Stage 5 did."""
    calls = []
    real = ev._normalize_text

    def counting(text):
        calls.append(text)
        return real(text)

    monkeypatch.setattr(ev, "_normalize_text", counting)
    sim, gold = ev.Similarity(), [trip("Transformer", "based_on", "self-attention")]
    ctx = ev.ScoringContext(sim, "hgr", VOCAB, ev.DEFAULT_ALIGN_ACCEPT, None)
    errors = ev.ErrorsFamily()
    # the unmatched prediction's titles are gold titles: Stage 5 needs no prompt
    known = ev.score_entry(gold, [trip("self-attention", "extends", "Transformer")], PROMPT, similarity=sim)
    assert PROMPT not in calls and known.values.novel_grounded == 1
    record = errors.entry_stats(ev.Entry(ev.GoldRecord("a", PROMPT, gold, 1), ev.Prediction("a", [], "ok", "", 1)),
                                known, ctx)
    assert calls.count(PROMPT) == 1 and record["items"]["in_prompt"] == (0,)
    # an unknown title: Stage 5 normalises the prompt once, the family not again
    calls.clear()
    unknown = ev.score_entry(gold, [trip("Quantum Widget", "extends", "Transformer")], PROMPT, similarity=sim)
    assert calls.count(PROMPT) == 1 and unknown.values.ungrounded == 1
    errors.entry_stats(ev.Entry(ev.GoldRecord("b", PROMPT, gold, 1), ev.Prediction("b", [], "ok", "", 1)), unknown, ctx)
    assert calls.count(PROMPT) == 1
    assert unknown.prompt == ev.PromptContext("the transformer architecture relies on self-attention",
                                              ev.token_set("the transformer architecture relies on self-attention"))
