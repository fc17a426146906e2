"""Helpers shared by several test files: hand-written triplet items, the worked example,
readers/writers of small JSONL inputs, in-process and subprocess CLI runs, report checks.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from fractions import Fraction as F
from pathlib import Path
from typing import Any

import pytest
from conftest import ACME_A, ACME_B, write_jsonl  # noqa: F401 (write_jsonl: re-exported)

import evaluate as ev


def trip(src, rel, tgt, w=0.8, st="entity", tt="concept"):
    """A typed triplet item (SPEC.md section 1)."""
    return {"source": {"title": src, "type": st},
            "relation": {"type": rel, "weight": w},
            "target": {"title": tgt, "type": tt}}


def with_weight(w):
    item = trip("A", "based_on", "B")
    item["relation"]["weight"] = w
    return item


A = trip("Transformer", "based_on", "self-attention", w=0.8, st="concept", tt="concept")

B = trip("BERT", "extends", "Transformer", w=0.9, st="entity", tt="concept")

a = json.dumps(ACME_A)

b = json.dumps(ACME_B)

ACME_PROMPT = "Acme Inc is located in City Y. It was founded by Person Z."


def line(obj: Any) -> bytes:
    """One JSONL line (LF-terminated bytes)."""
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def gold_rec(rid: str | None, items: list, prompt: str = ACME_PROMPT) -> dict:
    rec = {"prompt": prompt, "triplets": items}
    if rid is not None:
        rec = {"id": rid, **rec}
    return rec


def write(path: Path, data: bytes | list) -> Path:
    """Write raw bytes, or a list of records / raw byte lines as JSONL."""
    if isinstance(data, list):
        data = b"".join(x if isinstance(x, bytes) else line(x) for x in data)
    path.write_bytes(data)
    return path


def score_files(tmp_path: Path, gold: bytes | list, pred: bytes | list, **load_kw: Any) -> dict:
    """load_inputs + evaluate_entries (lexical similarity) on files written to tmp_path."""
    g = write(tmp_path / "gold.jsonl", gold)
    p = write(tmp_path / "pred.jsonl", pred)
    loaded = ev.load_inputs(p, g, **load_kw)
    report = ev.evaluate_entries(loaded.entries, similarity=ev.Similarity())
    report["summary"]["input_problems"] = loaded.problems
    report["summary"]["duplicates_dropped"] = loaded.duplicates_dropped
    return report


def _reject_constant(token: str) -> Any:
    raise AssertionError(f"report contains the non-JSON token {token}")


def cli(tmp_path: Path, *args: str) -> tuple[int, str, str, dict | None]:
    """Run ``evaluate.main`` in-process with --no-embeddings and a report in tmp_path.

    Returns (exit status, stdout, stderr, parsed report or None). The report is parsed
    strictly: a NaN/Infinity token makes ``json.loads`` raise.
    """
    report = tmp_path / "report.json"
    if report.exists():
        report.unlink()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = ev.main([*args, "--no-embeddings", "--report", str(report)])
        except SystemExit as exc:  # argparse usage errors
            rc = exc.code
    data = None
    if report.exists():
        data = json.loads(report.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    return rc, out.getvalue(), err.getvalue(), data


def cli_files(tmp_path: Path, gold: bytes | list, pred: bytes | list, *extra: str):
    g = write(tmp_path / "gold.jsonl", gold)
    p = write(tmp_path / "pred.jsonl", pred)
    return cli(tmp_path, "--pred", str(p), "--gold", str(g), *extra)


def norm(item):
    """Normalise one schema-valid item into an ev.Triplet."""
    assert ev.validate_hgr_item(item, 0) is None
    return ev.normalize_triplets([item])[0]


def assert_perfect(row: dict) -> None:
    m = row["metrics"]
    for key in ("entity_precision", "entity_recall", "entity_f1",
                "triplet_precision", "triplet_recall", "triplet_f1"):
        assert m[key] == 1.0, (key, row)


def fl(x: F) -> float:
    return float(x)


def score(gold, pred, prompt="", **kw):
    return ev.score_entry(gold, pred, prompt, similarity=ev.Similarity(), **kw).metrics


PROMPT = "The Transformer architecture relies on self-attention."


WORKED_PROMPT = "Transformer is based on self-attention. BERT extends Transformer. ImageNet is used for evaluation."

WORKED_GOLD = [
    A,                                                                              # G1
    B,                                                                              # G2
    trip("ImageNet", "used_for", "evaluation", w=0.6, st="entity", tt="concept"),   # G3
]


WORKED_PRED = [
    # P1: equal to G1 after normalisation; weight |0.8-0.7| = 0.10000000000000009 -> 0.5
    trip("transformer", "Based_On", "Self-Attention", w=0.7, st="Concept", tt="concept"),
    # P2: endpoints of G2, relation depends_on ("depends on" vs "extends" < 0.8 -> 0):
    # align = 0.9, entity match, no relation match; target type entity != concept
    trip("BERT", "depends_on", "Transformer", w=0.9, st="entity", tt="entity"),
    # P3: invalid (weight 1.5): stays in the precision denominator
    trip("ImageNet", "used_for", "evaluation", w=1.5, st="entity", tt="concept"),
    # P4: relation "based on" (space) not in the vocabulary -> hallucinated_relation (hard);
    # assigned to G3 with align 0 (no field similar), rejected
    trip("GPT", "based on", "attention mechanism", w=0.5, st="entity", tt="concept"),
]


def T(s: str, r: str, o: str, w: float = 0.9) -> dict:
    return {"source": {"title": s, "type": "entity"}, "relation": {"type": r, "weight": w},
            "target": {"title": o, "type": "entity"}}


def entry(gold: list, pred: list | None, prompt: str = "", k: int = 0) -> ev.Entry:
    return ev.Entry(ev.GoldRecord(f"e{k}", prompt, gold, k + 1),
                    ev.Prediction(f"e{k}", pred, "ok" if pred is not None else "unparseable", "", k + 1))


def run(entries: list[ev.Entry], families=("hgr", "strict", "per-relation")) -> dict:
    return ev.evaluate_entries(entries, similarity=ev.Similarity(), families=families)


SHARED = Path(__file__).resolve().parents[1].parent / "shared"

NLTK_DATA = SHARED / "nltk_data"

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python evaluate.py ARGS`` (the project's evaluate.py) and capture its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "evaluate.py"), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=full_env, timeout=300)


def main_as_nobody(*args: str | Path) -> tuple[int, str]:
    """``evaluate.main(args)`` in a forked child of this (root) process that becomes the
    user nobody (uid 65534), for what only a non-root user sees (Permission denied): the
    child's exit status and its stderr. The inputs must be where nobody may read them."""
    import multiprocessing.connection  # noqa: F401 - imported lazily; nobody cannot read /root
    import tempfile

    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            status = 3
            try:
                os.dup2(err.fileno(), 2)
                sys.stderr = open(2, "w", closefd=False)
                os.setgid(65534)
                os.setuid(65534)
                status = ev.main([str(a) for a in args])
                sys.stderr.flush()
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        return os.WEXITSTATUS(status), err.read().decode("utf-8")


def load_report(path: Path) -> dict:
    def reject(token: str) -> Any:
        raise AssertionError(f"report contains the non-JSON token {token}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)


def count_lines(path: Path) -> int:
    return sum(1 for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip())


SHARED_DATA = SHARED / "data"


def assert_close(actual: Any, expected: Any, path: str = "", tol: float = 1e-9) -> None:
    """Recursive comparison: same keys, ints/strings equal, floats within ``tol``."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert set(actual) == set(expected), (path, sorted(set(actual) ^ set(expected)))
        for k in expected:
            assert_close(actual[k], expected[k], f"{path}.{k}", tol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), path
        for i, (x, y) in enumerate(zip(actual, expected)):
            assert_close(x, y, f"{path}[{i}]", tol)
    elif isinstance(expected, bool) or isinstance(expected, str) or expected is None:
        assert actual == expected, (path, actual, expected)
    elif isinstance(expected, int) and isinstance(actual, int):
        assert actual == expected, (path, actual, expected)
    else:
        assert math.isclose(actual, expected, rel_tol=0, abs_tol=tol), (path, actual, expected)


def _need(path: Path, what: str) -> None:
    if not path.exists():
        pytest.skip(f"{what} not available ({path} is absent)")


# --------------------------------------------------------------------------------------
# Reference entry points used only by tests (the command line scores through the families)
# --------------------------------------------------------------------------------------

def hungarian_numpy(cost) -> list[int]:
    """Assignment of the numpy solver ``ev._solve_numpy`` (identical to ``ev._hungarian_python``)."""
    n, m = cost.shape
    return ev._assignment_from_columns(ev._solve_numpy(cost).p, n, m)


def score_corpus(metrics, *, unparseable: int = 0, missing: int = 0) -> dict[str, Any]:
    """Corpus aggregation (SPEC.md section 8) of per-entry ``metrics`` dicts (the fields
    of :class:`ev.EntryMetrics`), through :class:`ev.HgrFamily` (exact macro means).
    Returns ``{"totals", "micro", "macro"}``; ``unparseable``/``missing`` are added to the totals."""
    family = ev.HgrFamily()
    record = {"totals": {"unparseable_predictions": unparseable, "missing_predictions": missing}}
    for m in metrics:
        record = family.merge(record, family.record(ev.EntryMetrics(**m), "ok"))
    return family.finish(record)


def _t2kg_rows(path) -> list[dict]:
    """A benchmark JSONL file read with :func:`ev.read_jsonl`; a bad line is an InputError."""
    rows = []
    for line in ev.read_jsonl(path):
        if line.error is not None:
            raise ev.InputError(f"{os.fspath(path)}: {line.error}")
        if not isinstance(line.value, Mapping) or "id" not in line.value:
            raise ev.InputError(f"{os.fspath(path)}: line {line.line_no}: expected an object with an 'id'")
        rows.append(line.value)
    return rows


def _t2kg_selected(selected_ids) -> list[str]:
    """Selected ids from a path (one id per line, blank lines dropped) or an iterable."""
    if isinstance(selected_ids, (str, os.PathLike)):
        with open(selected_ids, encoding="utf-8") as fh:
            return [line.strip() for line in fh if line.strip()]
    return [str(i) for i in selected_ids]


def t2kg_ontology_run(ground_truth_path, responses_path, ontology_path, selected_ids=None) -> tuple[dict, dict]:
    """One ontology's responses evaluated as run_eval.py does, with the benchmark's own file
    handling (a repeated id keeps its last line, response ids without ground truth are
    ignored); the arithmetic is the family's (``ev.Text2KGBench``), the files are read here.

    ``ground_truth_path``: JSONL of ``{"id", "sent", "triples": [{sub, rel, obj}]}``;
    ``responses_path``: JSONL of ``{"id", "triples": [[s, r, o], ...]}``; ``ontology_path``: a
    path or a loaded ontology; ``selected_ids``: the manually verified ids (a file of one id a
    line, or an iterable), or None for no "selected" row.

    Returns (result, the ontology's group record): result ``{"rows": [per-sentence dicts, in
    ground-truth order, ids with a response only], "averages": {"all_test_cases": ...,
    "selected_test_cases": ... or absent}, "averages_2dp": the same as "%.2f" strings,
    "counts": {"gt_sentences", "evaluated_sentences", "missing_responses",
    "ignored_response_ids", "selected_ids"}}``. Averages: sum over evaluated ids / number of
    ground-truth sentences (selected: / number of listed ids), exact, rounded once. Raises
    ValueError on an empty ground truth or selected list.
    """
    gold = {row["id"]: row for row in _t2kg_rows(ground_truth_path)}
    if not gold:
        raise ValueError(f"empty ground truth: {ground_truth_path}")
    responses = {row["id"]: row for row in _t2kg_rows(responses_path)}  # last line wins
    ontology = ontology_path if isinstance(ontology_path, Mapping) else ev.t2kg_load_ontology(ontology_path)
    selected = None if selected_ids is None else _t2kg_selected(selected_ids)
    if selected is not None and not selected:
        raise ValueError("selected_ids is empty")
    selected_set = set(selected or ())
    rows, group, chosen = [], {}, {}
    for position, (sid, g) in enumerate(gold.items()):
        resp = responses.get(sid)
        m = None if resp is None else ev.t2kg_sentence_metrics(g["triples"], resp.get("triples") or [], g["sent"],
                                                               ontology)
        record = ev.Text2KGBench.sentence_record(sid, position, m)
        group = ev.Text2KGBench.merge_group(group, record)
        if sid in selected_set:
            chosen = ev.Text2KGBench.merge_group(chosen, record)
        if m is not None:
            rows.append({"id": sid, "sent": g["sent"], **m})
    section = ev.Text2KGBench.group_section(group)
    averages = {"all_test_cases": section["averages"]}
    if selected is not None:
        averages["selected_test_cases"] = {k: float(v) for k, v in ev.Text2KGBench.averages(
            {**chosen, "sentences": len(selected)}).items()}
    return {
        "rows": rows,
        "averages": averages,
        "averages_2dp": {t: {k: f"{v:.2f}" for k, v in a.items()} for t, a in averages.items()},
        "counts": {**section["counts"], "ignored_response_ids": len(set(responses) - set(gold)),
                   "selected_ids": None if selected is None else len(selected)},
    }, group


def t2kg_evaluate_ontology(ground_truth_path, responses_path, ontology_path, selected_ids=None) -> dict[str, Any]:
    """The result of :func:`t2kg_ontology_run` (without the group record)."""
    return t2kg_ontology_run(ground_truth_path, responses_path, ontology_path, selected_ids)[0]


def t2kg_evaluate_run(ground_truth_dir, ontologies_dir, responses_dir, onto_list=None, selected_dir=None) -> dict:
    """A whole Text2KGBench run (every ontology of one dataset and one model), from the
    benchmark's own directories, as run_eval.py evaluates it.

    Files are matched by the ontology key ``<k>_<name>``: ``ground_truth_dir/
    ont_<key>_ground_truth.jsonl`` (defines the set of ontologies), ``ontologies_dir/
    <key>_ontology.json``, and the single ``responses_dir/*.jsonl`` whose name starts with
    ``<key>_`` or ``ont_<key>_``. With ``selected_dir``, ``selected_ont_<key>.txt`` there
    (if present) gives the selected ids. Global rows: :meth:`ev.Text2KGBench.global_rows`.

    Returns ``{"per_ontology": {key: t2kg_evaluate_ontology result}, "global_as_script",
    "global_unique", "global_as_script_2dp", "global_unique_2dp", "onto_list"}``. Raises
    FileNotFoundError (no ground truth, missing ontology or response file), ValueError
    (ambiguous response files, empty onto_list) and KeyError (an onto_list entry that is not
    an evaluated ontology).
    """
    gt_dir, onto_dir, resp_dir = Path(ground_truth_dir), Path(ontologies_dir), Path(responses_dir)
    keys = sorted((m.group(1) for p in gt_dir.iterdir() if (m := ev.Text2KGBench.GT_FILE.match(p.name))),
                  key=ev.Text2KGBench.key_order)
    if not keys:
        raise FileNotFoundError(f"no ont_<k>_<name>_ground_truth.jsonl in {gt_dir}")
    per_ontology: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    for key in keys:
        onto_path = onto_dir / f"{key}_ontology.json"
        if not onto_path.is_file():
            raise FileNotFoundError(f"missing ontology file {onto_path}")
        selected = None
        if selected_dir is not None:
            sel_path = Path(selected_dir) / f"selected_ont_{key}.txt"
            selected = sel_path if sel_path.is_file() else None
        per_ontology[key], groups[key] = t2kg_ontology_run(
            gt_dir / f"ont_{key}_ground_truth.jsonl", ev.Text2KGBench.find_response(resp_dir, key),
            onto_path, selected)
    return {"per_ontology": per_ontology, **ev.Text2KGBench.global_rows(groups, onto_list)}


def randomization_p_value(deltas: Any, observed: float) -> tuple[float | None, int]:
    """Reference two-sided p-value of paired approximate randomisation from the trials'
    differences ``deltas``: ``(c + 1) / (R + 1)`` with c the trials with ``|delta*| >=
    |delta| (1 - AR_TOLERANCE)`` (Phipson & Smyth 2010: never 0, exact-size test); trials
    whose delta* is NaN (an N/A macro value) are left out of R. Returns (p, number of NaN
    trials); p is None when no trial is left or ``observed`` is NaN. (evaluate.py's
    randomization_test counts the same way, block by block.)"""
    finite = [d for d in deltas if not math.isnan(d)]
    na = len(deltas) - len(finite)
    if not finite or math.isnan(observed):
        return None, na
    c = sum(1 for d in finite if abs(d) >= abs(observed) * (1 - ev.AR_TOLERANCE))
    return (c + 1) / (len(finite) + 1), na
