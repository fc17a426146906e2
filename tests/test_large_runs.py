"""The "Large runs" section: worker processes (--workers), shards (--shard K/N) and their
merge (--merge): every way of splitting a run gives the report of the run in one piece,
byte for byte.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import NLTK_DATA, ROOT, SHARED, write_jsonl

import evaluate as ev  # noqa: E402

if NLTK_DATA.is_dir():  # before nltk is first imported
    os.environ.setdefault("NLTK_DATA", str(NLTK_DATA))

PARITY = SHARED / "data" / "parity-sample" / "combined.jsonl"

ONTOLOGY = {"id": "o", "title": "t", "concepts": [{"label": "City"}, {"label": "Country"}],
            "relations": [{"label": "capital"}, {"label": "country"}, {"label": "leader"}]}
PLACES = [("Paris", "France"), ("Rome", "Italy"), ("Berlin", "Germany"), ("Oslo", "Norway"), ("Bern", "Swiss"),
          ("Lima", "Peru"), ("Quito", "Ecuador"), ("Cairo", "Egypt")]


def _corpus(folder: Path, n: int = 150, seed: int = 3) -> tuple[Path, Path, Path]:
    """A seeded Text2KGBench-style input of ``n`` sentences (gold, predictions, ontology):
    correct, reversed, misspelt, out-of-ontology, empty and unparseable predictions."""
    rng = random.Random(seed)
    gold, pred = [], []
    for k in range(n):
        city, country = rng.choice(PLACES)
        rel = rng.choice(("capital", "country", "leader"))
        truth = [[country, rel, city]] + ([[city, "country", country]] if rng.random() < 0.4 else [])
        roll = rng.random()
        guess: object = (truth if roll < 0.35 else [[city, rel, country]] if roll < 0.5
                         else [[country.lower() + "x", rel, city]] if roll < 0.65
                         else [[country, "mayor", city], *truth] if roll < 0.8
                         else [] if roll < 0.9 else "not json")
        gold.append({"id": f"s{k}", "sent": f"{city} and {country}, item {k}.",
                     "triples": [dict(zip(("sub", "rel", "obj"), t)) for t in truth]})
        pred.append({"id": f"s{k}", "triples": guess} if not isinstance(guess, str) else
                    {"id": f"s{k}", "output": guess})
    folder.mkdir(parents=True, exist_ok=True)
    onto = folder / "onto.json"
    onto.write_text(json.dumps(ONTOLOGY), encoding="utf-8")
    return write_jsonl(folder / "gold.jsonl", gold), write_jsonl(folder / "pred.jsonl", pred), onto


def _report_bytes(tmp_path: Path, name: str, *args: str) -> bytes:
    report = tmp_path / name
    assert ev.main([*args, "--no-embeddings", "--quiet", "--report", str(report)]) == 0
    return report.read_bytes()


def _inputs(tmp_path: Path) -> list[tuple[str, list[str]]]:
    """(name, CLI input arguments) with --metrics all: the seeded corpus (every family but
    the NLTK ones when NLTK is missing) and the parity sample (when ../shared is present)."""
    gold, pred, onto = _corpus(tmp_path / "corpus")
    out = [("corpus", ["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "all"])]
    if PARITY.is_file():
        out.append(("parity", ["--pred", str(PARITY), "--metrics", "all"]))
    return out


def test_reports_are_byte_identical_for_1_2_and_3_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 7)   # many chunk boundaries, uneven last chunk
    for name, args in _inputs(tmp_path):
        one = _report_bytes(tmp_path, f"{name}-1.json", *args, "--workers", "1")
        report = json.loads(one)
        families = report["summary"]["config"]["metric_families"]
        assert {"hgr", "strict", "per-relation", "text2kgbench"} <= set(families) or name == "parity"
        if ev.nltk_missing() is None:
            assert "webnlg2020" in families
        for workers in (2, 3):
            assert _report_bytes(tmp_path, f"{name}-{workers}.json", *args, "--workers", str(workers)) == one, \
                (name, workers)


def test_a_comparison_of_two_systems_of_several_samples_is_byte_identical_for_1_2_and_3_workers(
        tmp_path, monkeypatch, capsys):
    # system a: one file of 3 samples (a 'sample' field: the predictions of three seeded corpora
    # on the gold of the first); system b: two sample files; both scored, their consensus too,
    # by the workers, then compared with a fixed seed (two-stage bootstrap, randomisation)
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 7)
    gold, _, onto = _corpus(tmp_path / "c0", n=60)
    preds = [[json.loads(x) for x in _corpus(tmp_path / f"c{s}", n=60, seed=3 + s)[1].read_text().splitlines()]
             for s in range(5)]
    multi = write_jsonl(tmp_path / "a.jsonl", [{**row, "sample": s} for s in range(3) for row in preds[s]])
    files = [write_jsonl(tmp_path / f"b{s}.jsonl", preds[s]) for s in (3, 4)]
    args = ["--pred", str(multi), "--pred", f"b={files[0]},{files[1]}", "--gold", str(gold), "--ontology", str(onto),
            "--bootstrap", "200", "--trials", "300", "--seed", "5"]
    outputs = []
    for workers in ("1", "2", "3"):
        capsys.readouterr()
        report = _report_bytes(tmp_path, f"w{workers}.json", *args, "--workers", workers)
        outputs.append((report, capsys.readouterr().out))
    assert outputs[0] == outputs[1] == outputs[2]
    data = json.loads(outputs[0][0])
    assert [s["samples"]["count"] for s in data["systems"].values()] == [3, 2]
    assert data["comparison"]["samples"]["b"]["count"] == 2


def test_chunks_cover_the_input_in_order():
    for n in (1, 2, 63, 64, 1000, 20_000):
        for workers in (1, 2, 3, 16):
            ranges = ev._chunks(n, workers)
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            assert all(0 < stop - start <= ev.WORKER_CHUNK_MAX for start, stop in ranges)
    assert len(ev._chunks(20_000, 2)) == 20_000 // 256 + 1   # 2 workers: 8 * 2 chunks would be 1250 each


class FailsOnMarkedEntries(ev.MetricFamily):
    """A family that cannot run on entries whose id ends in "7" (as with missing NLTK data)."""

    name = key = "fails-on-7"

    def entry_stats(self, entry, score, ctx):
        if entry.gold.id.endswith("7"):
            raise ev.FamilyUnavailable(self.name, f"entry {entry.gold.id} needs data that is missing")
        return {"entries": 1}

    def finish(self, record):
        return {"entries": record.get("entries", 0)}

    def format(self, section, report):
        return f"entries {section['entries']}"


def test_a_family_skipped_in_one_chunk_is_skipped_in_all_with_the_first_notice(tmp_path, monkeypatch):
    monkeypatch.setitem(ev.FAMILIES, FailsOnMarkedEntries.name, FailsOnMarkedEntries)
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 5)
    gold, pred, onto = _corpus(tmp_path / "c", n=40)
    loaded = ev.load_inputs(pred, gold)
    ctx = ev.ScoringContext(ev.Similarity(), "triples", None, 0.5, skip_unavailable=True)
    names = ("hgr", "strict", "fails-on-7")
    one = ev.score_entries(loaded.entries, ev.families_for(names), ctx)
    # entries s0..s39: the first id ending in 7 is s7 (chunk 2 of 5-entry chunks); s17, s27, s37 fail later
    assert one.skipped == ["fails-on-7"] and len(one.notices) == 1 and "entry s7 " in one.notices[0]["message"]
    for workers in (2, 3):
        split = ev.score_entries_parallel(loaded.entries, ev.families_for(names), ctx, workers=workers)
        assert split.skipped == one.skipped and split.notices == one.notices
        assert split.rows == one.rows
        assert ev.records_to_json(split.records) == ev.records_to_json(one.records)
        assert "fails-on-7" not in split.records and all("fails-on-7" not in r["stats"] for r in split.rows)


def test_an_input_error_in_a_worker_is_the_runs_input_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 5)
    monkeypatch.setitem(ev.FAMILIES, FailsOnMarkedEntries.name, FailsOnMarkedEntries)
    gold, pred, onto = _corpus(tmp_path / "c", n=40)
    loaded = ev.load_inputs(pred, gold)
    ctx = ev.ScoringContext(ev.Similarity(), "triples", None, 0.5)  # no skip: the family was asked for
    with pytest.raises(ev.FamilyUnavailable, match="entry s7 needs data") as exc:
        ev.score_entries_parallel(loaded.entries, ev.families_for(("hgr", "fails-on-7")), ctx, workers=2)
    assert exc.value.family == "fails-on-7"


@pytest.mark.parametrize("nth", [1, 2])
def test_a_signal_held_while_the_pool_forks_stops_and_reaps_its_workers(monkeypatch, nth):
    """Ctrl-C that arrives while start_pool forks (held until the forks are done) is raised
    when it is let through, after the nth fork, and the workers already forked are killed
    and reaped before it goes on: none is left running or unreaped."""
    forked: list[int] = []
    real_fork = ev.ForkPool.fork

    def fork(pool, fn):
        real_fork(pool, fn)
        forked.append(pool.workers[-1][0])
        if len(forked) == nth:
            # to this thread, which start_pool blocks it in (a signal to the process would go to
            # another thread of the test runner, if any, and be handled at once)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    monkeypatch.setattr(ev.ForkPool, "fork", fork)
    with pytest.raises(KeyboardInterrupt):
        ev.start_pool(3, abs)
    assert len(forked) == 3
    for pid in forked:
        with pytest.raises(ChildProcessError):   # reaped already: no such child left
            os.waitpid(pid, os.WNOHANG)


def test_a_refused_fork_stops_the_run_with_one_line_and_reaps_the_workers_already_forked(tmp_path, monkeypatch,
                                                                                          capsys):
    """The system refuses the third fork (EAGAIN: the limit on processes, ulimit -u): the run
    ends with exit status 1 and one line naming the worker and the cause, no traceback, no
    report; the two workers forked before are reaped and the garbage collector is not left
    frozen."""
    forked: list[int] = []
    real_fork = ev.ForkPool.fork

    def fork(pool, fn):
        if len(forked) == 2:
            raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        real_fork(pool, fn)
        forked.append(pool.workers[-1][0])

    monkeypatch.setattr(ev.ForkPool, "fork", fork)
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    gold, pred, _ = _corpus(tmp_path / "c", n=40)
    report = tmp_path / "r.json"
    status = ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet", "--workers", "4",
                      "--report", str(report)])
    err = capsys.readouterr().err
    assert status == 1 and not report.exists() and "Traceback" not in err
    assert err == ("error: cannot start worker process 3 of 4 (Resource temporarily unavailable: the system's limit "
                   "on processes, ulimit -u, or its memory); no report written: rerun with fewer --workers (or "
                   "--workers 1)\n")
    assert len(forked) == 2 and gc.get_freeze_count() == 0
    for pid in forked:
        with pytest.raises(ChildProcessError):   # reaped already
            os.waitpid(pid, os.WNOHANG)


def _count_forks(monkeypatch) -> list[int]:
    """The pids of the workers ForkPool forks from now on, in order (a list that grows)."""
    forked: list[int] = []
    real_fork = ev.ForkPool.fork

    def fork(pool, fn):
        real_fork(pool, fn)
        forked.append(pool.workers[-1][0])

    monkeypatch.setattr(ev.ForkPool, "fork", fork)
    return forked


@pytest.mark.parametrize(("entries", "asked", "started"), [(200, 50, 4), (128, 8, 2), (129, 8, 3), (64, 8, 0)])
def test_a_scoring_pool_has_at_most_one_worker_per_64_entries_begun(tmp_path, monkeypatch, entries, asked,
                                                                     started):
    """--workers above the work: ceil(entries / 64) workers at most (200 entries: 4; 64 or
    fewer: scored in process, none forked), and the same scores as one process."""
    forked = _count_forks(monkeypatch)
    rows = [{"id": f"e{k}", "triplets": [{"source": {"title": f"A{k % 7}", "type": "t"},
                                          "relation": {"type": "r", "weight": 1.0},
                                          "target": {"title": f"B{k % 5}", "type": "t"}}]} for k in range(entries)]
    gold = write_jsonl(tmp_path / "g.jsonl", [dict(r, prompt="p") for r in rows])
    pred = write_jsonl(tmp_path / "p.jsonl", rows[1:] + rows[:1])
    loaded = ev.load_inputs(pred, gold)
    ctx = ev.ScoringContext(ev.Similarity(), "hgr", None, 0.5)
    families = ev.families_for(("hgr", "strict"))
    parallel = ev.score_entries_parallel(loaded.entries, families, ctx, workers=asked)
    assert len(forked) == started
    one = ev.score_entries(loaded.entries, ev.families_for(("hgr", "strict")), ctx)
    assert ev.records_to_json(parallel.records) == ev.records_to_json(one.records)


def test_a_reading_pool_has_no_more_workers_than_ranges(monkeypatch):
    forked = _count_forks(monkeypatch)
    context = ev._fork_context()
    assert list(ev._forked_map(abs, iter([-3, 4, -5]), workers=10, context=context)) == [3, 4, 5]
    assert len(forked) == 3
    assert list(ev._forked_map(abs, iter([]), workers=10, context=context)) == [] and len(forked) == 3


def test_default_workers_is_the_cpu_affinity():
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert ev.default_workers() == expected
    assert ev.RunConfig.from_args(ev.build_parser().parse_args(["--pred", "x"])).workers is None
    assert ev.RunConfig.from_args(ev.build_parser().parse_args(["--pred", "x", "--workers", "3"])).workers == 3


class FailsOnS21(FailsOnMarkedEntries):
    """Cannot run on entry s21 only (in shard 2 of 3 of 40 entries)."""

    name = key = "fails-on-s21"

    def entry_stats(self, entry, score, ctx):
        if entry.gold.id == "s21":
            raise ev.FamilyUnavailable(self.name, "entry s21 needs data that is missing")
        return {"entries": 1}


def _shards(tmp_path: Path, name: str, args: list[str], n: int, *extra: str) -> list[Path]:
    parts = []
    for k in range(1, n + 1):
        part = tmp_path / f"{name}.shard-{k}-of-{n}.json"
        assert ev.main([*args, *extra, "--shard", f"{k}/{n}", "--no-embeddings", "--quiet", "--report", str(part)]) == 0
        parts.append(part)
    return parts


def _merge(tmp_path: Path, parts: list[Path], out: str = "merged.json") -> bytes:
    assert ev.main(["--merge", *map(str, parts), "--quiet", "--report", str(tmp_path / out)]) == 0
    return (tmp_path / out).read_bytes()


def test_three_shards_merged_equal_the_single_run_byte_for_byte(tmp_path):
    for name, args in _inputs(tmp_path):
        whole = _report_bytes(tmp_path, f"{name}.json", *args)
        parts = _shards(tmp_path, name, args, 3)
        assert _merge(tmp_path, parts[::-1], f"{name}-merged.json") == whole, name   # any order on the command line
        sections = json.loads(whole)
        first = json.loads(parts[0].read_bytes())
        block = first["shard"]
        n = sections["summary"]["n_entries"]
        assert (block["index"], block["count"], block["entries"], block["start"], block["stop"]) == (1, 3, n, 0, n // 3)
        assert first["summary"]["n_entries"] == n // 3
        assert first["per_entry"] == sections["per_entry"][:n // 3]  # contiguous: a slice of the whole report
        assert any(x["kind"] == "shard" for x in first["summary"]["notices"])
        # the part's family records rebuild its own sections (its report is a report of its entries)
        families = ev.families_for(block["config"]["metric_families"])
        records = ev.records_from_json(block["records"])
        for family in families:
            if family.key != "summary":
                assert first[family.key] == json.loads(json.dumps(family.finish(records[family.name]))), family.name


def test_limit_applies_before_sharding_and_more_shards_than_entries(tmp_path):
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    args = ["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "hgr,strict"]
    whole = _report_bytes(tmp_path, "limit.json", *args, "--limit", "5")
    parts = _shards(tmp_path, "limit", args, 7, "--limit", "5")   # 5 entries in 7 shards: two shards are empty
    sizes = [json.loads(p.read_bytes())["summary"]["n_entries"] for p in parts]
    assert sizes == [0, 1, 1, 0, 1, 1, 1]   # floor(k*5/7) - floor((k-1)*5/7)
    assert _merge(tmp_path, parts) == whole


def test_a_family_skipped_in_one_shard_is_left_out_of_the_merged_run(tmp_path, monkeypatch):
    monkeypatch.setitem(ev.FAMILIES, FailsOnS21.name, FailsOnS21)
    gold, pred, onto = _corpus(tmp_path / "c", n=40)
    args = ["--pred", str(pred), "--gold", str(gold), "--metrics", "all"]
    whole = _report_bytes(tmp_path, "whole.json", *args)
    skipped = [n for n in json.loads(whole)["summary"]["notices"] if "fails-on-s21" in n["message"]]
    assert len(skipped) == 1 and "entry s21 needs data" in skipped[0]["message"]
    parts = _shards(tmp_path, "skip", args, 3)
    assert [json.loads(p.read_bytes())["shard"]["skipped"] for p in parts] == [[], ["fails-on-s21"], []]
    assert _merge(tmp_path, parts) == whole


def _refused(tmp_path: Path, capsys, *parts: Path) -> str:
    assert ev.main(["--merge", *map(str, parts), "--quiet", "--report", str(tmp_path / "m.json")]) == 2
    assert not (tmp_path / "m.json").exists()
    return capsys.readouterr().err


def test_merge_refuses_missing_repeated_and_foreign_parts_naming_them(tmp_path, capsys):
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    args = ["--pred", str(pred), "--gold", str(gold), "--metrics", "hgr"]
    p1, p2, p3 = _shards(tmp_path, "run", args, 3)
    assert "1 of 3 shard(s) missing: 2/3 (given: 1/3, 3/3)" in _refused(tmp_path, capsys, p1, p3)
    assert f"shard 3/3 given twice: {p3} and {p3}" in _refused(tmp_path, capsys, p1, p2, p3, p3)
    (tmp_path / "o").mkdir()
    foreign_config = _shards(tmp_path / "o", "cfg", args + ["--align-accept", "0.6"], 3)[1]
    err = _refused(tmp_path, capsys, p1, foreign_config, p3)
    assert f"--merge {foreign_config}: a part of another run than {p1}" in err and "config.align_accept: 0.5 vs 0.6" in err
    gold2 = tmp_path / "o" / "gold.jsonl"   # same name, other content
    gold2.write_bytes(gold.read_bytes().replace(b"item 3.", b"item three."))
    foreign_input = _shards(tmp_path / "o", "inp", ["--pred", str(pred), "--gold", str(gold2), "--metrics", "hgr"], 3)[1]
    err = _refused(tmp_path, capsys, p1, foreign_input, p3)
    assert "first difference: source.inputs.gold.sha256: " in err
    other_count = _shards(tmp_path / "o", "n4", args, 4)[1]
    assert "first difference: count: 3 vs 4" in _refused(tmp_path, capsys, p1, other_count, p3)
    whole = tmp_path / "whole.json"
    whole.write_bytes(_report_bytes(tmp_path, "whole.json", *args))
    assert f"--merge {whole}: not a partial report" in _refused(tmp_path, capsys, p1, whole, p3)
    old = json.loads(p2.read_bytes())
    old["shard"]["config"]["versions"]["kg-triplet-eval"] = "0.0.1"
    old_part = tmp_path / "old.shard-2-of-3.json"
    old_part.write_text(json.dumps(old), encoding="utf-8")
    assert f"--merge {old_part}: written by kg-triplet-eval 0.0.1" in _refused(tmp_path, capsys, p1, old_part, p3)
    absent = tmp_path / "run.shard-2-of-3.absent.json"
    err = _refused(tmp_path, capsys, p1, absent, p3)
    assert f"--merge {absent}: no such file (a part of the run" in err and "Errno" not in err


def test_shard_and_merge_default_paths_and_contradictions(tmp_path, monkeypatch, capsys):
    gold, pred, onto = _corpus(tmp_path / "c", n=12)
    monkeypatch.chdir(tmp_path)
    for k in (1, 2):
        assert ev.main(["--pred", str(pred), "--gold", str(gold), "--shard", f"{k}/2", "--no-embeddings",
                        "--quiet"]) == 0
    parts = [Path("reports") / f"pred.shard-{k}-of-2.json" for k in (1, 2)]
    assert all(p.is_file() for p in parts)
    assert ev.main(["--merge", *map(str, parts), "--quiet"]) == 0
    assert ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet",
                    "--report", "whole.json"]) == 0
    assert Path("reports/pred.json").read_bytes() == Path("whole.json").read_bytes()
    capsys.readouterr()
    assert ev.main(["--merge", str(parts[0]), "--pred", str(pred)]) == 2
    assert "--merge combines partial reports and scores nothing: it takes no --pred" in capsys.readouterr().err
    assert ev.main(["--pred", str(pred), "--gold", str(gold), "--shard", "1/2", "--no-report"]) == 2
    assert "--shard writes a partial report" in capsys.readouterr().err
    assert ev.main(["--merge", str(parts[0]), str(parts[1]), "--report", str(parts[0])]) == 2
    assert "is one of the input files" in capsys.readouterr().err
    for bad in ("0/2", "3/2", "2", "a/b"):
        with pytest.raises(SystemExit):
            ev.build_parser().parse_args(["--pred", "x", "--shard", bad])


def test_merge_and_compare_never_overwrite_the_inputs_their_parts_record(tmp_path, capsys):
    # --report given explicitly: the parts' own predictions and gold (recorded in
    # summary.inputs, not on the command line) are refused like a single run's inputs.
    gold, pred = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    shutil.copy(ROOT / "gold" / "gold.jsonl", gold)
    shutil.copy(ROOT / "predictions" / "finetuned.jsonl", pred)
    before = {p: p.read_bytes() for p in (gold, pred)}
    parts = _shards(tmp_path, "run", ["--pred", str(pred), "--gold", str(gold)], 2)
    capsys.readouterr()
    for target in (gold, pred):
        assert ev.main(["--merge", *map(str, parts), "--quiet", "--report", str(target)]) == 2
        assert f"--report {target}: is one of the input files; refusing to overwrite it" in capsys.readouterr().err
        assert ev.main(["--compare", *map(str, parts), "--bootstrap", "100", "--quiet", "--report", str(target)]) == 2
        assert "is one of the input files" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (gold, pred)} == before


def test_an_explicit_report_path_replaces_only_an_empty_file_or_a_report(tmp_path, capsys):
    args = ["--pred", str(ROOT / "predictions" / "finetuned.jsonl"), "--gold", str(ROOT / "gold" / "gold.jsonl"),
            "--no-embeddings", "--quiet", "--report"]
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    other_preds = tmp_path / "other.jsonl"
    other_preds.write_bytes((ROOT / "predictions" / "base.jsonl").read_bytes())
    for kept in (notes, other_preds):
        before = kept.read_bytes()
        assert ev.main([*args, str(kept)]) == 2
        assert (f"--report {kept}: exists and is not a kg-triplet-eval report (a report is a JSON object whose "
                'first key is "summary" or "systems"); refusing to overwrite it') in capsys.readouterr().err
        assert kept.read_bytes() == before
    # a JSON object that merely starts with "summary" is not one of our reports: kept (issue 17 item 7)
    lookalike = tmp_path / "lookalike.json"
    lookalike.write_text(json.dumps({"summary": {"n_entries": 1}}, indent=4), encoding="utf-8")
    before = lookalike.read_bytes()
    assert ev.main([*args, str(lookalike)]) == 2 and lookalike.read_bytes() == before
    assert f"--report {lookalike}: exists and is not a kg-triplet-eval report (it starts like one" in \
        capsys.readouterr().err
    empty, report = tmp_path / "empty.json", tmp_path / "report.json"
    empty.write_bytes(b"")
    assert ev.main([*args, str(report)]) == 0  # a report of ours, laid out by another tool: replaced
    report.write_text(json.dumps(json.loads(report.read_bytes()), indent=4), encoding="utf-8")
    for target in (empty, report):
        assert ev.main([*args, str(target)]) == 0
        assert json.loads(target.read_bytes())["summary"]["n_entries"] == 25


def _summary_text(capsys: pytest.CaptureFixture[str]) -> str:
    """The printed summary of the last run (its 'report written to PATH' line left out)."""
    return "\n".join(line for line in capsys.readouterr().out.splitlines() if not line.startswith("report written"))


def test_rows_kept_on_disk_give_the_same_report_bytes(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(ev.FAMILIES, FailsOnS21.name, FailsOnS21)   # a family dropped after rows were spooled
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 6)
    gold, pred, onto = _corpus(tmp_path / "c", n=40)
    args = ["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "all"]
    capsys.readouterr()
    in_memory = _report_bytes(tmp_path, "memory.json", *args, "--workers", "1")
    text = _summary_text(capsys)
    assert b'"fails-on-s21"' not in in_memory and b"fails-on-s21 skipped" in in_memory
    assert "composite" in text and " of 40 entries)" in text
    monkeypatch.setattr(ev, "SPOOL_MIN_ENTRIES", 1)
    for workers in ("1", "2"):
        assert _report_bytes(tmp_path, f"spooled-{workers}.json", *args, "--workers", workers) == in_memory
        # the "(k of n entries)" counts come from the spool's tally, not from its rows
        assert _summary_text(capsys) == text


def test_per_entry_jsonl_and_summary_only(tmp_path, capsys):
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    args = ["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "hgr,strict,text2kgbench"]
    whole = json.loads(_report_bytes(tmp_path, "whole.json", *args))
    rows_path = tmp_path / "out" / "rows.jsonl"
    split = json.loads(_report_bytes(tmp_path, "split.json", *args, "--per-entry-jsonl", str(rows_path)))
    lines = rows_path.read_bytes().splitlines()
    assert len(lines) == 30 and [json.loads(x) for x in lines] == whole["per_entry"]
    assert split.pop("per_entry_jsonl") == {"path": str(rows_path.resolve()), "rows": 30,
                                            "sha256": hashlib.sha256(rows_path.read_bytes()).hexdigest()}
    rest = {k: v for k, v in whole.items() if k != "per_entry"}
    assert split == rest and list(split) == list(rest)
    assert json.loads(_report_bytes(tmp_path, "summary.json", *args, "--summary-only")) == rest
    capsys.readouterr()
    assert ev.main([*args, "--summary-only", "--per-entry-jsonl", "x.jsonl", "--no-embeddings"]) == 2
    assert "--per-entry-jsonl x.jsonl contradicts --summary-only" in capsys.readouterr().err
    assert ev.main([*args, "--summary-only", "--shard", "1/2", "--no-embeddings"]) == 2
    assert "--summary-only is not available with --shard/--merge" in capsys.readouterr().err


def test_report_text_is_orjson_layout_with_the_json_modules_content():
    import orjson
    data = {"summary": {"a": 1e-05, "b": 1e16, "c": 0.1 + 0.2, "d": None, "e": "é ✓", "f": [], "g": {}},
            "per_entry": [{"x": [1, 2.5], "y": {"z": -0.0}}, {}]}
    text = ev.report_json(data)
    assert text.encode() == orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"
    assert json.loads(text) == data and text.startswith('{\n  "summary": {\n    "a": ')
    streamed = b"".join(ev.report_chunks({**data, "per_entry": iter(data["per_entry"])}))
    assert streamed == text.encode()
    assert b"".join(ev.report_chunks({"per_entry": iter([])})) == orjson.dumps({"per_entry": []},
                                                                                option=orjson.OPT_INDENT_2) + b"\n"
    # where orjson cannot write a value, the json module does, with the same content
    odd = {"big": 2 ** 70, "lone": "\ud800", "keys": {1: "one"}}
    assert json.loads(ev.report_json(odd)) == {"big": 2 ** 70, "lone": "\ud800", "keys": {"1": "one"}}
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="not JSON compliant"):
            ev.report_json({"summary": {"x": [1.0, {"y": bad}]}})
        with pytest.raises(ValueError, match="not JSON compliant"):
            b"".join(ev.report_chunks({"per_entry": iter([{"m": bad}])}))


def test_row_tally_counts_what_the_summary_shows():
    rows = [{"parse_status": "ok", "invalid_items": ["[0].target: missing", "[3].target: missing"],
             "invalid_gold_items": [], "gold_line": 1},
            {"parse_status": "unparseable", "invalid_items": [], "invalid_gold_items": ["[1].source: missing"],
             "gold_line": 7}]
    tally = ev.RowTally.of(rows[:1]).merge(ev.RowTally.of(rows[1:]))
    assert tally == ev.RowTally.of(rows)
    assert (tally.n_entries, dict(tally.status), dict(tally.reasons), tally.invalid_gold) == (
        2, {"ok": 1, "unparseable": 1}, {"target: missing": 2}, [(7, "[1].source: missing")])


#: Rows that orjson cannot write or read as the json module does: an integer beyond 64 bits
#: (written by the json module, read back exactly), a lone surrogate in an id (written as
#: its \\u escape), floats whose shortest text matters, -0.0, None, non-ASCII text.
ODD_ROWS = [
    {"id": "e1", "gold_line": 1, "metrics": {"f1": 0.1 + 0.2, "tiny": 5e-324, "big": 1e16, "small": 1e-07, "neg": -0.0, "na": None},
     "pairs": [], "stats": {"hgr": {"n": 1, "sum": "3/7"}, "strict": {"tp": 2}}, "strict": {"tp": 2}},
    {"id": "\ud800x", "gold_line": 2, "metrics": {"f1": 1.0}, "pairs": [{"s": "é ✓"}],
     "stats": {"hgr": {"n": 2 ** 70}, "strict": {"tp": 0}}, "strict": {"tp": 0}},
    {"id": "e3", "gold_line": 3, "metrics": {}, "pairs": [[1, [2, {}]]],
     "stats": {"hgr": {"n": 1}, "strict": {"tp": 1}}, "strict": {"tp": 1}},
]


def _same_values(a, b) -> bool:
    """Equal JSON values of the same types (so -0.0 is not 0.0 and 1 is not 1.0)."""
    return repr(a) == repr(b)


@pytest.mark.parametrize("form", ["report", "lines"])
def test_row_spool_reads_rows_back_exactly_and_writes_the_bytes_of_the_rows(tmp_path, form):
    spool = ev.RowSpool(form=form)
    spool.extend(ODD_ROWS)
    assert len(spool) == 3
    for _ in range(2):   # read back as often as needed
        assert _same_values(list(spool), ODD_ROWS)
    if form == "report":
        summary = {"summary": {"n_entries": 3}}
        expected = b"".join(ev.report_chunks({**summary, "per_entry": iter(ODD_ROWS)}))
        assert b"".join(ev.report_chunks({**summary, "per_entry": spool})) == expected
        # rows in a list: the same bytes (each row written alone, orjson's 1e-7 beside the
        # json module's rows of the big int and the lone surrogate)
        assert b"".join(ev.report_chunks({**summary, "per_entry": list(ODD_ROWS)})) == expected
        assert b'"small": 1e-7' in expected and json.loads(expected)["per_entry"] == ODD_ROWS
    else:
        listed = ev.write_jsonl_atomic(tmp_path / "listed.jsonl", list(ODD_ROWS))
        copied = ev.write_jsonl_atomic(tmp_path / "copied.jsonl", spool)
        assert copied == listed and listed["rows"] == 3
        assert (tmp_path / "copied.jsonl").read_bytes() == (tmp_path / "listed.jsonl").read_bytes()
        assert [json.loads(x) for x in (tmp_path / "copied.jsonl").read_text("utf-8").splitlines()] == ODD_ROWS


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_row_spool_refuses_a_row_with_nan_or_infinity_and_keeps_the_rows_before(bad):
    for form in ("report", "lines"):
        spool = ev.RowSpool(form=form)
        spool.append(ODD_ROWS[0])
        with pytest.raises(ValueError, match="not JSON compliant"):
            spool.append({"id": "x", "stats": {"hgr": {"deep": [1.0, {"m": bad}]}}})
        worker = ev.RowSpool(form=form, memory=True)
        with pytest.raises(ValueError, match="not JSON compliant"):
            worker.append({"metrics": {"f1": bad}})
        spool.append(ODD_ROWS[2])
        assert len(spool) == 2 and _same_values(list(spool), [ODD_ROWS[0], ODD_ROWS[2]])


def _without(rows, name, key):
    out = json.loads(json.dumps(rows))
    for row in out:
        row["stats"].pop(name, None)
        if key != "summary":
            row.pop(key, None)
    return out


def test_row_spool_drops_a_family_from_rows_already_encoded(tmp_path):
    """A family skipped after rows were encoded (FamilyUnavailable on a later entry): the
    rows read back, the report and the rows file are those of rows made without it."""
    for form in ("report", "lines"):
        spool = ev.RowSpool(form=form)
        spool.extend(ODD_ROWS)
        spool.drop("strict", "strict")
        spool.drop("strict", "strict")   # dropping twice is dropping once
        spool.drop("hgr", "summary")     # the summary family has no view of its own: stats only
        expected = _without(_without(ODD_ROWS, "strict", "strict"), "hgr", "summary")
        assert _same_values(list(spool), expected) and "strict" in ODD_ROWS[0]
        if form == "report":
            assert b"".join(ev.report_chunks({"per_entry": spool})) == b"".join(
                ev.report_chunks({"per_entry": expected}))
        else:
            assert ev.write_jsonl_atomic(tmp_path / "a.jsonl", spool) == ev.write_jsonl_atomic(tmp_path / "b.jsonl",
                                                                                               expected)


def test_worker_chunks_appended_to_a_spool_equal_rows_appended_one_by_one():
    """A worker's rows (an in-memory spool, :meth:`RowSpool.take`) go into the parent's
    spool as bytes: the same spool as rows appended one by one, the chunk's dropped
    families dropped, an empty chunk adding nothing."""
    direct = ev.RowSpool()
    direct.extend(ODD_ROWS)
    direct.drop("strict", "strict")
    parent = ev.RowSpool()
    for chunk in (ODD_ROWS[:2], [], ODD_ROWS[2:]):
        worker = ev.RowSpool(memory=True)
        worker.extend(chunk)
        if len(chunk) == 1:
            worker.drop("strict", "strict")
        parent.append_encoded(*worker.take())
    assert len(parent) == 3 and _same_values(list(parent), list(direct))
    assert b"".join(ev.report_chunks({"per_entry": parent})) == b"".join(ev.report_chunks({"per_entry": direct}))
    empty = ev.RowSpool()
    assert b"".join(ev.report_chunks({"per_entry": empty})) == b'{\n  "per_entry": []\n}\n' and list(empty) == []
    with pytest.raises(ValueError, match="form"):
        ev.RowSpool(form="pickle")


@pytest.mark.parametrize("form", ["report", "lines"])
def test_rows_written_by_workers_to_the_spools_files_equal_rows_appended_one_by_one(tmp_path, form):
    """Chunks that forked workers write to the spool's files (RowSpool.worker_files,
    write_chunk; each worker appends to its own file, chunks of two workers alternating,
    an empty one, one with a dropped family) and that the parent then holds where they lie
    (append_written), between rows it appends itself: rows read back, the encoded text, the
    report's bytes written file to file (copy_file_range over the ranges) and block by block
    (the copy refused) are those of the same rows appended one by one."""
    rows = [dict(row, id=f"e{k}-{n}") for k in range(40) for n, row in enumerate(ODD_ROWS)]
    chunks = [rows[5:12], rows[12:30], [], rows[30:31], rows[31:90], rows[90:118]]   # one row: strict dropped
    direct = ev.RowSpool(folder=tmp_path, form=form)
    direct.extend(rows)
    direct.drop("strict", "strict")
    parent = ev.RowSpool(folder=tmp_path, form=form)
    parent.extend(rows[:5])
    parent.worker_files(2)
    assert not list(tmp_path.iterdir())   # the spools' files and the workers' have no name: nothing to leave behind
    written = []
    for k, chunk in enumerate(chunks):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:   # a worker: writes the chunk to its own file, sends back where it lies
            try:
                worker = ev.RowSpool(form=form, memory=True)
                worker.extend(chunk)
                if len(chunk) == 1:
                    worker.drop("strict", "strict")
                os.write(write, pickle.dumps(parent.write_chunk(k % 2, worker)))
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as answer:
            written.append(pickle.loads(answer.read()))
        os.waitpid(pid, 0)
    ends, sep = [0, 0], ev.RowSpool._SEPARATORS[form]
    for k, (start, size, sizes, dropped) in enumerate(written):
        assert start == ends[k % 2]                  # each worker appends to its own file
        ends[k % 2] += size
        assert size == sum(sizes) + len(sep) * max(len(sizes) - 1, 0) and len(sizes) == len(chunks[k])
        assert dropped == ([("strict", "strict")] if len(chunks[k]) == 1 else [])
    for k, where in enumerate(written):
        parent.append_written(k % 2, *where)
    # A second pool on the same spool: its slot 0 is a new file (its rows start at byte 0),
    # and the rows the first pool wrote stay where they lie.
    parent.worker_files(1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            worker = ev.RowSpool(form=form, memory=True)
            worker.extend(rows[118:130])
            os.write(write, pickle.dumps(parent.write_chunk(0, worker)))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        where = pickle.loads(answer.read())
    os.waitpid(pid, 0)
    assert where[0] == 0 and len(parent._workers) == 3
    parent.append_written(0, *where)
    parent.extend(rows[130:])
    assert len(parent) == len(rows) and list(parent) == list(direct)
    assert b"".join(parent.encoded(block=1000)) == b"".join(direct.encoded())
    if form == "report":
        for copy in (os.copy_file_range, None):
            if copy is None:
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(ev.os, "copy_file_range", _refused_copy)
                    ev.write_json_atomic(tmp_path / "r.json", {"summary": {"n": 1}, "per_entry": parent})
            else:
                ev.write_json_atomic(tmp_path / "r.json", {"summary": {"n": 1}, "per_entry": parent})
            assert (tmp_path / "r.json").read_bytes() == b"".join(
                ev.report_chunks({"summary": {"n": 1}, "per_entry": direct}))
    parent.close()
    direct.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["r.json"] if form == "report" else [])
    assert all(f.closed for f in parent._workers)


def test_a_spool_leaves_nothing_in_its_folder_when_its_process_is_killed(tmp_path):
    """A process killed with SIGKILL while its spool holds rows (no finaliser runs) leaves
    no file in the spool's folder: the spool's file never had a name."""
    pid = os.fork()
    if pid == 0:
        try:   # killed holding more than a buffer of rows on disk; exit status 3 otherwise
            spool = ev.RowSpool(folder=tmp_path)
            spool.extend([dict(ODD_ROWS[0], id=f"e{k}") for k in range(3000)])
            spool._file.flush()
            if os.fstat(spool._file.fileno()).st_size > 1 << 20:
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert list(tmp_path.iterdir()) == []


def _refused_copy(*args):
    raise OSError(errno.EXDEV, "Invalid cross-device link")


@pytest.mark.parametrize("copy", ["file to file", "refused", "absent"])
def test_a_spooled_report_is_written_with_its_rows_copied_file_to_file(tmp_path, monkeypatch, copy):
    """write_json_atomic copies a spool's bytes file to file (os.copy_file_range, block by
    block: a "writing" phase each, as the blocks that are read and written), or, where the
    system refuses the copy (EXDEV: another file system) or has none, writes the blocks
    read: the same bytes as the report's chunks in memory, with the dropped families of a
    spool dropped."""
    rows = [dict(row, id=f"e{k}-" + "x" * 3000) for k in range(400) for row in ODD_ROWS[:1]]
    spool = ev.RowSpool(folder=tmp_path)
    spool.extend(rows)
    want = b"".join(ev.report_chunks({"summary": {"n": 1}, "per_entry": spool}))
    assert len(want) > 1 << 20            # more than one block
    real = os.copy_file_range
    calls = []

    def refused(*args):
        calls.append(args)
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    if copy == "refused":
        monkeypatch.setattr(ev.os, "copy_file_range", refused)
    elif copy == "absent":
        monkeypatch.delattr(ev.os, "copy_file_range")
    else:
        monkeypatch.setattr(ev.os, "copy_file_range", lambda *args: calls.append(args) or real(*args))
    phases = []
    monkeypatch.setattr(ev, "_phase", phases.append)
    ev.write_json_atomic(tmp_path / "r.json", {"summary": {"n": 1}, "per_entry": spool})
    assert (tmp_path / "r.json").read_bytes() == want
    blocks = -(-len(b"".join(spool.encoded())) // (1 << 20))
    assert blocks > 1 and phases.count("writing") == len(list(ev.report_chunks(  # one a chunk, as written
        {"summary": {"n": 1}, "per_entry": spool})))
    # one copy a block: the spool knows where its bytes end (no last call that copies none)
    assert len(calls) == {"file to file": blocks, "refused": 1, "absent": 0}[copy]
    spool.drop("strict", "strict")                    # dropped families: rows encoded again
    ev.write_json_atomic(tmp_path / "d.json", {"per_entry": spool})
    assert (tmp_path / "d.json").read_bytes() == b"".join(ev.report_chunks({"per_entry": spool}))


def test_a_part_is_read_with_its_rows_left_on_disk_exactly_as_json_reads_it(tmp_path):
    """read_part: a report as written keeps its rows on disk (PartRows, read one at a time,
    as often as iterated) with every value exactly json.load's (a big int, a lone
    surrogate); an empty per_entry is a list; another layout is read whole."""
    data = {"summary": {"n_entries": 3, "big": 2 ** 70}, "shard": {"records": {"hgr": {"x": 0.1}}},
            "per_entry": ODD_ROWS}
    path = tmp_path / "part.json"
    ev.write_json_atomic(path, data)
    part = ev.read_part(path)
    assert isinstance(part["per_entry"], ev.PartRows) and list(part) == list(data)
    assert _same_values(list(part["per_entry"]), ODD_ROWS) and _same_values(list(part["per_entry"]), ODD_ROWS)
    assert _same_values({k: v for k, v in part.items() if k != "per_entry"},
                        {k: v for k, v in json.loads(path.read_bytes()).items() if k != "per_entry"})
    ev.write_json_atomic(path, {**data, "per_entry": []})
    assert ev.read_part(path)["per_entry"] == []
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")   # reformatted: read whole
    assert type(ev.read_part(path)["per_entry"]) is list and ev.read_part(path) == json.loads(path.read_bytes())
    # rows that leave the layout part of the way through (a row on one line) or end otherwise
    ev.write_json_atomic(path, data)
    written = path.read_bytes()
    one_line = written.replace(b'{\n      "id": "e3"', b'{"id": "e3"', 1)
    trailing = written[:-2] + b', "per_entry": 5}\n'   # a duplicate key: json keeps the last
    for changed in (one_line, trailing):
        path.write_bytes(changed)
        rows = ev.read_part(path)["per_entry"]
        with pytest.raises(ev._OtherLayout):
            list(rows)
        assert ev.read_part(path, whole=True) == json.loads(changed)


def test_merge_of_parts_reformatted_or_in_the_report_layout_gives_the_same_report(tmp_path, capsys):
    """Parts as written are merged row by row from disk; a part in another layout (indented
    otherwise, or leaving the layout after some rows) is read whole: the same report; a
    part whose rows end in a duplicate per_entry key is read as json reads it (refused)."""
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    args = ["--pred", str(pred), "--gold", str(gold), "--ontology", str(onto), "--metrics", "hgr,strict,text2kgbench"]
    whole = _report_bytes(tmp_path, "whole.json", *args)
    p1, p2, p3 = _shards(tmp_path, "run", args, 3)
    assert _merge(tmp_path, [p1, p2, p3]) == whole
    p2.write_text(json.dumps(json.loads(p2.read_bytes()), indent=4), encoding="utf-8")
    written = p3.read_bytes()
    first_row = written.index(b'\n    {\n      "id": ') + 5
    second_row = written.index(b'\n    {\n      "id": ', first_row) + 5
    later_row_on_one_line = written[:second_row] + written[second_row:].replace(b"\n      ", b"", 3)
    p3.write_bytes(later_row_on_one_line)
    assert json.loads(later_row_on_one_line) == json.loads(written)
    assert _merge(tmp_path, [p1, p2, p3]) == whole
    p3.write_bytes(written[:-2] + b', "per_entry": 5}\n')
    assert f"--merge {p3}: the part has no per_entry list" in _refused(tmp_path, capsys, p1, p2, p3)


class CharHistogramEmbedder:
    """Deterministic embeddings (character histograms over 8 buckets: similar strings get
    cosines above the gate); refuses to embed in any process but the one that made it,
    so a worker that needed a vector its parent did not prepare fails the test."""

    backend = "fake"
    model_name = "char-histogram"

    def __init__(self):
        self.pid = os.getpid()
        self.calls = 0

    def embed(self, texts):
        if os.getpid() != self.pid:
            raise RuntimeError("embedded in a worker process")
        self.calls += 1
        import numpy as np
        out = np.zeros((len(texts), 8), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text:
                out[i, ord(ch) % 8] += 1.0
        return out


def test_embedding_vectors_are_prepared_once_in_the_parent_and_workers_give_the_same_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 7)
    gold, pred, onto = _corpus(tmp_path / "c", n=60)
    entries = ev.load_inputs(pred, gold).entries
    names = ("hgr", "strict", "per-relation")
    one_sim, many_sim = ev.EmbeddingSimilarity(CharHistogramEmbedder()), ev.EmbeddingSimilarity(CharHistogramEmbedder())
    one = ev.score_entries(entries, ev.families_for(names), ev.ScoringContext(one_sim, "triples", None))
    many = ev.score_entries_parallel(entries, ev.families_for(names), ev.ScoringContext(many_sim, "triples", None),
                                     workers=3)
    assert many_sim.embedder.calls == 1   # every string embedded in one batch, before the workers started
    assert many.rows == one.rows and ev.records_to_json(many.records) == ev.records_to_json(one.records)
    sims = [p["source_sim"] for row in one.rows for p in row["pairs"]]
    assert any(0.8 <= s < 1.0 for s in sims)   # the embedding similarities are in play, not only exact matches


def test_summary_only_and_per_entry_jsonl_in_directory_mode(tmp_path):
    gold, pred, onto = _corpus(tmp_path / "c", n=20)
    dirs = {name: tmp_path / name for name in ("pred", "gold", "onto")}
    for d in dirs.values():
        d.mkdir()
    pred.rename(dirs["pred"] / "1_city_responses.jsonl")
    gold.rename(dirs["gold"] / "ont_1_city_ground_truth.jsonl")
    onto.rename(dirs["onto"] / "1_city_ontology.json")
    args = ["--pred", str(dirs["pred"]), "--gold", str(dirs["gold"]), "--ontology", str(dirs["onto"]),
            "--metrics", "hgr,text2kgbench"]
    whole = json.loads(_report_bytes(tmp_path, "whole.json", *args))
    rest = {k: v for k, v in whole.items() if k != "per_entry"}
    assert len(whole["per_entry"]) == 20 and "per_ontology" in rest
    assert json.loads(_report_bytes(tmp_path, "summary.json", *args, "--summary-only")) == rest
    split = json.loads(_report_bytes(tmp_path, "split.json", *args, "--per-entry-jsonl", str(tmp_path / "rows.jsonl")))
    assert split.pop("per_entry_jsonl")["path"] == str((tmp_path / "rows.jsonl").resolve()) and split == rest
    assert [json.loads(x) for x in (tmp_path / "rows.jsonl").read_text().splitlines()] == whole["per_entry"]


def test_merge_names_a_family_this_evaluator_lacks(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(ev.FAMILIES, FailsOnS21.name, FailsOnS21)
    gold, pred, onto = _corpus(tmp_path / "c", n=12)
    parts = _shards(tmp_path, "fam", ["--pred", str(pred), "--gold", str(gold), "--metrics", "hgr,fails-on-s21"], 2)
    monkeypatch.delitem(ev.FAMILIES, FailsOnS21.name)
    err = _refused(tmp_path, capsys, *parts)
    assert f"--merge {parts[0]}: the parts use a metric family this evaluator does not have (unknown metric family " \
           "fails-on-s21)" in err


def test_rows_kept_on_disk_in_a_comparison_give_the_same_report_and_tables(tmp_path, monkeypatch, capsys):
    """A comparison of long runs (rows spooled to disk) reads the rows back for its
    statistics: the same report bytes and Markdown tables as with the rows in memory."""
    gold, pred, onto = _corpus(tmp_path / "c", n=40)
    _, other, _ = _corpus(tmp_path / "d", n=40, seed=4)
    other = other.rename(tmp_path / "other.jsonl")
    args = ["--pred", str(pred), "--pred", str(other), "--gold", str(gold), "--ontology", str(onto),
            "--bootstrap", "200", "--trials", "300", "--format", "markdown"]
    outputs = {}
    for spool in (10**9, 1):
        monkeypatch.setattr(ev, "SPOOL_MIN_ENTRIES", spool)
        capsys.readouterr()
        report = _report_bytes(tmp_path, f"both-{spool}.json", *args)
        outputs[spool] = (report, capsys.readouterr().out)
    assert outputs[1] == outputs[10**9]
    assert b'"comparison"' in outputs[1][0] and "| system |" in outputs[1][1]


def test_large_run_options_exclude_the_statistics_options(tmp_path, capsys):
    """--bootstrap and comparisons need every per-entry record in one report: --shard,
    --merge, --per-entry-jsonl and --summary-only are refused with them (exit 2, named)."""
    gold, pred, onto = _corpus(tmp_path / "c", n=10)
    base = ["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--no-report"]
    for large in (["--summary-only"], ["--per-entry-jsonl", str(tmp_path / "rows.jsonl")], ["--shard", "1/2"]):
        for stats in (["--bootstrap", "100"], ["--pred", str(pred), "--name", "a", "--name", "b"]):
            capsys.readouterr()
            assert ev.main([*base, *large, *stats]) == 2, (large, stats)
            assert f"{large[0]} is an option of one system's run" in capsys.readouterr().err


def test_per_entry_jsonl_never_overwrites_inputs_reports_or_other_files(tmp_path, capsys):
    """--per-entry-jsonl is checked before scoring (exit 2, nothing written): an input file,
    the report's own path (also spelt differently), '-', a directory, and an existing file
    that is not a rows file are refused; the rows file of the same command run before is
    overwritten, the rows file of another run only with --overwrite."""
    gold, pred, onto = _corpus(tmp_path / "c", n=10)
    pred_bytes = pred.read_bytes()
    base = ["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet"]
    other = tmp_path / "other.json"
    assert ev.main([*base, "--report", str(other)]) == 0
    other_bytes = other.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    report = tmp_path / "r.json"
    cases = [(pred, "is one of the input files"), (gold, "is one of the input files"),
             (other, "is not a per-entry rows file"), (notes, "is not a per-entry rows file"),
             (tmp_path, "is a directory"), (Path("-"), "stdout carries the summary")]
    for path, message in cases:
        capsys.readouterr()
        assert ev.main([*base, "--report", str(report), "--per-entry-jsonl", str(path)]) == 2, path
        assert message in capsys.readouterr().err, path
    os.chdir(tmp_path)
    try:
        for rows in ("r.json", str(report)):   # relative and absolute spellings of the report's path
            assert ev.main([*base, "--report", str(report), "--per-entry-jsonl", rows]) == 2
            assert "is the report's path" in capsys.readouterr().err
    finally:
        os.chdir("/")
    assert pred.read_bytes() == pred_bytes and other.read_bytes() == other_bytes
    assert notes.read_text() == "my notes\n" and not report.exists()
    rows = tmp_path / "rows.jsonl"
    for _ in range(2):   # the rows file of the same command run before is overwritten
        assert ev.main([*base, "--report", str(report), "--per-entry-jsonl", str(rows)]) == 0
        assert len(rows.read_text().splitlines()) == 10
    # another run's rows (its report elsewhere: the review's case, a --compare broken after):
    # refused before scoring, unless --overwrite
    held = rows.read_bytes()
    second = tmp_path / "r2.json"
    capsys.readouterr()
    assert ev.main([*base, "--limit", "4", "--report", str(second), "--per-entry-jsonl", str(rows)]) == 2
    assert (f"--per-entry-jsonl {rows}: exists and holds the per-entry rows of another run (the report --report "
            f"{second} does not name it); refusing to overwrite it: pass --overwrite to replace it, or give another "
            "path") in capsys.readouterr().err
    assert rows.read_bytes() == held and not second.exists()
    assert ev.main([*base, "--limit", "4", "--report", str(second), "--per-entry-jsonl", str(rows),
                    "--overwrite"]) == 0
    assert len(rows.read_text().splitlines()) == 4


class KillsItsWorker(FailsOnMarkedEntries):
    """Kills the worker process that scores entry s21 (SIGKILL, as the out-of-memory killer
    does); never the parent."""

    name = key = "kills-its-worker"
    parent = os.getpid()

    def entry_stats(self, entry, score, ctx):
        if entry.gold.id == "s21" and os.getpid() != self.parent:
            import signal
            os.kill(os.getpid(), signal.SIGKILL)
        return {"entries": 1}


def test_a_killed_worker_fails_the_run_promptly_with_a_clear_error(tmp_path, monkeypatch, capsys):
    """A multiprocessing.Pool replaces a killed worker and waits forever for its chunk; the
    run must instead stop (exit 1, no report) naming the cause. A watchdog thread fails the
    test (instead of hanging the suite) if the run does not return within 60 s."""
    import faulthandler
    import sys
    monkeypatch.setitem(ev.FAMILIES, KillsItsWorker.name, KillsItsWorker)
    monkeypatch.setattr(KillsItsWorker, "parent", os.getpid())
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 5)
    gold, pred, _ = _corpus(tmp_path / "c", n=40)
    report = tmp_path / "r.json"
    faulthandler.dump_traceback_later(60, exit=True, file=sys.__stderr__)
    try:
        status = ev.main(["--pred", str(pred), "--gold", str(gold), "--metrics", "hgr,kills-its-worker",
                          "--no-embeddings", "--quiet", "--workers", "2", "--report", str(report)])
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert status == 1 and not report.exists()
    err = capsys.readouterr().err
    assert "error: a worker process died while scoring (killed by a signal: SIGKILL, often the out-of-memory " \
           "killer" in err and "rerun with fewer --workers" in err and "Traceback" not in err


def _dies(item):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_dead_before_its_next_item_is_sent_is_a_lost_worker():
    """The worker dies on its first item before the pool sends it the second (its task pipe
    has no reader: BrokenPipeError on the send): a lost worker (_PoolBroken, which the runs
    raise as WorkerLost, exit status 1), not a BrokenPipeError, which main took for stdout's
    reader going away (exit 0, nothing printed, no report). The second item is made only
    once the worker is a zombie."""
    pool = ev.start_pool(1, _dies)
    pid = pool.workers[0][0]

    def items():
        yield 1
        deadline = time.monotonic() + 60   # a liveness bound, not a timing: it is dead at once
        while _state(pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(pid) == "Z"
        yield 2

    try:
        with pytest.raises(ev._PoolBroken):
            list(pool.map(items()))
    finally:
        pool.close()
    with pytest.raises(ChildProcessError):   # reaped
        os.waitpid(pid, os.WNOHANG)


def _state(pid: int) -> str:
    """The state letter of process ``pid`` (/proc/PID/stat), "" when there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


_ORPHAN_SCRIPT = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
import evaluate as ev
from concurrent.futures import ProcessPoolExecutor
pool = ProcessPoolExecutor(2, mp_context=ev._fork_context(), initializer=ev._worker_init, initargs=(os.getpid(),))
pids = {pool.submit(os.getpid).result() for _ in range(8)}
for _ in range(2):
    pool.submit(time.sleep, 120)   # the workers are busy: nothing would ever stop them
print(" ".join(map(str, sorted(pids))), flush=True)
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGKILL)   # the main process dies outright (out-of-memory killer, kill -9)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only")
def test_workers_die_with_a_main_process_killed_outright(tmp_path):
    # prctl(PR_SET_PDEATHSIG): the kernel kills the workers when their parent dies; before,
    # they stayed, blocked, holding memory and the spooled rows. Polled for up to 60 s
    # (a liveness check, not a timing): they are gone at once.
    script = tmp_path / "orphans.py"
    script.write_text(_ORPHAN_SCRIPT, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script), str(Path(ev.__file__).parent)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    workers = [int(pid) for pid in done.stdout.split()]
    assert len(workers) >= 1

    def alive(pid: int) -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"   # a zombie has exited

    deadline = time.monotonic() + 60
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in workers if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"worker processes {left} outlived their parent"


def test_merge_refuses_edited_parts_naming_the_part_and_the_difference(tmp_path, capsys):
    """A part whose rows were cut, whose records or rows' stats were edited, or whose rows
    were swapped with another part's is refused (exit 2) naming it and the difference."""
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    p1, p2, p3 = _shards(tmp_path, "run", ["--pred", str(pred), "--gold", str(gold), "--metrics", "hgr,strict"], 3)
    original = json.loads(p2.read_bytes())   # entries 11-20 of 30

    def edited(change) -> Path:
        data = json.loads(json.dumps(original))
        change(data)
        path = tmp_path / "edited.shard-2-of-3.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return path

    cut = edited(lambda d: d["per_entry"].pop())
    assert f"--merge {cut}: 9 per-entry row(s), but the part records entries 11-20 (10)" in \
        _refused(tmp_path, capsys, p1, cut, p3)

    def bump_record(d):
        d["shard"]["records"]["strict"]["tp"] += 1
    err = _refused(tmp_path, capsys, p1, edited(bump_record), p3)
    assert "the part's shard.records differ from the merge of its per-entry rows' stats" in err
    assert "first difference (records vs rows): strict.tp: " in err

    def bump_row(d):
        d["per_entry"][0]["stats"]["strict"]["tp"] += 1
    assert "first difference (records vs rows): strict.tp: " in _refused(tmp_path, capsys, p1, edited(bump_row), p3)
    third = json.loads(p3.read_bytes())

    def rows_of_shard_3(d):   # the rows (and records) of shard 3 under shard 2's block
        d["per_entry"], d["shard"]["records"] = third["per_entry"], third["shard"]["records"]
    err = _refused(tmp_path, capsys, p1, edited(rows_of_shard_3), p3)
    assert f"--merge {p3}: gold line 21 (entry 's20') does not follow gold line 30 of " in err
    assert _merge(tmp_path, [p1, p2, p3])   # the untouched parts still merge


@pytest.mark.parametrize("option", [["--metrics", "hgr"], ["--sweep"], ["--embedding-threshold", "0.7"],
                                    ["--align-accept", "0.6"], ["--no-embeddings"], ["--reparse"],
                                    ["--skip-bad-gold"], ["--pred-field", "output"], ["--join", "order"],
                                    ["--duplicate-ids", "first"], ["--schema", "triples"], ["--workers", "2"]])
def test_merge_refuses_scoring_options_it_would_ignore(option, tmp_path, capsys):
    """--merge scores nothing: an option that changes how entries are scored would be
    ignored silently, so it is refused (exit 2, named), before any part is read."""
    missing = tmp_path / "never-read.shard-1-of-2.json"
    assert ev.main(["--merge", str(missing), *option, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"--merge combines partial reports and scores nothing: it takes no {option[0]}" in err, err


def test_printed_summary_is_the_same_with_rows_elsewhere_or_none(tmp_path, capsys):
    """The "(N of M entries)" of each macro metric comes from the family's merged counts
    (summary.macro_n), not from rows: the same printed summary with --per-entry-jsonl,
    --summary-only and a merge of shards as with the rows in the report."""
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    base = ["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--metrics", "hgr"]

    def printed(*extra: str) -> str:
        capsys.readouterr()
        assert ev.main([*base, *extra]) == 0
        return capsys.readouterr().out
    whole = printed("--report", str(tmp_path / "w.json"))
    report = json.loads((tmp_path / "w.json").read_bytes())
    counted = {key: sum(1 for e in report["per_entry"] if e["metrics"][key] is not None) for key in ev.MACRO_KEYS}
    assert report["summary"]["macro_n"] == counted and counted["relation_accuracy"] < 30   # some entries N/A
    assert f"({counted['relation_accuracy']} of 30 entries)" in whole
    assert printed("--report", str(tmp_path / "s.json"), "--summary-only") == whole
    assert printed("--report", str(tmp_path / "j.json"), "--per-entry-jsonl", str(tmp_path / "rows.jsonl")) == whole


def test_compare_reads_the_rows_of_a_report_written_with_per_entry_jsonl(tmp_path, capsys):
    """--compare reads a --per-entry-jsonl report's rows back from the file it names (at
    its recorded path, else beside the report): the same tables as with the rows inside;
    a rows file changed or missing since the run is refused (exit 2, named)."""
    gold, pred, onto = _corpus(tmp_path / "c", n=30)
    _, other, _ = _corpus(tmp_path / "d", n=30, seed=4)
    base = ["--gold", str(gold), "--no-embeddings", "--quiet", "--metrics", "hgr,strict"]
    rows = tmp_path / "rows.jsonl"
    assert ev.main(["--pred", str(pred), *base, "--report", str(tmp_path / "a.json")]) == 0
    assert ev.main(["--pred", str(pred), *base, "--report", str(tmp_path / "a-split.json"),
                    "--per-entry-jsonl", str(rows)]) == 0
    assert ev.main(["--pred", str(other), *base, "--report", str(tmp_path / "b.json")]) == 0
    compare = ["--bootstrap", "200", "--trials", "200", "--format", "markdown", "--no-report", "--quiet",
               "--name", "a", "--name", "b", "--compare"]

    def tables(first: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = ev.main([*compare, str(tmp_path / first), str(tmp_path / "b.json")])
        out = capsys.readouterr()
        return status, out.out, out.err
    status, expected, _ = tables("a.json")
    assert status == 0 and "| a |" in expected
    assert tables("a-split.json")[:2] == (0, expected)
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "a-split.json").rename(moved / "a-split.json")
    rows.rename(moved / "rows.jsonl")   # moved together: found beside the report
    assert tables("moved/a-split.json")[:2] == (0, expected)
    (moved / "rows.jsonl").write_bytes((moved / "rows.jsonl").read_bytes().replace(b'"s1"', b'"s1x"'))
    status, _, err = tables("moved/a-split.json")
    assert status == 2 and "its per-entry rows (per_entry_jsonl)" in err and "the rows file changed since the run" in err
    (moved / "rows.jsonl").unlink()
    status, _, err = tables("moved/a-split.json")
    assert status == 2 and f"{rows} not found" in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc (a folder no one can create in)")
def test_output_paths_that_cannot_be_written_fail_before_scoring(tmp_path, capsys, monkeypatch):
    """--report and --per-entry-jsonl in a folder that cannot be created or written fail
    (exit 2, named) before any entry is scored, even as root (where os.access says yes)."""
    gold, pred, _ = _corpus(tmp_path / "c", n=10)

    def no_scoring(*args, **kwargs):
        raise AssertionError("scored before the output paths were checked")
    monkeypatch.setattr(ev, "score_entries_parallel", no_scoring)
    base = ["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet"]
    for option in (["--report", "/proc/nope/r.json"],
                   ["--report", str(tmp_path / "r.json"), "--per-entry-jsonl", "/proc/nope/rows.jsonl"]):
        capsys.readouterr()
        assert ev.main([*base, *option]) == 2
        assert f"{option[-2]} {option[-1]}: cannot create the folder in /proc" in capsys.readouterr().err
    assert not list(tmp_path.glob(".*probe"))


def test_more_workers_than_cpus_is_noted_and_kept(monkeypatch, caplog):
    monkeypatch.setattr(ev, "default_workers", lambda: 2)
    parse = ev.build_parser().parse_args
    with caplog.at_level("INFO", logger=ev.log.name):
        assert ev.RunConfig.from_args(parse(["--pred", "x", "--workers", "64"])).workers == 64
        assert "note: --workers 64 is more than the 2 CPU(s) this process may use" in caplog.text
        caplog.clear()
        assert ev.RunConfig.from_args(parse(["--pred", "x", "--workers", "2"])).workers == 2
        assert ev.RunConfig.from_args(parse(["--pred", "x"])).workers is None
    assert caplog.text == ""


def test_merged_summary_is_titled_like_the_single_run(tmp_path, capsys, monkeypatch):
    """The merged run's printed summary is the single run's, title included ("PRED vs
    GOLD", here both runs name the inputs by their resolved paths)."""
    gold, pred, _ = _corpus(tmp_path / "c", n=12)
    args = ["--pred", str(pred.resolve()), "--gold", str(gold.resolve()), "--no-embeddings", "--quiet"]
    parts = _shards(tmp_path, "run", args, 2)
    capsys.readouterr()
    assert ev.main([*args, "--report", str(tmp_path / "whole.json")]) == 0
    whole = capsys.readouterr().out
    assert ev.main(["--merge", *map(str, parts), "--quiet", "--report", str(tmp_path / "merged.json")]) == 0
    merged = capsys.readouterr().out
    assert f"{pred.resolve()} vs {gold.resolve()}" in merged and "parts merged" not in merged
    assert merged == whole


def test_comparison_bytes_do_not_depend_on_the_worker_count(tmp_path, monkeypatch):
    """Intervals and p-values with a fixed seed: the same bytes for 1, 2 and 3 workers (the
    systems' per-entry statistics are the same bytes, and the statistics use only them)."""
    monkeypatch.setattr(ev, "WORKER_MIN_ENTRIES", 2)
    monkeypatch.setattr(ev, "WORKER_CHUNK_MAX", 16)
    gold, pred, onto = _corpus(tmp_path / "c", n=80)
    _, other, _ = _corpus(tmp_path / "d", n=80, seed=4)
    other = other.rename(tmp_path / "other.jsonl")
    args = ["--pred", str(pred), "--pred", str(other), "--gold", str(gold), "--ontology", str(onto),
            "--bootstrap", "200", "--trials", "500", "--seed", "7"]
    reports = {w: _report_bytes(tmp_path, f"cmp-{w}.json", *args, "--workers", w) for w in ("1", "2", "3")}
    assert reports["1"] == reports["2"] == reports["3"]
    assert b'"p_value"' in reports["1"]


def _kill_this_worker(item):
    """A reading task that kills its worker process (SIGKILL) on item 3."""
    if item == 3:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    return item * 2


def _kills_its_reader(task):
    """Stands in for the reader of one range: kills its worker process."""
    return _kill_this_worker(3)


def test_worker_map_runs_in_order_and_a_killed_reader_fails_the_run(tmp_path, monkeypatch, capsys):
    """The reading workers' map (load_inputs(map_ranges=worker_map(N))): results in item
    order; a worker killed while reading stops the run (exit 1, no report) naming the cause."""
    import faulthandler
    import sys
    assert ev.worker_map(1) is None
    assert list(ev.worker_map(3)(abs, range(-20, 0))) == list(range(20, 0, -1))
    faulthandler.dump_traceback_later(60, exit=True, file=sys.__stderr__)
    try:
        with pytest.raises(ev.WorkerLost, match="a worker process died while reading the input files"):
            list(ev.worker_map(2)(_kill_this_worker, range(8)))
        monkeypatch.setattr(ev, "READ_PARALLEL_MIN_BYTES", 0)
        monkeypatch.setattr(ev, "READ_RANGE_BYTES", 200)
        gold, pred, _ = _corpus(tmp_path / "c", n=30)
        monkeypatch.setattr(ev, "_read_range", _kills_its_reader)
        report = tmp_path / "r.json"
        status = ev.main(["--pred", str(pred), "--gold", str(gold), "--no-embeddings", "--quiet", "--workers", "2",
                          "--report", str(report)])
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert status == 1 and not report.exists()
    err = capsys.readouterr().err
    assert "error: a worker process died while reading the input files (killed by a signal: SIGKILL" in err
    assert "Traceback" not in err


def _four_copies(tmp_path: Path) -> tuple[Path, Path]:
    """The example gold and predictions four times over (ids suffixed -0 .. -3: 100 entries),
    as g.jsonl and p.jsonl in ``tmp_path``."""
    rows = [json.loads(line) for line in (ROOT / "gold" / "gold.jsonl").read_text().splitlines() if line.strip()]
    preds = [json.loads(line) for line in (ROOT / "predictions" / "finetuned.jsonl").read_text().splitlines()
             if line.strip()]
    gold, pred = tmp_path / "g.jsonl", tmp_path / "p.jsonl"
    gold.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(4) for r in rows))
    pred.write_text("".join(json.dumps({**r, "id": f"{r['id']}-{k}"}) + "\n" for k in range(4) for r in preds))
    return gold, pred


def _signal_cases() -> list[tuple[str, str, int]]:
    """(phase, signal, n-th time the phase is reached): 58 Ctrl-C and SIGTERM signals across
    every phase of a 2-worker run (start-up: the file's first statement and after the
    imports, reading, each chunk back from the pool, merging, writing the report chunk by
    chunk, the report just renamed into place, after main returned) and of a 1-worker run
    (scoring, entry by entry), and 8 SIGHUP (a closed terminal) in the same phases."""
    cases = [("start", sig, 1) for sig in ("INT", "TERM")]
    cases += [("imports", sig, 1) for sig in ("INT", "TERM")]
    cases += [("reading", sig, 1) for sig in ("INT", "TERM")]
    cases += [("pool", sig, n) for sig in ("INT", "TERM") for n in range(1, 10)]
    cases += [("merging", sig, 1) for sig in ("INT", "TERM")]
    cases += [("writing", sig, n) for sig in ("INT", "TERM") for n in range(1, 5)]
    cases += [("scoring", sig, n) for sig in ("INT", "TERM") for n in (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)]
    cases += [(phase, sig, 1) for phase in ("written", "exit") for sig in ("INT", "TERM")]
    cases += [(phase, "HUP", n) for phase, n in [("start", 1), ("imports", 1), ("reading", 1), ("pool", 2),
                                                 ("merging", 1), ("writing", 2), ("scoring", 3), ("written", 1)]]
    return cases


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only")
@pytest.mark.parametrize("at", ["pool:INT:2", "pool:TERM:2", "scoring:INT:3", "writing:TERM:1", "pool:HUP:2"])
def test_two_signals_at_once_end_the_run_with_one_line(tmp_path, at):
    # `timeout -s INT` sends its signal twice: to the process, then to its process group.
    # The second one here comes right after main printed the first one's line (the hook's
    # "interrupted" phase). Before: a KeyboardInterrupt traceback after "interrupted: no
    # report written" (or a silent SIGTERM death). Now the first one ends the run, the
    # second changes nothing.
    gold, pred = _four_copies(tmp_path)
    spool = tmp_path / "tmp"
    spool.mkdir()
    report = tmp_path / "out" / "r.json"
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(pred), "--gold", str(gold),
                           "--no-embeddings", "--workers", "1" if at.startswith("scoring") else "2",
                           "--report", str(report)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "KG_EVAL_TEST_SIGNAL_AT": f"{at},interrupted:{at.split(':')[1]}",
                               "TMPDIR": str(spool)})
    expected, status = {"INT": ("interrupted", 130), "TERM": ("terminated", 143), "HUP": ("hung up", 129)}[
        at.split(":")[1]]
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines() == [f"{expected}: no report written"]
    assert not report.exists() and list(spool.iterdir()) == []


@pytest.mark.parametrize("signal_class", [KeyboardInterrupt, ev.Terminated])
def test_a_signal_right_after_the_rename_says_the_report_is_in_place(tmp_path, monkeypatch, capsys, signal_class):
    # The signal raised at the first check after os.replace returned (before the run had
    # recorded the report as written): before, "interrupted: no report written" while the
    # complete report was there. Now the line names it.
    real_replace = os.replace

    def replace_then_signal(src, dst):
        real_replace(src, dst)
        if str(dst).endswith("r.json"):
            raise signal_class()
    monkeypatch.setattr(ev.os, "replace", replace_then_signal)
    report = tmp_path / "r.json"
    status = ev.main(["--pred", str(ROOT / "predictions" / "finetuned.jsonl"), "--gold", str(ROOT / "gold" / "gold.jsonl"),
                      "--no-embeddings", "--quiet", "--report", str(report)])
    what = "interrupted" if signal_class is KeyboardInterrupt else "terminated"
    assert status == (130 if signal_class is KeyboardInterrupt else 143)
    assert capsys.readouterr().err.splitlines() == [
        f"{what}: the report was written to {report}; what comes after it (the summary on stdout, --plots) may be "
        "incomplete"]
    assert json.loads(report.read_text())["summary"]["n_entries"] == 25 and list(tmp_path.iterdir()) == [report]


def test_the_signal_handlers_are_the_files_first_statements():
    # A Ctrl-C during the standard-library imports (importlib.metadata, ...) gave exit 1 and
    # a KeyboardInterrupt traceback, a SIGTERM 143 and no line: the handlers came after
    # them. Now only `import os`, `import signal` and the handler come first (after the
    # docstring and `from __future__`), so the window is the interpreter's own start-up.
    import ast
    body = ast.parse((ROOT / "evaluate.py").read_text()).body
    # (The installed console script imports the file as kg_triplet_eval: _AS_PROGRAM.)
    first = [ast.unparse(node).splitlines()[0] for node in body[2:9]]
    assert first == ["import os", "import signal", "import sys",
                     "_AS_PROGRAM = __name__ == '__main__' or (__name__ == 'kg_triplet_eval' and bool(sys.argv) and "
                     "(os.path.basename(sys.argv[0]) == 'kg-triplet-eval'))",
                     "_STOP_SIGNALS: dict[int, str] = {signal.SIGINT: 'interrupted', signal.SIGTERM: 'terminated', "
                     "**({signal.SIGHUP: 'hung up'} if hasattr(signal, 'SIGHUP') else {})}",
                     "def _signal_before_main(signum: int, frame: Any) -> None:", "if _AS_PROGRAM:"]
    assert ast.unparse(body[8]).splitlines()[1:] == ["    for _signum in _STOP_SIGNALS:",
                                                     "        if signal.getsignal(_signum) != signal.SIG_IGN:",
                                                     "            signal.signal(_signum, _signal_before_main)"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only")
@pytest.mark.parametrize("sig", ["INT", "TERM", "HUP"])
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_a_signal_to_the_whole_process_group_ends_the_run_through_the_parent(tmp_path, sig, nth):
    # A terminal's Ctrl-C (and `kill -TERM -PGID`) reaches every process of the group, the
    # workers too. Workers ignore both (a worker that handled SIGINT would print its own
    # KeyboardInterrupt traceback; one killed by SIGTERM could be seen by the parent as a
    # closed pipe, "a worker process died", exit 1), so the parent alone ends the run:
    # 130/143 and its one line, no report.
    gold, pred = _four_copies(tmp_path)
    report = tmp_path / "r.json"
    env = {**os.environ, "KG_EVAL_TEST_SIGNAL_AT": f"pool:{sig}:{nth}:group"}
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(pred), "--gold", str(gold),
                           "--no-embeddings", "--workers", "2", "--report", str(report)],
                          capture_output=True, text=True, timeout=120, env=env, start_new_session=True)
    expected, status = {"INT": ("interrupted", 130), "TERM": ("terminated", 143), "HUP": ("hung up", 129)}[sig]
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines() == [f"{expected}: no report written"]
    assert not report.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only")
@pytest.mark.parametrize("at", ["start:HUP", "pool:HUP:2", "scoring:INT:3", "writing:TERM:1"])
def test_a_signal_ignored_when_the_program_starts_stays_ignored(tmp_path, at):
    # `nohup evaluate.py ... &` ignores SIGHUP, a background job of a script ignores Ctrl-C:
    # the run must not take them over (before, a closed terminal ended a nohup run). The
    # hook sends the signal; it changes nothing: exit 0, the report written.
    gold, pred = _four_copies(tmp_path)
    report = tmp_path / "r.json"
    ignored = getattr(signal, "SIG" + at.split(":")[1])
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(pred), "--gold", str(gold),
                           "--no-embeddings", "--quiet", "--workers", "1" if at.startswith("scoring") else "2",
                           "--report", str(report)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "KG_EVAL_TEST_SIGNAL_AT": at},
                          preexec_fn=lambda: signal.signal(ignored, signal.SIG_IGN))
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(report.read_text())["summary"]["n_entries"] == 100


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="worker processes are forked on Linux only")
def test_one_signal_in_any_phase_ends_the_run_cleanly(tmp_path):
    # A signal at a named phase (the KG_EVAL_TEST_SIGNAL_AT hook: the process signals itself
    # the n-th time it gets there, so nothing races a timer). Each run must end with 130
    # (SIGINT) or 143 (SIGTERM) (a hang is caught by a 120 s limit), one line on stderr, no traceback, no report,
    # no temporary file, no process left. Before, the pool was concurrent.futures': its
    # exit hook joined a manager thread blocked on a killed worker's pipe (hang) or wrote
    # to a closed pipe (traceback).
    copies = 4  # 100 entries: scored by two forked workers (one per 64 entries begun)
    gold, pred = _four_copies(tmp_path)
    spool = tmp_path / "tmp"
    spool.mkdir()
    cases = _signal_cases()
    assert len(cases) == 66
    for phase, sig, nth in cases:
        out = tmp_path / f"out-{phase}-{sig}-{nth}"
        out.mkdir()
        report = out / "r.json"
        env = {**os.environ, "KG_EVAL_TEST_SIGNAL_AT": f"{phase}:{sig}:{nth}", "TMPDIR": str(spool)}
        done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--pred", str(pred), "--gold", str(gold),
                               "--no-embeddings", "--workers", "1" if phase == "scoring" else "2",
                               "--report", str(report)],
                              capture_output=True, text=True, timeout=120, env=env)
        what = f"{phase}:{sig}:{nth}: {done.stderr}"
        expected, status = {"INT": ("interrupted", 130), "TERM": ("terminated", 143), "HUP": ("hung up", 129)}[sig]
        if phase == "exit":  # after main returned: the signal stays blocked, the run's status stands
            assert done.returncode == 0 and "report written to" in done.stderr, what
            assert "interrupted" not in done.stderr and "terminated" not in done.stderr, what
        elif phase == "written":  # the report is in place: the line says so (before: "no report written")
            assert done.returncode == status, what
            assert done.stderr.splitlines() == [f"{expected}: the report was written to {report}; what comes after "
                                                "it (the summary on stdout, --plots) may be incomplete"], what
        else:
            assert done.returncode == status, what
            assert done.stderr.splitlines() == [f"{expected}: no report written"], what
        if phase in ("written", "exit"):
            assert json.loads(report.read_text())["summary"]["n_entries"] == 25 * copies, what
            report.unlink()
        assert list(out.iterdir()) == [] and list(spool.iterdir()) == [], what
        left = []
        for proc in Path("/proc").iterdir():
            try:
                if str(report).encode() in (proc / "cmdline").read_bytes():
                    left.append(proc.name)
            except OSError:
                continue
        assert left == [], what
