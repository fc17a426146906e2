"""Benchmark: throughput of the lexical path on a generated 20,000-entry set.

Run: ``uv run python benchmarks/bench_lexical.py [--entries N] [--seed S] [--baseline REV]
[--without FAMILY] [--repeats R]``

Generates a seeded synthetic corpus (typed triplets, perturbed predictions: case changes,
typos, company suffixes, wrong relations, extra and missing triplets, invalid items),
then times ``evaluate_entries`` with the lexical similarity and prints entries/second.
With ``--baseline REV`` it also loads evaluate.py as it was at git revision REV (by path)
and times both on the same generated entries, interleaved ``--repeats`` times (default 3):
the CPU time of this process for ``evaluate_entries`` (per-entry scoring, the default
metric families' statistics and merges, the report in memory; no reading, no writing),
median per entry, the ratio this checkout / baseline (of the medians, and the median and
range of each repeat's own ratio: its two runs are neighbours in time), and whether the two reports'
summaries and per-entry metrics are identical. With ``--without FAMILY`` (e.g. ``errors``)
this checkout is also timed with the default metric families less FAMILY, in the same
interleaved runs: the ratio with / without is that family's own cost (with ``--baseline``
too: one run gives both ratios). The family's report section and headlines exist on one
side only, so only the per-entry metrics are compared there.
Not a test: wall-clock numbers on shared machines are noisy; compare ratios on one machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import evaluate as ev  # noqa: E402

WORDS = ("neural", "network", "graph", "model", "river", "city", "labs", "vision", "corpus", "quantum",
         "engine", "harbor", "atlas", "signal", "protein", "market", "orbit", "language", "sensor", "forest",
         "bridge", "theory", "kernel", "museum", "valley", "crystal", "agent", "planet", "library", "garden")


def _title(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(1, 3)))


def _triplet(rng: random.Random, s: str, r: str, t: str, w: float) -> dict:
    return {"source": {"title": s, "type": rng.choice(("entity", "concept"))},
            "relation": {"type": r, "weight": w},
            "target": {"title": t, "type": rng.choice(("entity", "concept"))}}


def _perturb(rng: random.Random, title: str) -> str:
    roll = rng.random()
    if roll < 0.15:
        return title.upper()
    if roll < 0.25 and len(title) > 4:
        i = rng.randrange(len(title) - 1)
        return title[:i] + title[i + 1] + title[i] + title[i + 2:]
    if roll < 0.32:
        return title + rng.choice((" Inc.", " Ltd", ", LLC", " GmbH"))
    if roll < 0.40:
        return _title(rng)
    return title


def generate(n_entries: int, seed: int, module: Any = ev) -> list[Any]:
    """``n_entries`` seeded entries, built with ``module``'s record classes (another
    loaded copy of evaluate.py can be given, for side-by-side runs)."""
    rng = random.Random(seed)
    entries = []
    for k in range(n_entries):
        gold = [_triplet(rng, _title(rng), rng.choice(ev.SPEC_RELATIONS), _title(rng), rng.randint(1, 10) / 10)
                for _ in range(rng.randint(0, 8))]
        prompt = " ".join(f"{g['source']['title']} relates to {g['target']['title']}." for g in gold)
        preds = []
        for g in gold:
            if rng.random() < 0.2:
                continue
            rel = g["relation"]["type"] if rng.random() < 0.8 else rng.choice(ev.SPEC_RELATIONS + ("works_for",))
            w = min(1.0, max(0.0, g["relation"]["weight"] + rng.choice((0.0, 0.1, -0.2, 0.3))))
            preds.append(_triplet(rng, _perturb(rng, g["source"]["title"]), rel,
                                  _perturb(rng, g["target"]["title"]), w))
        for _ in range(rng.randint(0, 2)):
            preds.append(_triplet(rng, _title(rng), rng.choice(ev.SPEC_RELATIONS), _title(rng), 0.5))
        if rng.random() < 0.05:
            preds.append({"source": {"title": "x"}})
        rng.shuffle(preds)
        entries.append(module.Entry(module.GoldRecord(f"e{k}", prompt, gold, k + 1),
                                    module.Prediction(f"e{k}", preds, "ok", "", k + 1)))
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", metavar="REV", help="also time evaluate.py at git revision REV, side by side")
    parser.add_argument("--without", metavar="FAMILY", choices=ev.DEFAULT_METRICS[1:],
                        help="also time this checkout without the default family FAMILY, side by side (its own cost)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved runs of each with --baseline / --without (default 3)")
    args = parser.parse_args()
    if args.baseline or args.without:
        side_by_side(args.baseline, args.entries, args.seed, args.repeats, args.without)
        return
    t0 = time.perf_counter()
    entries = generate(args.entries, args.seed)
    t1 = time.perf_counter()
    report = ev.evaluate_entries(entries, similarity=ev.Similarity())
    t2 = time.perf_counter()
    s = report["summary"]
    n_gold = s["totals"]["gold_triplets"]
    n_pred = s["totals"]["pred_triplet_items"]
    print(f"generated {len(entries)} entries ({n_gold} gold, {n_pred} predicted items) in {t1 - t0:.1f} s")
    print(f"lexical evaluation: {t2 - t1:.2f} s  ->  {len(entries) / (t2 - t1):,.0f} entries/s  "
          f"({(n_gold + n_pred) / (t2 - t1):,.0f} triplets/s)")
    print(f"macro composite {s['macro']['composite']:.4f}   micro entity F1 {s['micro']['entity_f1']:.4f}")


def side_by_side(revision: str | None, n_entries: int, seed: int, repeats: int, without: str | None = None) -> None:
    """CPU seconds of ``evaluate_entries`` per run, interleaved (the order reversed every other
    repeat): this checkout, and ``revision``'s evaluate.py and/or this checkout without the
    default family ``without``; the medians, their ratios, and whether the outputs agree."""
    runs: dict[str, tuple[Any, tuple[str, ...]]] = {}
    if revision:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _baseline

        baseline = _baseline.load_evaluate(revision)
        runs[f"baseline {revision}"] = (baseline, baseline.DEFAULT_METRICS)
    if without:
        runs[f"without {without}"] = (ev, tuple(name for name in ev.DEFAULT_METRICS if name != without))
    runs["this checkout"] = (ev, ev.DEFAULT_METRICS)
    entries = {name: generate(n_entries, seed, module) for name, (module, _) in runs.items()}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    reports: dict[str, Any] = {}
    gc.collect()
    for r in range(repeats):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            module, families = runs[name]
            start = time.process_time()
            report = module.evaluate_entries(entries[name], similarity=module.Similarity(), families=families)
            cpu[name].append(time.process_time() - start)
            reports[name] = {"summary": report["summary"], "metrics": [row["metrics"] for row in report["per_entry"]]}
            del report
            gc.collect()
    medians = {name: statistics.median(times) for name, times in cpu.items()}
    for name, times in cpu.items():
        print(f"{name:<24} CPU {medians[name]:6.2f} s  ({1e3 * medians[name] / n_entries:.3f} ms/entry; runs "
              + ", ".join(f"{t:.2f}" for t in times) + ")")
    new = medians["this checkout"]
    mine = json.dumps(reports["this checkout"], sort_keys=True)
    for name in runs:
        if name == "this checkout":
            continue
        paired = sorted(a / b for a, b in zip(cpu["this checkout"], cpu[name]))
        print(f"CPU this checkout / {name}: {new / medians[name]:.3f} (ratio of the medians; each repeat's own "
              f"ratio: median {statistics.median(paired):.3f}, {paired[0]:.3f}-{paired[-1]:.3f})")
        if name.startswith("without"):
            same = json.dumps(reports[name]["metrics"]) == json.dumps(reports["this checkout"]["metrics"])
            print(f"  per-entry metrics {'identical' if same else 'DIFFER'}")
        else:
            print("  summaries and per-entry metrics identical" if json.dumps(reports[name], sort_keys=True) == mine else
                  "  summaries or per-entry metrics DIFFER (expected against a revision before exact sums, or one "
                  "with other default families)")


if __name__ == "__main__":
    main()
