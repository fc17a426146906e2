"""Run a git revision's evaluate.py and this checkout's side by side on every kind of run
and check that they write the same bytes: stdout, stderr, exit status and every file.

    uv run python benchmarks/identical_outputs.py --baseline REV            # every scenario
    uv run python benchmarks/identical_outputs.py --baseline REV sample shards
    uv run python benchmarks/identical_outputs.py --list

A restructuring or a speed-up must change no output (issues 18 and 20). Each scenario is a
list of command lines run one after another in one folder (so ``--merge`` and
``--compare`` read what earlier commands wrote). Both revisions run at the same paths:
the script is copied to ``<tmp>/bin/evaluate.py`` and the scenario runs in ``<tmp>/run``,
for the baseline first and then for the checkout, so no path in a message or a report
differs between the two. What is compared: each command's exit status, stdout and stderr,
then every file left in the folder, byte for byte. ``--ignore-version`` replaces the
tool version string (``__version__``) by a placeholder on both sides when it changed.

Scenarios that need ``../shared/data`` (the parity sample, WebNLG 2020, Text2KGBench) are
skipped, with a line saying so, where it is absent. Exit status: 0 when every compared
output is identical, 1 when one differs (each difference listed, with the first differing
line), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _baseline import ROOT, cli_env, write_revision  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SAMPLE_PRED = ROOT / "predictions" / "finetuned.jsonl"
SAMPLE_BASE = ROOT / "predictions" / "base.jsonl"
SAMPLE_GOLD = ROOT / "gold" / "gold.jsonl"
PARITY = SHARED / "parity-sample"
WEBNLG = SHARED / "webnlg2020"
T2K = SHARED / "text2kgbench" / "data" / "dbpedia_webnlg"
NLTK_DATA = ROOT.parent / "shared" / "nltk_data"
LEX = ["--no-embeddings"]


@dataclass
class Scenario:
    """Command lines (argument lists after ``evaluate.py``) run in order in one folder;
    ``files`` are written into the folder first (name -> text); ``needs`` is a path that
    must exist (shared data), else the scenario is skipped."""

    name: str
    commands: list[list[str]]
    files: dict[str, str] = field(default_factory=dict)
    needs: Path | None = None


def _bad_input_files() -> dict[str, str]:
    good = SAMPLE_GOLD.read_text(encoding="utf-8").splitlines(keepends=True)
    pred = SAMPLE_PRED.read_text(encoding="utf-8").splitlines(keepends=True)
    return {
        "broken_json.jsonl": pred[0] + '{"id": "x", "triplets": [\n' + "".join(pred[2:]),
        "not_object.jsonl": pred[0] + "[1, 2, 3]\n" + "".join(pred[2:]),
        "dup_gold.jsonl": good[0] + good[0] + "".join(good[2:]),
        "empty.jsonl": "",
        "bad_item.jsonl": pred[0].replace('"weight": ', '"weight": "heavy", "w": ', 1) + "".join(pred[1:]),
        "extra_pred.jsonl": "".join(pred) + '{"id": "no-such-id", "triplets": []}\n',
        "gold_no_ids.jsonl": "".join(line.replace('"id"', '"ident"', 1) for line in good),
        "bom.jsonl": "\ufeff" + "".join(pred),
        "vocab.txt": "located_in\nfounded_by\n",
    }


def scenarios() -> list[Scenario]:
    """Every scenario, in the order they run."""
    sample = ["--pred", str(SAMPLE_PRED), "--gold", str(SAMPLE_GOLD), *LEX]
    pair = ["--pred", str(SAMPLE_BASE), "--pred", str(SAMPLE_PRED), "--gold", str(SAMPLE_GOLD), *LEX]
    out = [
        Scenario("sample", [
            [*sample, "--report", "sample.json"],
            [*sample, "--metrics", "all", "--report", "all.json"],
            [*sample, "--report", "-", "--workers", "1"],
            [*sample, "--no-report", "--sweep", "--bootstrap", "200", "--seed", "7"],
            [*sample, "--per-entry-jsonl", "rows.jsonl", "--report", "s2.json"],
            [*sample, "--summary-only", "--report", "summary_only.json"],
            [*sample, "--limit", "7", "--report", "limit7.json"],
            [*sample, "--relations", "vocab.txt", "--report", "vocab.json"],
        ], files={"vocab.txt": "located_in\nfounded_by\ndeveloped_by\n"}),
        Scenario("comparison", [
            [*pair, "--bootstrap", "300", "--trials", "2000", "--report", "cmp.json"],
            *[[*pair, "--bootstrap", "300", "--trials", "2000", "--no-report", "--format", fmt]
              for fmt in ("text", "markdown", "latex", "csv", "json")],
            [*pair, "--bootstrap", "300", "--trials", "2000", "--correction", "holm", "--no-report"],
            [*pair, "--bootstrap", "300", "--trials", "2000", "--plots", "plots", "--no-report"],
        ]),
        Scenario("compare_reports", [
            ["--pred", str(SAMPLE_BASE), "--gold", str(SAMPLE_GOLD), *LEX, "--report", "base.json"],
            [*sample, "--report", "ft.json"],
            ["--compare", "base.json", "ft.json", "--bootstrap", "300", "--trials", "2000", "--report", "c.json"],
            ["--compare", "base.json", "ft.json", "--bootstrap", "300", "--trials", "2000", "--no-report",
             "--format", "markdown"],
        ]),
        Scenario("shards", [
            *[[*sample, "--shard", f"{k}/3", "--metrics", "all"] for k in (1, 2, 3)],
            ["--merge", *(f"reports/finetuned.shard-{k}-of-3.json" for k in (1, 2, 3)),
             "--report", "merged.json"],
        ]),
        Scenario("bad_inputs", [
            ["--pred", "broken_json.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            ["--pred", "not_object.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            ["--pred", str(SAMPLE_PRED), "--gold", "dup_gold.jsonl", *LEX, "--no-report"],
            ["--pred", "empty.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            ["--pred", "bad_item.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            ["--pred", "extra_pred.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            ["--pred", str(SAMPLE_PRED), "--gold", "gold_no_ids.jsonl", *LEX, "--no-report"],
            ["--pred", "bom.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            ["--pred", "missing.jsonl", "--gold", str(SAMPLE_GOLD), *LEX, "--no-report"],
            [*sample, "--metrics", "hgr,nonsense", "--no-report"],
            [*sample, "--shard", "4/3", "--no-report"],
            [*sample, "--bootstrap", "5", "--no-report"],
            ["--compare", "missing.json"],
        ], files=_bad_input_files()),
        Scenario("parity", [
            ["--pred", str(PARITY / "pred.jsonl"), "--gold", str(PARITY / "gold.jsonl"), *LEX,
             "--report", "parity.json", "--metrics", "all"],
            ["--pred", str(PARITY / "combined.jsonl"), *LEX, "--report", "combined.json"],
            ["--pred", str(PARITY / "pred.jsonl"), "--gold", str(PARITY / "gold.jsonl"), *LEX,
             "--report", "w1.json", "--workers", "1", "--sweep"],
        ], needs=PARITY),
        Scenario("webnlg2020", [
            ["--pred", str(WEBNLG / "amazon_all.jsonl"), "--gold", str(WEBNLG / "refs_all.jsonl"),
             "--metrics", "webnlg2020", *LEX, "--report", "amazon.json"],
            ["--pred", str(WEBNLG / "baseline_seen.jsonl"), "--gold", str(WEBNLG / "refs_seen.jsonl"),
             "--metrics", "all", *LEX, "--report", "baseline_seen.json"],
        ], needs=WEBNLG),
        Scenario("text2kgbench", [
            ["--pred", str(T2K / "baselines" / "Vicuna-13B" / "llm_responses"), "--gold",
             str(T2K / "ground_truth"), "--ontology", str(T2K / "ontologies"), "--metrics", "all", *LEX,
             "--report", "vicuna.json"],
        ], needs=T2K),
    ]
    return out


@dataclass
class Outcome:
    """What one revision wrote in one scenario: per command (rc, stdout, stderr), and the
    folder's files (relative path -> bytes) after the last command."""

    runs: list[tuple[int, bytes, bytes]]
    files: dict[str, bytes]


def run_scenario(script: Path, scenario: Scenario, work: Path, env: dict[str, str]) -> Outcome:
    """Run ``scenario`` with ``script`` (copied to ``work/bin/evaluate.py``) in a fresh
    ``work/run`` folder."""
    bin_dir, run_dir = work / "bin", work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True)
    target = bin_dir / "evaluate.py"
    shutil.copyfile(script, target)
    for name, text in scenario.files.items():
        (run_dir / name).write_text(text, encoding="utf-8")
    given = set(scenario.files)
    runs = []
    for args in scenario.commands:
        done = subprocess.run([sys.executable, str(target), *args], cwd=run_dir, env=env,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=1800)
        runs.append((done.returncode, done.stdout, done.stderr))
    files = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.is_file() and rel not in given:
            files[rel] = path.read_bytes()
    return Outcome(runs, files)


def _first_difference(old: bytes, new: bytes) -> str:
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    for line in difflib.unified_diff(a, b, "baseline", "checkout", n=0, lineterm=""):
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++")):
            return line[:300]
    return f"(lengths {len(old)} vs {len(new)})"


def compare(scenario: Scenario, old: Outcome, new: Outcome, versions: tuple[bytes, bytes] | None) -> list[str]:
    """The differences between two outcomes, one line each (empty: identical)."""

    def same(a: bytes, b: bytes) -> bool:
        if versions:
            a = a.replace(versions[0], b"<version>")
            b = b.replace(versions[1], b"<version>")
        return a == b

    problems = []
    for k, (args, (rc0, out0, err0), (rc1, out1, err1)) in enumerate(
            zip(scenario.commands, old.runs, new.runs), 1):
        label = f"{scenario.name} #{k} ({' '.join(a if len(a) < 40 else '…' + a[-30:] for a in args)})"
        if rc0 != rc1:
            problems.append(f"{label}: exit status {rc0} -> {rc1}")
        for stream, a, b in (("stdout", out0, out1), ("stderr", err0, err1)):
            if not same(a, b):
                problems.append(f"{label}: {stream} differs: {_first_difference(a, b)}")
    for name in sorted(set(old.files) | set(new.files)):
        if name not in new.files or name not in old.files:
            problems.append(f"{scenario.name}: file {name} only in the {'baseline' if name in old.files else 'checkout'}")
        elif not same(old.files[name], new.files[name]):
            problems.append(f"{scenario.name}: file {name} differs: "
                            f"{_first_difference(old.files[name], new.files[name])}")
    return problems


def _version_of(script: Path) -> bytes:
    for line in script.read_text(encoding="utf-8").splitlines():
        if line.startswith("__version__ = "):
            return line.split("=", 1)[1].strip().strip("\"'").encode()
    return b""


def main(argv: list[str] | None = None) -> int:
    every = scenarios()
    names = [s.name for s in every]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="*", help=f"scenarios to run (default: all): {', '.join(names)}")
    parser.add_argument("--baseline", default="HEAD", help="git revision to compare with (default HEAD)")
    parser.add_argument("--ignore-version", action="store_true",
                        help="treat the tool version strings of the two revisions as equal")
    parser.add_argument("--list", action="store_true", help="list the scenarios and their commands")
    parser.add_argument("--keep", type=Path, help="copy both revisions' outputs into this folder")
    args = parser.parse_args(argv)
    if args.list:
        for s in every:
            print(f"{s.name}: {len(s.commands)} command(s)" + (f" (needs {s.needs})" if s.needs else ""))
        return 0
    unknown = sorted(set(args.scenario) - set(names))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(names)}")
    chosen = [s for s in every if not args.scenario or s.name in args.scenario]
    env = cli_env()
    env.setdefault("NLTK_DATA", str(NLTK_DATA))
    env["PYTHONHASHSEED"] = "0"
    problems, compared = [], 0
    with tempfile.TemporaryDirectory(prefix="kg-eval-identical-") as tmp:
        work = Path(tmp)
        old_script = write_revision(args.baseline, work)
        new_script = ROOT / "evaluate.py"
        versions = None
        if args.ignore_version:
            versions = (_version_of(old_script), _version_of(new_script))
        for scenario in chosen:
            if scenario.needs is not None and not scenario.needs.exists():
                print(f"{scenario.name}: skipped ({scenario.needs} is absent)")
                continue
            old = run_scenario(old_script, scenario, work / "w", env)
            new = run_scenario(new_script, scenario, work / "w", env)
            if args.keep:
                for side, outcome in (("baseline", old), ("checkout", new)):
                    for name, data in outcome.files.items():
                        dest = args.keep / scenario.name / side / name
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(data)
                    for k, (rc, out, err) in enumerate(outcome.runs, 1):
                        dest = args.keep / scenario.name / side / f"cmd{k}"
                        dest.mkdir(parents=True, exist_ok=True)
                        (dest / "stdout").write_bytes(out)
                        (dest / "stderr").write_bytes(err)
                        (dest / "rc").write_text(f"{rc}\n")
            found = compare(scenario, old, new, versions)
            compared += len(scenario.commands)
            n_files = len(set(old.files) | set(new.files))
            print(f"{scenario.name}: {len(scenario.commands)} command(s), {n_files} file(s): "
                  + ("identical" if not found else f"{len(found)} difference(s)"))
            problems += found
    for line in problems:
        print("  " + line)
    print(f"{compared} command(s) compared against {args.baseline}: "
          + ("every output identical" if not problems else f"{len(problems)} difference(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
