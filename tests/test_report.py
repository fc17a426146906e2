"""The report and the printed summary (section "Engine" / "Command line"): ``summary.notices``
(every exclusion, skipped family and fallback that changes a number, also on stdout under
--quiet: issue 9 item 4) and where the report goes (default path never overwrites the
report of another input, ``--report -``, ``--no-report``: issue 9 item 6).

A = Acme Inc -located_in-> City Y (0.9), B = Acme Inc -founded_by-> Person Z (0.8).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import evaluate as ev
from conftest import ACME_A as A, ACME_B as B, run_main, write_jsonl

PROMPT = "Acme Inc is located in City Y. It was founded by Person Z."


def notices_on_stdout(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("notices ("))
    count = int(lines[start].split("(")[1].split(")")[0])
    return [line.strip() for line in lines[start + 1:start + 1 + count]]


# ------------------------------------------------------------------- item 4: notices


def test_skip_bad_gold_exclusion_is_on_stdout_under_quiet_and_in_the_report(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "r1", "prompt": PROMPT, "triplets": [A]},
                                              b'{"id": "r2", "prompt": "x", "triplets": [\n'])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"id": "r1", "triplets": [A]}, {"id": "r2", "triplets": [B]}])
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--skip-bad-gold", "--quiet", "--no-embeddings",
                            "--report", report)
    assert rc == 0 and err == ""  # --quiet: nothing on stderr ...
    shown = notices_on_stdout(out)  # ... but the summary says what was excluded
    assert [line.split(":")[0] for line in shown] == ["excluded_gold_line", "dropped_with_excluded_gold"]
    assert "g.jsonl: line 2: invalid JSON" in shown[0] and "(excluded: --skip-bad-gold)" in shown[0]
    assert "1 prediction line(s) dropped with their excluded gold lines (ids 'r2')" in shown[1]
    summary = json.loads(report.read_text())["summary"]
    assert summary["n_entries"] == 1
    assert [f"{n['kind']}: {n['message']}" for n in summary["notices"]] == shown


def test_metrics_all_without_nltk_records_the_skipped_families(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "nltk_missing", lambda: "NLTK is not installed")
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", "predictions/finetuned.jsonl", "--gold", "gold/gold.jsonl", "--metrics", "all",
                            "--quiet", "--no-embeddings", "--report", report, cwd=Path(__file__).parents[1])
    assert rc == 0, err
    summary = json.loads(report.read_text())["summary"]
    skipped = [n["message"].split(" skipped")[0] for n in summary["notices"] if n["kind"] == "family_skipped"]
    assert skipped == ["--metrics all: text2kgbench", "--metrics all: webnlg2020"]
    assert summary["config"]["metric_families"] == ["hgr", "strict", "per-relation", "calibration", "sweep",
                                                 "errors"]
    assert sum(line.startswith("family_skipped: --metrics all:") for line in notices_on_stdout(out)) == 2


def test_metrics_all_without_an_ontology_notices_the_skipped_text2kgbench(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "nltk_missing", lambda: None)  # NLTK present: only the ontology is lacking
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", "predictions/finetuned.jsonl", "--gold", "gold/gold.jsonl", "--metrics", "all",
                            "--quiet", "--no-embeddings", "--report", report, "--limit", "2",
                            cwd=Path(__file__).parents[1])
    assert rc == 0, err
    summary = json.loads(report.read_text())["summary"]
    assert [n for n in summary["notices"] if n["kind"] == "family_skipped"] == [{
        "kind": "family_skipped",
        "message": "--metrics all: text2kgbench skipped (it needs an ontology: pass --ontology FILE, a Text2KGBench "
                   "ontology JSON)"}]
    assert "text2kgbench" not in summary["config"]["metric_families"]
    assert "family_skipped: --metrics all: text2kgbench skipped" in out


def test_metrics_all_with_a_relation_list_skips_text2kgbench_saying_it_needs_an_ontology_json(tmp_path, monkeypatch):
    # review 4, N7: a plain-text --relations is a relation list, not an ontology: the run goes
    # on (before: "not a Text2KGBench ontology JSON", exit 2), text2kgbench skipped with a notice
    # that names the list; the list still checks the relations
    monkeypatch.setattr(ev, "nltk_missing", lambda: None)
    rels = tmp_path / "rels.txt"
    rels.write_text("".join(r + "\n" for r in ev.SPEC_RELATIONS), encoding="utf-8")
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", "predictions/finetuned.jsonl", "--gold", "gold/gold.jsonl", "--metrics", "all",
                            "--relations", rels, "--quiet", "--no-embeddings", "--report", report, "--limit", "2",
                            cwd=Path(__file__).parents[1])
    assert rc == 0, err
    summary = json.loads(report.read_text())["summary"]
    assert [n["message"] for n in summary["notices"] if n["kind"] == "family_skipped"] == [
        f"--metrics all: text2kgbench skipped (it needs an ontology: pass --ontology FILE, a Text2KGBench ontology "
        f"JSON; --relations {rels} is a relation list)"]
    assert "text2kgbench" not in summary["config"]["metric_families"]
    assert summary["relation_vocabulary"]["source"] == "rels.txt"


def test_embedding_fallback_is_a_notice(tmp_path):
    report = ev.evaluate_entries([], similarity=ev.Similarity(fallback_reason="no model downloaded"))
    assert report["summary"]["notices"] == [{"kind": "embedding_fallback", "message": (
        "FALLBACK to lexical similarity (not comparable with embedding scores): no model downloaded")}]
    assert "  embedding_fallback: FALLBACK to lexical similarity" in ev.format_summary(report)


def test_limit_and_line_order_are_notices_in_the_summary(tmp_path):
    gold = write_jsonl(tmp_path / "g.jsonl", [{"prompt": PROMPT, "triplets": [A]}, {"prompt": PROMPT, "triplets": [B]}])
    pred = write_jsonl(tmp_path / "p.jsonl", [{"triplets": [A]}, {"triplets": [B]}])
    rc, out, err = run_main("--pred", pred, "--gold", gold, "--limit", "1", "--quiet", "--no-embeddings",
                            "--no-report")
    assert rc == 0, err
    shown = notices_on_stdout(out)
    assert shown[0].startswith("join_by_line_order: records paired by line order")
    assert shown[1] == "limit: --limit 1: scored the first 1 of 2 entries"
    assert "no report written" not in out + err  # stdout: the summary alone; --quiet: nothing on stderr


def test_a_clean_run_has_no_notices(tmp_path):
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", "predictions/finetuned.jsonl", "--gold", "gold/gold.jsonl", "--quiet",
                            "--no-embeddings", "--report", report, cwd=Path(__file__).parents[1])
    assert rc == 0
    assert json.loads(report.read_text())["summary"]["notices"] == [] and "notices (" not in out


# ----------------------------------------------------------------- item 6: report path


@pytest.fixture
def two_runs(tmp_path) -> tuple[Path, Path, Path]:
    """runs/qwen/pred.jsonl and runs/llama/pred.jsonl (same stem), and a gold file."""
    gold = write_jsonl(tmp_path / "gold.jsonl", [{"id": "r1", "prompt": PROMPT, "triplets": [A]}])
    qwen, llama = tmp_path / "runs" / "qwen", tmp_path / "runs" / "llama"
    qwen.mkdir(parents=True)
    llama.mkdir(parents=True)
    return (write_jsonl(qwen / "pred.jsonl", [{"id": "r1", "triplets": [A]}]),
            write_jsonl(llama / "pred.jsonl", [{"id": "r1", "triplets": []}]), gold)


def test_default_report_of_another_pred_with_the_same_name_is_not_overwritten(tmp_path, two_runs):
    qwen, llama, gold = two_runs
    common = ("--gold", gold, "--no-embeddings", "--quiet")
    assert run_main("--pred", qwen, *common, cwd=tmp_path)[0] == 0
    default = tmp_path / "reports" / "pred.json"
    first = default.read_bytes()
    assert json.loads(first)["summary"]["inputs"]["pred"]["path"] == str(qwen.resolve())
    rc, out, err = run_main("--pred", llama, *common, cwd=tmp_path)
    assert rc == 2
    assert f"default report path {Path('reports') / 'pred.json'} exists and is the report of {qwen.resolve()}" in err
    assert "--report PATH" in err and "--no-report" in err
    assert default.read_bytes() == first
    # the same --pred again may replace its own report (same input, same bytes)
    assert run_main("--pred", qwen, *common, cwd=tmp_path)[0] == 0
    assert default.read_bytes() == first


def test_default_report_path_that_is_not_our_report_is_refused(tmp_path, two_runs):
    qwen, _, gold = two_runs
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "pred.json").write_text("my notes\n")
    rc, out, err = run_main("--pred", qwen, "--gold", gold, "--no-embeddings", cwd=tmp_path)
    assert rc == 2 and "not a kg-triplet-eval report" in err
    assert (tmp_path / "reports" / "pred.json").read_text() == "my notes\n"


def test_pred_from_a_pipe_needs_an_explicit_report_choice(tmp_path, two_runs):
    qwen, _, gold = two_runs
    read_fd, write_fd = os.pipe()
    os.write(write_fd, qwen.read_bytes())
    os.close(write_fd)
    try:
        rc, out, err = run_main("--pred", f"/dev/fd/{read_fd}", "--gold", gold, "--no-embeddings", cwd=tmp_path)
    finally:
        os.close(read_fd)
    assert rc == 2
    assert "not a regular file" in err and "--report PATH, --report - (the report on stdout) or --no-report" in err
    assert not (tmp_path / "reports").exists()


def test_report_dash_writes_the_report_to_stdout_and_the_summary_to_stderr(tmp_path, two_runs):
    qwen, _, gold = two_runs
    rc, out, err = run_main("--pred", qwen, "--gold", gold, "--no-embeddings", "--quiet", "--report", "-",
                            cwd=tmp_path)
    assert rc == 0
    report = json.loads(out)  # stdout is the report and nothing else
    assert report["summary"]["n_entries"] == 1 and report["per_entry"][0]["metrics"]["triplet_f1"] == 1.0
    assert "entries 1" in err
    assert out == ev.report_json(report)
    assert not (tmp_path / "reports").exists()


def test_no_report_writes_nothing_and_contradicts_report(tmp_path, two_runs):
    qwen, _, gold = two_runs
    rc, out, err = run_main("--pred", qwen, "--gold", gold, "--no-embeddings", "--no-report", cwd=tmp_path)
    assert rc == 0 and "entries 1" in out and not (tmp_path / "reports").exists()
    rc, out, err = run_main("--pred", qwen, "--gold", gold, "--no-embeddings", "--no-report", "--report", "x.json",
                            cwd=tmp_path)
    assert rc == 2 and "--no-report contradicts --report x.json" in err
    # --summary-only shapes the report that --no-report does not write (before: accepted silently)
    rc, out, err = run_main("--pred", qwen, "--gold", gold, "--no-embeddings", "--no-report", "--summary-only",
                            cwd=tmp_path)
    assert rc == 2 and ("--summary-only leaves the per-entry rows out of the report, and --no-report writes no "
                        "report, so it would change nothing: give one of them") in err


def test_printed_notices_are_capped_with_a_pointer_to_the_report():
    report = ev.evaluate_entries([], similarity=ev.Similarity())
    report["summary"]["notices"] = [ev.notice("bad_prediction_line", f"p.jsonl: line {k}: invalid JSON")
                                    for k in range(1, ev.SUMMARY_NOTICES_SHOWN + 4)]
    text = ev.format_summary(report)
    assert f"notices ({ev.SUMMARY_NOTICES_SHOWN + 3}): what changed the numbers below" in text
    assert "  ... 3 more (summary.notices in the report)" in text
    assert f"line {ev.SUMMARY_NOTICES_SHOWN}: invalid JSON" in text
    assert f"line {ev.SUMMARY_NOTICES_SHOWN + 1}: invalid JSON" not in text


def test_a_piped_input_gives_byte_identical_reports(tmp_path):
    # the same predictions through two different pipes (two processes, two /proc/<pid>/fd
    # paths): same bytes, and the input is recorded as a stream with the content's SHA-256
    import hashlib
    import subprocess
    import sys

    gold = write_jsonl(tmp_path / "g.jsonl", [{"id": "1", "prompt": PROMPT, "triplets": [A, B]}])
    text = json.dumps({"id": "1", "triplets": [A]}) + "\n"
    reports = []
    for k in range(2):
        report = tmp_path / f"r{k}.json"
        proc = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "evaluate.py"), "--pred", "/dev/stdin",
                               "--gold", str(gold), "--no-embeddings", "--quiet", "--report", str(report)],
                              input=text, text=True, capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        reports.append(report.read_bytes())
    assert reports[0] == reports[1]
    inputs = json.loads(reports[0])["summary"]["inputs"]
    assert inputs["pred"] == {"name": "stream", "sha256": hashlib.sha256(text.encode()).hexdigest(), "path": None}
    assert inputs["gold"]["path"] == str(gold.resolve())


# --------------------------------------------------------------------------------------
# The same report bytes on every supported Python (3.11, 3.12, 3.13)
# --------------------------------------------------------------------------------------

#: What the CLI imports on a lexical run of every family (fastembed is imported only when
#: embeddings are used); pinned to the lock by ``uv export``.
CROSS_PYTHON_PACKAGES = {"numpy", "json-repair", "orjson", "msgspec", "tqdm", "platformdirs", "filelock",
                         "nltk", "click", "joblib", "regex"}


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` ("3.12"): on PATH, under pyenv, or one uv knows."""
    import glob
    import shutil
    import subprocess

    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    uv = shutil.which("uv")
    if uv:
        found = subprocess.run([uv, "python", "find", "--no-project", version], capture_output=True, text=True)
        candidates.append(found.stdout.strip() if found.returncode == 0 else None)
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", "import sys; print(sys.version)"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def python_env(version: str, folder: Path) -> str:
    """A virtual environment of ``version`` with the locked versions of the packages a
    lexical run needs; skips the test (with the reason) when that is not possible."""
    import shutil
    import subprocess

    from helpers import ROOT

    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed: cannot make another interpreter's environment")
    interpreter = find_python(version)
    if interpreter is None:
        pytest.skip(f"no Python {version} interpreter found (PATH, pyenv, uv)")
    exported = subprocess.run([uv, "export", "--frozen", "--no-hashes", "--no-emit-project", "--all-extras"],
                              cwd=ROOT, capture_output=True, text=True)
    if exported.returncode != 0:
        pytest.skip(f"uv export failed: {exported.stderr.strip()[:200]}")
    pins = [line for line in exported.stdout.splitlines()
            if line.split("==")[0].strip().lower() in CROSS_PYTHON_PACKAGES]
    requirements = folder / "requirements.txt"
    requirements.write_text("\n".join(pins) + "\n", encoding="utf-8")
    venv = folder / f"py{version}"
    for command in ([uv, "venv", "--quiet", "-p", interpreter, str(venv)],
                    [uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                     "-r", str(requirements)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"cannot make the Python {version} environment ({' '.join(command[:3])}): "
                        f"{done.stderr.strip()[:300]}")
    return str(venv / "bin" / "python")


def report_without_config(path: Path) -> str:
    """The report's JSON with ``summary.config`` (interpreter, library versions, timing)
    and the version parts of ``summary.signature`` removed, written back exactly (float
    reprs unchanged)."""
    report = json.loads(path.read_text(encoding="utf-8"))
    versions = report["summary"].pop("config")["versions"]
    # the signature names the same versions (py:, unicode:, each package's): those go too
    keys = {"py", "unicode", "version", "numpy", *versions}
    report["summary"]["signature"] = "|".join(
        part for part in report["summary"]["signature"].split("|") if part.split(":", 1)[0] not in keys)
    return json.dumps(report, ensure_ascii=False, indent=1)


def test_reports_are_identical_on_python_311_312_313(tmp_path_factory):
    # every family on the sample data, lexical path: the reports agree to the byte apart from
    # summary.config (python, package versions, unicodedata version, wall-clock timing)
    import subprocess

    from helpers import NLTK_DATA, ROOT

    if not (NLTK_DATA / "tokenizers").is_dir():
        pytest.skip(f"NLTK tables not found in {NLTK_DATA}")
    folder = tmp_path_factory.mktemp("pythons")
    pythons = {"3.11": sys.executable if sys.version_info[:2] == (3, 11) else python_env("3.11", folder)}
    for version in ("3.12", "3.13"):
        if sys.version_info[:2] == tuple(map(int, version.split("."))):
            pythons[version] = sys.executable
        else:
            pythons[version] = python_env(version, folder)
    reports = {}
    for version, python in pythons.items():
        out = folder / f"report-{version}.json"
        done = subprocess.run(
            [python, str(ROOT / "evaluate.py"), "--pred", "predictions/base.jsonl", "--gold", "gold/gold.jsonl",
             "--no-embeddings", "--metrics", "all", "--quiet", "--report", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "NLTK_DATA": str(NLTK_DATA)})
        assert done.returncode == 0, (version, done.stderr[-2000:])
        reports[version] = report_without_config(out)
        versions = json.loads(out.read_text(encoding="utf-8"))["summary"]["config"]["versions"]
        assert versions["python"].startswith(version + ".")      # really that interpreter
    first = reports["3.11"]
    for version, text in reports.items():
        assert text == first, f"the Python {version} report differs from 3.11's"


# ----------------------------------------------- the run a report holds (ReportHead)


@pytest.mark.parametrize("text", [
    '{"summary": {"a": 1}, "per_entry": [{"x": 1.5}, {"y": [1, 2]}], "systems": {"s": {}}}',
    '{"summary": 1, "summary": 2, "comparison": {"signature": "boot:10"}}',  # the last of repeated keys
    '{"summary": {"n": 123456789012345678901234567890, "f": 1e400}, "x": "\\u00e9"}',  # a big int, inf
    '{"summary": 1, "per_entry": [NaN]}',                  # json reads NaN, msgspec does not
    '{"summary": 1, "per_entry": ["\\ud800"]}',            # a lone surrogate escape: json reads it
    '[{"summary": 1}]', '"summary"', '3', '{}', '{"per_entry": []}',
    '{"summary": 1, "per_entry": [1,]}', '{"summary": 1} x', '\ufeff{"summary": 1}', '{"summary": "\x01"}',
    '{"summary": 1,\r\n "per_entry": []}\r\n',
])
def test_report_head_reads_what_json_loads_reads(text):
    """ReportHead.read gives json.loads's top-level summary/systems/comparison (or its
    value, when not an object) and its error class, without building the other values."""
    raw = text.encode("utf-8", "surrogatepass")
    try:
        want = json.loads(text)
    except ValueError as exc:
        with pytest.raises(type(exc)):
            ev.ReportHead.read(raw)
        return
    got = ev.ReportHead.read(raw)
    if isinstance(want, dict):
        want = {k: want[k] for k in ("summary", "systems", "comparison") if k in want}
    assert got == want or (json.dumps(got) == json.dumps(want))  # NaN != NaN: compared as text


def test_report_head_of_a_real_report_gives_its_run(tmp_path, two_runs):
    qwen, _, gold = two_runs
    report = tmp_path / "r.json"
    assert run_main("--pred", qwen, "--gold", gold, "--no-embeddings", "--quiet", "--report", report)[0] == 0
    raw = report.read_bytes()
    full = json.loads(raw)
    assert ev.ReportHead.read(raw) == {"summary": full["summary"]}
    assert ev._report_runs(ev.ReportHead.read(raw)) == ev._report_runs(full) is not None
    assert ev._recorded_pred_paths(report) == [str(qwen.resolve())]
    # non-UTF-8 bytes: the UnicodeDecodeError of the text-mode read
    with pytest.raises(UnicodeDecodeError):
        ev.ReportHead.read(raw[:20] + b"\xff" + raw[20:])


@pytest.mark.parametrize("raw, blank", [
    (b"", True), (b" \t\r\n\x0b\x0c\x1c\x1d\x1e\x1f", True),   # what str.strip leaves empty
    ("\u3000\u2028 ".encode(), True),                           # non-ASCII whitespace: decoded first
    (b"\x00", False), (b"  x", False), (b"\x85", None),          # \x85 alone is no UTF-8: unreadable
])
def test_report_head_runs_of_blank_and_unreadable_files(tmp_path, raw, blank):
    """ReportHead.runs: a file that text.strip() leaves empty is EMPTY (it may be replaced),
    one that is not UTF-8 JSON is None (not a report), as the decoded text says."""
    path = tmp_path / "r.json"
    path.write_bytes(raw)
    got = ev.ReportHead.runs(path)
    if blank:
        assert got is ev.ReportHead.EMPTY
    else:
        assert got is None


def _whole_head(raw: bytes):
    """What ReportHead.load must give for ``raw``: the reading of the whole text (the
    value, EMPTY, or the error class)."""
    try:
        text = raw.decode("utf-8")
        if not text.strip():
            return ev.ReportHead.EMPTY
        return ev.ReportHead.read(raw)
    except (ValueError, RecursionError) as exc:
        return type(exc)


def _load(path: Path):
    try:
        return ev.ReportHead.load(path)
    except (ValueError, RecursionError) as exc:
        return type(exc)


def _rows_text(rows: list) -> bytes:
    """A report in our writer's layout: a summary, then per_entry, one row at four spaces."""
    return ev._json_bytes({"summary": {"note": "caf\u00e9", "n": len(rows)}, "per_entry": rows}) + b"\n"


ROWS = [{"id": f"e{k}", "metrics": {"f1": k / 7, "none": None}, "text": "\u00e0\u4e2d" * (k % 3)} for k in range(9)]
GOOD = _rows_text(ROWS)
#: Changes of GOOD at its n-th row separator or at its end, each read as the whole text is read.
VARIANTS = {
    "as written": GOOD,
    "no final newline": GOOD.rstrip(b"\n"),
    "trailing spaces and CRLF": GOOD + b" \r\n\t",
    "trailing garbage": GOOD + b"x",
    "a key after the rows": GOOD.replace(b"\n  ]\n}", b'\n  ],\n  "summary": 2\n}'),
    "truncated": GOOD[:len(GOOD) // 2],
    "a trailing comma in the rows": GOOD.replace(b"\n    }\n  ]", b"\n    },\n  ]"),
    "NaN in a row (json reads it)": GOOD.replace(b'"none": null', b'"none": NaN', 3),
    "a lone surrogate escape in a row": GOOD.replace(b'"e4"', b'"\\ud800"'),
    "invalid UTF-8 in a row": GOOD.replace(b'"e5"', b'"\xff"'),
    "a cut UTF-8 sequence at the end": GOOD.rstrip(b"\n") + b"\xe4",
    "a row that is no object": GOOD.replace(b'"per_entry": [\n    {', b'"per_entry": [\n    1, {'),
    "a separator inside a nested value": GOOD.replace(b'"metrics": {', b'"metrics": [\n    },\n    {', 1),
    "a raw newline in a string": GOOD.replace(b'"e6"', b'"e\n    },\n    {6"'),
    "the rows key nested": b'{"x": {\n  "per_entry": [\n    {}\n  ]\n}}',
    "no rows key": b'{"summary": 1}',
    "empty rows": ev._json_bytes({"summary": 1, "per_entry": []}),
    "deep nesting in a row": GOOD.replace(b'"e7"', b"[" * 100_000 + b"]" * 100_000),
    "CRLF layout": GOOD.replace(b"\n", b"\r\n"),
    "a BOM": b"\xef\xbb\xbf" + GOOD,
}


def _load_by(path: Path, workers: int):
    try:
        return ev.ReportHead.load(path, workers)
    except (ValueError, RecursionError) as exc:
        return type(exc)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 22])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_report_head_load_reads_what_the_whole_text_reads(tmp_path, monkeypatch, name, chunk):
    """ReportHead.load, which checks a report of our layout a chunk at a time (any chunk
    size), by one process or by several (its rows cut into parts checked by forked
    processes), gives what reading the whole text gives: the head, EMPTY, or the same error."""
    monkeypatch.setattr(ev.ReportHead, "CHUNK", chunk)
    path = tmp_path / "r.json"
    path.write_bytes(VARIANTS[name])
    want = _whole_head(VARIANTS[name])
    assert _load(path) == want
    monkeypatch.setattr(ev.ReportHead, "CHECK_PARALLEL_MIN_BYTES", 0)
    for workers in (2, 3, 40):   # 40: more parts than separators
        assert _load_by(path, workers) == want


def test_report_rows_are_cut_into_parts_at_row_separators(tmp_path, monkeypatch):
    """_row_parts: with several workers the rows of a report of CHECK_PARALLEL_MIN_BYTES or
    more are cut into about equal parts, each ending with a row's "}" and the next starting
    after its ","; fewer bytes, or one worker: one part to the end. Every part of a good
    report checks; a bad byte fails only the part that holds it, and the whole check."""
    rows = [{"id": f"e{k}", "text": "\u00e0" * (k % 50)} for k in range(3000)]
    raw = _rows_text(rows)
    path = tmp_path / "r.json"
    path.write_bytes(raw)
    at = raw.find(ev.ReportHead.ROWS_KEY) + len(ev.ReportHead.ROWS_KEY)
    monkeypatch.setattr(ev.ReportHead, "CHUNK", 4096)
    with open(path, "rb") as handle:
        fd = handle.fileno()
        assert ev.ReportHead._row_parts(fd, at, 3) == [(fd, at, None)]     # below CHECK_PARALLEL_MIN_BYTES
        monkeypatch.setattr(ev.ReportHead, "CHECK_PARALLEL_MIN_BYTES", 0)
        assert ev.ReportHead._row_parts(fd, at, 1) == [(fd, at, None)]
        parts = ev.ReportHead._row_parts(fd, at, 3)
        assert len(parts) == 3 and parts[0][1] == at and parts[-1][2] is None
        for (_, _, stop), (_, start, _) in zip(parts, parts[1:]):
            assert raw[stop - 6:start + 6] == ev.ReportHead.ROW_SEP   # "\n    }" | "," | "\n    {"
        sizes = [(stop or len(raw)) - start for _, start, stop in parts]
        assert max(sizes) - min(sizes) < len(raw) // 10                 # about equal shares
        assert all(ev.ReportHead._rows_valid(part) for part in parts)
        # no part under a quarter of CHECK_PARALLEL_MIN_BYTES: --workers 30000 forked one
        # process per row of a 104 MB report (thousands) before a rerun
        monkeypatch.setattr(ev.ReportHead, "CHECK_PARALLEL_MIN_BYTES", (len(raw) - at) // 2)   # quarter: 1/8 of the rows
        assert len(ev.ReportHead._row_parts(fd, at, 30000)) == 8 and len(ev.ReportHead._row_parts(fd, at, 3)) == 3
    bad = bytearray(raw)
    bad[parts[1][1] + 100] = 0xFF                                          # invalid UTF-8 in the middle part
    path.write_bytes(bytes(bad))
    with open(path, "rb") as handle:
        assert [ev.ReportHead._rows_valid((handle.fileno(), start, stop)) for _, start, stop in parts] == [
            True, False, True]
    assert _load_by(path, 3) is UnicodeDecodeError == _whole_head(bytes(bad))


def test_report_head_load_streams_a_report_of_our_layout(tmp_path, monkeypatch):
    """A report as the writer lays it out is read in pieces (never the whole file at
    once: every read is at most CHUNK bytes) and gives its head; a file of another layout
    is read whole."""
    path = tmp_path / "r.json"
    path.write_bytes(GOOD)
    for chunk in (1, 7, 13, 64):   # any chunk size, the rows key ending at a chunk's end included
        monkeypatch.setattr(ev.ReportHead, "CHUNK", chunk)
        with open(path, "rb") as handle:
            assert ev.ReportHead._streamed(handle) == {"summary": {"note": "caf\u00e9", "n": 9}}
    sizes: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def read(self, n=-1):
            data = self.handle.read(n)
            sizes.append(len(data) if n < 0 else n)
            return data

        def readinto(self, buffer):
            sizes.append(len(buffer))
            return self.handle.readinto(buffer)

        def seek(self, *args):
            return self.handle.seek(*args)

        def fileno(self):
            return self.handle.fileno()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    monkeypatch.setattr(ev, "open", lambda p, mode="r", *a, **k: Counting(real_open(p, mode, *a, **k)), raising=False)
    real_pread = os.pread
    monkeypatch.setattr(ev.os, "pread", lambda fd, n, offset: sizes.append(n) or real_pread(fd, n, offset))
    assert ev.ReportHead.load(path) == {"summary": {"note": "caf\u00e9", "n": 9}}
    assert max(sizes) == 64 and len(sizes) > len(GOOD) // 64
    sizes.clear()
    path.write_bytes(VARIANTS["trailing garbage"])
    assert _load(path) is json.JSONDecodeError and len(GOOD) + 1 in sizes  # read whole to give the error
    sizes.clear()
    crlf = VARIANTS["CRLF layout"]
    path.write_bytes(crlf)   # another layout: given up after the head, not buffered to the end first
    assert ev.ReportHead.load(path) == {"summary": {"note": "caf\u00e9", "n": 9}}
    head_reads = -(-(crlf.find(ev.ReportHead.ROWS_KEY) + len(ev.ReportHead.ROWS_KEY)) // 64)
    assert sizes[:head_reads] == [64] * head_reads and sizes[head_reads:] == [len(crlf)]


def test_report_head_of_a_file_nested_too_deep_is_no_report(tmp_path):
    """Nesting deeper than the decoder's recursion limit: not a report of ours (None), as
    any file that is not JSON, for both checks of an existing report path."""
    path = tmp_path / "r.json"
    path.write_bytes(b'{"summary": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert ev.ReportHead.runs(path) is None
    assert ev._recorded_pred_paths(path) is None


def test_report_head_runs_read_once_while_the_file_keeps_its_stat(tmp_path, two_runs, monkeypatch):
    """The runs of a report are read once and given again while its stat is the same (a
    file changed less than RACY_NS before its reading is read again every time); a change
    of its size, its mtime or its inode reads it again; non-ASCII reports read the same."""
    qwen, _, gold = two_runs
    report = tmp_path / "r.json"
    assert run_main("--pred", qwen, "--gold", gold, "--no-embeddings", "--quiet", "--report", report)[0] == 0
    want = ev._report_runs(json.loads(report.read_bytes()))
    reads = []
    real_read = ev.ReportHead.read
    monkeypatch.setattr(ev.ReportHead, "read", lambda raw, **kw: reads.append(1) or real_read(raw, **kw))
    monkeypatch.setattr(ev.ReportHead, "_kept", {})
    assert ev.ReportHead.runs(report) == want and ev.ReportHead.runs(report) == want
    assert len(reads) == 2                                   # just written: racy, read every time
    monkeypatch.setattr(ev.ReportHead, "RACY_NS", -10**12)   # as if written long before
    assert ev.ReportHead.runs(report) == want == ev.ReportHead.runs(report)
    assert len(reads) == 3                                   # read once, then kept
    os.utime(report, ns=(10**18, 10**18))                    # another mtime: read again
    assert ev.ReportHead.runs(report) == want and len(reads) == 4
    text = report.read_text(encoding="utf-8")
    replaced = tmp_path / "r2.json"
    replaced.write_text(text.replace('"summary": {', '"summary": {"note": "caf\u00e9 \u00e0",', 1), encoding="utf-8")
    os.replace(replaced, report)                             # another inode, non-ASCII text
    assert ev.ReportHead.runs(report) == want and len(reads) == 5
