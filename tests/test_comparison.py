"""Command line, several systems: repeated ``--pred`` (one run scores every system),
``--compare`` (saved reports), ``--bootstrap`` on a single run, system names, the
reproducibility signature, and the refusals (issue #10 items 1, 4, 9, 10).

The statistics themselves (intervals, p-values) are tested in test_statistics.py; here the
command line is checked: each system's numbers are exactly its own run's, the layout, the
names, the signature and what is refused."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import run_main
from helpers import ROOT, load_report, write_jsonl

import evaluate as ev

BASE = ROOT / "predictions" / "base.jsonl"
FINETUNED = ROOT / "predictions" / "finetuned.jsonl"
GOLD = ROOT / "gold" / "gold.jsonl"

#: Small resampling settings (the statistics are tested elsewhere); every run here is lexical.
FAST = ("--bootstrap", "200", "--trials", "500")


def cli(*args, cwd: Path = ROOT) -> tuple[int, str, str]:
    rc, out, err = run_main(*args, "--no-embeddings" if "--compare" not in args else "--quiet", cwd=cwd)
    return rc, out, err


def single(tmp_path: Path, pred: Path, name: str, *extra: str) -> dict:
    report = tmp_path / f"{name}.json"
    rc, out, err = cli("--pred", pred, "--gold", GOLD, "--report", report, *extra)
    assert rc == 0, err
    return load_report(report)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Single runs of base and finetuned, and the two-system run of both (default options)."""
    tmp = tmp_path_factory.mktemp("systems")
    out = {"base": single(tmp, BASE, "base"), "finetuned": single(tmp, FINETUNED, "finetuned")}
    both = tmp / "both.json"
    rc, text, err = cli("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--report", both)
    assert rc == 0, err
    out.update(both=load_report(both), both_path=both, text=text, dir=tmp)
    return out


# ------------------------------------------------------------------ one run, several systems


def test_each_system_inside_a_comparison_is_exactly_its_single_run_report(runs):
    both = runs["both"]
    assert list(both) == ["systems", "comparison"]
    assert list(both["systems"]) == ["base", "finetuned"]
    # the whole single-run report, every key (summary with inputs, config and signature,
    # every family section, per_entry with stats): nothing in it is specific to the run
    assert both["systems"]["base"] == runs["base"]
    assert both["systems"]["finetuned"] == runs["finetuned"]


def test_comparison_block_layout_and_estimates(runs):
    block = runs["both"]["comparison"]
    assert (block["baseline"], block["bootstrap"], block["trials"], block["seed"], block["correction"]) == \
        ("base", ev.DEFAULT_BOOTSTRAP, ev.DEFAULT_TRIALS, ev.DEFAULT_SEED, None)
    assert list(block["metrics"]) == ["base", "finetuned"]
    base, fine = block["metrics"]["base"], block["metrics"]["finetuned"]
    # estimates are the numbers of each system's own report
    assert base["hgr.micro.entity_f1"]["estimate"] == runs["base"]["summary"]["micro"]["entity_f1"]
    assert fine["hgr.macro.composite"]["estimate"] == runs["finetuned"]["summary"]["macro"]["composite"]
    assert fine["strict.micro.f1"]["estimate"] == runs["finetuned"]["strict"]["micro"]["f1"]
    assert "delta" not in base["hgr.macro.composite"]
    row = fine["hgr.macro.composite"]
    assert row["delta"] == row["estimate"] - base["hgr.macro.composite"]["estimate"]
    assert set(row) >= {"estimate", "ci", "na_resamples", "delta", "delta_ci", "p_value", "p_adjusted", "significant"}
    assert row["ci"][0] <= row["estimate"] <= row["ci"][1]


def test_text_prints_each_summary_and_signature_then_the_comparison(runs):
    text, both = runs["text"], runs["both"]
    assert text.count("kg-triplet-eval 0.1.0  ") == 2
    assert f"base: {BASE} vs {GOLD}" in text and f"finetuned: {FINETUNED} vs {GOLD}" in text
    for name in ("base", "finetuned"):
        assert f"signature: {both['systems'][name]['summary']['signature']}" in text
    comparison = text[text.index("comparison of 2 systems, baseline base"):]
    assert "finetuned - base" in comparison and "hgr.macro.composite" in comparison
    # the last line: stdout carries the summary alone
    assert comparison.rstrip().splitlines()[-1] == f"signature: {both['comparison']['signature']}"
    assert "no correction for multiple comparisons" in comparison


def test_same_seed_gives_byte_identical_reports_and_another_seed_other_intervals(tmp_path):
    paths = [tmp_path / f"{k}.json" for k in ("a", "b", "c")]
    for path, seed in zip(paths, ("12345", "12345", "7")):
        rc, _, err = cli("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *FAST, "--seed", seed,
                         "--correction", "holm", "--report", path)
        assert rc == 0, err
    assert paths[0].read_bytes() == paths[1].read_bytes()
    a, c = load_report(paths[0])["comparison"], load_report(paths[2])["comparison"]
    assert a["metrics"] != c["metrics"] and a["signature"] != c["signature"]
    assert a["correction"] == "holm"
    assert a["metrics"]["finetuned"]["hgr.macro.composite"]["p_adjusted"] is not None


def test_zero_resamples_or_trials_leave_out_the_intervals_or_the_p_values(tmp_path):
    rc, out, err = cli("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--bootstrap", "0", "--trials", "0",
                       "--report", tmp_path / "r.json")
    assert rc == 0, err
    block = load_report(tmp_path / "r.json")["comparison"]
    row = block["metrics"]["finetuned"]["hgr.macro.composite"]
    assert (row["ci"], row["delta_ci"], row["p_value"], row["significant"]) == (None, None, None, False)
    assert row["delta"] == row["estimate"] - block["metrics"]["base"]["hgr.macro.composite"]["estimate"]
    assert "|boot:0|trials:0|" in block["signature"]
    # the header says what was done (it said "0 bootstrap resamples (percentile 95% intervals)")
    assert "comparison of 2 systems, baseline base: no intervals (--bootstrap 0), no p-values (--trials 0)\n" in out
    assert "percentile 95% intervals" not in out and "seed 12345" not in out
    table = out[out.index("finetuned - base"):]
    assert table.splitlines()[0].split() == ["finetuned", "-", "base", "delta"]  # no "[95% interval]", no p
    assert next(ln for ln in table.splitlines() if ln.startswith("hgr.macro.composite")).split() == \
        ["hgr.macro.composite", "+0.2947"]
    rc, out, err = cli("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--bootstrap", "0", "--trials", "500",
                       "--no-report")
    assert "baseline base: no intervals (--bootstrap 0), 500 approximate-randomisation trials, seed 12345\n" in out
    table = out[out.index("finetuned - base"):]
    assert table.splitlines()[0].split() == ["finetuned", "-", "base", "delta", "p"]
    rc, _, err = cli("--pred", BASE, "--gold", GOLD, "--bootstrap", "0", "--no-report")
    assert rc == 2 and "--bootstrap 0 on one system: nothing to compute" in err


def test_a_system_missing_entries_is_scored_as_its_single_run_scores_it(tmp_path):
    rows = [json.loads(x) for x in FINETUNED.read_text(encoding="utf-8").splitlines() if x.strip()]
    partial = write_jsonl(tmp_path / "partial.jsonl", rows[:-3])  # the last 3 gold ids have no line
    alone = single(tmp_path, partial, "alone")
    assert alone["summary"]["parse_status"]["missing"] == 3
    rc, _, err = cli("--pred", BASE, "--pred", partial, "--gold", GOLD, *FAST, "--report", tmp_path / "r.json")
    assert rc == 0, err
    both = load_report(tmp_path / "r.json")
    assert both["systems"]["partial"] == alone
    assert any("partial: 3 gold entries have no prediction" in n for n in both["comparison"]["notes"])


def _with_instruction(tmp_path: Path, source: Path, name: str, value) -> Path:
    """A copy of ``source`` whose every line records ``instruction`` = ``value`` (what
    generate_predictions.ipynb writes)."""
    rows = [json.loads(x) for x in source.read_text(encoding="utf-8").splitlines() if x.strip()]
    return write_jsonl(tmp_path / f"{name}.jsonl", [{**r, "instruction": value} for r in rows])


BARE = {"name": "none", "sha256": "d94db07385fd"}
SCHEMA = {"name": "schema", "sha256": "b2bf4f3e8940"}


def test_systems_generated_with_different_instructions_get_a_note_naming_both(runs, tmp_path):
    base = _with_instruction(tmp_path, BASE, "base", BARE)
    tuned = _with_instruction(tmp_path, FINETUNED, "finetuned", SCHEMA)
    rc, out, err = cli("--pred", base, "--pred", tuned, "--gold", GOLD, *FAST, "--report", tmp_path / "r.json")
    assert rc == 0, err
    report = load_report(tmp_path / "r.json")
    note = ("finetuned was generated with instruction schema (sha256 b2bf4f3e8940), the baseline base with none "
            "(sha256 d94db07385fd): the models were prompted differently (generate_predictions.ipynb's instruction "
            "parameter)")
    assert note in report["comparison"]["notes"] and note in out
    assert report["systems"]["base"]["summary"]["inputs"]["pred"]["instructions"] == [BARE]
    # the numbers are those of the files without the field: the field is read, never scored
    assert report["comparison"]["metrics"]["finetuned"]["hgr.macro.composite"]["estimate"] == \
        runs["finetuned"]["summary"]["macro"]["composite"]
    # saved reports: the same note
    for path, name in ((base, "b"), (tuned, "t")):
        assert cli("--pred", path, "--gold", GOLD, "--report", tmp_path / f"{name}.json")[0] == 0
    rc, out, err = cli("--compare", tmp_path / "b.json", tmp_path / "t.json", *FAST, "--no-report")
    assert rc == 0, err
    assert note.replace("finetuned", "t").replace("baseline base", "baseline b") in out


def test_same_instruction_or_none_recorded_gives_no_instruction_note(runs, tmp_path):
    chat = {"name": "chat", "sha256": None}
    base, tuned = (_with_instruction(tmp_path, p, n, SCHEMA) for p, n in ((BASE, "base"), (FINETUNED, "finetuned")))
    rc, out, err = cli("--pred", base, "--pred", tuned, "--gold", GOLD, *FAST, "--no-report")
    assert rc == 0, err
    assert "generated with instruction" not in out + err
    # recorded by one system only (the other file is not the notebook's): nothing to compare, no note
    rc, out, err = cli("--pred", BASE, "--pred", tuned, "--gold", GOLD, *FAST, "--no-report")
    assert rc == 0, err
    assert "generated with instruction" not in out + err
    # a chat input's own turns are named so
    chatty = _with_instruction(tmp_path, BASE, "chatty", chat)
    rc, out, err = cli("--pred", chatty, "--pred", tuned, "--gold", GOLD, *FAST, "--no-report")
    assert rc == 0, err
    assert "the baseline chatty with chat (the input's own turns)" in out
    # an 'instruction' field that is not the notebook's record is not read as one
    foreign = _with_instruction(tmp_path, FINETUNED, "foreign", "be brief")
    report = single(tmp_path, foreign, "foreign")
    assert "instructions" not in report["summary"]["inputs"]["pred"]


# ------------------------------------------------------------------ --compare: saved reports


def test_compare_of_saved_reports_equals_the_live_comparison(runs, tmp_path):
    d = runs["dir"]
    out = tmp_path / "cmp.json"
    rc, text, err = cli("--compare", d / "base.json", d / "finetuned.json", "--report", out)
    assert rc == 0, err
    saved = load_report(out)
    assert saved["comparison"] == runs["both"]["comparison"]
    assert out.read_bytes() == runs["both_path"].read_bytes()  # the whole report, byte for byte
    assert "comparison of 2 systems, baseline base" in text


def test_compare_accepts_a_report_of_several_systems(runs, tmp_path):
    out = tmp_path / "again.json"
    rc, _, err = cli("--compare", runs["both_path"], "--report", out)
    assert rc == 0, err
    assert out.read_bytes() == runs["both_path"].read_bytes()
    # with --name, one per system across every report, in order
    rc, _, err = cli("--compare", runs["both_path"], runs["dir"] / "finetuned.json", "--name", "b", "--name", "f",
                     "--name", "f2", "--report", out, "--overwrite")  # another run than the one `out` holds
    assert rc == 0, err
    report = load_report(out)
    assert list(report["systems"]) == ["b", "f", "f2"]
    assert report["comparison"]["metrics"]["f2"]["hgr.macro.composite"]["delta"] == \
        report["comparison"]["metrics"]["f"]["hgr.macro.composite"]["delta"]


def test_compare_notes_another_tool_version_and_refuses_another_configuration(runs, tmp_path):
    d = runs["dir"]
    other = load_report(d / "finetuned.json")
    other["summary"]["config"]["versions"]["kg-triplet-eval"] = "0.0.9"
    (tmp_path / "old.json").write_text(json.dumps(other), encoding="utf-8")
    rc, out, err = cli("--compare", d / "base.json", tmp_path / "old.json", "--no-report", *FAST)
    assert rc == 0, err
    assert "old was scored by kg-triplet-eval 0.0.9, the baseline base by 0.1.0" in out  # a note of the table
    # the signature names both versions (it said version:0.1.0, hiding 0.0.9)
    last = [x for x in out.splitlines() if x.startswith("signature: ")][-1]
    assert last.endswith(f"|version:{ev.__version__}+0.0.9|cmp-version:{ev.__version__}")
    same = load_report(d / "base.json")
    for report in (same, other):
        report["summary"]["config"]["versions"]["kg-triplet-eval"] = "0.0.9"
    (tmp_path / "old_base.json").write_text(json.dumps(same), encoding="utf-8")
    (tmp_path / "old.json").write_text(json.dumps(other), encoding="utf-8")
    rc, out, err = cli("--compare", tmp_path / "old_base.json", tmp_path / "old.json", "--no-report", *FAST)
    assert rc == 0, err
    last = [x for x in out.splitlines() if x.startswith("signature: ")][-1]
    assert last.endswith(f"|version:0.0.9|cmp-version:{ev.__version__}")
    other = load_report(d / "finetuned.json")
    other["summary"]["config"]["versions"]["kg-triplet-eval"] = "0.0.9"
    other["summary"]["config"]["sim_threshold"] = 0.85
    (tmp_path / "old.json").write_text(json.dumps(other), encoding="utf-8")
    rc, _, err = cli("--compare", d / "base.json", tmp_path / "old.json", "--no-report", *FAST)
    assert rc == 2
    assert "system old" in err and "another configuration" in err and "sim_threshold: 0.85 (baseline base: 0.8)" in err


def test_compare_allows_another_prediction_field_and_the_signature_lists_both(runs, tmp_path):
    other = single(tmp_path, FINETUNED, "tuned", "--pred-field", "output")
    assert other["summary"]["config"]["pred_field"] == "output"
    rc, out, err = cli("--compare", runs["dir"] / "base.json", tmp_path / "tuned.json", *FAST,
                       "--report", tmp_path / "c.json")
    assert rc == 0, err
    block = load_report(tmp_path / "c.json")["comparison"]
    assert "tuned was scored with pred_field output, the baseline base with none" in block["notes"]
    assert "|pred-field:none+output|" in block["signature"]
    # the same numbers as reading the field automatically (it is the one auto-detection picks)
    live = runs["both"]["comparison"]["metrics"]["finetuned"]
    assert {p: (m["estimate"], m["delta"]) for p, m in block["metrics"]["tuned"].items()} == \
        {p: (m["estimate"], m["delta"]) for p, m in live.items()}


@pytest.mark.parametrize("change, message", [
    (lambda r: r["summary"]["inputs"]["gold"].update(sha256="0" * 64), "its gold input gold.jsonl (sha256 00000000)"),
    (lambda r: r.pop("per_entry"), "no per_entry list"),
    (lambda r: r["summary"]["inputs"].update(gold=None), "no separate gold input"),
    (lambda r: r["summary"].pop("config"), "no summary.config"),
    (lambda r: r.update(summary={"n": 1}), "not a kg-triplet-eval report"),
])
def test_compare_refuses_reports_that_cannot_be_compared(runs, tmp_path, change, message):
    report = load_report(runs["dir"] / "finetuned.json")
    change(report)
    (tmp_path / "bad.json").write_text(json.dumps(report), encoding="utf-8")
    rc, out, err = cli("--compare", runs["dir"] / "base.json", tmp_path / "bad.json", "--no-report")
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


# ------------------------------------------------------------------ single run with --bootstrap


def test_bootstrap_on_a_single_run_adds_the_comparison_block_of_one_system(runs, tmp_path):
    report = single(tmp_path, BASE, "one", "--bootstrap", "300", "--seed", "3")
    assert list(report)[:-1] == list(runs["base"]) and list(report)[-1] == "comparison"
    block = report["comparison"]
    assert list(block["metrics"]) == ["base"] and block["baseline"] == "base" and block["bootstrap"] == 300
    assert "delta" not in block["metrics"]["base"]["hgr.macro.composite"]
    sig = report["summary"]["signature"]
    assert block["signature"] == sig and "|boot:300|seed:3|" in sig and "trials" not in sig
    assert runs["base"]["summary"]["signature"].count("|boot:none|") == 1
    # the rest of the report is the run without --bootstrap
    without = {k: v for k, v in report.items() if k != "comparison"}
    without["summary"] = {k: v for k, v in without["summary"].items() if k != "signature"}
    plain = {**runs["base"], "summary": {k: v for k, v in runs["base"]["summary"].items() if k != "signature"}}
    assert without == plain


def test_bootstrap_on_a_combined_file(tmp_path):
    gold = [json.loads(x) for x in GOLD.read_text(encoding="utf-8").splitlines() if x.strip()]
    preds = {r["id"]: r for r in map(json.loads, FINETUNED.read_text(encoding="utf-8").splitlines())}
    combined = write_jsonl(tmp_path / "combined.jsonl", [
        {"id": g["id"], "prompt": g["prompt"], "gold_parsed": g["triplets"], "pred_raw": preds[g["id"]]["output"]}
        for g in gold])
    rc, _, err = cli("--pred", combined, "--bootstrap", "100", "--report", tmp_path / "r.json")
    assert rc == 0, err
    report = load_report(tmp_path / "r.json")
    assert report["summary"]["inputs"]["gold"] is None
    assert report["comparison"]["metrics"]["combined"]["hgr.macro.composite"]["estimate"] == \
        report["summary"]["macro"]["composite"]


# ------------------------------------------------------------------ names


def test_default_names_are_stems_made_unique_by_the_shortest_distinguishing_path():
    P = Path
    assert ev.system_names([P("runs/qwen/pred.jsonl"), P("runs/llama/pred.jsonl")]) == ["qwen/pred", "llama/pred"]
    assert ev.system_names([P("x/base.jsonl"), P("y/finetuned.jsonl")]) == ["base", "finetuned"]
    # only the colliding ones grow, each as far as needed
    assert ev.system_names([P("a/x/pred.jsonl"), P("b/x/pred.jsonl"), P("a/y/pred.jsonl"), P("c.jsonl")]) == \
        ["a/x/pred", "b/x/pred", "y/pred", "c"]
    assert ev.system_names([P("a.jsonl"), P("a.json")]) == ["a.jsonl", "a.json"]
    with pytest.raises(ev.InputError, match="the same file is given twice"):
        ev.system_names([P("a.jsonl"), P("./a.jsonl")])


def test_names_from_repeated_stems_and_from_name(tmp_path):
    for sub in ("qwen", "llama"):
        (tmp_path / "runs" / sub).mkdir(parents=True)
        shutil.copyfile(BASE if sub == "qwen" else FINETUNED, tmp_path / "runs" / sub / "pred.jsonl")
    gold = shutil.copyfile(GOLD, tmp_path / "gold.jsonl")
    rc, out, err = cli("--pred", "runs/qwen/pred.jsonl", "--pred", "runs/llama/pred.jsonl", "--gold", gold, *FAST,
                       cwd=tmp_path)
    assert rc == 0, err
    # the default report path joins the names ('/' becomes '_')
    report = load_report(tmp_path / "reports" / "qwen_pred-vs-llama_pred.json")
    assert list(report["systems"]) == ["qwen/pred", "llama/pred"]
    assert "report written to reports/qwen_pred-vs-llama_pred.json" in err
    # the same command again may overwrite its own report; another pair under that name may not
    assert cli("--pred", "runs/qwen/pred.jsonl", "--pred", "runs/llama/pred.jsonl", "--gold", gold, *FAST,
               cwd=tmp_path)[0] == 0
    rc, _, err = cli("--pred", "runs/qwen/pred.jsonl", "--pred", "runs/llama/pred.jsonl", "--gold", gold, *FAST,
                     "--name", "qwen", "--name", "llama", "--no-report", cwd=tmp_path)
    assert rc == 0, err
    shutil.copyfile(BASE, tmp_path / "runs" / "qwen" / "other.jsonl")
    rc, _, err = cli("--pred", "runs/qwen/other.jsonl", "--pred", "runs/llama/pred.jsonl", "--gold", gold,
                     "--name", "qwen/pred", "--name", "llama/pred", *FAST, cwd=tmp_path)
    assert rc == 2 and "exists and is the report of" in err


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("args, message", [
    (["--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--name", "a"], "--name given 1 times for 2 systems"),
    (["--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--name", "a", "--name", "a"],
     "--name 'a' given for 2 systems: names must differ"),
    (["--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--name", "a", "--name", " b"],
     "a system name must be non-empty"),
    (["--pred", BASE, "--pred", BASE, "--gold", GOLD], "the same file is given twice"),
    (["--pred", BASE, "--pred", FINETUNED], f"error: system base: {BASE}: line 1: no gold triplets"),
    (["--compare", "a.json", "--pred", BASE], "--compare compares saved reports; it excludes --pred"),
    (["--compare", "a.json", "--limit", "3"], "so --limit would change nothing"),
    (["--compare", "a.json", "--gold", GOLD], "so --gold would change nothing"),
    (["--compare", "a.json", "--reparse"], "so --reparse would change nothing"),
    (["--compare", "a.json"], "--compare a.json: no such file"),
    (["--pred", BASE, "--gold", GOLD, "--seed", "3"], "--seed applies to a comparison"),
    (["--pred", BASE, "--gold", GOLD, "--name", "x"], "--name applies to a comparison"),
    (["--pred", BASE, "--gold", GOLD, "--trials", "30"], "--trials applies to a comparison"),
    (["--pred", BASE, "--gold", GOLD, "--bootstrap", "100", "--name", "a", "--name", "b"],
     "--name given 2 times for 1 system (one --pred)"),
    (["--pred", BASE, "--gold", GOLD, "--bootstrap", "100", "--correction", "holm"],
     "--correction applies to the significance test of two or more systems"),
    (["--pred", BASE, "--pred", ROOT / "predictions", "--gold", GOLD],
     f"--pred mixes files and directories ({BASE} is a file, {ROOT / 'predictions'} is a directory)"),
    (["--pred", ROOT / "predictions", "--pred", ROOT / "benchmarks", "--pred", BASE, "--gold", ROOT / "gold"],
     f"--pred mixes files and directories ({ROOT / 'predictions'} is a directory, "
     f"{ROOT / 'benchmarks'} is a directory, "
     f"{BASE} is a file): the systems of one comparison are all predictions files (with a --gold file) or all "
     "directories"),
    (["--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--trials", "0", "--correction", "holm"],
     "--correction holm adjusts the p-values of the randomisation test, but --trials 0 computes none"),
    (["--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--bootstrap", "0", "--trials", "0", "--seed", "5"],
     "--seed 5 seeds the bootstrap resamples and the randomisation trials, but --bootstrap 0 and --trials 0 draw "
     "none"),
    (["--compare", ROOT / "README.md", "--trials", "0", "--correction", "holm"], "but --trials 0 computes none"),
])
def test_refusals_exit_2_naming_the_problem(tmp_path, args, message):
    rc, out, err = run_main(*args, "--no-embeddings" if "--compare" not in args else "--quiet", cwd=tmp_path)
    assert rc == 2, err
    assert message in err and "Traceback" not in err
    assert out == "" and not (tmp_path / "reports").exists()


def test_compare_of_one_report_needs_bootstrap(runs, tmp_path):
    rc, _, err = cli("--compare", runs["dir"] / "base.json", "--no-report")
    assert rc == 2 and "give two or more, or --bootstrap N" in err
    rc, _, err = cli("--compare", runs["dir"] / "base.json", "--bootstrap", "100", cwd=tmp_path)
    assert rc == 0, err
    report = load_report(tmp_path / "reports" / "base-intervals.json")
    assert report["comparison"]["metrics"]["base"]["hgr.macro.composite"]["ci"] is not None


def test_help_says_which_options_exclude_each_other():
    help_text = " ".join(ev.build_parser().format_help().split())
    assert "the two exclude each other, and the shard/merge options of large runs exclude both" in help_text
    for flag in ("--name", "--compare", "--bootstrap", "--trials", "--seed", "--correction"):
        assert flag in help_text


# ------------------------------------------------------------------ the signature


def _signature(tmp_path: Path, *args) -> str:
    rc, out, err = cli(*args, "--report", tmp_path / "s.json", "--overwrite")  # (each variant is another run)
    assert rc == 0, err
    report = load_report(tmp_path / "s.json")
    assert f"signature: {report['summary']['signature']}" in out  # printed under the summary
    return report["summary"]["signature"]


def test_every_number_changing_option_changes_the_signature(tmp_path):
    vocab = tmp_path / "rel.txt"
    vocab.write_text("\n".join(sorted(ev.SPEC_RELATIONS)[:-1]) + "\n", encoding="utf-8")
    gold2 = tmp_path / "gold2.jsonl"
    gold2.write_bytes(GOLD.read_bytes() + b"\n")  # same entries, other bytes: another input hash
    base = ("--pred", BASE, "--gold", GOLD)
    variants = {
        "plain": base,
        "limit": (*base, "--limit", "5"),
        "reparse": (*base, "--reparse"),
        "metrics": (*base, "--metrics", "hgr"),
        "schema": (*base, "--schema", "hgr"),
        "threshold": (*base, "--embedding-threshold", "0.85"),
        "threshold-close": (*base, "--embedding-threshold", "0.8000001"),
        "accept": (*base, "--align-accept", "0.6"),
        "relations": (*base, "--relations", vocab),
        "duplicate-ids": (*base, "--duplicate-ids", "first"),
        "skip-bad-gold": (*base, "--skip-bad-gold"),
        "join": (*base, "--join", "id"),
        "pred-field": (*base, "--pred-field", "output"),
        "gold-field": (*base, "--gold-field", "triplets"),
        "pred": ("--pred", FINETUNED, "--gold", GOLD),
        "gold": ("--pred", BASE, "--gold", gold2),
        "bootstrap": (*base, "--bootstrap", "100"),
        "bootstrap-seed": (*base, "--bootstrap", "100", "--seed", "1"),
        "bootstrap-more": (*base, "--bootstrap", "120"),
    }
    signatures = {name: _signature(tmp_path, *args) for name, args in variants.items()}
    assert len(set(signatures.values())) == len(signatures), signatures
    # the same command twice: the same signature
    assert _signature(tmp_path, *base) == signatures["plain"]
    plain = signatures["plain"]
    assert plain.startswith("fam:hgr+strict+per-relation+errors|schema:auto|sim:lexical|thr:0.8|accept:0.5|")
    assert f"|pred:{_sha256(BASE)[:8]}|gold:{_sha256(GOLD)[:8]}|boot:none|" in plain
    assert plain.endswith(f"|version:{ev.__version__}")


def test_the_signature_of_a_system_of_samples_has_one_hash_per_sample_file_in_order():
    def inputs(*files: str) -> dict:
        samples = [{"label": f"s{k}", "name": f"s{k}.jsonl", "path": f"/r/s{k}.jsonl", "sha256": h * 8}
                   for k, h in enumerate(files)]
        return {"pred": samples[0], "gold": {"sha256": "g" * 8}, "samples": samples}
    # files A, A, B and A, B, B give other numbers: their signatures differ (a repeated hash is kept)
    aab, abb = ev._inputs_signature([inputs("a", "a", "b")]), ev._inputs_signature([inputs("a", "b", "b")])
    assert aab[0] == "pred:aaaaaaaa,aaaaaaaa,bbbbbbbb" and abb[0] == "pred:aaaaaaaa,bbbbbbbb,bbbbbbbb"
    assert ev._inputs_signature([inputs("a", "a", "a")])[:3] == ["pred:aaaaaaaa,aaaaaaaa,aaaaaaaa", "gold:gggggggg",
                                                                "samples:3"]
    # the samples of one file (a 'sample' field): that file's hash, once
    one_file = {**inputs("a"), "samples": [{"label": s, "name": "all.jsonl", "path": "/r/all.jsonl", "sha256": "a" * 8}
                                           for s in range(3)]}
    assert ev._inputs_signature([one_file])[0] == "pred:aaaaaaaa"


def test_comparison_signature_names_every_system_and_the_test_settings(runs):
    sig = runs["both"]["comparison"]["signature"]
    hashes = "+".join(_sha256(p)[:8] for p in (BASE, FINETUNED))
    assert f"|pred:{hashes}|gold:{_sha256(GOLD)[:8]}|boot:1000|trials:10000|seed:12345|corr:none|" in sig


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _model_files_hash(model_id: str) -> str | None:
    """summary.config's similarity.model_files_hash for an embedding backend of ``model_id``."""
    class Fake(ev.Similarity):
        backend, model = "fastembed", "/models/m"

    fake = Fake()
    fake.model_id = model_id
    return ev.config_record(ev.RunConfig(), ev.families_for(["hgr"]), fake, None)["similarity"]["model_files_hash"]


def test_model_files_hash_is_in_the_config_and_the_signature():
    # the short hash is the one the model id carries (ModelStore.fingerprint_dir, computed at load)
    assert _model_files_hash("BAAI/bge-small-en-v1.5@0123456789ab") == "0123456789ab"
    assert _model_files_hash("minilm@unhashed") is None  # sentence-transformers could not fingerprint it
    assert _model_files_hash("x@000000000000") is None  # fastembed gave no model directory
    lexical = ev.config_record(ev.RunConfig(), ev.families_for(["hgr"]), ev.Similarity(), None)
    assert lexical["similarity"]["model_files_hash"] is None

    class FakeEmbeddingSimilarity(ev.Similarity):
        backend, model, model_id = "fastembed", "/models/minilm", "minilm@0123456789ab"

    config = ev.config_record(ev.RunConfig(), ev.families_for(["hgr"]), FakeEmbeddingSimilarity(), None)
    assert config["similarity"]["model_files_hash"] == "0123456789ab"
    settings, versions = ev.config_signature(config)
    assert "sim:fastembed:minilm@0123456789ab" in settings and "vocab:none" in settings
    assert any(v.startswith("fastembed:") for v in versions)
    other = {**config, "similarity": {**config["similarity"], "model_id": "minilm@ba9876543210"}}
    assert ev.config_signature(other)[0] != settings


def test_signature_values_cannot_be_mistaken_for_one_another():
    config = ev.config_record(ev.RunConfig(), ev.families_for(["hgr"]), ev.Similarity(), None)
    values = [None, "none", True, "yes", 0.8, "0.8", 5, "5", "a b", "a|b", "output"]
    items = [ev.config_signature({**config, "pred_field": v})[0] for v in values]
    assert len({tuple(i) for i in items}) == len(values)
    assert "pred-field:output" in items[-1] and 'pred-field:"none"' in items[1]


def test_a_config_key_added_later_is_in_the_signature():
    config = ev.config_record(ev.RunConfig(), ev.families_for(["hgr"]), ev.Similarity(), None)
    assert "sweep:yes" in ev.config_signature({**config, "sweep": True})[0]
    assert 'new:{"a":[1,2]}' in ev.config_signature({**config, "new": {"a": [1, 2]}})[0]


# ------------------------------------------------------------------ directory runs as systems


def test_directory_runs_are_systems_too(tmp_path):
    """Two Text2KGBench-style runs (two ontologies, two sentences each) on the same ground
    truth: each system is its own directory run, and the comparison pairs the entries."""
    onto = {"concepts": [{"qid": "P", "label": "Person"}],
            "relations": [{"pid": "b", "label": "birthPlace"}]}
    gt, on = tmp_path / "gt", tmp_path / "onto"
    runs = {"good": tmp_path / "good" / "resp", "bad": tmp_path / "bad" / "resp"}
    for d in (gt, on, *runs.values()):
        d.mkdir(parents=True)
    for key in ("1_a", "2_b"):
        write_jsonl(gt / f"ont_{key}_ground_truth.jsonl", [
            {"id": f"{key}_{i}", "sent": f"A{i} B.", "triples": [{"sub": f"A{i}", "rel": "birthPlace", "obj": "B"}]}
            for i in (1, 2)])
        (on / f"{key}_ontology.json").write_text(json.dumps(onto), encoding="utf-8")
        for name, folder in runs.items():
            write_jsonl(folder / f"{key}_model.jsonl", [
                {"id": f"{key}_{i}", "triples": [[f"A{i}", "birthPlace", "B" if name == "good" else "Z"]]}
                for i in (1, 2)])
    common = ("--gold", gt, "--ontology", on, "--metrics", "strict")
    alone = tmp_path / "good.json"
    assert cli("--pred", runs["good"], *common, "--report", alone)[0] == 0
    rc, out, err = cli("--pred", runs["good"], "--pred", runs["bad"], *common, *FAST, "--report", tmp_path / "r.json")
    assert rc == 0, err
    report = load_report(tmp_path / "r.json")
    assert list(report["systems"]) == ["good/resp", "bad/resp"]  # both folders are named resp
    assert report["systems"]["good/resp"] == load_report(alone)
    row = report["comparison"]["metrics"]["bad/resp"]["strict.micro.f1"]
    # good: 4 of 4 triples right (F1 1); bad: 0 of 4 (F1 0)
    assert (row["estimate"], row["delta"]) == (0.0, -1.0)


def test_sample_type_agreement_is_paired_on_its_12_jointly_defined_entries_and_not_marked(runs):
    """type_agreement is defined on 12 base and 23 fine-tuned entries; both define it on the
    12 base ones (s01 s03 s05 s06 s07 s11 s12 s15 s17 s19 s23 s24), where only s07 (0 vs 1)
    and s17 (0 vs 1/3) differ: delta on those = (1 + 1/3) / 12 = 0.1111, 2 differing entries
    cannot give p < 0.05 (smallest p about 2/2^2), so nothing is marked (main: p=0.0005 *)."""
    base = runs["both"]["systems"]["base"]["per_entry"]
    ft = runs["both"]["systems"]["finetuned"]["per_entry"]
    joint = [(a["id"], a["metrics"]["type_agreement"], b["metrics"]["type_agreement"]) for a, b in zip(base, ft)
             if a["metrics"]["type_agreement"] is not None and b["metrics"]["type_agreement"] is not None]
    assert len(joint) == 12 and [i for i, x, y in joint if x != y] == ["s07", "s17"]
    row = runs["both"]["comparison"]["metrics"]["finetuned"]["hgr.macro.type_agreement"]
    assert (row["paired_entries"], row["paired_of"], row["paired_differing"]) == (12, 25, 2)
    assert row["paired_delta"] == pytest.approx((1 + 1 / 3) / 12)
    assert row["delta"] == pytest.approx(0.9710144927536232 - 10 / 12)  # the estimates' difference, as before
    assert row["significant"] is False
    line = next(ln for ln in runs["text"].splitlines() if ln.startswith("hgr.macro.type_agreement   ") and "paired" in ln)
    assert re.match(r"hgr\.macro\.type_agreement +\+0\.1111 \[", line)  # the column as wide as the longest path
    assert line.endswith("paired on 12 of 25 entries (delta on those; 2 differ: too few to mark)")
    assert "*" not in line
    import csv
    import io
    rows = {(r["system"], r["metric"]): r for r in csv.DictReader(io.StringIO(ev.format_output(runs["both"], "csv")))}
    cell = rows[("finetuned", "hgr.macro.type_agreement")]
    assert float(cell["delta"]) == pytest.approx((1 + 1 / 3) / 12) and cell["significant"] == "false"
    assert float(cell["estimate"]) == 0.9710144927536232  # 67/69: the system's own estimate, unchanged
    latex = ev.format_output(runs["both"], "latex")
    macro = next(ln for ln in latex.splitlines() if ln.startswith("{finetuned}") and r"\textbf{0.971}" in ln)
    cells = macro.split(" & ")  # system, composite, schema, entity F1, triplet F1, relation, weight, type, grounding
    assert cells[7] == r"\textbf{0.971} {\scriptsize [0.909, 1.000]}"  # no dagger (main: $^\dagger$)
    assert cells[1].endswith(r"$^\dagger$")  # composite, defined everywhere, keeps its mark


def test_metrics_without_na_entries_keep_their_comparison_bytes(runs):
    """A metric defined on every entry of both systems is compared exactly as before: the
    row of hgr.macro.composite is main's (0aee41b) byte for byte, with no paired field."""
    row = runs["both"]["comparison"]["metrics"]["finetuned"]["hgr.macro.composite"]
    assert json.dumps(row) == (
        '{"estimate": 0.8728584415584416, "ci": [0.7946902958152958, 0.9256318253968254], "na_resamples": 0, '
        '"delta": 0.2947393939393941, "delta_ci": [0.17542383116883126, 0.41511193722943734], '
        '"p_value": 9.999000099990002e-05, "p_adjusted": null, "significant": true}')
    paired = {p for p, r in runs["both"]["comparison"]["metrics"]["finetuned"].items() if "paired_entries" in r}
    assert paired == {"hgr.macro.relation_accuracy", "hgr.macro.weight_score", "hgr.macro.type_agreement"}


# ------------------------------------------------------------------ README stays true


def test_readme_comparison_example_is_what_the_command_prints(runs):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Comparing models for a write-up"):]
    example = section[section.index("```\ncomparison of"):].split("```")[1]
    shown = [ln for ln in example.strip().splitlines()
             if ln.strip() and ln != "..." and not ln.startswith("signature:")]
    printed = runs["text"].splitlines()
    missing = [ln for ln in shown if ln not in printed]
    assert not missing, missing  # the rows shown are the real output (the signature's versions vary)


def test_readme_markdown_example_is_what_format_markdown_prints(runs):
    """The README's Markdown comparison is format_output of the same report (--format
    markdown); the signature line aside (its library versions vary between machines)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Comparing models for a write-up"):readme.index("## The method")]
    start = section.index("**hgr micro")
    shown = [ln for ln in section[start:section.index("![")].strip().splitlines()
             if ln.strip() and not ln.startswith(("Signature:", "`--plots", "the per-entry"))]
    printed = ev.format_output(runs["both"], "markdown").splitlines()
    missing = [ln for ln in shown if ln not in printed]
    assert not missing, missing
    assert (ROOT / "docs" / "composite_distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ with an embedding model


def test_embedding_systems_equal_their_single_runs_and_name_the_model_files(minilm_dir, tmp_path, monkeypatch):
    """One embedding model shared by the systems of a run (loaded once): each system's report
    is still byte for byte its own run's, with the on-disk cache off (every vector computed in
    the run itself), and the config and signature name the model's files."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    emb = ("--embedding-model", minilm_dir, "--require-embeddings", "--no-embedding-cache", "--quiet")
    both = tmp_path / "both.json"
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *emb, *FAST, "--report", both)
    assert rc == 0, err
    report = load_report(both)
    for name, pred in (("base", BASE), ("finetuned", FINETUNED)):
        alone = tmp_path / f"{name}.json"
        rc, _, err = run_main("--pred", pred, "--gold", GOLD, *emb, "--report", alone)
        assert rc == 0, err
        assert report["systems"][name] == load_report(alone), name
    config = report["systems"]["base"]["summary"]["config"]["similarity"]
    digest = ev.ModelStore.fingerprint_dir(minilm_dir)[:12]
    assert config["model_files_hash"] == digest and config["model_id"] == f"{minilm_dir.name}@{digest}"
    assert f"|sim:fastembed:{minilm_dir.name}@{digest}|" in report["comparison"]["signature"]


@pytest.mark.parametrize("option, value, message", [
    ("--trials", "1000000000", "expected at most 10,000,000, found 1,000,000,000 (the time grows with R"),
    ("--bootstrap", "3000000", "expected at most 1,000,000, found 3,000,000 (each resample's value"),
])
def test_resamples_and_trials_above_the_limit_exit_2_before_scoring(tmp_path, option, value, message):
    rc, out, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", option, value,
                            cwd=tmp_path)
    assert rc == 2 and message in err and "Traceback" not in err
    assert out == "" and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("value", ["1", "99"])
def test_too_few_resamples_for_a_percentile_interval_exit_2_saying_why(tmp_path, value):
    # --bootstrap 1 printed "95% intervals" [x, x] that did not contain the estimate
    rc, out, err = run_main("--pred", BASE, "--gold", GOLD, "--no-embeddings", "--bootstrap", value, cwd=tmp_path)
    assert rc == 2 and f"expected 0 (none) or at least {ev.MIN_BOOTSTRAP}, found {value}" in err
    assert "a 95% percentile interval is mostly noise" in err and out == ""


def test_too_few_trials_to_mark_anything_is_said_in_the_notes(tmp_path):
    rc, out, err = cli("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--bootstrap", "0", "--trials", "9",
                       "--no-report")
    assert rc == 0, err
    assert "with 9 randomisation trials the smallest possible p-value is 1/(R + 1) = 0.1, not below 0.05" in out


def test_a_prediction_field_failing_for_one_system_names_it_and_the_workaround(tmp_path):
    other = tmp_path / "other.jsonl"  # the finetuned predictions under another field name
    other.write_text(FINETUNED.read_text(encoding="utf-8").replace('"output"', '"response"'), encoding="utf-8")
    rc, out, err = cli("--pred", BASE, "--pred", other, "--gold", GOLD, "--pred-field", "output", "--no-report")
    assert rc == 2 and out == ""
    assert f"error: system other: {other}: no line has a recognised prediction field" in err
    assert "--pred-field applies to every system of a repeated --pred" in err
    assert "score each file on its own with its --pred-field (--report NAME.json), then compare the saved reports: " \
        "--compare A.json B.json" in err


def test_default_report_name_keeps_ascii_letters_digits_dot_underscore_hyphen_only(tmp_path):
    rc, _, err = cli("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--name", "modèle v1.0", "--name",
                     "ft_2-b/c", "--bootstrap", "0", "--trials", "0", cwd=tmp_path)
    assert rc == 0, err
    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["mod_le_v1.0-vs-ft_2-b_c.json"]  # è is not ASCII


# ------------------------------------------------------------------ comparability (issue #17 items 2, 3, 10)


def _estimates(block: dict, name: str) -> dict:
    return {p: (m["estimate"], m.get("delta"), m.get("p_value")) for p, m in block["metrics"][name].items()}


def test_lexical_fallbacks_whose_reasons_differ_only_in_wording_are_comparable(runs, tmp_path, monkeypatch):
    """Two runs that fell back to lexical similarity because the default model was in neither
    model cache (mc1, mc2): the reasons name other folders, the numbers are the lexical ones."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for pred, name in ((BASE, "base"), (FINETUNED, "finetuned")):
        (tmp_path / name).mkdir()
        rc, _, err = run_main("--pred", pred, "--gold", GOLD, "--model-cache", tmp_path / name / f"mc-{name}",
                              "--quiet", "--report", tmp_path / name / f"{name}.json")
        assert rc == 0, err
    reasons = [load_report(tmp_path / n / f"{n}.json")["summary"]["config"]["similarity"]["fallback_reason"]
               for n in ("base", "finetuned")]
    assert "mc-base" in reasons[0] and "mc-finetuned" in reasons[1]  # kept in each report, as informational
    rc, _, err = cli("--compare", tmp_path / "base" / "base.json", tmp_path / "finetuned" / "finetuned.json",
                     "--report", tmp_path / "c.json")
    assert rc == 0, err  # main: "similarity.fallback_reason: ..." refused
    block = load_report(tmp_path / "c.json")["comparison"]
    # the same numbers as the lexical comparison (--no-embeddings) of the same files
    assert _estimates(block, "finetuned") == _estimates(runs["both"]["comparison"], "finetuned")


def _with_model(report: dict, model: str, model_id: str, digest: str) -> dict:
    report["summary"]["config"]["similarity"] = {"backend": "fastembed", "model": model, "model_id": model_id,
                                                 "model_files_hash": digest, "fallback_reason": None}
    return report


def test_a_local_model_is_identified_by_its_fingerprint_not_its_path(runs, tmp_path):
    """The same model files named as models/minilm and as an absolute path to a copy under
    another folder name compare; other files (another fingerprint) are refused by name."""
    d = runs["dir"]
    write = lambda name, r: (tmp_path / name).write_text(json.dumps(r), encoding="utf-8")  # noqa: E731
    write("base.json", _with_model(load_report(d / "base.json"), "models/minilm", "minilm@abcdef123456", "abcdef123456"))
    write("tuned.json", _with_model(load_report(d / "finetuned.json"), "/data/copy/minilm-2", "minilm-2@abcdef123456",
                                    "abcdef123456"))
    rc, _, err = cli("--compare", tmp_path / "base.json", tmp_path / "tuned.json", "--no-report", *FAST)
    assert rc == 0, err  # main: "similarity.model: /data/copy/minilm-2 (baseline base: models/minilm)"
    write("tuned.json", _with_model(load_report(d / "finetuned.json"), "models/minilm", "minilm@0123456789ab",
                                    "0123456789ab"))
    rc, _, err = cli("--compare", tmp_path / "base.json", tmp_path / "tuned.json", "--no-report", *FAST)
    assert rc == 2
    assert (f"error: system tuned ({tmp_path / 'tuned.json'}): scored with another configuration than the baseline "
            "base: similarity.model_files_hash: \"0123456789ab\" (baseline base: abcdef123456); score every system with "
            "the same options and package versions") in err


def test_a_model_folder_copy_named_by_a_relative_path_compares_with_the_original(minilm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    shutil.copytree(minilm_dir, tmp_path / "models" / "copy-of-minilm")
    emb = ("--require-embeddings", "--no-embedding-cache", "--quiet")
    rc, _, err = run_main("--pred", BASE, "--gold", GOLD, "--embedding-model", minilm_dir, *emb,
                          "--report", tmp_path / "base.json")
    assert rc == 0, err
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--embedding-model", "models/copy-of-minilm", *emb,
                          "--report", tmp_path / "tuned.json", cwd=tmp_path)
    assert rc == 0, err
    sims = [load_report(tmp_path / f)["summary"]["config"]["similarity"] for f in ("base.json", "tuned.json")]
    assert sims[0]["model_files_hash"] == sims[1]["model_files_hash"] and sims[0]["model"] != sims[1]["model"]
    assert sims[1]["model_id"].startswith("copy-of-minilm@")  # the report keeps what was typed and found
    rc, _, err = run_main("--compare", tmp_path / "base.json", tmp_path / "tuned.json", "--no-report", "--quiet",
                          *FAST)
    assert rc == 0, err


def test_a_limit_that_covers_every_entry_changes_nothing(runs, tmp_path):
    report = tmp_path / "lim.json"
    rc, _, err = run_main("--pred", BASE, "--gold", GOLD, "--no-embeddings", "--limit", "25", "--report", report)
    assert rc == 0, err
    assert "--limit" not in err  # the sample has 25 entries: nothing left out, no notice
    saved = load_report(report)
    assert saved["summary"]["config"]["limit"] == 25 and saved["summary"]["notices"] == []  # the value as given
    rc, _, err = cli("--compare", report, runs["dir"] / "finetuned.json", "--report", tmp_path / "c.json")
    assert rc == 0, err  # main: "limit: none (baseline lim: 25)" refused
    block = load_report(tmp_path / "c.json")["comparison"]
    assert _estimates(block, "finetuned") == _estimates(runs["both"]["comparison"], "finetuned")


def test_a_configuration_refusal_names_key_values_and_the_command(runs, tmp_path):
    for name, extra in (("lim24", ("--limit", "24")), ("thr", ("--embedding-threshold", "0.7"))):
        single(tmp_path, BASE, name, *extra)
        rc, _, err = cli("--compare", runs["dir"] / "finetuned.json", tmp_path / f"{name}.json", "--no-report")
        assert rc == 2
        key, value, base, option = {"lim24": ("limit", "24", "none", "without --limit"),
                                    "thr": ("sim_threshold", "0.7", "0.8", "--embedding-threshold 0.8")}[name]
        # every option the run needs (--no-embeddings: it was scored lexically), a report of its own
        command = f"uv run evaluate.py --pred {BASE} --gold {GOLD} --no-embeddings" + (
            " --embedding-threshold 0.8" if name == "thr" else "") + f" --report {tmp_path / name}.rescored.json"
        assert err == (f"error: system {name} ({tmp_path / (name + '.json')}): scored with another configuration "
                       f"than the baseline finetuned: {key}: {value} (baseline finetuned: {base}); to make them "
                       f"comparable, rescore {name} with the baseline's settings ({option}; its other options as "
                       f"before) into a new report (its own stays as it is): {command}\n")


def test_reports_scored_with_other_metric_families_compare_on_the_common_ones_with_a_note(runs, tmp_path):
    # both reports new: the baseline's default --metrics holds no calibration family, the
    # other's --metrics all does; not refused (README, Comparability), the note says why
    single(tmp_path, FINETUNED, "ft_all", "--metrics", "hgr,strict,per-relation,errors,calibration")
    rc, out, err = cli("--compare", runs["dir"] / "base.json", tmp_path / "ft_all.json", *FAST, "--no-report")
    assert rc == 0, err
    message = ("the calibration family is left out of the comparison: base was scored without it (--metrics without "
               "it, or a report written before the family existed); the other families are compared")
    assert f"\n{message}\n" in out


def _printed_command(err: str) -> list[str]:
    """The arguments of the command at the end of a refusal (after ``uv run evaluate.py``, or
    outside the clone ``uv run --project CLONE CLONE/evaluate.py``)."""
    outside = f": uv run --project {ROOT} {ROOT / 'evaluate.py'} "
    return shlex.split(err.rstrip("\n").split(outside if outside in err else ": uv run evaluate.py ", 1)[1])


@pytest.mark.parametrize("extra, option", [
    (("--embedding-threshold", "0.7"), "--embedding-threshold 0.8"),
    (("--limit", "20"), "without --limit"),
    (("--reparse",), "without --reparse"),
])
def test_the_rescore_command_runs_as_printed_and_makes_the_systems_comparable(runs, tmp_path, extra, option):
    # Pasted in the folder of the reports (where the refused --compare ran): scored lexically as
    # the stale report was (--no-embeddings, printed), into a new report that collides with no
    # file there; the stale one stays; --compare of the new one then passes.
    shutil.copyfile(runs["dir"] / "base.json", tmp_path / "base.json")
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", *extra, "--report",
                          tmp_path / "ft.json")
    assert rc == 0, err
    stale = (tmp_path / "ft.json").read_bytes()
    rc, _, err = run_main("--compare", "base.json", "ft.json", "--no-report", "--quiet", cwd=tmp_path)
    assert rc == 2 and f"baseline's settings ({option}; its other options as before)" in err
    args = _printed_command(err)
    assert args[-2:] == ["--report", "ft.rescored.json"] and "--no-embeddings" in args
    rc, _, err = run_main(*args, "--quiet", cwd=tmp_path)
    assert rc == 0, err
    assert (tmp_path / "ft.json").read_bytes() == stale
    rc, _, err = run_main("--compare", "base.json", "ft.rescored.json", "--quiet", "--report", "c.json",
                          cwd=tmp_path)
    assert rc == 0, err
    assert _estimates(load_report(tmp_path / "c.json")["comparison"], "ft.rescored") == \
        _estimates(runs["both"]["comparison"], "finetuned")


def test_the_rescore_command_gives_the_system_of_several_samples_and_its_relations_as_scored(tmp_path):
    # review 4, N2/N5/N6: a system S of two sample files (a space and a ' in one name), scored
    # with --relations and another threshold; the refusal's command names S=both files (in
    # order, shell-quoted), carries --relations, and writes its report beside the stale one
    # (a path from the folder --compare ran in); run as printed there, it compares.
    folder = tmp_path / "my dir"
    folder.mkdir()
    first, second = folder / "ft it's.jsonl", folder / "b2.jsonl"
    shutil.copyfile(FINETUNED, first)
    shutil.copyfile(BASE, second)
    rels = folder / "rels.txt"
    rels.write_text("".join(r + "\n" for r in ev.SPEC_RELATIONS)
                    + "contains\n", encoding="utf-8")
    common = ("--gold", GOLD, "--no-embeddings", "--relations", rels, "--quiet")
    rc, _, err = run_main("--pred", BASE, *common, "--report", folder / "base.json")
    assert rc == 0, err
    rc, _, err = run_main("--pred", f"S={first},{second}", *common, "--embedding-threshold", "0.7",
                          "--report", folder / "s.json")
    assert rc == 0, err
    rc, _, err = run_main("--compare", "my dir/base.json", "my dir/s.json", "--no-report", cwd=tmp_path)
    assert rc == 2
    # run outside the clone: the program is the clone's, by its absolute path (review 4, N5)
    command = (f"uv run --project {ROOT} {ROOT / 'evaluate.py'} --pred 'S={folder}/ft it'\"'\"'s.jsonl,"
               f"{folder}/b2.jsonl' --gold {GOLD} "
               f"--relations '{rels}' --no-embeddings --embedding-threshold 0.8 --report 'my dir/s.rescored.json'")
    assert err.endswith(f"(its own stays as it is): {command}\n"), err
    rc, _, err = run_main(*_printed_command(err), "--quiet", cwd=tmp_path)
    assert rc == 0, err
    rescored = load_report(folder / "s.rescored.json")
    assert [s["path"] for s in rescored["summary"]["inputs"]["samples"]] == [str(first), str(second)]
    assert rescored["samples"]["name"] == "S" and rescored["summary"]["inputs"]["relations"]["path"] == str(rels)
    rc, _, err = run_main("--compare", "my dir/base.json", "my dir/s.rescored.json", "--no-report", "--quiet",
                          cwd=tmp_path)
    assert rc == 0, err


def test_another_relation_vocabulary_is_refused_as_such(runs, tmp_path):
    # review 4, N6: the refusal of another --relations file gives the vocabulary as the reason
    # (before: "compared on the same gold entries", the gold's reason)
    rels = tmp_path / "rels.txt"
    rels.write_text("".join(r + "\n" for r in ev.SPEC_RELATIONS), encoding="utf-8")
    single(tmp_path, BASE, "rel", "--relations", rels)
    rc, _, err = cli("--compare", runs["dir"] / "finetuned.json", tmp_path / "rel.json", "--no-report")
    assert rc == 2
    sha = hashlib.sha256(rels.read_bytes()).hexdigest()[:8]
    assert err == (f"error: system rel ({tmp_path / 'rel.json'}): its relations input rels.txt (sha256 {sha}) differs "
                   "from the baseline finetuned's None (sha256 none): systems are compared with the same relation "
                   "vocabulary (--relations/--ontology)\n")


def test_the_rescore_hint_names_an_input_whose_path_the_report_does_not_record(runs, tmp_path):
    # a system scored from stdin records its file's name only: no command is printed
    stale = load_report(runs["dir"] / "base.json")
    stale["summary"]["inputs"]["pred"].pop("path")
    stale["summary"]["config"]["sim_threshold"] = 0.7
    (tmp_path / "piped.json").write_text(json.dumps(stale), encoding="utf-8")
    rc, _, err = cli("--compare", runs["dir"] / "finetuned.json", tmp_path / "piped.json", "--no-report")
    assert rc == 2
    assert err.endswith("; score every system with the same options and package versions (no command: piped's "
                        "report records no path for pred: base.jsonl)\n"), err


def _combined(path: Path, pred: Path, change: dict | None = None) -> Path:
    """A notebook-like combined file: id, prompt, gold_parsed and pred_raw per line;
    ``change``: id -> gold items put in place of that line's."""
    gold = [json.loads(x) for x in GOLD.read_text(encoding="utf-8").splitlines() if x.strip()]
    preds = {r["id"]: r for r in map(json.loads, pred.read_text(encoding="utf-8").splitlines())}
    return write_jsonl(path, [{"id": g["id"], "prompt": g["prompt"], "gold_parsed": (change or {}).get(g["id"],
                               g["triplets"]), "pred_raw": preds[g["id"]]["output"]} for g in gold])


def test_two_notebook_outputs_compare_directly_and_through_their_reports(runs, tmp_path):
    base, tuned = _combined(tmp_path / "base_gen.jsonl", BASE), _combined(tmp_path / "ft_gen.jsonl", FINETUNED)
    rc, out, err = cli("--pred", base, "--pred", tuned, "--report", tmp_path / "both.json")
    assert rc == 0, err  # main: "--pred given 2 times without --gold" refused
    assert f"base_gen: {base}\n" in out and " vs " not in out.split("\n", 3)[0]
    both = load_report(tmp_path / "both.json")
    live = runs["both"]["comparison"]
    # the same numbers as the predictions files with --gold (same seed, same entries)
    assert _estimates(both["comparison"], "ft_gen") == _estimates(live, "finetuned")
    content = both["systems"]["base_gen"]["summary"]["inputs"]["gold_content"]
    assert content == both["systems"]["ft_gen"]["summary"]["inputs"]["gold_content"]
    assert content["entries"] == 25 and len(content["sha256"]) == 64
    for name, path in (("base_gen", base), ("ft_gen", tuned)):
        rc, _, err = cli("--pred", path, "--report", tmp_path / f"{name}.json")
        assert rc == 0, err
    rc, _, err = cli("--compare", tmp_path / "base_gen.json", tmp_path / "ft_gen.json", "--report", tmp_path / "c.json")
    assert rc == 0, err
    assert _estimates(load_report(tmp_path / "c.json")["comparison"], "ft_gen") == _estimates(live, "finetuned")


def _comparison_numbers(block: dict) -> dict:
    """Every number of a comparison block: estimate, interval, delta, its interval and p per metric."""
    return {name: {p: (m["estimate"], m["ci"], m["na_resamples"], m.get("delta"), m.get("delta_ci"),
                       m.get("p_value"), m.get("significant"), m.get("paired_entries"), m.get("paired_delta"))
                   for p, m in rows.items()} for name, rows in block["metrics"].items()}


def test_notebook_outputs_in_another_line_order_are_paired_by_id(tmp_path):
    """The notebook writes lines in batch order (longest prompt first; a resumed run appends):
    two outputs for the same prompts hold the same entries in other orders. Shuffled lines of
    ft_gen give exactly the numbers of the unshuffled pair (the entries are paired by id, in
    the baseline's order; same seed), directly and through --compare; ft_gen's own section is
    still the report of the shuffled file alone."""
    base, tuned = _combined(tmp_path / "base_gen.jsonl", BASE), _combined(tmp_path / "ft_gen.jsonl", FINETUNED)
    (tmp_path / "shuffled").mkdir()
    lines = tuned.read_text(encoding="utf-8").splitlines()
    order = [7, 24, 0, 13, 2, 19, 11, 5, 22, 16, 1, 9, 20, 3, 14, 23, 6, 18, 10, 4, 21, 12, 17, 8, 15]
    assert sorted(order) == list(range(25)) and len(lines) == 25
    shuffled = tmp_path / "shuffled" / "ft_gen.jsonl"
    shuffled.write_text("".join(lines[i] + "\n" for i in order), encoding="utf-8")
    rc, _, err = cli("--pred", base, "--pred", tuned, *FAST, "--report", tmp_path / "same.json")
    assert rc == 0, err
    rc, out, err = cli("--pred", base, "--pred", shuffled, *FAST, "--report", tmp_path / "other.json")
    assert rc == 0, err  # main: "system ft_gen does not cover the same gold entries as base_gen: entry 1 is ..."
    message = ("ft_gen: the lines hold the baseline base_gen's entries (the same ids and gold items) in a different "
               "order or at other line numbers: the entries were paired by id, in base_gen's order")
    assert f"note: {message}" in err
    same, other = load_report(tmp_path / "same.json"), load_report(tmp_path / "other.json")
    assert message in other["comparison"]["notes"] and message not in same["comparison"]["notes"]
    assert _comparison_numbers(other["comparison"]) == _comparison_numbers(same["comparison"])
    # each system's section is what its file alone writes: ft_gen's rows in the shuffled order
    rc, _, err = cli("--pred", shuffled, "--report", tmp_path / "shuffled" / "ft_gen.json")
    assert rc == 0, err
    alone = load_report(tmp_path / "shuffled" / "ft_gen.json")
    assert other["systems"]["ft_gen"] == alone
    assert [r["id"] for r in alone["per_entry"]][:3] == [json.loads(lines[i])["id"] for i in order[:3]]
    rc, _, err = cli("--pred", base, "--report", tmp_path / "base_gen.json")
    assert rc == 0, err
    rc, _, err = cli("--compare", tmp_path / "base_gen.json", tmp_path / "shuffled" / "ft_gen.json", *FAST,
                     "--report", tmp_path / "c.json")
    assert rc == 0, err
    saved = load_report(tmp_path / "c.json")["comparison"]
    assert message in saved["notes"]
    assert _comparison_numbers(saved) == _comparison_numbers(same["comparison"])


def test_compare_of_a_gold_report_and_a_combined_file_report_says_score_both_against_the_gold(runs, tmp_path):
    tuned = _combined(tmp_path / "ft_gen.jsonl", FINETUNED)
    rc, _, err = cli("--pred", tuned, "--report", tmp_path / "ft_gen.json")
    assert rc == 0, err
    # the new report beside ft_gen.json (given by its absolute path)
    command = (f"uv run evaluate.py --pred {tuned} --gold {GOLD} --no-embeddings --report "
               f"{tmp_path / 'ft_gen.rescored.json'}")
    for first, second, where in ((runs["dir"] / "base.json", tmp_path / "ft_gen.json", "ft_gen"),
                                 (tmp_path / "ft_gen.json", runs["dir"] / "base.json", "base")):
        rc, _, err = cli("--compare", first, second, "--no-report")
        assert rc == 2  # main: "its gold input None (sha256 none) differs from the baseline base's gold.jsonl ..."
        assert err == (f"error: system {where} ({second}): ft_gen was scored from a combined file (the gold inside "
                       "its predictions file), base against a separate gold file (gold.jsonl); to make them "
                       f"comparable, score both against the same --gold file (ft_gen: {command})\n")
    # the command given, run as printed, makes them comparable: ft_gen's numbers are then
    # finetuned.jsonl's against the gold
    rc, _, err = run_main(*_printed_command(err.rstrip(")\n")), cwd=tmp_path)  # the ")" closes the hint
    assert rc == 0, err
    rc, _, err = cli("--compare", runs["dir"] / "base.json", tmp_path / "ft_gen.rescored.json", "--report",
                     tmp_path / "c.json")
    assert rc == 0, err
    assert _estimates(load_report(tmp_path / "c.json")["comparison"], "ft_gen.rescored") == \
        _estimates(runs["both"]["comparison"], "finetuned")


def test_notebook_outputs_with_other_gold_entries_are_refused_naming_the_ids(tmp_path):
    base = _combined(tmp_path / "base_gen.jsonl", BASE)
    gold = {json.loads(x)["id"]: json.loads(x)["triplets"] for x in GOLD.read_text(encoding="utf-8").splitlines()}
    tuned = _combined(tmp_path / "ft_gen.jsonl", FINETUNED, {"s04": gold["s04"][:-1]})  # one gold item less
    rc, out, err = cli("--pred", base, "--pred", tuned, "--no-report")
    assert rc == 2 and out == ""
    assert err.endswith(f"error: system ft_gen ({tuned}): its gold entries differ from the baseline base_gen's "
                        f"({base}) at 1 id(s): 's04'; combined files are compared when their gold parts (ids and "
                        "gold items) are the same\n")
    for name, path in (("base_gen", base), ("ft_gen", tuned)):
        rc, _, err = cli("--pred", path, "--report", tmp_path / f"{name}.json")
        assert rc == 0, err
    digests = [load_report(tmp_path / f"{n}.json")["summary"]["inputs"]["gold_content"]["sha256"][:8]
               for n in ("base_gen", "ft_gen")]
    rc, _, err = cli("--compare", tmp_path / "base_gen.json", tmp_path / "ft_gen.json", "--no-report")
    assert rc == 2
    assert err == (f"error: system ft_gen ({tmp_path / 'ft_gen.json'}): its gold content (ids and gold items, sha256 "
                   f"{digests[1]}) differs from the baseline base_gen's (sha256 {digests[0]}): ids differ: 's04'; "
                   "systems are compared on the same gold entries\n")


def test_compare_of_a_summary_only_report_says_how_to_write_one_with_rows(runs, tmp_path):
    single(tmp_path, BASE, "short", "--summary-only")
    rc, _, err = cli("--compare", tmp_path / "short.json", runs["dir"] / "finetuned.json", "--no-report")
    assert rc == 2
    assert err == ("error: system short: the report has no per_entry list (its per-entry statistics are needed; "
                   "--summary-only leaves them out): write one with them, without --summary-only (its other options "
                   f"as before; --per-entry-jsonl keeps the rows in their own file): uv run evaluate.py --pred {BASE} "
                   f"--gold {GOLD} --no-embeddings --per-entry-jsonl short.rescored.rows.jsonl --report "
                   "short.rescored.json\n")
    rc, _, err = run_main(*_printed_command(err), "--quiet", cwd=tmp_path)  # runs as printed, beside short.json
    assert rc == 0, err
    rc, _, err = cli("--compare", tmp_path / "short.rescored.json", runs["dir"] / "finetuned.json", "--no-report")
    assert rc == 0, err


def test_two_byte_identical_prediction_files_are_a_system_compared_with_itself(tmp_path):
    shutil.copyfile(BASE, tmp_path / "copy.jsonl")
    rc, out, err = cli("--pred", BASE, "--pred", tmp_path / "copy.jsonl", "--gold", GOLD, *FAST, "--no-report")
    assert rc == 0, err
    sha = _sha256(BASE)[:8]
    message = (f"copy and base were scored from prediction files with the same SHA-256 ({sha}): the comparison is "
               "of a system with itself")
    assert f"note: {message}" in err and f"\n{message}\n" in out


def test_an_embedding_run_against_a_lexical_baseline_is_told_to_rescore_with_no_embeddings(runs, tmp_path):
    (tmp_path / "emb.json").write_text(json.dumps(_with_model(load_report(runs["dir"] / "base.json"), "m",
                                                              "m@abcdef123456", "abcdef123456")), encoding="utf-8")
    rc, _, err = cli("--compare", runs["dir"] / "finetuned.json", tmp_path / "emb.json", "--no-report")
    assert rc == 2
    assert err == (f"error: system emb ({tmp_path / 'emb.json'}): scored with another configuration than the baseline "
                   "finetuned: similarity.backend: fastembed (baseline finetuned: lexical); "
                   "similarity.model_files_hash: abcdef123456 (baseline finetuned: none); to make them comparable, "
                   "rescore emb with the baseline's settings (--no-embeddings; its other options as before) into a "
                   f"new report (its own stays as it is): uv run evaluate.py --pred {BASE} --gold {GOLD} "
                   f"--no-embeddings --report {tmp_path / 'emb.rescored.json'}\n")  # beside emb.json


def test_the_rescore_command_keeps_the_embedding_model_the_system_was_scored_with(runs, tmp_path):
    # review 4, N6: both scored with model "m" (not the default); the threshold differs: the
    # command keeps embeddings and names the model (without it, the default model would be
    # loaded and the new report refused again)
    for name, source, threshold in (("mb", "base.json", 0.8), ("mt", "finetuned.json", 0.7)):
        report = _with_model(load_report(runs["dir"] / source), "m", "m@abcdef123456", "abcdef123456")
        report["summary"]["config"]["sim_threshold"] = threshold
        (tmp_path / f"{name}.json").write_text(json.dumps(report), encoding="utf-8")
    rc, _, err = cli("--compare", tmp_path / "mb.json", tmp_path / "mt.json", "--no-report")
    assert rc == 2
    assert err.endswith(f": uv run evaluate.py --pred {FINETUNED} --gold {GOLD} --embedding-threshold 0.8 "
                        f"--embedding-model m --report {tmp_path / 'mt.rescored.json'}\n"), err


def test_the_baseline_keeps_its_intervals_next_to_a_system_of_several_samples(tmp_path):
    # the entry resamples are the same stream with or without a system of several samples:
    # the baseline's rows (estimates and intervals) are the same bytes in both comparisons
    rows = [{**json.loads(x), "sample": s} for s, path in enumerate((FINETUNED, BASE, FINETUNED))
            for x in path.read_text().splitlines()]
    multi = write_jsonl(tmp_path / "multi.jsonl", rows)
    blocks = []
    for second in (FINETUNED, f"ft={multi}"):
        report = tmp_path / "r.json"
        rc, out, err = run_main("--pred", BASE, "--pred", second, "--gold", GOLD, "--no-embeddings", "--quiet",
                                "--bootstrap", "300", "--trials", "300", "--report", report, "--overwrite")
        assert rc == 0, err
        blocks.append(json.loads(report.read_text())["comparison"])
    assert json.dumps(blocks[0]["metrics"]["base"]) == json.dumps(blocks[1]["metrics"]["base"])
    ft = blocks[1]["metrics"]["ft"]["hgr.macro.composite"]
    assert ft["ci"][0] <= ft["estimate"] <= ft["ci"][1] and ft["p_value"] is not None
