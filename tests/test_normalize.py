"""Stage 2 - normalize_triplets (SPEC.md section 3): titles (NFKC, case, whitespace,
punctuation), labels, raw forms kept; Unicode titles end to end.
"""

from __future__ import annotations

import pytest
from helpers import assert_perfect, gold_rec, norm, score_files, trip

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
