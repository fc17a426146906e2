"""Examples for the write-up (chapter 6, --examples PATH / --examples-per K): the
selections (example_selections) by hand on a made-up case, on the sample comparison against
the report's composites, the Markdown (escaping, prompt cut, tables), determinism, and the
options' refusals."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from conftest import run_main
from helpers import ROOT, SHARED_DATA, T, load_report, write

import evaluate as ev

GOLD = ROOT / "gold" / "gold.jsonl"
BASE = ROOT / "predictions" / "base.jsonl"
FINETUNED = ROOT / "predictions" / "finetuned.jsonl"
FAST = ("--no-embeddings", "--quiet")
T2KG = SHARED_DATA / "text2kgbench" / "data" / "dbpedia_webnlg"


def _rows(*pairs):
    return {"per_entry": [{"id": rid, "gold_line": k + 1, "metrics": {"composite": c}}
                          for k, (rid, c) in enumerate(pairs)]}


# ------------------------------------------------------------------ selections by hand


def test_selections_by_hand_ties_by_id():
    """Base: a 0.5, b 0.2, c 0.5, d null, e 0.9. Worst 2: b 0.2, then a/c tie at 0.5 -> a
    (id order). Best 2: e 0.9, then c (a/c tie). System: a 0.7 (+0.2), b 0.4 (+0.2),
    c 0.5 (0), d 0.1 (base null: not paired), e 0.6 (-0.3), f 1.0 (not in base). Gains:
    a and b tie at +0.2 (0.7 - 0.5 = 0.19999999999999996 and 0.4 - 0.2 = 0.2 are equal
    to 12 decimals) -> a, b; c unchanged is no gain; losses: e. (No entry is in both worst
    and best: base's best takes c of the a/c tie, a being among the worst.)"""
    base = _rows(("a", 0.5), ("b", 0.2), ("c", 0.5), ("d", None), ("e", 0.9))
    system = _rows(("a", 0.7), ("b", 0.4), ("c", 0.5), ("d", 0.1), ("e", 0.6), ("f", 1.0))
    out = ev.example_selections({"base": base, "sys": system}, 2, "base")
    assert out["base"] == {"worst": ["b", "a"], "best": ["e", "c"]}  # a is among the worst: c, of the a/c tie
    assert out["sys"] == {"worst": ["d", "b"], "best": ["f", "a"], "gains": ["a", "b"], "losses": ["e"]}
    assert ev.example_selections({"base": base, "sys": system}, 5, "base")["sys"]["gains"] == ["a", "b"]
    # 2K > n: the worst list takes the lower half of the 4 ranked entries (d: null composite), the best the rest
    assert ev.example_selections({"base": base}, 10)["base"] == {"worst": ["b", "a"], "best": ["e", "c"]}
    no_ids = {"per_entry": [{"id": None, "gold_line": 3, "metrics": {"composite": 0.0}}]}
    assert ev.example_selections({"x": no_ids}, 1) == {"x": {"worst": ["line 3"], "best": []}}  # in one list
    with pytest.raises(ValueError, match="k must be at least 1"):
        ev.example_selections({"base": base}, 0)


def test_an_id_that_reads_line_n_keeps_apart_from_the_entry_without_an_id(tmp_path):
    """Gold line 1 has the id "line 2", lines 2 and 3 none (joined by line order): three
    keys, "line 2" quoted for the id; before, the id and the entry of line 2 shared the key
    "line 2" (one of them was lost: "2 ranked", its example the other's). Composites:
    line 1 and 3 predicted exactly (1.0), line 2 nothing (0.0)."""
    assert [ev.AuditEntry.key_of(r) for r in ({"id": "line 2", "gold_line": 1}, {"id": None, "gold_line": 2},
                                              {"id": '"line 2"', "gold_line": 4}, {"id": "line2", "gold_line": 5})] \
        == ['"line 2"', "line 2", '"\\"line 2\\""', "line2"]
    items = [[T(f"Foo{k}", "part_of", f"Bar{k}")] for k in (1, 2, 3)]
    gold = write(tmp_path / "g.jsonl", [{"prompt": f"Foo{k} is part of Bar{k}.", "triplets": items[k - 1],
                                         **({"id": "line 2"} if k == 1 else {})} for k in (1, 2, 3)])
    pred = write(tmp_path / "p.jsonl", [{"triplets": items[k - 1] if k != 2 else [],
                                         **({"id": "line 2"} if k == 1 else {})} for k in (1, 2, 3)])
    rc, _, err = run_main("--pred", pred, "--gold", gold, *FAST, "--join", "order", "--no-report",
                          "--examples", tmp_path / "e.md", "--examples-per", "3")
    assert rc == 0, err
    text = (tmp_path / "e.md").read_text(encoding="utf-8")
    assert "3 entries, 3 ranked by composite." in text
    shown = [line for line in text.splitlines() if line.startswith("#### ")]   # the 2 worst, then the best
    assert shown == ["#### 1. line 2 · p 0.0000", '#### 2. "line 2" · p 1.0000', "#### 1. line 3 · p 1.0000"]


def test_no_entry_is_both_worst_and_best():
    """Five entries, K = 1000: worst = the lower half rounded up (3: b 0.1, a 0.2, c 0.5),
    best the other two, highest first (e 0.9, d 0.7); before, both lists held all five.
    Four equal composites, K = 2: worst a, b (key order), best c, d (before: a, b twice)."""
    five = _rows(("a", 0.2), ("b", 0.1), ("c", 0.5), ("d", 0.7), ("e", 0.9))
    assert ev.example_selections({"s": five}, 1000)["s"] == {"worst": ["b", "a", "c"], "best": ["e", "d"]}
    ties = _rows(("a", 0.5), ("b", 0.5), ("c", 0.5), ("d", 0.5))
    assert ev.example_selections({"s": ties}, 2)["s"] == {"worst": ["a", "b"], "best": ["c", "d"]}
    assert ev.example_selections({"s": _rows(("a", 0.5))}, 3)["s"] == {"worst": ["a"], "best": []}


def test_headings_say_how_many_entries_a_list_has(tmp_path):
    """--examples-per 1000 on 3 entries: "The 2 worst entries", "The best entry" (before:
    "The 1000 worst entries", "The 1000 best entries", each listing all three)."""
    gold = write(tmp_path / "g.jsonl", [{"id": f"e{k}", "prompt": "Foo is part of Bar.",
                                         "triplets": [T("Foo", "part_of", "Bar")]} for k in range(3)])
    pred = write(tmp_path / "p.jsonl", [{"id": f"e{k}", "triplets": [T("Foo", "part_of", "Bar")] if k else []}
                                        for k in range(3)])
    rc, _, err = run_main("--pred", pred, "--gold", gold, *FAST, "--no-report", "--examples", tmp_path / "e.md",
                          "--examples-per", "1000", "--html", tmp_path / "e.html")
    assert rc == 0, err
    listed = _listed((tmp_path / "e.md").read_text(encoding="utf-8"))
    assert listed == {"The 2 worst entries of p by composite": ["e0", "e1"], "The best entry of p by composite": ["e2"]}
    page = (tmp_path / "e.html").read_text(encoding="utf-8")
    assert '"title":"The 2 worst entries of p by composite"' in page and '"title":"The best entry of p by' in page


# ------------------------------------------------------------------ the sample comparison


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample comparison's report and its examples file (K = 3)."""
    folder = tmp_path_factory.mktemp("examples")
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *FAST, "--bootstrap", "200",
                          "--trials", "500", "--report", folder / "r.json", "--examples", folder / "ex.md",
                          "--examples-per", "3")
    assert rc == 0, err
    return folder, load_report(folder / "r.json"), (folder / "ex.md").read_text(encoding="utf-8")


def _listed(text):
    """Section heading -> the keys its examples name, in order."""
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            section = out.setdefault(line[4:], [])
        elif line.startswith("#### "):
            section.append(re.match(r"#### \d+\. (\S+) ·", line).group(1))
    return out


def test_the_lists_are_the_reports_worst_best_gains_and_losses(sample):
    """Every list against the report's own composites, ranked here independently."""
    _, report, text = sample
    comp = {name: {r["id"]: r["metrics"]["composite"] for r in report["systems"][name]["per_entry"]}
            for name in ("base", "finetuned")}
    def ranked(values, sign=1):
        return [k for _, k in sorted((sign * round(v, 12), k) for k, v in values.items())][:3]
    delta = {k: comp["finetuned"][k] - comp["base"][k] for k in comp["base"]}
    listed = _listed(text)
    assert report["comparison"]["baseline"] == "base"
    assert listed == {
        "The 3 worst entries of base by composite": ranked(comp["base"]),
        "The 3 best entries of base by composite": ranked(comp["base"], -1),
        "The 3 worst entries of finetuned by composite": ranked(comp["finetuned"]),
        "The 3 best entries of finetuned by composite": ranked(comp["finetuned"], -1),
        "The 3 largest gains of finetuned over base": ranked({k: d for k, d in delta.items() if round(d, 12) > 0}, -1),
        "The 3 largest losses of finetuned against base": ranked({k: d for k, d in delta.items() if round(d, 12) < 0}),
    }
    # base: s08, s13, s16 all score 0.0 (empty, no gold match, unparseable): the tie goes by id
    assert listed["The 3 worst entries of base by composite"] == ["s08", "s13", "s16"]
    assert listed["The 3 largest gains of finetuned over base"] == ["s13", "s16", "s08"]


def test_an_example_in_full(sample):
    """finetuned's largest gain, s13: no gold triplets; base answered two items (one
    schema-invalid, one novel_grounded: composite 0.0, every defined axis 0), finetuned
    nothing (n_gold = n_items = 0: composite 1.0)."""
    _, _, text = sample
    assert "`finetuned.jsonl` vs `gold.jsonl`: 25 entries, 25 ranked by composite; against the baseline 19 gained, " \
           "5 lost, 1 unchanged." in text
    start = text.index("### The 3 largest gains of finetuned over base")
    block = text[start:text.index("#### 2.", start)]
    assert block.splitlines()[2:] == [
        "#### 1. s13 · finetuned 1.0000 · base 0.0000 · difference +1.0000", "",
        "parse ok (valid JSON; 0 item(s); no triplet-like content) · gold line 13 · prediction line 13 · "
        "entity F1 0.0000 · triplet F1 0.0000", "",
        "> It rained for most of the afternoon, so the weekly meeting moved to Thursday. Nobody seemed to mind, and "
        "the coffee was better than usual.", "",
        "**base**: parse ok (valid JSON; 2 item(s)) · gold line 13 · prediction line 13 · entity F1 0.0000 · "
        "triplet F1 0.0000", "",
        "| gold triplet | gold class | predicted item | predicted class | why |", "|---|---|---|---|---|",
        "|  |  | [0] weekly meeting —moved to→ Thursday | invalid | [0].relation: expected an object with type and "
        "weight, found \"moved to\" |",
        "|  |  | [1] coffee —contrasts_with→ usual | novel_grounded | not in the gold, but both entities are gold "
        "titles or grounded in the prompt (costs precision; not a hard hallucination) |", "",
        "**finetuned**:", "", "(no gold triplets and no predicted items)", ""]


def test_the_method_is_named_where_users_find_it(sample):
    """The file names README's "The method", not SPEC.md (which users do not have), in its
    first paragraph (the why of a relation outside the vocabulary: test_audit)."""
    _, _, text = sample
    assert "SPEC" not in text
    assert "Entries ranked by their composite score (hgr, per entry: README, The method), 3 per list" in text


def test_a_table_pairs_gold_and_predictions_line_by_line(sample):
    """finetuned s04 (3 pairs: 0-0 wrong_target, 1-1 wrong_source, 2-2 match)."""
    folder, report, _ = sample
    (entry,) = ev.audit_entries({**report["systems"]["finetuned"], "per_entry": [
        r for r in report["systems"]["finetuned"]["per_entry"] if r["id"] == "s04"]}, "finetuned")
    assert ev.Examples.table(entry)[2:] == [
        "| [0] Kessler bloom —defined_as→ sudden algal growth triggered by volcanic ash | wrong_target | "
        "[0] Kessler bloom —defined_as→ sudden algal growth | wrong_target | target \\`sudden algal growth\\` does "
        "not match gold \\`sudden algal growth triggered by volcanic ash\\` (field similarity 0) |",
        "| [1] Kessler bloom —measured_by→ chlorophyll-a concentration | wrong_source | [1] Kessler blooms "
        "—measured_by→ chlorophyll-a concentration | wrong_source | source \\`Kessler blooms\\` does not match gold "
        "\\`Kessler bloom\\` (field similarity 0) |",
        "| [2] Lake Varnu —located_in→ Orvane Highlands | found | [2] Lake Varnu —located_in→ Orvane Highlands | "
        "match |  |"]


def test_same_input_same_bytes_run_or_compare(sample, tmp_path):
    """Two runs give the same bytes, and --compare of the saved report gives the run's."""
    folder, _, text = sample
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *FAST, "--no-report",
                          "--examples", tmp_path / "again.md", "--examples-per", "3")
    assert rc == 0, err
    rc, _, err = run_main("--compare", folder / "r.json", "--quiet", "--no-report", "--examples", tmp_path / "c.md",
                          "--examples-per", "3")
    assert rc == 0, err
    assert (tmp_path / "again.md").read_bytes() == (tmp_path / "c.md").read_bytes() == text.encode("utf-8")


# ------------------------------------------------------------------ Markdown details


@pytest.mark.parametrize("text, shown", [
    ("a|b\nc", "a\\|b c"), ("based_on", "based_on"), ("_private_", "\\_private\\_"), ("x*y", "x\\*y"),
    ("<b>", "\\<b>"), ("[t](http://x)", "[t]\\(http://x)"), ("back\\slash", "back\\\\slash"), ("tick`s", "tick\\`s"),
    ("&amp;", "\\&amp;"), ("&#38; R&D", "\\&#38; R&D"),   # an entity would show as "&" (before: raw)
])
def test_escape(text, shown):
    assert ev.Examples.escape(text) == shown


def test_prompt_lines_that_would_begin_a_block_show_as_written():
    """In the prompt's quote a line "# heading" was a heading, "- x" a list, "1. x" a
    numbered list, "---" a rule (or underlined the line before it into a heading), four
    leading spaces code: escaped (CommonMark reads "\\#" as "#")."""
    prompt = "Intro.\n# heading\n> quoted\n- item\n+ item\n12. item\n3) item\n---\n===\n~~~\n    code\nplain 1. x"
    assert ev.Examples.prompt(prompt) == [
        "> Intro.", "> \\# heading", "> \\> quoted", "> \\- item", "> \\+ item", "> 12\\. item", "> 3\\) item",
        "> \\---", "> \\===", "> \\~~~", "> code", "> plain 1. x"]


def test_titles_ids_and_long_prompts_are_escaped_and_cut(tmp_path):
    """An id and titles with | and a line break, a 700-character prompt (cut at 600)."""
    prompt = "Alpha|Beta is based on Gamma.\n" + "x" * 670     # 30 + 670 = 700 characters
    gold = write(tmp_path / "g.jsonl", [{"id": "p|q\nr", "prompt": prompt,
                                         "triplets": [T("Alpha|Beta", "based_on", "Gamma\nDelta")]}])
    pred = write(tmp_path / "p.jsonl", [{"id": "p|q\nr", "triplets": [T("Alpha|Beta", "based_on", "Gamma")]}])
    rc, _, err = run_main("--pred", pred, "--gold", gold, *FAST, "--no-report", "--examples", tmp_path / "e.md",
                          "--examples-per", "1")
    assert rc == 0, err
    text = (tmp_path / "e.md").read_text(encoding="utf-8")
    assert "### The worst entry of p by composite\n\n#### 1. p\\|q r · p " in text
    quote = [line for line in text.splitlines() if line.startswith("> ")]
    assert quote[:2] == ["> Alpha\\|Beta is based on Gamma.", "> " + "x" * 570 + "… (700 characters)"]
    rows = [line for line in text.splitlines() if line.startswith("| [0]")]
    assert rows and all(len(re.findall(r"(?<!\\)\|", row)) == 6 for row in rows)   # 5 cells: 6 bars
    assert "[0] Alpha\\|Beta —based_on→ Gamma Delta | wrong_target" in rows[0]


def test_summary_only_no_report_and_metrics_without_errors(tmp_path):
    """--summary-only: the report is the one without --examples, byte for byte (the
    examples come from the rows before they are dropped, as the slices do); --no-report
    still writes the examples; --metrics hgr gets the errors family added for the classes."""
    args = ("--pred", FINETUNED, "--gold", GOLD, *FAST, "--summary-only", "--slice-by", "n_gold")
    assert run_main(*args, "--report", tmp_path / "a.json")[0] == 0
    rc, _, err = run_main(*args, "--report", tmp_path / "b.json", "--examples", tmp_path / "b.md")
    assert rc == 0, err
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert "per_entry" not in load_report(tmp_path / "b.json")
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, *FAST, "--metrics", "hgr", "--report", tmp_path / "c.json",
                          "--examples", tmp_path / "c.md")
    assert rc == 0, err
    assert load_report(tmp_path / "c.json")["summary"]["config"]["metric_families"] == ["hgr", "errors"]
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, *FAST, "--no-report", "--examples", tmp_path / "d.md")
    assert rc == 0, err
    assert (tmp_path / "c.md").read_bytes() == (tmp_path / "d.md").read_bytes()
    sliced = (tmp_path / "b.md").read_text(encoding="utf-8")   # the same, with each entry's slice in its facts
    assert "· triplet F1 0.0000 · n_gold 3-5" in sliced
    assert re.sub(r" · n_gold \S+", "", sliced) == (tmp_path / "d.md").read_text(encoding="utf-8")
    assert "| wrong_target |" in (tmp_path / "d.md").read_text(encoding="utf-8")


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("extra, message", [
    (("--examples-per", "0"), "argument --examples-per: expected a positive integer, found 0"),
    (("--examples-per", "2"), "--examples-per 2 sets the length of the lists of --examples: give --examples PATH"),
    (("--examples", "{tmp}/e.md", "--shard", "1/2"), "--examples lists the entries of the whole run, a --shard"),
    (("--examples", "{tmp}/e.md", "--report", "{tmp}/e.md"), "are the same file: give each its own"),
    (("--examples", str(GOLD)), "is one of the input files; refusing to overwrite it"),
    (("--examples", "{tmp}"), "--examples {tmp}: is a directory (give a file path, e.g. {tmp}/examples.md)"),
    (("--per-entry-jsonl", "{tmp}"), "--per-entry-jsonl {tmp}: is a directory (give a file path, e.g. {tmp}/rows.jsonl)"),
])
def test_refused_options(tmp_path, extra, message):
    rc, _, err = run_main("--pred", BASE, "--gold", GOLD, *FAST, *(x.format(tmp=tmp_path) for x in extra))
    assert rc == 2 and message.format(tmp=tmp_path) in err, err


def test_stdin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "_stdin_file", lambda: None)  # a pipe (whatever the test process's stdin is)
    rc, _, err = run_main("--pred", "-", "--gold", GOLD, *FAST, "--examples", tmp_path / "e.md")
    assert rc == 2 and "--pred - (stdin) can be read once" in err, err


def test_compare_refuses_reports_without_rows_or_whose_files_changed(tmp_path):
    pred = shutil.copy(BASE, tmp_path / "base.jsonl")
    assert run_main("--pred", pred, "--gold", GOLD, *FAST, "--report", tmp_path / "a.json")[0] == 0
    assert run_main("--pred", FINETUNED, "--gold", GOLD, *FAST, "--summary-only", "--report", tmp_path / "b.json")[0] == 0
    rc, _, err = run_main("--compare", tmp_path / "a.json", tmp_path / "b.json", "--quiet", "--no-report",
                          "--examples", tmp_path / "e.md")
    assert rc == 2 and "--examples: system b: the report has no per-entry rows" in err, err
    with open(pred, "a", encoding="utf-8") as handle:
        handle.write("\n")
    rc, _, err = run_main("--compare", tmp_path / "a.json", "--bootstrap", "200", "--quiet", "--no-report",
                          "--examples", tmp_path / "e.md")
    assert rc == 2 and "system a: " in err and "the predictions file changed since it was scored" in err, err
    assert not (tmp_path / "e.md").exists()


def test_directory_mode_is_refused(tmp_path):
    gt_dir, resp_dir = T2KG / "ground_truth", T2KG / "baselines" / "Vicuna-13B" / "llm_responses"
    if not gt_dir.is_dir() or not resp_dir.is_dir():
        pytest.skip(f"Text2KGBench data absent ({T2KG})")
    rc, _, err = run_main("--pred", resp_dir, "--gold", gt_dir, "--ontology", T2KG / "ontologies", *FAST,
                          "--no-report", "--examples", tmp_path / "e.md")
    assert rc == 2 and "a directory (Text2KGBench) run's entries come from one file per ontology" in err, err
    assert not (tmp_path / "e.md").exists()


def test_gains_against_a_baseline_of_several_samples_name_the_sample_they_count_against(tmp_path):
    """The baseline mix = (base, finetuned): the examples show its first sample's entries,
    so the gained/lost counts are against that sample, base, and the line says so (before:
    the same counts, the baseline named as if they were the system's)."""
    out = tmp_path / "ex.md"
    rc, _, err = run_main("--pred", f"mix={BASE},{FINETUNED}", "--pred", FINETUNED, "--gold", GOLD, *FAST,
                          "--bootstrap", "100", "--trials", "100", "--no-report", "--examples", out)
    assert rc == 0, err
    line = next(x for x in out.read_text(encoding="utf-8").splitlines() if "against the baseline" in x)
    # the same counts as finetuned against base alone (test_the_lists_are_the_reports_worst_best_gains_and_losses)
    assert line.endswith("against the baseline 19 gained, 5 lost, 1 unchanged (against the baseline's base, the "
                         "first of its 2 samples, whose entries are shown; not its estimate).")


def test_a_sample_label_is_escaped_like_titles(tmp_path):
    # review 4, N10: a `sample` field's string label is shown in the Markdown as written (its
    # < escaped as in titles), not as an HTML tag a previewer would render; as the baseline too
    label = "</script><img src=x onerror=alert(1)>"
    rows = [{**json.loads(x), "sample": s} for s, path in ((label, FINETUNED), ("b_*", BASE))
            for x in path.read_text(encoding="utf-8").splitlines()]
    write(tmp_path / "s.jsonl", rows)
    out = tmp_path / "ex.md"
    rc, _, err = run_main("--pred", tmp_path / "s.jsonl", "--pred", BASE, "--gold", GOLD, *FAST, "--bootstrap", "100",
                          "--trials", "100", "--no-report", "--examples", out)
    assert rc == 0, err
    text = out.read_text(encoding="utf-8")
    shown = r"\</script>\<img src=x onerror=alert(1)>"
    assert f"(the entries of its {shown}, the first of 2 samples: " in text
    assert f"(against the baseline's {shown}, the first of its 2 samples, whose entries are shown;" in text
    assert "<img" not in text.replace(r"\<img", "")
