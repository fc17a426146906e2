"""Statistics section: headline protocol, percentile bootstrap intervals, paired bootstrap,
paired approximate randomisation, Holm, compare_systems."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import run_main
from helpers import NLTK_DATA, ROOT, SHARED_DATA, T, entry, load_report, randomization_p_value, run, run_cli

import evaluate as ev

FAMILIES = ("hgr", "strict", "per-relation")


def sample_report(name: str) -> dict:
    loaded = ev.load_inputs(ROOT / "predictions" / f"{name}.jsonl", ROOT / "gold" / "gold.jsonl")
    return json.loads(json.dumps(ev.evaluate_entries(loaded.entries, similarity=ev.Similarity(), families=FAMILIES)))


@pytest.fixture(scope="module")
def sample_reports() -> dict:
    return {"base": sample_report("base"), "finetuned": sample_report("finetuned")}


def compare(reports: dict, baseline: str, **kw) -> dict:
    kw = {"bootstrap": 200, "trials": 500, "seed": 7, "correction": None, **kw}
    return ev.compare_systems(reports, baseline=baseline, families=ev.families_for(FAMILIES), **kw)


def test_identical_systems_give_delta_zero_and_p_one(sample_reports):
    same = {"a": sample_reports["finetuned"], "b": json.loads(json.dumps(sample_reports["finetuned"]))}
    out = compare(same, "a")
    for path, row in out["metrics"]["b"].items():
        assert row["delta"] == 0.0, path
        assert row["delta_ci"] == [0.0, 0.0], path
        assert row["p_value"] == 1.0, path  # every trial has |delta*| = 0 >= |delta| = 0: (R + 1)/(R + 1)
        assert row["significant"] is False
        assert row["estimate"] == out["metrics"]["a"][path]["estimate"]


def test_fixed_seed_gives_byte_identical_output(sample_reports):
    a = json.dumps(compare(sample_reports, "base", correction="holm"), allow_nan=False)
    b = json.dumps(compare(sample_reports, "base", correction="holm"), allow_nan=False)
    assert a == b
    c = json.dumps(compare(sample_reports, "base", correction="holm", seed=8), allow_nan=False)
    assert c != a


# ---------------------------------------------------------------- helpers of this file

def headline_families(names=FAMILIES) -> list:
    return [f for f in ev.families_for(names) if type(f).headlines is not ev.MetricFamily.headlines]


def entry_records(report: dict, families) -> list[dict]:
    return [ev.records_from_json({f.name: row["stats"][f.name] for f in families}) for row in report["per_entry"]]


def section_value(report: dict, path: str):
    family, *rest = path.split(".")
    node = report["summary" if family == "hgr" else family]
    for part in rest:
        node = node[part]
    return node


def merged_value(families, records: list[dict], counts, path: str):
    """The metric of a resample through the families' own exact merge + finish (the
    independent reference): entry i's record merged counts[i] times."""
    family = next(f for f in families if path.startswith(f.name + "."))
    total: dict = {}
    for rec, k in zip(records, counts):
        for _ in range(int(k)):
            total = family.merge(total, rec[family.name])
    section = family.finish(total)
    node = section
    for part in path.split(".")[1:]:
        node = node[part]
    return node


def full_sample_headlines(report: dict, families) -> dict:
    data = ev.headline_data([entry_records(report, families)], families)
    values = ev.headline_values(families, data.sums(data.sliced[0].sum(axis=0)[None, :]))
    return {p: float(v[0]) for p, v in values.items()}


# ---------------------------------------------------------------- headline protocol

def test_headlines_on_the_full_sample_are_the_section_numbers_bit_for_bit(sample_reports):
    families = headline_families()
    for report in sample_reports.values():
        values = full_sample_headlines(report, families)
        # hgr: 7 micro + 8 macro; strict: 3 micro + 3 macro
        assert len(values) == 21
        for path, value in values.items():
            want = section_value(report, path)
            assert value == want, path  # micro: same float operations; macro: one rounding of the exact sum


def test_headline_ratio_rounds_the_exact_sum_once():
    rng = np.random.default_rng(5)
    for trial in range(300):
        n = int(rng.integers(1, 40))
        x = rng.random(n) * (10.0 ** rng.integers(-3, 3))
        if trial % 3 == 0:
            x[:] = x[0]  # a constant column: its mean must come back exactly
        elif trial % 7 == 0:
            x[rng.random(n) < 0.5] *= 1e-12  # values far below the column's largest
        w = rng.integers(0, 4, size=(5, n)).astype(float)
        w[0] = 1
        slices = ev.headline_slices([x], integral=False)[0]
        parts = np.column_stack(slices)
        sums = ev.HeadlineSums({"x": tuple((w @ parts).T), "n": (w.sum(axis=1),)}, 5)
        got = ev.headline_ratio(sums, "x", "n", math.nan)
        for b in range(5):
            exact = sum((Fraction(float(v)) * int(k) for v, k in zip(x, w[b])), Fraction(0))
            if w[b].sum():
                assert got[b] == float(exact / int(w[b].sum())), (trial, b)
            else:
                assert math.isnan(got[b])
        if trial % 3 == 0:
            assert got[0] == x[0]


def test_headline_slices_sum_exactly_in_any_order():
    rng = np.random.default_rng(11)
    x = rng.random(1000)
    x[::3] *= 1e-9  # values 2**30 below the largest: one more slice
    (s1, s2, s3, s4), = ev.headline_slices([x], integral=False)
    assert sum(map(Fraction, (s1[5], s2[5], s3[5], s4[5]))) == Fraction(x[5])
    exact = sum(map(Fraction, x), Fraction(0))
    for order in (np.arange(1000), rng.permutation(1000), np.arange(1000)[::-1]):
        parts = [float(np.sum(s[order])) for s in (s1, s2, s3, s4)]
        assert sum(map(Fraction, parts), Fraction(0)) == exact  # each slice sum is exact


def test_text2kgbench_single_file_and_webnlg2020_headlines():
    # hand records: two sentences of one file; webnlg2020 blocks with 13 slots
    t2kg = ev.Text2KGBenchFamily()
    recs = [{"text2kgbench": {"groups": {"": ev.Text2KGBench.sentence_record(
                "a", 1, dict.fromkeys(ev.T2KG_METRIC_KEYS, 0.5))}}},
            {"text2kgbench": {"groups": {"": ev.Text2KGBench.sentence_record("b", 2, None)}}}]  # no response: 0
    data = ev.headline_data([recs], [t2kg])
    values = ev.headline_values([t2kg], data.sums(data.sliced[0].sum(axis=0)[None, :]))
    # average over the 2 ground-truth sentences: (0.5 + 0) / 2
    assert {p: float(v[0]) for p, v in values.items()} == {f"text2kgbench.averages.{k}": 0.25
                                                          for k in ev.T2KG_METRIC_KEYS}
    web = ev.WebNLG2020Family()
    block = [1, 0, 0, 0, 0, 1, 1, 1.0, 0.5, 2 / 3, 1, 1, 1]
    rec = {"pairs": 2, "blocks": {"Total_scores": dict.fromkeys(("Exact", "Ent_type", "Partial", "Strict"), block)}}
    data = ev.headline_data([[{"webnlg2020": rec}]], [web])
    values = ev.headline_values([web], data.sums(data.sliced[0].sum(axis=0)[None, :]))
    # per measure: P = 1.0 / 2 pairs, R = 0.5 / 2, F1 = (2/3) / 2
    assert float(values["webnlg2020.Total_scores.Exact.Precision"][0]) == 0.5
    assert float(values["webnlg2020.Total_scores.Strict.Recall"][0]) == 0.25
    assert float(values["webnlg2020.Total_scores.Partial.F1"][0]) == float(Fraction(2 / 3) / 2)
    assert len(values) == 12


# ---------------------------------------------------------------- bootstrap arithmetic

def test_percentile_interval_is_numpy_linear_type_7():
    values = np.arange(1000.0)
    # h = (B - 1) p: 999 * 0.025 = 24.975 -> 24 + 0.975 * (25 - 24); 999 * 0.975 = 974.025
    ci, na = ev.percentile_interval(values)
    assert ci == [pytest.approx(24.975, abs=1e-12), pytest.approx(974.025, abs=1e-12)]
    assert na == 0
    values[:10] = np.nan  # N/A resamples are left out and counted
    ci, na = ev.percentile_interval(values)
    # 990 values 10..999: h = 989 * 0.025 = 24.725 -> 34.725; 989 * 0.975 = 964.275 -> 974.275
    assert ci == [pytest.approx(34.725, abs=1e-12), pytest.approx(974.275, abs=1e-12)] and na == 10
    assert ev.percentile_interval(np.full(5, np.nan)) == (None, 5)


def test_resample_counts_rows_sum_to_n_and_strata_keep_their_size():
    rng = np.random.Generator(np.random.PCG64(3))
    strata = np.array([0, 0, 1, 1, 1, 2])
    w = ev.resample_counts(rng, strata, 500)
    assert w.shape == (500, 6)
    assert np.all(w.sum(axis=1) == 6)
    assert np.all(w[:, :2].sum(axis=1) == 2) and np.all(w[:, 2:5].sum(axis=1) == 3) and np.all(w[:, 5] == 1)


def test_resample_counts_follow_the_multinomial_distribution():
    # n = 3: the count vector of 3 uniform draws is multinomial(3; 1/3, 1/3, 1/3):
    # P(3,0,0) = 1/27 each of 3 vectors, P(2,1,0) = 3/27 each of 6, P(1,1,1) = 6/27
    rng = np.random.Generator(np.random.PCG64(4))
    w = ev.resample_counts(rng, np.zeros(3, dtype=np.int64), 27000)
    seen = {}
    for row in w.astype(int):
        seen[tuple(row)] = seen.get(tuple(row), 0) + 1
    for vec, count in seen.items():
        prob = Fraction(6, 27) if vec == (1, 1, 1) else Fraction(3, 27) if 2 in vec else Fraction(1, 27)
        expected = 27000 * float(prob)
        assert abs(count - expected) <= 5 * math.sqrt(expected * (1 - float(prob))), vec
    assert len(seen) == 10


def test_bootstrap_replicates_equal_the_families_exact_merge_of_each_resample(sample_reports):
    families = headline_families()
    report = sample_reports["finetuned"]
    records = entry_records(report, families)
    data = ev.headline_data([records], families)
    reps = ev.bootstrap_replicates(data, families, 40, seed=9)[0]
    w = ev.resample_counts(np.random.Generator(np.random.PCG64(9)), data.strata, 40)  # the same stream
    for b in range(40):
        for path in ("hgr.micro.entity_f1", "hgr.micro.hallucination_rate", "hgr.macro.composite",
                     "hgr.macro.relation_accuracy", "strict.micro.f1", "strict.macro.recall"):
            want = merged_value(families, records, w[b], path)
            got = float(reps[path][b])
            assert (math.isnan(got) and want is None) or got == want, (b, path)


def test_bootstrap_matches_the_exact_bootstrap_distribution():
    # n = 4 entries: all 4**4 = 256 index tuples are equally likely; the exact distribution
    # of strict.macro.f1 over them is the reference for 20,000 Monte-Carlo resamples.
    a, b, c = T("A", "part_of", "B"), T("C", "part_of", "D"), T("E", "uses", "F")
    report = json.loads(json.dumps(run([entry([a, b], [a], k=0), entry([a], [a, c], k=1),
                                        entry([a, b, c], [a, b, c], k=2), entry([b], [c], k=3)])))
    families = [ev.StrictFamily()]
    records = entry_records(report, families)
    exact = []
    for idx in itertools.product(range(4), repeat=4):
        counts = np.bincount(idx, minlength=4)
        exact.append(merged_value(families, records, counts, "strict.macro.f1"))
    exact = np.array(exact)
    data = ev.headline_data([records], families)
    mc = ev.bootstrap_replicates(data, families, 20000, seed=1)[0]["strict.macro.f1"]
    # mean and standard deviation within 5 standard errors; Kolmogorov distance < 0.02
    # (the 99.9% critical value for 20,000 draws is 1.95 / sqrt(20000) = 0.0138)
    assert abs(mc.mean() - exact.mean()) <= 5 * exact.std() / math.sqrt(20000)
    assert abs(mc.std() - exact.std()) <= 0.02 * exact.std()
    support = np.unique(exact)
    f_exact = np.searchsorted(np.sort(exact), support, side="right") / len(exact)
    f_mc = np.searchsorted(np.sort(mc), support, side="right") / len(mc)
    assert np.max(np.abs(f_exact - f_mc)) < 0.02


def test_holm_by_hand():
    # sorted: 0.005 * 4 = 0.02; 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; max(0.06, 0.04 * 1) = 0.06
    assert ev.holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    # None is not a test (m = 2); min(1, 2 * 0.6) = 1 caps, and the running maximum keeps 1
    assert ev.holm_adjust([0.6, None, 0.5]) == [1.0, None, 1.0]
    assert ev.holm_adjust([]) == []


def test_randomization_p_value_counts_ties_and_leaves_out_nan():
    deltas = np.array([0.1, -0.1, 0.05, 0.1 * (1 - 1e-12), np.nan])
    # |delta*| >= 0.1: 0.1, -0.1 and 0.1(1 - 1e-12) (equal within AR_TOLERANCE): c = 3, R = 4
    assert randomization_p_value(deltas, 0.1) == (4 / 5, 1)  # (3 + 1) / (4 + 1)
    assert randomization_p_value(np.zeros(9), 0.0) == (1.0, 0)


# ---------------------------------------------------------------- compare_systems

def _ten_entry_reports() -> dict:
    import random
    rng = random.Random(2)
    names = ["Alpha", "Beta", "Gamma", "Delta", "Omega", "Sigma"]
    rels = ["part_of", "uses", "based_on"]
    gold, sys_a, sys_b = [], [], []
    for k in range(10):
        g = [T(rng.choice(names), rng.choice(rels), rng.choice(names[::-1]) + "x") for _ in range(rng.randint(1, 3))]
        gold.append(g)
        sys_a.append([t for t in g if rng.random() < 0.5] + [T("Noise", "uses", "Thing")] * rng.randint(0, 1))
        sys_b.append([t for t in g if rng.random() < 0.8])
    return {name: json.loads(json.dumps(run([entry(g, p, k=k) for k, (g, p) in enumerate(zip(gold, preds))])))
            for name, preds in (("a", sys_a), ("b", sys_b))}


def test_monte_carlo_p_value_is_within_4_standard_errors_of_the_exact_enumeration():
    reports = _ten_entry_reports()
    families = headline_families()
    rec = {name: entry_records(r, families) for name, r in reports.items()}
    paths = ["hgr.micro.entity_f1", "hgr.micro.triplet_recall", "hgr.macro.composite", "hgr.macro.entity_f1",
             "strict.micro.f1", "strict.macro.precision"]
    observed = {p: merged_value(families, rec["b"], [1] * 10, p) - merged_value(families, rec["a"], [1] * 10, p)
                for p in paths}
    hits = dict.fromkeys(paths, 0)
    for mask in range(1 << 10):  # every assignment of the 10 swaps, through the families' exact finish
        b_star = [rec["a"][i] if mask >> i & 1 else rec["b"][i] for i in range(10)]
        a_star = [rec["b"][i] if mask >> i & 1 else rec["a"][i] for i in range(10)]
        for p in paths:
            d = merged_value(families, b_star, [1] * 10, p) - merged_value(families, a_star, [1] * 10, p)
            hits[p] += abs(d) >= abs(observed[p]) * (1 - ev.AR_TOLERANCE)
    trials = 10_000
    out = ev.compare_systems(reports, baseline="a", bootstrap=0, trials=trials, seed=5, correction=None,
                             families=ev.families_for(FAMILIES))
    tested = 0
    for p in paths:
        exact = hits[p] / 1024
        got = out["metrics"]["b"][p]["p_value"]
        se = math.sqrt(exact * (1 - exact) / trials)
        assert abs(got - exact) <= 4 * se + 1 / (trials + 1), (p, got, exact)
        tested += 0.01 < exact < 0.99
    assert tested >= 3  # the case is informative: several p-values strictly between 0 and 1


def test_compare_systems_layout_and_single_system(sample_reports):
    out = compare(sample_reports, "base", correction="holm")
    assert list(out) == ["baseline", "bootstrap", "trials", "seed", "correction", "confidence", "metrics", "notes"]
    assert (out["baseline"], out["bootstrap"], out["trials"], out["seed"], out["correction"], out["confidence"]) == (
        "base", 200, 500, 7, "holm", 0.95)
    assert list(out["metrics"]) == ["base", "finetuned"]
    base, fine = out["metrics"]["base"], out["metrics"]["finetuned"]
    assert set(base["hgr.macro.composite"]) == {"estimate", "ci", "na_resamples"}
    assert set(fine["hgr.macro.composite"]) == {"estimate", "ci", "na_resamples", "delta", "delta_ci", "p_value",
                                                "p_adjusted", "significant"}
    for path, row in fine.items():
        assert row["estimate"] == section_value(sample_reports["finetuned"], path)
        assert row["delta"] == row["estimate"] - base[path]["estimate"]
        assert row["p_adjusted"] >= row["p_value"]
        assert row["significant"] == (row["p_adjusted"] < 0.05)
    assert any("Holm" in n for n in out["notes"])
    alone = ev.compare_systems({"finetuned": sample_reports["finetuned"]}, baseline="finetuned", bootstrap=200,
                               trials=500, seed=7, correction=None, families=ev.families_for(FAMILIES))
    # one system: its intervals are those it gets inside a comparison (same resamples)
    assert alone["metrics"]["finetuned"] == {p: {k: r[k] for k in ("estimate", "ci", "na_resamples")}
                                             for p, r in fine.items()}


def test_every_interval_contains_its_estimate_on_the_sample_data(sample_reports):
    out = compare(sample_reports, "base", bootstrap=1000, trials=200)
    for system, rows in out["metrics"].items():
        for path, row in rows.items():
            lo, hi = row["ci"]
            assert lo <= row["estimate"] <= hi, (system, path)
            if "delta_ci" in row:
                assert row["delta_ci"][0] <= row["delta"] <= row["delta_ci"][1], (system, path)


def test_delta_interval_is_the_paired_bootstrap_on_the_same_resamples(sample_reports):
    families = headline_families()
    records = [entry_records(sample_reports[n], families) for n in ("base", "finetuned")]
    data = ev.headline_data(records, families)
    base, fine = ev.bootstrap_replicates(data, families, 300, seed=7)
    out = compare(sample_reports, "base", bootstrap=300, trials=0)
    paired = 0
    for path, row in out["metrics"]["finetuned"].items():
        if "paired_entries" in row:  # N/A on some entries: the paired bootstrap of the jointly defined ones
            key = path.split(".")[-1]
            joint = [i for i, (a, b) in enumerate(zip(sample_reports["base"]["per_entry"],
                                                      sample_reports["finetuned"]["per_entry"]))
                     if a["metrics"][key] is not None and b["metrics"][key] is not None]
            sub = ev.headline_data([[r[i] for i in joint] for r in records], families)
            sb, sf = ev.bootstrap_replicates(sub, families, 300, seed=7)
            assert row["delta_ci"] == ev.percentile_interval(sf[path] - sb[path])[0], path
            paired += 1
        else:
            assert row["delta_ci"] == ev.percentile_interval(fine[path] - base[path])[0], path
        assert row["ci"] == ev.percentile_interval(fine[path])[0], path
        assert out["metrics"]["base"][path]["ci"] == ev.percentile_interval(base[path])[0], path
        assert row["p_value"] is None
    assert paired == 3  # relation accuracy, weight score, type agreement


def test_every_interval_contains_its_estimate_on_the_parity_sample():
    sample = SHARED_DATA / "parity-sample"
    if not (sample / "pred.jsonl").is_file():
        pytest.skip(f"parity sample not available at {sample} (shared test data is not shipped)")
    loaded = ev.load_inputs(sample / "pred.jsonl", sample / "gold.jsonl")
    report = json.loads(json.dumps(ev.evaluate_entries(loaded.entries, similarity=ev.Similarity(),
                                                       families=FAMILIES)))
    out = ev.compare_systems({"parity": report}, baseline="parity", bootstrap=1000, trials=0, seed=1,
                             correction=None, families=ev.families_for(FAMILIES))
    for path, row in out["metrics"]["parity"].items():
        if row["estimate"] is None:
            assert row["ci"] is None and row["na_resamples"] == 1000
            continue
        lo, hi = row["ci"]
        assert lo <= row["estimate"] <= hi, path
    values = full_sample_headlines(report, headline_families())
    assert all(v == section_value(report, p) or (math.isnan(v) and section_value(report, p) is None)
               for p, v in values.items())


def test_macro_na_in_a_resample_is_left_out_and_counted():
    a, b = T("A", "part_of", "B"), T("C", "part_of", "D")
    # entry 0: an entity match (relation accuracy defined); entry 1: no match (N/A)
    entries = [entry([a], [a], k=0), entry([b], [T("X", "uses", "Y")], k=1)]
    report = json.loads(json.dumps(run(entries)))
    assert report["per_entry"][1]["metrics"]["relation_accuracy"] is None
    out = ev.compare_systems({"s": report}, baseline="s", bootstrap=400, trials=0, seed=2, correction=None,
                             families=ev.families_for(FAMILIES))
    rng = np.random.Generator(np.random.PCG64(2))
    w = np.vstack([ev.resample_counts(rng, np.zeros(2, dtype=np.int64), size) for size in (256, 144)])
    row = out["metrics"]["s"]["hgr.macro.relation_accuracy"]
    assert row["na_resamples"] == int(np.sum(w[:, 0] == 0)) > 0  # about a quarter of 400
    assert row["ci"] == [1.0, 1.0] and row["estimate"] == 1.0


def test_systems_must_cover_the_same_gold_entries(sample_reports):
    other = json.loads(json.dumps(sample_reports["finetuned"]))
    other["per_entry"][3]["id"] = "someone-else"
    with pytest.raises(ev.InputError, match=r"system other .*entry 4 is gold line 4 \(id 'someone-else'\)"):
        compare({"base": sample_reports["base"], "other": other}, "base")
    short = json.loads(json.dumps(sample_reports["finetuned"]))
    del short["per_entry"][-1]
    with pytest.raises(ev.InputError, match="system short .*24 entries against 25"):
        compare({"base": sample_reports["base"], "short": short}, "base")


def test_a_report_that_disagrees_with_its_per_entry_statistics_is_refused(sample_reports):
    edited = json.loads(json.dumps(sample_reports["finetuned"]))
    edited["summary"]["micro"]["entity_f1"] = 0.99
    with pytest.raises(ev.InputError, match="system edited: hgr.micro.entity_f1 is 0.99 in the report"):
        compare({"base": sample_reports["base"], "edited": edited}, "base")
    bare = json.loads(json.dumps(sample_reports["finetuned"]))
    del bare["per_entry"][0]["stats"]
    with pytest.raises(ev.InputError, match=r"system bare: per_entry\[0\] has no stats"):
        compare({"base": sample_reports["base"], "bare": bare}, "base")
    with pytest.raises(ValueError, match="baseline"):
        compare(sample_reports, "nobody")
    with pytest.raises(ValueError, match="correction"):
        compare(sample_reports, "base", correction="bonferroni")


def _strict_report(rows: list[tuple[int, int, int]]) -> dict:
    """A report of the strict family alone from per-entry (n_gold, n_pred, tp)."""
    family = ev.StrictFamily()
    per_entry, total = [], {}
    for k, (n_gold, n_pred, tp) in enumerate(rows):
        p, r = ev.safe_ratio(tp, n_pred), ev.safe_ratio(tp, n_gold)
        rec = {"entries": 1, "tp": tp, "n_pred": n_pred, "n_gold": n_gold, "precision": p, "recall": r,
               "f1": ev.f1_score(p, r)}
        total = family.merge(total, rec)
        per_entry.append({"id": f"e{k}", "gold_line": k + 1, "stats": ev.records_to_json({"strict": rec})})
    return json.loads(json.dumps({"summary": {}, "strict": family.finish(total), "per_entry": per_entry}))


_entry_pair = st.integers(0, 4).flatmap(
    lambda g: st.tuples(st.just(g), st.integers(0, 4), st.integers(0, 4)).flatmap(
        lambda t: st.tuples(st.just(t[0]), st.just(t[1]), st.integers(0, min(t[0], t[1])),
                            st.just(t[2]), st.integers(0, min(t[0], t[2])))))


@settings(max_examples=40, deadline=None)
@given(st.lists(_entry_pair, min_size=1, max_size=12), st.integers(0, 2**32 - 1))
def test_swapping_baseline_and_system_negates_delta_and_keeps_p(rows, seed):
    a = _strict_report([(g, pa, ta) for g, pa, ta, _, _ in rows])
    b = _strict_report([(g, pb, tb) for g, _, _, pb, tb in rows])
    kw = {"bootstrap": 50, "trials": 200, "seed": seed, "correction": "holm", "families": [ev.StrictFamily()]}
    ab = ev.compare_systems({"a": a, "b": b}, baseline="a", **kw)["metrics"]["b"]
    ba = ev.compare_systems({"b": b, "a": a}, baseline="b", **kw)["metrics"]["a"]
    for path in ab:
        assert ba[path]["delta"] == -ab[path]["delta"], path
        assert ba[path]["p_value"] == ab[path]["p_value"], path
        assert ba[path]["p_adjusted"] == ab[path]["p_adjusted"], path
        assert ba[path]["delta_ci"] == pytest.approx([-ab[path]["delta_ci"][1], -ab[path]["delta_ci"][0]],
                                                     abs=1e-12), path


# ---------------------------------------------------------------- benchmark families on the shared data

T2KG = SHARED_DATA / "text2kgbench" / "data" / "dbpedia_webnlg"
WEBNLG = SHARED_DATA / "webnlg2020"


def _need_shared(path: Path, what: str) -> None:
    if not path.exists():
        pytest.skip(f"{what} not available at {path} (shared test data is not shipped)")
    if not NLTK_DATA.is_dir():
        pytest.skip(f"NLTK data not available at {NLTK_DATA}")


def _cli_report(tmp_path: Path, name: str, *args) -> dict:
    out = tmp_path / f"{name}.json"
    proc = run_cli(*args, "--no-embeddings", "--quiet", "--report", out, env={"NLTK_DATA": str(NLTK_DATA)})
    assert proc.returncode == 0, proc.stderr
    return load_report(out)


def _check_comparison(report: dict, names, tol: float) -> dict:
    families = headline_families(names)
    values = full_sample_headlines(report, families)
    for path, value in values.items():
        want = section_value(report, path)
        if want is None:
            assert math.isnan(value), path
        else:
            assert value == pytest.approx(want, rel=tol, abs=0), path
    out = ev.compare_systems({"s": report}, baseline="s", bootstrap=1000, trials=0, seed=4, correction=None,
                             families=ev.families_for(names))
    for path, row in out["metrics"]["s"].items():
        if row["estimate"] is not None:
            assert row["ci"][0] <= row["estimate"] <= row["ci"][1], path
    return out


def test_text2kgbench_directory_mode_resamples_within_each_ontology(tmp_path):
    _need_shared(T2KG, "shared Text2KGBench data")
    dirs = {k: tmp_path / k for k in ("pred", "gold", "onto")}
    for d in dirs.values():
        d.mkdir()
    keys = ("1_university", "3_airport", "9_astronaut")
    for key in keys:
        gt = f"ont_{key}_ground_truth.jsonl"
        (dirs["gold"] / gt).symlink_to(T2KG / "ground_truth" / gt)
        (dirs["onto"] / f"{key}_ontology.json").symlink_to(T2KG / "ontologies" / f"{key}_ontology.json")
        resp = next((T2KG / "baselines" / "Vicuna-13B" / "llm_responses").glob(f"{key}_*.jsonl"))
        (dirs["pred"] / resp.name).symlink_to(resp)
    names = ("hgr", "strict", "text2kgbench")
    report = _cli_report(tmp_path, "t2kg", "--pred", dirs["pred"], "--gold", dirs["gold"], "--ontology",
                         dirs["onto"], "--metrics", ",".join(names))
    # global row: the mean of per-ontology averages each rounded once, then a float mean
    # (the section's is exact): equal within 1e-15 relative
    out = _check_comparison(report, names, 1e-15)
    assert [p for p in out["metrics"]["s"] if p.startswith("text2kgbench.")] == [
        f"text2kgbench.global_as_script.{k}" for k in ev.T2KG_METRIC_KEYS]
    assert any("within each of 3 strata" in n for n in out["notes"])
    families = headline_families(names)
    data = ev.headline_data([entry_records(report, families)], families)
    assert data.strata_names == list(keys)
    sizes = np.bincount(data.strata)
    w = ev.resample_counts(np.random.Generator(np.random.PCG64(0)), data.strata, 50)
    for s, size in enumerate(sizes):  # each ontology keeps its number of sentences in every resample
        assert np.all(w[:, data.strata == s].sum(axis=1) == size)
    # in directory mode every family is resampled within the ontologies, text2kgbench run or not
    alone = ev.compare_systems({"s": report}, baseline="s", bootstrap=1000, trials=0, seed=4, correction=None,
                               families=ev.families_for(("hgr", "strict")))
    assert any("within each of 3 strata" in n for n in alone["notes"])
    assert alone["metrics"]["s"]["hgr.macro.composite"] == out["metrics"]["s"]["hgr.macro.composite"]


def test_webnlg2020_headlines_on_the_shared_data(tmp_path):
    _need_shared(WEBNLG, "shared WebNLG+ 2020 data")
    names = ("hgr", "strict", "webnlg2020")
    report = _cli_report(tmp_path, "web", "--pred", WEBNLG / "amazon_unseen_entities.jsonl", "--gold",
                         WEBNLG / "refs_unseen_entities.jsonl", "--metrics", ",".join(names))
    # an entry's exact P/R/F1 sum that is not a float is rounded once per entry: within 1e-15
    out = _check_comparison(report, names, 1e-15)
    assert sum(p.startswith("webnlg2020.Total_scores.") for p in out["metrics"]["s"]) == 12


# ---------------------------------------------------------------- memory bounded in B and R

def _two_system_data(sample_reports):
    families = headline_families()
    records = [entry_records(sample_reports[n], families) for n in ("base", "finetuned")]
    return ev.headline_data(records, families), families


def test_grouping_of_the_blocks_changes_no_number(sample_reports, monkeypatch):
    # the random stream is drawn block by block (RESAMPLE_BLOCK rows); HEADLINE_ROWS only groups
    # blocks before the metrics are computed: one block per group gives the same bits
    data, families = _two_system_data(sample_reports)
    observed = {p: 0.01 for p in ev.headline_values(families, data.sums(data.sliced[0].sum(axis=0)[None, :]))}
    boot = ev.bootstrap_replicates(data, families, 1000, seed=3)
    test = ev.randomization_test(data, families, 1, 0, 1000, 3, observed)
    monkeypatch.setattr(ev, "HEADLINE_ROWS", 1)
    assert ev._block_rows(data.n) < 1000  # several groups now
    again = ev.bootstrap_replicates(data, families, 1000, seed=3)
    for s in range(2):
        for path in boot[s]:
            np.testing.assert_array_equal(boot[s][path], again[s][path])
    assert ev.randomization_test(data, families, 1, 0, 1000, 3, observed) == test


def test_randomization_memory_does_not_grow_with_the_trials(sample_reports):
    import tracemalloc
    data, families = _two_system_data(sample_reports)
    observed = {p: 0.0 for p in ev.headline_values(families, data.sums(data.sliced[0].sum(axis=0)[None, :]))}

    def peak(trials: int) -> int:
        tracemalloc.start()
        ev.randomization_test(data, families, 1, 0, trials, 1, observed)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(2 * ev.HEADLINE_ROWS), peak(12 * ev.HEADLINE_ROWS)
    # before: R x columns sums and R values per metric were held (about 6 times more at 6 times R)
    assert large < 1.5 * small, (small, large)


def test_bootstrap_and_trials_above_their_limits_are_refused(sample_reports):
    with pytest.raises(ValueError, match="bootstrap must be <= 1000000"):
        compare(sample_reports, "base", bootstrap=ev.MAX_BOOTSTRAP + 1)
    with pytest.raises(ValueError, match="trials <= 10000000"):
        compare(sample_reports, "base", trials=ev.MAX_TRIALS + 1)


# ------------------------------------------- macro metrics N/A on some entries: paired on joint entries

def _joint_case(differing: int) -> dict:
    """Relation accuracy per entry, baseline a vs system b: entries 0..differing-1: a 0 (wrong
    relation), b 1; entry `differing`: both 1; the next entry: a 1, b N/A (no entity match);
    the next: a N/A, b N/A."""
    g = [T(f"Src{k}", "part_of", f"Dst{k}") for k in range(differing + 3)]
    a = [[T(t["source"]["title"], "uses", t["target"]["title"])] for t in g[:differing]] + [[g[differing]], [g[differing + 1]]]
    b = [[g[k]] for k in range(differing + 1)] + [[T("Noise", "uses", "Thing")]]
    a.append([T("Other", "uses", "Stuff")])
    b.append([T("Other", "uses", "Stuff")])
    return {name: json.loads(json.dumps(run([entry([gk], p, k=k) for k, (gk, p) in enumerate(zip(g, preds))])))
            for name, preds in (("a", a), ("b", b))}


def test_macro_metric_with_na_entries_is_tested_on_the_jointly_defined_entries():
    reports = _joint_case(6)  # 9 entries; relation accuracy jointly defined on 7 (entries 0..6), 6 differ
    path = "hgr.macro.relation_accuracy"
    va = [r["metrics"]["relation_accuracy"] for r in reports["a"]["per_entry"]]
    vb = [r["metrics"]["relation_accuracy"] for r in reports["b"]["per_entry"]]
    assert va == [0.0] * 6 + [1.0, 1.0, None] and vb == [1.0] * 7 + [None, None]
    joint = [i for i in range(9) if va[i] is not None and vb[i] is not None]
    # exact enumeration of all 2^7 swaps of the 7 joint entries: |delta*| >= 6/7 only when the
    # 6 differing entries all go one way: 2 x 2 (entry 6 is equal) of 128 -> p = 1/32
    observed = (sum(vb[i] for i in joint) - sum(va[i] for i in joint)) / 7  # (7 - 1) / 7 = 6/7
    hits = 0
    for swaps in itertools.product((False, True), repeat=7):
        sb = [va[i] if s else vb[i] for i, s in zip(joint, swaps)]
        sa = [vb[i] if s else va[i] for i, s in zip(joint, swaps)]
        hits += abs(sum(sb) - sum(sa)) / 7 >= abs(observed) * (1 - ev.AR_TOLERANCE)
    assert hits == 4
    trials = 10_000
    out = ev.compare_systems(reports, baseline="a", bootstrap=200, trials=trials, seed=5, correction=None,
                             families=ev.families_for(FAMILIES))
    row = out["metrics"]["b"][path]
    exact = hits / 128
    assert abs(row["p_value"] - exact) <= 4 * math.sqrt(exact * (1 - exact) / trials) + 1 / (trials + 1)
    assert row["paired_entries"] == 7 and row["paired_of"] == 9 and row["paired_differing"] == 6
    assert row["paired_delta"] == pytest.approx(6 / 7)
    assert row["delta"] == pytest.approx(1.0 - 2 / 8)  # the estimates stay each system's own: 7/7 - 2/8
    assert row["significant"] is True  # 6 differing entries: p about 1/32 < 0.05
    assert any(n.startswith("paired on k of n entries") for n in out["notes"])
    # a metric defined on every entry of both systems has none of the paired fields
    assert "paired_entries" not in out["metrics"]["b"]["hgr.macro.composite"]
    text = ev.format_comparison({**out, "signature": "sig"})
    assert f"paired on 7 of 9 entries (delta on those; 6 differ)" in text


def test_fewer_than_six_differing_joint_entries_mark_nothing():
    reports = _joint_case(5)  # 5 differing joint entries: the smallest two-sided p is 2/32 = 0.0625
    out = ev.compare_systems(reports, baseline="a", bootstrap=0, trials=2000, seed=5, correction="holm",
                             families=ev.families_for(FAMILIES))
    row = out["metrics"]["b"]["hgr.macro.relation_accuracy"]
    assert row["paired_entries"] == 6 and row["paired_differing"] == 5 and row["significant"] is False
    assert row["p_value"] >= 0.05
    # Holm adjusts the paired p-value with the others of the family (m = the tested metrics)
    paths = list(out["metrics"]["b"])
    raw = [out["metrics"]["b"][p]["p_value"] for p in paths]
    assert row["p_adjusted"] == ev.holm_adjust(raw)[paths.index("hgr.macro.relation_accuracy")]
    text = ev.format_comparison({**out, "signature": "sig"})
    assert "paired on 6 of 8 entries (delta on those; 5 differ: too few to mark)" in text


# ------------------------------- a paired test and a correction added through the registries alone

class ToyTest(ev.PairedTest):
    """A toy paired test (README "How to add a statistical test"): p = 1 / (1 + 1000 |delta|)
    of the observed difference, no trials left out; deterministic, so the values are known."""

    name = "toy"
    choice = "toy (1 / (1 + 1000 |delta|))"
    title = "toy test"

    def p_values(self, data, families, system, baseline, trials, seed, observed):
        return {path: (None if math.isnan(d) else 1 / (1 + 1000 * abs(d)), 0) for path, d in observed.items()}

    def note(self, trials):
        return "toy p = 1 / (1 + 1000 |delta|)"

    def legend(self, trials):
        return "the toy test"

    def done(self, trials):
        return "the toy test"


class Bonferroni(ev.Correction):
    """A toy correction (README "How to add a correction"): Bonferroni, p~ = min(1, m p)."""

    name = "bonferroni"
    title = "Bonferroni"
    column = "Bonf p"

    def adjust(self, p_values):
        m = sum(p is not None for p in p_values)
        return [None if p is None else min(1.0, m * p) for p in p_values]

    def note(self):
        return "after Bonferroni's correction"

    def legend(self):
        return "Bonferroni-adjusted p < 0.05 (--correction bonferroni)"


@pytest.fixture
def toy_registered(monkeypatch):
    """The one registry line of each (undone after the test by monkeypatch)."""
    monkeypatch.setitem(ev.PAIRED_TESTS, "toy", ToyTest())
    monkeypatch.setitem(ev.CORRECTIONS, "bonferroni", Bonferroni())


def test_a_test_and_a_correction_added_through_the_registries_alone(sample_reports, toy_registered):
    out = compare(sample_reports, "base", bootstrap=0, trials=100, test="toy", correction="bonferroni")
    assert list(out)[:6] == ["baseline", "bootstrap", "trials", "test", "seed", "correction"]
    assert (out["test"], out["correction"]) == ("toy", "bonferroni")
    rows = out["metrics"]["finetuned"]
    tested = [p for p, r in rows.items() if r["p_value"] is not None]
    assert len(tested) == len(rows) == 21  # every headline metric of hgr, strict
    for path, row in rows.items():
        delta = row.get("paired_delta", row["delta"])
        assert row["p_value"] == pytest.approx(1 / (1 + 1000 * abs(delta)), rel=1e-9), path
        assert row["p_adjusted"] == pytest.approx(min(1.0, 21 * row["p_value"]), rel=1e-12), path
        testable = row.get("paired_differing", 6) >= 6
        assert row["significant"] == (testable and row["p_adjusted"] < 0.05), path
    # entity recall +14/29: Bonferroni p~ = 21 / (1 + 1000 * 14/29) = 0.0434 < 0.05, marked;
    # strict micro F1 0.6441 - 0.2819: p~ = 21 / (1 + 362.19) = 0.0578, not marked
    recall, f1 = rows["hgr.micro.entity_recall"], rows["strict.micro.f1"]
    assert recall["delta"] == pytest.approx(14 / 29) and recall["p_adjusted"] == pytest.approx(21 / (1 + 14000 / 29))
    assert recall["significant"] is True
    assert f1["delta"] == pytest.approx(0.6440677966101694 - 0.28187919463087246)
    assert f1["p_adjusted"] == pytest.approx(0.0578212, abs=1e-7) and f1["significant"] is False
    assert any(r["significant"] for r in rows.values()) and not all(r["significant"] for r in rows.values())
    assert "delta: system minus baseline base; delta_ci: paired bootstrap on the same resamples; p_value: toy p = " \
           "1 / (1 + 1000 |delta|)" in out["notes"]
    assert "significant: p < 0.05 after Bonferroni's correction" in out["notes"]
    text = ev.format_comparison({**out, "signature": "sig"})
    assert "comparison of 2 systems, baseline base: no intervals (--bootstrap 0), the toy test" in text
    header = next(line for line in text.splitlines() if line.startswith("finetuned - base"))
    assert header.split()[-3:] == ["p", "Bonf", "p"]
    legend = ev.legend_lines({"systems": sample_reports, "comparison": {**out, "signature": "sig"}})
    assert ("\u2020 different from the baseline base: the toy test, Bonferroni-adjusted p < 0.05 "
            "(--correction bonferroni).") in legend
    # the no-correction legend offers every registered correction
    none = compare(sample_reports, "base", bootstrap=0, trials=100, test="toy")
    assert "test" in none and none["correction"] is None
    legend = ev.legend_lines({"systems": sample_reports, "comparison": {**none, "signature": "sig"}})
    assert ("\u2020 different from the baseline base: the toy test, p < 0.05, with no correction for multiple "
            "comparisons (give --correction holm for Holm-Bonferroni or --correction bonferroni for "
            "Bonferroni).") in legend


def test_a_registered_test_and_correction_are_command_line_choices(tmp_path, toy_registered):
    pred = [a for name in ("base", "finetuned") for a in ("--pred", ROOT / "predictions" / f"{name}.jsonl")]
    common = [*pred, "--gold", ROOT / "gold" / "gold.jsonl", "--no-embeddings", "--bootstrap", "0"]
    rc, out, err = run_main(*common, "--trials", "50", "--test", "toy", "--correction", "bonferroni",
                            "--report", tmp_path / "c.json")
    assert rc == 0, err
    report = load_report(tmp_path / "c.json")
    block = report["comparison"]
    assert (block["test"], block["correction"], block["trials"]) == ("toy", "bonferroni", 50)
    assert "|boot:0|trials:50|test:toy|seed:12345|corr:bonferroni|numpy:" in block["signature"]
    assert block["metrics"]["finetuned"]["strict.micro.f1"]["p_value"] == pytest.approx(
        1 / (1 + 1000 * abs(block["metrics"]["finetuned"]["strict.micro.f1"]["delta"])))
    assert "Bonf p" in out and "the toy test" in out
    usage = ev.build_parser().format_usage()
    assert "[--correction {none,holm,bonferroni}]" in usage and "[--test {randomization,toy}]" in usage
    rc, out, err = run_main(*common, "--trials", "0", "--test", "toy", "--no-report")
    assert rc == 2 and "--test toy chooses the test of the p-values, but --trials 0 computes none" in err
    rc, out, err = run_main(*common, "--trials", "0", "--correction", "bonferroni", "--no-report")
    assert rc == 2 and "--correction bonferroni adjusts the p-values of the randomisation test" in err


def test_the_default_test_and_no_correction_leave_the_block_and_signature_as_before(sample_reports):
    out = compare(sample_reports, "base", bootstrap=0, trials=100, correction="none")
    assert "test" not in out and out["correction"] is None  # "none" is the same as no correction
    assert ev.comparison_methods(out) == (ev.PAIRED_TESTS["randomization"], ev.CORRECTIONS["none"])
    assert ev.PAIRED_TESTS["randomization"].signature() == []
    assert "--test" not in ev.build_parser().format_help()  # one test: no choice, the usage as before
    with pytest.raises(ValueError, match="test must be one of"):
        compare(sample_reports, "base", test="toy")


# ---------------------------------------------------------------- slices (--slice-by)

def _subset_files(tmp_path, name, gold_path, pred_paths, ids):
    """Gold and prediction files holding only the lines whose id is in ``ids`` (in order)."""
    out = []
    for path in (gold_path, *pred_paths):
        lines = [x for x in path.read_text(encoding="utf-8").splitlines() if json.loads(x)["id"] in ids]
        target = tmp_path / f"{name}.{path.name}"
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
        out.append(target)
    return out


def _slice_of(report, key, label):
    return next(s for s in report["slices"]["keys"][key] if s["label"] == label)


def test_slices_equal_runs_on_their_entries_webnlg(tmp_path):
    """Every slice's numbers (estimates, intervals, deltas, p-values) equal those of a run on
    the slice's entries alone, with the same options: WebNLG's category, size, shape_type."""
    from helpers import cli
    _need_shared(WEBNLG, "shared WebNLG+ 2020 data")
    gold = WEBNLG / "refs_unseen_entities.jsonl"
    preds = [WEBNLG / "amazon_unseen_entities.jsonl", WEBNLG / "baseline_unseen_entities.jsonl"]
    opts = ("--metrics", "hgr,strict", "--bootstrap", "100", "--trials", "100", "--name", "amazon", "--name", "base")
    keys = ("category", "size", "shape_type")
    rc, _, err, whole = cli(tmp_path, "--pred", str(preds[0]), "--pred", str(preds[1]), "--gold", str(gold), *opts,
                            *(x for k in keys for x in ("--slice-by", k)))
    assert rc == 0, err
    refs = [json.loads(x) for x in gold.read_text(encoding="utf-8").splitlines()]
    for key in keys:
        slices = whole["slices"]["keys"][key]
        assert sum(s["n_entries"] for s in slices) == len(refs) == 457
        counts = {s["value"]: s["n_entries"] for s in slices}
        assert counts == dict(sorted(((v, sum(r[key] == v for r in refs)) for v in {r[key] for r in refs}),
                                     key=lambda kv: kv[0]))  # strings: code-point order; integers: ascending
    for key, label in (("category", "Athlete"), ("size", "1"), ("size", "7"), ("shape_type", "chain")):
        ids = {r["id"] for r in refs if str(r[key]) == label}
        g, p1, p2 = _subset_files(tmp_path, f"{key}-{label}", gold, preds, ids)
        rc, _, err, alone = cli(tmp_path, "--pred", str(p1), "--pred", str(p2), "--gold", str(g), *opts)
        assert rc == 0, err
        mine = _slice_of(whole, key, label)
        assert mine["n_entries"] == len(ids) == alone["systems"]["amazon"]["summary"]["n_entries"]
        assert mine["metrics"] == alone["comparison"]["metrics"]
        assert mine["metrics"]["amazon"]["hgr.macro.composite"]["estimate"] == \
            alone["systems"]["amazon"]["summary"]["macro"]["composite"]


def test_slices_equal_runs_on_their_entries_sample(tmp_path):
    """The sample (25 entries), by n_gold: hand-counted bins 0 (1 entry), 1-2 (1), 3-5 (23);
    each equals the run on its entries alone (one system, intervals)."""
    from helpers import cli
    gold, pred = ROOT / "gold" / "gold.jsonl", ROOT / "predictions" / "finetuned.jsonl"
    rc, _, err, whole = cli(tmp_path, "--pred", str(pred), "--gold", str(gold), "--bootstrap", "100",
                            "--slice-by", "n_gold", "--slice-by", "prompt_chars")
    assert rc == 0, err
    assert [(s["label"], s["n_entries"]) for s in whole["slices"]["keys"]["n_gold"]] == \
        [("0", 1), ("1-2", 1), ("3-5", 23)]
    rows = {r["id"]: r for r in whole["per_entry"]}
    for label in ("0", "1-2", "3-5"):  # every bin of the sample
        ids = {i for i, r in rows.items() if r["slices"]["n_gold"] == label}
        g, p = _subset_files(tmp_path, label, gold, [pred], ids)
        rc, _, err, alone = cli(tmp_path, "--pred", str(p), "--gold", str(g), "--bootstrap", "100", "--name",
                                "finetuned")
        assert rc == 0, err
        assert _slice_of(whole, "n_gold", label)["metrics"] == alone["comparison"]["metrics"]
    # the one entry without gold triplets: the method scores an empty answer to it as perfect
    assert _slice_of(whole, "n_gold", "0")["metrics"]["finetuned"]["hgr.macro.composite"]["estimate"] == 1.0


# ---------------------------------------------------------------- several samples per entry

def hgr_record(gold: int, items: int, tp: int, composite: float, type_agreement: float | None = None) -> dict:
    """An hgr per-entry record with the counts and macro values the tests below read."""
    macro = {"composite": composite, **({} if type_agreement is None else {"type_agreement": type_agreement})}
    return {"hgr": {"totals": {"gold_triplets": gold, "pred_triplet_items": items, "entity_true_positives": tp,
                               "full_triplet_true_positives": tp, "hard_hallucinations": 0},
                    "macro_sum": macro, "macro_n": dict.fromkeys(macro, 1)}}


#: 3 entries x 2 samples: (gold, items, entity tp, composite, type agreement or None = N/A).
TWO_SAMPLES = [
    [(2, 2, 2, 1.0, 1.0), (2, 1, 0, 0.25, None)],
    [(1, 3, 1, 0.5, 0.5), (1, 1, 1, 0.75, 0.0)],
    [(3, 0, 0, 0.0, None), (3, 2, 1, 0.375, None)],
]


def two_sample_value(draws, path: str) -> Fraction | None:
    """The headline ``path`` of one two-stage resample, computed by hand: ``draws`` lists
    (entry, (sample picked first, sample picked second)) per entry draw. Each draw averages
    the entry over its two picks; micro = ratios of the summed averages; the macro
    composite = mean over the draws of the draws' means; type agreement: per draw the mean
    over its picks that define it (the draw N/A when none does), then the mean over the
    draws that define it."""
    if path == "hgr.macro.composite":
        return sum((Fraction(TWO_SAMPLES[i][a][3]) + Fraction(TWO_SAMPLES[i][b][3])) / 2 for i, (a, b) in draws) / 3
    if path == "hgr.macro.type_agreement":
        means = []
        for i, picks in draws:
            own = [Fraction(TWO_SAMPLES[i][s][4]) for s in picks if TWO_SAMPLES[i][s][4] is not None]
            if own:
                means.append(sum(own) / len(own))
        return sum(means) / len(means) if means else None
    gold, items, tp = (sum(Fraction(TWO_SAMPLES[i][a][k] + TWO_SAMPLES[i][b][k], 2) for i, (a, b) in draws)
                       for k in range(3))
    p = tp / items if items else Fraction(0)
    r = tp / gold if gold else Fraction(0)
    return 2 * p * r / (p + r) if p + r else Fraction(0)


def two_sample_data() -> tuple[ev.HeadlineData, list]:
    families = [ev.HgrFamily()]
    records = [[hgr_record(*sample) for sample in entry_samples] for entry_samples in TWO_SAMPLES]
    return ev.headline_data([records], families), families


def test_the_estimate_averages_each_entry_over_its_samples():
    data, families = two_sample_data()
    assert data.scale == 2 and data.samples[0].k == 2
    got = ev.headline_values(families, data.sums(data.sliced[0].sum(axis=0)[None, :]))
    every = [(i, (0, 1)) for i in range(3)]  # each entry once, each sample once
    # composite: ((1 + 1/4)/2 + (1/2 + 3/4)/2 + (0 + 3/8)/2) / 3 = (5/8 + 5/8 + 3/16) / 3 = 23/48
    assert two_sample_value(every, "hgr.macro.composite") == Fraction(23, 48)
    # type agreement: entry 0 defines it in sample 0 only (1), entry 1 in both ((1/2 + 0)/2 = 1/4),
    # entry 2 in neither (N/A): (1 + 1/4) / 2 = 5/8, not the pooled (1 + 1/2 + 0) / 3 = 1/2
    assert two_sample_value(every, "hgr.macro.type_agreement") == Fraction(5, 8)
    # micro entity F1: tp (2 + 0 + 1 + 1 + 0 + 1)/2 = 5/2, items (2 + 1 + 3 + 1 + 0 + 2)/2 = 9/2,
    # gold (2 + 2 + 1 + 1 + 3 + 3)/2 = 6: P = 5/9, R = 5/12, F1 = 2PR/(P + R) = 10/21 (pooled samples)
    assert two_sample_value(every, "hgr.micro.entity_f1") == Fraction(10, 21)
    for path in ("hgr.macro.composite", "hgr.macro.type_agreement"):
        assert float(got[path][0]) == float(two_sample_value(every, path)), path
    # F1 from the rounded P and R, as a single run computes it (f1_score)
    assert float(got["hgr.micro.entity_f1"][0]) == ev.f1_score(float(Fraction(5, 9)), float(Fraction(5, 12)))


def test_two_stage_bootstrap_against_exact_enumeration():
    # every resample: 3 entry draws with replacement (3**3 = 27 ordered outcomes), then for each
    # drawn entry its 2 samples drawn with replacement (2**2 = 4 ordered outcomes each, 4**3 = 64):
    # 1,728 equally likely outcomes, enumerated; 60,000 seeded replicates must take only those values,
    # with the enumerated frequencies and mean
    data, families = two_sample_data()
    big_b = 60000
    reps = ev.bootstrap_replicates(data, families, big_b, seed=11)[0]
    pairs = list(itertools.product(range(2), repeat=2))
    for path in ("hgr.macro.composite", "hgr.macro.type_agreement", "hgr.micro.entity_f1"):
        exact = [two_sample_value(list(zip(entries, picks)), path)
                 for entries in itertools.product(range(3), repeat=3)
                 for picks in itertools.product(pairs, repeat=3)]
        assert len(exact) == 1728
        defined = [float(v) for v in exact if v is not None]
        support = sorted(set(defined))
        got = reps[path]
        # the N/A resamples (type agreement: every draw undefined) in their share
        na_share = (len(exact) - len(defined)) / len(exact)
        assert abs(np.isnan(got).mean() - na_share) <= 5 * math.sqrt(na_share * (1 - na_share) / big_b) + 1e-12
        values = got[~np.isnan(got)]
        nearest = np.searchsorted(support, values).clip(0, len(support) - 1)
        below = (nearest - 1).clip(0)
        gap = np.minimum(np.abs(np.array(support)[nearest] - values), np.abs(np.array(support)[below] - values))
        assert gap.max() <= 1e-12, path  # every replicate is an enumerated value
        for value in support:
            p = defined.count(value) / len(exact) / (1 - na_share)
            f = np.count_nonzero(np.abs(values - value) <= 1e-12) / len(values)
            assert abs(f - p) <= 5 * math.sqrt(p * (1 - p) / len(values)) + 1e-9, (path, value)
        mean = sum(defined) / len(defined)
        sd = math.sqrt(sum((v - mean) ** 2 for v in defined) / len(defined))
        assert abs(values.mean() - mean) <= 5 * sd / math.sqrt(len(values)), path


def test_identical_samples_give_the_single_sample_numbers_bit_for_bit(sample_reports):
    families = headline_families()
    records = entry_records(sample_reports["finetuned"], families)
    one = ev.headline_data([records], families)
    three = ev.headline_data([[[r, r, r] for r in records]], families)
    assert three.scale == 6
    whole = [ev.headline_values(families, d.sums(d.sliced[0].sum(axis=0)[None, :])) for d in (one, three)]
    for path, value in whole[0].items():
        assert np.array_equal(value, whole[1][path], equal_nan=True), path
    # the averages of three equal values are exact: every replicate of the two-stage bootstrap
    # is the replicate of the single sample on the same entry resamples
    single, triple = (ev.bootstrap_replicates(d, families, 300, seed=4)[0] for d in (one, three))
    for path, value in single.items():
        assert np.array_equal(value, triple[path], equal_nan=True), path


def test_a_single_sample_system_keeps_its_replicates_next_to_a_system_of_samples(sample_reports):
    families = headline_families()
    base, fine = (entry_records(sample_reports[n], families) for n in ("base", "finetuned"))
    alone = ev.bootstrap_replicates(ev.headline_data([base, fine], families), families, 500, seed=3)
    mixed = ev.bootstrap_replicates(ev.headline_data([base, [[f, b] for f, b in zip(fine, base)]], families),
                                    families, 500, seed=3)
    for path, value in alone[0].items():
        assert np.array_equal(value, mixed[0][path], equal_nan=True), path


def test_variance_components_by_hand():
    # entries [1, 3] and [5, 7, 9]: a = 2, N = 5, means 2 and 7, grand mean 25/5 = 5
    # MSB = (2 (2 - 5)^2 + 3 (7 - 5)^2) / (2 - 1) = 30; MSW = (1 + 1 + 4 + 0 + 4) / (5 - 2) = 10/3
    # n0 = (5 - (2^2 + 3^2)/5) / 1 = 12/5; between = (30 - 10/3) / (12/5) = 100/9
    vc = ev.variance_components([[1.0, 3.0], [5.0, 7.0, 9.0]])
    assert (vc["entries"], vc["observations"]) == (2, 5)
    assert vc["n0"] == 2.4 and vc["ms_between"] == 30.0 and vc["ms_within"] == float(Fraction(10, 3))
    assert vc["between_entry"] == vc["between_entry_anova"] == float(Fraction(100, 9))
    assert vc["within_entry"] == float(Fraction(10, 3)) and vc["truncated"] is False
    assert vc["within_share"] == float(Fraction(10, 3) / (Fraction(100, 9) + Fraction(10, 3)))  # 3/13
    # entries [0, 10] and [4, 6]: equal means, MSB = 0 < MSW = (25 + 25 + 1 + 1) / 2 = 26,
    # n0 = (4 - 8/4) / 1 = 2: between = -13, reported as 0 (truncated)
    neg = ev.variance_components([[0.0, 10.0], [4.0, 6.0]])
    assert neg["between_entry_anova"] == -13.0 and neg["between_entry"] == 0.0 and neg["truncated"] is True
    assert neg["within_share"] == 1.0
    assert ev.variance_components([[1.0], [2.0]]) is None  # no entry with two samples
    assert ev.variance_components([[1.0, 2.0]]) is None  # one entry


def test_hgr_sample_weights_average_a_macro_pair_over_the_samples_that_define_it():
    counts = np.array([[1, 1, 1], [2, 0, 1], [0, 3, 0]])
    defined = np.array([[1, 0, 1], [1, 0, 1], [0, 1, 0]], dtype=float)
    out = ev.HgrFamily().sample_weights({"macro_n/type_agreement": defined, "macro_sum/type_agreement": defined},
                                        counts)
    weights, divisor = out["macro_sum/type_agreement"]
    assert out["macro_n/type_agreement"][0] is weights
    assert weights.tolist() == [[1, 0, 1], [2, 0, 1], [0, 3, 0]] and divisor.tolist() == [2, 3, 3]
    assert ev.MetricFamily().sample_weights({}, counts) == {}  # the default: plain means
