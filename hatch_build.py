"""Build hook (hatchling) for editable installs: `uv sync`, `pip install -e .`.

A regular wheel ships evaluate.py as the module `kg_triplet_eval` (pyproject.toml,
force-include). An editable install instead ships a two-line `kg_triplet_eval.py` that runs the
clone's evaluate.py in its own namespace, so edits are live and nothing is added to sys.path
(hatchling's default .pth would put the repository root there, making `import evaluate` resolve
to our file and shadow Hugging Face's `evaluate`). Not part of the installed tool.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SHIM = '''"""kg-triplet-eval, editable install: runs {path} as this module (edits are live)."""
__file__ = {path!r}
with open(__file__, encoding="utf-8") as _source:
    exec(compile(_source.read(), __file__, "exec"))
'''


class EditableShimHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version != "editable":
            return
        self._tmp = tempfile.mkdtemp(prefix="kg-triplet-eval-build-")
        shim = Path(self._tmp) / "kg_triplet_eval.py"
        shim.write_text(SHIM.format(path=str(Path(self.root, "evaluate.py").resolve())), encoding="utf-8")
        build_data["force_include_editable"][str(shim)] = "kg_triplet_eval.py"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if version == "editable":
            shutil.rmtree(self._tmp, ignore_errors=True)
