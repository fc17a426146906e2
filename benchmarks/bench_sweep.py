"""Benchmark: the cost of ``--sweep`` (11 thresholds) and of the calibration family,
relative to scoring alone, on bench_lexical's seeded synthetic corpus.

Run: ``uv run python benchmarks/bench_sweep.py [--entries N] [--seed S] [--repeat K]``

Times ``evaluate_entries`` (lexical similarity) with the families hgr; hgr + sweep;
hgr + calibration, side by side in one run (best of ``--repeat``), and prints each time
and its ratio to hgr alone. The sweep computes each entry's similarity matrices once at
the lowest threshold (0.50, where the lexical bounds skip fewer pairs than at 0.80) and
redoes the matching at each threshold that gates something new. It also checks that the
0.80 row equals the summary's micro numbers.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import evaluate as ev  # noqa: E402
from bench_lexical import generate  # noqa: E402

MICRO = ("entity_precision", "entity_recall", "entity_f1", "triplet_precision", "triplet_recall", "triplet_f1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    entries = generate(args.entries, args.seed)
    sets = (("hgr",), ("hgr", "sweep"), ("hgr", "calibration"))
    times = dict.fromkeys(sets, float("inf"))
    report: dict = {}
    for _ in range(args.repeat):  # interleaved rounds: machine noise hits every variant alike
        for families in sets:
            start = time.perf_counter()
            out = ev.evaluate_entries(entries, similarity=ev.Similarity(), families=families)
            times[families] = min(times[families], time.perf_counter() - start)
            if "sweep" in families:
                report = out
            del out
            gc.collect()
    base = times[("hgr",)]
    print(f"{args.entries} entries, lexical similarity, best of {args.repeat}")
    for families, seconds in times.items():
        print(f"  {'+'.join(families):<18}{seconds:8.2f} s   x{seconds / base:.2f}")
    row = next(r for r in report["sweep"]["rows"] if r["threshold"] == 0.8)
    same = all(row[k] == report["summary"]["micro"][k] for k in MICRO)
    print(f"  sweep row 0.80 equals the summary's micro numbers: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
