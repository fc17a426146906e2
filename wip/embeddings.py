# ======================================================================================
# Embedding similarity backends (fastembed -> sentence-transformers), offline-only,
# with an on-disk embedding cache.
# ======================================================================================
"""Embedding similarity backends for the evaluator.

Pipeline position: exact match -> embeddings (this section) -> lexical fallback (lead).

* ``load_embedder(model, ...)`` loads a model OFFLINE ONLY: fastembed first (a fastembed
  model name resolved from the local model cache, or a local directory holding an ONNX model
  plus tokenizer files), then sentence-transformers if installed (optional extra ``st``).
  A missing model fails in about a second (the fastembed import; the lookup itself takes
  under a millisecond) with :class:`EmbeddingUnavailable`, whose one-line
  message names the model and the one-time fetch command.
* ``download_embedding_model(name, model_cache)`` is the only code path that downloads.
* ``Embedder.embed(texts)`` embeds every unique string once (memory memo, then the sqlite
  cache, then the model in length-sorted batches) and returns L2-normalised float32 rows.
* ``cosine_similarity_matrix(a, b)`` is the pure numpy similarity used on those rows.

Measured on the dev box (2 cores, fastembed 0.9.1, onnxruntime 1.32): with
``local_files_only=True`` a missing ``BAAI/bge-small-en-v1.5`` fails in 0.5 ms (plus ~1.1 s
to import fastembed); without it fastembed retries 3 times with 3 s + 9 s + 27 s sleeps
(39.0 s measured with DNS failing; longer or a hang when connections time out).
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

EMB_DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"
#: The one-time command (run while online) that fetches a model; completed by the model name.
EMB_FETCH_COMMAND = "uv run evaluate.py --download-model"
EMB_APP_NAME = "kg-triplet-eval"
#: Most texts per model call. Inputs are sorted by length first (1.55x: 455 -> 705 texts/s,
#: best of 3, benchmarks/bench_embeddings.py); batch 64, 128 and 256 were within the noise of a
#: shared 2-core box (705/679/600 in one run, 487/451/603 in another), 128 is the middle.
EMB_BATCH_SIZE = 128
#: A batch also holds at most this many characters counted as (texts x longest text), which
#: bounds the activations (attention is batch x heads x tokens^2) when long texts come along:
#: titles up to 128 chars get full batches, 500-char descriptions batches of 32.
EMB_BATCH_CHAR_BUDGET = 16_384
#: Default cap on cached vectors (all models together). Measured 2.1 kB per 384-d row incl.
#: the text index (106 MB for 50k rows), so ~210 MB at the cap for bge-small / MiniLM;
#: eviction is least-recently-used.
EMB_CACHE_MAX_ENTRIES = 100_000
EMB_CACHE_FILENAME = "embeddings-v1.sqlite3"
#: New vectors are written to the cache every this many texts, so an interrupted run keeps them.
EMB_CACHE_WRITE_CHUNK = 1024
#: In-process memo bound (vectors); cleared when exceeded (~150 MB at 384-d float32).
EMB_MEMO_MAX_ENTRIES = 100_000
_EMB_CACHE_SCHEMA = "2"
# Files bigger than this are hashed by content too, but they are the only ones whose hashing
# costs anything (sha256 runs at ~1.7 GB/s here: 15 ms for a 23 MB int8 MiniLM, 80 ms for
# bge-small's 133 MB, ~0.8 s for a 1.3 GB model).
_EMB_HASH_CHUNK = 1 << 20
# Files in a model directory that do not influence the vectors.
_EMB_FINGERPRINT_SKIP = {"files_metadata.json", "README.md", ".gitattributes"}


class EmbeddingUnavailable(RuntimeError):
    """No embedding backend could load the requested model (offline).

    ``str(exc)`` is ONE line: which model, why each backend failed, and the exact command that
    fetches the model once while online. ``exc.reasons`` maps backend name -> reason.
    """

    def __init__(self, message: str, reasons: dict[str, str] | None = None):
        super().__init__(message)
        self.reasons = dict(reasons or {})


class _EmbBackendFailed(Exception):
    """Internal: one backend could not load the model; the message is the reason."""


@dataclasses.dataclass
class EmbeddingStats:
    """Counters of one :class:`Embedder` (cumulative over all ``embed`` calls).

    requested: texts passed to ``embed`` (duplicates included); unique: distinct texts among
    them per call, summed; memory_hits: unique texts already embedded earlier in this process;
    cache_hits / cache_misses: lookups in the on-disk cache (misses are then embedded);
    embedded: texts actually run through the model; embed_seconds: wall time of model calls;
    load_seconds: wall time of ``load_embedder``; cache_errors: cache operations that failed
    and were skipped (the run continues without the cache for those texts).
    """

    requested: int = 0
    unique: int = 0
    memory_hits: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    embedded: int = 0
    embed_seconds: float = 0.0
    load_seconds: float = 0.0
    cache_errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------
# Pure similarity helper
# --------------------------------------------------------------------------------------
def cosine_similarity_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of ``a`` with every row of ``b``, negatives clamped to 0.

    Args:
        a: array of shape (n, d); b: array of shape (m, d). Any float dtype; rows need not be
            normalised (they are re-normalised here; an all-zero row has similarity 0 with
            everything).
    Returns:
        float32 array of shape (n, m) with values in [0, 1]:
        ``S[i, j] = max(0, min(1, <a_i, b_j> / (|a_i| |b_j|)))``.
        Clamping negatives to 0 follows the usual practice for similarity-based soft matching
        (e.g. BERTScore-style greedy matching) where an anti-correlated pair is simply "no match".
    Raises:
        ValueError: if the inputs are not 2-D or their dimensions differ.
    """
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"expected 2-D arrays, got shapes {a.shape} and {b.shape}")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"dimension mismatch: {a.shape[1]} vs {b.shape[1]}")
    if a.shape[0] == 0 or b.shape[0] == 0:
        return np.zeros((a.shape[0], b.shape[0]), dtype=np.float32)
    a = _emb_l2_normalise(a)
    b = _emb_l2_normalise(b)
    return np.clip(a @ b.T, 0.0, 1.0).astype(np.float32, copy=False)


def _emb_l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` (float32, (n, d)) divided by their L2 norm; all-zero rows stay zero."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms > 0.0, norms, 1.0)).astype(np.float32, copy=False)


# --------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------
def default_embedding_cache_dir() -> Path:
    """Directory of the embedding cache: the platform user cache dir (platformdirs), e.g.
    ``~/.cache/kg-triplet-eval`` on Linux. Not created here."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(EMB_APP_NAME, appauthor=False))


def emb_download_dir(model_cache: str | os.PathLike | None = None) -> Path:
    """Where ``download_embedding_model`` stores models: ``model_cache`` if given, else
    ``$FASTEMBED_CACHE_PATH``, else ``<user cache dir>/kg-triplet-eval/models`` (fastembed's own
    default, ``$TMPDIR/fastembed_cache``, is wiped on reboot, so it is not used for downloads)."""
    if model_cache:
        return Path(model_cache).expanduser()
    env = os.environ.get("FASTEMBED_CACHE_PATH")
    if env:
        return Path(env).expanduser()
    return default_embedding_cache_dir() / "models"


def emb_model_cache_candidates(model_cache: str | os.PathLike | None = None) -> list[Path]:
    """Directories searched (in order) for a named model at load time.

    An explicit ``model_cache`` is the only candidate. Otherwise: ``$FASTEMBED_CACHE_PATH``,
    the download default (``<user cache>/kg-triplet-eval/models``), the Hugging Face hub cache
    (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``; fastembed
    stores models in the same layout) and fastembed's default ``$TMPDIR/fastembed_cache``.
    Only existing directories are returned, without duplicates.
    """
    if model_cache:
        return [Path(model_cache).expanduser()]
    cands: list[Path] = []
    if os.environ.get("FASTEMBED_CACHE_PATH"):
        cands.append(Path(os.environ["FASTEMBED_CACHE_PATH"]).expanduser())
    cands.append(default_embedding_cache_dir() / "models")
    if os.environ.get("HF_HUB_CACHE"):
        cands.append(Path(os.environ["HF_HUB_CACHE"]).expanduser())
    elif os.environ.get("HF_HOME"):
        cands.append(Path(os.environ["HF_HOME"]).expanduser() / "hub")
    else:
        cands.append(Path.home() / ".cache" / "huggingface" / "hub")
    cands.append(Path(tempfile.gettempdir()) / "fastembed_cache")
    out: list[Path] = []
    for c in cands:
        if c.is_dir() and c not in out:
            out.append(c)
    return out


def emb_fetch_command(model: str, model_cache: str | os.PathLike | None = None) -> str:
    """The exact one-time command that downloads ``model`` (into ``model_cache`` if given)."""
    cmd = f"{EMB_FETCH_COMMAND} {model}"
    if model_cache:
        cmd += f" --model-cache {os.fspath(model_cache)}"
    return cmd


# --------------------------------------------------------------------------------------
# Offline guard
# --------------------------------------------------------------------------------------
_EMB_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


@contextlib.contextmanager
def _emb_offline() -> Iterator[None]:
    """Force Hugging Face libraries offline for the duration of a model LOAD, then restore.

    Sets the HF offline variables in ``os.environ`` (fastembed and transformers read them at
    call time) and, if huggingface_hub is already imported, its ``constants.HF_HUB_OFFLINE``
    (read once at import). Previous values are restored afterwards so that a later
    ``download_embedding_model`` in the same process can still go online. Not thread-safe
    (process-wide state), which is fine for the single-threaded CLI.
    """
    saved = {k: os.environ.get(k) for k in _EMB_OFFLINE_ENV}
    os.environ.update(_EMB_OFFLINE_ENV)
    hub_constants = sys.modules.get("huggingface_hub.constants")
    saved_const = getattr(hub_constants, "HF_HUB_OFFLINE", None) if hub_constants else None
    if hub_constants is not None:
        hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hub_constants = sys.modules.get("huggingface_hub.constants")
        if hub_constants is not None:
            hub_constants.HF_HUB_OFFLINE = bool(saved_const) if saved_const is not None else (
                (saved["HF_HUB_OFFLINE"] or "").strip().upper() in {"1", "TRUE", "YES", "ON"}
            )


@contextlib.contextmanager
def _emb_quiet_fastembed() -> Iterator[None]:
    """Silence fastembed's loguru error lines during an offline probe (we print ONE line)."""
    try:
        from loguru import logger
    except ImportError:  # pragma: no cover - loguru is a fastembed dependency
        yield
        return
    logger.disable("fastembed")
    try:
        yield
    finally:
        logger.enable("fastembed")


def _emb_import_fastembed() -> Any:
    """Import fastembed lazily. ``ORT_DISABLE_TELEMETRY=1`` must be set before onnxruntime is
    imported and cannot be undone afterwards, so it is set process-wide (setdefault: a user
    value wins)."""
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import fastembed  # noqa: F401  (heavy: ~1.1 s, imports onnxruntime)

    return fastembed


# --------------------------------------------------------------------------------------
# Model identity
# --------------------------------------------------------------------------------------
def _emb_file_digest(path: Path) -> str:
    """Content hash of one model file.

    Hugging Face cache snapshots are symlinks into a content-addressed ``blobs/`` directory
    whose names are the files' hashes (sha256 for LFS files), so for those the blob name is
    used and nothing is read. Other files are hashed in full with sha256 (~1.7 GB/s measured):
    content hashing, unlike size+mtime, survives copies and catches same-size edits, and it
    costs 15 ms for the 23 MB int8 MiniLM and ~80 ms for bge-small, paid once per load.
    """
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if target.parent.name == "blobs" and len(target.name) >= 40:
            return "blob:" + target.name
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_EMB_HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def emb_fingerprint_dir(model_dir: Path) -> str:
    """sha256 over (relative path, size, content digest) of every file in ``model_dir``
    (recursive, following symlinks; hidden files, README.md and fastembed's
    files_metadata.json skipped). Returns 64 hex chars. Raises OSError if unreadable."""
    model_dir = Path(model_dir)
    h = hashlib.sha256()
    for p in sorted(model_dir.rglob("*")):
        rel = p.relative_to(model_dir)
        if any(part.startswith(".") for part in rel.parts) or p.name in _EMB_FINGERPRINT_SKIP:
            continue
        if not p.is_file():
            continue
        h.update(rel.as_posix().encode() + b"\0")
        h.update(str(p.stat().st_size).encode() + b"\0")
        h.update(_emb_file_digest(p).encode() + b"\n")
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Backends (internal): each has .encode(list[str]) -> float32 (n, d)
# --------------------------------------------------------------------------------------
class _EmbFastembedBackend:
    name = "fastembed"

    def __init__(self, model: Any):
        self._model = model

    def encode(self, texts: list[str]) -> np.ndarray:
        # parallel= deliberately unused: no gain on 2 cores, and its worker pool can hang when
        # the caller has no `if __name__ == "__main__"` guard.
        return np.asarray(list(self._model.embed(texts, batch_size=max(1, len(texts)))),
                          dtype=np.float32)


class _EmbSentenceTransformersBackend:
    name = "sentence-transformers"

    def __init__(self, model: Any):
        self._model = model

    def encode(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(texts, batch_size=max(1, len(texts)), convert_to_numpy=True,
                                 normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


def _emb_local_dir_spec(model_dir: Path) -> dict[str, Any]:
    """Inspect a local model directory for fastembed: ONNX file, pooling, dim, max length.

    ONNX file: ``model.onnx``, else ``onnx/model.onnx``, else the first ``*.onnx`` found.
    Pooling: sentence-transformers layout (``modules.json`` -> Pooling module dir, else
    ``1_Pooling/config.json``): cls -> CLS, mean -> MEAN, lasttoken -> LAST_TOKEN; without a
    pooling config MEAN is assumed (what all-MiniLM / most sentence-transformers models use).
    Output is always L2-normalised. Raises _EmbBackendFailed with the reason.
    """
    onnx = None
    for cand in ("model.onnx", "onnx/model.onnx"):
        if (model_dir / cand).is_file():
            onnx = cand
            break
    if onnx is None:
        found = sorted(p for p in model_dir.rglob("*.onnx") if p.is_file())
        if not found:
            raise _EmbBackendFailed(f"no *.onnx file in {model_dir}")
        onnx = found[0].relative_to(model_dir).as_posix()
    for req in ("tokenizer.json", "tokenizer_config.json"):
        if not (model_dir / req).is_file():
            raise _EmbBackendFailed(f"{req} missing in {model_dir}")

    def _read_json(p: Path) -> dict[str, Any]:
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            return data if isinstance(data, (dict, list)) else {}
        except (OSError, ValueError):
            return {}

    pool_dir = model_dir / "1_Pooling"
    modules = _read_json(model_dir / "modules.json")
    if isinstance(modules, list):
        for mod in modules:
            if isinstance(mod, dict) and str(mod.get("type", "")).endswith("Pooling"):
                pool_dir = model_dir / str(mod.get("path", "1_Pooling"))
    pool_cfg = _read_json(pool_dir / "config.json")
    if not isinstance(pool_cfg, dict):
        pool_cfg = {}
    pooling = "MEAN"
    if pool_cfg.get("pooling_mode_cls_token"):
        pooling = "CLS"
    elif pool_cfg.get("pooling_mode_lasttoken"):
        pooling = "LAST_TOKEN"
    elif pool_cfg and not pool_cfg.get("pooling_mode_mean_tokens"):
        modes = [k for k, v in pool_cfg.items() if k.startswith("pooling_mode") and v]
        raise _EmbBackendFailed(f"pooling {modes} of {model_dir} is not supported by fastembed")
    config = _read_json(model_dir / "config.json")
    dim = pool_cfg.get("word_embedding_dimension") or (
        config.get("hidden_size") if isinstance(config, dict) else None) or 0
    st_cfg = _read_json(model_dir / "sentence_bert_config.json")
    max_len = st_cfg.get("max_seq_length") if isinstance(st_cfg, dict) else None
    return {"model_file": onnx, "pooling": pooling, "dim": int(dim),
            "max_seq_length": int(max_len) if isinstance(max_len, int) and max_len > 0 else None}


def _emb_load_fastembed(model: str, model_cache: str | os.PathLike | None) -> tuple[Any, str]:
    """Load ``model`` with fastembed, offline. Returns (backend, model_id).
    Raises _EmbBackendFailed(reason)."""
    try:
        _emb_import_fastembed()
        from fastembed import TextEmbedding
        from fastembed.common.model_description import ModelSource, PoolingType
    except ImportError as exc:
        raise _EmbBackendFailed(f"fastembed not importable ({exc})") from exc

    path = Path(model).expanduser()
    if path.is_dir():
        spec = _emb_local_dir_spec(path)
        fp = emb_fingerprint_dir(path)
        reg_name = f"{EMB_APP_NAME}/local-{fp[:16]}-{spec['pooling'].lower()}"
        known = {m["model"].lower() for m in TextEmbedding.list_supported_models()}
        if reg_name.lower() not in known:
            TextEmbedding.add_custom_model(
                model=reg_name, pooling=PoolingType[spec["pooling"]], normalization=True,
                sources=ModelSource(hf=reg_name), dim=spec["dim"], model_file=spec["model_file"],
                description=f"local directory {path}")
        try:
            with _emb_offline(), _emb_quiet_fastembed():
                te = TextEmbedding(reg_name, specific_model_path=str(path), local_files_only=True)
        except Exception as exc:  # onnxruntime / tokenizer errors vary by version
            raise _EmbBackendFailed(f"cannot load {path}: {type(exc).__name__}: {exc}") from exc
        if spec["max_seq_length"]:
            # fastembed truncates at tokenizer_config's model_max_length (512 for MiniLM);
            # sentence-transformers uses sentence_bert_config's max_seq_length (256): follow
            # the latter so that both backends see the same tokens.
            tok = getattr(getattr(te, "model", None), "tokenizer", None)
            if tok is not None and tok.truncation and tok.truncation["max_length"] > spec[
                    "max_seq_length"]:
                tok.enable_truncation(max_length=spec["max_seq_length"],
                                      direction=tok.truncation.get("direction", "right"))
        return _EmbFastembedBackend(te), f"{path.resolve().name}@{fp[:12]}"

    known = {m["model"].lower() for m in TextEmbedding.list_supported_models()}
    if model.lower() not in known:
        raise _EmbBackendFailed(
            "not a fastembed model name (see fastembed TextEmbedding.list_supported_models()) "
            "and not a local directory")
    cands = emb_model_cache_candidates(model_cache)
    if not cands:
        where = os.fspath(model_cache) if model_cache else "any model cache"
        raise _EmbBackendFailed(f"not downloaded ({where} does not exist)")
    errors = []
    for cache in cands:
        try:
            with _emb_offline(), _emb_quiet_fastembed():
                te = TextEmbedding(model, cache_dir=str(cache), local_files_only=True)
        except Exception as exc:
            if "from any source" not in str(exc):  # fastembed's plain "not in this cache"
                errors.append(f"{cache}: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        model_dir = getattr(getattr(te, "model", None), "_model_dir", None)
        fp = emb_fingerprint_dir(Path(model_dir)) if model_dir else "0" * 16
        return _EmbFastembedBackend(te), f"{model}@{fp[:12]}"
    raise _EmbBackendFailed(
        "not downloaded (searched " + ", ".join(str(c) for c in cands) + ")"
        + "".join(f"; {e}" for e in errors))


def _emb_load_sentence_transformers(model: str, model_cache: str | os.PathLike | None
                                    ) -> tuple[Any, str]:
    """Load ``model`` with sentence-transformers (optional extra), offline only
    (``local_files_only=True``). Returns (backend, model_id). Raises _EmbBackendFailed."""
    try:
        import importlib.util

        if importlib.util.find_spec("sentence_transformers") is None:
            raise ImportError("no module named sentence_transformers")
    except (ImportError, ValueError):
        raise _EmbBackendFailed("not installed (optional extra 'st')") from None
    try:
        with _emb_offline():
            from sentence_transformers import SentenceTransformer

            st = SentenceTransformer(model, cache_folder=os.fspath(model_cache) if model_cache
                                     else None, local_files_only=True)
    except Exception as exc:
        msg = str(exc).splitlines()[0] if str(exc) else ""
        raise _EmbBackendFailed(f"cannot load offline ({type(exc).__name__}: {msg})") from exc
    path = Path(model).expanduser()
    fp = ""
    if path.is_dir():
        fp = emb_fingerprint_dir(path)
    else:
        with contextlib.suppress(Exception), _emb_offline():
            from huggingface_hub import snapshot_download

            repo = model if "/" in model else f"sentence-transformers/{model}"
            snap = snapshot_download(repo, local_files_only=True,
                                     cache_dir=os.fspath(model_cache) if model_cache else None)
            fp = emb_fingerprint_dir(Path(snap))
    name = path.resolve().name if path.is_dir() else model
    return _EmbSentenceTransformersBackend(st), f"{name}@{fp[:12] or 'unhashed'}"


# --------------------------------------------------------------------------------------
# On-disk cache
# --------------------------------------------------------------------------------------
class EmbeddingCache:
    """sqlite3 (WAL) store of embedding vectors keyed by (model key, exact text).

    Safety: WAL + ``busy_timeout`` lets several processes read and write at once (each write is
    one short transaction); the file is checked with ``PRAGMA quick_check`` and a schema-version
    row on open, and an unreadable / corrupt / foreign file is deleted and rebuilt (under a
    file lock, one stderr line). Rows are never trusted: a row is used only if its text equals
    the query exactly, its dimension equals the model's, its blob has 4*dim bytes and the
    vector is finite with unit norm (+-1e-3); anything else counts as a miss and is rewritten.
    A failing cache operation is counted and skipped, never fatal.

    Bound: at most ``max_entries`` rows (all models); when an insert exceeds it the least
    recently used rows (``last_used`` is refreshed on every hit) are deleted down to 90 % of the
    cap, so eviction runs rarely.
    """

    def __init__(self, path: str | os.PathLike, *, max_entries: int = EMB_CACHE_MAX_ENTRIES,
                 timeout_s: float = 30.0):
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.path = Path(path)
        self.max_entries = int(max_entries)
        self.timeout_s = float(timeout_s)
        self.rebuilt = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = self._open_checked()

    # -- opening / rebuilding --------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        # A rowid table (not WITHOUT ROWID): a 1.5 kB row then fits in one 4 kB leaf page
        # instead of spilling into overflow pages (measured: 236 MB -> ~100 MB for 50k rows).
        conn.execute(
            "CREATE TABLE IF NOT EXISTS emb(id INTEGER PRIMARY KEY, model TEXT NOT NULL, "
            "text TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL, "
            "last_used INTEGER NOT NULL, UNIQUE(model, text))")
        conn.execute("CREATE INDEX IF NOT EXISTS emb_last_used ON emb(last_used)")
        conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('schema', ?)",
                     (_EMB_CACHE_SCHEMA,))
        row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None or row[0] != _EMB_CACHE_SCHEMA:
            conn.close()
            raise sqlite3.DatabaseError(f"schema {row[0] if row else None!r} is not "
                                        f"{_EMB_CACHE_SCHEMA!r}")
        check = conn.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            conn.close()
            raise sqlite3.DatabaseError(f"quick_check: {check[0] if check else 'no result'}")
        return conn

    def _open_checked(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:  # includes "file is not a database", malformed
            reason = str(exc)
        import filelock

        with filelock.FileLock(str(self.path) + ".lock", timeout=self.timeout_s):
            try:  # another process may have rebuilt it while we waited for the lock
                return self._connect()
            except sqlite3.DatabaseError:
                pass
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(str(self.path) + suffix)
            reason = " ".join(reason.split())  # quick_check reports span several lines
            print(f"{EMB_APP_NAME}: embedding cache {self.path} was unreadable ({reason}); "
                  "rebuilt it empty", file=sys.stderr)
            self.rebuilt = True
            return self._connect()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    # -- access ----------------------------------------------------------------------
    def get_many(self, model_key: str, texts: Sequence[str], dim: int) -> dict[str, np.ndarray]:
        """Valid cached vectors (float32, shape (dim,)) for those of ``texts`` that are cached
        under ``model_key``; refreshes their ``last_used``. Raises sqlite3.Error."""
        found: dict[str, np.ndarray] = {}
        texts = list(dict.fromkeys(texts))
        for start in range(0, len(texts), 500):
            chunk = texts[start:start + 500]
            q = ("SELECT text, dim, vec FROM emb WHERE model=? AND text IN (" +
                 ",".join("?" * len(chunk)) + ")")
            for text, row_dim, blob in self._conn.execute(q, (model_key, *chunk)):
                if row_dim != dim or not isinstance(blob, bytes) or len(blob) != 4 * dim:
                    continue
                vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
                if not np.all(np.isfinite(vec)) or abs(float(vec @ vec) - 1.0) > 2e-3:
                    continue
                found[text] = vec
        if found:
            now = time.time_ns()
            with self._transaction():
                self._conn.executemany("UPDATE emb SET last_used=? WHERE model=? AND text=?",
                                       [(now, model_key, t) for t in found])
        return found

    def put_many(self, model_key: str, items: dict[str, np.ndarray]) -> None:
        """Store float32 vectors (each shape (d,)) under ``model_key``; evicts LRU rows beyond
        ``max_entries``. Raises sqlite3.Error."""
        if not items:
            return
        now = time.time_ns()
        rows = [(model_key, t, int(v.shape[0]), np.asarray(v, dtype="<f4").tobytes(), now)
                for t, v in items.items()]
        with self._transaction():
            self._conn.executemany(
                "INSERT OR REPLACE INTO emb(model, text, dim, vec, last_used) "
                "VALUES(?,?,?,?,?)", rows)
            n = self._conn.execute("SELECT COUNT(*) FROM emb").fetchone()[0]
            if n > self.max_entries:
                # evict down to 90 % of the cap (hysteresis: not on every insert)
                target = max(1, (self.max_entries * 9) // 10)
                self._conn.execute(
                    "DELETE FROM emb WHERE id IN (SELECT id FROM emb "
                    "ORDER BY last_used, id LIMIT ?)", (n - target,))

    def count(self) -> int:
        """Number of cached rows (all models)."""
        return int(self._conn.execute("SELECT COUNT(*) FROM emb").fetchone()[0])

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")


# --------------------------------------------------------------------------------------
# Embedder
# --------------------------------------------------------------------------------------
class Embedder:
    """A loaded embedding model plus memo + on-disk cache. Build it with :func:`load_embedder`.

    Attributes: ``backend`` ("fastembed" or "sentence-transformers"), ``model_name`` (as
    requested), ``model_id`` ("<name>@<12 hex of the model files' content hash>"), ``dim``,
    ``stats`` (:class:`EmbeddingStats`), ``cache`` (:class:`EmbeddingCache` or None).
    """

    def __init__(self, backend: Any, *, model_name: str, model_id: str,
                 cache: EmbeddingCache | None = None, progress: bool = False,
                 batch_size: int = EMB_BATCH_SIZE, char_budget: int = EMB_BATCH_CHAR_BUDGET):
        self._backend = backend
        self.backend: str = backend.name
        self.model_name = model_name
        self.model_id = model_id
        self.cache = cache
        self.progress = progress
        self.batch_size = max(1, int(batch_size))
        self.char_budget = max(1, int(char_budget))
        self.stats = EmbeddingStats()
        self._memo: dict[str, np.ndarray] = {}
        self._cache_key = f"{self.backend}|{model_id}"
        probe = backend.encode(["dimension probe"])  # also proves the model runs
        if probe.ndim != 2 or probe.shape[0] != 1 or probe.shape[1] < 1:
            raise _EmbBackendFailed(f"model returned shape {probe.shape} for one text")
        self.dim = int(probe.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (any sequence of str; duplicates allowed).

        Returns float32 array (len(texts), dim); every row L2-normalised (norm 1 +- 1e-6;
        normalised again here although both backends already normalise). Each distinct string
        is embedded at most once per process: memo, then the disk cache, then the model in
        length-sorted batches (less padding; 1.55x faster measured) of at most
        ``batch_size`` texts and ``char_budget`` characters (see :meth:`_batches`).
        Raises TypeError for non-str items, RuntimeError if the model output is not finite.
        """
        texts = list(texts)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"embed() expects str items, got {type(t).__name__}")
        self.stats.requested += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        unique = list(dict.fromkeys(texts))
        self.stats.unique += len(unique)
        vecs: dict[str, np.ndarray] = {}
        todo = []
        for t in unique:
            v = self._memo.get(t)
            if v is None:
                todo.append(t)
            else:
                vecs[t] = v
        self.stats.memory_hits += len(unique) - len(todo)
        if todo and self.cache is not None:
            try:
                got = self.cache.get_many(self._cache_key, todo, self.dim)
            except sqlite3.Error as exc:
                got = {}
                self._cache_failed("read", exc)
            self.stats.cache_hits += len(got)
            self.stats.cache_misses += len(todo) - len(got)
            vecs.update(got)
            todo = [t for t in todo if t not in got]
        if todo:
            order = sorted(todo, key=len)  # similar lengths share a batch: less padding
            from tqdm import tqdm

            show = bool(self.progress) and hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
            with tqdm(total=len(order), desc=f"embedding ({self.backend})", unit="text",
                      file=sys.stderr, disable=not show, leave=False) as bar:
                for start in range(0, len(order), EMB_CACHE_WRITE_CHUNK):
                    new = self._encode(order[start:start + EMB_CACHE_WRITE_CHUNK], bar)
                    vecs.update(new)
                    if self.cache is not None:
                        try:
                            self.cache.put_many(self._cache_key, new)
                        except sqlite3.Error as exc:
                            self._cache_failed("write", exc)
        if len(self._memo) + len(vecs) > EMB_MEMO_MAX_ENTRIES:
            self._memo.clear()
        self._memo.update(vecs)
        for i, t in enumerate(texts):
            out[i] = vecs[t]
        return out

    def _batches(self, order: list[str]) -> Iterator[list[str]]:
        """Split length-sorted ``order`` greedily into batches of at most ``batch_size`` texts
        and at most ``char_budget`` characters counted as len(batch) * len(longest text);
        a single text longer than the budget forms its own batch."""
        start, n = 0, len(order)
        while start < n:
            end = start + 1
            while (end < n and end - start < self.batch_size
                   and (end - start + 1) * len(order[end]) <= self.char_budget):
                end += 1
            yield order[start:end]
            start = end

    def _encode(self, order: list[str], bar: Any) -> dict[str, np.ndarray]:
        """Run ``order`` (already length-sorted) through the model in batches."""
        result: dict[str, np.ndarray] = {}
        t0 = time.perf_counter()
        for batch in self._batches(order):
            vecs = self._backend.encode(batch)
            if vecs.shape != (len(batch), self.dim):
                raise RuntimeError(f"{self.backend} returned shape {vecs.shape} for "
                                   f"{len(batch)} texts, expected (n, {self.dim})")
            if not np.all(np.isfinite(vecs)):
                raise RuntimeError(f"{self.backend} returned non-finite embeddings")
            result.update(zip(batch, _emb_l2_normalise(vecs)))
            bar.update(len(batch))
        self.stats.embed_seconds += time.perf_counter() - t0
        self.stats.embedded += len(order)
        return result

    def _cache_failed(self, what: str, exc: Exception) -> None:
        self.stats.cache_errors += 1
        if self.stats.cache_errors == 1:
            print(f"{EMB_APP_NAME}: embedding cache {what} failed ({exc}); continuing without "
                  "it for these texts", file=sys.stderr)

    def close(self) -> None:
        """Close the cache connection (the model stays usable without cache)."""
        if self.cache is not None:
            self.cache.close()
            self.cache = None

    def __enter__(self) -> "Embedder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def load_embedder(model: str = EMB_DEFAULT_MODEL, *,
                  model_cache: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None,
                  cache_max_entries: int = EMB_CACHE_MAX_ENTRIES, progress: bool = True,
                  batch_size: int = EMB_BATCH_SIZE) -> Embedder:
    """Load an embedding model offline: fastembed first, then sentence-transformers.

    Args:
        model: a fastembed model name (default ``BAAI/bge-small-en-v1.5``), a local directory
            holding an ONNX model + tokenizer files (sentence-transformers layout understood for
            pooling), or (sentence-transformers backend) a cached model name / local directory.
        model_cache: where named models live (``--model-cache``); None searches
            :func:`emb_model_cache_candidates` (FASTEMBED_CACHE_PATH, our default, HF cache...).
        cache_dir: directory of the embedding cache file, normally
            :func:`default_embedding_cache_dir`; None disables the on-disk cache
            (``--no-embedding-cache``; the in-process memo still embeds each string once).
        cache_max_entries: LRU bound of the cache (rows, all models together).
        progress: tqdm bar on stderr while embedding (only shown when stderr is a terminal).
        batch_size: texts per model call (sorted by length first).
    Returns:
        :class:`Embedder`; ``stats.load_seconds`` holds the load time.
    Raises:
        EmbeddingUnavailable: no backend could load the model offline; one-line message with
            both reasons and the fetch command (the caller falls back to lexical similarity, or
            exits 2 under ``--require-embeddings``). Never downloads, never retries.
    If fastembed fails but sentence-transformers loads the model, ONE line goes to stderr.
    """
    t0 = time.perf_counter()
    reasons: dict[str, str] = {}
    backend = None
    model_id = ""
    for name, loader in (("fastembed", _emb_load_fastembed),
                         ("sentence-transformers", _emb_load_sentence_transformers)):
        try:
            backend, model_id = loader(model, model_cache)
            break
        except _EmbBackendFailed as exc:
            reasons[name] = str(exc)
    if backend is None:
        why = "; ".join(f"{k}: {v}" for k, v in reasons.items())
        if Path(model).expanduser().exists() or model.startswith((".", "/", "~", "\\")):
            hint = ("A model directory must hold an ONNX model (model.onnx or onnx/model.onnx), "
                    "tokenizer.json and tokenizer_config.json")
        else:
            hint = f"Fetch it once while online: {emb_fetch_command(model, model_cache)}"
        raise EmbeddingUnavailable(
            f"embedding model {model!r} is not available offline ({why}). {hint}", reasons)
    if reasons:
        print(f"{EMB_APP_NAME}: fastembed cannot load {model!r} ({reasons['fastembed']}); "
              f"using sentence-transformers", file=sys.stderr)
    cache = None
    if cache_dir is not None:
        cdir = Path(cache_dir).expanduser()
        try:
            cache = EmbeddingCache(cdir / EMB_CACHE_FILENAME, max_entries=cache_max_entries)
        except (OSError, sqlite3.Error, TimeoutError) as exc:
            print(f"{EMB_APP_NAME}: embedding cache in {cdir} unusable ({exc}); running "
                  "without it", file=sys.stderr)
    try:
        emb = Embedder(backend, model_name=model, model_id=model_id, cache=cache,
                       progress=progress, batch_size=batch_size)
    except _EmbBackendFailed as exc:
        if cache is not None:
            cache.close()
        raise EmbeddingUnavailable(
            f"embedding model {model!r} loaded but does not work ({exc})",
            {backend.name: str(exc)}) from None
    emb.stats.load_seconds = time.perf_counter() - t0
    return emb


def download_embedding_model(name: str = EMB_DEFAULT_MODEL,
                             model_cache: str | os.PathLike | None = None) -> Path:
    """Download ``name`` once (the ONLY code path that touches the network).

    Args:
        name: a fastembed model name; if fastembed does not know it and sentence-transformers
            is installed, it is fetched as a sentence-transformers model instead.
        model_cache: target directory; default :func:`emb_download_dir` (``$FASTEMBED_CACHE_PATH``
            or ``<user cache>/kg-triplet-eval/models``). Pass the same value as ``--model-cache``
            at evaluation time (or none both times).
    Returns:
        Path of the downloaded model directory.
    Raises:
        EmbeddingUnavailable: the download failed (message has the reason), or the name is
            unknown to every installed backend, or HF_HUB_OFFLINE is set.
    """
    target = emb_download_dir(model_cache)
    if (os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "TRUE", "YES", "ON"}):
        raise EmbeddingUnavailable(f"cannot download {name!r}: HF_HUB_OFFLINE is set; unset it "
                                   "and run the command again while online")
    target.mkdir(parents=True, exist_ok=True)
    _emb_import_fastembed()
    from fastembed import TextEmbedding

    known = {m["model"].lower() for m in TextEmbedding.list_supported_models()}
    if name.lower() in known:
        try:
            te = TextEmbedding(name, cache_dir=str(target), lazy_load=True)
        except Exception as exc:
            raise EmbeddingUnavailable(f"download of {name!r} into {target} failed: {exc}") from exc
        model_dir = getattr(getattr(te, "model", None), "_model_dir", None)
        return Path(model_dir) if model_dir else target
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise EmbeddingUnavailable(
            f"{name!r} is not a fastembed model name and sentence-transformers (optional extra "
            "'st') is not installed") from None
    try:
        SentenceTransformer(name, cache_folder=str(target))
    except Exception as exc:
        raise EmbeddingUnavailable(f"download of {name!r} into {target} failed: {exc}") from exc
    return target
