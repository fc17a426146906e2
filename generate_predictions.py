# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Generate predictions for `evaluate.py`
#
# Runs a (fine-tuned) chat model over the prompts of a JSONL file and writes one **combined**
# line per prompt: `id`, the prompt, the input's gold unchanged (`gold_parsed`, or `gold_raw`
# for text such as a chat assistant turn), the model's verbatim text (`pred_raw`),
# `finish_reason`, the parse status given by `evaluate.py`'s own parser, the generation
# settings and timing. Grade it as it is: `uv run evaluate.py --pred OUTPUT`.
#
# * **Where**: a laptop CPU, a local GPU or Google Colab, unchanged. Device `auto` picks CUDA
#   when present, in bfloat16 on GPUs that support it natively and float32 on the others
#   (Colab's T4: Qwen overflows in float16); CPU runs in float32.
# * **Resumable**: every batch is appended, flushed and fsynced; a rerun cuts a partial last
#   line left by a crash and skips the ids already written. Rerun the notebook to continue.
#   A written line whose prompt or gold no longer matches the input is refused, never kept.
# * **Prompts** are rendered with the tokenizer's own chat template (`enable_thinking` is
#   passed to the template), left-padded, never truncated (a prompt that does not fit the
#   model's context is reported, skipped and counted), and batched by length.
# * **Instruction** (`instruction`): `"schema"` (default) puts our extraction instruction (the
#   triplet schema, the 20 relation types of `evaluate.py`, "answer with a JSON array only")
#   before each prompt/text passage, so that a base model is asked for what is graded;
#   `"none"` sends the bare passage (warned for a base model: it answers in prose and scores
#   0). Chat inputs keep their own turns. Each line records the instruction used (`instruction`:
#   name and a 12-hex SHA-256), and the evaluator notes a comparison of runs made with
#   different ones.
# * **Several samples** (`num_samples` > 1, with `do_sample = True`): each prompt is answered
#   `num_samples` times, sample `s` seeded with `sample_seed(seed, s)` (sample 0: `seed`);
#   each line records `sample` and `seed`, and one grading command scores all samples as one
#   system. Resumable per (id, sample); a larger `num_samples` continues such a file.
#
# Set the parameters in the next cell, or pass them with papermill:
# `papermill generate_predictions.ipynb run.ipynb -p model_id ... -p output_path ...`.
# This file has a plain-text twin, `generate_predictions.py` (jupytext `py:percent`);
# `jupytext --sync generate_predictions.ipynb` updates one from the other.

# %% tags=["parameters"]
# Model: a Hugging Face id, a local model directory, or a local .gguf file.
model_id = "mohar07/qwen3-0.6b-kg-triplets"
adapter = ""                      # optional LoRA adapter (Hugging Face id or directory; needs peft)
input_path = "gold/gold.jsonl"    # prompt/text/sent (+ id, gold) lines, or chat "messages" lines
output_path = "predictions/generated.jsonl"
evaluator_path = "evaluate.py"    # loaded by file path (the name `evaluate` is Hugging Face's)
evaluator_url = ""                # Colab only: fetch evaluate.py from here when it is missing
instruction = "schema"            # schema: our extraction instruction before each prompt/text passage | none: the bare passage
system_prompt = ""                # system turn for inputs that have none (empty: no system turn)
user_template = "{prompt}"        # user turn of prompt/text/sent inputs: {prompt} is replaced by the text
batch_size = 8
max_new_tokens = 1024
do_sample = False                 # False: greedy decoding
temperature = 0.7                 # used only with do_sample
top_p = 0.8                       # used only with do_sample
top_k = 20                        # used only with do_sample
seed = 0
num_samples = 1                   # answers per prompt; > 1 needs do_sample (sample s is seeded with sample_seed(seed, s))
enable_thinking = False           # passed to the chat template (Qwen3: empty <think> block when False)
limit = None                      # only the first N input records in input order (None: all)
resume = True                     # continue an existing output file (False: refuse to touch it)
device = "auto"                   # auto | cpu | cuda | cuda:N | mps
dtype = "auto"                    # auto | float32 | bfloat16 | float16
max_prompt_tokens = None          # None: the model's context length minus max_new_tokens
backend = "transformers"          # transformers | vllm | auto (vllm when installed and on CUDA)

# %% [markdown]
# ## Setup
# On Colab this installs what the notebook needs (torch is preinstalled there) and fetches
# `evaluate.py`; elsewhere it uses the project's environment (`uv sync --extra notebook`
# plus a torch build for your hardware, see the README).

# %%
import importlib.util
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

IN_COLAB = "google.colab" in sys.modules

if IN_COLAB:
    _packages = ["transformers>=4.51", "json-repair>=0.30", "numpy>=1.26", "orjson>=3.10", "msgspec>=0.19"]
    if adapter:
        _packages.append("peft")
    if str(model_id).endswith(".gguf"):
        _packages.append("gguf")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *_packages])
    if str(output_path).startswith("/content/drive"):
        from google.colab import drive  # keeps the output across Colab sessions

        drive.mount("/content/drive")
    if not Path(evaluator_path).is_file():
        if evaluator_url:
            import urllib.request

            urllib.request.urlretrieve(evaluator_url, evaluator_path)
        else:
            from google.colab import files

            print("Upload evaluate.py (or set evaluator_url in the parameters cell).")
            for _name, _data in files.upload().items():
                Path(evaluator_path).write_bytes(_data)

evaluator_file = Path(evaluator_path).resolve()
if not evaluator_file.is_file():
    raise FileNotFoundError(
        f"evaluator_path: {evaluator_file} does not exist; set evaluator_path to the project's "
        "evaluate.py (on Colab: evaluator_url, or upload it when asked)")
# Loaded under another module name: `import evaluate` would find Hugging Face's package.
_spec = importlib.util.spec_from_file_location("kg_triplet_evaluate", evaluator_file)
ev = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ev
_spec.loader.exec_module(ev)
print(f"evaluate.py {ev.__version__} from {evaluator_file}")

# %% [markdown]
# ## Helpers
# Plain functions (no torch at import): input records, resume state and checks, the prompt
# length limit, device choice, the end-of-sequence cut, batching and the grading advice.

# %% tags=["helpers"]
import hashlib
import json
import numbers
import os
import shlex
from pathlib import Path

#: Output fields, in order. Gold goes under gold_parsed (a parsed value) or gold_raw (text).
#: Never "messages" (the evaluator would read the line as a chat gold line) and never a
#: parsed prediction list (lossy; the evaluator parses pred_raw itself).
RESUME_SETTINGS = ("model", "adapter", "max_new_tokens", "do_sample", "temperature", "top_p",
                   "top_k", "seed", "enable_thinking", "system_prompt", "user_template", "instruction")

#: The published fine-tune: trained on chat lines whose user turn carries its own instruction.
FINE_TUNED_MODELS = ("mohar07/qwen3-0.6b-kg-triplets",)

#: The ``schema`` instruction (our own words), put before each prompt/text passage in the user
#: turn; ``{relations}`` becomes the relation vocabulary (evaluate.py's SPEC_RELATIONS).
SCHEMA_INSTRUCTION = """\
Extract a knowledge graph from the text below: every fact the text states, as a triplet of \
a source, a relation and a target.

Answer with a JSON array only: no prose, no explanation, no code fence. Each element is an \
object of exactly this shape:
{"source": {"title": "...", "type": "..."}, "relation": {"type": "...", "weight": 0.0}, \
"target": {"title": "...", "type": "..."}}

- "title": the name of the source or target as the text writes it.
- "type" of the source and the target: "entity" for a named thing (a person, an organisation, \
a product, a model, a dataset, a place) or "concept" for a general idea, method or task.
- "type" of the relation: exactly one of {relations}.
- "weight": a number from 0.0 to 1.0, how directly the text states the fact (1.0: stated \
outright).

If the text states no such fact, answer [].

Text:"""

#: The ``instruction`` parameter's values (the instruction put before each prompt/text passage).
INSTRUCTION_PRESETS = ("schema", "none")


class InputProblem(ValueError):
    """A bad input record or output file: the message names the file, line and field."""


def sample_seed(seed, sample):
    """The seed of sample ``sample`` (an int >= 0) of a run with seed ``seed`` (an int).

    Sample 0 keeps ``seed`` itself (a one-sample run is the run it always was). Sample
    ``s >= 1`` gets the first 4 bytes of the SHA-256 of the ASCII text ``"{seed}:{s}"``,
    read as a big-endian unsigned integer: ``0 <= seed_s < 2**32`` (what numpy, torch and
    vLLM accept). A hash rather than ``seed + s``: runs with neighbouring seeds share no
    sample (seed 0's sample 1 is not seed 1's sample 0). Example: ``sample_seed(0, 1) ==
    int(hashlib.sha256(b"0:1").hexdigest()[:8], 16)``."""
    if sample == 0:
        return int(seed)
    digest = hashlib.sha256(f"{int(seed)}:{int(sample)}".encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big")


def check_num_samples(num_samples, do_sample):
    """The parameter ``num_samples`` as an int, after checking it: an integer >= 1 (not a
    bool), and exactly 1 under greedy decoding (``do_sample`` False), where every sample
    would be the same answer.

    Raises:
        ValueError: naming the value found and what to set instead.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, numbers.Integral) or num_samples < 1:
        raise ValueError(f"num_samples={num_samples!r}: expected an integer >= 1 (answers per prompt)")
    if num_samples > 1 and not do_sample:
        raise ValueError(f"num_samples={num_samples} with do_sample=False: greedy decoding gives the same "
                         f"answer every time, so the {num_samples} samples would be identical; set "
                         "do_sample=True (temperature, top_p, top_k; seeds from seed) or num_samples=1")
    return int(num_samples)


def instruction_text(name, relations):
    """The text of the instruction preset ``name`` (:data:`INSTRUCTION_PRESETS`) for the
    relation vocabulary ``relations`` (a sequence of relation type strings, listed in the
    order given): ``schema`` is :data:`SCHEMA_INSTRUCTION` with ``{relations}`` replaced by
    the types joined by ", "; ``none`` is "" (the bare passage).

    Raises:
        ValueError: an unknown name (the message lists the presets).
    """
    if name == "schema":
        return SCHEMA_INSTRUCTION.replace("{relations}", ", ".join(relations))
    if name == "none":
        return ""
    raise ValueError(f"instruction={name!r}: expected one of {', '.join(INSTRUCTION_PRESETS)} (for your own "
                     "wording: instruction='none' with system_prompt and/or user_template)")


def instruction_record(name, text, *, system_prompt="", user_template="{prompt}"):
    """What an output line records of the instruction used for a prompt/text input:
    ``{"name": name, "sha256": H}``, ``H`` the first 12 hex digits of the SHA-256 of the
    turns built around the passage (the chat of :func:`prompt_record` for the passage
    ``"{prompt}"``, as canonical JSON): the system prompt, the instruction ``text`` and the
    user template all change it; the passage does not. Chat inputs keep their own turns and
    record :data:`CHAT_INSTRUCTION` instead."""
    shape = prompt_record({"prompt": "{prompt}"}, 0, "", system_prompt=system_prompt,
                          user_template=user_template, instruction=text)["chat"]
    return {"name": name, "sha256": hashlib.sha256(_canonical(shape).encode("utf-8")).hexdigest()[:12]}


#: The instruction of a chat input: its own turns, nothing added by the notebook.
CHAT_INSTRUCTION = {"name": "chat", "sha256": None}


def bare_passage_warning(model_id, adapter, instruction, system_prompt, user_template, records):
    """The warning printed when a base model would see only the bare passage, else None.

    Warns when some record of ``records`` (:func:`prompt_record` dicts) is a prompt/text
    input (chat inputs keep their own turns), ``instruction`` is "none", there is no
    ``system_prompt`` and ``user_template`` is "{prompt}" alone, and ``model_id`` is not a
    model of :data:`FINE_TUNED_MODELS` with no ``adapter`` (a model with an adapter is a
    fine-tune). Such a model usually answers in prose and scores 0: an unfair baseline."""
    flat = sum(1 for r in records if not r["own_turns"])
    bare = instruction == "none" and not system_prompt and user_template.strip() == "{prompt}"
    if not flat or not bare or adapter or str(model_id) in FINE_TUNED_MODELS:
        return None
    return (f"WARNING: {model_id} gets the bare passage for {flat} prompt/text input(s) (instruction='none', "
            "no system_prompt, user_template '{prompt}'): a base model usually answers in prose and scores 0. "
            "Set instruction='schema' for a fair baseline (README, Generating predictions)")


def check_output_path(input_path, output_path):
    """Refuse an ``output_path`` that names the input file (the same path, or the same file
    through a link): the notebook appends to and may cut its output, and a refusal to resume
    advises moving or deleting it. Returns None when they differ.

    Raises:
        InputProblem: naming both paths.
    """
    inp, out = Path(input_path), Path(output_path)
    same = inp.resolve() == out.resolve()
    if not same and inp.exists() and out.exists():
        same = os.path.samefile(inp, out)
    if same:
        raise InputProblem(f"output_path {str(out)!r} is the input file {str(inp)!r}: the output is appended to "
                           "and its last line may be cut, so it never goes into the input; choose another output_path")


def prompt_record(obj, line_no, where, *, system_prompt="", user_template="{prompt}", instruction="",
                  prompt_keys=("prompt", "text", "sent"),
                  gold_keys=("triplets", "gold", "gold_parsed", "triples", "gold_raw")):
    """One input record -> dict(id, key, own_id, prompt, chat, own_turns, gold_field,
    gold, line).

    Accepted like the evaluator's gold side: ``{"id"?, "prompt"|"text"|"sent", gold?}`` or a
    chat line ``{"id"?, "messages": [system?, user, assistant?]}``. Chat: every turn before a
    final assistant turn is the prompt (system and user turns, few-shot turns included), the
    first user turn's content is ``prompt`` (what the evaluator checks grounding against) and
    the final assistant content is the gold text (``gold_raw``); ``own_turns`` is True. Flat:
    the chat is ``[system_prompt?, user turn]``, the user turn being ``user_template`` with
    {prompt} replaced, after ``instruction`` and a newline when ``instruction`` is not empty
    (:func:`instruction_text`); ``own_turns`` is False. The gold value of the first
    present gold key (not null) is kept unchanged: a string under ``gold_raw``, anything else
    under ``gold_parsed``. ``id`` is the input's id, else the 1-based line number; ``key``
    is ``str(id)`` (what the evaluator joins on).

    Raises:
        InputProblem: naming ``where`` (file: line), the field, expected vs found.
    """
    if not isinstance(obj, dict):
        raise InputProblem(f"{where}: expected a JSON object, found {type(obj).__name__}")
    rid = obj.get("id")
    own_id = rid is not None
    if rid is None:
        rid = line_no
    elif isinstance(rid, (dict, list, bool)):
        raise InputProblem(f"{where}: field 'id': expected a string or number, found {json.dumps(rid)[:60]}")
    gold_field, gold = None, None
    own_turns = "messages" in obj and not any(k in obj for k in prompt_keys)
    if own_turns:
        messages = obj["messages"]
        if not isinstance(messages, list) or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise InputProblem(f"{where}: field 'messages': expected a list of {{role, content}} objects "
                               "with string values")
        chat = [{"role": m["role"], "content": m["content"]} for m in messages]
        if chat and chat[-1]["role"] == "assistant":
            gold_field, gold = "gold_raw", chat.pop()["content"]
        user = next((m["content"] for m in chat if m["role"] == "user"), None)
        if user is None:
            raise InputProblem(f"{where}: field 'messages': no user turn before the final assistant turn")
        prompt = user
    else:
        key = next((k for k in prompt_keys if k in obj), None)
        if key is None:
            raise InputProblem(f"{where}: no prompt: expected one of the fields "
                               f"{', '.join(prompt_keys)} or 'messages', found {sorted(obj)}")
        prompt = obj[key]
        if not isinstance(prompt, str):
            raise InputProblem(f"{where}: field '{key}': expected a string, found {json.dumps(prompt)[:60]}")
        user = user_template.replace("{prompt}", prompt)
        chat = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
            {"role": "user", "content": f"{instruction}\n{user}" if instruction else user}]
        gkey = next((k for k in gold_keys if obj.get(k) is not None), None) or next(
            (k for k in gold_keys if k in obj), None)
        if gkey is not None:
            gold = obj[gkey]
            gold_field = "gold_raw" if isinstance(gold, str) else "gold_parsed"
    return {"id": rid, "key": str(rid), "own_id": own_id, "prompt": prompt, "chat": chat,
            "own_turns": own_turns,
            "gold_field": gold_field, "gold": gold, "line": line_no}


def read_prompt_records(path, read_jsonl, *, limit=None, **options):
    """Read every record of ``path`` with the evaluator's robust ``read_jsonl``.

    Returns ``(records, problems)``: the first ``limit`` good records in input order, and one
    message per bad line (unreadable JSON, missing prompt ...), never silently dropped.

    Raises:
        InputProblem: two records with the same id (resuming and grading join on ids).
    """
    records, problems, seen = [], [], {}
    for row in read_jsonl(path):
        where = f"{path}: line {row.line_no}"
        if row.error is not None:
            problems.append(f"{path}: {row.error}")
            continue
        try:
            rec = prompt_record(row.value, row.line_no, where, **options)
        except InputProblem as exc:
            problems.append(str(exc))
            continue
        if rec["key"] in seen:
            raise InputProblem(f"{where}: id {rec['key']!r} repeats line {seen[rec['key']]}; ids must be "
                               "unique (an input without ids gets its line numbers)")
        seen[rec["key"]] = row.line_no
        records.append(rec)
        if limit is not None and len(records) >= limit:
            break
    return records, problems


def prepare_output(path):
    """Make ``path`` ready for appending and return what it already holds.

    A last line without its newline (left by a crash mid-write) is cut off. Every complete
    line must be a JSON object with an ``id``, and an integer ``sample`` >= 0 where it has one
    (a run with ``num_samples`` > 1); an (id, sample) pair appears once.

    Returns:
        ``(lines, cut_bytes)``: the decoded existing lines in file order, and how many bytes
        of a partial last line were removed (0 when none).

    Raises:
        InputProblem: a complete line that is not a JSON object with an id, a bad ``sample``,
            or a repeated id (or id and sample): the file was edited or is not this
            notebook's output.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    cut = len(data) - keep
    if cut:
        with open(path, "r+b") as f:
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    lines, seen = [], {}
    for no, raw in enumerate(data[:keep].splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise InputProblem(f"{path}: line {no}: not JSON ({exc}); this file is not resumable: "
                               "move it away or fix the line") from None
        if not isinstance(obj, dict) or obj.get("id") is None:
            raise InputProblem(f"{path}: line {no}: expected a JSON object with an 'id', found "
                               f"{raw[:60].decode('utf-8', 'replace')}")
        sample = obj.get("sample")
        if "sample" in obj and (isinstance(sample, bool) or not isinstance(sample, int) or sample < 0):
            raise InputProblem(f"{path}: line {no}: field 'sample': expected an integer >= 0, "
                               f"found {json.dumps(sample)[:60]}")
        key = (str(obj["id"]), sample)
        if key in seen:
            of = "" if sample is None else f" sample {sample}"
            raise InputProblem(f"{path}: line {no}: id {key[0]!r}{of} repeats line {seen[key]}")
        seen[key] = no
        lines.append(obj)
    return lines, cut


def resume_conflicts(existing_lines, settings):
    """Settings (names in RESUME_SETTINGS) whose value in the existing output differs from
    this run's, as ``"name: file X, now Y"`` strings; empty when the run may continue."""
    out = []
    for obj in existing_lines[:1]:
        old = obj.get("generation") or {}
        for name in RESUME_SETTINGS:
            if name in old and old[name] != settings.get(name):
                out.append(f"{name}: file {old[name]!r}, now {settings.get(name)!r}")
    return out


def written_samples(existing_lines, num_samples, seed, out_file):
    """The ``(key, sample)`` pairs that an output file already holds, after checking that
    this run (``num_samples``, base ``seed``) may continue it.

    ``existing_lines`` are :func:`prepare_output`'s lines. A one-sample file has no
    ``sample`` field (each line is sample 0 of its id, ``key = str(id)``); a file written with
    ``num_samples`` > 1 has ``sample`` and ``seed`` on every line. A larger ``num_samples``
    continues a multi-sample file: the new samples are added for every id.

    Raises:
        InputProblem: naming ``out_file``: lines with and without ``sample`` in one file; a
            one-sample file continued with ``num_samples`` > 1, or a multi-sample file with
            ``num_samples`` = 1; a sample >= ``num_samples`` (the file holds more samples
            than asked); a line whose ``seed`` is not ``sample_seed(seed, sample)``.
    """
    multi = [o for o in existing_lines if "sample" in o]
    if not multi:
        if existing_lines and num_samples > 1:
            raise InputProblem(f"{out_file} holds one sample per id (its lines have no 'sample'), this run asks for "
                               f"num_samples={num_samples}: write to a new output_path (its sample 0 has the same "
                               "seed), or set num_samples=1 to continue this file")
        return {(str(o["id"]), 0) for o in existing_lines}
    if len(multi) < len(existing_lines):
        plain = next(str(o["id"]) for o in existing_lines if "sample" not in o)
        raise InputProblem(f"{out_file}: {len(multi)} line(s) have a 'sample' and {len(existing_lines) - len(multi)} "
                           f"have none (e.g. id {plain}): two kinds of run in one file; move it away to start over")
    top = max(o["sample"] for o in multi)
    if num_samples == 1 or top >= num_samples:
        raise InputProblem(f"{out_file} holds several samples per id (up to sample {top}), this run asks for "
                           f"num_samples={num_samples}: set num_samples to {max(top + 1, 2)} or more to continue it, "
                           "or write to a new output_path")
    wrong = [o for o in multi if o.get("seed") != sample_seed(seed, o["sample"])]
    if wrong:
        o = wrong[0]
        raise InputProblem(f"{out_file}: {len(wrong)} line(s) have a seed that is not their sample's seed for seed={seed} "
                           f"(e.g. id {o['id']} sample {o['sample']}: seed {o.get('seed')!r}, expected "
                           f"{sample_seed(seed, o['sample'])}); move it away to start over")
    return {(str(o["id"]), o["sample"]) for o in multi}


#: Output fields that hold the input's gold (the evaluator reads either).
GOLD_OUTPUT_FIELDS = ("gold_parsed", "gold_raw")


def _canonical(value):
    """A JSON text that is equal for equal JSON values (key order ignored, NaN equal to NaN)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _some_ids(ids, cap=10):
    """``"a, b, c"``, at most ``cap`` ids, then ``" ... (N more)"``."""
    ids = list(ids)
    return ", ".join(ids[:cap]) + (f" ... ({len(ids) - cap} more)" if len(ids) > cap else "")


def changed_fields(stored, rec):
    """Fields of an output line ``stored`` that no longer match the input record ``rec`` of
    the same id: ``prompt``, ``prompt_messages`` (vs ``rec["chat"]``), ``prompt_rendered``
    (only when ``rec`` has been rendered: ``rec["rendered"]``) and ``gold`` (the
    gold_parsed/gold_raw field and value). Values are compared as JSON (key order ignored).
    Returns the names, in that order; empty when the line is still valid for this input."""
    gold_now = {rec["gold_field"]: rec["gold"]} if rec["gold_field"] else {}
    pairs = [("prompt", stored.get("prompt"), rec["prompt"]),
             ("prompt_messages", stored.get("prompt_messages"), rec["chat"])]
    if "rendered" in rec:
        pairs.append(("prompt_rendered", stored.get("prompt_rendered"), rec["rendered"]))
    pairs.append(("gold", {k: stored[k] for k in GOLD_OUTPUT_FIELDS if k in stored}, gold_now))
    return [name for name, old, now in pairs if _canonical(old) != _canonical(now)]


def check_resume_content(existing_lines, records, out_file, input_path, *, cap=10):
    """Refuse to resume when a line already written no longer matches the input.

    Every line of ``existing_lines`` whose id is an input record of ``records`` is compared
    with :func:`changed_fields`; output ids that are not in the input are not checked (the
    notebook notes them). Returns None when every written line matches.

    Raises:
        InputProblem: naming the output file, the number of stale lines and (at most ``cap``)
            their ids with the fields that differ, and how to start over.
    """
    by_key = {r["key"]: r for r in records}
    stale = []
    for obj in existing_lines:
        rec = by_key.get(str(obj["id"]))
        fields = changed_fields(obj, rec) if rec is not None else []
        if fields:
            of = f" sample {obj['sample']}" if "sample" in obj else ""
            stale.append(f"{rec['key']}{of} ({', '.join(fields)})")
    if stale:
        raise InputProblem(
            f"{out_file}: {len(stale)} line(s) already written no longer match {input_path} (changed: "
            f"{_some_ids(stale, cap)}); resuming would keep the old prompt/gold and grade them. Write to "
            "a new output_path, or delete the file to start over")


def prompt_token_limit(max_prompt_tokens, context_length, max_new_tokens):
    """The longest prompt (in tokens) that is generated, and where that limit comes from.

    ``max_prompt_tokens`` when set (the user's parameter), else the model's context length
    minus ``max_new_tokens``, else no limit. Returns ``(limit, source)``, ``(None, None)``
    when there is no limit; ``source`` is the text shown after a too-long prompt."""
    if max_prompt_tokens is not None:
        return int(max_prompt_tokens), "the parameter max_prompt_tokens"
    if context_length:
        return (int(context_length) - int(max_new_tokens),
                f"model context {int(context_length)} - max_new_tokens {int(max_new_tokens)}")
    return None, None


def grading_advice(command, output_lines, input_has_gold, *, samples=1, cap=10):
    """The closing lines about grading: notes and the command(s) that grade the output.

    ``command`` grades the combined file (:func:`grading_command`). Every output line has
    gold: that command. No input record has gold: a note and the command with ``--gold``.
    Some output lines have no gold (a chat line without an assistant turn, a record without
    a gold field): the evaluator stops at such a line (exit 2), so the note names how many
    and which ids (each once, at most ``cap``) and the commands are ``--skip-bad-gold``
    (those lines are excluded and listed in the evaluator's notices, the others scored) and
    ``--gold``. With ``samples`` > 1 (lines told apart by ``sample``) a first line says that
    the command grades all samples as one system. Returns the lines to print."""
    head = [f"note: {samples} samples per id (field 'sample', 0 to {samples - 1}): the command grades them as "
            "one system (README, Several samples per prompt)"] if samples > 1 else []
    return head + _grading_lines(command, output_lines, input_has_gold, cap)


def _grading_lines(command, output_lines, input_has_gold, cap):
    """:func:`grading_advice` without its samples note."""
    if not input_has_gold:
        return ["note: the input has no gold answers; pass the gold file to the evaluator",
                f"grade with: {command} --gold YOUR_GOLD.jsonl"]
    no_gold = [str(o["id"]) for o in output_lines if not any(k in o for k in GOLD_OUTPUT_FIELDS)]
    if not no_gold:
        return [f"grade with: {command}"]
    n_scored = len(output_lines) - len(no_gold)
    ids = list(dict.fromkeys(no_gold))  # an id with several samples is named once
    return [f"note: {len(no_gold)} of {len(output_lines)} output lines have no gold (ids {_some_ids(ids, cap)}); "
            "the evaluator stops at such a line unless told to exclude it",
            f"grade with: {command} --skip-bad-gold",
            f"  (excludes and lists the {len(no_gold)} line(s) without gold, scores the other {n_scored})",
            f"or, with a gold file for every id: {command} --gold YOUR_GOLD.jsonl"]


def choose_device_dtype(device, dtype, *, cuda_available, cuda_capability=None, mps_available=False):
    """Resolve the ``device`` and ``dtype`` parameters.

    ``auto`` device: ``cuda`` when available, else ``cpu``. ``auto`` dtype: ``bfloat16`` on a
    CUDA device of compute capability >= 8.0 (native bf16: Ampere and later), ``float32`` on
    older GPUs such as the T4 (7.5; Qwen overflows in float16) and on CPU/MPS.

    Returns ``(device, dtype)`` as strings. Raises ValueError for an unavailable device or an
    unknown dtype.
    """
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    if device.startswith("cuda") and not cuda_available:
        raise ValueError(f"device={device!r}: CUDA is not available (torch sees no GPU)")
    if device == "mps" and not mps_available:
        raise ValueError("device='mps': MPS is not available")
    if dtype == "auto":
        native_bf16 = cuda_capability is not None and tuple(cuda_capability) >= (8, 0)
        dtype = "bfloat16" if device.startswith("cuda") and native_bf16 else "float32"
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype={dtype!r}: expected auto, float32, bfloat16 or float16")
    return device, dtype


def cut_at_eos(token_ids, eos_ids):
    """Generated token ids up to (not including) the first end-of-sequence id.

    Returns ``(ids, finish_reason)``: "stop" when an end-of-sequence id was generated,
    "length" when generation ran out of new tokens."""
    for i, tok in enumerate(token_ids):
        if tok in eos_ids:
            return list(token_ids[:i]), "stop"
    return list(token_ids), "length"


def length_batches(items, size, length):
    """Batches of at most ``size`` items, longest first (little padding; an out-of-memory
    error shows up in the first batch)."""
    ordered = sorted(items, key=length, reverse=True)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def grading_command(evaluator_file, output_file, *, colab=False, cwd=None):
    """The shell command that grades the combined output with the evaluator."""
    cwd = Path(cwd or os.getcwd()).resolve()
    evaluator_file, output_file = Path(evaluator_file).resolve(), Path(output_file).resolve()

    def rel(p):
        try:
            return p.relative_to(cwd).as_posix()
        except ValueError:
            return str(p)

    args = f"{shlex.quote(rel(evaluator_file))} --pred {shlex.quote(rel(output_file))}"
    project = evaluator_file.parent
    if colab or not (project / "pyproject.toml").is_file():
        return f"python {args}"
    if project == cwd:
        return f"uv run {args}"
    return f"uv run --project {shlex.quote(str(project))} {args}"


# %% [markdown]
# ## Inputs and resume state

# %%
num_samples = check_num_samples(num_samples, do_sample)
sample_seeds = [sample_seed(int(seed), s) for s in range(num_samples)]
check_output_path(input_path, output_path)
instruction_used = instruction_text(instruction, ev.SPEC_RELATIONS)
flat_instruction = instruction_record(instruction, instruction_used, system_prompt=system_prompt,
                                      user_template=user_template)
settings = {
    "model": str(model_id), "adapter": adapter or None, "max_new_tokens": int(max_new_tokens),
    "do_sample": bool(do_sample),
    "temperature": float(temperature) if do_sample else None,
    "top_p": float(top_p) if do_sample else None,
    "top_k": int(top_k) if do_sample else None,
    "seed": int(seed), "enable_thinking": bool(enable_thinking),
    "system_prompt": system_prompt or None, "user_template": user_template, "instruction": flat_instruction,
}
records, input_problems = read_prompt_records(
    input_path, ev.read_jsonl, limit=limit, system_prompt=system_prompt, user_template=user_template,
    instruction=instruction_used, prompt_keys=ev.PROMPT_KEYS, gold_keys=ev.GOLD_KEYS + ev.GOLD_RAW_KEYS)
for msg in input_problems:
    print("skipped input line:", msg)
_bare = bare_passage_warning(model_id, adapter, instruction, system_prompt, user_template, records)
if _bare:
    print(_bare)

out_file = Path(output_path)
if out_file.exists() and out_file.stat().st_size and not resume:
    raise FileExistsError(f"{out_file} exists and resume=False: move it away, choose another "
                          "output_path, or set resume=True to continue it")
out_file.parent.mkdir(parents=True, exist_ok=True)
existing, cut_bytes = prepare_output(out_file)
if cut_bytes:
    print(f"resume: removed a partial last line ({cut_bytes} bytes) left by an interrupted run")
conflicts = resume_conflicts(existing, settings)
if conflicts:
    raise InputProblem(f"{out_file} was written with other settings ({'; '.join(conflicts)}): "
                       "choose another output_path, or move the file away to start over")
check_resume_content(existing, records, out_file, input_path)
done_pairs = written_samples(existing, num_samples, int(seed), out_file)
done = {key for key, _ in done_pairs}
input_keys = {r["key"] for r in records}
foreign = sorted(done - input_keys)
if foreign and limit is None:
    print(f"note: {len(foreign)} id(s) in {out_file} are not in {input_path} "
          f"(e.g. {', '.join(foreign[:5])}); the evaluator grades every line of the file")
for rec in records:  # the samples still to generate for each record (0 only, for one sample)
    rec["samples"] = [s for s in range(num_samples) if (rec["key"], s) not in done_pairs]
pending = [r for r in records if r["samples"]]
print(f"{len(records)} input records ({len(input_problems)} bad input line(s) skipped); "
      f"{len(records) - len(pending)} already in {out_file}; {len(pending)} to generate")
if num_samples > 1:
    print(f"{num_samples} samples per id, seeds {', '.join(map(str, sample_seeds))} (sample_seed(seed, s)); "
          f"{sum(len(r['samples']) for r in pending)} (id, sample) pair(s) to generate")

# %% [markdown]
# ## Tokenizer and prompts
# The tokenizer's own chat template renders each prompt; nothing is ever truncated.

# %%
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

model_path = Path(str(model_id)).expanduser()
if model_path.suffix == ".gguf":
    load_from, gguf_kw = str(model_path.parent), {"gguf_file": model_path.name}
else:
    load_from, gguf_kw = str(model_id), {}
# An adapter saved with its own tokenizer (added tokens, another chat template) brings it along.
adapter_tokenizer = bool(adapter) and (Path(adapter) / "tokenizer_config.json").is_file()
tokenizer_source = adapter if adapter_tokenizer else load_from
tokenizer = AutoTokenizer.from_pretrained(tokenizer_source, **({} if adapter_tokenizer else gguf_kw))
tokenizer.padding_side = "left"
if tokenizer.pad_token is None:
    tokenizer.pad_token = tokenizer.eos_token
if not tokenizer.chat_template:
    raise ValueError(f"{tokenizer_source}: the tokenizer has no chat template; this notebook renders "
                     "prompts with the model's own template (use an instruct/chat model)")
if "enable_thinking" not in tokenizer.chat_template:
    print("note: this chat template does not read enable_thinking; the parameter has no effect")

config = AutoConfig.from_pretrained(load_from, **gguf_kw)
context_length = getattr(config, "max_position_embeddings", None)
prompt_limit, prompt_limit_source = prompt_token_limit(max_prompt_tokens, context_length, max_new_tokens)


def render(rec):
    return tokenizer.apply_chat_template(
        rec["chat"], tokenize=False, add_generation_prompt=True, enable_thinking=bool(enable_thinking))


# Lines already written must hold the prompt this template renders now (a changed template).
_written = [r for r in records if r["key"] in done]
for rec in _written:
    rec["rendered"] = render(rec)
check_resume_content(existing, _written, out_file, input_path)

too_long = []
for rec in pending:
    rec["rendered"] = render(rec)
    # The template already holds every special token the model needs (no BOS added twice).
    rec["input_ids"] = tokenizer(rec["rendered"], add_special_tokens=False)["input_ids"]
    if prompt_limit is not None and len(rec["input_ids"]) > prompt_limit:
        too_long.append(rec)
for rec in too_long:
    print(f"too long, skipped: id {rec['key']} (line {rec['line']}): {len(rec['input_ids'])} prompt "
          f"tokens > {prompt_limit} ({prompt_limit_source})")
_too_long_keys = {r["key"] for r in too_long}
pending = [r for r in pending if r["key"] not in _too_long_keys]
if pending:
    print("first rendered prompt:", json.dumps(pending[0]["rendered"][-200:], ensure_ascii=False))

# %% [markdown]
# ## Model
# `device`/`dtype` `auto`: CUDA in bfloat16 where the GPU supports it natively, float32 on
# older GPUs (T4) and on CPU. `backend="vllm"` (or `auto` with vLLM installed on CUDA) uses
# vLLM with the same rendered prompts (token ids), else plain transformers.

# %%
cuda_ok = torch.cuda.is_available()
device, dtype = choose_device_dtype(
    device, dtype, cuda_available=cuda_ok,
    cuda_capability=torch.cuda.get_device_capability(0) if cuda_ok else None,
    mps_available=getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available())
torch_dtype = getattr(torch, dtype)
if backend == "auto":
    backend = "vllm" if device.startswith("cuda") and importlib.util.find_spec("vllm") else "transformers"
if backend not in ("transformers", "vllm"):
    raise ValueError(f"backend={backend!r}: expected transformers, vllm or auto")
# End of sequence: the tokenizer's eos token and the generation config's (Qwen3: <|im_end|>
# and <|endoftext|>).
eos_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
try:
    _gen_eos = transformers.GenerationConfig.from_pretrained(load_from, **gguf_kw).eos_token_id
except (OSError, ValueError):
    _gen_eos = None
eos_ids.update(_gen_eos if isinstance(_gen_eos, list) else [] if _gen_eos is None else [_gen_eos])

model = llm = None
if pending and backend == "transformers":
    dtype_kw = "dtype" if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56) else "torch_dtype"
    model = AutoModelForCausalLM.from_pretrained(load_from, **{dtype_kw: torch_dtype}, **gguf_kw)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.to(device).eval()
    generation_config = transformers.GenerationConfig(
        max_new_tokens=int(max_new_tokens), do_sample=bool(do_sample),
        eos_token_id=sorted(eos_ids), pad_token_id=tokenizer.pad_token_id,
        **({"temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k)} if do_sample
           else {"temperature": 1.0, "top_p": 1.0, "top_k": 50}))
elif pending and backend == "vllm":
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    # vLLM gets the prompt token ids rendered above and returns token ids, which are decoded
    # below by the same tokenizer: both backends see and write exactly the same text.
    llm = LLM(model=str(model_path) if gguf_kw else str(model_id), skip_tokenizer_init=True,
              dtype=dtype, seed=int(seed), enable_lora=bool(adapter),
              **({"max_model_len": int(context_length)} if context_length else {}))
    lora_request = LoRARequest("adapter", 1, adapter) if adapter else None
    # One SamplingParams per sample, seeded with the sample's seed (sample 0: seed).
    samplings = [SamplingParams(
        max_tokens=int(max_new_tokens), seed=sample_seeds[s], stop_token_ids=sorted(eos_ids), detokenize=False,
        **({"temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k)} if do_sample
           else {"temperature": 0.0})) for s in range(num_samples)]
print(f"backend {backend}, device {device}, dtype {dtype}, end-of-sequence ids {sorted(eos_ids)}")

# %% [markdown]
# ## Generate
# One batch at a time, longest prompts first; each batch is appended to the output, flushed
# and fsynced before the next starts. With several samples each batch is generated once per
# sample and its lines are written together, those of one id in sample order. Sampling with
# transformers draws from torch's global random generator: each sample keeps a stream of
# its own (seeded with its seed, saved and restored around its batches), so sample `s` is
# exactly the one-sample run with seed `sample_seed(seed, s)`; vLLM seeds each request.

# %%
import warnings

with warnings.catch_warnings():  # no ipywidgets outside Jupyter/Colab: plain text bars
    warnings.simplefilter("ignore")
    from tqdm.auto import tqdm

run_settings = dict(settings, backend=backend, device=device, dtype=dtype, batch_size=int(batch_size),
                    transformers=transformers.__version__, torch=torch.__version__)


def generate_transformers(batch):
    """Token ids generated for each prompt of ``batch`` (left padding; on CUDA out of memory
    the batch is split in two and retried)."""
    enc = tokenizer.pad({"input_ids": [r["input_ids"] for r in batch]}, return_tensors="pt").to(device)
    try:
        with torch.inference_mode():
            out = model.generate(**enc, generation_config=generation_config)
    except torch.OutOfMemoryError:
        if len(batch) == 1:
            raise
        torch.cuda.empty_cache()
        half = len(batch) // 2
        return generate_transformers(batch[:half]) + generate_transformers(batch[half:])
    width = enc["input_ids"].shape[1]
    return [(row[width:].tolist(), None) for row in out.cpu()]


def generate_vllm(batch, sample):
    """Token ids and finish reason per prompt, from vLLM with the same prompt token ids."""
    outs = llm.generate([{"prompt_token_ids": r["input_ids"]} for r in batch], samplings[sample],
                        use_tqdm=False, lora_request=lora_request)
    return [(list(o.outputs[0].token_ids), o.outputs[0].finish_reason) for o in outs]


class SampleStreams:
    """One random stream per sample for transformers' sampling, which draws from torch's
    global generators (the CPU one and the device's): stream ``s`` starts at
    ``transformers.set_seed(seeds[s])`` and :meth:`generate` restores it before a batch and
    saves it after, so each sample sees the random numbers of a one-sample run with its seed."""

    def __init__(self, seeds):
        self.states = []
        for one in seeds:
            transformers.set_seed(one)
            self.states.append(self._get())

    @staticmethod
    def _get():
        if device.startswith("cuda"):
            return torch.get_rng_state(), torch.cuda.get_rng_state(device)
        return torch.get_rng_state(), torch.mps.get_rng_state() if device == "mps" else None

    @staticmethod
    def _set(state):
        torch.set_rng_state(state[0])
        if device.startswith("cuda"):
            torch.cuda.set_rng_state(state[1], device)
        elif device == "mps":
            torch.mps.set_rng_state(state[1])

    def generate(self, batch, sample):
        self._set(self.states[sample])
        try:
            return generate_transformers(batch)
        finally:
            self.states[sample] = self._get()


def output_line(rec, sample, ids, engine_reason, timing):
    """The output line (a dict) for sample ``sample`` of record ``rec``: generated token ``ids``
    (cut here at the first end-of-sequence id), the engine's finish reason (vLLM) or None."""
    ids, finish_reason = cut_at_eos(ids, eos_ids)
    pred_raw = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    parsed = ev.parse_model_output(pred_raw)
    line = {"id": rec["id"]}
    if num_samples > 1:  # one sample: no sample/seed fields, the lines of a one-sample run as before
        line.update({"sample": sample, "seed": sample_seeds[sample]})
    line["prompt"] = rec["prompt"]
    if rec["gold_field"]:
        line[rec["gold_field"]] = rec["gold"]
    line.update({
        "pred_raw": pred_raw, "finish_reason": engine_reason or finish_reason,
        "parse_status": parsed.status, "parse_reason": parsed.reason,
        "prompt_messages": rec["chat"], "prompt_rendered": rec["rendered"],
        "n_prompt_tokens": len(rec["input_ids"]), "n_generated_tokens": len(ids),
        "input_line": rec["line"], "id_source": "input" if rec["own_id"] else "input_line",
        "instruction": CHAT_INSTRUCTION if rec["own_turns"] else flat_instruction,
        "generation": run_settings, "timing": dict(timing, finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")),
    })
    return line


batches = length_batches(pending, int(batch_size), lambda r: len(r["input_ids"]))
run_tokens, run_seconds, written = 0, 0.0, 0
streams = SampleStreams(sample_seeds) if batches and do_sample else None
with open(out_file, "a", encoding="utf-8") as sink:
    for index, batch in enumerate(tqdm(batches, desc="batches", unit="batch")):
        made = {}
        for sample in range(num_samples):
            part = [r for r in batch if sample in r["samples"]]
            if not part:
                continue
            start = time.perf_counter()
            if backend == "vllm":
                results = generate_vllm(part, sample)
            else:
                results = streams.generate(part, sample) if streams else generate_transformers(part)
            seconds = time.perf_counter() - start
            run_seconds += seconds
            timing = {"batch": index, "batch_size": len(part), "batch_seconds": round(seconds, 4)}
            for rec, (ids, engine_reason) in zip(part, results):
                made[rec["key"], sample] = (ids, engine_reason, timing)
        lines = []
        for rec in batch:
            for sample in rec["samples"]:
                ids, engine_reason, timing = made[rec["key"], sample]
                line = output_line(rec, sample, ids, engine_reason, timing)
                run_tokens += line["n_generated_tokens"]
                lines.append(json.dumps(line, ensure_ascii=False) + "\n")
        sink.write("".join(lines))
        sink.flush()
        os.fsync(sink.fileno())
        written += len(lines)

# %% [markdown]
# ## Summary

# %%
final_lines, _ = prepare_output(out_file)
status_counts = Counter(obj.get("parse_status", "?") for obj in final_lines)
finish_counts = Counter(obj.get("finish_reason", "?") for obj in final_lines)
final_pairs = {(str(o["id"]), o.get("sample", 0)) for o in final_lines}
missing = [r["key"] for r in records if not any((r["key"], s) in final_pairs for s in range(num_samples))]
missing_samples = [f"{r['key']} sample {s}" for r in records if r["key"] not in missing
                   for s in range(num_samples) if (r["key"], s) not in final_pairs]
print(f"output: {out_file} ({len(final_lines)} lines; {written} written by this run)")
print("parse status:", ", ".join(f"{k} {v}" for k, v in sorted(status_counts.items())) or "-")
print("finish reason:", ", ".join(f"{k} {v}" for k, v in sorted(finish_counts.items())) or "-")
if run_seconds:
    print(f"this run: {run_tokens} generated tokens in {run_seconds:.1f} s = "
          f"{run_tokens / run_seconds:.1f} tokens/s ({backend}, {device}, {dtype})")
print(f"bad input lines skipped: {len(input_problems)}; prompts too long, skipped: {len(too_long)}"
      + (f" (ids {', '.join(r['key'] for r in too_long[:10])})" if too_long else ""))
if missing:
    print(f"WARNING: {len(missing)} input record(s) have no output line (e.g. {', '.join(missing[:5])}); "
          "grading the output alone scores only the lines it has")
if missing_samples:
    print(f"WARNING: {len(missing_samples)} sample(s) of ids in the output have no line (e.g. "
          f"{', '.join(missing_samples[:5])}); the evaluator scores a missing sample's entry as empty")
grading = grading_command(evaluator_file, out_file, colab=IN_COLAB)
print("\n".join(grading_advice(grading, final_lines, any(r["gold_field"] for r in records), samples=num_samples)))
if (missing and limit is None and not input_problems
        and all(r["own_id"] and r["gold_field"] for r in records)):
    print("to count the records without an output line as missing predictions:",
          grading.split(" --pred ")[0], "--pred", shlex.quote(str(out_file)), "--gold", shlex.quote(str(input_path)))
