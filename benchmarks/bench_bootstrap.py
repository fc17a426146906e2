"""Benchmark: the cost of the comparison statistics relative to scoring, at 20,000 entries.

Run: ``uv run python benchmarks/bench_bootstrap.py [--entries N] [--bootstrap B] [--trials R] [--samples K]``

Generates the seeded 20,000-entry corpus of ``bench_lexical.py`` and a second system on the
same gold (its predictions with one triplet dropped from about a third of the entries),
scores both with the lexical similarity and the default families (hgr, strict,
per-relation), then times :func:`compare_systems` on the two reports: 1,000 bootstrap
resamples alone, and 1,000 resamples plus 10,000 approximate-randomisation trials (the
defaults of a comparison). Issue 10 asks the statistics to cost less than the scoring;
the ratio is printed. Not a test: wall-clock numbers on shared machines are noisy, so the
two are measured side by side in one run.

``--samples K`` (K > 1) also makes the second system one of K samples (K such variants,
README "Several samples per prompt") and times the same comparison with it (the two-stage
bootstrap), beside the comparison with its first sample alone.
"""

from __future__ import annotations

import argparse
import random
import time

from bench_lexical import ev, generate


def second_system(entries: list, seed: int) -> list:
    """The same gold entries with a different system's predictions: one predicted item
    dropped from about a third of the entries."""
    rng = random.Random(seed)
    out = []
    for e in entries:
        items = list(e.pred.items or [])
        if items and rng.random() < 0.35:
            del items[rng.randrange(len(items))]
        out.append(ev.Entry(e.gold, ev.Prediction(e.pred.id, items, e.pred.status, e.pred.reason, e.pred.line)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--bootstrap", type=int, default=ev.DEFAULT_BOOTSTRAP)
    parser.add_argument("--trials", type=int, default=ev.DEFAULT_TRIALS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=1, help="K > 1: also time a second system of K samples")
    args = parser.parse_args()
    base = generate(args.entries, args.seed)
    other = second_system(base, args.seed + 1)
    t0 = time.perf_counter()
    reports = {"base": ev.evaluate_entries(base, similarity=ev.Similarity()),
               "other": ev.evaluate_entries(other, similarity=ev.Similarity())}
    t1 = time.perf_counter()
    families = ev.families_for(ev.DEFAULT_METRICS)
    kw = {"baseline": "base", "seed": ev.DEFAULT_SEED, "correction": None, "families": families}
    boot = ev.compare_systems(reports, bootstrap=args.bootstrap, trials=0, **kw)
    t2 = time.perf_counter()
    full = ev.compare_systems(reports, bootstrap=args.bootstrap, trials=args.trials, **kw)
    t3 = time.perf_counter()
    scoring, only_boot, both = t1 - t0, t2 - t1, t3 - t2
    n_paths = len(full["metrics"]["other"])
    print(f"scoring 2 systems x {args.entries} entries (lexical, {', '.join(ev.DEFAULT_METRICS)}): {scoring:.2f} s")
    print(f"bootstrap {args.bootstrap} resamples, {n_paths} headline metrics, 2 systems: {only_boot:.2f} s "
          f"= {only_boot / scoring:.3f} x scoring")
    print(f"bootstrap {args.bootstrap} + randomisation {args.trials} trials: {both:.2f} s "
          f"= {both / scoring:.3f} x scoring ({'less' if both < scoring else 'MORE'} than the scoring)")
    row = full["metrics"]["other"]["hgr.macro.composite"]
    print(f"macro composite: delta {row['delta']:+.4f} [{row['delta_ci'][0]:+.4f}, {row['delta_ci'][1]:+.4f}], "
          f"p = {row['p_value']:.4g}; base interval {boot['metrics']['base']['hgr.macro.composite']['ci']}")
    if args.samples > 1:
        samples(args, base, reports, kw, both)


def samples(args: argparse.Namespace, base: list, reports: dict, kw: dict, one: float) -> None:
    """The comparison with the second system given as ``args.samples`` samples (seeded
    variants), timed beside the one-sample comparison (``one`` seconds)."""
    runs = [reports["other"]] + [ev.evaluate_entries(second_system(base, args.seed + 1 + k), similarity=ev.Similarity())
                                 for k in range(1, args.samples)]
    headline = [f for f in kw["families"] if type(f).headlines is not ev.MetricFamily.headlines]
    rows = [{"id": row["id"], "gold_line": row["gold_line"], "samples": [r["per_entry"][i] for r in runs]}
            for i, row in enumerate(runs[0]["per_entry"])]
    sampled = {"base": reports["base"], "other": ev.SampledSystem.slice_report(
        {"samples": {"count": args.samples}}, rows, headline)}
    t0 = time.perf_counter()
    out = ev.compare_systems(sampled, bootstrap=args.bootstrap, trials=args.trials, **{**kw, "families": headline})
    took = time.perf_counter() - t0
    row = out["metrics"]["other"]["hgr.macro.composite"]
    print(f"second system of {args.samples} samples: bootstrap {args.bootstrap} (two-stage) + randomisation "
          f"{args.trials} trials: {took:.2f} s = {took / one:.2f} x the one-sample comparison; macro composite "
          f"{row['estimate']:.4f} {row['ci']}, delta {row['delta']:+.4f}")


if __name__ == "__main__":
    main()
