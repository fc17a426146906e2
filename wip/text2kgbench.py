"""Text2KGBench evaluator, reproduced (section: ``text2kgbench``).

Reimplements the metrics of ``src/evaluation/run_eval.py`` from Text2KGBench
(github.com/cenguix/Text2KGBench, commit 50a3d25; Mihindukulasooriya, Tiwari,
Enguix, Lata, "Text2KGBench: A Benchmark for Ontology-Driven Knowledge Graph
Generation from Text", ISWC 2023, arXiv:2308.02357), bug for bug, from the
behaviour described in the benchmark README (no code copied):

* per sentence: precision / recall / F1 on normalised triple keys after a
  relation filter, ontology conformance (OC), relation hallucination (RH = 1-OC),
  subject / object hallucination (SH / OH) by a stemmed substring test;
* per ontology: macro averages over the ground-truth sentences (all, and the
  manually verified "selected" ids);
* per run: the global row (unweighted mean over a config's ``onto_list``).

Quirks kept on purpose, because they are what the published numbers measure:
the relation filter before P/R, set semantics for P/R but list semantics for
OC/SH/OH, the concept labels glued to the sentence with no separator, the
``01januari`` deletion, OC = 1 for an empty prediction but 0 (via the average)
for a missing response, and the duplicated ``1_university`` in the shipped
dbpedia_webnlg configs (see ``t2kg_evaluate_run``).

NLTK (``word_tokenize`` with the English Punkt model, ``PorterStemmer``) is an
optional extra, imported lazily on the first hallucination computation.
"""

import functools
import json
import os
import re
from pathlib import Path
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

T2KG_METRIC_KEYS: tuple[str, ...] = (
    "precision",
    "recall",
    "f1",
    "onto_conf",
    "sub_halluc",
    "rel_halluc",
    "obj_halluc",
)
"""Metric names, as run_eval.py writes them (averages are prefixed ``avg_``)."""

T2KG_DBPEDIA_WEBNLG_ONTO_LIST: tuple[str, ...] = (
    "1_university",
    "1_university",
    "2_musicalwork",
    "3_airport",
    "4_building",
    "5_athlete",
    "6_politician",
    "7_company",
    "8_celestialbody",
    "9_astronaut",
    "10_comicscharacter",
    "11_meanoftransportation",
    "12_monument",
    "13_food",
    "14_writtenwork",
    "15_sportsteam",
    "16_city",
    "17_artist",
    "18_scientist",
    "19_film",
)
"""The ``onto_list`` of the shipped dbpedia_webnlg configs (20 entries: ``1_university``
appears twice, so the published global row gives it weight 2/20)."""

_T2KG_WS_UNDERSCORE = re.compile(r"_|\s+")
_T2KG_GT_FILE = re.compile(r"^ont_(\d+_.+)_ground_truth\.jsonl$")
_T2KG_ONTO_FILE = re.compile(r"^(\d+_.+)_ontology\.json$")


# --------------------------------------------------------------------------- helpers


def _t2kg_triple_parts(triple: Any) -> tuple[str, str, str]:
    """Return (subject, relation, object) of a ``[s, r, o]`` sequence or a
    ``{"sub", "rel", "obj"}`` mapping. Raises ValueError on any other shape."""
    if isinstance(triple, Mapping):
        try:
            return triple["sub"], triple["rel"], triple["obj"]
        except KeyError as exc:
            raise ValueError(f"triple dict needs keys sub/rel/obj: {triple!r}") from exc
    if isinstance(triple, (list, tuple)) and len(triple) == 3:
        return triple[0], triple[1], triple[2]
    raise ValueError(f"triple must be [s, r, o] or {{sub, rel, obj}}: {triple!r}")


def _t2kg_squash(text: str) -> str:
    """Delete every underscore and whitespace run, then lowercase."""
    return _T2KG_WS_UNDERSCORE.sub("", text).lower()


def _t2kg_key(s: str, r: str, o: str) -> str:
    """P/R matching key: each part squashed (no ``_``, no whitespace, lowercase),
    the three joined with no separator."""
    return _t2kg_squash(s) + _t2kg_squash(r) + _t2kg_squash(o)


def _t2kg_onto_labels(ontology: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(concept labels, relation labels) from either the raw ontology JSON
    (``concepts`` / ``relations`` lists of dicts with ``label``) or the dict
    returned by ``t2kg_load_ontology``."""
    if "concept_labels" in ontology and "relation_labels" in ontology:
        return list(ontology["concept_labels"]), list(ontology["relation_labels"])
    try:
        concepts = [c["label"] for c in ontology["concepts"]]
        relations = [r["label"] for r in ontology["relations"]]
    except (KeyError, TypeError) as exc:
        raise ValueError("ontology needs concepts/relations with labels") from exc
    return concepts, relations


@functools.lru_cache(maxsize=1)
def _t2kg_nltk() -> tuple[Any, Any]:
    """Lazily import NLTK; return (word_tokenize, cached Porter stem function).

    Raises ImportError if nltk is missing; nltk raises LookupError on first use
    when the English Punkt tables are not on ``NLTK_DATA``."""
    try:
        from nltk.stem import PorterStemmer
        from nltk.tokenize import word_tokenize
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "Text2KGBench hallucination metrics need nltk (pip install nltk) "
            "and the English Punkt tables (nltk.download('punkt_tab'))"
        ) from exc
    stemmer = PorterStemmer()  # default NLTK_EXTENSIONS mode, lowercases
    stem = functools.lru_cache(maxsize=1 << 16)(stemmer.stem)
    return word_tokenize, stem


def _t2kg_stem_squash(text: str) -> str:
    """run_eval.py's hallucination normalisation: word_tokenize, Porter-stem each
    token, join the stems with no separator, delete ``_`` and whitespace, lowercase."""
    word_tokenize, stem = _t2kg_nltk()
    return _t2kg_squash("".join(stem(tok) for tok in word_tokenize(text)))


def _t2kg_read_jsonl(path: str | os.PathLike) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# ------------------------------------------------------------------ per sentence


def t2kg_sentence_metrics(
    gold_triples: Sequence[Any],
    pred_triples: Sequence[Any],
    sentence: str,
    ontology: Mapping[str, Any],
) -> dict[str, Any]:
    """Text2KGBench per-sentence metrics, as run_eval.py computes them.

    Args:
        gold_triples: gold triples, each ``[s, r, o]`` or ``{"sub","rel","obj"}`` (strings).
        pred_triples: predicted triples, same shapes; duplicates and empty strings allowed.
        sentence: the test sentence text.
        ontology: the ontology JSON dict (``concepts``/``relations`` with ``label``) or the
            dict returned by ``t2kg_load_ontology``.

    Returns:
        dict with floats in [0, 1] under the benchmark's own names
        ``precision``, ``recall``, ``f1``, ``onto_conf``, ``sub_halluc``, ``rel_halluc``,
        ``obj_halluc``, and integer counts ``llm_triples`` (predicted triples, list length),
        ``filtered_llm_triples`` (those surviving the relation filter) and ``gt_triples``
        (gold list length). (run_eval.py's output file stores the triple lists under these
        three names; here they are their lengths.)

    Formulas (Text2KGBench README, "Metric semantics of run_eval.py"):
        * relation filter: keep predicted triples whose relation is exactly (case-sensitive)
          one of this sentence's gold relations, gold spaces turned into ``_``.
        * key(s, r, o) = squash(s)+squash(r)+squash(o), squash = lowercase and delete ``_``
          and whitespace runs. G = set of gold keys, P = set of filtered predicted keys.
          If P is empty: precision = recall = f1 = 0. Else precision = |G∩P|/|P|,
          recall = |G∩P|/|G|, f1 = 2PR/(P+R) (0 when P+R = 0).
        * onto_conf = (# predicted triples, as a list, whose relation is exactly one of the
          ontology relation labels with spaces turned into ``_``) / (# predicted triples);
          rel_halluc = 1 - onto_conf; an empty prediction gives onto_conf 1, rel_halluc 0.
        * context = sentence + " ".join(concept labels) (no separator after the sentence),
          processed by word_tokenize -> PorterStemmer.stem -> joined with no separator ->
          ``_``/whitespace deleted -> lowercase. Each subject (object) is processed alike and
          then has every ``01januari`` deleted; it is hallucinated if it is not a substring
          of the processed context. sub_halluc (obj_halluc) = hallucinated subjects (objects)
          / # predicted triples; 0 for an empty prediction.

    Raises:
        ValueError: a triple or the ontology has the wrong shape.
        ImportError / LookupError: nltk or its English Punkt tables are missing (only
            reached when the prediction is non-empty).
    """
    gold = [_t2kg_triple_parts(t) for t in gold_triples]
    pred = [_t2kg_triple_parts(t) for t in pred_triples]
    concepts, relations = _t2kg_onto_labels(ontology)

    gold_rels = {r.replace(" ", "_") for _, r, _ in gold}
    filtered = [t for t in pred if t[1] in gold_rels]
    gold_keys = {_t2kg_key(*t) for t in gold}
    pred_keys = {_t2kg_key(*t) for t in filtered}
    if pred_keys:
        hits = len(gold_keys & pred_keys)
        precision = hits / len(pred_keys)
        recall = hits / len(gold_keys)
        f1 = 2 * ((precision * recall) / (precision + recall)) if precision + recall > 0 else 0
    else:
        precision = recall = f1 = 0

    if pred:
        onto_rels = {r.replace(" ", "_") for r in relations}
        n_conf = sum(1 for t in pred if t[1] in onto_rels)
        onto_conf = n_conf / len(pred)
        rel_halluc = 1 - onto_conf
        context = _t2kg_stem_squash(sentence + " ".join(concepts))
        n_sub = n_obj = 0
        for s, _, o in pred:
            if _t2kg_stem_squash(s).replace("01januari", "") not in context:
                n_sub += 1
            if _t2kg_stem_squash(o).replace("01januari", "") not in context:
                n_obj += 1
        sub_halluc = n_sub / len(pred)
        obj_halluc = n_obj / len(pred)
    else:
        onto_conf, rel_halluc, sub_halluc, obj_halluc = 1, 0, 0, 0

    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "onto_conf": onto_conf,
        "sub_halluc": sub_halluc,
        "rel_halluc": rel_halluc,
        "obj_halluc": obj_halluc,
        "llm_triples": len(pred),
        "filtered_llm_triples": len(filtered),
        "gt_triples": len(gold),
    }


# ------------------------------------------------------------------ per ontology


def t2kg_load_ontology(path: str | os.PathLike) -> dict[str, Any]:
    """Load a Text2KGBench ontology JSON file (``ontologies/<k>_<name>_ontology.json``).

    Returns ``{"id", "title", "concept_labels": [str], "relation_labels": [str]}`` in file
    order (concept labels keep their order: it decides the token fused with the sentence).
    Raises OSError / json.JSONDecodeError on unreadable files, ValueError when
    ``concepts`` / ``relations`` lack labels.
    """
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    concepts, relations = _t2kg_onto_labels(raw)
    return {
        "id": raw.get("id"),
        "title": raw.get("title"),
        "concept_labels": concepts,
        "relation_labels": relations,
    }


def _t2kg_read_selected(selected_ids: str | os.PathLike | Iterable[str]) -> list[str]:
    """Selected ids from a path (one id per line, blank lines dropped) or an iterable."""
    if isinstance(selected_ids, (str, os.PathLike)):
        with open(selected_ids, encoding="utf-8") as fh:
            return [line.strip() for line in fh if line.strip()]
    return [str(i) for i in selected_ids]


def t2kg_evaluate_ontology(
    ground_truth_path: str | os.PathLike,
    responses_path: str | os.PathLike,
    ontology_path: str | os.PathLike | Mapping[str, Any],
    selected_ids: str | os.PathLike | Iterable[str] | None = None,
) -> dict[str, Any]:
    """Evaluate one ontology's responses as run_eval.py does.

    Args:
        ground_truth_path: JSONL, one ``{"id", "sent", "triples": [{sub, rel, obj}]}`` a line.
        responses_path: JSONL, one ``{"id", "triples": [[s, r, o], ...], ...}`` a line. When an
            id repeats, the last line wins; ids not in the ground truth are ignored.
        ontology_path: ontology JSON path, or an already loaded ontology dict.
        selected_ids: manually verified ids (path to a one-id-a-line file, or an iterable), or
            None for no "selected" row.

    Returns:
        ``{"rows": [per-sentence dict with "id", "sent" + t2kg_sentence_metrics keys, in
        ground-truth order, only for ids that have a response],
        "averages": {"all_test_cases": {metric: float}, "selected_test_cases": {...} or absent},
        "averages_2dp": the same formatted ``"%.2f"`` as run_eval.py writes them,
        "counts": {"gt_sentences", "evaluated_sentences", "missing_responses",
        "ignored_response_ids", "selected_ids"}}``.

    Averages (macro over sentences): avg_m = sum over evaluated gold ids of m / N, with N the
    number of ground-truth sentences (unique ids, last line wins), so a sentence without a
    response adds 0 to every metric (onto_conf included). Selected: sum over evaluated ids in
    the list / number of listed ids. Raises ValueError (not ZeroDivisionError) when the ground
    truth or the selected list is empty; OSError on unreadable files.
    """
    gold = {row["id"]: row for row in _t2kg_read_jsonl(ground_truth_path)}
    if not gold:
        raise ValueError(f"empty ground truth: {ground_truth_path}")
    responses: dict[str, dict] = {}
    for row in _t2kg_read_jsonl(responses_path):
        responses[row["id"]] = row  # last line wins
    if isinstance(ontology_path, Mapping):
        ontology = ontology_path
    else:
        ontology = t2kg_load_ontology(ontology_path)
    selected = None if selected_ids is None else _t2kg_read_selected(selected_ids)
    if selected is not None and not selected:
        raise ValueError("selected_ids is empty")
    selected_set = set(selected or ())

    rows = []
    sums_all = dict.fromkeys(T2KG_METRIC_KEYS, 0.0)
    sums_sel = dict.fromkeys(T2KG_METRIC_KEYS, 0.0)
    for sid, g in gold.items():
        resp = responses.get(sid)
        if resp is None:
            continue
        m = t2kg_sentence_metrics(g["triples"], resp.get("triples") or [], g["sent"], ontology)
        rows.append({"id": sid, "sent": g["sent"], **m})
        for k in T2KG_METRIC_KEYS:
            sums_all[k] += m[k]
            if sid in selected_set:
                sums_sel[k] += m[k]

    averages = {"all_test_cases": {k: v / len(gold) for k, v in sums_all.items()}}
    if selected is not None:
        averages["selected_test_cases"] = {k: v / len(selected) for k, v in sums_sel.items()}
    return {
        "rows": rows,
        "averages": averages,
        "averages_2dp": {
            t: {k: f"{v:.2f}" for k, v in a.items()} for t, a in averages.items()
        },
        "counts": {
            "gt_sentences": len(gold),
            "evaluated_sentences": len(rows),
            "missing_responses": len(gold) - len(rows),
            "ignored_response_ids": len(set(responses) - set(gold)),
            "selected_ids": None if selected is None else len(selected),
        },
    }


# ------------------------------------------------------------------------ per run


def _t2kg_find_response(responses_dir: Path, key: str) -> Path:
    """The one ``*.jsonl`` in responses_dir named ``<key>_...`` or ``ont_<key>_...``."""
    hits = sorted(
        p
        for p in responses_dir.glob("*.jsonl")
        if p.name.startswith(key + "_") or p.name.startswith("ont_" + key + "_")
    )
    if not hits:
        raise FileNotFoundError(f"no response file for ontology {key} in {responses_dir}")
    if len(hits) > 1:
        raise ValueError(f"several response files for ontology {key}: {[p.name for p in hits]}")
    return hits[0]


def _t2kg_key_order(key: str) -> tuple[int, str]:
    num, _, name = key.partition("_")
    return (int(num), name)


def _t2kg_mean(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in T2KG_METRIC_KEYS}


def t2kg_evaluate_run(
    ground_truth_dir: str | os.PathLike,
    ontologies_dir: str | os.PathLike,
    responses_dir: str | os.PathLike,
    onto_list: Sequence[str] | None = None,
    selected_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Evaluate a whole Text2KGBench run (every ontology of one dataset and one model).

    Files are matched by the ontology key ``<k>_<name>``: ``ground_truth_dir/
    ont_<key>_ground_truth.jsonl`` (defines the set of ontologies), ``ontologies_dir/
    <key>_ontology.json``, and the single ``responses_dir/*.jsonl`` whose name starts with
    ``<key>_`` or ``ont_<key>_`` (covers all of the benchmark's naming schemes). With
    ``selected_dir``, ``selected_ont_<key>.txt`` there (if present) gives the selected ids.

    Global rows (all test cases only, from unrounded per-ontology averages):
        * ``global_as_script``: unweighted mean over the entries of ``onto_list``, duplicates
          counted as often as they appear, as run_eval.py's global row does.
        * ``global_unique``: unweighted mean with each evaluated ontology once.
    ``onto_list`` defaults (None) to the shipped config list of the dataset when the ground
    truth holds exactly the 19 dbpedia_webnlg ontologies (``T2KG_DBPEDIA_WEBNLG_ONTO_LIST``,
    20 entries, ``1_university`` twice, reproducing the published global row); otherwise to
    each ontology once in numeric order (then both global rows coincide). Pass it explicitly
    to reproduce another config.

    Returns ``{"per_ontology": {key: t2kg_evaluate_ontology result}, "global_as_script":
    {metric: float}, "global_unique": {...}, "global_as_script_2dp", "global_unique_2dp",
    "onto_list": [keys used for global_as_script]}``.

    Raises FileNotFoundError (no ground truth, missing ontology or response file),
    ValueError (ambiguous response files, empty onto_list) and KeyError (an onto_list entry
    that is not an evaluated ontology).
    """
    gt_dir, onto_dir, resp_dir = Path(ground_truth_dir), Path(ontologies_dir), Path(responses_dir)
    keys = sorted(
        (m.group(1) for p in gt_dir.iterdir() if (m := _T2KG_GT_FILE.match(p.name))),
        key=_t2kg_key_order,
    )
    if not keys:
        raise FileNotFoundError(f"no ont_<k>_<name>_ground_truth.jsonl in {gt_dir}")
    per_ontology = {}
    for key in keys:
        onto_path = onto_dir / f"{key}_ontology.json"
        if not onto_path.is_file():
            raise FileNotFoundError(f"missing ontology file {onto_path}")
        selected = None
        if selected_dir is not None:
            sel_path = Path(selected_dir) / f"selected_ont_{key}.txt"
            selected = sel_path if sel_path.is_file() else None
        per_ontology[key] = t2kg_evaluate_ontology(
            gt_dir / f"ont_{key}_ground_truth.jsonl",
            _t2kg_find_response(resp_dir, key),
            onto_path,
            selected,
        )
    if onto_list is None:
        if set(keys) == set(T2KG_DBPEDIA_WEBNLG_ONTO_LIST) and len(keys) == 19:
            onto_list = list(T2KG_DBPEDIA_WEBNLG_ONTO_LIST)
        else:
            onto_list = list(keys)
    onto_list = list(onto_list)
    if not onto_list:
        raise ValueError("onto_list is empty")
    for key in onto_list:
        if key not in per_ontology:
            raise KeyError(f"onto_list entry {key!r} is not an evaluated ontology")
    as_script = _t2kg_mean([per_ontology[k]["averages"]["all_test_cases"] for k in onto_list])
    unique = _t2kg_mean([per_ontology[k]["averages"]["all_test_cases"] for k in keys])
    return {
        "per_ontology": per_ontology,
        "global_as_script": as_script,
        "global_unique": unique,
        "global_as_script_2dp": {k: f"{v:.2f}" for k, v in as_script.items()},
        "global_unique_2dp": {k: f"{v:.2f}" for k, v in unique.items()},
        "onto_list": onto_list,
    }
