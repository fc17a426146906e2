"""Benchmark: the whole lexical command-line run on a generated 20,000-entry set, this
checkout against a baseline revision (default: eae578e, before issue 11), side by side.

Run: ``uv run python benchmarks/bench_whole_run.py [--entries N] [--baseline REV]
[--repeats R] [--seed S] [--as-is-env]``

Writes the seeded corpus of ``bench_lexical.py`` as gold and prediction JSONL files (the
same files for every run), then runs, interleaved ``--repeats`` times, three command
lines on them (reading, scoring, report writing; ``--no-embeddings --quiet``), after one
untimed warm-up run of each, in a user's normal environment (bytecode caches written and
reused: ``PYTHONDONTWRITEBYTECODE`` removed; ``--as-is-env`` keeps this process's
environment, see ``_baseline.cli_env``):

  * ``baseline``: evaluate.py of ``--baseline`` (``git show REV:evaluate.py``, run by path);
  * ``workers 1``: this checkout with ``--workers 1`` (one process);
  * ``default``: this checkout with its default workers (the cores this process may use).

Prints the median wall time and the median CPU time (all processes of the run) of each,
the ratios baseline / this checkout, whether the numbers are identical (every numeric
field that both reports' summaries and family sections have, ``config`` aside; fields
added after the baseline are not compared, as in bench_solver; macro means may move in
their last digits, within 1e-12 relative, because the baseline summed floats where this
checkout sums exactly and rounds once: listed, not counted as differences) and whether
the two reports of this checkout are byte-identical. Not a test: wall-clock numbers on shared
machines are noisy (other processes take cores); read the ratios, on quiet cores.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--baseline", default=_baseline.DEFAULT_BASELINE, help="git revision of the old evaluate.py")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each command line (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--as-is-env", action="store_true",
                        help="keep this environment (PYTHONDONTWRITEBYTECODE included) for the runs")
    args = parser.parse_args()
    env = _baseline.cli_env(args.as_is_env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    runs = {"baseline": [], "workers 1": ["--workers", "1"], "default": []}
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gold, pred = write_corpus(folder, args.entries, args.seed)
        old_script = _baseline.write_revision(args.baseline, folder)
        for name, extra in runs.items():  # warm-up: bytecode caches of the imported modules
            timed_cli(old_script if name == "baseline" else ROOT / "evaluate.py", gold, pred,
                      folder / f"{name}.json", extra, env)
        load = os.getloadavg()[0]
        for _ in range(args.repeats):
            for name, extra in runs.items():
                script = old_script if name == "baseline" else ROOT / "evaluate.py"
                took, used = timed_cli(script, gold, pred, folder / f"{name}.json", extra, env)
                wall[name].append(took)
                cpu[name].append(used)
        reports = {name: json.loads((folder / f"{name}.json").read_text(encoding="utf-8")) for name in runs}
        same_bytes = (folder / "workers 1.json").read_bytes() == (folder / "default.json").read_bytes()
    differ, moves = differing_numbers(reports["workers 1"], reports["baseline"])
    compared = len(numeric_fields(reports["workers 1"]).keys() & numeric_fields(reports["baseline"]).keys())
    print(f"{args.entries} entries, lexical, {cpus} CPU(s) available, load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after (other processes share the cores when it exceeds 0); "
          f"median of {args.repeats} interleaved runs, " + ("this environment as it is" if args.as_is_env else
                                                            "bytecode caches on (PYTHONDONTWRITEBYTECODE removed)"))
    base_wall, base_cpu = statistics.median(wall["baseline"]), statistics.median(cpu["baseline"])
    for name in runs:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        line = f"  {name + ' (' + args.baseline + ')' if name == 'baseline' else name:<20} wall {w:7.2f} s   CPU {c:7.2f} s"
        if name != "baseline":
            line += f"   baseline / this: wall {base_wall / w:5.2f}x   CPU {base_cpu / c:5.2f}x"
        print(line)
    print(f"numbers identical to the baseline: {not differ} ({compared} shared numeric fields compared; "
          f"{len(moves)} float(s) moved in the last digits only: exact sums rounded once)")
    for row in (differ + moves)[:20]:
        print(f"  {row}")
    print(f"reports of workers 1 and default workers byte-identical: {same_bytes}")
    if differ or not same_bytes:
        sys.exit("reports differ")


if __name__ == "__main__":
    main()
