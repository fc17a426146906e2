"""NLTK tokenisation of the benchmark families without the Punkt download (nltk_word_tokenize).

``nltk_word_tokenize(text)`` must equal ``nltk.word_tokenize(text)`` on every string, and must
read the Punkt tables only for a string with a possible sentence break (Punkt's
``period_context_re``). Checked against the real ``word_tokenize`` with the shared Punkt tables
(``../shared/nltk_data``) on every string both benchmark families tokenise in
``../shared/data`` and on generated strings; without the tables (a subprocess with an empty
NLTK_DATA and HOME) on the command line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data"
NLTK_DATA = SHARED / "nltk_data"
# Must be set before nltk is imported (nltk reads NLTK_DATA at import time).
if NLTK_DATA.is_dir():
    os.environ.setdefault("NLTK_DATA", str(NLTK_DATA))

nltk = pytest.importorskip("nltk")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import evaluate as ev  # noqa: E402


def _need_punkt() -> None:
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        pytest.skip(f"NLTK punkt_tab/english not found (NLTK_DATA={os.environ.get('NLTK_DATA')})")


def _needs_punkt(text: str) -> bool:
    """The rule: Punkt is consulted only where its candidate regex matches."""
    return ev._nltk_tokenizer_parts()[1].search(text) is not None


# ======================================================================================
# The rule on hand-written strings
# ======================================================================================

@pytest.mark.parametrize("text, needs", [
    ("paris", False),
    ("st. louis", True),          # '.' + whitespace + token: Punkt's abbreviation list decides
    ("u.s. army", True),
    ("u.s.", False),              # the last '.' has nothing after it; the inner ones a letter
    ("1.5 million", False),       # '.' followed by a digit
    ("is it?", False),
    ("what? no", True),
    ("wow!)", True),              # '!' followed by ')' (NonWord)
    ("paris.city", False),        # text2kgbench glues the concept labels after the '.'
    ("paris.\n", False),          # trailing whitespace only: no next token
    ("", False),
    ("  \t", False),
])
def test_rule_on_probes(text, needs):
    assert _needs_punkt(text) is needs


def test_split_changes_tokens_hand_checked():
    """Why the split matters: "Paris. It" is ``Paris`` ``.`` ``It`` as two sentences but
    ``Paris.`` ``It`` as one line (the Treebank tokenizer splits a period only at the end)."""
    _need_punkt()
    assert nltk.word_tokenize("Paris. It", preserve_line=True) == ["Paris.", "It"]
    assert nltk.word_tokenize("Paris. It") == ["Paris", ".", "It"]
    assert ev.nltk_word_tokenize("Paris. It") == ["Paris", ".", "It"]


def test_whitespace_only_and_trailing_whitespace():
    """Punkt's last sentence is ``text[:len(text.rstrip())]``; a text of whitespace only has
    no sentence, hence no token (word_tokenize itself still loads the tables for it)."""
    _need_punkt()
    for text in ("   ", "\n", "abc'\n", "it's \t", "(a) \u00a0"):
        assert ev.nltk_word_tokenize(text) == nltk.word_tokenize(text)
    assert ev.nltk_word_tokenize(" \t\n") == []


# ======================================================================================
# Every string of the shared benchmarks
# ======================================================================================

def _webnlg_strings() -> set[str]:
    """Every triple element the webnlg2020 family tokenises on the shared data: the ' | '
    parts of each normalised triple of the references and both submissions, all splits."""
    folder = DATA / "webnlg2020"
    if not folder.is_dir():
        pytest.skip(f"shared WebNLG 2020 data not found at {folder}")
    out = {""}  # the padding element of a missing triple
    for path in sorted(folder.glob("*_*.jsonl")):
        for entry in ev.WebNLGReader.read_jsonl(path):
            for triple in entry:
                out.update(ev.WebNLGPair.normalise(ev.WebNLGScorer.join(triple)).split(" | "))
    return out


def _t2kg_strings() -> set[str]:
    """Every string the text2kgbench family tokenises on the shared data: each sentence with
    its ontology's concept labels glued on, and every subject and object of the responses
    (and, a superset, of the ground truth)."""
    folder = DATA / "text2kgbench" / "data" / "dbpedia_webnlg"
    if not folder.is_dir():
        pytest.skip(f"shared Text2KGBench data not found at {folder}")
    out: set[str] = set()
    for gt in sorted((folder / "ground_truth").glob("ont_*_ground_truth.jsonl")):
        key = gt.name[len("ont_"):-len("_ground_truth.jsonl")]
        concepts = ev.t2kg_load_ontology(folder / "ontologies" / f"{key}_ontology.json")["concept_labels"]
        for line in gt.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out.add(row["sent"] + " ".join(concepts))
            out.update(x for t in row["triples"] for x in (t["sub"], t["obj"]))
    for resp in (folder / "baselines").glob("*/llm_responses/*.jsonl"):
        for line in resp.read_text(encoding="utf-8").splitlines():
            for t in json.loads(line).get("triples") or []:
                parts = ev.Text2KGBench.triple_parts(t)
                out.update((parts[0], parts[2]))
    return out


@pytest.mark.parametrize("family, strings, n_strings, n_need_punkt", [
    ("webnlg2020", _webnlg_strings, 4472, 57),
    ("text2kgbench", _t2kg_strings, 6552, 822),
])
def test_every_benchmark_string(family, strings, n_strings, n_need_punkt):
    """Equal to the real word_tokenize on every string; the counts say how much of each
    benchmark still needs the tables (most of text2kgbench's sentences hold two sentences)."""
    _need_punkt()
    texts = sorted(strings())
    wrong = [t for t in texts if ev.nltk_word_tokenize(t) != nltk.word_tokenize(t)]
    assert wrong == []
    assert (len(texts), sum(map(_needs_punkt, texts))) == (n_strings, n_need_punkt), family


# ======================================================================================
# Generated strings: sentence-end characters, quotes, brackets, abbreviations, whitespace
# ======================================================================================

_PIECES = st.sampled_from([
    "Paris", "it", "The", "St.", "Dr.", "U.S.", "e.g.", "1.5", "3", "I", "J.R.R.", "no.",
    ".", "..", "...", "?", "!", "?!", ",", ";", ":", "'", "''", '"', "`", "``", "(", ")",
    "[", "]", "{", "}", "*", "@", "-", "--", "'s", "n't", "&",
])
_SEPARATORS = st.sampled_from(["", " ", "  ", "\n", "\t", "\u00a0", " \n "])


@st.composite
def _texts(draw) -> str:
    pieces = draw(st.lists(_PIECES, max_size=8))
    seps = draw(st.lists(_SEPARATORS, min_size=len(pieces) + 1, max_size=len(pieces) + 1))
    return "".join(s + p for s, p in zip(seps, pieces)) + seps[-1]


@settings(max_examples=400, deadline=None)
@given(_texts())
def test_generated_strings_equal_word_tokenize(text):
    _need_punkt()
    assert ev.nltk_word_tokenize(text) == nltk.word_tokenize(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30))
def test_arbitrary_text_equals_word_tokenize(text):
    _need_punkt()
    assert ev.nltk_word_tokenize(text) == nltk.word_tokenize(text)


# ======================================================================================
# Without the tables: the command line needs them only for strings the rule does not cover
# ======================================================================================

def _gold_pred(folder: Path, target: str) -> tuple[Path, Path]:
    gold = folder / "gold.jsonl"
    pred = folder / "pred.jsonl"
    item = {"source": {"title": "Quillformer", "type": "model"}, "relation": {"type": "trained_on", "weight": 0.9},
            "target": {"title": target, "type": "dataset"}}
    gold.write_text(json.dumps({"id": "a", "triplets": [item]}) + "\n", encoding="utf-8")
    pred.write_text(json.dumps({"id": "a", "triplets": [item]}) + "\n", encoding="utf-8")
    return gold, pred


def _punkt_installed_outside(home: Path) -> bool:
    """Whether Punkt tables would be found without NLTK_DATA and HOME (a system-wide install)."""
    env_paths = set(filter(None, os.environ.get("NLTK_DATA", "").split(os.pathsep)))
    paths = [p for p in nltk.data.path if p not in env_paths and not p.startswith(str(Path.home()))]
    try:
        nltk.data.find("tokenizers/punkt_tab/english/", paths=paths)
        return True
    except LookupError:
        return False


def test_covered_strings_need_no_download(tmp_path):
    """End to end, as a user without the tables runs it: every string of this input is
    covered by the rule, so webnlg2020 is computed and nothing is reported missing."""
    if _punkt_installed_outside(tmp_path):
        pytest.skip("Punkt tables are installed system-wide: cannot run without them")
    gold, pred = _gold_pred(tmp_path, "CaseLawPile corpus")
    env = {**os.environ, "NLTK_DATA": str(tmp_path), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", pred, "--gold", gold,
                           "--metrics", "all", "--no-embeddings", "--report", tmp_path / "r.json"],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Punkt" not in proc.stdout + proc.stderr and "skipped" not in proc.stderr
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    # one identical triple: 3 correct elements, precision = recall = F1 = 1 under every schema
    assert report["webnlg2020"]["Total_scores"]["Exact"]["Correct"] == 3
    assert report["webnlg2020"]["Total_scores"]["Exact"]["F1"] == 1.0


@pytest.fixture
def no_punkt(monkeypatch):
    """In-process stand-in for missing tables: Punkt's loader raises LookupError as
    ``nltk.data.find`` does (the real case is the subprocess test above)."""
    def missing(*_a, **_k):
        raise LookupError("Resource punkt_tab not found.")

    monkeypatch.setattr(nltk.tokenize, "sent_tokenize", missing)


def test_tokenizer_without_tables(no_punkt):
    # no '.', '?' or '!' followed by whitespace + a token or by a bracket/quote: no table read
    assert ev.nltk_word_tokenize("Louis's (1.5 km) \"St.Oda\"?") == [
        "Louis", "'s", "(", "1.5", "km", ")", "``", "St.Oda", "''", "?"]
    with pytest.raises(ev.PunktTablesMissing, match=r"'St\. Louis' holds a sentence break"):
        ev.nltk_word_tokenize("St. Louis")


def _main(tmp_path: Path, capsys, target: str, metrics: str) -> tuple[int, str, dict | None]:
    """Run the CLI in-process on one identical gold/prediction triple with this target title:
    (exit status, stdout + stderr, the report or None)."""
    gold, pred = _gold_pred(tmp_path, target)
    report = tmp_path / "r.json"
    rc = ev.main(["--pred", str(pred), "--gold", str(gold), "--metrics", metrics, "--no-embeddings",
                  "--report", str(report)])
    out = capsys.readouterr()
    return rc, out.out + out.err, json.loads(report.read_text(encoding="utf-8")) if report.exists() else None


@pytest.mark.parametrize("metrics", ["webnlg2020", "all"])
def test_covered_run_without_tables_in_process(tmp_path, capsys, no_punkt, metrics):
    rc, output, report = _main(tmp_path, capsys, "CaseLawPile corpus", metrics)
    assert rc == 0 and "Punkt" not in output
    assert report["webnlg2020"]["Total_scores"]["Exact"]["Correct"] == 3


def test_uncovered_string_without_tables_fails_naming_it(tmp_path, capsys, no_punkt):
    rc, output, report = _main(tmp_path, capsys, "St. Louis corpus", "webnlg2020")
    assert rc == 2 and report is None
    assert "error: webnlg2020: NLTK's English Punkt tables (punkt_tab) are not found" in output
    assert "'st. louis corpus'" in output
    assert "uv run python -c \"import nltk; nltk.download('punkt_tab')\"" in output


def test_uncovered_string_without_tables_is_skipped_under_all(tmp_path, capsys, no_punkt):
    rc, output, report = _main(tmp_path, capsys, "St. Louis corpus", "all")
    assert rc == 0
    assert "note: --metrics all: webnlg2020 skipped (NLTK's English Punkt tables" in output
    assert "webnlg2020" not in report and {"strict", "per_relation"} <= set(report)


# What every attribute of every NLTK module is after an import: (module, name, type, module
# the value was defined in) for each name not starting with "__".
_NLTK_MODULES = """
import json, sys, types
def nltk_modules():
    return sorted([name, key, type(value).__name__, getattr(value, "__module__", None) if callable(value) else None]
                  for name, module in list(sys.modules.items())
                  if name.split(".")[0] == "nltk" and isinstance(module, types.ModuleType)
                  for key, value in vars(module).items() if not key.startswith("__"))
"""


def _nltk_import_in_subprocess(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _NLTK_MODULES + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_nltk_imported_without_scipy_stats_is_nltk_as_imported_plainly():
    """The tokenizer's import of NLTK (``_import_nltk``: ``scipy.stats`` held back, about 1 s
    less) leaves every attribute of every NLTK module as a plain ``import nltk`` does, but
    ``nltk.metrics.association.fisher_exact``, which calls SciPy's (imported at the first call)
    with SciPy's result."""
    pytest.importorskip("scipy")
    ours = _nltk_import_in_subprocess("""
import importlib.util
spec = importlib.util.spec_from_file_location("kg_eval_nltk_import", "evaluate.py")
ev = importlib.util.module_from_spec(spec); sys.modules[spec.name] = ev; spec.loader.exec_module(ev)
ev._nltk_tokenize_and_stem()
held_back = "scipy.stats" not in sys.modules
modules = nltk_modules()
fisher = sys.modules["nltk.metrics.association"].fisher_exact([[8, 2], [1, 5]])
import scipy.stats
print(json.dumps({"held_back": held_back, "modules": modules, "fisher": list(map(float, fisher)),
                  "scipy": list(map(float, scipy.stats.fisher_exact([[8, 2], [1, 5]])))}))
""")
    plain = _nltk_import_in_subprocess("""
import nltk
print(json.dumps({"modules": nltk_modules()}))
""")
    fisher = ("nltk.metrics.association", "fisher_exact", "function")
    differ = set(map(tuple, ours["modules"])) ^ set(map(tuple, plain["modules"]))
    checked = nltk.__version__ == ev._NLTK_IMPORT_CHECKED and importlib.util.find_spec("sklearn") is None
    assert ours["held_back"] == checked
    if checked:  # ours: the function of evaluate.py (loaded as kg_eval_nltk_import); plain: SciPy's
        assert differ == {(*fisher, "kg_eval_nltk_import"), (*fisher, "scipy.stats._stats_py")}
    else:  # another NLTK release, or scikit-learn installed: NLTK imported plainly
        assert differ == set()
    assert len(ours["modules"]) > 1000 and ours["fisher"] == ours["scipy"]
