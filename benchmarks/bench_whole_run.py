"""Benchmark: the whole lexical command-line run on generated sets (default 20,000 entries),
this checkout against a baseline revision (default: eae578e, before issue 11), side by side.

Run: ``uv run python benchmarks/bench_whole_run.py [--entries N[,N...]] [--baseline REV]
[--repeats R] [--seed S] [--workers N] [--replace-report] [--as-is-env] [--table]``; issue 20's
table: ``--entries 5000,20000,100000 --baseline 3687f41 --workers 2 --table``.

Writes the seeded corpus of ``bench_lexical.py`` as gold and prediction JSONL files (the
same files for every run), then runs, interleaved ``--repeats`` times, four command
lines on them (reading, scoring, report writing; ``--no-embeddings --quiet``), after one
untimed warm-up run of each, in a user's normal environment (bytecode caches written and
reused: ``PYTHONDONTWRITEBYTECODE`` removed; ``--as-is-env`` keeps this process's
environment, see ``_baseline.cli_env``):

  * ``baseline, workers 1`` and ``baseline``: evaluate.py of ``--baseline`` (``git show
    REV:evaluate.py``, run by path), with ``--workers 1`` and with its default workers;
  * ``workers 1``: this checkout with ``--workers 1`` (one process);
  * ``default``: this checkout with its default workers (the cores this process may use), or
    ``--workers N`` (both revisions' parallel runs then get N).

Each timed run writes a new report (the report of the run before is removed first): the
CPU per entry is then the work of reading, scoring and writing alone. With
``--replace-report`` each run replaces the report its command line wrote before, as a
repeated command does; the existing report is then read first, to tell that it holds the
same run, and that check is part of the time. It is a cost per run that grows with the
report, not per-entry work, and it differs most between revisions: 3687f41 reads the whole
report with ``json.loads`` (about 28 s of CPU and 1.6 GB at 100,000 entries), this
checkout streams it. Prints, per corpus size, the median wall time, the
median CPU time (all processes of the run) and the CPU per entry of each, the ratios this
checkout / baseline (the same workers setting), whether the numbers are identical (every numeric
field that both reports' summaries and family sections have, ``config`` aside; fields
added after the baseline are not compared, as in bench_solver; macro means may move in
their last digits, within 1e-12 relative, because the baseline summed floats where this
checkout sums exactly and rounds once: listed, not counted as differences), whether
the reports are byte-identical (this checkout's two, and all four), and each revision's wall
speedup of its parallel runs over one worker; ``--table``: every size in one Markdown table
(README, Benchmarks). Not a test: wall-clock numbers on shared machines are noisy (other
processes take cores); read the ratios, on quiet cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402
from bench_workers import write_corpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def timed_cli(script: Path, gold: Path, pred: Path, report: Path, extra: list[str],
              env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the run and its worker processes) of one command line."""
    cmd = [sys.executable, str(script), "--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
           "--report", str(report), *extra]
    before = os.times()
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user + after.children_system) - (before.children_user + before.children_system)


def numeric_fields(value: Any, path: str = "") -> dict[str, Any]:
    """Every int/float leaf of a report (``per_entry`` and ``config`` left out), by path."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in ("per_entry", "config"):
                out.update(numeric_fields(item, f"{path}/{key}"))
    elif isinstance(value, list):
        for k, item in enumerate(value):
            out.update(numeric_fields(item, f"{path}[{k}]"))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[path] = value
    return out


def differing_numbers(new: dict[str, Any], old: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The numeric fields both reports have whose values differ (``path: old -> new``), as
    (differences, last-digit moves): a move is a float within 1e-12 relative, which is how
    a mean of an exact sum rounded once (issue 11 item 6, after the baseline) differs from
    the baseline's mean of a float sum rounded at every addition."""
    a, b = numeric_fields(new), numeric_fields(old)
    differ, moves = [], []
    for path in sorted(a.keys() & b.keys()):
        if a[path] != b[path]:
            close = type(a[path]) is float and type(b[path]) is float and math.isclose(a[path], b[path], rel_tol=1e-12)
            (moves if close else differ).append(f"{path}: {b[path]!r} -> {a[path]!r}")
    return differ, moves


def measure(entries: int, args: argparse.Namespace, env: dict[str, str], folder: Path) -> dict[str, Any]:
    """The interleaved runs of one corpus size: medians of wall and CPU per command line,
    the load average before and after, the numeric comparison with the baseline and
    whether this checkout's two reports are byte-identical."""
    many = ["--workers", str(args.workers)] if args.workers else []
    runs = {"baseline, workers 1": ["--workers", "1"], "baseline": many, "workers 1": ["--workers", "1"],
            "default": many}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    work = folder / str(entries)
    work.mkdir()
    gold, pred = write_corpus(work, entries, args.seed)
    old_script = _baseline.write_revision(args.baseline, work)

    def once(name: str) -> tuple[float, float]:
        report = work / f"{name}.json"
        if not args.replace_report:
            report.unlink(missing_ok=True)
        return timed_cli(old_script if name.startswith("baseline") else ROOT / "evaluate.py", gold, pred, report,
                         runs[name], env)

    for name in runs:  # warm-up: bytecode caches of the imported modules (and the report to replace)
        once(name)
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        for name in runs:
            took, used = once(name)
            wall[name].append(took)
            cpu[name].append(used)
    reports = {name: json.loads((work / f"{name}.json").read_text(encoding="utf-8")) for name in runs}
    same_bytes = (work / "workers 1.json").read_bytes() == (work / "default.json").read_bytes()
    baseline_bytes = len({(work / f"{name}.json").read_bytes() for name in runs}) == 1
    differ, moves = differing_numbers(reports["workers 1"], reports["baseline"])
    compared = len(numeric_fields(reports["workers 1"]).keys() & numeric_fields(reports["baseline"]).keys())
    return {"entries": entries, "load": (load, os.getloadavg()[0]), "wall": wall, "cpu": cpu, "differ": differ,
            "moves": moves, "compared": compared, "same_bytes": same_bytes, "baseline_bytes": baseline_bytes}


def print_size(result: dict[str, Any], args: argparse.Namespace) -> None:
    """One corpus size's lines: each command line's medians and the ratios to the baseline."""
    n, (before, after) = result["entries"], result["load"]
    print(f"{n} entries, load average {before:.2f} before, {after:.2f} after")
    wall = {name: statistics.median(v) for name, v in result["wall"].items()}
    cpu = {name: statistics.median(v) for name, v in result["cpu"].items()}
    base = {"workers 1": "baseline, workers 1", "default": "baseline"}   # the same workers, the baseline's code
    many = f"workers {args.workers}" if args.workers else "default workers"
    for name in wall:
        label = (name.replace("baseline", f"{args.baseline}") + (f", {many}" if name == "baseline" else "")
                 if name != "default" else many)
        line = (f"  {label:<28} wall {wall[name]:7.2f} s   CPU {cpu[name]:7.2f} s   "
                f"CPU per entry {cpu[name] / n * 1e3:6.3f} ms")
        if name in base:
            line += (f"   this / {args.baseline}: CPU per entry {cpu[name] / cpu[base[name]]:5.2f}x   "
                     f"wall {wall[name] / wall[base[name]]:5.2f}x")
        print(line)
    print(f"  numbers identical to the baseline: {not result['differ']} ({result['compared']} shared numeric fields "
          f"compared; {len(result['moves'])} float(s) moved in the last digits only: exact sums rounded once); "
          f"all four reports byte-identical: {result['baseline_bytes']}")
    for row in (result["differ"] + result["moves"])[:20]:
        print(f"    {row}")
    print(f"  reports of workers 1 and {many} byte-identical: {result['same_bytes']}")
    print(f"  {many} / workers 1, wall speedup: this checkout {wall['workers 1'] / wall['default']:.2f}x, "
          f"{args.baseline} {wall['baseline, workers 1'] / wall['baseline']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", default="20000",
                        help="corpus size(s), comma-separated (e.g. 5000,20000,100000), each measured in turn")
    parser.add_argument("--baseline", default=_baseline.DEFAULT_BASELINE, help="git revision of the old evaluate.py")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each command line (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replace-report", action="store_true",
                        help="each run replaces the report of the run before, as a repeated command does, which "
                             "reads the existing report first (default: the report is removed before each run, so "
                             "the CPU per entry is the per-entry work alone)")
    parser.add_argument("--as-is-env", action="store_true",
                        help="keep this environment (PYTHONDONTWRITEBYTECODE included) for the runs")
    parser.add_argument("--workers", type=int, default=0,
                        help="--workers of the parallel runs (default: none given, each revision's default: "
                             "the cores this process may use)")
    parser.add_argument("--table", action="store_true",
                        help="also print a Markdown table of every size (README, Benchmarks)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.entries.split(",")]
    env = _baseline.cli_env(args.as_is_env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"lexical (--no-embeddings), {cpus} CPU(s) available (other processes share the cores when the load "
          f"average exceeds 0); median of {args.repeats} interleaved runs, "
          + ("this environment as it is" if args.as_is_env else "bytecode caches on (PYTHONDONTWRITEBYTECODE removed)")
          + ("; each run replaces the report of the one before (the check of the existing report included)"
             if args.replace_report else "; each run writes a new report"))
    failed = False
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            result = measure(n, args, env, Path(tmp))
            print_size(result, args)
            results.append(result)
            failed = failed or bool(result["differ"]) or not (result["same_bytes"] and result["baseline_bytes"])
    if args.table:
        print_table(results, args)
    if failed:
        sys.exit("reports differ")


def print_table(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The sizes as one Markdown table: CPU per entry and wall of both revisions with one
    worker and their ratios, the parallel runs' wall and speedups, the load averages."""
    many = f"workers {args.workers}" if args.workers else "default workers"
    print()
    print(f"| entries | CPU/entry {args.baseline} | CPU/entry now | now / {args.baseline} | wall {args.baseline} | "
          f"wall now | now / {args.baseline} | {many}: wall now | speedup now | speedup {args.baseline} | report | "
          "load |")
    print("|---:" * 10 + "|:---|---:|")
    for r in results:
        n = r["entries"]
        wall = {name: statistics.median(v) for name, v in r["wall"].items()}
        cpu = {name: statistics.median(v) for name, v in r["cpu"].items()}
        print(f"| {n:,} | {cpu['baseline, workers 1'] / n * 1e3:.3f} ms | {cpu['workers 1'] / n * 1e3:.3f} ms | "
              f"{cpu['workers 1'] / cpu['baseline, workers 1']:.2f} | {wall['baseline, workers 1']:.2f} s | "
              f"{wall['workers 1']:.2f} s | {wall['workers 1'] / wall['baseline, workers 1']:.2f} | "
              f"{wall['default']:.2f} s | {wall['workers 1'] / wall['default']:.2f}x | "
              f"{wall['baseline, workers 1'] / wall['baseline']:.2f}x | "
              f"{'replaced' if args.replace_report else 'new'} | {r['load'][0]:.2f}-{r['load'][1]:.2f} |")


if __name__ == "__main__":
    main()
