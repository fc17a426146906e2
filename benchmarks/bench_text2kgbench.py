"""Benchmark: Text2KGBench directory mode over the 19 DBpedia-WebNLG ontologies (Vicuna-13B
responses): this checkout against a baseline revision and, with ``--official``, against the
benchmark's own evaluator, side by side in one run.

Run: ``uv run python benchmarks/bench_text2kgbench.py [--official PATH/TO/run_eval.py]
[--baseline REV] [--repeat N] [--bytecode cached|compiled|both] [--metrics text2kgbench]``

Each program runs as a user runs it: a fresh process of this interpreter (imports, NLTK,
reading, scoring, writing its outputs), on ``../shared/data/text2kgbench/data/dbpedia_webnlg``
(skipped with a message if absent), with ``NLTK_DATA`` set to ``../shared/nltk_data`` unless
already set. The programs alternate (new, baseline, official, new, ...) ``--repeat`` times;
the best and median wall and CPU seconds (user + system of the process and its workers)
of each are printed, with the ratio new / official (at most 1: ours is no slower).

* Ours: ``evaluate.py --pred DIR --gold DIR --ontology DIR --metrics text2kgbench
  --no-embeddings --quiet --report FILE`` with the default ``--workers``.
* ``--official PATH``: Text2KGBench's ``src/evaluation/run_eval.py`` from a clone of
  github.com/cenguix/Text2KGBench (unmodified; it needs nltk, which the dev environment
  has). The benchmark writes its config in a temporary folder: absolute paths to the
  shared data's ontologies, the Vicuna-13B responses and the ground truth, and its outputs
  (per-sentence files and the average file, deleted before each run since the script
  appends to it) in the temporary folder; the script runs from its own folder. The config
  lists each of the 19 ontologies once, so that both evaluators do the same work; the
  shipped ``webnlg_vicuna_config.json`` lists ``1_university`` twice (which only makes the
  script evaluate it twice: the revision that writes a global row averages 20 rows), and
  ``--as-shipped`` reproduces that list. After the runs its outputs are checked against
  our report's ``text2kgbench`` section: every per-sentence metric equal (same floats),
  and every ontology's 2-decimal averages equal.
* ``--bytecode``: ``cached`` (default: users' normal environment; ``PYTHONDONTWRITEBYTECODE``
  is removed for the runs, and each program first runs once untimed, so that imported
  modules come from their bytecode caches), ``compiled`` (no bytecode caches at all:
  ``PYTHONDONTWRITEBYTECODE=1`` and ``PYTHONPYCACHEPREFIX`` an empty folder, so that every
  run compiles every module it imports, nltk, SciPy, numpy and the standard library's; the
  project's development machine sets ``PYTHONDONTWRITEBYTECODE=1``, where only the modules
  without a cache beside them, those of the virtual environment, are compiled), or
  ``both`` (one block each). A script run as a command (``evaluate.py``,
  ``run_eval.py``) is compiled on every run in both modes, as Python always does.
* ``--baseline REV``: ``evaluate.py`` at a git revision (default: the revision before issue
  11, ``_baseline.DEFAULT_BASELINE``; '' = none), whose report's ``text2kgbench`` section
  must equal ours (fields both have; a mean may move in its last digits, within 1e-12
  relative, where the baseline summed floats and this checkout sums exactly and rounds once).

Not a test: wall-clock numbers on shared machines are noisy; read the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data" / "text2kgbench" / "data" / "dbpedia_webnlg"
MODEL = "Vicuna-13B"
#: run_eval.py's per-sentence metrics, under its own names.
METRICS = ("precision", "recall", "f1", "onto_conf", "sub_halluc", "rel_halluc", "obj_halluc")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402
from bench_whole_run import differing_numbers  # noqa: E402


def ontology_keys() -> list[str]:
    """The ontologies of the shared data (``<k>_<name>``), in numeric order."""
    names = (p.name[len("ont_"):-len("_ground_truth.jsonl")] for p in (DATA / "ground_truth").glob("ont_*_ground_truth.jsonl"))
    return sorted(names, key=lambda key: int(key.partition("_")[0]))


def official_config(folder: Path, as_shipped: bool) -> Path:
    """Write run_eval.py's config (absolute paths; outputs in ``folder``); its path."""
    keys = ontology_keys()
    onto_list = ([keys[0]] + keys) if as_shipped else keys  # shipped: 1_university listed twice
    responses = DATA / "baselines" / MODEL / "llm_responses"
    config = {
        "onto_list": onto_list,
        "path_patterns": {
            "sys": str(responses / "$$onto$$_Vicuna13B_responses.jsonl"),
            "gt": str(DATA / "ground_truth" / "ont_$$onto$$_ground_truth.jsonl"),
            "onto": str(DATA / "ontologies" / "$$onto$$_ontology.json"),
            "output": str(folder / "ont_$$onto$$_eval_results.jsonl"),
        },
        "avg_out_file": str(folder / "avg_eval_results.jsonl"),
    }
    path = folder / "webnlg_vicuna_config.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


def child_env(bytecode: str, folder: Path) -> dict[str, str]:
    """The environment of the runs: NLTK_DATA (the shared tables unless set), and
    ``cached``: PYTHONDONTWRITEBYTECODE removed; ``compiled``: PYTHONDONTWRITEBYTECODE=1 and
    PYTHONPYCACHEPREFIX an empty folder under ``folder``, so that caches other runs wrote
    next to the modules are not read either."""
    env = {**os.environ}
    if (SHARED / "nltk_data").is_dir():
        env.setdefault("NLTK_DATA", str(SHARED / "nltk_data"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if bytecode == "compiled":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = str(folder / "no-bytecode-caches")
    return env


class Program:
    """One command to time: its argument list, working folder, and what to do before each
    run (e.g. delete an output the program appends to)."""

    def __init__(self, name: str, argv: Sequence[str], cwd: Path, before: Callable[[], None] = lambda: None):
        self.name, self.argv, self.cwd, self.before = name, list(argv), cwd, before
        self.walls: list[float] = []
        self.cpus: list[float] = []

    def run(self, env: dict[str, str]) -> tuple[float, float]:
        """(wall seconds, CPU seconds of the process and its waited-for children)."""
        self.before()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(self.argv, cwd=self.cwd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{self.name} failed ({done.returncode}): {done.stderr[-2000:]}")
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    def line(self, runs: int) -> str:
        return (f"  {self.name:9s} wall best {min(self.walls):6.2f} s  median {statistics.median(self.walls):6.2f} s"
                f"   CPU best {min(self.cpus):6.2f} s  median {statistics.median(self.cpus):6.2f} s   ({runs} runs)")


def ours(name: str, evaluate: Path, report: Path, metrics: str) -> Program:
    responses = DATA / "baselines" / MODEL / "llm_responses"
    return Program(name, [sys.executable, str(evaluate), "--pred", str(responses), "--gold", str(DATA / "ground_truth"),
                          "--ontology", str(DATA / "ontologies"), "--metrics", metrics, "--no-embeddings", "--quiet",
                          "--report", str(report)], ROOT)


def official(run_eval: Path, folder: Path, as_shipped: bool) -> Program:
    config = official_config(folder, as_shipped)
    avg = folder / "avg_eval_results.jsonl"
    return Program("official", [sys.executable, str(run_eval), "--eval_config_path", str(config)],
                   run_eval.parent, before=lambda: avg.unlink(missing_ok=True))


def compare_official(section: dict, folder: Path) -> list[str]:
    """Differences between run_eval.py's outputs in ``folder`` and our ``text2kgbench``
    section (directory mode): per-sentence metrics (exact) and 2-decimal averages."""
    problems: list[str] = []
    averages = {}
    for line in (folder / "avg_eval_results.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("type") == "all_test_cases":
            averages[row["onto"]] = {k: row[f"avg_{k}"] for k in METRICS}
    per_ontology = section["per_ontology"]
    if set(averages) != set(per_ontology):
        problems.append(f"ontologies differ: official {sorted(averages)}, ours {sorted(per_ontology)}")
    for key, ours_onto in per_ontology.items():
        if averages.get(key) != {k: ours_onto["averages_2dp"][k] for k in METRICS}:
            problems.append(f"{key}: 2-decimal averages differ: official {averages.get(key)}, "
                            f"ours {ours_onto['averages_2dp']}")
        theirs = [json.loads(x) for x in (folder / f"ont_{key}_eval_results.jsonl").read_text(encoding="utf-8").splitlines()]
        mine = ours_onto["per_sentence"]
        if [r["id"] for r in theirs] != [r["id"] for r in mine]:
            problems.append(f"{key}: evaluated sentence ids differ")
            continue
        bad = [r["id"] for r, m in zip(theirs, mine) if any(r[k] != m[k] for k in METRICS)]
        if bad:
            problems.append(f"{key}: {len(bad)} sentence(s) with different metrics (first {bad[0]})")
    return problems


def _strings(value):
    """``value`` with every number left out (its strings, booleans and structure)."""
    if isinstance(value, dict):
        return {k: _strings(v) for k, v in value.items() if not isinstance(v, (int, float)) or isinstance(v, bool)}
    if isinstance(value, list):
        return [_strings(v) for v in value if not isinstance(v, (int, float)) or isinstance(v, bool)]
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, default=None,
                        help="Text2KGBench's src/evaluation/run_eval.py (from a clone) to time side by side")
    parser.add_argument("--as-shipped", action="store_true",
                        help="official config lists 1_university twice, as the shipped webnlg configs do")
    parser.add_argument("--baseline", default=_baseline.DEFAULT_BASELINE,
                        help="git revision of an old evaluate.py to time too ('' = none)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bytecode", choices=("cached", "compiled", "both"), default="cached",
                        help="cached: users' normal environment (bytecode caches, one warm-up run each); "
                             "compiled: no bytecode caches (every import compiled); both")
    parser.add_argument("--metrics", default="text2kgbench")
    args = parser.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} not found")
        return
    if args.official is not None and not args.official.is_file():
        raise SystemExit(f"--official {args.official}: no such file (Text2KGBench's src/evaluation/run_eval.py)")
    folder = Path(tempfile.mkdtemp(prefix="kg-eval-t2kg-bench-"))
    programs = [ours("new", ROOT / "evaluate.py", folder / "new.json", args.metrics)]
    if args.baseline:
        programs.append(ours("baseline", _baseline.write_revision(args.baseline, folder), folder / "baseline.json",
                             args.metrics))
    if args.official is not None:
        (folder / "official").mkdir()
        programs.append(official(args.official.resolve(), folder / "official", args.as_shipped))
    modes = ("cached", "compiled") if args.bytecode == "both" else (args.bytecode,)
    print(f"Text2KGBench directory mode, {len(ontology_keys())} DBpedia-WebNLG ontologies, {MODEL}; "
          f"ours: --metrics {args.metrics} --no-embeddings, default --workers; {os.cpu_count()} CPUs; "
          f"{sys.executable} (Python {sys.version.split()[0]})")
    for mode in modes:
        env = child_env(mode, folder)
        for program in programs:
            program.walls, program.cpus = [], []
            if mode == "cached":
                program.run(env)  # untimed: writes the bytecode caches
        for _ in range(args.repeat):
            for program in programs:
                wall, cpu = program.run(env)
                program.walls.append(wall)
                program.cpus.append(cpu)
        label = {"cached": "bytecode cached (users' normal environment: PYTHONDONTWRITEBYTECODE unset, "
                           "one untimed warm-up run each)",
                 "compiled": "no bytecode caches: every imported module compiled on every run, the standard "
                             "library's too (PYTHONDONTWRITEBYTECODE=1, PYTHONPYCACHEPREFIX an empty folder)"}[mode]
        print(label)
        for program in programs:
            print(program.line(args.repeat))
        by_name = {p.name: p for p in programs}
        if "official" in by_name:
            new, off = by_name["new"], by_name["official"]
            print(f"  new / official: wall {min(new.walls) / min(off.walls):.2f} (best) "
                  f"{statistics.median(new.walls) / statistics.median(off.walls):.2f} (median); "
                  f"CPU {min(new.cpus) / min(off.cpus):.2f} (best) "
                  f"{statistics.median(new.cpus) / statistics.median(off.cpus):.2f} (median)   (<= 1: ours no slower)")
    section = json.loads((folder / "new.json").read_text(encoding="utf-8")).get("text2kgbench")
    if "baseline" in {p.name for p in programs}:
        old = json.loads((folder / "baseline.json").read_text(encoding="utf-8"))["text2kgbench"]
        differ, moves = differing_numbers({"text2kgbench": section}, {"text2kgbench": old})
        strings_equal = operator.eq(*_baseline.common_fields(_strings(section), _strings(old)))
        print(f"baseline {args.baseline}: identical text2kgbench section (fields both have): "
              f"{not differ and strings_equal}" + (f" ({len(moves)} float(s) moved in the last digits only: exact "
                                                   "sums rounded once, since issue 8)" if moves else ""))
        for row in differ[:10]:
            print(f"  {row}")
    if args.official is not None:
        if section is None:
            print("official: not compared (the text2kgbench family was not in --metrics)")
        else:
            problems = compare_official(section, folder / "official")
            print("official outputs vs our text2kgbench section: "
                  + ("identical (every per-sentence metric, every ontology's 2-decimal averages)" if not problems
                     else f"{len(problems)} difference(s): " + "; ".join(problems[:5])))
    else:
        print("reference: Text2KGBench's run_eval.py on the same files, about 3 s (issue 11); "
              "--official PATH/TO/run_eval.py times it here")


if __name__ == "__main__":
    main()
