"""Benchmark: ``--workers 2`` against ``--workers 1`` on a generated 20,000-entry set.

Run: ``uv run python benchmarks/bench_workers.py [--entries N] [--workers 2] [--seed S]
[--repeats R] [--as-is-env]``

Writes the seeded corpus of ``bench_lexical.py`` as gold and prediction JSONL files, runs
the whole command line (reading, scoring, report writing; lexical similarity) with
``--workers 1`` and with ``--workers N``, interleaved ``--repeats`` times after one untimed
warm-up run of each, prints the median wall times and their ratio, and checks that the
two reports are byte-identical. The runs get a user's normal environment (bytecode caches
written and reused: ``PYTHONDONTWRITEBYTECODE`` removed; ``--as-is-env`` keeps this
process's environment, see ``_baseline.cli_env``). Then it times the reading pass alone
(``load_inputs`` in this process, with the workers' map for N workers: the files are read
in ranges by the workers), best of 3, interleaved. Not a test: wall-clock numbers on
shared machines are noisy (other processes take cores); compare the ratio on a quiet
machine with at least N cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402
from bench_lexical import generate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def write_corpus(folder: Path, n_entries: int, seed: int) -> tuple[Path, Path]:
    """The seeded corpus as (gold, predictions) JSONL files in ``folder``."""
    gold, pred = folder / "gold.jsonl", folder / "pred.jsonl"
    with open(gold, "w", encoding="utf-8") as g, open(pred, "w", encoding="utf-8") as p:
        for e in generate(n_entries, seed):
            g.write(json.dumps({"id": e.gold.id, "prompt": e.gold.prompt, "triplets": e.gold.items}) + "\n")
            p.write(json.dumps({"id": e.pred.id, "triplets": e.pred.items}) + "\n")
    return gold, pred


def timed_run(gold: Path, pred: Path, report: Path, workers: int, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the run and its worker processes)."""
    cmd = [sys.executable, str(ROOT / "evaluate.py"), "--pred", str(pred), "--gold", str(gold), "--no-embeddings",
           "--quiet", "--workers", str(workers), "--report", str(report)]
    before = os.times()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = os.times()
    return wall, (after.children_user + after.children_system) - (before.children_user + before.children_system)


def load_evaluate():
    """evaluate.py of this checkout, loaded by path (the import name ``evaluate`` is Hugging Face's)."""
    spec = importlib.util.spec_from_file_location("kg_triplet_eval_bench", ROOT / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
    spec.loader.exec_module(module)
    return module


def time_reading(gold: Path, pred: Path, workers: int, repeats: int = 3) -> tuple[float, float]:
    """Best wall seconds of ``load_inputs`` with 1 worker and with ``workers`` (interleaved)."""
    ev = load_evaluate()
    best = {1: float("inf"), workers: float("inf")}
    for _ in range(repeats):
        for n in best:
            t0 = time.perf_counter()
            ev.load_inputs(pred, gold, map_ranges=ev.worker_map(n))
            best[n] = min(best[n], time.perf_counter() - t0)
    return best[1], best[workers]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed runs of each (median)")
    parser.add_argument("--as-is-env", action="store_true",
                        help="keep this environment (PYTHONDONTWRITEBYTECODE included) for the runs")
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = _baseline.cli_env(args.as_is_env)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gold, pred = write_corpus(folder, args.entries, args.seed)
        timed_run(gold, pred, folder / "one.json", 1, env)             # warm-up: bytecode caches
        load = os.getloadavg()[0]
        runs: dict[int, list[tuple[float, float]]] = {1: [], args.workers: []}
        for _ in range(args.repeats):
            for workers, name in ((1, "one"), (args.workers, "many")):
                runs[workers].append(timed_run(gold, pred, folder / f"{name}.json", workers, env))
        (one, cpu_one), (many, cpu_many) = ((statistics.median(w for w, _ in runs[k]),
                                             statistics.median(c for _, c in runs[k])) for k in (1, args.workers))
        same = (folder / "one.json").read_bytes() == (folder / "many.json").read_bytes()
        read_one, read_many = time_reading(gold, pred, args.workers)
    print(f"{args.entries} entries, {cpus} CPU(s) available, load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after (other processes share the cores when it exceeds 0); median of "
          f"{args.repeats} interleaved runs, " + ("this environment as it is" if args.as_is_env else
                                                  "bytecode caches on (PYTHONDONTWRITEBYTECODE removed)"))
    print(f"--workers 1: {one:.2f} s ({cpu_one:.2f} CPU s)   --workers {args.workers}: {many:.2f} s "
          f"({cpu_many:.2f} CPU s, all processes)   speed-up {one / many:.2f}x   "
          f"reports byte-identical: {same}")
    print(f"CPU seconds of all processes, {args.workers} workers / 1 worker: {cpu_many / cpu_one:.2f} (the cost of "
          "forking, sending the encoded rows back and merging; wall-clock ratios need quiet cores)")
    print(f"reading pass alone (load_inputs, best of 3): 1 worker {read_one:.2f} s   {args.workers} workers "
          f"{read_many:.2f} s   speed-up {read_one / read_many:.2f}x")
    if not same:
        sys.exit("reports differ")


if __name__ == "__main__":
    main()
