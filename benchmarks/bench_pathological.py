"""Benchmark: a file of pathological entries against a one-entry file, the whole command
line, this checkout and a baseline revision side by side (issue 20 item 2).

Run: ``uv run python benchmarks/bench_pathological.py [--baseline REV] [--repeats R]
[--copies N] [--size N] [--topic] [--ratio-entries N] [--no-ratio-check]
[--as-is-env]``

Writes two seeded inputs (gold and prediction JSONL) in a temporary folder:

  * pathological: entry A, 1 gold triplet x ``--copies`` (default 3,000) identical
    predicted triplets (a repetition loop, ``bench_solver.repetition_entry``), and
    entry B, ``--size`` x ``--size`` (default 400 x 400) gold and predicted triplets with
    varied, perturbed titles (``bench_solver.sized_entry``, the bench_lexical generator);
  * one entry: the first entry of the bench_lexical corpus (seed 0), a typical entry.

Then runs the whole command line (``evaluate.py --pred P --gold G --no-embeddings --quiet
--report R``: start-up, reading, similarity, matching, the default metric families, the
report written) on each file, with this checkout's evaluate.py and with the baseline's
(``git show REV:evaluate.py``, run by path), after one untimed warm-up run of each
(bytecode caches; ``_baseline.cli_env``), interleaved ``--repeats`` times (default 5,
order alternating). Prints the median wall and CPU seconds (the run's process) of each of
the four, the ratio pathological / one-entry of each version (the target of issue 20: at
most 3x), the ratio baseline / this checkout, the load average, and whether each file's
report is byte-identical between the two versions. Then (unless ``--no-ratio-check``) it
compares cydifflib's ratio with difflib's on every distinct string pair that a run may
score (``compared_pairs``) of both pathological entries and of the first
``--ratio-entries`` (default 20,000) entries of the bench_lexical corpus: the ratio engine
of evaluate.py (``SequenceRatio``) must be exact. Exit status 1 when a report or a ratio
differs. ``--topic`` gives the square entry titles of 3 to 6 words out of 6 (one topic:
many pairs that difflib must decide). Not a
test: wall-clock numbers on shared machines are noisy; read the ratios on quiet cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402
import bench_lexical  # noqa: E402
import bench_solver  # noqa: E402
from bench_whole_run import timed_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ev = bench_lexical.ev


def write_entries(folder: Path, name: str, entries: list) -> tuple[Path, Path]:
    """``entries`` as (gold, predictions) JSONL files ``folder/NAME.gold.jsonl``, ``.pred.jsonl``."""
    gold, pred = folder / f"{name}.gold.jsonl", folder / f"{name}.pred.jsonl"
    with open(gold, "w", encoding="utf-8") as g, open(pred, "w", encoding="utf-8") as p:
        for e in entries:
            g.write(json.dumps({"id": e.gold.id, "prompt": e.gold.prompt, "triplets": e.gold.items}) + "\n")
            p.write(json.dumps({"id": e.pred.id, "triplets": e.pred.items}) + "\n")
    return gold, pred


def square_entry(size: int, topic: bool) -> Any:
    """``bench_solver.sized_entry(size, size)``: bench_lexical's generator (titles of 1 to
    3 of its 30 words), or with ``topic`` an entry about one topic: titles of 3 to 6 of
    its first 6 words, which share words, so that many pairs pass the cheap bounds and
    difflib decides them."""
    if not topic:
        return bench_solver.sized_entry(ev, size, size)
    words, title = bench_lexical.WORDS, bench_lexical._title
    bench_lexical.WORDS = words[:6]
    bench_lexical._title = lambda rng: " ".join(rng.choice(words[:6]).capitalize() for _ in range(rng.randint(3, 6)))
    try:
        return bench_solver.sized_entry(ev, size, size)
    finally:
        bench_lexical.WORDS, bench_lexical._title = words, title


def inputs(folder: Path, copies: int, size: int, topic: bool) -> dict[str, tuple[Path, Path]]:
    """The two inputs: ``pathological`` (the loop entry and the size x size entry) and ``one entry``."""
    loop = bench_solver.repetition_entry(ev, copies)
    square = square_entry(size, topic)
    square = ev.Entry(ev.GoldRecord("square", "", square.gold.items, 2), ev.Prediction("square", square.pred.items, "ok", "", 2))
    one = bench_lexical.generate(1, 0)
    return {"pathological": write_entries(folder, "pathological", [loop, square]),
            "one entry": write_entries(folder, "one", one)}


def compared_pairs(entries: list[Any]) -> set[tuple[str, str]]:
    """Every pair of normalised strings whose similarity a run of ``entries`` may ask for:
    per entry, gold x predicted sources, targets, relation forms, and the crossed pairs of
    the swapped-direction test (gold source x predicted target, gold target x predicted
    source)."""
    pairs: set[tuple[str, str]] = set()
    for e in entries:
        gold = ev.normalize_triplets(ev.validate_schema(e.gold.items).items)
        preds = ev.normalize_triplets(ev.validate_schema(e.pred.items).items)
        for left, right in ((lambda t: t.source, lambda t: t.source), (lambda t: t.target, lambda t: t.target),
                            (lambda t: t.source, lambda t: t.target), (lambda t: t.target, lambda t: t.source),
                            (lambda t: ev.relation_text(t.relation), lambda t: ev.relation_text(t.relation))):
            pairs.update((left(g), right(p)) for g in gold for p in preds)
    return pairs


def check_ratios(entries: list[Any]) -> tuple[int, list[tuple[str, str]]]:
    """(pairs compared, pairs whose cydifflib ratio is not difflib's): every pair of
    :func:`compared_pairs`, autojunk off as in the method."""
    import difflib

    import cydifflib
    pairs = sorted(compared_pairs(entries))
    differ = [(a, b) for a, b in pairs if cydifflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
              != difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()]
    return len(pairs), differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="3687f41", help="git revision of the old evaluate.py (default 3687f41)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved runs of each command line (median)")
    parser.add_argument("--copies", type=int, default=3000, help="predicted copies of the loop entry")
    parser.add_argument("--size", type=int, default=400, help="gold and predicted triplets of the square entry")
    parser.add_argument("--topic", action="store_true",
                        help="the square entry about one topic (titles of 3-6 of 6 words: difflib decides many pairs)")
    parser.add_argument("--ratio-entries", type=int, default=20_000,
                        help="bench_lexical corpus entries whose pairs the ratio check compares too (0: none)")
    parser.add_argument("--no-ratio-check", action="store_true", help="skip the cydifflib = difflib check")
    parser.add_argument("--as-is-env", action="store_true",
                        help="keep this environment (PYTHONDONTWRITEBYTECODE included) for the runs")
    args = parser.parse_args()
    env = _baseline.cli_env(args.as_is_env)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        files = inputs(folder, args.copies, args.size, args.topic)
        scripts = {"baseline": _baseline.write_revision(args.baseline, folder), "this checkout": ROOT / "evaluate.py"}
        runs = [(version, data) for data in files for version in scripts]
        wall: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
        cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}

        def once(run: tuple[str, str]) -> tuple[float, float]:
            version, data = run
            report = folder / f"{version}-{data}.json".replace(" ", "_")
            return timed_cli(scripts[version], *files[data], report, [], env)

        for run in runs:                       # warm-up: bytecode caches
            once(run)
        load = os.getloadavg()
        for r in range(args.repeats):
            for run in (runs if r % 2 == 0 else runs[::-1]):
                took, used = once(run)
                wall[run].append(took)
                cpu[run].append(used)
        same = {data: (folder / f"baseline-{data}.json".replace(" ", "_")).read_bytes()
                == (folder / f"this checkout-{data}.json".replace(" ", "_")).read_bytes() for data in files}
    print(f"pathological file: 1 x {args.copies} identical predictions + {args.size} x {args.size}; one-entry file: "
          f"bench_lexical entry e0. Whole CLI (--no-embeddings), median of {args.repeats} interleaved runs; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} before, {os.getloadavg()[0]:.2f} after")
    median = {run: (statistics.median(wall[run]), statistics.median(cpu[run])) for run in runs}
    for run in runs:
        w, c = median[run]
        print(f"  {run[0] + (' ' + args.baseline if run[0] == 'baseline' else ''):<18} {run[1]:<13} "
              f"wall {w:6.2f} s   CPU {c:6.2f} s   (wall runs " + ", ".join(f"{t:.2f}" for t in wall[run]) + ")")
    for version in scripts:
        (pw, pc), (ow, oc) = median[(version, "pathological")], median[(version, "one entry")]
        print(f"  {version:<14} pathological / one entry: wall {pw / ow:5.2f}x   CPU {pc / oc:5.2f}x")
    (bw, bc), (nw, nc) = median[("baseline", "pathological")], median[("this checkout", "pathological")]
    print(f"  pathological file, baseline / this checkout: wall {bw / nw:5.2f}x   CPU {bc / nc:5.2f}x")
    for data, ok in same.items():
        print(f"  {data} report byte-identical to the baseline's: {ok}")
    differ: list[tuple[str, str]] = []
    if not args.no_ratio_check:
        entries = [bench_solver.repetition_entry(ev, args.copies), square_entry(args.size, args.topic),
                   *bench_lexical.generate(args.ratio_entries, 0)]
        compared, differ = check_ratios(entries)
        print(f"  cydifflib ratio = difflib ratio on every pair: {not differ} ({compared:,} distinct pairs: "
              f"both pathological entries and the {args.ratio_entries:,}-entry bench_lexical corpus)")
        for a, b in differ[:10]:
            print(f"    differs: {a!r} {b!r}")
    if not all(same.values()) or differ:
        sys.exit("reports or ratios differ")


if __name__ == "__main__":
    main()
