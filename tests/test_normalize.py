"""Stage 2 - normalize_triplets (SPEC.md section 3): titles (NFKC, case, whitespace,
punctuation), labels, raw forms kept; Unicode titles end to end.
"""

from __future__ import annotations

import re
import unicodedata
from collections import OrderedDict

import pytest
from helpers import assert_perfect, gold_rec, norm, score_files, trip
from hypothesis import given, settings
from hypothesis import strategies as st

import evaluate as ev


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


def test_unicode_normalisation_gives_exact_matches(tmp_path):
    def t(src, rel, tgt):
        return {"source": {"title": src, "type": "entity"}, "relation": {"type": rel, "weight": 0.9},
                "target": {"title": tgt, "type": "entity"}}

    gold = [t("Café Zürich", "located_in", "City Y"), t("Acme", "part_of", "ACME Labs")]
    pred = [t("Cafe\u0301 Zu\u0308rich", "located_in", "City Y"),
            t("\uff21\uff43\uff4d\uff45", "part_of", "acme labs")]
    assert gold[0]["source"]["title"] != pred[0]["source"]["title"]  # NFC vs NFD bytes differ
    rep = score_files(tmp_path, [gold_rec("r1", gold, "Café Zürich and Acme.")],
                [{"id": "r1", "triplets": pred}])
    row = rep["per_entry"][0]
    assert_perfect(row)
    assert len(row["pairs"]) == 2
    for pair in row["pairs"]:
        assert pair["exact"] is True
        assert pair["source_sim"] == pair["target_sim"] == 1.0


# --------------------------------------------------------------------------------------
# The shortcuts of _normalize_text against the steps of SPEC.md section 3 as written
# --------------------------------------------------------------------------------------


def spec_title(title: str) -> str:
    """SPEC.md section 3 step by step with the regular expressions (the reference)."""
    text = unicodedata.normalize("NFKC", title).replace("_", " ")
    text = re.sub(r"\s+", " ", text).strip().lower()
    while True:
        stripped = ev._SUFFIX_RE.sub("", text).strip()
        if stripped == text:
            break
        text = stripped
    text = re.sub(r"""^[\s"'`(\[{.,;:]+|[\s"'`)\]}.,;:]+$""", "", text)
    return re.sub(r"\s+", " ", text).strip()


# words and characters that exercise every step: suffixes in any case (with commas, dots,
# several in a row), a plain word, characters NFKC changes, the case-insensitive
# equivalents of "i" and "s" (dotless i, long s), Unicode whitespace, edge punctuation
PIECES = (list(ev._COMPANY_SUFFIXES) + [w.upper() for w in ev._COMPANY_SUFFIXES] + [w.title() for w in ev._COMPANY_SUFFIXES]
          + ["Foo", "bar9", "x", "ınc", "ſa", "Ｃｏｒｐ", "ﬁ", "K", "İnc"]
          + list(" ,._;:'\"`()[]{}\t\n") + ["\u00a0", "\u2003", "\u3000", "\x1c", "\x85", "  ", ", "])


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=8), st.sampled_from(["", " ", "."]))
def test_normalize_title_shortcuts_equal_the_spec_steps(pieces, joiner):
    title = joiner.join(pieces)
    assert ev.normalize_title(title) == spec_title(title)


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(PIECES + [" " * 20, ", " * 9, "\u3000" * 15]), max_size=40),
       st.sampled_from(["", " ", ".", ",", "\n"]))
def test_company_suffix_found_at_the_end_equals_the_pattern_everywhere(pieces, joiner):
    # _strip_company_suffix (the pattern tried at the text's end only, its [\s,] run
    # followed to where it begins) is re.sub of the pattern, on long texts (prompts), long
    # runs of whitespace and commas before the suffix, and a final newline (before which
    # the pattern's $ matches too)
    text = joiner.join(pieces)
    assert ev._strip_company_suffix(text) == ev._SUFFIX_RE.sub("", text)
    assert ev._strip_company_suffix(text.lower()) == ev._SUFFIX_RE.sub("", text.lower())


@settings(max_examples=1000, deadline=None)
@given(st.text(max_size=12))
def test_normalize_title_of_any_text_equals_the_spec_steps(title):
    assert ev.normalize_title(title) == spec_title(title)


def test_plain_titles_take_the_shortcut_with_the_same_result():
    # ASCII words, single spaces: lowercase, then whole trailing suffix words go
    for raw, expected in [("Acme Corp Inc", "acme"), ("Inc", "inc"), ("Co Inc", "co"), ("Disco", "disco"),
                          ("Bayer AG LTD co", "bayer"), ("GPT 4", "gpt 4")]:
        assert ev.normalize_title(raw) == expected == spec_title(raw)


def test_character_classes_of_the_shortcuts_hold_for_every_code_point():
    # _WHITESPACE is exactly the class \s (what str.split and str.strip use), and no
    # character outside _SUFFIX_LAST_CHARS matches the last letter of a suffix under
    # re.IGNORECASE (so a text ending in one cannot end in a suffix)
    chars = [chr(c) for c in range(0x110000)]
    space = re.compile(r"\s")
    assert [c for c in chars if space.match(c)] == list(ev._WHITESPACE)
    assert [c for c in chars if c.isspace()] == list(ev._WHITESPACE)
    last = re.compile("[" + "".join({w[-1] for w in ev._COMPANY_SUFFIXES}) + "]", re.IGNORECASE)
    assert {c for c in chars if last.match(c)} <= ev._SUFFIX_LAST_CHARS
    assert {w[-1] for w in ev._COMPANY_SUFFIXES} <= ev._SUFFIX_LAST_CHARS


# --------------------------------------------------------------------------------------
# normalize_triplets of what validate_schema keeps: the plain-string shortcut is the
# field-by-field normalisation
# --------------------------------------------------------------------------------------

odd_values = st.one_of(st.sampled_from(["Foo Inc", " Entity ", "", "based_on", "Ｘ"]), st.none(), st.booleans(),
                       st.sampled_from([0, 1, 0.5, 1.5, -0.1, float("nan"), float("inf")]), st.just([]))


@st.composite
def answer_item(draw):
    kind = draw(st.integers(0, 5))
    if kind == 0:       # plainly valid
        return trip(draw(st.sampled_from(["Foo Inc", "Bar", "x_y"])), draw(st.sampled_from(["based_on", " Extends "])),
                    draw(st.sampled_from(["Baz", "qux Ltd."])), w=draw(st.sampled_from([0, 1, 0.25, 1.0])))
    if kind == 1:       # one field replaced by an odd value
        item = trip("Foo", "based_on", "Bar")
        part, key = draw(st.sampled_from([("source", "title"), ("source", "type"), ("relation", "type"),
                                          ("relation", "weight"), ("target", "title"), ("target", "type")]))
        item[part][key] = draw(odd_values)
        return item
    if kind == 2:       # a part missing or not an object
        item = trip("Foo", "based_on", "Bar")
        part = draw(st.sampled_from(["source", "relation", "target"]))
        if draw(st.booleans()):
            del item[part]
        else:
            item[part] = draw(odd_values)
        return item
    if kind == 3:       # a flat form
        return draw(st.sampled_from([["a", "r", "b"], {"sub": "a", "rel": "r", "obj": "b"}, ["a", "b"]]))
    if kind == 4:       # valid, but not made of plain dicts (the full check decides)
        return OrderedDict(source={"title": "A", "type": "e"}, relation={"type": "r", "weight": 1},
                           target={"title": "B", "type": "e"})
    return draw(odd_values)


@settings(max_examples=500, deadline=None)
@given(st.lists(answer_item(), max_size=6), st.sampled_from(ev.SCHEMA_PROFILES))
def test_normalize_triplets_of_the_valid_items_field_by_field(items, profile):
    schema = ev.validate_schema(items, profile)
    assert schema.valid == tuple(zip(schema.positions, schema.items))
    assert all(items[k] is item for k, item in schema.valid)
    assert sorted([*schema.positions, *(k for k, _ in schema.invalid)]) == list(range(len(items)))
    triplets = ev.normalize_triplets(schema.items, profile)
    expected = []
    for item in schema.items:
        if profile == "hgr":
            s, r, o = item["source"], item["relation"], item["target"]
            fields = (s["title"], r["type"], o["title"], s["type"], o["type"], float(r["weight"]))
            types = (ev.normalize_label(s["type"]), ev.normalize_label(o["type"]))
        else:
            fields, types = (*ev.flat_fields(item), None, None, None), (None, None)
        expected.append(ev.Triplet(*fields, ev.normalize_title(fields[0]), ev.normalize_label(fields[1]),
                                   ev.normalize_title(fields[2]), *types))
    assert triplets == expected
    assert [type(t.weight) for t in triplets] == [type(t.weight) for t in expected]   # float(weight)
    # the instance dicts too (the plain-string path gives each Triplet its dict at once)
    assert [list(vars(t).items()) for t in triplets] == [list(vars(t).items()) for t in expected]


def test_normalize_triplets_of_str_subclasses_and_mappings():
    class Name(str):
        pass

    item = OrderedDict(source={"title": Name(" Foo_Bar Inc. "), "type": Name(" Org ")},
                       relation=OrderedDict(type=Name(" Based_On "), weight=1),
                       target={"title": "Baz", "type": "Thing"})
    [t] = ev.normalize_triplets([item])
    assert (t.source, t.relation, t.target, t.source_type, t.target_type) == ("foo bar", "based_on", "baz", "org",
                                                                               "thing")
    assert t.weight == 1.0 and type(t.weight) is float and t.source_raw == " Foo_Bar Inc. "
