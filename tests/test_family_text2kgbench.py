"""Metric family text2kgbench: the Text2KGBench run_eval.py reproduction.

Hand-computed cases for every metric and quirk, then the full DBpedia-WebNLG Vicuna-13B
run against the benchmark's own outputs (../shared/data/text2kgbench; skipped when absent).

Also the command line on one ontology, and a typed (non-Text2KGBench) gold named as such.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from conftest import ACME_A
from helpers import (
    NLTK_DATA,
    SHARED,
    SHARED_DATA,
    _need,
    assert_close,
    cli,
    load_report,
    run_cli,
    t2kg_evaluate_ontology,
    t2kg_evaluate_run,
    write_jsonl,
)

import evaluate as ev
from evaluate import (  # noqa: E402
    T2KG_DBPEDIA_WEBNLG_ONTO_LIST,
    T2KG_METRIC_KEYS,
    t2kg_load_ontology,
    t2kg_sentence_metrics,
)

T2K = SHARED / "data" / "text2kgbench"


WEBNLG = T2K / "data" / "dbpedia_webnlg"


VICUNA = WEBNLG / "baselines" / "Vicuna-13B"


# Must be set before nltk is first imported (evaluate imports it lazily).
if NLTK_DATA.is_dir():
    os.environ.setdefault("NLTK_DATA", str(NLTK_DATA))


@pytest.fixture(scope="module")
def nltk_ready():
    """Hallucination metrics need nltk + the English punkt_tab tables."""
    nltk = pytest.importorskip("nltk")
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        pytest.skip("NLTK English punkt_tab tables not found (../shared/nltk_data absent)")


ONTO = {
    "concepts": [{"qid": "Person", "label": "Person"}, {"qid": "Place", "label": "Place"}],
    "relations": [
        {"pid": "birthPlace", "label": "birthPlace"},
        {"pid": "deathPlace", "label": "deathPlace"},
        {"pid": "p1", "label": "release date"},  # label with a space
    ],
}


SENT = "Alan Bean was born in Wheeler, Texas."


def m(gold, pred, sent=SENT, onto=ONTO):
    return t2kg_sentence_metrics(gold, pred, sent, onto)


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def mini_ontology(tmp_path):
    """Three gold sentences, responses for two of them (one repeated), one stray id."""
    gt = _write_jsonl(tmp_path / "ont_1_x_ground_truth.jsonl", [
        {"id": "s1", "sent": "A B.", "triples": [{"sub": "A", "rel": "birthPlace", "obj": "B"}]},
        {"id": "s2", "sent": "A C.", "triples": [{"sub": "A", "rel": "deathPlace", "obj": "C"}]},
        {"id": "s3", "sent": "A D.", "triples": [{"sub": "A", "rel": "birthPlace", "obj": "D"}]},
    ])
    resp = _write_jsonl(tmp_path / "1_x_model_responses.jsonl", [
        {"id": "s1", "triples": [["A", "wrongRel", "B"]]},  # overridden by the later line
        {"id": "s2", "triples": []},  # empty prediction: OC 1
        {"id": "zz", "triples": [["A", "birthPlace", "B"]]},  # not in gold: ignored
        {"id": "s1", "triples": [["A", "birthPlace", "B"]]},  # last line wins
    ])
    onto = tmp_path / "1_x_ontology.json"
    onto.write_text(json.dumps(ONTO))
    return gt, resp, onto


def _mini_run(tmp_path, resp_names):
    """Ontologies 1_a (all correct) and 11_a (all wrong) in three dirs."""
    gt_dir, on_dir, rs_dir = (tmp_path / d for d in ("gt", "onto", "resp"))
    for d in (gt_dir, on_dir, rs_dir):
        d.mkdir()
    for key, obj in (("1_a", "B"), ("11_a", "Z")):
        _write_jsonl(gt_dir / f"ont_{key}_ground_truth.jsonl", [
            {"id": f"{key}_1", "sent": "A B.",
             "triples": [{"sub": "A", "rel": "birthPlace", "obj": "B"}]}])
        (on_dir / f"{key}_ontology.json").write_text(json.dumps(ONTO))
        _write_jsonl(rs_dir / resp_names[key], [
            {"id": f"{key}_1", "triples": [["A", "birthPlace", obj]]}])
    return gt_dir, on_dir, rs_dir


@pytest.fixture(scope="module")
def webnlg_run(nltk_ready):
    if not (WEBNLG.is_dir() and (T2K / "expected.json").is_file()):
        pytest.skip("../shared/data/text2kgbench absent")
    res = t2kg_evaluate_run(WEBNLG / "ground_truth", WEBNLG / "ontologies",
                            VICUNA / "llm_responses")
    expected = json.loads((T2K / "expected.json").read_text())
    return res, expected["results"]["dbpedia_webnlg|Vicuna-13B"]


T2KG = SHARED_DATA / "text2kgbench" / "data" / "dbpedia_webnlg"


def test_text2kgbench_on_typed_gold_names_the_expected_triple_shape(tmp_path, capsys):
    onto = tmp_path / "onto.json"
    onto.write_text(json.dumps({"concepts": [{"label": "Company"}], "relations": [{"label": "located_in"}]}))
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triplets": [ACME_A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triplets": [ACME_A]}])
    code = ev.main(["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "text2kgbench",
                    "--no-embeddings", "--quiet", "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2
    # the gold items are typed HGR triplets, not Text2KGBench's {sub, rel, obj} triples
    assert "text2kgbench: triple dict needs keys sub/rel/obj" in err
    assert "Punkt" not in err


def test_empty_prediction_gives_oc_1_and_zero_everything_else():
    r = m([["Alan_Bean", "birthPlace", "Wheeler,_Texas"]], [])
    assert (r["precision"], r["recall"], r["f1"]) == (0, 0, 0)
    assert (r["onto_conf"], r["rel_halluc"], r["sub_halluc"], r["obj_halluc"]) == (1, 0, 0, 0)
    assert (r["llm_triples"], r["filtered_llm_triples"], r["gt_triples"]) == (0, 0, 1)


def test_relation_filter_ignores_valid_ontology_relations_not_in_gold(nltk_ready):
    gold = [["Alan_Bean", "birthPlace", "Wheeler,_Texas"]]
    pred = [["Alan Bean", "birthPlace", "Wheeler, Texas"], ["Alan Bean", "deathPlace", "Texas"]]
    r = m(gold, pred)
    # deathPlace is in the ontology but not among the gold relations -> dropped before P/R:
    # P = 1/1, R = 1/1 (without the filter P would be 1/2).
    assert (r["precision"], r["recall"], r["f1"]) == (1.0, 1.0, 1.0)
    assert (r["llm_triples"], r["filtered_llm_triples"]) == (2, 1)
    assert r["onto_conf"] == 1.0  # both relations are ontology labels: 2/2


def test_relation_filter_is_case_sensitive_and_gold_spaces_become_underscores(nltk_ready):
    gold = [["Alan_Bean", "birth place", "Texas"]]
    # "birth_place" passes the filter (gold space -> "_"), "birth place" and "BirthPlace" don't.
    ok = m(gold, [["Alan Bean", "birth_place", "Texas"]])
    assert (ok["filtered_llm_triples"], ok["precision"], ok["recall"]) == (1, 1.0, 1.0)
    for rel in ("birth place", "Birth_place"):
        r = m(gold, [["Alan Bean", rel, "Texas"]])
        assert (r["filtered_llm_triples"], r["precision"], r["recall"], r["f1"]) == (0, 0, 0, 0)


def test_ontology_conformance_exact_label_space_to_underscore_and_list_semantics(nltk_ready):
    gold = [["Alan_Bean", "birthPlace", "Texas"]]
    pred = [
        ["Alan Bean", "birthPlace", "Texas"],
        ["Alan Bean", "birthPlace", "Texas"],  # duplicate: counted again
        ["Alan Bean", "release_date", "Texas"],  # label "release date" -> conformant
        ["Alan Bean", "release date", "Texas"],  # the raw spaced label is not
        ["Alan Bean", "BirthPlace", "Texas"],  # case differs -> not conformant
    ]
    r = m(gold, pred)
    # OC = 3/5 = 0.6, RH = 1 - 0.6
    assert r["onto_conf"] == pytest.approx(0.6, abs=1e-15)
    assert r["rel_halluc"] == pytest.approx(0.4, abs=1e-15)


def test_pr_use_sets_of_normalised_keys(nltk_ready):
    gold = [["A", "birthPlace", "B"], ["A", "deathPlace", "C"]]
    pred = [["A", "birthPlace", "B"], ["A", "birthPlace", "B"], ["A", "birthPlace", "D"],
            ["A", "knows", "B"]]
    r = m(gold, pred, sent="A B C D.")
    # filtered list has 3 triples, but the key set is {abirthplaceb, abirthplaced}:
    # P = 1/2 (a list would give 2/3), R = 1/2, F1 = 2*.25/1 = 0.5
    assert (r["precision"], r["recall"], r["f1"]) == (0.5, 0.5, 0.5)
    assert r["filtered_llm_triples"] == 3
    assert r["onto_conf"] == 0.75  # 3 of 4 list entries use ontology relations


def test_normalisation_lowercase_drops_underscores_and_whitespace_keeps_punctuation(nltk_ready):
    gold = [
        ["AWH_Engineering_College", "birthPlace", "Mahé,_India"],
        ["Bleach:_Hell_Verse", "birthPlace", "\"Kuttikkattoor\""],
    ]
    pred = [
        ["awh Engineering  College", "birthPlace", "mahé, INDIA"],  # matches gold 1
        ["Bleach : Hell Verse", "birthPlace", "Kuttikkattoor"],  # quotes differ: no match
    ]
    r = m(gold, pred, sent="x")
    assert (r["precision"], r["recall"], r["f1"]) == (0.5, 0.5, 0.5)
    # no Unicode normalisation: "Mahe" does not equal "Mahé"
    r2 = m(gold[:1], [["AWH_Engineering_College", "birthPlace", "Mahe,_India"]], sent="x")
    assert r2["precision"] == 0


def test_f1_zero_when_nothing_matches_and_empty_gold_never_scores(nltk_ready):
    r = m([["A", "birthPlace", "B"]], [["A", "birthPlace", "C"]], sent="A C")
    assert (r["precision"], r["recall"], r["f1"], r["filtered_llm_triples"]) == (0, 0, 0, 1)
    r = m([], [["A", "birthPlace", "B"]], sent="A B")
    assert (r["precision"], r["recall"], r["f1"], r["gt_triples"]) == (0, 0, 0, 0)


def test_f1_harmonic_mean(nltk_ready):
    gold = [["A", "birthPlace", "B"], ["A", "birthPlace", "C"], ["A", "birthPlace", "E"]]
    pred = [["A", "birthPlace", "B"], ["A", "birthPlace", "D"]]
    r = m(gold, pred, sent="A B C D E")
    # P = 1/2, R = 1/3, F1 = 2*(1/6)/(5/6) = 0.4
    assert r["precision"] == 0.5 and r["recall"] == pytest.approx(1 / 3, abs=1e-15)
    assert r["f1"] == pytest.approx(0.4, abs=1e-15)


def test_dict_and_list_triples_are_equivalent(nltk_ready):
    gold_d = [{"sub": "Alan_Bean", "rel": "birthPlace", "obj": "Texas"}]
    pred_l = [["Alan Bean", "birthPlace", "Texas"]]
    a = m(gold_d, pred_l)
    b = m([["Alan_Bean", "birthPlace", "Texas"]], [{"sub": "Alan Bean", "rel": "birthPlace",
                                                    "obj": "Texas"}])
    assert a == b and a["f1"] == 1.0
    with pytest.raises(ValueError):
        m([["a", "b"]], [])
    with pytest.raises(ValueError):
        m([{"sub": "a", "rel": "b"}], [])


def test_hallucination_stemmed_substring_test(nltk_ready):
    # context = stems of "Alan Bean was born in Wheeler, Texas.Person Place", joined:
    # "alanbeanwaborninwheeler,texas.personplace"
    pred = [
        ["Alan Bean", "birthPlace", "Texas"],  # "alanbean" in ctx; "texa" in "texas.person"
        ["Bean", "birthPlace", "Wheelers"],  # "bean" in ctx; "wheeler" in ctx (stemmed)
        ["Buzz Aldrin", "birthPlace", "Houston"],  # both absent
        ["Person", "birthPlace", "an"],  # concept label; "an" matches inside "alan" (no boundaries)
    ]
    r = m([["Alan_Bean", "birthPlace", "Texas"]], pred)
    # SH = 1/4 (Buzz Aldrin), OH = 1/4 (Houston)
    assert (r["sub_halluc"], r["obj_halluc"]) == (0.25, 0.25)


def test_relation_labels_are_not_part_of_the_context(nltk_ready):
    r = m([["A", "birthPlace", "B"]], [["birthPlace", "birthPlace", "deathPlace"]], sent="x.")
    assert (r["sub_halluc"], r["obj_halluc"]) == (1.0, 1.0)


def test_concept_labels_fuse_with_last_sentence_token(nltk_ready):
    # "...New York City." + "Person Place" -> token "City.Person" whose stem is
    # "city.person", while the object "New York City" stems to "newyorkciti": hallucinated.
    pred = [["Alan Bean", "birthPlace", "New York City"]]
    fused = m([["Alan_Bean", "birthPlace", "X"]], pred, sent="Alan Bean was born in New York City.")
    assert fused["obj_halluc"] == 1.0
    # a trailing space separates "City" "." "Person" -> "citi" in the context: not hallucinated
    spaced = m([["Alan_Bean", "birthPlace", "X"]], pred,
               sent="Alan Bean was born in New York City. ")
    assert spaced["obj_halluc"] == 0.0


def test_01januari_deleted_from_entities_only(nltk_ready):
    # "01 January 1962" -> stems "01" "januari" "1962" -> "01januari1962" -> "1962": found;
    # "02 January 1962" -> "02januari1962": not in "thefilmwareleasin1962.personplace".
    # Subjects get the same treatment: "01 January 1962" as subject is found, "film" too.
    pred = [["01 January 1962", "birthPlace", "01 January 1962"],
            ["The film", "birthPlace", "02 January 1962"]]
    r = m([["F", "birthPlace", "X"]], pred, sent="The film was released in 1962.")
    assert (r["sub_halluc"], r["obj_halluc"]) == (0.0, 0.5)


def test_quotes_and_empty_entities(nltk_ready):
    # word_tokenize turns '"' into `` / '' so a quoted entity never matches an unquoted
    # sentence word; an entity that processes to "" is never hallucinated.
    pred = [["\"Kuttikkattoor\"", "birthPlace", ""], ["Kuttikkattoor", "birthPlace", "  _ "]]
    r = m([["F", "birthPlace", "X"]], pred, sent="It is in Kuttikkattoor, Kerala.")
    assert (r["sub_halluc"], r["obj_halluc"]) == (0.5, 0.0)


def test_load_ontology_and_raw_dict_agree(tmp_path, nltk_ready):
    p = tmp_path / "9_x_ontology.json"
    p.write_text(json.dumps({"title": "X", "id": "ont_9_x", **ONTO}))
    onto = t2kg_load_ontology(p)
    assert onto["concept_labels"] == ["Person", "Place"]
    assert onto["relation_labels"] == ["birthPlace", "deathPlace", "release date"]
    assert onto["id"] == "ont_9_x"
    pred = [["Alan Bean", "release_date", "Texas"], ["Bob", "knows", "Place"]]
    assert m([["a", "b", "c"]], pred, onto=onto) == m([["a", "b", "c"]], pred, onto=ONTO)


def test_evaluate_ontology_averages(mini_ontology, nltk_ready):
    gt, resp, onto = mini_ontology
    res = t2kg_evaluate_ontology(gt, resp, onto)
    # s1: P=R=F1=1, OC=1, SH=OH=0; s2 (empty): P=R=F1=0, OC=1; s3 missing: adds 0.
    avg = res["averages"]["all_test_cases"]
    assert avg["precision"] == avg["recall"] == avg["f1"] == pytest.approx(1 / 3)
    assert avg["onto_conf"] == pytest.approx(2 / 3)  # (1 + 1 + 0) / 3
    assert avg["rel_halluc"] == avg["sub_halluc"] == avg["obj_halluc"] == 0
    assert res["averages_2dp"]["all_test_cases"]["onto_conf"] == "0.67"
    assert res["averages_2dp"]["all_test_cases"]["precision"] == "0.33"
    assert "selected_test_cases" not in res["averages"]
    assert [r["id"] for r in res["rows"]] == ["s1", "s2"]
    assert res["counts"] == {"gt_sentences": 3, "evaluated_sentences": 2,
                             "missing_responses": 1, "ignored_response_ids": 1,
                             "selected_ids": None}


def test_evaluate_ontology_selected(mini_ontology, tmp_path, nltk_ready):
    gt, resp, onto = mini_ontology
    sel = tmp_path / "selected_ont_1_x.txt"
    sel.write_text("s1\ns3\n")
    res = t2kg_evaluate_ontology(gt, resp, onto, selected_ids=sel)
    s = res["averages"]["selected_test_cases"]
    # sum over s1 (F1 1, OC 1) and s3 (no response: 0), divided by 2 listed ids
    assert (s["f1"], s["onto_conf"], s["rel_halluc"]) == (0.5, 0.5, 0.0)
    assert res["averages_2dp"]["selected_test_cases"]["f1"] == "0.50"
    same = t2kg_evaluate_ontology(gt, resp, onto, selected_ids=["s1", "s3"])
    assert same["averages"] == res["averages"]
    with pytest.raises(ValueError):
        t2kg_evaluate_ontology(gt, resp, onto, selected_ids=[])


def test_evaluate_run_globals_and_onto_list(tmp_path, nltk_ready):
    dirs = _mini_run(tmp_path, {"1_a": "1_a_M_responses.jsonl",
                                "11_a": "ont_11_a_llm_responses.jsonl"})
    res = t2kg_evaluate_run(*dirs)
    assert list(res["per_ontology"]) == ["1_a", "11_a"]  # numeric order, 1_a != 11_a
    assert res["onto_list"] == ["1_a", "11_a"]  # not the webnlg set: each once
    # 1_a: F1 1, OH 0; 11_a: F1 0, OH 1 ("z" not in "ab.personplace")
    assert res["global_unique"]["f1"] == res["global_as_script"]["f1"] == 0.5
    assert res["global_unique"]["obj_halluc"] == 0.5
    dup = t2kg_evaluate_run(*dirs, onto_list=["1_a", "1_a", "11_a"])
    assert dup["global_as_script"]["f1"] == pytest.approx(2 / 3)  # (1 + 1 + 0) / 3
    assert dup["global_as_script_2dp"]["f1"] == "0.67"
    assert dup["global_unique"]["f1"] == 0.5
    with pytest.raises(KeyError):
        t2kg_evaluate_run(*dirs, onto_list=["1_a", "2_b"])


def test_evaluate_run_ambiguous_or_missing_response_files(tmp_path, nltk_ready):
    gt_dir, on_dir, rs_dir = _mini_run(tmp_path, {"1_a": "1_a_M.jsonl", "11_a": "11_a_M.jsonl"})
    (rs_dir / "ont_1_a_other.jsonl").write_text("")
    with pytest.raises(ValueError):
        t2kg_evaluate_run(gt_dir, on_dir, rs_dir)
    (rs_dir / "ont_1_a_other.jsonl").unlink()
    (rs_dir / "11_a_M.jsonl").unlink()
    with pytest.raises(FileNotFoundError):
        t2kg_evaluate_run(gt_dir, on_dir, rs_dir)


def test_webnlg_onto_list_constant():
    assert len(T2KG_DBPEDIA_WEBNLG_ONTO_LIST) == 20
    assert T2KG_DBPEDIA_WEBNLG_ONTO_LIST.count("1_university") == 2
    assert len(set(T2KG_DBPEDIA_WEBNLG_ONTO_LIST)) == 19


def test_every_per_sentence_value_matches_shipped_eval_metrics(webnlg_run):
    """The shipped per-sentence files hold raw (unrounded) floats/ints: compared to 1e-12
    (all are in fact bit-identical). Counts are the lengths of the shipped lists."""
    res, _ = webnlg_run
    n = 0
    for key, ont in res["per_ontology"].items():
        path = VICUNA / "eval_metrics" / f"ont_{key}_eval_results.jsonl"
        ref = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["id"] for r in ont["rows"]] == [r["id"] for r in ref]
        for row, exp in zip(ont["rows"], ref):
            for k in T2KG_METRIC_KEYS:
                assert row[k] == pytest.approx(exp[k], abs=1e-12), (row["id"], k)
            for k in ("llm_triples", "filtered_llm_triples", "gt_triples"):
                assert row[k] == len(exp[k]), (row["id"], k)
            n += 1
    assert n == 2014


def test_per_ontology_averages_match_expected(webnlg_run):
    res, exp = webnlg_run
    assert set(res["per_ontology"]) == set(exp["per_ontology"])
    shipped = {}
    for line in (VICUNA / "eval_metrics" / "avg_eval_results.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["type"] == "all_test_cases":
            shipped[row["onto"]] = {k: row["avg_" + k] for k in T2KG_METRIC_KEYS}
    for key, e in exp["per_ontology"].items():
        got = res["per_ontology"][key]
        for k in T2KG_METRIC_KEYS:
            assert got["averages"]["all_test_cases"][k] == pytest.approx(
                e["all_test_cases"]["values"][k], abs=1e-9), (key, k)
        assert got["averages_2dp"]["all_test_cases"] == e["all_test_cases"]["values_2dp"]
        assert got["averages_2dp"]["all_test_cases"] == shipped[key]
        c = e["counts"]
        rows = got["rows"]
        assert got["counts"]["gt_sentences"] == c["gt_sentences"]
        assert got["counts"]["evaluated_sentences"] == c["evaluated_sentences"]
        assert sum(r["gt_triples"] for r in rows) == c["gt_triples"]
        assert sum(r["llm_triples"] for r in rows) == c["pred_triples"]
        assert sum(r["filtered_llm_triples"] for r in rows) == c["filtered_pred_triples"]
        # expected.json omits zero counts
        assert sum(r["llm_triples"] == 0 for r in rows) == c.get("empty_predictions", 0)
        assert sum(r["llm_triples"] > 0 and r["filtered_llm_triples"] == 0 for r in rows) \
            == c.get("nonempty_pred_all_filtered_out", 0)
    rows = [r for ont in res["per_ontology"].values() for r in ont["rows"]]
    # README: Vicuna webnlg keeps 4423 of 11753 predicted triples; 6259 gold triples
    total = exp["counts_total"]
    assert sum(r["filtered_llm_triples"] for r in rows) == total["filtered_pred_triples"] == 4423
    assert sum(r["llm_triples"] for r in rows) == total["pred_triples"] == 11753
    assert sum(r["gt_triples"] for r in rows) == total["gt_triples"] == 6259


def test_global_rows_match_expected(webnlg_run):
    res, exp = webnlg_run
    assert res["onto_list"] == list(T2KG_DBPEDIA_WEBNLG_ONTO_LIST)  # default for this set
    for mine, theirs in (("global_as_script", "overall_as_script"),
                         ("global_unique", "overall_19_unique")):
        for k in T2KG_METRIC_KEYS:
            assert res[mine][k] == pytest.approx(exp[theirs]["values"][k], abs=1e-9), (mine, k)
        assert res[mine + "_2dp"] == exp[theirs]["values_2dp"]
    # README bug 1: counting 1_university once moves P .34->.35, R .27->.28, OH .28->.29
    assert (res["global_as_script_2dp"]["precision"], res["global_unique_2dp"]["precision"]) \
        == ("0.34", "0.35")
    assert (res["global_as_script_2dp"]["obj_halluc"], res["global_unique_2dp"]["obj_halluc"]) \
        == ("0.28", "0.29")


def test_concept_fusion_matters_on_real_data(webnlg_run):
    """README bug 3: inserting a space between sentence and concept labels would change SH
    in 2 and OH in 33 Vicuna webnlg sentences; our fused context must reproduce that."""
    res, _ = webnlg_run
    d_sh = d_oh = 0
    for key in res["per_ontology"]:
        onto = t2kg_load_ontology(WEBNLG / "ontologies" / f"{key}_ontology.json")
        gt_path = WEBNLG / "ground_truth" / f"ont_{key}_ground_truth.jsonl"
        gold = {g["id"]: g for g in map(json.loads, gt_path.read_text().splitlines())}
        resp_path = next((VICUNA / "llm_responses").glob(f"{key}_*.jsonl"))
        pred = {r["id"]: r["triples"] for r in map(json.loads, resp_path.read_text().splitlines())}
        for row in res["per_ontology"][key]["rows"]:
            g = gold[row["id"]]
            spaced = t2kg_sentence_metrics(g["triples"], pred[g["id"]], g["sent"] + " ", onto)
            d_sh += spaced["sub_halluc"] != row["sub_halluc"]
            d_oh += spaced["obj_halluc"] != row["obj_halluc"]
    assert (d_sh, d_oh) == (2, 33)


def test_text2kgbench_one_ontology(tmp_path):
    _need(T2KG, "shared Text2KGBench data")
    _need(NLTK_DATA, "shared NLTK data (Punkt tables)")
    pred = T2KG / "baselines" / "Vicuna-13B" / "llm_responses" / "1_university_Vicuna13B_responses.jsonl"
    gold = T2KG / "ground_truth" / "ont_1_university_ground_truth.jsonl"
    onto = T2KG / "ontologies" / "1_university_ontology.json"
    out = tmp_path / "r.json"
    proc = run_cli("--pred", pred, "--gold", gold, "--ontology", onto, "--metrics", "all",
                   "--no-embeddings", "--quiet", "--report", out, env={"NLTK_DATA": str(NLTK_DATA)})
    assert proc.returncode == 0, proc.stderr
    report = load_report(out)
    s = report["summary"]
    assert s["schema_profile"] == "triples"
    assert {"strict", "per_relation", "webnlg2020", "text2kgbench"} <= set(report)

    expected = json.loads((SHARED_DATA / "text2kgbench" / "expected.json").read_text())
    uni = expected["results"]["dbpedia_webnlg|Vicuna-13B"]["per_ontology"]["1_university"]
    assert_close(report["text2kgbench"]["averages"], uni["all_test_cases"]["values"])

    # hgr totals, counted independently from the files
    gold_rows = [json.loads(ln) for ln in gold.read_text(encoding="utf-8").splitlines() if ln.strip()]
    pred_rows = [json.loads(ln) for ln in pred.read_text(encoding="utf-8").splitlines() if ln.strip()]
    gold_ids = {r["id"] for r in gold_rows}
    assert len({r["id"] for r in pred_rows}) == len(pred_rows)  # no repeated ids in this file
    n_gold = sum(1 for r in gold_rows for t in r["triples"]
                 if all(isinstance(t[k], str) and t[k].strip() for k in ("sub", "rel", "obj")))
    n_pred = sum(len(r["triples"]) for r in pred_rows if r["id"] in gold_ids)
    n_empty = sum(1 for r in pred_rows if r["id"] in gold_ids and not r["triples"])
    t = s["totals"]
    assert s["n_entries"] == len(gold_rows) == uni["counts"]["gt_sentences"]
    assert t["gold_triplets"] == n_gold == uni["counts"]["gt_triples"]
    assert t["pred_triplet_items"] == n_pred == uni["counts"]["pred_triples"]
    assert t["empty_predictions"] == n_empty == uni["counts"]["empty_predictions"]
    assert t["missing_predictions"] == 0
    assert s["relation_vocabulary"]["size"] == len(json.loads(onto.read_text())["relations"])


def test_directory_mode_names_every_file_it_does_not_use(tmp_path):
    from helpers import cli
    gt_dir, on_dir, rs_dir = _mini_run(tmp_path, {"1_a": "1_a_M.jsonl", "11_a": "11_a_M.jsonl"})
    # ontology 3_c: its ground truth is misnamed ("groundtruth"), so its ontology and response
    # files pair with nothing; a stray notes file sits next to the responses
    _write_jsonl(gt_dir / "ont_3_c_groundtruth.jsonl", [
        {"id": "3_c_1", "sent": "A B.", "triples": [{"sub": "A", "rel": "birthPlace", "obj": "B"}]}])
    (on_dir / "3_c_ontology.json").write_text(json.dumps(ONTO))
    _write_jsonl(rs_dir / "3_c_M.jsonl", [{"id": "3_c_1", "triples": [["A", "birthPlace", "B"]]}])
    (rs_dir / "notes.txt").write_text("x")
    rc, out, err, report = cli(tmp_path, "--pred", str(rs_dir), "--gold", str(gt_dir), "--ontology", str(on_dir),
                               "--metrics", "strict")
    assert rc == 0, err
    assert f"  unused_files: --gold {gt_dir}: 1 file(s)" in out  # the printed notices block
    assert report["summary"]["n_ontologies"] == 2 and report["summary"]["n_entries"] == 2  # 1_a and 11_a only
    unused = [n["message"] for n in report["summary"]["notices"] if n["kind"] == "unused_files"]
    hint = ("not scored: an ontology <k>_<name> is ont_<k>_<name>_ground_truth.jsonl in --gold, <k>_<name>_ontology.json "
            "in --ontology and one <k>_<name>_*.jsonl or ont_<k>_<name>_*.jsonl in --pred")
    assert unused == [
        f"--gold {gt_dir}: 1 file(s) not used by any ontology (ont_3_c_groundtruth.jsonl); " + hint,
        f"--ontology {on_dir}: 1 file(s) not used by any ontology (3_c_ontology.json); " + hint,
        f"--pred {rs_dir}: 2 file(s) not used by any ontology (3_c_M.jsonl, notes.txt); " + hint,
    ]


def test_unused_directory_files_caps_the_names_and_lists_a_shared_folder_once(tmp_path):
    for i in range(12):
        (tmp_path / f"f{i:02d}.jsonl").write_text("")
    used = tmp_path / "f00.jsonl"
    notices = ev._unused_directory_files([("1_a", used, used, used)], (("--gold", tmp_path), ("--pred", tmp_path)))
    # 12 files, 1 used: 11 unused, the first 10 named
    assert [n["kind"] for n in notices] == ["unused_files"]
    assert notices[0]["message"].startswith(f"--gold {tmp_path}: 11 file(s) not used by any ontology (f01.jsonl, ")
    assert "f10.jsonl ... (11 files)); " in notices[0]["message"] and "f11" not in notices[0]["message"]


# --- directory mode: files scored in worker processes ---


class _FailsOnOntology2(ev.MetricFamily):
    """A family that cannot run on ontology 2_b's entries (as with missing NLTK data)."""

    name = key = "fails-on-2-b"

    def entry_stats(self, entry, score, ctx):
        if ctx.group == "2_b":
            raise ev.FamilyUnavailable(self.name, "ontology 2_b needs data that is missing")
        return {"entries": 1}

    def finish(self, record):
        return {"entries": record.get("entries", 0)}

    def format(self, section, report):
        return f"entries {section['entries']}"


def _directory_run(tmp_path, name, *args):
    """(report bytes, stderr) of an in-process CLI run (not --quiet: its notes are compared;
    the report's folder is written FOLDER)."""
    folder = tmp_path / name
    folder.mkdir()
    rc, _, err, _ = cli(folder, *args)
    assert rc == 0, err
    return (folder / "report.json").read_bytes(), err.replace(str(folder), "FOLDER")


def test_directory_files_scored_in_workers_give_the_same_report_and_notes(tmp_path, nltk_ready):
    """The shared Vicuna-13B run (19 files, 20-170 KB) is scored whole files per worker with
    --workers 2: the same report bytes and the same notes on stderr, in file order, as the
    files one by one in this process."""
    _need(T2KG, "shared Text2KGBench data")
    args = ["--pred", str(VICUNA / "llm_responses"), "--gold", str(WEBNLG / "ground_truth"),
            "--ontology", str(WEBNLG / "ontologies"), "--metrics", "text2kgbench"]
    config = ev.RunConfig.from_args(ev.build_parser().parse_args([*args, "--workers", "2"]))
    pairs = ev._pair_directory_files(config.pred, config.gold, config.vocabulary_path)
    assert ev._directory_workers(config, ev.Similarity(), pairs) == 2      # the parallel path is the one run
    assert ev._directory_workers(dataclasses.replace(config, workers=1), ev.Similarity(), pairs) == 0
    one, one_err = _directory_run(tmp_path, "one", *args, "--workers", "1")
    two, two_err = _directory_run(tmp_path, "two", *args, "--workers", "2")
    assert two == one and two_err == one_err
    assert one_err.index("1_university: ") < one_err.index("2_musicalwork: ") < one_err.index("19_film: ")
    assert "1_university_Vicuna13B_responses.jsonl: 5 line(s) whose parsed prediction" in one_err


def test_directory_family_skipped_by_one_file_is_left_out_of_the_files_after_it(tmp_path, monkeypatch, nltk_ready):
    """Under --metrics all, a family that ontology 2_b cannot run is left out of the whole run
    and 3_c is scored without it: with the files in workers (3_c was scored with it there, so
    it is scored again here) the report and the notes are those of the files one by one."""
    monkeypatch.setitem(ev.FAMILIES, _FailsOnOntology2.name, _FailsOnOntology2)
    monkeypatch.setattr(ev, "DIRECTORY_PARALLEL_MIN_BYTES", 0)
    dirs = {name: tmp_path / name for name in ("gt", "onto", "resp")}
    for d in dirs.values():
        d.mkdir()
    for key in ("1_a", "2_b", "3_c"):
        _write_jsonl(dirs["gt"] / f"ont_{key}_ground_truth.jsonl", [
            {"id": f"{key}_{i}", "sent": "A B.", "triples": [{"sub": "A", "rel": "birthPlace", "obj": "B"}]}
            for i in range(3)])
        (dirs["onto"] / f"{key}_ontology.json").write_text(json.dumps(ONTO))
        _write_jsonl(dirs["resp"] / f"{key}_M.jsonl", [{"id": f"{key}_{i}", "triples": [["A", "birthPlace", "B"]]}
                                                        for i in range(3)])
    args = ["--pred", str(dirs["resp"]), "--gold", str(dirs["gt"]), "--ontology", str(dirs["onto"]),
            "--metrics", "all"]
    config = ev.RunConfig.from_args(ev.build_parser().parse_args([*args, "--workers", "2"]))
    assert ev._directory_workers(config, ev.Similarity(), ev._pair_directory_files(
        config.pred, config.gold, config.vocabulary_path)) == 2
    one, one_err = _directory_run(tmp_path, "one", *args, "--workers", "1")
    two, two_err = _directory_run(tmp_path, "two", *args, "--workers", "2")
    assert two == one and two_err == one_err
    report = json.loads(one)
    assert "fails-on-2-b" not in report and "fails-on-2-b" not in report["summary"]["config"]["metric_families"]
    assert [n["message"] for n in report["summary"]["notices"] if n["kind"] == "family_skipped"] == [
        "--metrics all: fails-on-2-b skipped (ontology 2_b needs data that is missing)"]
    assert one_err.count("fails-on-2-b skipped") == 1


# --- directory mode: the per-ontology tables come from the slice renderer ---


def test_directory_per_ontology_tables_show_the_report_numbers(tmp_path, nltk_ready):
    """The shared Vicuna-13B run (19 ontologies): the per-ontology tables of the text summary
    (hgr, text2kgbench), Markdown, LaTeX and CSV are the slice renderer's, one row per
    ontology with its entry count, and every number shown is the report's per-ontology
    number (text: 4 decimals, Markdown: 3, CSV: the float itself); an ontology's numbers
    are those of a run on its files alone (12_monument, 19 entries)."""
    import csv
    import io

    _need(T2KG, "shared Text2KGBench data")
    args = ["--gold", str(WEBNLG / "ground_truth"), "--metrics", "hgr,text2kgbench", "--quiet"]
    rc, out, err, report = cli(tmp_path, "--pred", str(VICUNA / "llm_responses"),
                               "--ontology", str(WEBNLG / "ontologies"), *args)
    assert rc == 0, err
    per, t2kg = report["per_ontology"], report["text2kgbench"]["per_ontology"]
    assert list(per) == list(t2kg) == list(dict.fromkeys(T2KG_DBPEDIA_WEBNLG_ONTO_LIST))  # each once, in order
    assert sum(o["summary"]["n_entries"] for o in per.values()) == report["summary"]["n_entries"] == 2014
    hgr_text = out[out.index("per ontology (19 ontologies): hgr composite"):out.index("text2kgbench (run_eval")]
    t2kg_text = out[out.index("text2kgbench (run_eval"):out.index("signature:")]
    assert hgr_text.splitlines()[1].split() == ["ontology", "n", "composite", "entity", "F1", "triplet", "F1"]
    assert t2kg_text.splitlines()[1].split() == ["ontology", "n", *T2KG_METRIC_KEYS]
    hgr_rows = {line.split()[0]: line.split()[1:] for line in hgr_text.splitlines()[2:] if line.strip()}
    t2kg_rows = {line.split()[0]: line.split()[1:] for line in t2kg_text.splitlines()[2:] if line.strip()}
    md = ev.format_markdown(report)
    for key, own in per.items():
        s = own["summary"]
        shown = [s["macro"]["composite"], s["micro"]["entity_f1"], s["micro"]["triplet_f1"]]
        assert hgr_rows[key] == [str(s["n_entries"]), *(f"{v:.4f}" for v in shown)]
        assert t2kg_rows[key] == [str(s["n_entries"]), *(f"{t2kg[key]['averages'][k]:.4f}" for k in T2KG_METRIC_KEYS)]
        label = key.replace("_", "\\_")
        assert f"| {label} (n={s['n_entries']}) | " + " | ".join(f"{v:.3f}" for v in shown) + " |" in md
    for label, part in (("global (as published)", "global_as_script"), ("global (each once)", "global_unique")):
        row = next(line for line in t2kg_text.splitlines() if line.startswith(f"  {label} "))
        assert row.split()[3:] == [f"{report['text2kgbench'][part][k]:.4f}" for k in T2KG_METRIC_KEYS]
    assert r"\caption{per ontology: hgr}" in ev.format_latex(report)
    rows = list(csv.DictReader(io.StringIO(ev.format_csv(report))))
    for table, path, value in (("per ontology: hgr", "hgr.micro.triplet_f1",
                                lambda k: per[k]["summary"]["micro"]["triplet_f1"]),
                               ("per ontology: text2kgbench", "text2kgbench.averages.f1",
                                lambda k: t2kg[k]["averages"]["f1"])):
        got = {r["system"]: float(r["estimate"]) for r in rows if r["table"] == table and r["metric"] == path}
        assert got == {f"{k} (n={o['summary']['n_entries']})": value(k) for k, o in per.items()}
    # 12_monument alone (its three files, single-file mode): the same numbers as its row
    rc, _, err, alone = cli(tmp_path, "--pred", str(VICUNA / "llm_responses" / "12_monument_Vicuna13B_responses.jsonl"),
                            "--gold", str(WEBNLG / "ground_truth" / "ont_12_monument_ground_truth.jsonl"),
                            "--ontology", str(WEBNLG / "ontologies" / "12_monument_ontology.json"),
                            "--metrics", "hgr,text2kgbench", "--quiet")
    assert rc == 0, err
    mine = ev.ontology_slices(report, [*ev.SLICE_COLUMNS, *ev.T2KG_ONTOLOGY_COLUMNS])[11]
    assert mine["label"] == "12_monument" and mine["n_entries"] == alone["summary"]["n_entries"] == 19
    assert {p: v["estimate"] for p, v in mine["metrics"][""].items()} == \
        {p: ev.metric_value(alone, p) for p, _ in (*ev.SLICE_COLUMNS, *ev.T2KG_ONTOLOGY_COLUMNS)}
