"""Build hook (hatchling) for editable installs: `uv sync`, `pip install -e .`.

A regular wheel ships evaluate.py as the module `kg_triplet_eval` (pyproject.toml,
force-include). An editable install instead ships three small files that run the clone's
evaluate.py, live, with nothing added to sys.path (hatchling's default .pth would put the
repository root there, making `import evaluate` resolve to our file and shadow Hugging Face's
`evaluate`). Not part of the installed tool:

* ``kg_triplet_eval.py``: the module (the console script ``kg-triplet-eval`` imports it); it
  runs the clone's evaluate.py in its own namespace, from cached bytecode;
* ``_kg_triplet_eval_editable.py``: the cached bytecode (:data:`LAUNCHER`) and the fast start of
  ``python evaluate.py`` (what ``uv run evaluate.py`` runs);
* ``_kg_triplet_eval_editable.pth``: one line that arms that fast start when, and only when,
  the interpreter was started as ``python PATH ...`` with PATH this clone's evaluate.py.

Why: Python compiles a script run by path (675 KB here: about 0.17 s) on every run, before its
first statement, and never caches that bytecode; a module's bytecode is cached in __pycache__.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SHIM = '''"""kg-triplet-eval, editable install: runs {path} as this module (edits are live), from the
bytecode cached in its __pycache__ (_kg_triplet_eval_editable.code)."""
__file__ = {path!r}
exec(__import__("_kg_triplet_eval_editable").module_code(__name__, __file__))
'''

#: The .pth line (site runs a line that starts with "import"): a few comparisons in every
#: interpreter start of the environment; the launcher module is imported only for a start
#: ``python [no options] .../evaluate.py ...``.
PTH = ('import sys; exec("import _kg_triplet_eval_editable as m; m.arm()") '
       'if sys.argv[:1] == getattr(sys, "orig_argv", [None, None])[1:2] and sys.argv[0].endswith("evaluate.py") '
       'else None\n')

LAUNCHER = '''"""kg-triplet-eval, editable install: run the clone's evaluate.py from cached bytecode.

Written by the clone's hatch_build.py (see there). Python compiles a script run by path on
every run and never caches it; this module keeps the clone's evaluate.py compiled in its
__pycache__ as a checked-hash pyc (PEP 552: valid while the source bytes hash the same, so an
edit of any kind, even one within the same second, is seen) and gives

* :func:`code` to the module shim ``kg_triplet_eval`` (the console script ``kg-triplet-eval``);
* :func:`arm` to the .pth line: for ``python PATH ...`` with PATH this clone's evaluate.py,
  nothing else on the interpreter's command line and no PYTHONINSPECT / dev mode /
  KG_EVAL_PLAIN_START, it hooks the one moment between the interpreter's start-up (site,
  sys.path[0], ``__main__.__file__``: all done) and its compiling the script: CPython makes
  ``__main__.__loader__`` with ``SourceFileLoader("__main__", PATH)`` right before. There the
  cached code runs in ``__main__`` and the process ends the way the interpreter ends it
  (threads joined, atexit, streams flushed, the exit status of ``SystemExit``, a traceback
  and status 1, or death by SIGINT for an uncaught Ctrl-C). Anything unexpected before the
  file's first statement: the hook steps aside and the interpreter runs the script as always.

Ctrl-C, SIGTERM and SIGHUP while the launcher reads or compiles the program end the run as
the program's own first statements would (:func:`hold_signals`: ``interrupted: no report
written``, status 130; ``terminated: ...``, 143; ``hung up: ...``, 129; one ignored since the
start, as ``nohup`` ignores SIGHUP, stays ignored), so that only the interpreter's own
start-up lies before the program holds its signals.
"""
import sys

#: This clone's evaluate.py (resolved).
SOURCE = @SOURCE@

_ARMED = []


def _signal_before_main(signum, frame):
    """A signal while the program is being read or compiled (evaluate.py's handler of the same
    name, for the time before it runs): nothing is written yet; leave with its line and status."""
    import os
    import signal
    what = {signal.SIGINT: "interrupted", getattr(signal, "SIGHUP", None): "hung up"}.get(signum, "terminated")
    os.write(2, (what + ": no report written\\n").encode())
    os._exit(128 + signum)


def _stop_signals():
    """Ctrl-C, SIGTERM and SIGHUP (where the platform has it), as evaluate.py's _STOP_SIGNALS."""
    import signal
    return [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])


def hold_signals():
    """Hold Ctrl-C, SIGTERM and SIGHUP as the program does from its first statements
    (:func:`_signal_before_main`); returns the handlers they replace. The test hook of
    evaluate.py, ``KG_EVAL_TEST_SIGNAL_AT=launcher:SIGNAL``, then sends SIGNAL (before the
    program is read and compiled: deterministic, no timer)."""
    import os
    import signal
    previous = [(signum, signal.getsignal(signum)) for signum in _stop_signals()]
    for signum, handler in previous:
        if handler != signal.SIG_IGN:  # one ignored since the start (nohup) stays ignored
            signal.signal(signum, _signal_before_main)
    for spec in os.environ.get("KG_EVAL_TEST_SIGNAL_AT", "").split(","):
        phase, _, rest = spec.partition(":")
        if phase == "launcher" and rest:
            os.kill(os.getpid(), getattr(signal, "SIG" + rest.split(":")[0]))
    return previous


def _restore(previous):
    import signal
    for signum, handler in previous:
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def module_code(name, path):
    """The module shim's code (:func:`code` of ``path``); when the module is the program (the
    console script ``kg-triplet-eval`` imports it as ``kg_triplet_eval``, evaluate.py's
    ``_AS_PROGRAM``), its signals held first (:func:`hold_signals`); a library import keeps
    its handlers."""
    import os
    program = name == "kg_triplet_eval" and bool(sys.argv) and os.path.basename(sys.argv[0]) == "kg-triplet-eval"
    previous = hold_signals() if program else None
    try:
        return code(path, path)
    except BaseException:
        if previous is not None:
            _restore(previous)
        raise


def code(path, filename):
    """The code object of the Python file ``path``, its code objects named ``filename``, from the
    checked-hash pyc ``importlib.util.cache_from_source(path)`` when that pyc holds these source
    bytes; else compiled (as Python compiles a script: the interpreter's optimisation level,
    no inherited future flags) and cached there atomically unless ``sys.dont_write_bytecode``
    (or the folder cannot be written: then just compiled). Raises OSError (``path`` unreadable)
    and SyntaxError like ``compile``."""
    import _imp
    import importlib.util
    import marshal
    import os
    with open(path, "rb") as source:
        data = source.read()
    header = importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(data)
    try:
        pyc = importlib.util.cache_from_source(path)
    except NotImplementedError:  # no cache tag (sys.implementation.cache_tag is None)
        pyc = None
    if pyc is not None:
        try:
            with open(pyc, "rb") as cached:
                if cached.read(16) == header:
                    found = marshal.loads(cached.read())
                    _imp._fix_co_filename(found, filename)
                    return found
        except (OSError, EOFError, ValueError, TypeError):
            pass
    compiled = compile(data, filename, "exec", dont_inherit=True)
    if pyc is not None and not sys.dont_write_bytecode:
        tmp = "%s.%d.tmp" % (pyc, os.getpid())
        try:
            os.makedirs(os.path.dirname(pyc), exist_ok=True)
            with open(tmp, "wb") as out:
                out.write(header + marshal.dumps(compiled))
            os.replace(tmp, pyc)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return compiled


def arm():
    """Called by the .pth line (site, at start-up): hook the start of ``python SOURCE ...``
    (see the module docstring); does nothing for any other start, or twice."""
    import os
    try:
        if (_ARMED or sys.flags.inspect or sys.flags.dev_mode or os.environ.get("KG_EVAL_PLAIN_START")
                or os.path.realpath(sys.argv[0]) != SOURCE):
            return
        external = sys.modules["_frozen_importlib_external"]
        plain = external.SourceFileLoader
    except Exception:  # noqa: BLE001 - never in the way of an interpreter start
        return
    _ARMED.append(plain)

    class MainLoader(plain):
        """SourceFileLoader that, made for the first time, puts the original back and, when the
        interpreter makes it for the script ``SOURCE`` as ``__main__``, runs that script."""

        def __init__(self, fullname, path):
            super().__init__(fullname, path)
            if external.SourceFileLoader is MainLoader:
                external.SourceFileLoader = plain
                if fullname == "__main__" and isinstance(path, str):
                    _run_main(plain, path)

    external.SourceFileLoader = MainLoader


def _run_main(plain, path):
    """Run the script ``path`` (SOURCE, as the interpreter names it) in ``__main__`` from cached
    bytecode and end the process; returns (the interpreter then runs it itself) when anything
    fails before the script's first statement."""
    previous = None
    try:
        import os
        main = sys.modules["__main__"]
        if os.path.realpath(path) != SOURCE or getattr(main, "__file__", None) != path:
            return
        previous = hold_signals()  # from here on a signal ends the run as the program's would
        compiled = code(SOURCE, path)
        main.__dict__["__loader__"] = plain("__main__", path)
    except Exception:  # noqa: BLE001 - the interpreter compiles and runs the script as always
        if previous is not None:
            _restore(previous)
        return
    interrupted = False
    try:
        exec(compiled, main.__dict__)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - what the interpreter does with it
        interrupted = isinstance(exc, KeyboardInterrupt)
        exc.__traceback__ = exc.__traceback__.tb_next  # from the script's frame on, as the interpreter's
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
        sys.excepthook(type(exc), exc, exc.__traceback__)
        status = 1
    _finish(status, interrupted)


def _exit_status(exc):
    """The exit status of an uncaught ``SystemExit`` (CPython's _Py_HandleSystemExit): None 0,
    an int itself, anything else printed to stderr and 1."""
    value = exc.code
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    try:
        sys.stderr.write(str(value) + "\\n")
    except Exception:  # noqa: BLE001
        pass
    return 1


def _finish(status, interrupted):
    """End the process as Py_FinalizeEx and Py_RunMain would: join non-daemon threads, run the
    atexit callbacks, flush stdout (a failure: "Exception ignored" and status 120) and stderr,
    then exit with ``status`` (or die by SIGINT after an uncaught KeyboardInterrupt)."""
    import os
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit
    atexit._run_exitfuncs()
    stdout = sys.stdout
    if stdout is not None and not getattr(stdout, "closed", False):
        try:
            stdout.flush()
        except Exception as exc:  # noqa: BLE001
            import traceback
            sys.stderr.write("Exception ignored in: %r\\n" % (stdout,))
            traceback.print_exception(type(exc), exc, None)
            status = 120
    try:
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        status = 120
    if interrupted:
        import signal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        status = 130
    try:
        os._exit(status)
    except (OverflowError, TypeError):
        os._exit(-1)
'''


class EditableShimHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version != "editable":
            return
        self._tmp = tempfile.mkdtemp(prefix="kg-triplet-eval-build-")
        source = str(Path(self.root, "evaluate.py").resolve())
        files = {"kg_triplet_eval.py": SHIM.format(path=source),
                 "_kg_triplet_eval_editable.py": LAUNCHER.replace("@SOURCE@", repr(source)),
                 "_kg_triplet_eval_editable.pth": PTH}
        for name, text in files.items():
            (Path(self._tmp) / name).write_text(text, encoding="utf-8")
            build_data["force_include_editable"][str(Path(self._tmp) / name)] = name

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        if version == "editable":
            shutil.rmtree(self._tmp, ignore_errors=True)
