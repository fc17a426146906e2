"""Input: several samples per entry (README "Several samples per prompt"). How a system's
samples are given on the command line (``--pred NAME=PATH[,PATH...]``, ``'NAME=GLOB'``,
``./PATH``: :class:`PredSpec`) and read from one file whose lines carry a ``sample`` field
(:class:`SampleField`, ``load_inputs(sample=...)``): labels, lines with and without the
field, the same (id, sample) twice, a sample that lacks an entry, combined files.

Reference triplets: A = Acme Inc -located_in-> City Y (0.9), B = Acme Inc -founded_by->
Person Z (0.8) (conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import ACME_A, ACME_B, run_main, write_jsonl
from helpers import gold_rec

import evaluate as ev

ROOT = Path(__file__).resolve().parents[1]
GOLD = ROOT / "gold" / "gold.jsonl"
BASE = ROOT / "predictions" / "base.jsonl"
FINETUNED = ROOT / "predictions" / "finetuned.jsonl"


# ---------------------------------------------------------------- --pred NAME=...

def test_a_plain_path_stays_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for text in ("pred.jsonl", "results/lr=1e-4.jsonl", "./lr=1e-4.jsonl", "/abs/x=y.jsonl", "-", "a b=c.jsonl"):
        spec = ev.PredSpec.parse(text)
        assert spec.name is None and spec.paths == (Path(text),), text


def test_name_equals_paths_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = ev.PredSpec.parse("ft=c.jsonl,a.jsonl,./b=1.jsonl")
    assert spec.name == "ft"
    assert spec.paths == (Path("c.jsonl"), Path("a.jsonl"), Path("b=1.jsonl"))
    assert ev.PredSpec.parse("Qwen-0.6B+lora_v2=x.jsonl").name == "Qwen-0.6B+lora_v2"


def test_a_glob_is_expanded_in_sorted_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for name in ("seed10.jsonl", "seed2.jsonl", "seed1.jsonl", "other.txt"):
        (tmp_path / "runs" / name).write_text("{}\n")
    spec = ev.PredSpec.parse("ft=runs/seed*.jsonl")
    # sorted as strings: seed1, seed10, seed2
    assert spec.paths == tuple(Path("runs") / n for n in ("seed1.jsonl", "seed10.jsonl", "seed2.jsonl"))


@pytest.mark.parametrize("text, message", [
    ("ft=runs/none*.jsonl", "the pattern 'runs/none*.jsonl' matches no file"),
    ("ft=a.jsonl,", "an empty part among the sample files of ft"),
    ("ft=,a.jsonl", "an empty part among the sample files of ft"),
    ("ft=a.jsonl,-", "stdin (-) among the sample files of ft"),
    ("ft=a.jsonl,a.jsonl", "the file a.jsonl is named twice"),
])
def test_name_equals_refusals(tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ev.InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        ev.PredSpec.parse(text)


def test_a_doubled_comma_is_a_comma_inside_a_sample_file_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert ev.PredSpec.parse("ft=./q,,r.jsonl,b.jsonl").paths == (Path("q,r.jsonl"), Path("b.jsonl"))
    assert ev.PredSpec.parse("ft=a,,,b").paths == (Path("a,"), Path("b"))  # ",," then the separator
    (tmp_path / "q,r.jsonl").write_text("{}\n")
    assert ev.PredSpec.parse("ft=q,,*.jsonl").paths == (Path("q,r.jsonl"),)  # a glob holding a comma


def test_unicode_letters_make_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("modèle", "模型-v2", "Qwen_0.6B+lora"):
        assert ev.PredSpec.parse(f"{name}=a.jsonl,b.jsonl").name == name
    assert ev.PredSpec.parse("runs/modèle=a.jsonl").name is None  # a "/": a path


def test_an_existing_file_that_reads_as_name_equals_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr=1e-4.jsonl").write_text("{}\n")
    with pytest.raises(ev.InputError, match=r"write \./lr=1e-4\.jsonl for the file"):
        ev.PredSpec.parse("lr=1e-4.jsonl")
    assert ev.PredSpec.parse("./lr=1e-4.jsonl").paths == (Path("lr=1e-4.jsonl"),)


@pytest.mark.parametrize("extra, message", [
    (["--name", "x"], "names its system (ft), and --name names the systems too"),
    (["--shard", "1/2"], "--shard is not available for a system of several samples"),
    (["--per-entry-jsonl", "rows.jsonl"], "--per-entry-jsonl is not available for a system of several samples"),
])
def test_cli_refusals_of_a_named_system(tmp_path, extra, message):
    rc, out, err = run_main("--pred", f"ft={FINETUNED},{BASE}", "--gold", GOLD, "--no-embeddings", "--no-report",
                            *extra, cwd=tmp_path)
    assert rc == 2 and message in err, err


@pytest.mark.parametrize("extra, message", [
    (["--shard", "1/2"], "--shard is not available for a system of several samples"),
    (["--per-entry-jsonl", "rows.jsonl"], "--per-entry-jsonl is not available for a system of several samples"),
])
def test_cli_refusals_of_a_file_of_samples(tmp_path, extra, message):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r1", 1), _lines("r2", 0), _lines("r2", 1)])
    rc, out, err = run_main("--pred", pred, "--gold", _gold(tmp_path), "--no-embeddings", "--quiet",
                            "--report", tmp_path / "r.json", *extra, cwd=tmp_path)
    assert rc == 2 and message in err and "(a 'sample' field: 0, 1)" in err, err
    assert not (tmp_path / "rows.jsonl").exists() and not (tmp_path / "r.json").exists()


def test_name_equals_one_file_is_a_single_run_that_takes_shard_and_rows(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rc, out, err = run_main("--pred", f"one={FINETUNED}", "--gold", GOLD, "--no-embeddings", "--quiet",
                            "--per-entry-jsonl", rows, "--report", tmp_path / "one.json", cwd=tmp_path)
    assert rc == 0 and len(rows.read_text().splitlines()) == 25, err
    rc, out, err = run_main("--pred", f"one={FINETUNED}", "--gold", GOLD, "--no-embeddings", "--quiet",
                            "--shard", "1/2", cwd=tmp_path)
    assert rc == 0 and (tmp_path / "reports" / "one.shard-1-of-2.json").is_file(), err


def test_a_sample_file_is_checked_up_front_and_named_whole(tmp_path):
    """A part that is no file (before: the directory ./q of ./q,r.jsonl, named 'q', or a
    missing second file found after scoring the first) is refused naming the argument, the
    part, and how a comma inside a name is written."""
    (tmp_path / "q").mkdir()
    (tmp_path / "q,r.jsonl").write_text(FINETUNED.read_text())
    rc, out, err = run_main("--pred", "m=./q,r.jsonl", "--gold", GOLD, "--no-embeddings", "--no-report", cwd=tmp_path)
    assert rc == 2 and err.splitlines()[-1] == (
        "error: --pred m=./q,r.jsonl: no such file: r.jsonl (its parts are split at each ','; a comma inside a file "
        "name is written ,,)"), err
    rc, out, err = run_main("--pred", f"m=./q,,r.jsonl,{BASE}", "--gold", GOLD, "--no-embeddings", "--no-report",
                            "--quiet", cwd=tmp_path)
    assert rc == 0 and "samples 2 (q,r, base)" in out, err
    rc, out, err = run_main("--pred", f"m={BASE},missing.jsonl", "--gold", GOLD, "--no-embeddings", "--no-report",
                            cwd=tmp_path)
    assert rc == 2 and f"--pred m={BASE},missing.jsonl: no such file: missing.jsonl" in err, err


def test_the_same_sample_file_in_another_spelling_or_through_a_link_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    link = tmp_path / "link.jsonl"
    link.symlink_to(BASE)
    shutil.copyfile(BASE, tmp_path / "ft.jsonl")
    rc, _, err = run_main("--pred", "m=ft.jsonl,./ft.jsonl", "--gold", GOLD, "--no-embeddings", "--no-report",
                          cwd=tmp_path)  # each spelling as given: a Path would drop the "./"
    assert rc == 2 and err.splitlines()[-1] == ("error: --pred m=ft.jsonl,./ft.jsonl: the file ft.jsonl is named "
                                                "twice (as ft.jsonl and ./ft.jsonl; each sample of m is one file)"), err
    for other in (f"{tmp_path}/d/../{os.path.relpath(BASE, tmp_path)}", str(link)):
        rc, out, err = run_main("--pred", f"m={BASE},{other}", "--gold", GOLD, "--no-embeddings", "--no-report",
                                cwd=tmp_path)
        assert rc == 2 and err.splitlines()[-1] == (
            f"error: --pred m={BASE},{other}: the file {BASE} is named twice (as {BASE} and {other}; each sample of "
            "m is one file)"), err


def test_systems_with_one_name_say_where_each_name_comes_from(tmp_path):
    s2 = tmp_path / "finetuned.jsonl"
    s2.write_text(FINETUNED.read_text())
    rc, out, err = run_main("--pred", f"m={BASE},{FINETUNED}", "--pred", f"m={s2}", "--gold", GOLD, "--no-embeddings",
                            "--no-report", cwd=tmp_path)
    assert rc == 2 and err.splitlines()[-1] == (
        f"error: two systems are named 'm': --pred m={BASE},{FINETUNED} (NAME=) and --pred m={s2} (NAME=); give each "
        "system its own name (another NAME=, or --name once per system)"), err
    rc, out, err = run_main("--pred", f"finetuned={BASE},{FINETUNED}", "--pred", s2, "--gold", GOLD,
                            "--no-embeddings", "--no-report", cwd=tmp_path)
    assert rc == 2 and f"two systems are named 'finetuned': --pred finetuned={BASE},{FINETUNED} (NAME=) and " \
        f"--pred {s2} (its file's stem)" in err and "--name 'finetuned' given" not in err, err


def test_the_log_names_every_sample_file_of_a_system(tmp_path):
    rc, out, err = run_main("--pred", BASE, "--pred", f"m={BASE},{FINETUNED}", "--gold", GOLD, "--no-embeddings",
                            "--no-report", "--bootstrap", "100", "--trials", "100", cwd=tmp_path)
    assert rc == 0 and f"system m: {BASE}, {FINETUNED}" in err.splitlines(), err


def test_a_directory_is_not_a_sample(tmp_path):
    (tmp_path / "d").mkdir()
    rc, out, err = run_main("--pred", f"ft={FINETUNED},{tmp_path / 'd'}", "--gold", GOLD, "--no-embeddings",
                            "--no-report", cwd=tmp_path)
    assert rc == 2 and "is a directory; the samples of a system are files" in err


def test_name_equals_one_file_names_the_system_and_its_default_report(tmp_path):
    rc, out, err = run_main("--pred", f"tuned={FINETUNED}", "--gold", GOLD, "--no-embeddings", "--quiet",
                            cwd=tmp_path)
    assert rc == 0, err
    report = json.loads((tmp_path / "reports" / "tuned.json").read_text())
    assert "samples" not in report  # one sample: a single run's report
    plain = tmp_path / "plain.json"
    assert run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--report", plain, cwd=tmp_path)[0] == 0
    assert report == json.loads(plain.read_text())


# ---------------------------------------------------------------- the sample field

def _lines(rid: str, sample, items=(ACME_A,)) -> dict:
    return {"id": rid, "triplets": list(items), "sample": sample}


def _gold(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "gold.jsonl", [gold_rec("r1", [ACME_A]), gold_rec("r2", [ACME_B])])


def test_several_labels_raise_sampled_input_with_the_labels_sorted(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", "b"), _lines("r1", 2), _lines("r1", 0), _lines("r2", 2)])
    with pytest.raises(ev.SampledInput) as exc:
        ev.load_inputs(pred, _gold(tmp_path))
    assert exc.value.labels == [0, 2, "b"]  # integers ascending, then strings


def test_one_label_everywhere_is_one_sample_read_as_before(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r2", 0, [ACME_B])])
    loaded = ev.load_inputs(pred, _gold(tmp_path))
    assert [e.pred.status for e in loaded.entries] == ["ok", "ok"]


def test_lines_with_and_without_the_field_are_refused_naming_the_lines(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), {"id": "r2", "triplets": [ACME_B]}, _lines("r2", 1)])
    with pytest.raises(ev.InputError, match=r"p\.jsonl: line 2 has no 'sample' field but line 1 has one"):
        ev.load_inputs(pred, _gold(tmp_path))


@pytest.mark.parametrize("value", [-1, 1.5, True, None, [0]])
def test_a_bad_label_is_refused_naming_file_line_and_field(tmp_path, value):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r2", value)])
    with pytest.raises(ev.InputError, match=r"p\.jsonl: line 2: field 'sample': expected an integer >= 0 or a "
                                            "string"):
        ev.load_inputs(pred, _gold(tmp_path))


def test_one_sample_reads_its_lines_and_a_missing_entry_is_missing(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r2", 0, [ACME_B]), _lines("r1", 1)])
    one = ev.load_inputs(pred, _gold(tmp_path), sample=1)
    assert [(e.gold.id, e.pred.status, e.pred.line) for e in one.entries] == [("r1", "ok", 3), ("r2", "missing", None)]
    assert [n["kind"] for n in one.notices] == ["missing_predictions"]
    assert "ids 'r2'" in one.notices[0]["message"]
    zero = ev.load_inputs(pred, _gold(tmp_path), sample=0)
    assert [(e.gold.id, e.pred.line) for e in zero.entries] == [("r1", 1), ("r2", 2)]


def test_one_sample_written_as_an_integer_and_as_a_string_is_refused_naming_two_lines(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r2", 0), _lines("r1", 1), _lines("r2", "1")])
    with pytest.raises(ev.InputError, match=r"p\.jsonl: lines 3 and 4 give the sample 1 once as the integer 1 and "
                                            r"once as the string \"1\": two samples that print alike"):
        ev.load_inputs(pred, _gold(tmp_path))


def test_the_same_id_and_sample_twice_names_the_sample(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r1", 0), _lines("r2", 0), _lines("r1", 1),
                                              _lines("r2", 1)])
    rc, out, err = run_main("--pred", pred, "--gold", _gold(tmp_path), "--no-embeddings", "--no-report")
    assert rc == 2 and f"{pred}: duplicate sample 0 prediction ids: 'r1' ('r1' on lines 1, 2); pass --duplicate-ids" in err, err


def test_the_same_id_and_sample_twice_is_a_duplicate(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r1", 1), _lines("r1", 0, [ACME_B]),
                                              _lines("r2", 0), _lines("r2", 1)])
    with pytest.raises(ev.InputError, match="duplicate sample 0 prediction ids: 'r1'"):
        ev.load_inputs(pred, _gold(tmp_path), sample=0)
    first = ev.load_inputs(pred, _gold(tmp_path), sample=0, duplicate_ids="first")
    assert first.entries[0].pred.line == 1 and first.duplicates_dropped == 1
    assert ev.load_inputs(pred, _gold(tmp_path), sample=1).duplicates_dropped == 0  # r1 once in sample 1


def test_a_combined_file_has_the_ids_of_every_line_in_every_sample(tmp_path):
    rows = [{**gold_rec("r2", [ACME_B]), "pred_parsed": [ACME_B], "sample": 0},
            {**gold_rec("r1", [ACME_A]), "pred_parsed": [ACME_A], "sample": 1},
            {**gold_rec("r2", [ACME_B]), "pred_parsed": [], "sample": 1}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    zero = ev.load_inputs(path, None, sample=0)
    # entries: r2 (first line 1), then r1 (first line 2); sample 0 has no line for r1
    assert [(e.gold.id, e.gold.line, e.pred.status) for e in zero.entries] == [("r2", 1, "ok"), ("r1", 2, "missing")]
    one = ev.load_inputs(path, None, sample=1)
    assert [(e.gold.id, e.gold.line, e.pred.items) for e in one.entries] == [("r2", 3, []), ("r1", 2, [ACME_A])]


def test_skip_bad_gold_leaves_an_entry_out_of_every_sample_when_one_of_its_lines_is_bad(tmp_path):
    """Line 3 (r1, sample 1) has gold null: its answer is not scored as missing against
    the other lines' gold; r1 is left out of every sample, as a one-sample run leaves it
    out, with one warning for the line and a notice naming the id and the line."""
    rows = [{**gold_rec("r1", [ACME_A]), "pred_parsed": [ACME_A], "sample": 0},
            {**gold_rec("r2", [ACME_B]), "pred_parsed": [ACME_B], "sample": 0},
            {**gold_rec("r1", None), "pred_parsed": [ACME_A], "sample": 1},  # type: ignore[arg-type]
            {**gold_rec("r2", [ACME_B]), "pred_parsed": [], "sample": 1},
            {**gold_rec("r1", [ACME_A]), "pred_parsed": [], "sample": 2},
            {**gold_rec("r2", [ACME_B]), "pred_parsed": [ACME_B], "sample": 2}]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    for sample in (0, 1, 2):
        loaded = ev.load_inputs(path, None, sample=sample, skip_bad_gold=True)
        assert [e.gold.id for e in loaded.entries] == ["r2"]
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", path, "--no-embeddings", "--skip-bad-gold", "--report", report)
    assert rc == 0, err
    data = json.loads(report.read_text())
    assert [r["id"] for r in data["per_entry"]] == ["r2"]
    assert [s["parse_status"] for s in data["per_entry"][0]["samples"]] == ["ok", "ok", "ok"]  # none is missing
    # r2: samples 0 and 2 found B, sample 1 predicted nothing: entity F1 1, 0, 1
    assert data["samples"]["metrics"]["hgr.micro.entity_f1"]["per_sample"] == [1.0, 0.0, 1.0]
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len([w for w in warnings if "line 3: gold triplets" in w]) == 1  # once, not once per sample
    left_out = (f"{path}: 1 entry left out of every sample, because one of its lines has bad gold (excluded: "
                "--skip-bad-gold; ids 'r1'; line 3): no sample is scored on it, as a run of one sample leaves such "
                "an entry out")
    assert [w for w in warnings if "left out of every sample" in w] == [f"warning: {left_out}"]
    assert {"kind": "excluded_gold_line", "message": left_out} in data["summary"]["notices"]
    assert not [n for n in data["summary"]["notices"] if n["kind"] == "missing_predictions"]


def test_samples_of_one_entry_with_other_prompts_or_gold_are_refused_naming_file_lines_and_id(tmp_path):
    """The samples of an entry answer one prompt (grounding is checked against it): one
    file with a 'sample' field, or combined files as samples, refused as for other gold."""
    def rows(prompt: str, gold=(ACME_A,)) -> list[dict]:
        return [{**gold_rec("r1", list(gold), prompt), "pred_parsed": [ACME_A]},
                {**gold_rec("r2", [ACME_B]), "pred_parsed": [ACME_B]}]
    mixed = [{**row, "sample": s} for s, prompt in enumerate(("Acme Inc is in City Y.", "Acme Inc."))
             for row in rows(prompt)]
    path = write_jsonl(tmp_path / "c.jsonl", mixed)
    rc, out, err = run_main("--pred", path, "--no-embeddings", "--no-report")
    assert rc == 2 and err.splitlines()[-1] == (
        f"error: {path}: line 1 (sample 0) and line 3 (sample 1) hold different prompts for entry 'r1' (1 entry "
        "differs: ids 'r1'): the samples of one system answer the same gold entries, each with one prompt"), err
    a = write_jsonl(tmp_path / "a.jsonl", rows("Acme Inc is in City Y."))
    b = write_jsonl(tmp_path / "b.jsonl", rows("Acme Inc."))
    rc, out, err = run_main("--pred", f"m={a},{b}", "--no-embeddings", "--no-report")
    assert rc == 2 and f"{a}: line 1 (a) and {b}: line 1 (b) hold different prompts for entry 'r1'" in err, err
    g = write_jsonl(tmp_path / "g.jsonl", rows("Acme Inc is in City Y.", [ACME_B]))
    rc, out, err = run_main("--pred", f"m={a},{g}", "--no-embeddings", "--no-report")
    assert rc == 2 and f"{a}: line 1 (a) and {g}: line 1 (g) hold different gold for entry 'r1'" in err, err
    same = write_jsonl(tmp_path / "same.jsonl", rows("Acme Inc is in City Y."))
    assert run_main("--pred", f"m={a},{same}", "--no-embeddings", "--no-report")[0] == 0


def test_a_combined_file_of_samples_needs_ids(tmp_path):
    rows = [{**gold_rec(None, [ACME_A]), "pred_parsed": [ACME_A], "sample": s} for s in (0, 1)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(ev.InputError, match=r"c\.jsonl: line 1 has no id"):
        ev.load_inputs(path, None, sample=0)


def test_an_unreadable_line_belongs_to_the_sample_its_raw_text_names(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r2", 0), _lines("r1", 1),
                                              b'{"id": "r2", "sample": 1, "triplets": [oops\n',
                                              b'{"id": "r2", "triplets": [oops\n'])
    one = ev.load_inputs(pred, _gold(tmp_path), sample=1)
    assert [(e.gold.id, e.pred.status, e.pred.line) for e in one.entries] == [("r1", "ok", 3),
                                                                              ("r2", "unparseable", 4)]
    assert any("line 5" in p and "its sample cannot be read: not scored" in p for p in one.problems)


def test_the_cli_scores_a_file_of_samples_as_one_system(tmp_path):
    rows = [{**json.loads(x), "sample": s} for s, path in enumerate((FINETUNED, BASE))
            for x in path.read_text().splitlines() if not (s == 1 and json.loads(x)["id"] in ("s05", "s09"))]
    pred = write_jsonl(tmp_path / "p.jsonl", rows)
    report = tmp_path / "r.json"
    rc, out, err = run_main("--pred", pred, "--gold", GOLD, "--no-embeddings", "--report", report, "--quiet")
    assert rc == 0, err
    data = json.loads(report.read_text())
    assert data["samples"]["count"] == 2 and data["samples"]["labels"] == [0, 1]
    assert "estimate ± sd (2 samples)" in out
    # sample 1 lacks s05 and s09: scored as empty predictions, with a notice naming the sample and the ids
    assert [n for n in data["summary"]["notices"] if n["kind"] == "missing_predictions"] == [{
        "kind": "missing_predictions", "message": f"sample 1: {pred}: 2 gold entries have no prediction line, "
                                                  "scored as empty predictions (ids 's05', 's09')"}]
    assert f"missing_predictions: sample 1: {pred}: 2 gold entries" in out
    assert [r["samples"][1]["parse_status"] for r in data["per_entry"] if r["id"] in ("s05", "s09")] == ["missing"] * 2
    with pytest.raises(ev.InputError, match="--shard is not available for a system of several samples"):
        ev.run(ev.RunConfig(pred=pred, gold=GOLD, no_embeddings=True, shard=(1, 2), report=tmp_path / "s.json"))


def test_a_file_of_samples_cannot_be_one_sample_of_another_system(tmp_path):
    pred = write_jsonl(tmp_path / "p.jsonl", [_lines("r1", 0), _lines("r1", 1), _lines("r2", 0), _lines("r2", 1)])
    write_jsonl(tmp_path / "q.jsonl", [_lines("r1", 0), _lines("r2", 0)])
    rc, out, err = run_main("--pred", f"ft={pred},{pred.with_name('q.jsonl')}", "--gold", _gold(tmp_path),
                            "--no-embeddings", "--no-report")
    assert rc == 2 and "a file of several samples is a system of its own" in err, err


def test_combined_sample_files_must_hold_the_same_entries(tmp_path):
    full = [{**gold_rec(r, [ACME_A]), "pred_parsed": [ACME_A]} for r in ("r1", "r2")]
    a = write_jsonl(tmp_path / "a.jsonl", full)
    b = write_jsonl(tmp_path / "b.jsonl", full[:1])
    rc, out, err = run_main("--pred", f"ft={a},{b}", "--no-embeddings", "--no-report", cwd=tmp_path)
    assert rc == 2 and "the samples do not hold the same entries: a and b differ at ids 'r2'" in err, err
    assert "give the gold file with --gold" in err
    os.remove(b)


def test_byte_identical_sample_files_are_noted_and_best_of_k_is_labelled_for_what_it_bounds(tmp_path):
    # review 4, N4: A.jsonl and a.jsonl are copies of finetuned (same bytes), b.jsonl is base:
    # 3 samples as given, one notice naming the two copies; best of k picks per entry the
    # sample with the best composite, so it bounds the macro composite but a micro number can
    # be below a sample's own (entity recall: finetuned 65/87 = 0.7471, best of 3 64/87 = 0.7356)
    (tmp_path / "preds").mkdir()
    for name, source in (("A", FINETUNED), ("a", FINETUNED), ("b", BASE)):
        shutil.copyfile(source, tmp_path / "preds" / f"{name}.jsonl")
    rc, out, err = run_main("--pred", "S=preds/*.jsonl", "--gold", GOLD, "--no-embeddings", "--report", "r.json",
                            cwd=tmp_path)
    assert rc == 0, err
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    sha = report["summary"]["inputs"]["samples"][0]["sha256"]
    files = [str((tmp_path / "preds" / f"{n}.jsonl").resolve()) for n in ("A", "a")]
    assert report["summary"]["notices"] == [ev.notice(
        "same_samples", f"the sample files {files[0]} and {files[1]} have the same bytes (sha256 {sha[:8]}): each "
        "counts as a sample (the numbers stand as computed); probably a copy by mistake")]
    recall = report["samples"]["metrics"]["hgr.micro.entity_recall"]
    assert recall["per_sample"][0] == pytest.approx(65 / 87, abs=1e-15)
    assert recall["best_of_k"] == pytest.approx(64 / 87, abs=1e-15) and recall["best_of_k"] < max(recall["per_sample"])
    composite = report["samples"]["metrics"]["hgr.macro.composite"]
    assert composite["best_of_k"] >= max(composite["per_sample"])
    assert "an upper bound of the macro composite only" in report["samples"]["notes"]["best_of_k"]
    assert "best of 3 (per entry, by composite)" in out and "upper bound)" not in out
