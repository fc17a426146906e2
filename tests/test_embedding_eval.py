"""Whole-run tests of the embedding path (issue: embedding matching for real).

A real model (all-MiniLM-L6-v2, int8 ONNX assembled from PyPI wheels by the ``minilm_dir``
fixture in conftest.py) is loaded through the same ``--embedding-model DIR`` path a user
would use. The network-blocked tests prove the fallback is fast and visible.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import evaluate as ev

ROOT = Path(__file__).resolve().parents[1]
PARITY = ROOT.parent / "shared" / "data" / "parity-sample"


def _parity_combined() -> Path:
    path = PARITY / "combined.jsonl"
    if not path.is_file():
        pytest.skip(f"shared parity sample absent ({path})")
    return path


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = ev.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def cache_home(tmp_path, monkeypatch) -> Path:
    """A private user cache dir, so the embedding cache starts cold."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


def test_parity_sample_with_real_embeddings(minilm_dir, cache_home, tmp_path, capsys, monkeypatch):
    combined = _parity_combined()
    lexical_report = tmp_path / "lexical.json"
    code, _, _ = _run(["--pred", str(combined), "--no-embeddings", "--quiet", "--report", str(lexical_report)], capsys)
    assert code == 0
    lexical = json.loads(lexical_report.read_text())

    # Count the model calls of the warm rerun through the cache's own counters.
    seen_embedders = []
    real_load = ev.load_embedder

    def spy(*args, **kwargs):
        embedder = real_load(*args, **kwargs)
        seen_embedders.append(embedder)
        return embedder

    monkeypatch.setattr(ev, "load_embedder", spy)
    cold_report, warm_report = tmp_path / "cold.json", tmp_path / "warm.json"
    args = ["--pred", str(combined), "--embedding-model", str(minilm_dir), "--require-embeddings", "--quiet"]
    assert _run(args + ["--report", str(cold_report)], capsys)[0] == 0
    assert _run(args + ["--report", str(warm_report)], capsys)[0] == 0
    cold = json.loads(cold_report.read_text())

    # The report names the backend and the model (and its file hash).
    assert cold["summary"]["embedding_backend"] == "fastembed"
    assert cold["summary"]["embedding_model"] == str(minilm_dir)
    assert cold["summary"]["embedding_model_id"].startswith(minilm_dir.name + "@")
    assert cold["summary"]["embedding_fallback_reason"] is None
    # Embeddings accept paraphrases the lexical score rejects: entity F1 can only go up
    # on this sample (lexical: 616 entity TPs, micro entity F1 0.39896...).
    assert lexical["summary"]["totals"]["entity_true_positives"] == 616
    assert cold["summary"]["micro"]["entity_f1"] >= lexical["summary"]["micro"]["entity_f1"]
    assert cold["summary"]["totals"]["entity_true_positives"] > 616
    # Warm rerun: byte-identical report, and not a single string embedded.
    assert warm_report.read_bytes() == cold_report.read_bytes()
    cold_stats, warm_stats = seen_embedders[0].stats, seen_embedders[1].stats
    assert cold_stats.embedded == cold_stats.cache_misses > 1000
    assert warm_stats.embedded == 0
    assert warm_stats.cache_misses == 0
    assert warm_stats.cache_hits == cold_stats.cache_misses


def test_no_embedding_cache_gives_the_same_numbers(minilm_dir, cache_home, tmp_path, capsys):
    combined = _parity_combined()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    args = ["--pred", str(combined), "--embedding-model", str(minilm_dir), "--quiet", "--limit", "40"]
    assert _run(args + ["--report", str(a)], capsys)[0] == 0
    assert _run(args + ["--no-embedding-cache", "--report", str(b)], capsys)[0] == 0
    assert a.read_bytes() == b.read_bytes()


def test_missing_model_falls_back_fast_and_visibly(tmp_path, capsys, monkeypatch, no_network, cache_home):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(tmp_path / "empty-model-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    report = tmp_path / "r.json"
    t0 = time.perf_counter()
    code, out, err = _run(["--pred", str(ROOT / "predictions" / "finetuned.jsonl"),
                           "--gold", str(ROOT / "gold" / "gold.jsonl"),
                           "--model-cache", str(tmp_path / "empty-model-cache"),
                           "--report", str(report)], capsys)
    elapsed = time.perf_counter() - t0
    assert code == 0
    # Generous bound on the whole run (model loading must not retry for 39-72 s);
    # the limit is 5 s of model-loading time.
    assert elapsed < 30
    summary = json.loads(report.read_text())["summary"]
    assert summary["embedding_backend"] == "lexical"
    assert "BAAI/bge-small-en-v1.5" in summary["embedding_fallback_reason"]
    assert "FALLBACK to lexical similarity" in out
    assert "--download-model BAAI/bge-small-en-v1.5" in err
    # One line on stderr says why (the fastembed/sentence-transformers reasons inside).
    assert sum("embeddings unavailable" in line for line in err.splitlines()) == 1


def test_require_embeddings_exits_2_with_the_fetch_command(tmp_path, capsys, monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(tmp_path / "empty-model-cache"))
    report = tmp_path / "r.json"
    code, _, err = _run(["--pred", str(ROOT / "predictions" / "finetuned.jsonl"),
                         "--gold", str(ROOT / "gold" / "gold.jsonl"), "--require-embeddings",
                         "--model-cache", str(tmp_path / "empty-model-cache"),
                         "--report", str(report)], capsys)
    assert code == 2
    assert "uv run evaluate.py --download-model" in err
    assert "BAAI/bge-small-en-v1.5" in err
    assert not report.exists()
