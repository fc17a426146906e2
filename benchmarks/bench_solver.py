"""Benchmark: pathological entry sizes (Stage 3 solver + Stage 4 lexical matrices), the new
code against a baseline revision, side by side in one run.

Run: ``uv run python benchmarks/bench_solver.py [--baseline REV] [--old-max N]
[--lexical-entries N]``

Cases, each scored end to end (``evaluate_entries`` on one entry, lexical similarity,
default metric families) and with the solver alone on the entry's cost matrix:
  * repetition loop: 1 gold triplet x N copies of one predicted triplet (N = 300, 1000,
    3000; the baseline only up to ``--old-max``: it takes ~8 minutes at 3000);
  * 400 gold x 400 predictions (perturbed titles, as bench_lexical);
  * more gold than predictions: 400 x 40 and 1000 x 1 (padding columns).
The baseline is evaluate.py at ``--baseline`` (default: the revision before the speed-ups),
loaded by path; its solver is the padded square one. Every case checks that both give the
same assignment and the same report summary. ``--lexical-entries N`` also times the
bench_lexical corpus of N entries with both, interleaved, best of two (0 skips it).
Times are CPU seconds of this process (time.process_time). Not a test: numbers on shared
machines are noisy; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402
import bench_lexical  # noqa: E402


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(CPU seconds of this process, result): single-threaded work, and on a shared
    machine the process's CPU time varies less than wall-clock time."""
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def repetition_entry(module: Any, copies: int) -> Any:
    """1 gold triplet; the prediction repeats one near-copy ``copies`` times."""
    rng = random.Random(copies)
    gold = [bench_lexical._triplet(rng, "Graph Neural Network", "introduces", "Message Passing", 0.8)]
    pred = bench_lexical._triplet(rng, "graph neural networks", "introduces", "message passing", 0.7)
    return module.Entry(module.GoldRecord("loop", "", gold, 1),
                        module.Prediction("loop", [pred] * copies, "ok", "", 1))


def sized_entry(module: Any, n_gold: int, n_pred: int, seed: int = 0) -> Any:
    """``n_gold`` random gold triplets; predictions perturb the first ones, the rest random."""
    rng = random.Random(seed)
    rels = module.SPEC_RELATIONS
    gold = [bench_lexical._triplet(rng, bench_lexical._title(rng), rng.choice(rels),
                                   bench_lexical._title(rng), 0.5) for _ in range(n_gold)]
    preds = [bench_lexical._triplet(rng, bench_lexical._perturb(rng, g["source"]["title"]), g["relation"]["type"],
                                    bench_lexical._perturb(rng, g["target"]["title"]), 0.5)
             for g in gold[:n_pred]]
    preds += [bench_lexical._triplet(rng, bench_lexical._title(rng), rng.choice(rels),
                                     bench_lexical._title(rng), 0.5) for _ in range(n_pred - len(preds))]
    rng.shuffle(preds)
    return module.Entry(module.GoldRecord("sized", "", gold, 1), module.Prediction("sized", preds, "ok", "", 1))


def cost_matrix(module: Any, entry: Any) -> Any:
    """``1 - align_sim`` of the entry's gold x prediction triplets (SPEC.md section 5)."""
    gold = module.normalize_triplets(entry.gold.items)
    preds = module.normalize_triplets(entry.pred.items)
    src, tgt, rel = module.embedding_matching(gold, preds, module.Similarity())
    w_s, w_t, w_r = module.ALIGN_WEIGHTS
    return 1.0 - (w_s * src + w_t * tgt + w_r * rel)


def old_padded(module: Any, cost: Any) -> list[int]:
    """The baseline's SPEC.md section 5 solve: pad to the square with 1, solve all of it."""
    import numpy as np
    n, m = cost.shape
    square = np.ones((max(n, m), max(n, m)))
    square[:n, :m] = cost
    return [j if j < m else -1 for j in module.hungarian(square)[:n]]


def same_summary(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """The two reports' summaries agree on every field both have."""
    a, b = _baseline.common_fields(new["summary"], old["summary"])
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def run_case(name: str, make: Callable[[Any], Any], new: Any, old: Any | None) -> None:
    entry_new = make(new)
    cost = cost_matrix(new, entry_new)
    t_solve_new, assign_new = _timed(lambda: new.hungarian_padded(cost))
    t_new, report_new = _timed(lambda: new.evaluate_entries([entry_new], similarity=new.Similarity()))
    line = f"{name:<22} solver {t_solve_new:8.3f} s   end to end {t_new:8.3f} s"
    if old is not None:
        entry_old = make(old)
        t_solve_old, assign_old = _timed(lambda: old_padded(old, cost))
        t_old, report_old = _timed(lambda: old.evaluate_entries([entry_old], similarity=old.Similarity()))
        same = assign_old == assign_new and same_summary(report_new, report_old)
        line += (f"   | baseline solver {t_solve_old:8.3f} s ({t_solve_old / t_solve_new:7.1f}x)"
                 f"   end to end {t_old:8.3f} s ({t_old / t_new:6.1f}x)   identical: {same}")
    print(line, flush=True)


def run_lexical(entries: int, new: Any, old: Any | None, repeats: int = 2) -> None:
    """Both versions on the bench_lexical corpus, interleaved ``repeats`` times (new, old,
    new, old ...); the best time of each is printed (the machine is shared and noisy)."""
    times: dict[str, list[float]] = {"new": [], "old": []}
    reports: dict[str, Any] = {}
    versions = [("new", new)] + ([("old", old)] if old is not None else [])
    for _ in range(repeats):
        for name, module in versions:
            data = bench_lexical.generate(entries, 0, module)
            took, report = _timed(lambda: module.evaluate_entries(data, similarity=module.Similarity()))
            times[name].append(took)
            reports[name] = report
    line = f"bench_lexical {entries} entries (best of {repeats}): new {min(times['new']):.2f} s"
    if old is not None:
        line += (f", baseline {min(times['old']):.2f} s ({min(times['old']) / min(times['new']):.2f}x); "
                 f"identical summary: {same_summary(reports['new'], reports['old'])}")
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=_baseline.DEFAULT_BASELINE,
                        help="git revision of the old evaluate.py ('' = no baseline)")
    parser.add_argument("--old-max", type=int, default=1000,
                        help="largest repetition count the baseline runs (default 1000)")
    parser.add_argument("--lexical-entries", type=int, default=20_000)
    args = parser.parse_args()
    new = _baseline.load_current()
    old = _baseline.load_evaluate(args.baseline) if args.baseline else None
    print(f"new: this checkout; baseline: {args.baseline or 'none'}")
    for copies in (300, 1000, 3000):
        run_case(f"1 x {copies} (loop)", lambda m, c=copies: repetition_entry(m, c), new,
                 old if copies <= args.old_max else None)
    run_case("400 x 400", lambda m: sized_entry(m, 400, 400), new, old)
    run_case("400 x 40", lambda m: sized_entry(m, 400, 40), new, old)
    run_case("1000 x 1", lambda m: sized_entry(m, 1000, 1), new, old)
    if args.lexical_entries:
        run_lexical(args.lexical_entries, new, old)


if __name__ == "__main__":
    main()
