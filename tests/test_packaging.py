"""Packaging: the wheel and sdist that `pip install .`, `uv tool install .` and `pipx install .`
build, inspected, then installed into a fresh virtual environment and run.

Offline-capable and lock-exact: the dists are built with ``uv build --offline`` (sdist, then the
wheel from the sdist: what an index would serve) from uv's cache, which ``uv sync`` filled with
hatchling when it built the editable install; the fresh environment gets the locked runtime
dependencies with ``uv sync --locked --offline --no-dev --no-install-project`` (cached wheels,
no index lookup), then the wheel itself with ``uv pip install --no-deps``.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import evaluate as ev
from helpers import write_jsonl

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
BIN = "Scripts" if os.name == "nt" else "bin"

_TRIPLE_A = {"source": {"title": "Quillformer", "type": "model"}, "relation": {"type": "trained_on", "weight": 0.9},
             "target": {"title": "CaseLawPile", "type": "dataset"}}
_TRIPLE_B = {"source": {"title": "Halvern Labs", "type": "organization"},
             "relation": {"type": "introduces", "weight": 0.8}, "target": {"title": "Quillformer", "type": "model"}}


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` sets UV to its own binary
    if not uv:
        pytest.skip("uv not found (the tests are run with `uv run pytest`)")
    return uv


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    proc = _run(_uv(), "build", "--offline", "--out-dir", out, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def _sync_env(where: Path, *args: str) -> None:
    """Install the locked runtime dependencies (plus ``args``, e.g. an extra) into ``where``."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["UV_PROJECT_ENVIRONMENT"] = str(where)
    proc = subprocess.run([_uv(), "sync", "--locked", "--offline", "--no-dev", "--no-install-project", "--inexact",
                           "--quiet", "--python", sys.executable, *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh virtual environment: the locked runtime dependencies, then the wheel."""
    where = tmp_path_factory.mktemp("venv") / "env"
    _sync_env(where)
    proc = _run(_uv(), "pip", "install", "--quiet", "--offline", "--no-deps", "--python", where / BIN / "python",
                dist["wheel"], cwd=where.parent)
    assert proc.returncode == 0, proc.stderr
    return where


# ======================================================================================
# The library API: __all__
# ======================================================================================

def test_every_public_name_exists():
    # __all__ (what `from evaluate import *` takes) once named randomization_deltas after it was replaced
    assert [name for name in ev.__all__ if not hasattr(ev, name)] == []
    assert len(set(ev.__all__)) == len(ev.__all__)
    assert [name for name in ev.__all__ if name.startswith("_") and name != "__version__"] == []


def test_all_is_in_chapter_order():
    """__all__ lists the API chapter by chapter, in the file's order of chapters, so the
    README list reads like the file."""
    import ast
    import re

    text = (ROOT / "evaluate.py").read_text(encoding="utf-8")
    lines = text.splitlines()
    starts = [i + 1 for i, line in enumerate(lines) if re.fullmatch(r"# \d\. .+", line)
              and lines[i - 1] == "# " + "=" * 86]
    assert len(starts) == 8
    chapter = {}
    for node in ast.parse(text).body:
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
            t.id for t in (node.targets if isinstance(node, ast.Assign) else
                           [node.target] if isinstance(node, ast.AnnAssign) else []) if isinstance(t, ast.Name)]
        for name in names:
            chapter.setdefault(name, sum(1 for start in starts if start < node.lineno))
    order = [chapter[name] for name in ev.__all__]
    assert order == sorted(order), [(n, a, b) for n, a, b in zip(ev.__all__[1:], order, order[1:]) if b < a]


def test_readme_library_example_runs(tmp_path):
    """The example of README's "Library use" runs from a clone's root as written and prints
    the sample's summary (lexical similarity: entity P/R/F1 0.7222 / 0.7471 / 0.7345)."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Library use\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^  entity +0\.7222 +0\.7471 +0\.7345 +tp 65 / predicted 90 / gold 87$", done.stdout,
                     re.MULTILINE), done.stdout


def test_the_notebook_uses_only_the_library_api():
    """generate_predictions.py (the notebook's source) reaches evaluate.py as ``ev``; every
    name it uses is in __all__."""
    import re

    used = set(re.findall(r"\bev\.(\w+)", (ROOT / "generate_predictions.py").read_text(encoding="utf-8")))
    assert {"parse_model_output", "read_jsonl", "SPEC_RELATIONS"} <= used
    assert sorted(used - set(ev.__all__)) == []


def test_readme_library_use_lists_exactly_all():
    """README's "Library use" section lists the library API, one ``- `name`: ...`` line
    each, in the order of __all__."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if "\n## Library use\n" not in readme:
        pytest.skip("README has no 'Library use' section yet")
    section = readme.split("\n## Library use\n", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^- `(\w+)`:", section, re.MULTILINE) == list(ev.__all__)


# ======================================================================================
# The wheel and the sdist
# ======================================================================================

def test_readme_install_section_lists_every_extra():
    """Each optional dependency group of pyproject.toml is named in the README's list of
    extras (the install section), so that `plots` and the others can be found there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Install as a command-line tool", 1)[1].split("\n## ", 1)[0]
    extras = section.split("Extras:", 1)[1].split("\n\n", 1)[0]
    assert "plots" in PYPROJECT["project"]["optional-dependencies"]  # the one the README once left out
    for name in PYPROJECT["project"]["optional-dependencies"]:
        assert f"`{name}`" in extras, f"README install section: extra {name!r} is not listed"


def test_readme_states_no_hand_written_test_count():
    """The suite's size is what ``pytest --collect-only`` says, never a number written by
    hand (it goes stale with the next test): a count may appear only as the condition of a
    past measurement ("(602 tests then)")."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    counts = [m for m in re.finditer(r"\b\d[\d,]* tests\b", readme)]
    assert all(readme[m.end():m.end() + 5] == " then" for m in counts), [m.group(0) for m in counts]
    assert "`uv run pytest --collect-only -q | tail -1` counts its" in readme


def test_wheel_ships_one_module_under_its_own_name(dist):
    with zipfile.ZipFile(dist["wheel"]) as whl:
        names = set(whl.namelist())
        module = whl.read("kg_triplet_eval.py")
    info = f"kg_triplet_eval-{ev.__version__}.dist-info"
    assert names == {"kg_triplet_eval.py", f"{info}/METADATA", f"{info}/WHEEL", f"{info}/entry_points.txt",
                     f"{info}/RECORD"}
    assert not any(n == "evaluate.py" or n.startswith("evaluate/") for n in names)  # Hugging Face's name
    assert module == (ROOT / "evaluate.py").read_bytes()


def test_wheel_entry_point_and_metadata(dist):
    with zipfile.ZipFile(dist["wheel"]) as whl:
        info = f"kg_triplet_eval-{ev.__version__}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        meta = email.parser.Parser().parsestr(whl.read(f"{info}/METADATA").decode())
    assert entry_points.split() == ["[console_scripts]", "kg-triplet-eval", "=", "kg_triplet_eval:main"]
    project = PYPROJECT["project"]
    assert meta["Name"] == project["name"] == "kg-triplet-eval"
    assert meta["Version"] == project["version"] == ev.__version__
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["License-Expression"] == "MIT"
    assert sorted(meta.get_all("Provides-Extra")) == sorted(project["optional-dependencies"]) == ["benchmarks", "notebook", "plots", "st"]
    requires = meta.get_all("Requires-Dist")
    assert sorted(r for r in requires if "extra ==" not in r) == sorted(project["dependencies"])
    assert "nltk==3.9.2; extra == 'benchmarks'" in requires
    assert "sentence-transformers>=3.0; extra == 'st'" in requires
    assert "matplotlib>=3.8; extra == 'plots'" in requires


def test_sdist_has_what_the_wheel_and_the_tests_need(dist):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"evaluate.py", "hatch_build.py", "pyproject.toml", "README.md", "uv.lock", "PKG-INFO",
            "tests/test_packaging.py", "gold/gold.jsonl", "predictions/finetuned.jsonl"} <= names
    assert not {n for n in names if n.startswith((".venv", ".git/", "reports/"))}


# ======================================================================================
# Installed: the console script is the same CLI as `python evaluate.py`
# ======================================================================================

def test_installed_console_script(venv, tmp_path):
    proc = _run(venv / BIN / "kg-triplet-eval", "--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"kg-triplet-eval {ev.__version__}")
    proc = _run(venv / BIN / "kg-triplet-eval", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: kg-triplet-eval ")
    probe = ("import importlib.util as u, kg_triplet_eval as k; "
             "print(k.__file__); print(u.find_spec('evaluate'))")
    proc = _run(venv / BIN / "python", "-c", probe, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    module_file, evaluate_spec = proc.stdout.split()
    assert Path(module_file).is_relative_to(venv) and evaluate_spec == "None"  # no top-level `evaluate`


def test_installed_scores_like_the_clone(venv, tmp_path):
    """A tiny run: gold has 2 triplets, the prediction only the first (exact). Strict
    P = 1/1, R = 1/2, F1 = 2*1*0.5/1.5 = 2/3. Installed and clone give the same bytes."""
    (tmp_path / "gold.jsonl").write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A, _TRIPLE_B]}) + "\n")
    (tmp_path / "pred.jsonl").write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A]}) + "\n")
    args = ("--pred", "pred.jsonl", "--gold", "gold.jsonl", "--metrics", "strict", "--no-embeddings", "--report")
    installed = _run(venv / BIN / "kg-triplet-eval", *args, "installed.json", cwd=tmp_path)
    clone = _run(sys.executable, ROOT / "evaluate.py", *args, "clone.json", cwd=tmp_path)
    assert installed.returncode == clone.returncode == 0, installed.stderr + clone.stderr
    report = json.loads((tmp_path / "installed.json").read_text(encoding="utf-8"))
    assert report["strict"]["micro"] == {"precision": 1.0, "recall": 0.5, "f1": 2 / 3}
    assert (tmp_path / "installed.json").read_bytes() == (tmp_path / "clone.json").read_bytes()
    assert installed.stdout.replace("installed.json", "X") == clone.stdout.replace("clone.json", "X")


@pytest.mark.parametrize("phase, sig, status, line", [
    ("start", "INT", 130, "interrupted: no report written"),
    ("imports", "TERM", 143, "terminated: no report written"),
    ("exit", "INT", 0, None),
])
def test_installed_console_script_owns_its_signals_like_the_clone(venv, tmp_path, phase, sig, status, line):
    # The console script imports the module (kg_triplet_eval) instead of running it as
    # __main__; it is the program all the same (_AS_PROGRAM), so a signal during the imports
    # gives the one line and 130/143, and one after main returned leaves the run's status
    # (0) instead of a silent 130. A plain library import keeps its handlers (last assert).
    (tmp_path / "gold.jsonl").write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A, _TRIPLE_B]}) + "\n")
    (tmp_path / "pred.jsonl").write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A]}) + "\n")
    proc = _run(venv / BIN / "kg-triplet-eval", "--pred", "pred.jsonl", "--gold", "gold.jsonl", "--no-embeddings",
                "--report", "r.json", cwd=tmp_path, env={"KG_EVAL_TEST_SIGNAL_AT": f"{phase}:{sig}"})
    assert proc.returncode == status, proc.stderr
    if line is not None:
        assert proc.stderr.splitlines() == [line] and not (tmp_path / "r.json").exists()
    else:
        assert "Traceback" not in proc.stderr and (tmp_path / "r.json").exists()
    imported = _run(venv / BIN / "python", "-c", "import signal, kg_triplet_eval; "
                    "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)", cwd=tmp_path)
    assert imported.stdout.strip() == "True", imported.stderr


def test_installed_hints_are_for_the_installed_tool(venv, tmp_path):
    for name in ("gold.jsonl", "pred.jsonl"):  # --pred equal to --gold is refused
        (tmp_path / name).write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A]}) + "\n")
    args = ("--pred", "pred.jsonl", "--gold", "gold.jsonl", "--report", "r.json")
    # no NLTK in this environment: the hint reinstalls the tool with its extra
    proc = _run(venv / BIN / "kg-triplet-eval", *args, "--metrics", "webnlg2020", "--no-embeddings", cwd=tmp_path)
    assert proc.returncode == 2
    assert "uv tool install --reinstall '.[benchmarks]'" in proc.stderr
    assert "pipx install --force '.[benchmarks]'" in proc.stderr and "uv sync" not in proc.stderr
    # no embedding model: the fetch command is the console script's
    empty = tmp_path / "models"
    proc = _run(venv / BIN / "kg-triplet-eval", *args, "--model-cache", empty, cwd=tmp_path,
                env={"FASTEMBED_CACHE_PATH": str(empty), "HF_HOME": str(empty), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert f"kg-triplet-eval --download-model BAAI/bge-small-en-v1.5 --model-cache {empty}" in proc.stderr
    assert "evaluate.py" not in proc.stderr
    # --compare's rescore and --summary-only hints: the console script's commands too
    for name, extra in (("base", ()), ("thr", ("--embedding-threshold", "0.7")), ("short", ("--summary-only",))):
        proc = _run(venv / BIN / "kg-triplet-eval", "--pred", "pred.jsonl", "--gold", "gold.jsonl", "--no-embeddings",
                    *extra, "--report", f"{name}.json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    for other, tail in (("thr", "--embedding-threshold 0.8 --report thr.rescored.json"),
                        ("short", "--per-entry-jsonl short.rescored.rows.jsonl --report short.rescored.json")):
        proc = _run(venv / BIN / "kg-triplet-eval", "--compare", "base.json", f"{other}.json", "--no-report",
                    cwd=tmp_path)
        assert proc.returncode == 2 and "evaluate.py" not in proc.stderr
        assert proc.stderr.endswith(f": kg-triplet-eval --pred {tmp_path / 'pred.jsonl'} --gold "
                                    f"{tmp_path / 'gold.jsonl'} --no-embeddings {tail}\n"), proc.stderr


def test_installed_benchmarks_extra_needs_no_punkt_download(venv, tmp_path):
    """With the 'benchmarks' extra (locked nltk), a run whose strings have no possible
    sentence break computes webnlg2020 without any Punkt tables (one identical triple:
    3 correct elements, F1 1)."""
    _sync_env(venv, "--extra", "benchmarks")
    for name in ("gold.jsonl", "pred.jsonl"):  # --pred equal to --gold is refused
        (tmp_path / name).write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A]}) + "\n")
    proc = _run(venv / BIN / "kg-triplet-eval", "--pred", "pred.jsonl", "--gold", "gold.jsonl", "--metrics",
                "webnlg2020", "--no-embeddings", "--report", "r.json", cwd=tmp_path,
                env={"NLTK_DATA": str(tmp_path), "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    exact = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["webnlg2020"]["Total_scores"]["Exact"]
    assert (exact["Correct"], exact["F1"]) == (3, 1.0)


# --- The editable install's fast start (issue 20 item 4; hatch_build.py) ----------------------
# `python evaluate.py` of this clone (what `uv run evaluate.py` runs) executes the bytecode
# cached by _kg_triplet_eval_editable instead of compiling the file on every run. These tests run
# the clone's own file under a private PYTHONPYCACHEPREFIX: the pyc that appears there (a script
# run the interpreter's way never writes one) shows the fast start ran, and a pyc planted there
# shows what it executes.

_FAST_ENV_DROP = ("PYTHONDONTWRITEBYTECODE", "KG_EVAL_PLAIN_START", "PYTHONINSPECT", "PYTHONDEVMODE")


@pytest.fixture(scope="module")
def launcher():
    """The editable install's launcher module (skip when this environment has none)."""
    import importlib
    try:
        module = importlib.import_module("_kg_triplet_eval_editable")
    except ImportError:
        pytest.skip("no editable install of this clone (`uv sync` makes one)")
    if module.SOURCE != str((ROOT / "evaluate.py").resolve()):
        pytest.skip(f"the editable install belongs to another clone ({module.SOURCE})")
    return module


@pytest.fixture(scope="module")
def prefix(launcher, tmp_path_factory) -> Path:
    """A private bytecode-cache root (PYTHONPYCACHEPREFIX) for the fast-start runs."""
    return tmp_path_factory.mktemp("pycache")


def _cached_pyc(prefix: Path, monkeypatch) -> Path:
    """Where the launcher caches the clone's evaluate.py under ``prefix``."""
    import importlib.util
    monkeypatch.setattr(sys, "pycache_prefix", str(prefix))
    return Path(importlib.util.cache_from_source(str((ROOT / "evaluate.py").resolve())))


def _start(prefix: Path, *args: str | Path, cwd: Path, plain: bool = False, python: tuple[str, ...] = (),
           script: str | Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in _FAST_ENV_DROP}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    if plain:
        env["KG_EVAL_PLAIN_START"] = "1"
    return subprocess.run([sys.executable, *python, str(script or ROOT / "evaluate.py"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.parametrize("plain", [False, True])
def test_a_run_leaves_no_row_spool_behind(launcher, prefix, tmp_path, plain):
    """The rows of a run of 2,000 entries or more are spooled to a temporary file
    (SPOOL_MIN_ENTRIES); the run removes it before it ends, also through the fast start,
    which ends the process with os._exit (no finaliser runs: with --metrics webnlg2020 the
    spool was left in TMPDIR, 20 MB for 2,000 entries)."""
    gold = [{"id": f"e{k}", "prompt": f"Acme {k} is in City {k}.", "triplets": [
        {"source": {"title": f"Acme {k}", "type": "org"}, "relation": {"type": "located_in", "weight": 1.0},
         "target": {"title": f"City {k}", "type": "place"}}]} for k in range(2_000)]
    g = write_jsonl(tmp_path / "g.jsonl", gold)
    p = write_jsonl(tmp_path / "p.jsonl", [{"id": o["id"], "triplets": o["triplets"]} for o in gold])
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _FAST_ENV_DROP}
    env.update(PYTHONPYCACHEPREFIX=str(prefix), TMPDIR=str(temp), **({"KG_EVAL_PLAIN_START": "1"} if plain else {}))
    proc = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(p), "--gold", str(g),
                           "--metrics", "webnlg2020", "--no-embeddings", "--quiet", "--workers", "1",
                           "--report", str(tmp_path / "r.json")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["summary"]["n_entries"] == 2_000
    assert sorted(path.name for path in temp.iterdir()) == []


def _plant(pyc: Path, source: bytes, program: str) -> None:
    """A checked-hash pyc at ``pyc``: the header of ``source``, the code of ``program``."""
    import importlib.util
    import marshal
    pyc.parent.mkdir(parents=True, exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(source)
    pyc.write_bytes(header + marshal.dumps(compile(program, "planted", "exec")))


@pytest.mark.parametrize("case", ["one entry", "bad input", "help"])
def test_fast_start_runs_like_the_plain_start(prefix, tmp_path, monkeypatch, case):
    gold = {"id": "a", "triplets": [_TRIPLE_A, _TRIPLE_B] if case != "bad input" else 5}  # bad: not a list
    (tmp_path / "gold.jsonl").write_text(json.dumps(gold) + "\n")
    (tmp_path / "pred.jsonl").write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A]}) + "\n")
    args = {"help": ["--help"]}.get(case, ["--pred", "pred.jsonl", "--gold", "gold.jsonl", "--no-embeddings"])
    pyc = _cached_pyc(prefix, monkeypatch)
    pyc.unlink(missing_ok=True)
    done = {}
    for plain in (True, False):
        report = tmp_path / f"r{plain}.json"
        done[plain] = _start(prefix, *args, *(["--report", report.name] if case != "help" else []), cwd=tmp_path,
                             plain=plain)
        assert pyc.exists() is not plain  # only the fast start caches the script's bytecode
        outputs = [(done[plain].returncode, done[plain].stdout.replace(report.name, "R"),
                    done[plain].stderr.replace(report.name, "R"))]
        done[plain] = (outputs, report.read_bytes() if report.exists() else None)
    assert done[False] == done[True]
    status = done[True][0][0][0]
    assert status == {"one entry": 0, "bad input": 2, "help": 0}[case]
    if case == "one entry":  # strict P = 1/1, R = 1/2 (as test_installed_scores_like_the_clone)
        assert json.loads(done[True][1])["strict"]["micro"] == {"precision": 1.0, "recall": 0.5, "f1": 2 / 3}
    if case == "help":
        assert done[True][0][0][1].startswith("usage: evaluate.py ")


def test_fast_start_runs_the_cached_code_of_these_bytes_only(prefix, tmp_path, monkeypatch):
    source = (ROOT / "evaluate.py").read_bytes()
    pyc = _cached_pyc(prefix, monkeypatch)
    _plant(pyc, source, "print('CACHED', __name__, __file__ == __import__('sys').argv[0])")
    proc = _start(prefix, "--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"CACHED __main__ True\n"), proc.stderr
    _plant(pyc, source + b"\n# an edit\n", "print('STALE')")  # compiled before the file changed
    proc = _start(prefix, "--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"kg-triplet-eval {ev.__version__}"), proc.stderr
    assert pyc.read_bytes()[8:16] == __import__("importlib.util").util.source_hash(source)  # re-cached


@pytest.mark.parametrize("program, status, stdout, stderr", [
    ("import sys\nsys.exit(3)", 3, "", ""),
    ("import sys\nsys.exit('a message')", 1, "", "a message\n"),
    ("import atexit\natexit.register(print, 'atexit ran')\nprint('body')", 0, "body\natexit ran\n", ""),
    ("\n\n\n\n\n\n\n\n\nraise ValueError('boom')", 1, "", "TRACEBACK"),
    ("raise KeyboardInterrupt", -2, "", "TRACEBACK"),  # -2: died by SIGINT, as the interpreter does
])
def test_fast_start_ends_the_process_as_the_interpreter_does(prefix, tmp_path, monkeypatch, program, status, stdout,
                                                            stderr):
    # Each program planted as the cached code of evaluate.py; a traceback starts at the script's
    # frame (its line 10), none of the launcher's frames.
    _plant(_cached_pyc(prefix, monkeypatch), (ROOT / "evaluate.py").read_bytes(), program)
    try:
        proc = _start(prefix, cwd=ROOT, script="evaluate.py")
    finally:
        _cached_pyc(prefix, monkeypatch).unlink()
    if stderr == "TRACEBACK" or status == -2:  # one frame: the script's (named as __file__: absolute)
        frames = [line for line in proc.stderr.splitlines() if line.startswith("  File ")]
        assert proc.stderr.startswith("Traceback (most recent call last):\n"), proc.stderr
        assert frames == [f'  File "{ROOT / "evaluate.py"}", line {1 if status == -2 else 10}, in <module>']
        stderr = proc.stderr = proc.stderr.splitlines()[-1] + "\n"
        assert stderr == ("KeyboardInterrupt\n" if status == -2 else "ValueError: boom\n")
    assert (proc.returncode, proc.stdout, proc.stderr) == (status, stdout, stderr)


@pytest.mark.parametrize("sig, status, line", [("INT", 130, "interrupted: no report written"),
                                              ("TERM", 143, "terminated: no report written"),
                                              ("HUP", 129, "hung up: no report written")])
@pytest.mark.parametrize("no_bytecode", [False, True])
def test_a_signal_while_the_launcher_compiles_ends_the_run_as_the_programs_own(prefix, tmp_path, sig, status, line,
                                                                             no_bytecode):
    # The launcher holds the signals before it reads and compiles the program (the hook
    # signals at that point: launcher:SIG), so a Ctrl-C there is the program's one line and
    # 130, not a traceback through the launcher ("failed to set __main__.__loader__", status 1).
    env = {k: v for k, v in os.environ.items() if k not in _FAST_ENV_DROP}
    env.update(PYTHONPYCACHEPREFIX=str(prefix), KG_EVAL_TEST_SIGNAL_AT=f"launcher:{sig}")
    if no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # compiled on every run: the longest window
    (tmp_path / "g.jsonl").write_text(json.dumps({"id": "a", "triplets": [_TRIPLE_A]}) + "\n")
    args = ["--pred", "g.jsonl", "--gold", "g.jsonl", "--no-embeddings", "--report", "r.json"]
    proc = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert (proc.returncode, proc.stderr.splitlines()) == (status, [line]) and not (tmp_path / "r.json").exists()
    script = Path(sys.executable).parent / "kg-triplet-eval"  # the editable install's console script: the shim
    if script.exists():
        proc = subprocess.run([str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env=env)
        assert (proc.returncode, proc.stderr.splitlines()) == (status, [line]), proc.stderr
    # the shim imported as a library: the handlers stay Python's, the hook sends nothing
    probe = "import signal, kg_triplet_eval; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert (proc.returncode, proc.stdout) == (0, "True\n"), proc.stderr


def test_launcher_code_sees_an_edit_within_the_same_second(launcher, tmp_path, monkeypatch):
    # Same size, same mtime (set back): an mtime-based pyc would run the old code; the
    # checked-hash pyc compares the source bytes.
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    path = tmp_path / "prog.py"
    path.write_text("x = 1\n", encoding="utf-8")
    first, space = {}, {}
    exec(launcher.code(str(path), str(path)), first)
    pyc = tmp_path / "__pycache__" / f"prog.{sys.implementation.cache_tag}.pyc"
    assert first["x"] == 1 and pyc.read_bytes()[4:8] == (3).to_bytes(4, "little")  # flags 3: checked hash
    stat = path.stat()
    path.write_text("x = 2\n", encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    code = launcher.code(str(path), "shown.py")
    exec(code, space)
    assert space["x"] == 2 and code.co_filename == "shown.py"


def test_fast_start_leaves_other_starts_alone(prefix, tmp_path, monkeypatch):
    probe = "import sys; print('_kg_triplet_eval_editable' in sys.modules, __loader__.__name__)"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "False BuiltinImporter\n", proc.stderr  # -c: the launcher not even imported
    other = tmp_path / "evaluate.py"  # another file of the same name: armed never
    other.write_text("import sys\nm = sys.modules['_kg_triplet_eval_editable']\n"
                     "print(m._ARMED, type(__loader__).__module__, type(__loader__).__name__)\n", encoding="utf-8")
    proc = _start(prefix, cwd=tmp_path, script=other)
    assert proc.stdout == "[] _frozen_importlib_external SourceFileLoader\n", proc.stderr
    pyc = _cached_pyc(prefix, monkeypatch)
    pyc.unlink(missing_ok=True)
    for options in (("-X", "importtime"), ("-I",), ("-B",)):  # interpreter options: the plain start
        proc = _start(prefix, "--version", cwd=tmp_path, python=options)
        assert proc.stdout.strip() == f"kg-triplet-eval {ev.__version__}" and not pyc.exists(), options


def test_editable_module_shim_imports_from_cached_bytecode(prefix, tmp_path, monkeypatch):
    # The console script kg-triplet-eval imports kg_triplet_eval: the shim executes the cached
    # code of the clone's file (here a planted one), named as the clone's file.
    pyc = _cached_pyc(prefix, monkeypatch)
    _plant(pyc, (ROOT / "evaluate.py").read_bytes(), "import sys\nPLANTED = sys._getframe().f_code.co_filename")
    env = {k: v for k, v in os.environ.items() if k not in _FAST_ENV_DROP}
    proc = subprocess.run([sys.executable, "-c", "import kg_triplet_eval as k; print(k.PLANTED, k.__file__)"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**env, "PYTHONPYCACHEPREFIX": str(prefix)})
    pyc.unlink()
    source = str((ROOT / "evaluate.py").resolve())
    assert (proc.returncode, proc.stdout) == (0, f"{source} {source}\n"), proc.stderr
