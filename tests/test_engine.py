"""The engine section: metric-family protocol and registry, exact merging of per-entry
statistics, one report builder for single-file and directory mode, the run configuration
(summary.config), --limit for every family, the logger.
"""

from __future__ import annotations

import csv
import math
import io
import json
import os
import random
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import (
    NLTK_DATA,
    SHARED,
    WORKED_GOLD,
    WORKED_PRED,
    WORKED_PROMPT,
    A,
    T,
    entry,
    run,
    write_jsonl,
)

import evaluate as ev  # noqa: E402

PARITY = SHARED / "data" / "parity-sample" / "combined.jsonl"


if NLTK_DATA.is_dir():  # before nltk is first imported
    os.environ.setdefault("NLTK_DATA", str(NLTK_DATA))


needs_nltk = pytest.mark.skipif(ev.nltk_missing() is not None, reason=f"NLTK: {ev.nltk_missing()}")


ONTOLOGY = {"id": "o", "title": "t", "concepts": [{"label": "City"}, {"label": "Country"}],
            "relations": [{"label": "capital"}, {"label": "country"}, {"label": "leader"}]}


SENTENCES = [  # (id, sentence, gold [s, r, o], predicted)
    ("s1", "Paris is the capital of France.", [["France", "capital", "Paris"]], [["France", "capital", "Paris"]]),
    ("s2", "Rome is in Italy.", [["Rome", "country", "Italy"]], [["Rome", "country", "Italy"], ["Rome", "mayor", "X"]]),
    ("s3", "Berlin is led by Kai.", [["Berlin", "leader", "Kai"]], []),
    ("s4", "Oslo is in Norway.", [["Oslo", "country", "Norway"]], [["Norway", "country", "Oslo"]]),
    ("s5", "Bern is the capital.", [["Switzerland", "capital", "Bern"]], [["Bern", "capital", "Bern"]]),
]


def t2kg_files(folder: Path, key: str = "1_city", sentences=SENTENCES) -> tuple[Path, Path, Path]:
    """A Text2KGBench-style ontology: (gold, predictions, ontology) files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    gold = write_jsonl(folder / f"ont_{key}_ground_truth.jsonl", [
        {"id": f"{key}_{sid}", "sent": sent, "triples": [dict(zip(("sub", "rel", "obj"), t)) for t in g]}
        for sid, sent, g, _ in sentences])
    pred = write_jsonl(folder / f"{key}_responses.jsonl",
                       [{"id": f"{key}_{sid}", "triples": p} for sid, _, _, p in sentences])
    onto = folder / f"{key}_ontology.json"
    onto.write_text(json.dumps(ONTOLOGY), encoding="utf-8")
    return gold, pred, onto


def t2kg_directory(root: Path) -> tuple[Path, Path, Path]:
    """A two-ontology run laid out as --pred DIR --gold DIR --ontology DIR."""
    dirs = [root / name for name in ("pred", "gold", "onto")]
    for d in dirs:
        d.mkdir(parents=True)
    for key, rows in (("1_city", SENTENCES[:3]), ("2_place", SENTENCES[2:])):
        gold, pred, onto = t2kg_files(root / "tmp", key, rows)
        for path, target in ((pred, dirs[0]), (gold, dirs[1]), (onto, dirs[2])):
            path.rename(target / path.name)
    return dirs[0], dirs[1], dirs[2]


def run_cli(tmp_path: Path, *args: str, name: str = "r.json") -> dict:
    report = tmp_path / name
    assert ev.main([*args, "--no-embeddings", "--quiet", "--report", str(report)]) == 0
    return json.loads(report.read_text(encoding="utf-8"))


class PredictedItems(ev.MetricFamily):
    """Mean number of predicted items per entry (exact), and how many entries had none:
    the example of a family added from outside (the class and its registry entry only)."""

    name = key = "predicted-items"
    tables = (("predicted items per entry", (("predicted-items.mean_items", "mean items"),
                                             ("predicted-items.empty", "empty"))),)
    lower_is_better = frozenset({"predicted-items.empty"})
    signature_name = "items"

    def entry_stats(self, entry, score, ctx):
        return {"entries": 1, "items": float(score.n_items), "empty": int(score.n_items == 0)}

    def finish(self, record):
        n = record.get("entries", 0)
        return {"mean_items": ev.exact_mean(record["items"], n) if n else None, "empty": record.get("empty", 0)}

    def format(self, section, report):
        return f"predicted items: mean {section['mean_items']:.3f}, {section['empty']} empty"

    def headline_columns(self, record):
        return {k: record.get(k, 0) for k in ("entries", "items", "empty")}

    def headlines(self, sums):
        return self.pick_headlines({"mean_items": ev.headline_ratio(sums, "items", "entries", float("nan")),
                                    "empty": ev.headline_column(sums, "empty")})


@pytest.fixture
def extra_family():
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(ev.FAMILIES, PredictedItems.name, PredictedItems)
        yield PredictedItems
    assert PredictedItems.name not in ev.FAMILIES  # the registry is as it was


def _datasets(tmp_path):
    """(entries, context, family names) that exercise every family: the parity sample (typed
    triplets) for all but text2kgbench, and a Text2KGBench-style ontology for all."""
    gold, pred, onto = t2kg_files(tmp_path)
    t2kg = ev.load_inputs(pred, gold).entries
    ctx = ev.ScoringContext(ev.Similarity(), "triples", None, 0.5, ev.t2kg_load_ontology(onto))
    out = [(t2kg, ctx, list(ev.FAMILIES))]
    if PARITY.is_file():
        entries = ev.load_inputs(PARITY, None).entries[:60]
        out.append((entries, ev.ScoringContext(ev.Similarity(), "hgr"),
                    [n for n in ev.FAMILIES if n != "text2kgbench"]))
    return out


def _section_bytes(families, records):
    return json.dumps({f.name: f.finish(records[f.name]) for f in families}, sort_keys=True)


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


def test_metric_families_are_separate_sections_and_hgr_is_unchanged():
    gold = [T("Alpha", "part_of", "Beta")]
    pred = [T("Alpha", "part_of", "Beta"), T("Beta", "part_of", "Alpha")]
    full = run([entry(gold, pred)])
    only = run([entry(gold, pred)], families=("hgr",))
    assert list(full) == ["summary", "strict", "per_relation", "per_entry"]
    assert list(only) == ["summary", "per_entry"]
    assert full["summary"] == only["summary"]
    assert [e["metrics"] for e in full["per_entry"]] == [e["metrics"] for e in only["per_entry"]]


@needs_nltk
def test_a_registered_family_appears_in_summary_report_and_directory_mode(tmp_path, capsys, extra_family):
    gold, pred, onto = t2kg_files(tmp_path / "one")
    report = run_cli(tmp_path, "--pred", str(pred), "--gold", str(gold), "--metrics", "strict,predicted-items")
    # items per entry: 1, 2, 0, 1, 1 -> mean 5/5 = 1.0; one empty
    assert report["predicted-items"] == {"mean_items": 1.0, "empty": 1}
    assert [row["stats"]["predicted-items"]["items"] for row in report["per_entry"]] == [1.0, 2.0, 0.0, 1.0, 1.0]
    assert "predicted items: mean 1.000, 1 empty" in capsys.readouterr().out
    pred_dir, gold_dir, onto_dir = t2kg_directory(tmp_path / "run")
    report = run_cli(tmp_path, "--pred", str(pred_dir), "--gold", str(gold_dir), "--ontology", str(onto_dir),
                     "--metrics", "predicted-items", name="dir.json")
    # 1_city: s1-s3 (1, 2, 0 items); 2_place: s3-s5 (0, 1, 1): mean over all 6 entries = 5/6
    assert report["predicted-items"] == {"mean_items": 5 / 6, "empty": 2}
    assert report["per_ontology"]["1_city"]["predicted-items"] == {"mean_items": 1.0, "empty": 1}
    assert "predicted items: mean 0.833, 2 empty" in capsys.readouterr().out


def _stdout(capsys, tmp_path: Path, *args: str, name: str) -> tuple[str, dict]:
    """(what a run with ``args`` printed, its report)."""
    capsys.readouterr()
    report = run_cli(tmp_path, *args, name=name)
    return capsys.readouterr().out, report


def _csv_rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    return {(row["system"], row["metric"]): row for row in csv.DictReader(io.StringIO(text))}


@needs_nltk
def test_a_family_with_headlines_appears_in_every_table_format_comparison_and_directory_mode(
        tmp_path, capsys, extra_family):
    gold, pred, _ = t2kg_files(tmp_path / "one")
    other = write_jsonl(tmp_path / "one" / "other.jsonl", [  # s3 answered (2 items), s5 empty
        {"id": f"1_city_{sid}", "triples": p if sid not in ("s3", "s5") else ([["Berlin", "leader", "Kai"]] * 2
                                                                              if sid == "s3" else [])}
        for sid, _, _, p in SENTENCES])
    one = ("--pred", str(pred), "--gold", str(gold), "--metrics", "predicted-items")
    out, report = _stdout(capsys, tmp_path, *one, "--format", "markdown", name="md.json")
    assert report["summary"]["signature"].startswith("fam:hgr+items|")  # its signature_name
    assert ("**predicted items per entry**\n\n| system | mean items | empty |\n|---|---:|---:|\n"
            "| 1\\_city\\_responses | 1.000 | 1.000 |\n") in out
    out, _ = _stdout(capsys, tmp_path, *one, "--format", "csv", name="csv.json")
    rows = _csv_rows(out)
    assert rows["1_city_responses", "predicted-items.mean_items"]["estimate"] == "1.0"
    assert rows["1_city_responses", "predicted-items.mean_items"]["table"] == "predicted items per entry"
    assert rows["1_city_responses", "predicted-items.empty"]["lower_is_better"] == "true"
    # two systems: items 1, 2, 0, 1, 1 (mean 1.0, 1 empty) against 1, 2, 2, 1, 0 (mean 1.2, 1 empty)
    two = ("--pred", str(pred), "--pred", str(other), "--gold", str(gold), "--metrics", "predicted-items",
           "--bootstrap", "100", "--trials", "100", "--seed", "1")
    out, report = _stdout(capsys, tmp_path, *two, "--format", "csv", name="cmp.json")
    stats = report["comparison"]["metrics"]["other"]["predicted-items.mean_items"]
    assert stats["estimate"] == 1.2 and stats["delta"] == pytest.approx(0.2)
    assert stats["ci"][0] <= 1.2 <= stats["ci"][1] and 0.0 <= stats["p_value"] <= 1.0
    rows = _csv_rows(out)
    assert rows["other", "predicted-items.mean_items"]["best"] == "true"
    assert rows["1_city_responses", "predicted-items.mean_items"]["best"] == "false"
    assert [rows[n, "predicted-items.empty"]["best"] for n in ("1_city_responses", "other")] == ["true", "true"]
    assert float(rows["other", "predicted-items.mean_items"]["delta"]) == pytest.approx(0.2)
    out, _ = _stdout(capsys, tmp_path, *two, "--format", "markdown", name="cmp-md.json")
    table = out[out.index("**predicted items per entry**"):].split("\n\n")[1].splitlines()
    assert table[0] == "| system | mean items | empty |"  # bold: the best (empty: lower is better, a tie)
    assert table[2].startswith("| 1\\_city\\_responses | 1.000 [") and table[2].endswith("| **1.000 [0.000, 3.000]** |")
    assert table[3].startswith("| other | **1.200 [") and table[3].endswith("| **1.000 [0.000, 3.000]** |")
    assert ("ECE and Brier score, the error shares (errors: all but gold found), predicted-items.empty, higher for "
            "every other metric.") in out  # the legend
    pred_dir, gold_dir, onto_dir = t2kg_directory(tmp_path / "run")
    out, report = _stdout(capsys, tmp_path, "--pred", str(pred_dir), "--gold", str(gold_dir), "--ontology",
                          str(onto_dir), "--metrics", "predicted-items", "--format", "csv", name="dir.json")
    [row] = [r for (_, metric), r in _csv_rows(out).items() if metric == "predicted-items.mean_items"]
    assert float(row["estimate"]) == pytest.approx(5 / 6) and row["table"] == "predicted items per entry"
    assert report["predicted-items"] == {"mean_items": 5 / 6, "empty": 2}


def test_the_output_lists_are_built_from_the_registry_when_used(extra_family):
    assert ("predicted items per entry", "predicted-items", PredictedItems.tables[0][1]) in ev.headline_tables()
    assert ev.headline_tables()[-1][1] == "sweep"  # table_rank 1: the sweep's tables stay last
    assert "predicted-items.empty" in ev.lower_is_better_paths()
    assert ev._lower_is_better_words() == ("the hallucination rates (hgr hallucination rate, text2kgbench "
                                           "sub/rel/obj_halluc), ECE and Brier score, the error shares (errors: all "
                                           "but gold found), predicted-items.empty")
    assert PredictedItems.headline_paths() == ("predicted-items.mean_items", "predicted-items.empty")
    assert [stem for stem, _, _ in ev.family_plots()] == ["per_relation_f1", "reliability_diagram",
                                                         "composite_distribution", "threshold_sweep"]
    args = ev.build_parser().parse_args(["--sweep"])
    assert ev._output_families(("hgr", "strict"), args) == ("hgr", "strict", "sweep")
    args = ev.build_parser().parse_args(["--plots", "p"])
    assert ev._output_families(("hgr",), args) == ("hgr", "per-relation", "calibration", "sweep")


def test_each_family_headline_is_a_path_of_its_tables_in_table_order():
    """The tables are the one place a headline path is written: ``headlines`` picks them."""
    sums = ev.HeadlineSums({}, 1)
    for cls in ev.FAMILIES.values():
        paths = cls.headline_paths()
        assert len(set(paths)) == len(paths) and all(p.startswith(cls.name + ".") for p in paths)
        assert cls.lower_is_better <= set(paths)
        got = list(cls().headlines(sums))
        assert got == [p for p in paths if p in got]
    assert list(ev.FAMILIES["hgr"]().headlines(sums)) == list(ev.HgrFamily.headline_paths())
    assert list(ev.FAMILIES["strict"]().headlines(sums)) == list(ev.StrictFamily.headline_paths())


def test_unknown_family_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        ev.build_parser().parse_args(["--metrics", "hgr,nope"])
    assert exc.value.code == 2
    assert "unknown metric family nope" in capsys.readouterr().err


@needs_nltk
def test_two_halves_merged_equal_all_at_once_for_every_family(tmp_path):
    rng = random.Random(7)
    for entries, ctx, names in _datasets(tmp_path):
        families = ev.families_for(names)
        whole = ev.score_entries(entries, ev.families_for(names), ctx)
        for cut in sorted({1, len(entries) // 3, len(entries) - 1}):
            a = ev.score_entries(entries[:cut], ev.families_for(names), ctx)
            b = ev.score_entries(entries[cut:], ev.families_for(names), ctx)
            for first, second in ((a, b), (b, a)):  # order-independent
                merged = ev.merge_records(families, [first.records, second.records])
                assert _section_bytes(families, merged) == _section_bytes(families, whole.records)
                assert ev.records_to_json(merged) == ev.records_to_json(whole.records)
        # the per-entry records stored in the report rebuild the same sections, in any order
        stored = [ev.records_from_json(row["stats"]) for row in whole.rows]
        rng.shuffle(stored)
        assert _section_bytes(families, ev.merge_records(families, stored)) == _section_bytes(families, whole.records)
    assert {n for _, _, names in _datasets(tmp_path / "again") for n in names} == set(ev.FAMILIES)


def test_merge_additive_is_exact_where_float_addition_is_not():
    a, b, c = {"s": 0.1, "n": 1}, {"s": 0.2, "n": 1}, {"s": 0.3, "n": 1}
    assert (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)  # 0.6000000000000001 vs 0.6
    left = ev.merge_additive(ev.merge_additive(a, b), c)
    right = ev.merge_additive(a, ev.merge_additive(b, c))
    assert left == right and left["n"] == 3 and type(left["n"]) is int
    from fractions import Fraction
    # exact sum of the three doubles (2^-55 * 21617278211378381), divided by 3, rounded once
    assert ev.exact_mean(left["s"], 3) == float((Fraction(0.1) + Fraction(0.2) + Fraction(0.3)) / 3)
    assert ev.as_fraction(left["s"]) == Fraction(0.1) + Fraction(0.2) + Fraction(0.3)
    assert ev.records_to_json({"x": left})["x"]["s"] == "21617278211378381/36028797018963968"
    with pytest.raises(ValueError, match="both sides"):
        ev.merge_additive({"rows": {"1": {}}}, {"rows": {"1": {}}}, disjoint=frozenset({"rows"}))
    assert ev.records_from_json(json.loads(json.dumps(ev.records_to_json({"x": left})))) == {"x": left}


def _units_one_by_one(values) -> int:
    return sum(ev.ExactSum.of(v).units for v in values)


_FLOATS = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(
    [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1.7976931348623157e308,
     -1.7976931348623157e308, 0.1, 1.0, 0.5, 1 / 3]))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_FLOATS, max_size=1100))
def test_float_units_are_the_exact_sum(values):
    # float_units (numpy: mantissas summed per exponent) is the sum of each float's ExactSum
    # units, subnormals, the largest doubles, negative zero and mixed signs included, over
    # the loop's sizes, the one-block sizes and past one block (PENDING_FLOATS)
    assert ev.float_units(values) == _units_one_by_one(values)


def test_float_units_blocks_and_the_largest_mantissas():
    # 1024 mantissas of 2**53 - 1 at one exponent: the int64 sum stays below 2**63
    largest = [float(2**53 - 1)] * 1024 + [-float(2**53 - 1)] * 3 + [2.0**-1074] * 2000
    assert ev.float_units(largest) == _units_one_by_one(largest)
    assert ev.float_units([0.1] * 5000) == 5000 * ev.ExactSum.of(0.1).units


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.dictionaries(st.sampled_from(["n", "s", "t"]), st.one_of(
    st.integers(-5, 5), _FLOATS, st.dictionaries(st.sampled_from(["a", "b"]), st.one_of(st.integers(0, 3), _FLOATS),
                                                 max_size=2)), max_size=3), min_size=1, max_size=40),
       block=st.sampled_from([2, 3, 1024]))
def test_pending_merges_give_the_merges_one_by_one(records, block):
    # score_entries' running totals (_merge_into with pending, then resolve_pending) are the
    # totals of merging one record after another: the same values, types and key order
    # (a float total stays a float, an int an int; a key's ints and floats mix), with the
    # pending floats added in blocks of any size
    saved, ev.PENDING_FLOATS = ev.PENDING_FLOATS, block
    try:
        _check_pending_merges(records)
    finally:
        ev.PENDING_FLOATS = saved


def _check_pending_merges(records) -> None:
    want = ev._copy_stats(records[0])
    got = ev._copy_stats(records[0])
    for record in records[1:]:
        try:
            ev._merge_into(want, record, frozenset())
        except Exception as exc:  # noqa: BLE001 (a dict meeting a number: both refuse it alike)
            with pytest.raises(type(exc)):
                ev._merge_into(got, record, frozenset(), True)
            return
        ev._merge_into(got, record, frozenset(), True)
    ev.resolve_pending(got)
    assert repr(got) == repr(want)        # ExactSum's repr is its Fraction; floats' and ints' their own


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_pending_merges_refuse_nan_and_infinity_at_once(bad):
    # the error of ExactSum.of, at the record that brings the value (not when resolved)
    for first in (0.5, bad):
        total = {"s": first}
        second = {"s": 0.25 if first is bad else bad}
        with pytest.raises((ValueError, OverflowError)) as one_by_one:
            ev._merge_into(dict(total), second, frozenset())
        with pytest.raises(one_by_one.type, match=str(one_by_one.value)):
            ev._merge_into(dict(total), second, frozenset(), True)
    total = {"s": 0.5}
    ev._merge_into(total, {"s": 0.25}, frozenset(), True)
    with pytest.raises(ValueError):
        ev._merge_into(total, {"s": float("nan")}, frozenset(), True)


def test_records_to_json_shares_what_needs_no_conversion():
    # a record of counts and floats is its own JSON form (returned, not copied); a dict or
    # list holding an exact sum is a converted copy, the record itself left as it was
    plain = {"n": 1, "s": 0.5, "per": {"a": {"b": 2}}, "list": [1, 2]}
    exact = ev.merge_additive({"s": 0.1, "k": {"x": [0.1, 1]}}, {"s": 0.2, "k": {"x": [0.2, 1]}})
    out = ev.records_to_json({"plain": plain, "exact": exact})
    assert out["plain"] is plain
    # 0.1 + 0.2 exactly: 3602879701896397/2^55 + 3602879701896397/2^54 = 10808639105689191/2^55
    exact_sum = "10808639105689191/36028797018963968"
    assert out["exact"] == {"s": exact_sum, "k": {"x": [exact_sum, 2]}}
    assert type(exact["s"]) is ev.ExactSum and type(exact["k"]["x"][0]) is ev.ExactSum
    assert list(out["exact"]) == ["s", "k"]                      # key order kept
    assert ev.records_from_json(json.loads(json.dumps(out))) == {"plain": plain, "exact": exact}


def _json_leaves_only(value) -> bool:
    if isinstance(value, dict):
        return all(type(k) is str and _json_leaves_only(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_json_leaves_only(v) for v in value)
    return value is None or type(value) in (int, float, str, bool)


def test_entry_records_of_families_without_entry_sums_are_their_own_json(tmp_path):
    """A family with ``entry_sums`` False (its per-entry rows take its records as they are)
    makes records of JSON values only: records_to_json returns each of them itself."""
    plain = {name for name, cls in ev.FAMILIES.items() if not cls.entry_sums}
    assert {"hgr", "strict", "per-relation", "errors"} <= plain and "calibration" not in plain
    seen = set()
    for entries, ctx, names in _datasets(tmp_path):
        scored = ev.score_entries(entries, ev.families_for(names), ctx)
        for row in scored.rows:
            for name in plain & row["stats"].keys():
                seen.add(name)
                assert ev.records_to_json({name: row["stats"][name]})[name] is row["stats"][name]
                assert _json_leaves_only(row["stats"][name]), (name, row["stats"][name])
    assert seen == plain


@needs_nltk
def test_limit_applies_to_every_family(tmp_path):
    gold, pred, onto = t2kg_files(tmp_path / "full")
    first3 = t2kg_files(tmp_path / "first3", sentences=SENTENCES[:3])
    limited = run_cli(tmp_path, "--pred", str(pred), "--gold", str(gold), "--ontology", str(onto),
                      "--metrics", "all", "--limit", "3", name="limited.json")
    cut = run_cli(tmp_path, "--pred", str(first3[1]), "--gold", str(first3[0]), "--ontology", str(first3[2]),
                  "--metrics", "all", name="cut.json")
    assert limited["summary"]["n_entries"] == 3
    assert limited["text2kgbench"]["counts"]["gt_sentences"] == 3
    assert len(limited["text2kgbench"]["per_sentence"]) == 3
    for key in ("strict", "per_relation", "webnlg2020", "text2kgbench", "per_entry"):
        assert limited[key] == cut[key], key
    for key in ("totals", "micro", "macro"):
        assert limited["summary"][key] == cut["summary"][key]
    assert limited["summary"]["config"]["limit"] == 3


def test_repeated_ids_error_names_the_benchmark_rule(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triples": []}] * 2)
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triples": []}])
    assert ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "duplicate gold ids: '1'" in err and "--duplicate-ids last reproduces Text2KGBench's rule" in err


@needs_nltk
def test_directory_mode_has_every_key_of_single_mode(tmp_path):
    pred_dir, gold_dir, onto_dir = t2kg_directory(tmp_path / "run")
    directory = run_cli(tmp_path, "--pred", str(pred_dir), "--gold", str(gold_dir), "--ontology", str(onto_dir),
                        "--metrics", "all", name="dir.json")
    single = run_cli(tmp_path, "--pred", str(pred_dir / "1_city_responses.jsonl"),
                     "--gold", str(gold_dir / "ont_1_city_ground_truth.jsonl"),
                     "--ontology", str(onto_dir / "1_city_ontology.json"), "--metrics", "all", name="one.json")
    assert set(single) <= set(directory)
    assert set(single["summary"]) <= set(directory["summary"])
    assert set(single["summary"]["config"]) == set(directory["summary"]["config"])
    assert set(single["per_entry"][0]) | {"ontology"} == set(directory["per_entry"][0])
    # directory numbers = the files' entries scored as one corpus (s3 appears in both ontologies)
    assert directory["summary"]["n_entries"] == 6 and directory["summary"]["n_ontologies"] == 2
    assert directory["per_ontology"]["1_city"]["summary"]["n_entries"] == 3
    assert directory["per_ontology"]["1_city"]["strict"] == single["strict"]
    assert directory["text2kgbench"]["per_ontology"]["1_city"] == single["text2kgbench"]
    assert "text2kgbench" not in directory["per_ontology"]["1_city"]  # not repeated


def test_config_changes_with_every_number_changing_option(tmp_path):
    gold, pred, onto = t2kg_files(tmp_path / "in")
    gold_dup = write_jsonl(tmp_path / "dup.jsonl", [json.loads(x) for x in gold.read_text().splitlines()]
                           + [json.loads(gold.read_text().splitlines()[0])])
    base = ["--pred", str(pred), "--gold", str(gold), "--metrics", "hgr"]
    variants = {
        "base": base,
        "metrics": base[:-1] + ["strict"],
        "schema": base + ["--schema", "triples"],
        "threshold": base + ["--embedding-threshold", "0.7"],
        "align": base + ["--align-accept", "0.6"],
        "relations": base + ["--relations", str(onto)],
        "limit": base + ["--limit", "2"],
        "reparse": base + ["--reparse"],
        "skip-bad-gold": base + ["--skip-bad-gold"],
        "dup-first": ["--pred", str(pred), "--gold", str(gold_dup), "--metrics", "hgr", "--duplicate-ids", "first"],
        "dup-last": ["--pred", str(pred), "--gold", str(gold_dup), "--metrics", "hgr", "--duplicate-ids", "last"],
    }
    configs = {name: json.dumps(run_cli(tmp_path, *argv, name=f"{name}.json")["summary"]["config"], sort_keys=True)
               for name, argv in variants.items()}
    assert len(set(configs.values())) == len(configs), configs
    config = json.loads(configs["base"])
    assert config["versions"]["python"] and config["versions"]["unicodedata"]
    assert config["relation_vocabulary"] == {"source": None, "sha256": None}  # flat triples: no check
    assert json.loads(configs["relations"])["relation_vocabulary"]["sha256"] is not None


def test_config_records_backend_model_and_versions(monkeypatch):
    config = ev.RunConfig(metrics=("hgr", "webnlg2020"))
    families = ev.families_for(config.metrics)
    lexical = ev.config_record(config, families, ev.Similarity(), None)
    assert "nltk" in lexical["versions"] and "onnxruntime" not in lexical["versions"]

    class FakeEmbedding(ev.Similarity):
        backend = "fastembed"
        model_id = "m@0123456789ab"

    embedded = ev.config_record(config, families, FakeEmbedding(), None)
    assert embedded["similarity"]["model_id"] == "m@0123456789ab"
    assert {"fastembed", "onnxruntime"} <= set(embedded["versions"])
    monkeypatch.setattr(ev, "_dist_version", lambda name: "9.9" if name == "nltk" else None)
    assert ev.config_record(config, families, ev.Similarity(), None) != lexical


def test_abbreviated_options_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        ev.build_parser().parse_args(["--pred", "x", "--no-emb"])
    assert exc.value.code == 2


def test_quiet_silences_diagnostics_and_errors_still_reach_stderr(tmp_path, capsys):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triples": []},
                                              {"id": "1", "prompt": "p", "triples": []}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "1", "triples": []}])
    args = ["--pred", str(pred), "--gold", str(gold), "--duplicate-ids", "first", "--no-embeddings",
            "--report", str(tmp_path / "r.json")]
    assert ev.main(args) == 0
    assert "warning: " in capsys.readouterr().err
    assert ev.main(args + ["--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert ev.main(args[:4] + ["--duplicate-ids", "error", "--quiet", "--report", str(tmp_path / "r.json")]) == 2
    assert "error: " in capsys.readouterr().err


def test_the_registry_refuses_a_family_that_would_take_another_ones_name_or_section(monkeypatch):
    # A family with key "strict" silently replaced strict's report section, and the summary
    # then failed (KeyError 'micro', internal error) after the report was written.
    class Shadow(ev.MetricFamily):
        name, key = "shadow", "strict"

    class Strict2(ev.MetricFamily):
        name, key = "strict", "strict2"

    with pytest.raises(ValueError, match="metric families 'strict' and 'shadow' share the report key 'strict'"):
        ev.register_family(Shadow)
    with pytest.raises(ValueError, match="metric family 'strict' is already registered \\(StrictFamily\\)"):
        ev.register_family(Strict2)
    assert "shadow" not in ev.FAMILIES and ev.FAMILIES["strict"] is ev.StrictFamily
    ev.register_family(ev.StrictFamily)  # the same class again: nothing changes
    monkeypatch.setitem(ev.FAMILIES, "shadow", Shadow)  # added to FAMILIES directly: refused when used
    with pytest.raises(ValueError, match="share the report key 'strict'"):
        ev.families_for(["strict", "shadow"])
    assert [f.name for f in ev.families_for(["shadow"])] == ["hgr", "shadow"]  # hgr: always


# ---------------------------------------------------------------- slice values (--slice-by)

def _slice_entry(fields: dict, prompt: str = "", n_items: int = 0) -> ev.Entry:
    gold = ev.GoldRecord("e1", prompt, [], 7, fields)
    return ev.Entry(gold, ev.Prediction("e1", [], "ok", "", 7))


@pytest.mark.parametrize("n_gold, label", [(0, "0"), (1, "1-2"), (2, "1-2"), (3, "3-5"), (5, "3-5"), (6, "6-10"),
                                           (10, "6-10"), (11, "11+"), (250, "11+")])
def test_slice_n_gold_bins(n_gold, label):
    assert ev.slice_values(_slice_entry({}), n_gold, ["n_gold"]) == {"n_gold": label}


@pytest.mark.parametrize("chars, label", [(0, "<250"), (249, "<250"), (250, "250-499"), (499, "250-499"),
                                          (500, "500-999"), (999, "500-999"), (1000, "1000-1999"),
                                          (1999, "1000-1999"), (2000, "2000+")])
def test_slice_prompt_chars_bins(chars, label):
    # code points, not bytes: "é" is one character (two UTF-8 bytes)
    entry = _slice_entry({}, prompt="é" * chars)
    assert ev.slice_values(entry, 0, ["prompt_chars"]) == {"prompt_chars": label}


def test_slice_fields_strings_integers_missing():
    fields = {"category": "Airport", "size": 3, "shape": None, "n_gold": "ignored"}
    entry = _slice_entry(fields)
    # a built-in wins over a gold field of the same name; null and absent fields: None, the (missing) slice
    assert ev.slice_values(entry, 4, ["category", "size", "shape", "absent", "n_gold"]) == \
        {"category": "Airport", "size": 3, "shape": None, "absent": None, "n_gold": "3-5"}
    assert ev.slice_label(None) == "(missing)" and ev.slice_label(3) == "3"


@pytest.mark.parametrize("value, label", [
    (1, "1"), ("1", '"1"'), (-3, "-3"), ("-3", '"-3"'), (None, "(missing)"), ("(missing)", '"(missing)"'),
    ("x", "x"), ("Airport", "Airport"), ("3-5", "3-5"), ("a b", "a b"), ("", '""'), (" a", '" a"'),
    ('"q"', '"\\"q\\""'), ("Caf\u00e9", "Caf\u00e9"), ("Cafe\u0301", '"Cafe\\u0301"'),   # NFC, NFD
    ("a\nb", '"a\\nb"'), ("x\u200by", '"x\\u200by"'), ("e\u00a0f", '"e\\u00a0f"'), ("\ud800", '"\\ud800"'),
    ("\U0001F600", "\U0001F600")])
def test_slice_labels_tell_distinct_values_apart(value, label):
    """A field's values that would print alike get JSON-quoted labels, the unseen characters
    escaped (before: 1 and "1" were both "1", None and "(missing)" both "(missing)", NFC and
    NFD "é" looked the same); a built-in's bins keep their labels."""
    assert ev.slice_label(value, "k") == label
    assert ev.slice_label("0", "n_gold") == "0" and ev.slice_label("1-2", "n_gold") == "1-2"


@pytest.mark.parametrize("value, described", [(0.5, "0.5"), (True, "true"), ([1], "a list of 1"), ({}, "an object")])
def test_slice_field_of_another_kind_is_refused(value, described):
    with pytest.raises(ev.InputError, match=f"--slice-by k: gold line 7 has {described}; .* strings .* integers"):
        ev.slice_values(_slice_entry({"k": value}), 0, ["k"])


def test_check_slice_keys_reads_until_every_key_is_seen_and_names_the_fields():
    def golds(*fields):
        for i, f in enumerate(fields):
            yield ev.GoldRecord(str(i), "", [], i + 1, f)

    def then_fail():  # the second record is never read: every key was seen on the first
        yield ev.GoldRecord("1", "", [], 1, {"category": "A"})
        raise AssertionError("read past the first record")

    ev.check_slice_keys(["n_gold", "category"], then_fail(), "g.jsonl")
    ev.check_slice_keys(["n_gold", "prompt_chars"], then_fail(), "g.jsonl")  # built-ins: nothing read at all
    ev.check_slice_keys(["size"], golds({"size": None}, {"size": 0}), "g.jsonl")  # 0 is a value; null is not
    with pytest.raises(ev.InputError) as err:
        ev.check_slice_keys(["n_gold", "colour"], golds({"id": "a", "colour": None}, {"topic": "x"}), "g.jsonl")
    assert str(err.value) == ("--slice-by colour: no gold line of g.jsonl has a field 'colour' (its gold lines have "
                              "id, topic), and it is not a built-in (n_gold, prompt_chars)")
    many = {f"f{i:02d}": i for i in range(ev.SLICE_FIELDS_SHOWN + 3)}  # 15 fields: the first 12 named
    with pytest.raises(ev.InputError, match=r"have f00, f01, .*, f11 \.\.\. \(15 fields\)\), and it is not"):
        ev.check_slice_keys(["x"], golds(many), "g.jsonl")
    with pytest.raises(ev.InputError, match=r"\(its gold lines have no fields\)"):
        ev.check_slice_keys(["x"], golds({}), "g.jsonl")


def test_slice_groups_order_and_errors():
    rows = [{"slices": {"k": v}} for v in ("b", 10, None, "a", 2, "b")]
    groups = ev.slice_groups("", rows, ["k"])
    # integers ascending, then strings, then (missing); each with its rows' indices
    assert groups == {"k": {2: [4], 10: [1], "a": [3], "b": [0, 5], None: [2]}}
    assert list(groups["k"]) == [2, 10, "a", "b", None]
    with pytest.raises(ev.InputError, match=r"--slice-by k: 5 distinct values, more than the 4 slices allowed.*"
                                            r"--max-slices 5"):
        ev.slice_groups("", rows, ["k"], max_slices=4)
    with pytest.raises(ev.InputError, match="no gold line has a field 'k', and it is not a built-in"):
        ev.slice_groups("", [{"slices": {"k": None}}], ["k"])
    with pytest.raises(ev.InputError, match="system B: the report's per-entry rows have no slice values for j"):
        ev.slice_groups("B", rows, ["j"])


@pytest.mark.parametrize("raised, errors, nltk", [
    (KeyError("weight"), (KeyError,), False), (KeyError("weight"), (), False), (ValueError("bad"), (ValueError,), False),
    (ValueError("bad"), (), False), (ImportError("nltk"), (), True), (LookupError("punkt"), (), True),
    (ev.InputError("as is"), (), False), (KeyboardInterrupt(), (ValueError,), False)])
def test_score_entries_turns_a_familys_errors_as_its_guard_does(raised, errors, nltk):
    """score_entries enters a family's guard only when entry_stats raises: the error that
    leaves it (translated into InputError or FamilyUnavailable, or the same one) is what
    leaving ``with family.guard()`` gives, message, type and suppressed context alike."""

    class Raises(ev.MetricFamily):
        name = key = "raises"
        input_errors = errors
        needs_nltk = nltk

        def entry_stats(self, entry, score, ctx):
            raise raised

        def finish(self, record):
            return {}

    family = Raises()
    with pytest.raises(BaseException) as guarded:
        with family.guard():
            raise raised
    entry = ev.Entry(ev.GoldRecord("e", "", [], 1), ev.Prediction("e", [], "ok", "", 1))
    ctx = ev.ScoringContext(ev.Similarity(), "hgr", frozenset(ev.SPEC_RELATIONS), ev.DEFAULT_ALIGN_ACCEPT, None)
    with pytest.raises(BaseException) as scored:
        ev.score_entries([entry], [ev.FAMILIES["hgr"](), family], ctx)
    assert type(scored.value) is type(guarded.value) and str(scored.value) == str(guarded.value)
    assert scored.value.__suppress_context__ == guarded.value.__suppress_context__
    assert (scored.value is raised) == (guarded.value is raised)


# ---------------------------------------------------------------- a system of several samples

SAMPLE_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_GOLD = SAMPLE_ROOT / "gold" / "gold.jsonl"
SAMPLE_FINETUNED = SAMPLE_ROOT / "predictions" / "finetuned.jsonl"
SAMPLE_BASE = SAMPLE_ROOT / "predictions" / "base.jsonl"


def typed(source: str, relation: str, target: str, weight: float, source_type: str = "entity") -> dict:
    return {"source": {"title": source, "type": source_type}, "relation": {"type": relation, "weight": weight},
            "target": {"title": target, "type": "entity"}}


def test_consensus_by_hand():
    a, a_caps = typed("Acme Inc", "located_in", "City Y", 0.9), typed("ACME INC", "located_in", "City Y", 0.7, "org")
    b, c = typed("Acme Inc", "founded_by", "Person Z", 0.8), typed("Person Z", "works_at", "Acme Inc", 0.5)
    # keys: "acme inc" normalises to "acme" (company suffix), so a and a_caps share the key
    # (acme, located_in, city y): samples 0 and 1 hold it (sample 1 twice: counted once): 2 of 3 > 3/2;
    # b: samples 0 and 2, 2 of 3; c: sample 2 only, 1 of 3: left out
    answers = [[a, b], [a_caps, a], [typed("Acme Inc", "founded_by", "Person Z", 0.6), c]]
    got = ev.SampledSystem.consensus_items(answers, "hgr")
    # a: spellings "Acme Inc" (sample 0) and "ACME INC" (sample 1) tie 1-1: the earliest; types
    # "entity" and "org" tie: the earliest; weight median(0.9, 0.7) = 0.8
    # b: median(0.8, 0.6) = 0.7; in the order of first appearance (sample 0: a, then b)
    assert got == [typed("Acme Inc", "located_in", "City Y", 0.8), typed("Acme Inc", "founded_by", "Person Z", 0.7)]
    # three agreeing items: the most common spelling wins (2 of 3), weights median(0.9, 0.7, 0.5) = 0.7
    three = [[a], [a_caps], [typed("ACME INC", "located_in", "City Y", 0.5, "org")]]
    assert ev.SampledSystem.consensus_items(three, "hgr") == [typed("ACME INC", "located_in", "City Y", 0.7, "org")]
    # four samples: a key in 2 of them is not more than half; an unparseable sample (None) holds nothing
    assert ev.SampledSystem.consensus_items([[a], [a], [b], None], "hgr") == []
    # flat triples: "X" normalises to "x"; 2 of 3 samples hold (x, r, y); the earliest spelling on a tie
    assert ev.SampledSystem.consensus_items([[["x", "r", "y"]], [["X", "r", "y"]], [["z", "r", "y"]]], "triples") == [
        ["x", "r", "y"]]


def test_best_of_k_picks_the_best_composite_ties_to_the_first_sample():
    rows = [{"samples": [{"metrics": {"composite": c}} for c in composites]}
            for composites in ([0.5, 0.9, 0.9], [0.2, 0.1, 0.2], [None, 0.3, 0.1])]
    assert ev.SampledSystem.best_of_k(rows) == [1, 0, 1]


def test_sd_is_exact_and_na_for_one_value():
    # values 1, 2, 4: mean 7/3, squares (16 + 1 + 25)/9 = 42/9, / (3 - 1) = 7/3
    assert ev.SampledSystem.sd([1.0, 2.0, 4.0]) == math.sqrt(7 / 3)
    assert ev.SampledSystem.sd([0.1, 0.1, 0.1]) == 0.0
    assert ev.SampledSystem.sd([0.3, None]) is None


def _cli_report(tmp_path: Path, name: str, *args) -> dict:
    from conftest import run_main
    report = tmp_path / f"{name}.json"
    rc, out, err = run_main(*args, "--no-embeddings", "--quiet", "--report", report)
    assert rc == 0, err
    return json.loads(report.read_text())


def test_each_sample_is_scored_as_a_run_of_its_own(tmp_path):
    both = _cli_report(tmp_path, "both", "--pred", f"ft={SAMPLE_FINETUNED},{SAMPLE_BASE}", "--gold", SAMPLE_GOLD)
    for s, path in enumerate((SAMPLE_FINETUNED, SAMPLE_BASE)):
        alone = _cli_report(tmp_path, path.stem, "--pred", path, "--gold", SAMPLE_GOLD)
        assert [row["samples"][s] for row in both["per_entry"]] == alone["per_entry"]
        run_s = both["samples"]["runs"][s]
        assert run_s["label"] == path.stem
        assert {k: v for k, v in run_s.items() if k != "label"} == {
            **{k: v for k, v in alone.items() if k != "per_entry"},
            "summary": {k: v for k, v in alone["summary"].items() if k != "signature"}}
        for p, m in both["samples"]["metrics"].items():
            assert m["per_sample"][s] == ev.metric_value(alone, p), p
    # best of 2: per entry the higher composite, mean over the 25 entries (exact, rounded once)
    best = sum(Fraction(max(r["samples"][0]["metrics"]["composite"], r["samples"][1]["metrics"]["composite"]))
               for r in both["per_entry"]) / 25
    assert both["samples"]["metrics"]["hgr.macro.composite"]["best_of_k"] == float(best)
    assert both["samples"]["count"] == 2 and both["summary"]["inputs"]["samples"][1]["name"] == "base.jsonl"


def test_identical_samples_give_sd_0_and_the_single_sample_numbers(tmp_path):
    copies = [tmp_path / f"copy{k}.jsonl" for k in range(3)]
    for copy in copies:
        copy.write_bytes(SAMPLE_FINETUNED.read_bytes())
    three = _cli_report(tmp_path, "three", "--pred", "ft=" + ",".join(map(str, copies)), "--gold", SAMPLE_GOLD)
    one = _cli_report(tmp_path, "one", "--pred", SAMPLE_FINETUNED, "--gold", SAMPLE_GOLD)
    for path, m in three["samples"]["metrics"].items():
        assert m["estimate"] == m["best_of_k"] == ev.metric_value(one, path), path
        assert m["sd"] == (None if m["estimate"] is None else 0.0), path
        assert m["per_sample"] == [ev.metric_value(one, path)] * 3
    vc = three["samples"]["variance_components"]["hgr.macro.composite"]
    assert vc["within_entry"] == 0.0 and vc["within_share"] == 0.0


@pytest.mark.parametrize("k", [2, 3])
def test_identical_samples_give_the_single_run_numbers_bit_for_bit_in_every_family(tmp_path, k):
    """--metrics all (calibration's ECE and Brier, whose entries hold exact sums): the
    estimate, each sample and best of k are the single run's numbers to the bit (before:
    calibration.ece 0.4045454545454545 against the run's 0.40454545454545454, k = 2)."""
    copies = [tmp_path / f"copy{s}.jsonl" for s in range(k)]
    for copy in copies:
        copy.write_bytes(SAMPLE_BASE.read_bytes())
    many = _cli_report(tmp_path, "many", "--pred", "b=" + ",".join(map(str, copies)), "--gold", SAMPLE_GOLD,
                       "--metrics", "all")
    one = _cli_report(tmp_path, "one", "--pred", SAMPLE_BASE, "--gold", SAMPLE_GOLD, "--metrics", "all")
    assert "calibration.ece" in many["samples"]["metrics"]
    for path, m in many["samples"]["metrics"].items():
        assert m["estimate"] == m["best_of_k"] == ev.metric_value(one, path), path
        assert m["per_sample"] == [ev.metric_value(one, path)] * k, path


def test_the_consensus_is_scored_as_a_run_of_its_own(tmp_path):
    rows = [{**json.loads(x), "sample": s} for s, path in enumerate((SAMPLE_FINETUNED, SAMPLE_BASE, SAMPLE_FINETUNED))
            for x in path.read_text().splitlines()]
    multi = write_jsonl(tmp_path / "multi.jsonl", rows)
    report = _cli_report(tmp_path, "multi", "--pred", multi, "--gold", SAMPLE_GOLD)
    loaded = [ev.load_inputs(multi, SAMPLE_GOLD, sample=s).entries for s in range(3)]
    items = [ev.SampledSystem.consensus_items([t[i].pred.items for t in loaded], "hgr") for i in range(25)]
    consensus = write_jsonl(tmp_path / "consensus.jsonl", [{"id": t.gold.id, "triplets": it}
                                                           for t, it in zip(loaded[0], items)])
    alone = _cli_report(tmp_path, "alone", "--pred", consensus, "--gold", SAMPLE_GOLD)
    for path, m in report["samples"]["metrics"].items():
        assert m["consensus"] == ev.metric_value(alone, path), path
    assert [r["consensus"]["stats"] for r in report["per_entry"]] == [r["stats"] for r in alone["per_entry"]]
