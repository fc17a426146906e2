"""Command-line tests: ``python evaluate.py ...`` as a user runs it (subprocess).

Sample inputs are the project's own ``predictions/`` and ``gold/`` files; the benchmark
tests read ``../shared/data`` (Text2KGBench, WebNLG+ 2020) and skip when it is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ACME_A, ACME_B, run_main
from helpers import ROOT, T, count_lines, load_report, main_as_nobody, run_cli, write_jsonl

import evaluate as ev

FINETUNED = "predictions/finetuned.jsonl"


BASE = "predictions/base.jsonl"


GOLD = "gold/gold.jsonl"


@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("cli") / "r.json"
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--report", out)
    return proc, out


def test_predictions_from_a_pipe_score_like_the_file(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": "p", "triplets": [ACME_A, ACME_B]}])
    pred_rows = [{"id": "1", "triplets": [ACME_A]}]
    report = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--pred", "/dev/stdin", "--gold", str(gold),
         "--no-embeddings", "--quiet", "--report", str(report)],
        input="".join(json.dumps(r) + "\n" for r in pred_rows), text=True, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(report.read_text())["summary"]
    # 1 of 2 gold triplets found: entity P = 1/1, R = 1/2
    assert summary["micro"]["entity_precision"] == 1.0
    assert summary["micro"]["entity_recall"] == 0.5
    assert summary["parse_status"]["missing"] == 0


def test_metric_list_parsing(capsys):
    parser = ev.build_parser()
    assert parser.parse_args(["--metrics", "strict"]).metrics == ("hgr", "strict")
    assert parser.parse_args(["--metrics", "all"]).metrics == ("all", *ev.FAMILIES)
    for bad, reason in (("", "empty metric list"), ("foo", "unknown metric family foo"),
                        ("all,strict", "unknown metric family all")):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--metrics", bad])
        assert exc.value.code == 2 and reason in capsys.readouterr().err


def test_cli_prints_each_family(tmp_path, capsys):
    gold = tmp_path / "g.jsonl"
    pred = tmp_path / "p.jsonl"
    gold.write_text(json.dumps({"id": "1", "prompt": "Alpha is part of Beta.",
                                "triplets": [T("Alpha", "part_of", "Beta")]}) + "\n")
    pred.write_text(json.dumps({"id": "1", "triplets": [T("Alpha", "part_of", "Beta")]}) + "\n")
    code = ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "strict (exact normalised source, relation, target; one-to-one)" in out
    assert "per relation (full matches)" in out
    assert "  part_of" in out
    report = json.loads(Path(tmp_path / "r.json").read_text())
    assert report["strict"]["micro"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_printed_output_points_to_the_method_not_spec_md(finetuned_run, tmp_path):
    """SPEC.md is not in the repository: what a user reads says "the method" and points to
    the README's section; the report keeps its recorded value (comparable with old ones)."""
    proc, out = finetuned_run
    assert "SPEC.md" not in proc.stdout + proc.stderr
    assert "relation vocabulary of the method (README, The method; 20 relations)" in proc.stdout
    assert load_report(out)["summary"]["relation_vocabulary"]["description"] == "SPEC.md (20 relations)"
    for fmt in ("markdown", "latex", "csv"):
        shown = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--no-report", "--format", fmt)
        assert shown.returncode == 0 and "SPEC.md" not in shown.stdout + shown.stderr, fmt
        assert "hgr micro (the published method: README, The method)" in shown.stdout, fmt
    assert "SPEC.md" not in run_cli("--help").stdout


def test_basic_run_exit_0_summary_and_report(finetuned_run):
    proc, out = finetuned_run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # the summary goes to stdout
    assert f"kg-triplet-eval {ev.__version__}" in proc.stdout
    assert "entries 25" in proc.stdout
    assert "micro" in proc.stdout and "macro" in proc.stdout and "composite" in proc.stdout
    assert f"report written to {out}" in proc.stderr and "report written" not in proc.stdout  # the summary alone
    report = load_report(out)
    assert list(report)[0] == "summary" and list(report)[-1] == "per_entry"
    assert "strict" in report and "per_relation" in report  # default families
    assert report["summary"]["n_entries"] == 25
    assert len(report["per_entry"]) == count_lines(ROOT / GOLD) == 25
    s = report["summary"]
    assert s["embedding_backend"] == "lexical"
    assert s["schema_profile"] == "hgr"
    assert s["evaluator"] == {"name": "kg-triplet-eval", "version": ev.__version__}
    assert s["inputs"]["pred"]["name"] == "finetuned.jsonl"
    import hashlib
    assert s["inputs"]["gold"]["sha256"] == hashlib.sha256((ROOT / GOLD).read_bytes()).hexdigest()
    assert s["parse_status"] == {"ok": 25, "repaired": 0, "truncated": 0, "empty": 0,
                                 "unparseable": 0, "no_answer": 0, "missing": 0}
    # the printed totals are those of the report
    t = s["totals"]
    assert f"tp {t['entity_true_positives']} / predicted {t['pred_triplet_items']} / gold {t['gold_triplets']}" in proc.stdout
    # gold_triplets counts every gold triplet of the file (all valid here)
    n_gold = sum(len(json.loads(ln)["triplets"]) for ln in (ROOT / GOLD).read_text().splitlines() if ln.strip())
    assert t["gold_triplets"] == n_gold


def test_same_command_twice_gives_byte_identical_reports(finetuned_run, tmp_path):
    proc, first = finetuned_run
    assert proc.returncode == 0
    second = tmp_path / "r.json"
    proc2 = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--report", second)
    assert proc2.returncode == 0, proc2.stderr
    assert first.read_bytes() == second.read_bytes()
    assert proc.stdout.replace(str(first), "R") == proc2.stdout.replace(str(second), "R")


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"kg-triplet-eval {ev.__version__}"


def test_help():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for flag in ("--pred", "--gold", "--report", "--no-embeddings", "--metrics", "--reparse",
                 "--skip-bad-gold", "--duplicate-ids", "--limit", "--ontology", "--schema"):
        assert flag in proc.stdout, flag
    assert "Exit status" in proc.stdout


@pytest.mark.parametrize("flag, value", [
    ("--embedding-threshold", "2"),
    ("--embedding-threshold", "-0.1"),
    ("--align-accept", "abc"),
    ("--metrics", "foo"),
    ("--metrics", "hgr,foo"),
    ("--limit", "0"),
    ("--limit", "-3"),
    ("--schema", "rdf"),
    ("--duplicate-ids", "middle"),
])
def test_bad_flag_values_exit_2(tmp_path, flag, value):
    report = tmp_path / "r.json"
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--report", report, flag, value)
    assert proc.returncode == 2, (flag, value, proc.stderr)
    assert flag in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not report.exists()


def test_missing_pred_file_exits_2(tmp_path):
    report = tmp_path / "r.json"
    proc = run_cli("--pred", tmp_path / "nope.jsonl", "--gold", GOLD, "--no-embeddings", "--report", report)
    assert proc.returncode == 2
    assert "nope.jsonl" in proc.stderr and "no such file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not report.exists()


def test_no_pred_argument_exits_2(tmp_path):
    proc = run_cli("--gold", GOLD, "--no-embeddings", "--report", tmp_path / "r.json")
    assert proc.returncode == 2
    assert "--pred" in proc.stderr


@pytest.mark.parametrize("kind", ["directory", "parent-is-a-file"])
def test_unwritable_report_path_exits_2(tmp_path, kind):
    # a report path that cannot be written is bad usage (exit 2, one message naming the
    # path), not an internal error (exit 1 with a traceback)
    if kind == "directory":
        report = tmp_path / "out"
        report.mkdir()
    else:
        (tmp_path / "afile").write_text("x")
        report = tmp_path / "afile" / "r.json"
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", "--report", report)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(report) in proc.stderr or report.name in proc.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_limit(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--limit", "3", "--report", out)
    assert proc.returncode == 0, proc.stderr
    report = load_report(out)
    assert report["summary"]["n_entries"] == 3
    assert [e["id"] for e in report["per_entry"]] == ["s01", "s02", "s03"]
    assert "entries 3" in proc.stdout


def test_default_report_path(tmp_path):
    (tmp_path / "predictions").mkdir()
    (tmp_path / "gold").mkdir()
    shutil.copyfile(ROOT / FINETUNED, tmp_path / FINETUNED)
    shutil.copyfile(ROOT / GOLD, tmp_path / GOLD)
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    default = tmp_path / "reports" / "finetuned.json"
    assert default.is_file()
    assert load_report(default)["summary"]["n_entries"] == 25
    assert str(Path("reports") / "finetuned.json") in proc.stderr
    assert list((tmp_path / "reports").iterdir()) == [default]  # no temp file left behind


def test_reparse_base_parse_status_counts(tmp_path):
    # predictions/base.jsonl holds raw "output" text only. Status of each line, read from
    # the file:
    #   s03  single-quoted Python-style list                        -> repaired
    #   s04  ```json array cut off inside the 2nd object ("Orvane High)  -> truncated
    #   s08  "" (blank output)                                      -> empty
    #   s16  prose only, no bracket at all                          -> unparseable
    #   the other 21 lines hold strictly valid JSON (after <think> blocks, fences or
    #   prose; s20 a {"triplets": [...]} wrapper, s21 a bare object in a fence, s25 flat
    #   subject/predicate/object objects; s15's string weights and s19's missing weight
    #   are valid JSON, invalid only for the schema check)                      -> ok
    out = tmp_path / "r.json"
    proc = run_cli("--pred", BASE, "--gold", GOLD, "--no-embeddings", "--reparse", "--report", out)
    assert proc.returncode == 0, proc.stderr
    report = load_report(out)
    assert report["summary"]["parse_status"] == {"ok": 21, "repaired": 1, "truncated": 1, "empty": 1,
                                                 "unparseable": 1, "no_answer": 0, "missing": 0}
    status = {e["id"]: e["parse_status"] for e in report["per_entry"]}
    assert {k: v for k, v in status.items() if v != "ok"} == {
        "s03": "repaired", "s04": "truncated", "s08": "empty", "s16": "unparseable"}
    assert "ok 21  repaired 1  truncated 1  empty 1  unparseable 1  no_answer 0  missing 0" in proc.stdout
    rows = {e["id"]: e for e in report["per_entry"]}
    # s04 keeps its one complete item; s21's bare object is one item; s20's wrapper gives 3
    assert rows["s04"]["metrics"]["n_pred_raw_items"] == 1
    assert rows["s21"]["metrics"]["n_pred_raw_items"] == 1
    assert rows["s20"]["metrics"]["n_pred_raw_items"] == 3
    t = report["summary"]["totals"]
    assert t["unparseable_predictions"] == 1
    assert t["empty_predictions"] == 2  # s08 (empty) and s16 (unparseable)
    # without --reparse the result is the same: the file has no parsed field
    out2 = tmp_path / "r2.json"
    proc2 = run_cli("--pred", BASE, "--gold", GOLD, "--no-embeddings", "--report", out2)
    assert proc2.returncode == 0
    assert load_report(out2)["summary"]["parse_status"] == report["summary"]["parse_status"]


def test_reparse_uses_raw_text_over_parsed_field(tmp_path):
    gold_line = json.loads((ROOT / GOLD).read_text().splitlines()[0])
    gold = tmp_path / "g.jsonl"
    gold.write_text(json.dumps(gold_line) + "\n")
    pred = tmp_path / "p.jsonl"
    raw = json.dumps(gold_line["triplets"])
    pred.write_text(json.dumps({"id": gold_line["id"], "triplets": [], "output": "```json\n" + raw + "\n```"}) + "\n")
    out = tmp_path / "r.json"
    assert run_cli("--pred", pred, "--gold", gold, "--no-embeddings", "--report", out).returncode == 0
    plain = load_report(out)["per_entry"][0]
    assert plain["parse_status"] == "ok" and plain["metrics"]["n_pred_raw_items"] == 0
    # another option than the report at `out` holds: replaced only with --overwrite
    assert run_cli("--pred", pred, "--gold", gold, "--no-embeddings", "--reparse", "--report", out,
                   "--overwrite").returncode == 0
    reparsed = load_report(out)["per_entry"][0]
    assert reparsed["metrics"]["n_pred_raw_items"] == len(gold_line["triplets"])
    assert reparsed["metrics"]["entity_f1"] == 1.0



# ------------------------------------------------- contradictory options (issue 9 item 7)


@pytest.mark.parametrize("mode", [["--compare", "a.json", "b.json"], ["--merge", "a.json", "b.json"]])
def test_embedding_device_is_refused_where_nothing_is_embedded(tmp_path, mode):
    # --compare and --merge score nothing: the device of the embeddings would change nothing
    rc, out, err = run_main(*mode, "--embedding-device", "cuda", cwd=tmp_path)
    assert rc == 2 and out == ""
    assert ("--embedding-device would change nothing" if mode[0] == "--compare" else
            "it takes no --embedding-device") in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, message", [
    (["--require-embeddings"], "--no-embeddings contradicts --require-embeddings"),
    (["--embedding-model", "BAAI/bge-small-en-v1.5"], "--no-embeddings contradicts --embedding-model"),
    (["--embedding-device", "cuda"], "--no-embeddings contradicts --embedding-device cuda:0 (the lexical similarity "
     "runs on no model): give one of them"),
    (["--pred", FINETUNED], "the same file is given twice (predictions/finetuned.jsonl, predictions/finetuned.jsonl)"),
    (["--gold", "./" + FINETUNED], "are the same file"),
    # a combined file alone: each line holds its own gold, no prediction id can lack one (issue 17)
    (["--ignore-extra-predictions"], "--ignore-extra-predictions leaves out prediction lines whose id has no gold "
     "record in --gold, but without --gold each line of a combined file holds its own gold, so it would change "
     "nothing: leave it out (or give the gold file with --gold)"),
])
def test_contradictory_options_exit_2(tmp_path, extra, message):
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", FINETUNED, "--no-embeddings", "--report", report, *extra, cwd=ROOT)
    assert rc == 2, err
    assert message in err and "Traceback" not in err
    assert not report.exists() and out == ""


def test_new_input_options_are_in_help_and_config(tmp_path):
    help_text = run_cli("--help").stdout
    for flag in ("--pred-field", "--gold-field", "--join"):
        assert flag in help_text
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", "--report", report,
                            "--join", "id", cwd=ROOT)
    assert rc == 0, err
    config = load_report(report)["summary"]["config"]
    assert (config["pred_field"], config["gold_field"], config["join"]) == (None, None, "id")


def test_a_dotted_field_name_is_refused_saying_nested_paths_are_not_supported(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": "p", "triplets": [ACME_A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "result": {"triplets": [ACME_A]}}])
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--pred-field", "result.triplets", "--no-embeddings",
                            "--no-report", cwd=ROOT)
    assert rc == 2
    assert ("no line has a recognised prediction field: keys found: id, result; accepted: result.triplets "
            "(--pred-field names a top-level key; nested paths are not supported)") in err
    gold = write_jsonl(tmp_path / "g2.jsonl", [{"id": "r1", "prompt": "p", "answer": {"triplets": [ACME_A]}}])
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--gold-field", "answer.triplets", "--no-embeddings",
                            "--no-report", cwd=ROOT)
    assert rc == 2
    assert ("no gold triplets: keys found: answer, id, prompt; accepted: answer.triplets (--gold-field names a "
            "top-level key; nested paths are not supported)") in err


# ------------------------------------------------------ SIGTERM cleans up (issue 9 item 10)


@pytest.mark.parametrize("phase", ["spooling", "reading", "scoring"])
def test_sigterm_removes_the_spool_folder_like_ctrl_c(tmp_path, phase):
    # The signal comes through the phase hook, not a timer: "spooling" is the moment right
    # after the run's temporary folder is made (before, a SIGTERM there, before the folder
    # had an owner, left it behind: seen once under load), "reading" and "scoring" later.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    report = tmp_path / "out" / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED), "--gold",
                           str(ROOT / GOLD), "--no-embeddings", "--workers", "1", "--report", str(report)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(private_tmp), "KG_EVAL_TEST_SIGNAL_AT": f"{phase}:TERM"})
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.splitlines() == ["terminated: no report written"]
    assert list(private_tmp.iterdir()) == []  # no kg-triplet-eval-* folder left behind
    assert not report.exists()


@pytest.mark.parametrize("at, report, message", [
    # after the report and the examples: the page is missing (before: "what comes after it
    # (the summary on stdout, --plots) may be incomplete", naming neither)
    ("output:TERM:1", True, "terminated: written: the report (R), the examples (E); not written: the audit page "
                            "(--html A)"),
    # --no-report: before, "terminated: no report written", though the examples were written
    ("output:INT:1", False, "interrupted: no report written (--no-report); written: the examples (E); not written: "
                            "the audit page (--html A)"),
    ("output:TERM:2", False, "terminated: no report written (--no-report); written: the examples (E), the audit page "
                             "(A)"),
    ("written:TERM:1", True, "terminated: written: the report (R); not written: the summary on stdout (may be "
                             "incomplete), the examples (--examples E), the audit page (--html A)"),
    ("scoring:TERM:1", True, "terminated: no report written"),
])
def test_a_signal_names_what_was_written_and_what_was_not(tmp_path, at, report, message):
    paths = {"R": tmp_path / "r.json", "E": tmp_path / "e.md", "A": tmp_path / "a.html"}
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED), "--gold",
                           str(ROOT / GOLD), "--no-embeddings", "--workers", "1", "--quiet",
                           *(("--report", str(paths["R"])) if report else ("--no-report",)),
                           "--examples", str(paths["E"]), "--html", str(paths["A"])],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "KG_EVAL_TEST_SIGNAL_AT": at})
    assert done.returncode == (130 if ":INT" in at else 143), done.stderr
    for key, path in paths.items():
        message = message.replace(f"({key})", f"({path})").replace(f" {key})", f" {path})")
    assert done.stderr.splitlines() == [message]
    for path in paths.values():  # what the line says was written is there, and only that
        assert path.exists() == (f"({path})" in message), path


def test_a_full_disk_under_the_page_names_what_was_written(tmp_path, monkeypatch):
    """The page cannot be written (ENOSPC): exit 2, the line names the report and the
    examples left in place (before: only "--html A: cannot write the page: No space left on
    device")."""
    import errno
    write_atomic = ev._write_atomic
    page = tmp_path / "a.html"
    def full_under_the_page(path, chunks, placed=None):
        if path == page:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_atomic(path, chunks, placed)
    monkeypatch.setattr(ev, "_write_atomic", full_under_the_page)
    report, examples = tmp_path / "r.json", tmp_path / "e.md"
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", "--report", report,
                          "--examples", examples, "--html", page, cwd=ROOT)
    assert rc == 2 and err.splitlines() == [
        f"error: --html {page}: cannot write the page: No space left on device; written: the report ({report}), the "
        f"examples ({examples}); not written: the audit page (--html {page})"]
    assert report.is_file() and examples.is_file() and not page.exists()


def test_a_report_that_cannot_be_written_names_the_rows_file_written_before_it(tmp_path, monkeypatch):
    """--per-entry-jsonl: the rows file is placed before the report; when the report then
    cannot be written (ENOSPC), or a signal stops the run between the two, the line names
    the rows file as written (before: "no report written" alone, the rows file in place)."""
    import errno
    write_atomic = ev._write_atomic
    report, rows = tmp_path / "r.json", tmp_path / "rows.jsonl"
    def full_under_the_report(path, chunks, placed=None):
        if path == report:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_atomic(path, chunks, placed)
    monkeypatch.setattr(ev, "_write_atomic", full_under_the_report)
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", "--report", report,
                          "--per-entry-jsonl", rows, cwd=ROOT)
    assert rc == 2 and rows.is_file() and not report.exists()
    assert (f"cannot write the report: No space left on device; no report written; written: the per-entry rows "
            f"(--per-entry-jsonl {rows})") in err
    outcome = ev.RunOutcome()
    outcome.plan(ev.RunConfig(per_entry_jsonl=rows))   # the same rows file as before the run: not this run's
    assert outcome.account() == "no report written"
    (tmp_path / "new.jsonl").write_text("{}\n")
    os.replace(tmp_path / "new.jsonl", rows)           # another file there now (an atomic write: another inode)
    assert outcome.account() == (f"no report written; written: the per-entry rows (--per-entry-jsonl {rows}); not "
                                 "written: the summary on stdout (may be incomplete)")


@pytest.mark.parametrize("at, plots, folder", [
    # a signal while the plots are drawn (after the 1st, 4th, 8th of 8 files): before, 1-3
    # files were left in the folder while the line said "not written: the plots"; the
    # folder the run made is removed (before: left empty), one that was there stays
    ("plotting:TERM:1", False, False), ("plotting:INT:4", False, False), ("plotting:TERM:8", False, False),
    ("plotting:INT:4", False, True),
    # right after the set is in place (the hook's 2nd "output": examples, then plots): all 8
    ("output:TERM:2", True, False),
])
def test_a_signal_during_the_plots_leaves_all_of_them_or_none(tmp_path, at, plots, folder):
    paths = {"R": tmp_path / "r.json", "E": tmp_path / "e.md", "P": tmp_path / "plots" / "run", "A": tmp_path / "a.html"}
    if folder:
        paths["P"].mkdir(parents=True)
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED), "--gold",
                           str(ROOT / GOLD), "--no-embeddings", "--workers", "1", "--quiet", "--report",
                           str(paths["R"]), "--examples", str(paths["E"]), "--plots", str(paths["P"]), "--html",
                           str(paths["A"])],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "KG_EVAL_TEST_SIGNAL_AT": at})
    what = "interrupted" if ":INT:" in at else "terminated"
    written = ", the plots (P)" if plots else ""
    missing = "" if plots else "the plots (--plots P), "
    message = f"{what}: written: the report (R), the examples (E){written}; not written: {missing}the audit page (--html A)"
    for key, path in paths.items():
        message = message.replace(f"({key})", f"({path})").replace(f" {key})", f" {path})")
    assert done.returncode == (130 if ":INT:" in at else 143), done.stderr
    assert done.stderr.splitlines() == [message]
    assert paths["R"].is_file() and paths["E"].is_file() and not paths["A"].exists()
    if not plots and not folder:  # plots/run made by the run, both levels: none left
        assert not (tmp_path / "plots").exists()
        return
    assert sorted(p.name for p in paths["P"].iterdir()) == (sorted(
        f"{stem}.{ext}" for stem, _, _ in ev.family_plots() for ext in ("png", "svg")) if plots else [])


def _drop_a_signal(sig: int) -> None:
    """Send ``sig`` from a weakref callback, where Python drops the exception its handler
    raises ("Exception ignored in ..."), as it does in matplotlib's callbacks, finalisers
    (``__del__``) and gc callbacks: the caller goes on, with the signal recorded."""
    import signal
    import weakref

    class Dropped:
        pass
    victim = Dropped()
    ref = weakref.ref(victim, lambda _: signal.raise_signal(sig))  # the handler runs inside the callback
    del victim
    assert ref() is None and ev._SIGNAL_RAISED == sig  # here: the exception was dropped, the run goes on


@pytest.mark.parametrize("sig", ["INT", "TERM"])
@pytest.mark.parametrize("where, message", [
    # dropped after the n-th mark of a phase (:func:`_phase`): the next check point ends the run
    ("scoring:1", "no report written"),
    ("written:1", "written: the report (R); not written: the examples (--examples E), the plots (--plots P), "
                  "the audit page (--html A)"),
    ("output:1", "written: the report (R), the examples (E); not written: the plots (--plots P), the audit page "
                 "(--html A)"),
    # after the last plot file is drawn: the set is not put in place (the check before the renames)
    ("plotting:8", "written: the report (R), the examples (E); not written: the plots (--plots P), the audit page "
                   "(--html A)"),
    # after the last output: the run's end (before: exit 0, every file written, a traceback)
    ("end", "written: the report (R), the examples (E), the plots (P), the audit page (A)"),
])
def test_a_signal_whose_exception_python_drops_still_ends_the_run(tmp_path, monkeypatch, where, message, sig):
    import signal
    signum = getattr(signal, f"SIG{sig}")
    paths = {"R": tmp_path / "r.json", "E": tmp_path / "e.md", "P": tmp_path / "plots", "A": tmp_path / "a.html"}
    if where == "end":
        write_html = ev._write_run_html
        monkeypatch.setattr(ev, "_write_run_html", lambda *a: (write_html(*a), _drop_a_signal(signum)))
    else:
        phase, nth = where.split(":")
        real_phase, seen = ev._phase, []

        def phase_then_drop(name: str) -> None:
            real_phase(name)
            seen.append(name)
            if name == phase and seen.count(name) == int(nth):
                _drop_a_signal(signum)
        monkeypatch.setattr(ev, "_phase", phase_then_drop)
        monkeypatch.setattr(ev, "_PHASE_SIGNAL", "nowhere:TERM")  # each phase is marked (scoring: only then)
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--workers", "1", "--quiet",
                          "--report", paths["R"], "--examples", paths["E"], "--plots", paths["P"], "--html", paths["A"],
                          cwd=ROOT)
    for key, path in paths.items():
        message = message.replace(f"({key})", f"({path})").replace(f" {key})", f" {path})")
    what = "interrupted" if sig == "INT" else "terminated"
    assert rc == (130 if sig == "INT" else 143)
    assert err.splitlines() == [f"{what}: {message}"]  # one line: the dropped exception is not printed
    for key, path in paths.items():  # what the line says was written is there, and only that
        if key == "P" and path.exists():
            assert bool(list(path.iterdir())) == (f"({path})" in message), where
        else:
            assert path.exists() == (f"({path})" in message), (where, path)


@pytest.mark.parametrize("sig, status, what", [("INT", 130, "interrupted"), ("TERM", 143, "terminated")])
def test_a_dropped_signal_then_a_closed_stdout_still_ends_with_the_signals_status(monkeypatch, sig, status, what):
    # `evaluate.py ... | head`: the summary's reader went away (BrokenPipeError, otherwise exit
    # 0) after a signal whose exception Python dropped: the signal's status and line, not 0.
    import signal
    for name in ("_RUN_ENDED", "_SIGNAL_RAISED", "_SIGNAL_DROPPED"):  # left as they were after the test
        monkeypatch.setattr(ev, name, getattr(ev, name))

    def run(config, outcome):
        _drop_a_signal(getattr(signal, f"SIG{sig}"))
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(ev, "run", run)
    monkeypatch.setattr(ev, "_stdout_reader_gone", lambda: True)
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--no-report", cwd=ROOT)
    assert (rc, err.splitlines()) == (status, [f"{what}: no report written"])
    monkeypatch.setattr(ev, "run", lambda config, outcome: (_ for _ in ()).throw(BrokenPipeError(32, "Broken pipe")))
    assert run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--no-report", cwd=ROOT)[:2] == (0, "")


def test_a_broken_pipe_that_is_not_stdouts_is_an_internal_error_not_a_silent_success(monkeypatch):
    # Before, any BrokenPipeError ended the run with 0 and nothing printed, as for `| head`:
    # a worker's task pipe whose worker had died (SIGKILL) did, with no report written.
    monkeypatch.setattr(ev, "run", lambda config, outcome: (_ for _ in ()).throw(BrokenPipeError(32, "Broken pipe")))
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--no-report", cwd=ROOT)
    assert rc == 1 and "BrokenPipeError" in err and "error: internal error" in err
    read, write = os.pipe()
    try:
        with open(write, "w", closefd=False) as stream:
            monkeypatch.setattr(sys, "stdout", stream)
            assert not ev._stdout_reader_gone()          # a pipe with its reader
            os.close(read)
            read = None
            assert ev._stdout_reader_gone()              # `| head` done: no reader left
    finally:
        os.close(write)
        if read is not None:
            os.close(read)


@pytest.mark.parametrize("report", ["file", "-"])
def test_a_closed_stdout_still_gets_the_files_written(tmp_path, report):
    """`evaluate.py ... | head`: the reader of stdout went away before the summary (or the
    report, --report -) was written; the run exits 0 as a pipeline asks, and the report
    file, --html and --examples are written all the same (before: exit 0 without them)."""
    paths = {"--html": tmp_path / "page.html", "--examples": tmp_path / "examples.md"}
    args = [sys.executable, str(ROOT / "evaluate.py"), "--pred", str(FINETUNED), "--gold", str(GOLD),
            "--no-embeddings", "--quiet", "--report", "-" if report == "-" else str(tmp_path / "r.json")]
    for flag, path in paths.items():
        args += [flag, str(path)]
    read, write = os.pipe()
    os.close(read)                       # no reader at all: the first write to stdout fails
    try:
        proc = subprocess.run(args, stdout=write, stderr=subprocess.PIPE, cwd=ROOT, timeout=300)
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    assert all(path.stat().st_size > 0 for path in paths.values())
    if report == "file":
        assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["summary"]["n_entries"] > 0


def test_after_a_dropped_signal_the_next_one_raises_at_once(monkeypatch):
    # Before, a signal whose exception was dropped made every later one do nothing (the
    # run went on to exit 0). Now the next one raises at once; one after it, while that
    # exception is handled (its clean-up), does nothing, as the second of `timeout`'s two.
    import signal
    for name in ("_RUN_ENDED", "_SIGNAL_RAISED", "_SIGNAL_DROPPED"):  # left as they were after the test
        monkeypatch.setattr(ev, name, getattr(ev, name))
    with ev._sigterm_as_interrupt():
        _drop_a_signal(signal.SIGTERM)
        assert ev._SIGNAL_DROPPED
        with pytest.raises(KeyboardInterrupt) as caught:
            signal.raise_signal(signal.SIGINT)
        assert type(caught.value) is KeyboardInterrupt and ev._SIGNAL_RAISED == signal.SIGINT
        signal.raise_signal(signal.SIGTERM)   # the clean-up of the one raised: nothing
        with pytest.raises(KeyboardInterrupt):
            ev.raise_pending_signal()         # the next check point: the recorded signal (SIGINT)
        ev._RUN_ENDED = True


_SIGTERM_AT_FORK = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import evaluate as ev
sent = []

def terminate_once():  # a SIGTERM that arrives while the interpreter runs its at-fork callbacks
    if not sent:
        sent.append(True)
        os.kill(os.getpid(), signal.SIGTERM)

os.register_at_fork(after_in_parent=terminate_once)
sys.exit(ev.main(sys.argv[2:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only")
def test_sigterm_while_workers_are_forked_stops_the_run(tmp_path):
    # Handled inside a fork's callback (logging's lock release), the signal's exception used
    # to be printed as "ignored" and lost: the run went on and wrote its report (exit 0).
    # The signals are held during the forks (start_pool), so it stops the run: exit 143.
    rows = [json.loads(line) for line in (ROOT / GOLD).read_text().splitlines() if line.strip()]
    preds = [json.loads(line) for line in (ROOT / FINETUNED).read_text().splitlines() if line.strip()]
    gold, pred = tmp_path / "g.jsonl", tmp_path / "p.jsonl"
    copies = 4  # 100 entries: scored by forked workers (WORKER_MIN_ENTRIES is 64)
    gold.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(copies) for r in rows))
    pred.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(copies) for r in preds))
    script, report = tmp_path / "at_fork.py", tmp_path / "r.json"
    script.write_text(_SIGTERM_AT_FORK, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(ROOT), "--pred", str(pred), "--gold", str(gold),
                           "--no-embeddings", "--workers", "2", "--report", str(report)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr
    assert "terminated: no report written" in done.stderr and "ignored" not in done.stderr
    assert not report.exists()


# ------------------------------------------------------------ single-valued options given twice


@pytest.mark.parametrize("flag, first, second", [
    ("--gold", GOLD, "gold/other.jsonl"), ("--schema", "hgr", "triples"), ("--join", "id", "order"),
    ("--limit", "3", "5"), ("--report", "a.json", "b.json"), ("--metrics", "strict", "per-relation"),
    ("--duplicate-ids", "first", "last"), ("--pred-field", "output", "triplets"),
    ("--embedding-threshold", "0.8", "0.7"), ("--relations", "a.txt", "b.txt"),
])
def test_single_valued_option_given_twice_exits_2(tmp_path, flag, first, second):
    rc, out, err = run_main("--pred", FINETUNED, "--no-embeddings", flag, first, flag, second, cwd=tmp_path)
    assert rc == 2 and out == ""
    assert f"{flag} given 2 times: give it once (it takes one value)" in err and "Traceback" not in err
    assert not (tmp_path / "reports").exists()


def test_every_single_valued_option_is_refused_twice():
    # one generic action: every option that stores one value uses it (flags and --pred excepted)
    stores = [a for a in ev.build_parser()._actions if a.option_strings and a.nargs != 0
              and not isinstance(a, argparse._AppendAction)]
    assert stores and all(isinstance(a, ev._StoreOnce) for a in stores), [a.option_strings for a in stores]


# ------------------------------------------------------------ I/O failures: errors, not bugs


@pytest.mark.parametrize("args", [["--no-report"], ["--report", "-"], ["--no-report", "--format", "csv"]])
def test_stdout_that_cannot_be_written_is_an_error_not_a_bug(args):
    # > /dev/full: every write fails with ENOSPC. Before: a traceback and "internal error
    # (this is a bug)", exit 1. Now one line naming stdout and the OS reason, exit 2.
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED),
                               "--gold", str(ROOT / GOLD), "--no-embeddings", "--quiet", *args],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    if args[:2] == ["--report", "-"]:
        expected = ("error: cannot write the report to stdout (--report -): No space left on device; the report "
                    "was not written")
    elif "--format" in args:
        expected = ("error: cannot write the --format csv output to stdout: No space left on device (no report "
                    "written: --no-report)")
    else:
        expected = "error: cannot write the summary to stdout: No space left on device (no report written: --no-report)"
    assert done.stderr.splitlines() == [expected]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_stdout_that_cannot_be_written_after_the_report_names_what_was_lost(tmp_path, fmt):
    # > /dev/full with a report file: the report is in place, stdout lost the --format
    # output. Before: "cannot print the summary" for every format, also --format json.
    report = tmp_path / "r.json"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED),
                               "--gold", str(ROOT / GOLD), "--no-embeddings", "--quiet", "--report", str(report),
                               "--format", fmt], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    what = "the summary" if fmt == "text" else "the --format json output"
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: cannot write {what} to stdout: No space left on device; the report "
                                        f"was written to {report}"]
    assert json.loads(report.read_text())["summary"]["n_entries"] == 25


def _closing(fd: int):
    """A preexec_fn that closes ``fd`` in the child, as the shell's ``>&-`` / ``2>&-`` do."""
    return lambda: os.close(fd)


@pytest.mark.parametrize("args", [["--no-report"], ["--report", "-"], ["--format", "json"]])
def test_a_closed_stdout_is_an_error_not_a_bug(tmp_path, args):
    # `>&-`: Python starts with sys.stdout None. Before: AttributeError ('NoneType' object
    # has no attribute 'write'), "internal error", exit 1. Now as > /dev/full: one line, 2.
    report = tmp_path / "r.json"
    extra = [] if args[0] != "--format" else ["--report", str(report)]
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED), "--gold",
                           str(ROOT / GOLD), "--no-embeddings", "--quiet", *args, *extra],
                          stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=_closing(1))
    assert done.returncode == 2, done.stderr
    closed = "the stream is closed (>&-)"
    expected = {"--no-report": f"error: cannot write the summary to stdout: {closed} (no report written: --no-report)",
                "--report": f"error: cannot write the report to stdout (--report -): {closed}; the report was not "
                            "written",
                "--format": f"error: cannot write the --format json output to stdout: {closed}; the report was "
                            f"written to {report}"}[args[0]]
    assert done.stderr.splitlines() == [expected]


def test_a_closed_stderr_changes_nothing_but_the_messages(tmp_path):
    # `2>&-`: the notes have nowhere to go; the run itself (report, summary, status) is as always.
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(ROOT / FINETUNED), "--gold",
                           str(ROOT / GOLD), "--no-embeddings", "--report", str(report)],
                          stdout=subprocess.PIPE, text=True, timeout=120, preexec_fn=_closing(2))
    assert done.returncode == 0
    assert "Traceback" not in done.stdout and done.stdout.splitlines()[0].startswith("kg-triplet-eval ")
    assert json.loads(report.read_text())["summary"]["n_entries"] == 25


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_that_cannot_be_written_is_an_error(flag):
    # argparse drops a failed write in silence: `--help > /dev/full` exited 0 with nothing written.
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), flag], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: cannot write to stdout: No space left on device"]
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), flag], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout and done.stderr == ""


def _hundred_entries(tmp_path: Path) -> tuple[Path, Path]:
    """gold.jsonl and finetuned.jsonl four times (ids suffixed -0..-3): 100 entries, enough
    for forked workers (WORKER_MIN_ENTRIES is 64); the predictions file is 74,044 bytes."""
    rows = [json.loads(line) for line in (ROOT / GOLD).read_text().splitlines() if line.strip()]
    preds = [json.loads(line) for line in (ROOT / FINETUNED).read_text().splitlines() if line.strip()]
    gold, pred = tmp_path / "g.jsonl", tmp_path / "p.jsonl"
    gold.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(4) for r in rows))
    pred.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(4) for r in preds))
    return gold, pred


def _small_files() -> None:
    """preexec_fn: files this process writes stop at 20 KiB (RLIMIT_FSIZE; SIGXFSZ ignored,
    so a write past it fails with EFBIG "File too large", as a full disk fails with ENOSPC)."""
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE and forked workers: Linux")
@pytest.mark.parametrize("how", ["rows, 1 worker", "rows, 2 workers", "--pred -"])
def test_a_temporary_folder_that_cannot_be_written_is_an_error_not_a_bug(tmp_path, how):
    # A temporary file that cannot be written (here: past a 20 KiB file-size limit; a full
    # TMPDIR is the same OSError path): the row spool (--per-entry-jsonl keeps rows on disk,
    # ~100 KB for 100 entries; with 2 workers the parent appends their chunks) and the copy
    # of stdin (74,044 bytes). Before: "internal error (this is a bug)" and a traceback,
    # exit 1. Now exit 2, one line naming the folder and the OS reason, nothing left.
    gold, pred = _hundred_entries(tmp_path)
    spool = tmp_path / "tmp"
    spool.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    command = [sys.executable, str(ROOT / "evaluate.py"), "--gold", str(gold), "--no-embeddings", "--quiet",
               "--report", str(out / "r.json")]
    if how == "--pred -":
        command += ["--pred", "-"]
    else:
        command += ["--pred", str(pred), "--per-entry-jsonl", str(out / "rows.jsonl"),
                    "--workers", "2" if "2" in how else "1"]
    done = subprocess.run(command, input=pred.read_bytes() if how == "--pred -" else b"", capture_output=True,
                          timeout=120, env={**os.environ, "TMPDIR": str(spool)}, preexec_fn=_small_files)
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().splitlines() == [f"error: cannot write temporary files in {spool} (the temporary "
                                                 "folder; set TMPDIR to use another): File too large; no report written"]
    assert list(spool.iterdir()) == [] and list(out.iterdir()) == []


def test_pred_dash_twice_gives_the_same_report_bytes(tmp_path):
    # A notice-producing stream (line 4 is not JSON; 22 gold ids have no prediction): the
    # notices named the temporary copy (/tmp/kg-triplet-eval-XXXX/stdin), the title
    # /dev/stdin, so two runs of the same input differed. Now both say <stdin>.
    pred = tmp_path / "p.jsonl"
    pred.write_bytes(b"".join((ROOT / FINETUNED).read_bytes().splitlines(keepends=True)[:3]) + b"{bad\n")
    runs = []
    for k in (1, 2):
        report = tmp_path / f"r{k}.json"
        done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", "-", "--gold", str(ROOT / GOLD),
                               "--no-embeddings", "--report", str(report)], input=pred.read_bytes(),
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        runs.append((report.read_bytes(), done.stdout, done.stderr.replace(str(report).encode(), b"R")))
    assert runs[0] == runs[1]
    for text in runs[0]:
        assert b"kg-triplet-eval-" not in text and b"/dev/stdin" not in text
    notices = json.loads(runs[0][0])["summary"]["notices"]
    assert [n["kind"] for n in notices] == ["bad_prediction_line", "no_readable_id", "missing_predictions"]
    assert notices[0]["message"].startswith("<stdin>: line 4: invalid JSON")
    assert b"<stdin> vs " in runs[0][1]


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another user")
@pytest.mark.parametrize("which", ["--pred", "--gold"])
def test_an_unreadable_input_is_an_error_not_a_bug(tmp_path, which):
    # Permission denied is only seen by a non-root user: a forked child of this (root)
    # process becomes nobody (uid 65534) and runs main; the files sit in a folder it may
    # enter, the one named by `which` has mode 000.
    folder = Path(tempfile.mkdtemp(prefix="unreadable-"))
    try:
        os.chmod(folder, 0o755)
        paths = {"--pred": folder / "p.jsonl", "--gold": folder / "g.jsonl"}
        shutil.copy(ROOT / FINETUNED, paths["--pred"])
        shutil.copy(ROOT / GOLD, paths["--gold"])
        for path in paths.values():
            os.chmod(path, 0o000 if path == paths[which] else 0o644)
        status, err = main_as_nobody("--pred", paths["--pred"], "--gold", paths["--gold"], "--no-embeddings",
                                     "--quiet", "--no-report")
        assert status == 2, err
        assert err.splitlines() == [f"error: {paths[which]}: Permission denied"]
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another user")
def test_an_existing_report_that_cannot_be_read_is_named_so(tmp_path):
    """A --report file the user cannot read is refused as unreadable (before: "not a report
    of ours", which sends the user looking for the wrong problem)."""
    folder = Path(tempfile.mkdtemp(prefix="unreadable-report-"))
    try:
        os.chmod(folder, 0o777)
        shutil.copy(ROOT / FINETUNED, folder / "p.jsonl")
        shutil.copy(ROOT / GOLD, folder / "g.jsonl")
        report = folder / "r.json"
        report.write_text("{}", encoding="utf-8")
        os.chmod(report, 0o200)   # writable, not readable
        status, err = main_as_nobody("--pred", folder / "p.jsonl", "--gold", folder / "g.jsonl", "--no-embeddings",
                                     "--quiet", "--report", report)
        assert status == 2, err
        assert err.splitlines() == [f"error: --report {report}: exists and cannot be read (Permission denied), so "
                                    "it cannot be told to hold this run's report; refusing to overwrite it: make it "
                                    "readable, remove it, or give another path"]
    finally:
        shutil.rmtree(folder)


# ------------------------------------------ issue 17 item 7: an explicit --report keeps another run's result


def test_explicit_report_of_another_run_is_refused_unless_overwrite(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": "Acme makes Foo.", "triplets": [ACME_A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}])
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "r1", "triplets": []}])
    old = tmp_path / "old.json"
    base = ("--gold", gold, "--no-embeddings", "--report", old)
    assert run_main("--pred", pred, *base)[0] == 0
    held = old.read_bytes()
    assert run_main("--pred", pred, *base)[0] == 0  # the same command replaces its own report
    assert old.read_bytes() == held
    old.write_bytes(b" \n\t\r\n")                    # a file of only whitespace is as empty: replaced
    assert run_main("--pred", pred, *base)[0] == 0 and old.read_bytes() == held
    # another fallback reason (the model caches a lexical fallback searched: one is under
    # TMPDIR, which differs between jobs of one run) is still this run: replaced
    report = json.loads(held)
    report["summary"]["config"]["similarity"]["fallback_reason"] = "no model in /tmp/job-17/fastembed_cache"
    old.write_text(json.dumps(report, indent=2), encoding="utf-8")
    assert run_main("--pred", pred, *base)[0] == 0 and old.read_bytes() == held
    # other inputs: refused before scoring, naming the run the file holds
    rc, out, err = run_main("--pred", other, *base)
    assert rc == 2 and old.read_bytes() == held
    assert (f"--report {old}: exists and is the report of another run ({pred} vs {gold}; other inputs than this "
            "run); refusing to overwrite it: pass --overwrite to replace it, or give another path") in err
    # other options (--schema triples): refused when the report is to be written
    rc, out, err = run_main("--pred", pred, *base, "--schema", "triples")
    assert rc == 2 and old.read_bytes() == held
    assert f"({pred} vs {gold}; other options than this run); refusing to overwrite it" in err
    # a comparison written twice with other --trials: another run too (its comparison's options)
    cmp = tmp_path / "cmp.json"
    two = ("--pred", pred, "--pred", other, "--gold", gold, "--no-embeddings", "--bootstrap", "0", "--report", cmp)
    assert run_main(*two, "--trials", "10")[0] == 0
    assert run_main(*two, "--trials", "10")[0] == 0  # the same command again
    rc, out, err = run_main(*two, "--trials", "20")
    assert rc == 2 and "other options than this run); refusing to overwrite it" in err
    # --merge of another run's parts onto this report: other inputs (before: "other options")
    parts = [tmp_path / f"other.shard-{k}-of-2.json" for k in (1, 2)]
    for k, part in enumerate(parts, 1):
        assert run_main("--pred", other, "--gold", gold, "--no-embeddings", "--shard", f"{k}/2",
                        "--report", part)[0] == 0
    rc, out, err = run_main("--merge", *parts, "--report", old)
    assert rc == 2 and old.read_bytes() == held
    assert f"({pred} vs {gold}; other inputs than this run); refusing to overwrite it" in err
    # --overwrite replaces it: other's entity F1 is 0.0 (no prediction)
    assert run_main("--pred", other, *base, "--overwrite")[0] == 0
    assert json.loads(old.read_text())["summary"]["micro"]["entity_f1"] == 0.0


def test_a_json_that_only_starts_like_a_report_is_never_replaced(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": "Acme makes Foo.", "triplets": [ACME_A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}])
    notes = tmp_path / "notes.json"
    notes.write_text('{"summary": "my own notes", "todo": [1, 2]}\n')
    for extra in ((), ("--overwrite",)):
        rc, out, err = run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--report", notes, *extra)
        assert rc == 2 and notes.read_text() == '{"summary": "my own notes", "todo": [1, 2]}\n'
        assert (f"--report {notes}: exists and is not a kg-triplet-eval report (it starts like one but holds no "
                "summary inputs, config and signature); refusing to overwrite it") in err


@pytest.mark.parametrize("damage, why", [
    (lambda raw: raw[:len(raw) // 2], "Expecting"),                                  # truncated: json's message
    (lambda raw: raw.replace(b'"r1"', b'"r\xff1"', 1), "can't decode byte 0xff"),      # not UTF-8
])
def test_a_damaged_report_of_this_run_is_refused_as_not_json(tmp_path, damage, why):
    """A report of this very run that is no longer JSON (truncated, a byte changed) is kept,
    with --overwrite too, and the refusal says why it cannot be read (the decoder's own
    message), not that it lacks a run's description."""
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": "Acme makes Foo.", "triplets": [ACME_A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}])
    report = tmp_path / "r.json"
    command = ("--pred", pred, "--gold", gold, "--no-embeddings", "--report", report)
    assert run_main(*command)[0] == 0
    damaged = damage(report.read_bytes())
    report.write_bytes(damaged)
    for extra in ((), ("--overwrite",)):
        rc, out, err = run_main(*command, *extra)
        assert rc == 2 and report.read_bytes() == damaged
        assert f"--report {report}: exists and begins like a kg-triplet-eval report but is not valid JSON (truncated " \
               "or damaged? " in err and why in err and "refusing to overwrite it: remove it first" in err


# ------------------------------------------ --html and --examples replace only a file of theirs, of the same run


@pytest.mark.parametrize("flag, kind", [("--html", "an audit page"), ("--examples", "an examples file")])
def test_html_and_examples_replace_only_their_own_runs_file(tmp_path, flag, kind):
    """As --report: a hand-written file is never replaced (--overwrite neither), a file of
    ours of the same run is (the same command twice), another run's only with
    --overwrite, an empty file is; each refusal comes before scoring (the report of the
    same command is not written)."""
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": "Acme makes Foo.", "triplets": [ACME_A]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [ACME_A]}])
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "r1", "triplets": []}])
    out, report = tmp_path / "out", tmp_path / "r.json"
    base = ("--gold", gold, "--no-embeddings", "--quiet", flag, out)
    out.write_text("my hand-written notes\n")
    for extra in ((), ("--overwrite",)):
        rc, _, err = run_main("--pred", pred, *base, "--report", report, *extra)
        assert rc == 2 and out.read_text() == "my hand-written notes\n" and not report.exists()
        assert (f"error: {flag} {out}: exists and is not {kind} written by kg-triplet-eval; refusing to overwrite "
                "it: remove it first or give another path") in err
    out.write_text("")
    assert run_main("--pred", pred, *base, "--no-report")[0] == 0
    held = out.read_bytes()
    assert run_main("--pred", pred, *base, "--no-report")[0] == 0 and out.read_bytes() == held  # the same run
    rc, _, err = run_main("--pred", other, *base, "--report", report)
    assert rc == 2 and out.read_bytes() == held and not report.exists()
    assert (f"error: {flag} {out}: exists and is {kind} of another run (other inputs than this run); refusing to "
            "overwrite it: pass --overwrite to replace it, or give another path") in err
    assert run_main("--pred", other, *base, "--no-report", "--overwrite")[0] == 0 and out.read_bytes() != held
    # a page is not an examples file, nor the other way round
    wrong = "--examples" if flag == "--html" else "--html"
    rc, _, err = run_main("--pred", other, "--gold", gold, "--no-embeddings", "--no-report", wrong, out, "--overwrite")
    assert rc == 2 and "exists and is not an " in err and "refusing to overwrite it" in err, err


def test_a_run_of_several_samples_is_known_by_all_its_sample_files_in_order(tmp_path):
    """--report (explicit and default), --html and --examples: the report, page or
    examples file of m = (s0, s1) is replaced by the same command only: not by (s0, s1, s2),
    (s0, s2) or (s1, s0), which start with the same file or hold the same ones, and a
    plain run's report of s0 is not replaced by a system whose first sample is s0."""
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": "Acme makes Foo.", "triplets": [ACME_A]}])
    s = [write_jsonl(tmp_path / f"s{k}.jsonl", [{"id": "r1", "triplets": [ACME_A] if k else []}]) for k in range(3)]
    out = ("--html", tmp_path / "a.html", "--examples", tmp_path / "e.md")
    first = ("--pred", f"m={s[0]},{s[1]}", "--gold", gold, "--no-embeddings", "--quiet")
    assert run_main(*first, "--report", tmp_path / "r.json", *out)[0] == 0
    assert run_main(*first, cwd=tmp_path)[0] == 0  # reports/m.json
    held = {p: p.read_bytes() for p in (tmp_path / "r.json", tmp_path / "reports" / "m.json", *out[1::2])}
    assert run_main(*first, "--report", tmp_path / "r.json", *out)[0] == 0  # the same command: its own files
    assert run_main(*first, cwd=tmp_path)[0] == 0
    two = f"({s[0]}, {s[1]})"
    for files in ((s[0], s[1], s[2]), (s[0], s[2]), (s[1], s[0])):
        other = ("--pred", "m=" + ",".join(map(str, files)), "--gold", gold, "--no-embeddings", "--quiet")
        rc, _, err = run_main(*other, "--report", tmp_path / "r.json")
        assert rc == 2 and f"is the report of another run ({two} vs {gold}; other inputs than this run)" in err, err
        rc, _, err = run_main(*other, cwd=tmp_path)
        assert rc == 2 and f"default report path reports/m.json exists and is the report of {two}; refusing" in err
        for flag, path in zip(out[::2], out[1::2]):
            rc, _, err = run_main(*other, "--no-report", flag, path)
            assert rc == 2 and f"{flag} {path}: exists and is" in err and "of another run" in err, err
    assert all(p.read_bytes() == b for p, b in held.items())
    # a plain run's report of s0 is not the report of a system whose first sample is s0
    plain = tmp_path / "plain.json"
    assert run_main("--pred", s[0], "--gold", gold, "--no-embeddings", "--quiet", "--report", plain)[0] == 0
    rc, _, err = run_main(*first, "--report", plain)
    assert rc == 2 and f"is the report of another run ({s[0]} vs {gold}; other inputs than this run)" in err, err


@pytest.mark.parametrize("flag", ["--html", "--examples"])
def test_html_and_examples_never_replace_a_compared_reports_rows_or_a_merge_part(tmp_path, flag):
    """--compare: not the rows file of a compared report (read back, SHA-256 checked, so
    the comparison itself would be refused next time); --merge: not a part."""
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": f"r{k}", "prompt": "Acme makes Foo.", "triplets": [ACME_A]}
                                              for k in (1, 2)])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": f"r{k}", "triplets": [ACME_A]} for k in (1, 2)])
    one = ("--pred", pred, "--gold", gold, "--no-embeddings", "--quiet")
    assert run_main(*one, "--report", tmp_path / "a.json", "--per-entry-jsonl", tmp_path / "a.rows.jsonl")[0] == 0
    assert run_main(*one, "--report", tmp_path / "b.json")[0] == 0
    rows = (tmp_path / "a.rows.jsonl").read_bytes()
    rc, _, err = run_main("--compare", tmp_path / "b.json", tmp_path / "a.json", "--no-report",
                          flag, tmp_path / "a.rows.jsonl")
    assert rc == 2 and (tmp_path / "a.rows.jsonl").read_bytes() == rows and "refusing to overwrite it" in err, err
    parts = [tmp_path / f"p.shard-{k}-of-2.json" for k in (1, 2)]
    for k, part in enumerate(parts, 1):
        assert run_main(*one, "--shard", f"{k}/2", "--report", part)[0] == 0
    held = parts[1].read_bytes()
    rc, _, err = run_main("--merge", *parts, "--no-report", flag, parts[1])
    assert rc == 2 and parts[1].read_bytes() == held and f"{flag} {parts[1]}: is one of the" in err, err
    rc, _, err = run_main("--merge", *parts, "--no-report", flag, gold)  # an input the parts record
    assert rc == 2 and f"{flag} {gold}: is one of the input files; refusing to overwrite it" in err, err


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another user")
@pytest.mark.parametrize("flag", ["--html", "--examples", "--report", "--plots"])
@pytest.mark.parametrize("mode", [0o555, 0o600])
def test_an_unwritable_folder_is_refused_before_scoring_naming_the_option(flag, mode):
    """A folder nobody may not write (0555) or not search (0600, no x): the option and the
    folder are named, before scoring (before: --html said "error: PATH: Permission denied"
    for the folder without x, or failed after scoring; --plots failed after scoring)."""
    folder = Path(tempfile.mkdtemp(prefix="unwritable-"))
    try:
        os.chmod(folder, 0o755)
        for name, source in (("p.jsonl", FINETUNED), ("g.jsonl", GOLD)):
            shutil.copy(ROOT / source, folder / name)
            os.chmod(folder / name, 0o644)
        (folder / "out").mkdir(mode=mode)
        os.chmod(folder / "out", mode)
        target = folder / "out" / "file"
        status, err = main_as_nobody("--pred", folder / "p.jsonl", "--gold", folder / "g.jsonl", "--no-embeddings",
                                     "--quiet", *(("--no-report",) if flag != "--report" else ()), flag, target)
        assert status == 2 and err.splitlines() == [f"error: {flag} {target}: {folder / 'out'} is not writable"], err
    finally:
        shutil.rmtree(folder)


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another user")
def test_an_unwritable_working_folder_names_the_default_report_path_and_the_options(monkeypatch):
    # no --report given: the default path is named as such (not as "--report ..."), with what to give instead
    folder = Path(tempfile.mkdtemp(prefix="unwritable-"))
    try:
        for name, source in (("p.jsonl", FINETUNED), ("g.jsonl", GOLD)):
            shutil.copy(ROOT / source, folder / name)
            os.chmod(folder / name, 0o644)
        os.chmod(folder, 0o555)
        monkeypatch.chdir(folder)
        status, err = main_as_nobody("--pred", "p.jsonl", "--gold", "g.jsonl", "--no-embeddings", "--quiet")
        assert (status, err) == (2, "error: default report path reports/p.json: . is not writable; give --report "
                                    "PATH, --report - (the report on stdout) or --no-report\n")
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(folder)


@pytest.mark.skipif(not hasattr(os, "fork") or os.geteuid() != 0, reason="needs root to become another user")
def test_a_glob_into_a_folder_that_cannot_be_read_says_so():
    folder = Path(tempfile.mkdtemp(prefix="noread-"))
    try:
        os.chmod(folder, 0o755)
        (folder / "runs").mkdir(mode=0o700)
        shutil.copy(ROOT / FINETUNED, folder / "runs" / "s0.jsonl")
        shutil.copy(ROOT / GOLD, folder / "g.jsonl")
        os.chmod(folder / "g.jsonl", 0o644)
        pattern = f"{folder / 'runs'}/*.jsonl"
        status, err = main_as_nobody("--pred", f"m={pattern}", "--gold", folder / "g.jsonl", "--no-embeddings",
                                     "--no-report")
        assert status == 2 and err.splitlines() == [
            f"error: --pred m={pattern}: the folder {folder / 'runs'} of the pattern {pattern!r} cannot be read "
            "(Permission denied), so no file can match it"], err
        # sample files named one by one: each checked before the first is scored, named (before: "no such file"
        # for a folder that cannot be searched, or the second file's error after the first was scored)
        shutil.copy(ROOT / FINETUNED, folder / "s1.jsonl")
        os.chmod(folder / "s1.jsonl", 0o600)
        for second in (folder / "runs" / "s0.jsonl", folder / "s1.jsonl"):
            status, err = main_as_nobody("--pred", f"m={folder / 'g.jsonl'},{second}", "--gold", folder / "g.jsonl",
                                         "--no-embeddings", "--no-report")
            assert status == 2 and err.splitlines() == [
                f"error: --pred m={folder / 'g.jsonl'},{second}: {second}: Permission denied"], err
    finally:
        shutil.rmtree(folder)


# ------------------------------------------------- issue 17 item 10: --pred - reads stdin


def test_pred_dash_reads_stdin_like_a_file(tmp_path):
    # predictions/finetuned.jsonl piped in: the same numbers as the file itself; recorded as a
    # stream (name "stream", path null) with the file's SHA-256; read once (spooled)
    pred, gold = ROOT / "predictions" / "finetuned.jsonl", ROOT / "gold" / "gold.jsonl"
    command = [sys.executable, str(ROOT / "evaluate.py"), "--gold", str(gold), "--no-embeddings", "--report", "-"]
    piped = subprocess.run([*command, "--pred", "-"], input=pred.read_bytes(), capture_output=True, check=False)
    assert piped.returncode == 0, piped.stderr.decode()
    from_file = subprocess.run([*command, "--pred", str(pred)], capture_output=True, check=False)
    a, b = json.loads(piped.stdout), json.loads(from_file.stdout)
    assert a["summary"]["micro"] == b["summary"]["micro"] and a["per_entry"] == b["per_entry"]
    assert a["summary"]["inputs"]["pred"] == {"name": "stream", "sha256": b["summary"]["inputs"]["pred"]["sha256"],
                                              "path": None}
    # stdin is read once: not for two inputs
    twice = subprocess.run([*command, "--pred", "-", "--pred", "-"], input=b"", capture_output=True, check=False)
    assert twice.returncode == 2
    assert b"stdin (-) can be read once: give it to one --pred or --gold, the other inputs as files" in twice.stderr
    # no default report path for a stream: the message offers what works (with --shard, not --no-report)
    for shard, options in (([], "give --report PATH, --report - (the report on stdout) or --no-report"),
                           (["--shard", "1/2"], "give --report PATH or --report - (the report on stdout)")):
        unnamed = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--gold", str(gold), "--no-embeddings",
                                  "--pred", "-", *shard], input=pred.read_bytes(), capture_output=True, text=False)
        assert unnamed.returncode == 2
        assert unnamed.stderr.decode().splitlines() == [
            "error: --pred <stdin>: not a regular file (a pipe or stream?), so it has no name for the default "
            f"report path; {options}"]


def test_pred_dash_redirected_from_a_file_is_that_file_and_a_pipe_is_a_stream(tmp_path):
    # `--pred - < pred.jsonl`: stdin is the regular file itself (seekable, readable again):
    # the same report bytes as --pred pred.jsonl (its name and path recorded), and --html,
    # which reads the inputs again, is accepted; a pipe is a stream (name "stream", path
    # null: test_pred_dash_reads_stdin_like_a_file) and --html refuses it
    pred, gold = ROOT / "predictions" / "finetuned.jsonl", ROOT / "gold" / "gold.jsonl"
    command = [sys.executable, str(ROOT / "evaluate.py"), "--gold", str(gold), "--no-embeddings", "--quiet"]
    with open(pred, "rb") as stdin:
        redirected = subprocess.run([*command, "--pred", "-", "--report", "-", "--html", str(tmp_path / "a.html")],
                                    stdin=stdin, capture_output=True, check=False)
    assert redirected.returncode == 0, redirected.stderr.decode()
    from_file = subprocess.run([*command, "--pred", str(pred), "--report", "-"], capture_output=True, check=False)
    assert redirected.stdout == from_file.stdout
    assert json.loads(redirected.stdout)["summary"]["inputs"]["pred"]["name"] == "finetuned.jsonl"
    assert (tmp_path / "a.html").stat().st_size > 0
    piped = subprocess.run([*command, "--pred", "-", "--report", "-", "--html", str(tmp_path / "b.html")],
                           input=pred.read_bytes(), capture_output=True, check=False)
    assert (piped.returncode, piped.stderr.decode()) == (2, f"error: --html {tmp_path / 'b.html'}: the audit page "
                                                            "reads the inputs again, and stdin (-) cannot be read "
                                                            "twice: give the file\n")



def test_pred_dash_from_a_partly_read_file_is_the_rest_and_the_gold_redirected_is_refused(tmp_path):
    # `{ read -r line; evaluate.py --pred - ...; } < pred.jsonl`: stdin is past the first line,
    # so `-` is a stream of the other 24 lines (what a pipe of them gives: one entry with no
    # prediction), never the whole file by its path; and `--pred - < gold.jsonl --gold
    # gold.jsonl` is refused like --pred gold.jsonl --gold gold.jsonl (the same file)
    pred, gold = ROOT / "predictions" / "finetuned.jsonl", ROOT / "gold" / "gold.jsonl"
    command = [sys.executable, str(ROOT / "evaluate.py"), "--gold", str(gold), "--no-embeddings", "--quiet",
               "--pred", "-", "--report", "-"]
    with open(pred, "rb") as stdin:
        stdin.readline()
        os.lseek(stdin.fileno(), stdin.tell(), os.SEEK_SET)  # the child's stdin starts at line 2
        rest = subprocess.run(command, stdin=stdin, capture_output=True, check=False)
    piped = subprocess.run(command, input=b"".join(pred.read_bytes().splitlines(keepends=True)[1:]),
                           capture_output=True, check=False)
    assert rest.returncode == piped.returncode == 0, rest.stderr.decode()
    assert rest.stdout == piped.stdout
    report = json.loads(rest.stdout)
    assert report["summary"]["inputs"]["pred"]["name"] == "stream" and report["summary"]["n_entries"] == 25
    with open(gold, "rb") as stdin:
        same = subprocess.run(command, stdin=stdin, capture_output=True, check=False)
    assert (same.returncode, same.stderr.decode()) == (2, f"error: --pred - and --gold {gold} are the same file: "
                                                          "give the predictions with --pred and the gold with --gold "
                                                          "(or a combined file alone with --pred)\n")

# --------------------------------------------------------------------------------------
# The one report-path resolver: every mode's default path is refused the same way
# --------------------------------------------------------------------------------------

def _report_of(*preds: str | None) -> str:
    """A file that reads as our report of these predictions paths (one, or several systems)."""
    one = [{"summary": {"inputs": {"pred": {"path": p}}}} for p in preds]
    return json.dumps(one[0] if len(one) == 1 else {"systems": {f"s{i}": r for i, r in enumerate(one)}})


_OPTIONS = "give --report PATH, --report - (the report on stdout) or --no-report"


def test_default_report_path_refusals_byte_for_byte_in_every_mode(tmp_path, monkeypatch, capsys):
    for name in ("a", "b"):
        shutil.copyfile(ROOT / FINETUNED, tmp_path / f"{name}.jsonl")
    shutil.copyfile(ROOT / GOLD, tmp_path / "gold.jsonl")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    a, b = (str((tmp_path / f"{n}.jsonl").resolve()) for n in ("a", "b"))
    single = ["--pred", "a.jsonl", "--gold", "gold.jsonl", "--no-embeddings", "--quiet"]
    several = ["--pred", "a.jsonl", "--pred", "b.jsonl", "--gold", "gold.jsonl", "--no-embeddings", "--quiet"]
    cases = [  # (mode's arguments, file at its default path, held text, the refusal's line)
        (single, "a.json", "{}", "not a kg-triplet-eval report with the --pred path"),
        (single, "a.json", _report_of(b), f"the report of {b}"),
        (single, "a.json", _report_of(a, b), "not a kg-triplet-eval report with the --pred path"),
        (single, "a.json", _report_of(None), "not a kg-triplet-eval report with the --pred path"),
        (several, "a-vs-b.json", "{}", "not a kg-triplet-eval report"),
        (several, "a-vs-b.json", _report_of(b, a), f"the report of {b}, {a}"),
        (several, "a-vs-b.json", _report_of(a), f"the report of {a}"),
    ]
    for args, name, held, was in cases:
        path = Path("reports") / name
        path.write_text(held, encoding="utf-8")
        assert ev.main(args) == 2, (name, held)
        assert capsys.readouterr().err == (f"error: default report path {path} exists and is {was}; refusing to "
                                           f"overwrite it: {_OPTIONS}\n")
        assert path.read_text(encoding="utf-8") == held
        assert ev.main([*args, "--report", "-"]) == 0  # an explicit --report is not the default: not refused
        assert json.loads(capsys.readouterr().out)


def test_the_resolver_accepts_its_own_report_and_obeys_report_and_no_report(tmp_path, monkeypatch):
    shutil.copyfile(ROOT / FINETUNED, tmp_path / "a.jsonl")
    monkeypatch.chdir(tmp_path)
    def resolved(*args: str, default=None) -> Path | None:
        config = ev.RunConfig.from_args(ev.build_parser().parse_args(["--pred", "a.jsonl", *args]))
        return ev._resolve_report_path(config, default or (lambda: ev._single_report_default(config)))
    assert resolved("--no-report", default=lambda: pytest.fail("no default with --no-report")) is None
    assert resolved("--report", "-", default=lambda: pytest.fail("no default with --report")) == ev.STDOUT_REPORT
    assert resolved("--report", "r.json") == Path("r.json")
    assert resolved() == Path("reports") / "a.json"
    assert resolved("--shard", "2/3") == Path("reports") / "a.shard-2-of-3.json"
    Path("reports").mkdir()
    (Path("reports") / "a.json").write_text(_report_of(str((tmp_path / "a.jsonl").resolve())), encoding="utf-8")
    assert resolved() == Path("reports") / "a.json"  # the report of this same --pred: replaced
    several = ev._ReportDefault(Path("reports") / "a.json", (str((tmp_path / "a.jsonl").resolve()),), "x",
                                single=False)
    assert resolved(default=lambda: several) == several.path


def test_merge_default_report_path_is_refused_like_the_others(tmp_path, monkeypatch, capsys):
    shutil.copyfile(ROOT / FINETUNED, tmp_path / "a.jsonl")
    shutil.copyfile(ROOT / GOLD, tmp_path / "gold.jsonl")
    monkeypatch.chdir(tmp_path)
    for k in (1, 2):
        assert ev.main(["--pred", "a.jsonl", "--gold", "gold.jsonl", "--shard", f"{k}/2", "--no-embeddings",
                        "--quiet", "--report", f"a.shard-{k}-of-2.json"]) == 0
    shutil.copyfile("a.shard-1-of-2.json", "first.json")
    assert ev.main(["--merge", "first.json", "a.shard-2-of-2.json", "--quiet"]) == 2
    assert capsys.readouterr().err == ("error: --merge first.json: its name has no .shard-K-of-N part to drop for "
                                       "the merged report's name: give --report PATH (or --report -, or "
                                       "--no-report)\n")
    Path("a.json").write_text(_report_of("elsewhere.jsonl"), encoding="utf-8")
    assert ev.main(["--merge", "a.shard-1-of-2.json", "a.shard-2-of-2.json", "--quiet"]) == 2
    assert capsys.readouterr().err == ("error: default report path a.json exists and is the report of "
                                       "elsewhere.jsonl; refusing to overwrite it: give --report PATH, --report - "
                                       "or --no-report\n")
    Path("a.json").unlink()
    assert ev.main(["--merge", "a.shard-1-of-2.json", "a.shard-2-of-2.json", "--quiet"]) == 0
    assert json.loads(Path("a.json").read_text())["summary"]["n_entries"] == 25
    assert ev.main(["--merge", "a.shard-1-of-2.json", "a.shard-2-of-2.json", "--quiet"]) == 0  # its own: replaced


# ---------------------------------------------------------------- --slice-by / --max-slices

SAMPLE_GOLD, SAMPLE_PRED, SAMPLE_BASE = ROOT / "gold" / "gold.jsonl", ROOT / "predictions" / "finetuned.jsonl", \
    ROOT / "predictions" / "base.jsonl"


def _sliced_gold(tmp_path: Path) -> Path:
    """The sample's gold with a "topic" field: entries 1-10 "a", 11-20 "b", the rest none."""
    rows = [json.loads(x) for x in SAMPLE_GOLD.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        if i < 20:
            row["topic"] = "a" if i < 10 else "b"
    path = tmp_path / "gold.jsonl"
    write_jsonl(path, rows)
    return path


def test_slice_by_merge_and_compare_rebuild_the_slices(tmp_path):
    gold = _sliced_gold(tmp_path)
    common = ("--gold", gold, "--no-embeddings", "--quiet", "--slice-by", "topic", "--slice-by", "n_gold")
    rc, _, err = run_main("--pred", SAMPLE_PRED, *common, "--report", tmp_path / "whole.json")
    assert rc == 0, err
    whole = load_report(tmp_path / "whole.json")
    assert list(whole)[-2:] == ["slices", "per_entry"]
    assert whole["summary"]["config"]["slice_by"] == ["topic", "n_gold"]
    assert "|slice-by:topic+n_gold|" in whole["summary"]["signature"]
    assert [(s["label"], s["n_entries"]) for s in whole["slices"]["keys"]["topic"]] == \
        [("a", 10), ("b", 10), ("(missing)", 5)]
    assert whole["per_entry"][0]["slices"] == {"topic": "a", "n_gold": whole["per_entry"][0]["slices"]["n_gold"]}
    for k in (1, 2):
        rc, _, err = run_main("--pred", SAMPLE_PRED, *common, "--shard", f"{k}/2",
                              "--report", tmp_path / f"part{k}.json")
        assert rc == 0, err
        assert "slices" not in load_report(tmp_path / f"part{k}.json")
    rc, _, err = run_main("--merge", tmp_path / "part1.json", tmp_path / "part2.json", "--quiet",
                          "--report", tmp_path / "merged.json")
    assert rc == 0, err
    assert (tmp_path / "merged.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    # --compare of saved reports: the recorded keys, or a subset of them with --slice-by
    rc, out, err = run_main("--compare", tmp_path / "whole.json", "--bootstrap", "100", "--quiet",
                            "--slice-by", "topic", "--report", tmp_path / "cmp.json")
    assert rc == 0, err
    cmp = load_report(tmp_path / "cmp.json")
    assert list(cmp["slices"]["keys"]) == ["topic"]
    assert "slices by topic: hgr composite, entity F1, triplet F1" in out


def test_slice_by_refusals(tmp_path):
    gold = _sliced_gold(tmp_path)
    base = ("--pred", SAMPLE_PRED, "--gold", gold, "--no-embeddings", "--no-report")
    rc, _, err = run_main(*base, "--slice-by", "colour")
    assert rc == 2 and f"--slice-by colour: no gold line of {gold} has a field 'colour' (its gold lines have id, " \
                       "prompt, triplets, topic), and it is not a built-in (n_gold, prompt_chars)" in err
    rc, _, err = run_main(*base, "--slice-by", "topic", "--max-slices", "2")
    assert rc == 2 and "--slice-by topic: 3 distinct values, more than the 2 slices allowed" in err
    rc, _, err = run_main(*base, "--max-slices", "60")
    assert rc == 2 and "--max-slices 60 sets the limit of --slice-by: give --slice-by KEY too" in err
    rc, _, err = run_main(*base, "--slice-by", "topic", "--slice-by", "topic")
    assert rc == 2 and "--slice-by topic is given twice" in err
    rc, _, err = run_main("--pred", SAMPLE_PRED, "--gold", gold, "--no-embeddings", "--quiet",
                          "--report", tmp_path / "plain.json")
    assert rc == 0, err
    assert "slice_by" not in load_report(tmp_path / "plain.json")["summary"]["config"]
    rc, _, err = run_main("--compare", tmp_path / "plain.json", "--bootstrap", "100", "--slice-by", "topic",
                          "--no-report")
    assert rc == 2 and "--slice-by topic: the report's per-entry rows have no slice values for topic" in err


def test_slice_by_unknown_key_is_refused_before_any_entry_is_scored(tmp_path, monkeypatch):
    """A key that is neither a built-in nor a field with a value in some gold line: refused
    once the gold is read (scoring never starts), naming the key, the file, the fields the
    gold lines have (a field that is null everywhere is not one) and the built-ins; a
    combined file is named as the gold's file."""
    gold = _sliced_gold(tmp_path)
    rows = [json.loads(x) for x in gold.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row["note"] = None  # present but null on every line: no value to slice by
    write_jsonl(gold, rows)

    def never(*args, **kwargs):
        raise AssertionError("an entry was scored")

    monkeypatch.setattr(ev, "score_entries_parallel", never)
    base = ("--pred", SAMPLE_PRED, "--gold", gold, "--no-embeddings", "--no-report")
    for key in ("colour", "note"):
        rc, _, err = run_main(*base, "--slice-by", "n_gold", "--slice-by", key)
        assert rc == 2 and err == (f"error: --slice-by {key}: no gold line of {gold} has a field {key!r} (its gold "
                                   "lines have id, prompt, triplets, topic), and it is not a built-in (n_gold, "
                                   "prompt_chars)\n")
    combined = tmp_path / "combined.jsonl"
    write_jsonl(combined, [{"id": "1", "prompt": "p", "triplets": [], "output": "[]"}])
    rc, _, err = run_main("--pred", combined, "--no-embeddings", "--no-report", "--slice-by", "topic")
    assert rc == 2 and f"--slice-by topic: no gold line of {combined} has a field 'topic' (its gold lines have " \
                       "id, prompt, triplets, output)" in err


def test_slice_by_compare_refuses_a_key_not_in_the_rows_before_resampling(tmp_path, monkeypatch):
    """--compare of saved reports: a key that the rows do not store (or that no gold line
    had) is an error before any bootstrap or randomisation."""
    gold = _sliced_gold(tmp_path)
    for name, pred, extra in (("a", SAMPLE_PRED, ("--slice-by", "topic")), ("b", SAMPLE_BASE, ())):
        rc, _, err = run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--quiet", *extra,
                              "--report", tmp_path / f"{name}.json")
        assert rc == 0, err

    def never(*args, **kwargs):
        raise AssertionError("resampled")

    monkeypatch.setattr(ev, "compare_systems", never)
    common = ("--bootstrap", "100", "--no-report", "--quiet")
    rc, _, err = run_main("--compare", tmp_path / "a.json", "--slice-by", "n_gold", *common)
    assert rc == 2 and "--slice-by n_gold: the report's per-entry rows have no slice values for n_gold (entry 1 " \
                       "has none): score it again with --slice-by n_gold" in err
    rc, _, err = run_main("--compare", tmp_path / "a.json", tmp_path / "b.json", "--slice-by", "topic", *common)
    assert rc == 2 and "--slice-by topic: system b: the report's per-entry rows have no slice values" in err
    rc, _, err = run_main("--compare", tmp_path / "a.json", "--slice-by", "topic", "--max-slices", "2", *common)
    assert rc == 2 and "--slice-by topic: 3 distinct values, more than the 2 slices allowed" in err


def test_compare_of_a_sliced_and_an_unsliced_report_says_why_there_are_no_slices(tmp_path):
    """a.json has slices by topic, b.json none: the comparison has no slice table, and a
    note (stderr, the printed comparison, the report's comparison notes) names both
    reports and their keys (before: the table was dropped silently)."""
    gold = _sliced_gold(tmp_path)
    for name, pred, extra in (("a", SAMPLE_PRED, ("--slice-by", "topic")), ("b", SAMPLE_BASE, ())):
        assert run_main("--pred", pred, "--gold", gold, "--no-embeddings", "--quiet", *extra,
                        "--report", tmp_path / f"{name}.json")[0] == 0
    rc, out, err = run_main("--compare", tmp_path / "a.json", tmp_path / "b.json", "--bootstrap", "100",
                            "--trials", "100", "--report", tmp_path / "c.json")
    assert rc == 0, err
    note = (f"the comparison has no slice table: the reports hold slices by other keys (a ({tmp_path / 'a.json'}): "
            f"topic; b ({tmp_path / 'b.json'}): none, scored without --slice-by); give --slice-by KEY for a key whose "
            "values every report's rows hold, or score the others again with --slice-by KEY")
    report = load_report(tmp_path / "c.json")
    assert f"note: {note}" in err and note in out and note in report["comparison"]["notes"]
    assert "slices" not in report and "slices by topic:" not in out


def test_slice_by_with_summary_only_gives_the_same_slices(tmp_path):
    """--summary-only with --slice-by: the slices are made from the rows before they are
    dropped, so the section is the one of the run with its rows; no per_entry; the same
    text table."""
    gold = _sliced_gold(tmp_path)
    common = ("--pred", SAMPLE_PRED, "--gold", gold, "--no-embeddings", "--quiet", "--slice-by", "n_gold",
              "--slice-by", "topic")
    rc, out_whole, err = run_main(*common, "--report", tmp_path / "whole.json")
    assert rc == 0, err
    rc, out_short, err = run_main(*common, "--summary-only", "--report", tmp_path / "short.json")
    assert rc == 0, err
    whole, short = load_report(tmp_path / "whole.json"), load_report(tmp_path / "short.json")
    assert "per_entry" not in short and list(short)[-1] == "slices"
    assert short["slices"] == whole["slices"]
    # the sample's hand-counted n_gold bins: 0 (1 entry), 1-2 (1), 3-5 (23); topic: a 10, b 10, (missing) 5
    assert [(s["label"], s["n_entries"]) for s in short["slices"]["keys"]["n_gold"]] == \
        [("0", 1), ("1-2", 1), ("3-5", 23)]
    table = out_whole[out_whole.index("slices by n_gold"):out_whole.index("signature:")]
    assert table in out_short
    assert short["summary"]["signature"] == whole["summary"]["signature"]


def test_slice_by_per_entry_jsonl_and_two_systems(tmp_path):
    gold = _sliced_gold(tmp_path)
    rc, _, err = run_main("--pred", SAMPLE_PRED, "--gold", gold, "--no-embeddings", "--quiet", "--slice-by", "topic",
                          "--per-entry-jsonl", tmp_path / "rows.jsonl", "--report", tmp_path / "r.json")
    assert rc == 0, err
    report = load_report(tmp_path / "r.json")
    assert list(report)[-2:] == ["slices", "per_entry_jsonl"]
    assert [s["n_entries"] for s in report["slices"]["keys"]["topic"]] == [10, 10, 5]
    rc, out, err = run_main("--pred", SAMPLE_PRED, "--pred", SAMPLE_BASE, "--gold", gold, "--no-embeddings",
                            "--quiet", "--slice-by", "topic", "--bootstrap", "100", "--trials", "100",
                            "--report", tmp_path / "two.json")
    assert rc == 0, err
    two = load_report(tmp_path / "two.json")
    assert list(two) == ["systems", "comparison", "slices"]
    first = two["slices"]["keys"]["topic"][0]["metrics"]
    assert list(first) == ["finetuned", "base"] and "p_value" in first["base"]["hgr.macro.composite"]


def test_a_report_path_that_is_a_symbolic_link_is_written_through(tmp_path):
    # Before, the rerun's check read the link's target but the rename replaced the link
    # with a file (the target left stale). Now the target is replaced and the link stays;
    # a dangling link's target is made.
    (tmp_path / "runs").mkdir()
    args = ["--pred", str(FINETUNED), "--gold", str(GOLD), "--no-embeddings", "--quiet"]
    assert run_main(*args, "--report", str(tmp_path / "direct.json"), cwd=ROOT)[0] == 0
    want = (tmp_path / "direct.json").read_bytes()
    target = tmp_path / "runs" / "latest.json"
    link = tmp_path / "latest.json"
    link.symlink_to(Path("runs") / "latest.json")          # dangling: the first run makes the target
    for _ in range(2):                                      # the second replaces its own run through the link
        assert run_main(*args, "--report", str(link), cwd=ROOT)[0] == 0
        assert link.is_symlink() and os.readlink(link) == str(Path("runs") / "latest.json")
        assert target.read_bytes() == want
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["latest.json"]   # no temporary file left
