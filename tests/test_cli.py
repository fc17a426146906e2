"""Command-line tests: ``python evaluate.py ...`` as a user runs it (subprocess).

Sample inputs are the project's own ``predictions/`` and ``gold/`` files; the benchmark
tests read ``../shared/data`` (Text2KGBench, WebNLG+ 2020) and skip when it is absent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import evaluate as ev
from conftest import run_main

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATA = SHARED / "data"
NLTK_DATA = SHARED / "nltk_data"
FINETUNED = "predictions/finetuned.jsonl"
BASE = "predictions/base.jsonl"
GOLD = "gold/gold.jsonl"


def run_cli(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python evaluate.py ARGS`` (the project's evaluate.py) and capture its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "evaluate.py"), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=full_env, timeout=300)


def load_report(path: Path) -> dict:
    def reject(token: str) -> Any:
        raise AssertionError(f"report contains the non-JSON token {token}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)


def assert_close(actual: Any, expected: Any, path: str = "", tol: float = 1e-9) -> None:
    """Recursive comparison: same keys, ints/strings equal, floats within ``tol``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert set(actual) == set(expected), (path, sorted(set(actual) ^ set(expected)))
        for k in expected:
            assert_close(actual[k], expected[k], f"{path}.{k}", tol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), path
        for i, (x, y) in enumerate(zip(actual, expected)):
            assert_close(x, y, f"{path}[{i}]", tol)
    elif isinstance(expected, bool) or isinstance(expected, str) or expected is None:
        assert actual == expected, (path, actual, expected)
    elif isinstance(expected, int) and isinstance(actual, int):
        assert actual == expected, (path, actual, expected)
    else:
        assert math.isclose(actual, expected, rel_tol=0, abs_tol=tol), (path, actual, expected)


def count_lines(path: Path) -> int:
    return sum(1 for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip())


# ------------------------------------------------------------------- basic run


@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("cli") / "r.json"
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--report", out)
    return proc, out


def test_basic_run_exit_0_summary_and_report(finetuned_run):
    proc, out = finetuned_run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    # the summary goes to stdout
    assert f"kg-triplet-eval {ev.__version__}" in proc.stdout
    assert "entries 25" in proc.stdout
    assert "micro" in proc.stdout and "macro" in proc.stdout and "composite" in proc.stdout
    assert f"report written to {out}" in proc.stdout
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
    proc = run_cli("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    default = tmp_path / "reports" / "finetuned.json"
    assert default.is_file()
    assert load_report(default)["summary"]["n_entries"] == 25
    assert str(Path("reports") / "finetuned.json") in proc.stdout
    assert list((tmp_path / "reports").iterdir()) == [default]  # no temp file left behind


# ------------------------------------------------------------------ --reparse


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
    assert run_cli("--pred", pred, "--gold", gold, "--no-embeddings", "--reparse", "--report", out).returncode == 0
    reparsed = load_report(out)["per_entry"][0]
    assert reparsed["metrics"]["n_pred_raw_items"] == len(gold_line["triplets"])
    assert reparsed["metrics"]["entity_f1"] == 1.0


# ------------------------------------------------------------ Text2KGBench


T2KG = DATA / "text2kgbench" / "data" / "dbpedia_webnlg"


def _need(path: Path, what: str) -> None:
    if not path.exists():
        pytest.skip(f"{what} not available ({path} is absent)")


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

    expected = json.loads((DATA / "text2kgbench" / "expected.json").read_text())
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


# ------------------------------------------------------------------ WebNLG+ 2020


W = DATA / "webnlg2020"


def test_webnlg2020_unseen_entities_amazon(tmp_path):
    _need(W, "shared WebNLG+ 2020 data")
    _need(NLTK_DATA, "shared NLTK data (Punkt tables)")
    out = tmp_path / "r.json"
    proc = run_cli("--pred", W / "amazon_unseen_entities.jsonl", "--gold", W / "refs_unseen_entities.jsonl",
                   "--metrics", "webnlg2020", "--no-embeddings", "--quiet", "--report", out,
                   env={"NLTK_DATA": str(NLTK_DATA)})
    assert proc.returncode == 0, proc.stderr
    report = load_report(out)
    expected = json.loads((W / "expected.json").read_text())
    ref = expected["results"]["amazon"]["splits"]["unseen_entities"]["reproduced"]
    assert_close(report["webnlg2020"]["Total_scores"], ref["Total_scores"])
    assert_close(report["webnlg2020"]["Scores_per_tag"], ref["Scores_per_tag"])
    assert report["summary"]["n_entries"] == count_lines(W / "refs_unseen_entities.jsonl") == 457


# Three entries: references (first <modifiedtripleset>; the <originaltripleset> must be
# ignored) and candidates (<generatedtripleset>), one triple with an unescaped "&".
XML_ENTRIES = [
    ([("Alan_Bean", "occupation", "Test_pilot"), ("Alan_Bean", "birthPlace", "Wheeler,_Texas")],
     [("Alan_Bean", "occupation", "Test_pilot"), ("Alan_Bean", "birthDate", "1932-03-15")]),
    ([("College_of_William_&_Mary", "city", "Williamsburg,_Virginia")],
     [("College_of_William_&_Mary", "city", "Williamsburg")]),
    ([("AT&T", "foundedBy", "Alexander_Graham_Bell"), ("AT&T", "country", "United_States")],
     [("AT&T", "country", "United_States"), ("Bell", "founder", "AT&T")]),
]


def _xml(kind: str) -> str:
    set_tag, triple_tag = ("modifiedtripleset", "mtriple") if kind == "ref" else ("generatedtripleset", "gtriple")
    parts = ['<?xml version="1.0" ?>', "<benchmark>", "  <entries>"]
    for i, (refs, cands) in enumerate(XML_ENTRIES, 1):
        triples = refs if kind == "ref" else cands
        parts.append(f'    <entry category="Test" eid="Id{i}" size="{len(triples)}">')
        if kind == "ref":
            parts += ["      <originaltripleset>", "        <otriple>X | y | Z</otriple>", "      </originaltripleset>"]
        parts.append(f"      <{set_tag}>")
        for s, p, o in triples:
            # entry 1 and 3 escape "&" properly, entry 2 writes it bare (as some submissions do)
            text = f"{s} | {p} | {o}"
            if i != 2:
                text = text.replace("&", "&amp;")
            parts.append(f"        <{triple_tag}>{text}</{triple_tag}>")
        parts.append(f"      </{set_tag}>")
        if kind == "ref":
            parts.append('      <lex comment="good" lid="Id1">Some text &amp; more.</lex>')
        parts.append("    </entry>")
    parts += ["  </entries>", "</benchmark>", ""]
    return "\n".join(parts)


def test_webnlg2020_xml_and_jsonl_give_the_same_scores(tmp_path):
    _need(NLTK_DATA, "shared NLTK data (Punkt tables)")
    (tmp_path / "ref.xml").write_text(_xml("ref"), encoding="utf-8")
    (tmp_path / "cand.xml").write_text(_xml("cand"), encoding="utf-8")
    with open(tmp_path / "ref.jsonl", "w", encoding="utf-8") as f:
        for refs, _ in XML_ENTRIES:
            f.write(json.dumps({"triples": [list(t) for t in refs]}) + "\n")
    with open(tmp_path / "cand.jsonl", "w", encoding="utf-8") as f:
        for _, cands in XML_ENTRIES:
            f.write(json.dumps({"triples": [list(t) for t in cands]}) + "\n")
    sections, rows = [], []
    for ext in ("xml", "jsonl"):
        out = tmp_path / f"r_{ext}.json"
        proc = run_cli("--pred", tmp_path / f"cand.{ext}", "--gold", tmp_path / f"ref.{ext}",
                       "--metrics", "webnlg2020,strict", "--no-embeddings", "--quiet", "--report", out,
                       env={"NLTK_DATA": str(NLTK_DATA)})
        assert proc.returncode == 0, proc.stderr
        report = load_report(out)
        assert report["summary"]["n_entries"] == 3
        sections.append(report["webnlg2020"])
        rows.append([e["strict"] for e in report["per_entry"]])
    xml_section, jsonl_section = sections
    assert xml_section == jsonl_section
    assert rows[0] == rows[1]
    # the XML reader took the modified (not the original) triples and kept the bare "&":
    # per entry 2/1/2 reference and 2/1/2 candidate triples; exact (normalised) matches:
    # entry 1 "Alan_Bean | occupation | Test_pilot", entry 2 none (Williamsburg differs),
    # entry 3 "AT&T | country | United_States"
    assert [(r["n_gold"], r["n_pred"], r["tp"]) for r in rows[0]] == [(2, 2, 1), (1, 1, 0), (2, 2, 1)]
    # the scorer counts subjects, predicates and objects: Possible = 5 reference triples x 3
    assert xml_section["Total_scores"]["Exact"]["Possible"] == 15
    assert xml_section["excluded_items"] == {"reference": 0, "candidate": 0}


# ------------------------------------------------- contradictory options (issue 9 item 7)


@pytest.mark.parametrize("extra, message", [
    (["--require-embeddings"], "--no-embeddings contradicts --require-embeddings"),
    (["--embedding-model", "BAAI/bge-small-en-v1.5"], "--no-embeddings contradicts --embedding-model"),
    (["--pred", FINETUNED], "--pred given 2 times"),
    (["--gold", "./" + FINETUNED], "are the same file"),
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


# ------------------------------------------------------ SIGTERM cleans up (issue 9 item 10)


def test_sigterm_removes_the_spool_folder_like_ctrl_c(tmp_path):
    import signal
    import time

    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    rows = [json.loads(line) for line in (ROOT / GOLD).read_text().splitlines() if line.strip()]
    preds = [json.loads(line) for line in (ROOT / FINETUNED).read_text().splitlines() if line.strip()]
    gold = tmp_path / "g.jsonl"
    pred = tmp_path / "p.jsonl"
    copies = 400  # 25 x 400 = 10,000 entries: a run of many seconds
    gold.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(copies) for r in rows))
    pred.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(copies) for r in preds))
    report = tmp_path / "out" / "r.json"
    proc = subprocess.Popen([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(pred), "--gold", str(gold),
                             "--no-embeddings", "--report", str(report)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(private_tmp)})
    deadline = time.monotonic() + 120
    while not list(private_tmp.glob("kg-triplet-eval-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(private_tmp.glob("kg-triplet-eval-*")), "the run never created its spool folder"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "terminated: no report written" in err and "Traceback" not in err
    assert list(private_tmp.iterdir()) == []  # no kg-triplet-eval-* folder left behind
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
