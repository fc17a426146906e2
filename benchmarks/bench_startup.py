"""Benchmark: start-up, a one-entry lexical run (issue 20 item 4), this checkout against a
baseline revision (default: 3687f41, before the fast start), side by side.

Run: ``uv run python benchmarks/bench_startup.py [--baseline REV] [--repeats R] [--as-is-env]``

One entry (the first line of gold/gold.jsonl and of predictions/finetuned.jsonl), ``--no-embeddings
--quiet``, report written, through the three ways the program starts, each for both versions
through the same command path:

  * ``uv run evaluate.py``: this clone's file; the baseline's ``git show REV:evaluate.py`` written
    to a temporary folder as ``evaluate.py`` and run as ``uv run /tmp/.../evaluate.py`` from this
    clone (the same project environment, the same uv);
  * ``python evaluate.py``: the environment's interpreter on either file;
  * ``kg-triplet-eval``: the console script of the editable install; for the baseline a copy of
    that script next to the baseline's editable shim (hatch_build.py's SHIM at 3687f41: the file
    read and compiled on every import) pointing at the baseline's file.

After one untimed warm-up run of each (bytecode caches written), ``--repeats`` interleaved runs
of the six; prints the median wall time and the median peak RSS (the largest process of the run:
``os.wait4``, which counts uv's child too), the ratios this / baseline, and whether every run's
report and stdout are byte-identical to the baseline's. A user's normal environment by default
(``PYTHONDONTWRITEBYTECODE`` removed, see ``_baseline.cli_env``); ``--as-is-env`` keeps this
one. Not a test: wall-clock numbers on shared machines are noisy; read the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _baseline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = "3687f41"

#: hatch_build.py's editable shim at 3687f41 (the baseline's console-script path).
BASELINE_SHIM = '''"""kg-triplet-eval, editable install: runs {path} as this module (edits are live)."""
__file__ = {path!r}
with open(__file__, encoding="utf-8") as _source:
    exec(compile(_source.read(), __file__, "exec"))
'''


def commands(base: Path, uv: str) -> dict[str, dict[str, list[str]]]:
    """{way: {"baseline": argv, "this": argv}} of the three start paths (see the docstring);
    writes the baseline's console script and shim into ``base/bin``."""
    python = str(Path(sys.prefix, "bin", "python"))
    script = Path(sys.prefix, "bin", "kg-triplet-eval")
    if not script.is_file():
        raise SystemExit(f"{script} not found: run inside the project environment (`uv run python ...`)")
    (base / "bin").mkdir()
    (base / "bin" / "kg-triplet-eval").write_text(script.read_text(encoding="utf-8"), encoding="utf-8")
    (base / "bin" / "kg-triplet-eval").chmod(0o755)
    (base / "bin" / "kg_triplet_eval.py").write_text(BASELINE_SHIM.format(path=str(base / "evaluate.py")),
                                                     encoding="utf-8")
    return {
        "uv run evaluate.py": {"baseline": [uv, "run", str(base / "evaluate.py")], "this": [uv, "run", "evaluate.py"]},
        "python evaluate.py": {"baseline": [python, str(base / "evaluate.py")],
                               "this": [python, str(ROOT / "evaluate.py")]},
        "kg-triplet-eval": {"baseline": [str(base / "bin" / "kg-triplet-eval")], "this": [str(script)]},
    }


def timed(argv: list[str], report: Path, data: Path, env: dict[str, str]) -> tuple[float, int, bytes]:
    """(wall seconds, peak RSS in KiB of the largest process, stdout) of one run; exit status 0."""
    cmd = [*argv, "--pred", str(data / "pred.jsonl"), "--gold", str(data / "gold.jsonl"), "--no-embeddings",
           "--quiet", "--overwrite", "--report", str(report)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit status {proc.returncode}")
    return wall, usage.ru_maxrss, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="git revision of the old evaluate.py")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved runs of each command line (median)")
    parser.add_argument("--as-is-env", action="store_true",
                        help="keep this environment (PYTHONDONTWRITEBYTECODE included) for the runs")
    args = parser.parse_args()
    env = _baseline.cli_env(args.as_is_env)
    uv = os.environ.get("UV") or shutil.which("uv") or "uv"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, source in (("gold.jsonl", ROOT / "gold" / "gold.jsonl"),
                             ("pred.jsonl", ROOT / "predictions" / "finetuned.jsonl")):
            with open(source, "rb") as lines:
                (folder / name).write_bytes(lines.readline())
        base = folder / "base"
        base.mkdir()
        _baseline.write_revision(args.baseline, base).rename(base / "evaluate.py")
        ways = commands(base, uv)
        runs = [(way, who) for way in ways for who in ("baseline", "this")]
        wall = {run: [] for run in runs}
        rss = {run: [] for run in runs}
        outputs = {}
        for way, who in runs:  # warm-up: bytecode caches
            timed(ways[way][who], folder / "warm.json", folder, env)
        load = os.getloadavg()[0]
        for _ in range(args.repeats):
            for way, who in runs:
                report = folder / f"{len(outputs)}.json"
                took, peak, out = timed(ways[way][who], report, folder, env)
                wall[way, who].append(took)
                rss[way, who].append(peak)
                outputs.setdefault((way, who), set()).add((report.read_bytes(), out))
                report.unlink()
    print(f"one-entry lexical run, baseline {args.baseline} vs this checkout; median of {args.repeats} interleaved "
          f"runs; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          + ("this environment as it is" if args.as_is_env else "bytecode caches on (PYTHONDONTWRITEBYTECODE removed)"))
    print(f"  {'command':<20} {'baseline':>9} {'this':>9} {'this/base':>9}   {'RSS base':>9} {'this':>9} {'ratio':>6}")
    identical = True
    for way in ways:
        wb, wt = statistics.median(wall[way, "baseline"]), statistics.median(wall[way, "this"])
        rb, rt = statistics.median(rss[way, "baseline"]) / 1024, statistics.median(rss[way, "this"]) / 1024
        same = outputs[way, "baseline"] == outputs[way, "this"] and len(outputs[way, "this"]) == 1
        identical &= same
        print(f"  {way:<20} {wb:8.3f}s {wt:8.3f}s {wt / wb:9.2f}   {rb:7.1f}MB {rt:7.1f}MB {rt / rb:6.2f}"
              f"   report+stdout identical: {same}")
    if not identical:
        sys.exit("outputs differ")


if __name__ == "__main__":
    main()
