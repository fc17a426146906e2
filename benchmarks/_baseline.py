"""Load ``evaluate.py`` as it was at a git revision, by path, for side-by-side benchmarks.

``load_evaluate(ref)`` writes ``git show REF:evaluate.py`` to a temporary file and imports
it under a private module name (never ``evaluate``: that import name belongs to Hugging
Face's package), so one benchmark run can time the old and the new code on the same input.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The revision before issue 11's solver and similarity speed-ups (branch point of `solver`).
DEFAULT_BASELINE = "eae578e"


def load_current() -> ModuleType:
    """This checkout's evaluate.py, loaded by path."""
    return _load(ROOT / "evaluate.py", "kg_eval_current")


def load_evaluate(ref: str) -> ModuleType:
    """evaluate.py at git revision ``ref``, loaded by path.

    Raises:
        RuntimeError: git failed (not a repository, unknown revision), with git's message.
    """
    return _load(write_revision(ref), f"kg_eval_baseline_{abs(hash(ref))}")


def write_revision(ref: str, folder: Path | None = None) -> Path:
    """``git show REF:evaluate.py`` written to ``folder`` (default: a new temporary
    folder) as ``evaluate_baseline.py``; its path (to import, or to run as a command line).

    Raises:
        RuntimeError: git failed (not a repository, unknown revision), with git's message.
    """
    done = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:evaluate.py"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"cannot read evaluate.py at {ref!r}: {done.stderr.strip()}")
    folder = folder or Path(tempfile.mkdtemp(prefix="kg-eval-baseline-"))
    path = folder / "evaluate_baseline.py"
    path.write_text(done.stdout, encoding="utf-8")
    return path


def cli_env(as_is: bool = False) -> dict[str, str]:
    """The environment of a timed command line: a user's normal one, in which Python writes
    and reuses bytecode caches of the modules it imports (numpy, NLTK, ...), so
    ``PYTHONDONTWRITEBYTECODE`` (set on the project machines) is removed; ``as_is``: this
    process's environment unchanged (every run then compiles every imported module again,
    which costs each version the same seconds). A script run by path is compiled on every
    run either way. Time an untimed warm-up run of each command first, so that the caches
    exist."""
    env = dict(os.environ)
    if not as_is:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module          # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def common_fields(a: Any, b: Any) -> tuple[Any, Any]:
    """``a`` and ``b`` restricted to the dict keys both have (recursively): report fields
    added after the baseline (notices, inputs, new counters) are not compared."""
    if isinstance(a, dict) and isinstance(b, dict):
        pairs = {k: common_fields(a[k], b[k]) for k in a if k in b}
        return {k: v[0] for k, v in pairs.items()}, {k: v[1] for k, v in pairs.items()}
    return a, b
