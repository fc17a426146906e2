"""Benchmark: Text2KGBench directory mode over the 19 DBpedia-WebNLG ontologies (Vicuna-13B
responses), this checkout against a baseline revision, side by side in one run.

Run: ``uv run python benchmarks/bench_text2kgbench.py [--baseline REV] [--repeat N]
[--metrics text2kgbench]``

Each version runs the CLI as a user would (a fresh process: imports, NLTK, reading, scoring,
the report), ``--metrics text2kgbench --no-embeddings`` by default, on
``../shared/data/text2kgbench/data/dbpedia_webnlg`` (skipped with a message if absent),
alternating new/baseline ``--repeat`` times; the best wall and CPU (user + system of the
child) seconds are printed, and the two reports' ``text2kgbench`` sections must be equal.
The issue's reference: the benchmark's own evaluator (Text2KGBench ``run_eval.py``) takes
about 3 s on these files on this machine (measured by issue 11's author, not rerun here).
Note: with PYTHONDONTWRITEBYTECODE set (as on the project machine) every run compiles the
NLTK/SciPy modules it imports again, which costs seconds in both versions alike.
Not a test: wall-clock numbers on shared machines are noisy; read the ratio.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data" / "text2kgbench" / "data" / "dbpedia_webnlg"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402


def run_cli(evaluate: Path, report: Path, metrics: str) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one directory-mode run of ``evaluate``."""
    env = {**os.environ}
    if (SHARED / "nltk_data").is_dir():
        env.setdefault("NLTK_DATA", str(SHARED / "nltk_data"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(evaluate), "--pred", str(DATA / "baselines" / "Vicuna-13B" / "llm_responses"),
         "--gold", str(DATA / "ground_truth"), "--ontology", str(DATA / "ontologies"),
         "--metrics", metrics, "--no-embeddings", "--quiet", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{evaluate} failed ({done.returncode}): {done.stderr[-1000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=_baseline.DEFAULT_BASELINE,
                        help="git revision of the old evaluate.py ('' = no baseline)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--metrics", default="text2kgbench")
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found")
        return
    folder = Path(tempfile.mkdtemp(prefix="kg-eval-t2kg-bench-"))
    versions = {"new": ROOT / "evaluate.py"}
    if args.baseline:
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.baseline}:evaluate.py"],
                             capture_output=True, text=True, check=True).stdout
        versions["baseline"] = folder / "evaluate_baseline.py"
        versions["baseline"].write_text(old, encoding="utf-8")
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for name, path in versions.items():
            wall, cpu = run_cli(path, folder / f"{name}.json", args.metrics)
            prev = best.get(name, (float("inf"), float("inf")))
            best[name] = (min(prev[0], wall), min(prev[1], cpu))
    for name, (wall, cpu) in best.items():
        print(f"{name:9s} directory mode, 19 ontologies, --metrics {args.metrics}: "
              f"wall {wall:6.2f} s   CPU {cpu:6.2f} s   (best of {args.repeat})")
    if "baseline" in best:
        sections = [json.loads((folder / f"{n}.json").read_text())["text2kgbench"] for n in ("new", "baseline")]
        same = operator.eq(*_baseline.common_fields(*sections))
        print(f"speed-up (wall) {best['baseline'][0] / best['new'][0]:.2f}x; "
              f"identical text2kgbench section (fields both have): {same}")
    print("reference: Text2KGBench's run_eval.py on the same files, about 3 s (issue 11)")


if __name__ == "__main__":
    main()
