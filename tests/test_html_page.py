"""The audit page (chapter 6: AuditPage, written by --html PATH): the HTML itself (self-
contained, its data round-trips, same bytes twice, escaping, refusals) and, in a real
browser (Debian's chromium driven by selenium through /usr/bin/chromedriver, headless),
the sample comparison's page: counts against the report, filters, search, an entry's
pairs against the report, links of the class and slice tables, the virtual list, no
console error, a screenshot.

The browser tests skip, saying why, on a machine without chromium unless the environment
variable CI is set: in CI (.ci/run exports CI=1 after installing chromium) a missing
browser is a failure."""

from __future__ import annotations

import html
import html.parser
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import run_main
from helpers import ROOT, load_report, write

import evaluate as ev

GOLD = ROOT / "gold" / "gold.jsonl"
BASE = ROOT / "predictions" / "base.jsonl"
FINETUNED = ROOT / "predictions" / "finetuned.jsonl"
FAST = ("--no-embeddings", "--quiet", "--bootstrap", "200", "--trials", "500")
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
DATA_RE = re.compile(r'<script id="audit-data" type="application/json">(.*?)</script>', re.S)


def page_data(text: str) -> dict:
    """The JSON embedded in a page."""
    m = DATA_RE.search(text)
    assert m is not None, "no #audit-data element"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample comparison (base vs finetuned, --slice-by n_gold): its report and its page."""
    folder = tmp_path_factory.mktemp("page")
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *FAST, "--slice-by", "n_gold",
                          "--report", folder / "r.json", "--html", folder / "audit.html")
    assert rc == 0, err
    assert (folder / "audit.html").is_file()
    return load_report(folder / "r.json"), folder / "audit.html"


# --- the HTML, without a browser ---

class _Refs(html.parser.HTMLParser):
    """Every src/href attribute value and every tag name of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href")]


def test_page_is_self_contained(sample):
    """No network: no src/href to another place (only in-page anchors and a data: icon), no
    external script or style sheet, no url() in the CSS, a CSP of default-src 'none'."""
    text = sample[1].read_text(encoding="utf-8")
    refs = _Refs()
    refs.feed(text)
    assert refs.refs and all(r.startswith(("#", "data:")) for r in refs.refs), refs.refs
    assert not re.search(r"https?://", text.split('<script id="audit-data"')[0])
    assert "url(" not in ev.AuditPage.CSS and "http" not in ev.AuditPage.JS
    assert "</" not in ev.AuditPage.JS and "<!--" not in ev.AuditPage.JS  # cannot end its script element
    assert refs.tags.count("script") == 2 and "<script src" not in text and 'rel="stylesheet"' not in text
    assert "default-src 'none'" in text


def test_data_round_trips_and_matches_the_report(sample):
    """The embedded JSON is AuditPage.page_data of the report and its audit entries; its
    header numbers are the report's comparison block's."""
    report, page = sample
    data = page_data(page.read_text(encoding="utf-8"))
    audits = {n: [a.as_json() for a in ev.audit_entries(report["systems"][n], n)] for n in ("base", "finetuned")}
    selections = ev.AuditPage.selections(report["systems"], "base", ev.DEFAULT_EXAMPLES_PER)
    assert data == json.loads(json.dumps(ev.AuditPage.page_data(report, audits, selections)))
    chosen = ev.example_selections(report["systems"], 5, "base")
    assert [(x["title"], x["ids"]) for x in data["examples"]] == [
        ("The 5 worst entries of base by composite", chosen["base"]["worst"]),
        ("The 5 best entries of base by composite", chosen["base"]["best"]),
        ("The 5 worst entries of finetuned by composite", chosen["finetuned"]["worst"]),
        ("The 5 best entries of finetuned by composite", chosen["finetuned"]["best"]),
        ("The 5 largest gains of finetuned over base", chosen["finetuned"]["gains"]),
        ("The 5 largest losses of finetuned against base", chosen["finetuned"]["losses"])]
    assert data["systems"] == ["base", "finetuned"] and data["baseline"] == "base"
    assert len(data["entries"]) == 25 and [e["id"] for e in data["entries"]] == \
        [r["id"] for r in report["systems"]["base"]["per_entry"]]
    row = next(h for h in data["headline"] if h["path"] == "hgr.micro.triplet_f1")["values"]["finetuned"]
    block = report["comparison"]["metrics"]["finetuned"]["hgr.micro.triplet_f1"]
    assert (row["estimate"], row["ci"], row["delta"], row["p_value"]) == \
        (block["estimate"], block["ci"], block["delta"], block["p_value"])
    assert data["errors"]["finetuned"]["counts"] == report["systems"]["finetuned"]["errors"]["counts"]
    assert [s["label"] for s in data["slices"]["n_gold"]] == [s["label"] for s in report["slices"]["keys"]["n_gold"]]
    assert data["signature"] == report["comparison"]["signature"]


def test_the_method_is_named_where_users_find_it(sample):
    """The page's reasons name README's "The method", never SPEC.md (users do not have it)."""
    text = sample[1].read_text(encoding="utf-8")
    assert "SPEC" not in text and "is not in the vocabulary: the method (README, The method; 20 relations)" in text


def test_same_bytes_twice(sample, tmp_path):
    """Deterministic: a second run writes the same bytes."""
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, *FAST, "--slice-by", "n_gold",
                          "--no-report", "--html", tmp_path / "again.html")
    assert rc == 0, err
    assert (tmp_path / "again.html").read_bytes() == sample[1].read_bytes()


def test_embed_json_escapes_script_ends_and_line_separators():
    """A title holding </script>, <!-- and U+2028/U+2029: none reaches the page raw, and the
    JSON reads back the same (\\u003c is JSON for <)."""
    data = {"title": "</script><script>alert(1)</script> <!-- x \u2028\u2029 &amp;"}
    text = ev.AuditPage.embed_json(data)
    assert "<" not in text and "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == data


def test_script_end_in_a_title_stays_data(tmp_path):
    """A run whose gold title is "</script><b>x": the page has exactly its two script
    elements, the title is in the embedded data as written."""
    title = "</script><b>x"
    g = write(tmp_path / "g.jsonl", [{"id": "a", "prompt": f"{title} is located in Oslo.", "triplets": [
        {"source": {"title": title, "type": "entity"}, "relation": {"type": "located_in", "weight": 1.0},
         "target": {"title": "Oslo", "type": "entity"}}]}])
    p = write(tmp_path / "p.jsonl", [{"id": "a", "output": json.dumps([
        {"source": {"title": title, "type": "entity"}, "relation": {"type": "located_in", "weight": 1.0},
         "target": {"title": "Oslo", "type": "entity"}}])}])
    rc, _, err = run_main("--pred", p, "--gold", g, "--no-embeddings", "--quiet", "--no-report",
                          "--html", tmp_path / "t.html")
    assert rc == 0, err
    text = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert text.count("</script>") == 2 and text.count("<script") == 2
    entry = page_data(text)["entries"][0]
    assert entry["systems"][0]["gold"][0]["source"] == title and entry["prompt"].startswith(title)


def test_lone_surrogates_in_ids_prompts_and_titles(tmp_path):
    """An id "a\\ud800", a prompt and a title with lone surrogate escapes (valid JSON):
    the page's data keeps them (escaped: the file is UTF-8, and json.loads reads back the
    same strings), the examples show U+FFFD; before, both crashed (UnicodeEncodeError)."""
    triplet = '{"source": {"title": "Foo\\udc00", "type": "c"}, "relation": {"type": "part_of", "weight": 0.9}, ' \
              '"target": {"title": "Bar", "type": "c"}}'
    (tmp_path / "g.jsonl").write_text('{"id": "a\\ud800", "prompt": "Foo\\udc00 is part of Bar.", '
                                      '"triplets": [%s]}\n' % triplet)
    (tmp_path / "p.jsonl").write_text('{"id": "a\\ud800", "triplets": [%s]}\n' % triplet)
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings", "--quiet",
                          "--no-report", "--html", tmp_path / "s.html", "--examples", tmp_path / "s.md")
    assert rc == 0, err
    entry = page_data((tmp_path / "s.html").read_text(encoding="utf-8"))["entries"][0]
    assert (entry["id"], entry["prompt"], entry["systems"][0]["gold"][0]["source"]) == \
        ("a\ud800", "Foo\udc00 is part of Bar.", "Foo\udc00")
    text = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "#### 1. a\ufffd · p 1.0000" in text and "> Foo\ufffd is part of Bar." in text


def test_html_adds_the_errors_family(tmp_path):
    """--metrics hgr --html: the errors family is added (the page shows the classes)."""
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", "--metrics", "hgr",
                          "--report", tmp_path / "r.json", "--html", tmp_path / "p.html")
    assert rc == 0, err
    assert "errors" in load_report(tmp_path / "r.json")
    assert page_data((tmp_path / "p.html").read_text(encoding="utf-8"))["errors"]["finetuned"]["counts"]["gold"]["found"] \
        == 59


@pytest.mark.parametrize("extra, says", [
    (("--report", "PAGE"), "and --report PAGE are the same file"),
    (("--per-entry-jsonl", "PAGE"), "and --per-entry-jsonl PAGE are the same file"),
    (("--examples", "PAGE"), "and --examples PAGE are the same file"),
    (("--gold", "PAGE"), "is one of the inputs"),
    (("--shard", "1/2"), "a --shard has some of them"),
])
def test_refused_before_scoring(tmp_path, extra, says):
    """--html onto another output or an input, or of a shard: exit 2 naming --html, nothing
    written."""
    page = tmp_path / "p.html"
    page.write_text("{}")
    extra = tuple(str(page) if x == "PAGE" else x for x in extra)
    gold = () if "--gold" in extra else ("--gold", GOLD)
    rc, _, err = run_main("--pred", FINETUNED, *gold, "--no-embeddings", *extra, "--html", page)
    assert rc == 2 and f"--html {page}" in err and says.replace("PAGE", str(page)) in err, err
    assert page.read_text() == "{}"


def test_summary_only_and_rows_file_make_the_same_page(tmp_path):
    """One system: --summary-only (rows kept for the page, left out of the report) and
    --per-entry-jsonl (rows read back from their file) write the plain run's page, byte
    for byte."""
    run = ("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet")
    for name, extra in (("plain", ("--no-report",)), ("summary", ("--summary-only", "--report", tmp_path / "r1.json")),
                        ("rows", ("--per-entry-jsonl", tmp_path / "rows.jsonl", "--report", tmp_path / "r2.json"))):
        rc, _, err = run_main(*run, *extra, "--html", tmp_path / f"{name}.html")
        assert rc == 0, err
    assert "per_entry" not in load_report(tmp_path / "r1.json")
    plain = (tmp_path / "plain.html").read_bytes()
    assert len(page_data(plain.decode("utf-8"))["entries"]) == 25
    assert (tmp_path / "summary.html").read_bytes() == plain and (tmp_path / "rows.html").read_bytes() == plain


def test_compare_and_merge_make_the_runs_page_data(sample, tmp_path):
    """--compare of the two systems' saved reports (base's rows in a --per-entry-jsonl file)
    embeds the data of the run that scored both (same resamples); --merge of two shards the
    data of the unsharded run."""
    one = ("--gold", GOLD, "--no-embeddings", "--quiet")
    for name, pred, rows in (("base", BASE, ("--per-entry-jsonl", tmp_path / "base.rows.jsonl")),
                             ("finetuned", FINETUNED, ())):
        assert run_main("--pred", pred, *one, "--slice-by", "n_gold", *rows, "--report", tmp_path / f"{name}.json")[0] == 0
    assert "per_entry" not in load_report(tmp_path / "base.json")
    rc, _, err = run_main("--compare", tmp_path / "base.json", tmp_path / "finetuned.json", "--bootstrap", "200",
                          "--trials", "500", "--no-report", "--html", tmp_path / "c.html")
    assert rc == 0 and f"audit page written to {tmp_path / 'c.html'}" in err, err
    assert page_data((tmp_path / "c.html").read_text(encoding="utf-8")) == page_data(sample[1].read_text(encoding="utf-8"))
    for k in (1, 2):
        assert run_main("--pred", FINETUNED, *one, "--shard", f"{k}/2", "--report", tmp_path / f"p{k}.json")[0] == 0
    assert run_main("--merge", tmp_path / "p1.json", tmp_path / "p2.json", "--quiet", "--no-report",
                    "--html", tmp_path / "m.html")[0] == 0
    assert run_main("--pred", FINETUNED, *one, "--no-report", "--html", tmp_path / "s.html")[0] == 0
    assert page_data((tmp_path / "m.html").read_text(encoding="utf-8")) == \
        page_data((tmp_path / "s.html").read_text(encoding="utf-8"))


def test_merge_prints_and_shows_the_paths_as_the_shards_were_given_them(tmp_path):
    """Shards run on relative paths: the merge's summary title and its page's header name
    them as the run in one piece does (before: the resolved paths the parts record)."""
    one = ("--gold", "gold/gold.jsonl", "--no-embeddings", "--quiet")
    for k in (1, 2):
        assert run_main("--pred", "predictions/finetuned.jsonl", *one, "--shard", f"{k}/2",
                        "--report", tmp_path / f"p{k}.json", cwd=ROOT)[0] == 0
    rc, merged, err = run_main("--merge", tmp_path / "p1.json", tmp_path / "p2.json", "--quiet", "--no-report",
                               "--html", tmp_path / "m.html")
    assert rc == 0, err
    rc, direct, err = run_main("--pred", "predictions/finetuned.jsonl", *one, "--no-report", "--html",
                               tmp_path / "d.html", cwd=ROOT)
    assert rc == 0, err
    title = f"kg-triplet-eval {ev.__version__}  predictions/finetuned.jsonl vs gold/gold.jsonl"
    assert merged.splitlines()[0] == direct.splitlines()[0] == title
    def header(page):
        return re.search(r'<p class="muted">(.*?)</p>', page.read_text(encoding="utf-8")).group(1)
    assert header(tmp_path / "m.html") == header(tmp_path / "d.html")
    assert header(tmp_path / "d.html").endswith("<br>predictions/finetuned.jsonl vs gold/gold.jsonl")


def test_compare_refuses_before_resampling_when_an_input_is_gone(tmp_path):
    """A saved report whose predictions file moved: exit 2 naming the system and the path."""
    pred = tmp_path / "pred.jsonl"
    shutil.copyfile(FINETUNED, pred)
    assert run_main("--pred", pred, "--gold", GOLD, "--no-embeddings", "--quiet", "--report", tmp_path / "a.json")[0] == 0
    assert run_main("--pred", BASE, "--gold", GOLD, "--no-embeddings", "--quiet", "--report", tmp_path / "b.json")[0] == 0
    pred.unlink()
    rc, _, err = run_main("--compare", tmp_path / "b.json", tmp_path / "a.json", "--no-report",
                          "--html", tmp_path / "c.html")
    assert rc == 2 and "system a" in err and str(pred) in err and "no longer exists" in err, err
    assert not (tmp_path / "c.html").exists()


def test_refused_for_directories_and_folders(tmp_path):
    """A directory --pred (Text2KGBench directory mode) or a folder as the page's path."""
    (tmp_path / "preds").mkdir()
    rc, _, err = run_main("--pred", tmp_path / "preds", "--gold", tmp_path, "--html", tmp_path / "p.html")
    assert rc == 2 and "not directories" in err, err
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-report", "--html", tmp_path)
    assert rc == 2 and "is a directory" in err, err


# --- in a real browser ---

@pytest.fixture(scope="module")
def browser():
    """A headless chromium under selenium, /usr/bin/chromedriver named (selenium's manager
    never runs); browser console messages kept."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()) or shutil.which("chromium") is None:
        why = f"no chromium here ({CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and {why}")
        pytest.skip(why)
    if os.environ.get("CI"):
        from selenium import webdriver  # a dev dependency: in CI its absence is a failure
    else:
        webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1600"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def _open(driver, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.body.getAttribute('data-ready')") == "1"


def _entry_shown(driver, key: str) -> list:
    """The entry view's system columns once it shows entry ``key`` (a click sets the
    address's #entry=...; the page opens the entry on the hashchange event, which comes
    after the click returns: waited for, up to 10 s)."""
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(driver, 10).until(
        lambda d: [e.text for e in d.find_elements("css selector", "#entry h2")] == [f"entry {key}"])
    return driver.find_elements("css selector", "#entry .sys")


def _console_errors(driver) -> list:
    return [m for m in driver.get_log("browser") if m.get("level") == "SEVERE"]


def _text(driver, css: str) -> list[str]:
    return [e.text for e in driver.find_elements("css selector", css)]


def _classes(report: dict, system: str, side: str) -> dict[str, list[str]]:
    """id -> the item classes of one side of a system's per-entry rows (the report's own)."""
    return {r["id"]: r["stats"]["errors"]["items"][side] for r in report["systems"][system]["per_entry"]}


def test_counts_shown_equal_the_report(browser, sample):
    """On load: "25 of 25 entries"; each class table's report count and its live count
    (counted in the page from the listed entries) equal the report's errors counts."""
    report, page = sample
    _open(browser, page)
    assert browser.find_element("id", "count").text == "25 of 25 entries"
    for s, name in enumerate(("base", "finetuned")):
        counts = report["systems"][name]["errors"]["counts"]
        for side in ("gold", "pred"):
            for cls, n in counts[side].items():
                cell = browser.find_element("css selector", f'td.live[data-sys="{s}"][data-key="{side}:{cls}"]')
                assert cell.text == str(n), (name, side, cls)
                report_cell = cell.find_element("xpath", "preceding-sibling::td[2]")
                assert report_cell.text == str(n)
    assert _console_errors(browser) == []


@pytest.fixture(scope="module")
def sampled_page(tmp_path_factory):
    """base against mix = (base, finetuned): two samples of one system; report and page."""
    folder = tmp_path_factory.mktemp("sampled-page")
    rc, _, err = run_main("--pred", BASE, "--pred", f"mix={BASE},{FINETUNED}", "--gold", GOLD, *FAST,
                          "--report", folder / "r.json", "--html", folder / "audit.html")
    assert rc == 0, err
    return load_report(folder / "r.json"), folder / "audit.html"


def test_the_class_tables_of_a_system_of_samples_show_the_systems_numbers(sampled_page):
    """Not its first sample's: the share is the estimate (the report's), the count the mean
    over the samples, each with the sd of the samples' own; 'shown' counts the entries
    listed, sample base's, and says so (before: the count 21 and share 0.2414 of base)."""
    report, page = sampled_page
    data = page_data(page.read_text())
    mix, runs = data["errors"]["mix"], report["systems"]["mix"]["samples"]["runs"]
    found = report["systems"]["mix"]["samples"]["metrics"]["errors.gold.found"]
    # gold found: base 21, finetuned 59 of 87 valid gold triplets each: mean 40, share 80/174
    assert [r["errors"]["counts"]["gold"]["found"] for r in runs] == [21, 59]
    assert mix["counts"]["gold"]["found"] == 40.0 and mix["gold"]["found"] == 80 / 174 == found["estimate"]
    assert mix["sd"]["counts"]["gold"]["found"] == ev.SampledSystem.sd([21, 59])  # 38 / sqrt 2
    assert mix["sd"]["gold"]["found"] == found["sd"]
    assert (mix["samples"], mix["listed"]) == (2, "base")
    for side, classes in (("gold", ev.ERROR_GOLD_CLASSES), ("pred", ev.ERROR_PRED_CLASSES)):
        for c in classes:  # every class: the pooled share, the mean count
            n = [r["errors"]["counts"][side][c] for r in runs]
            total = sum(r["errors"]["totals"]["gold_triplets" if side == "gold" else "pred_items"] for r in runs)
            assert mix["counts"][side][c] == sum(n) / 2 and mix[side][c] == (sum(n) / total if total else 0.0)
    assert data["errors"]["base"] == {k: report["systems"]["base"]["errors"][k] for k in ("counts", "gold", "pred")}
    assert any("the numbers of the header and of the error-class tables are the system's" in n
               for n in data["notices"])


def test_the_class_tables_of_a_system_of_samples_in_the_browser(browser, sampled_page):
    report, page = sampled_page
    _open(browser, page)
    heads = _text(browser, "#classes table:first-of-type th")
    assert heads[:7] == ["class", "base (report)", "share", "shown", "mix (mean ± sd of 2 samples)",
                         "share (estimate ± sd)", "shown (base's entries)"]
    row = browser.find_element("css selector", 'td.live[data-sys="1"][data-key="gold:found"]').find_element(
        "xpath", "..")
    sd = ev.SampledSystem.sd([21, 59])
    share = report["systems"]["mix"]["samples"]["metrics"]["errors.gold.found"]
    assert [td.text for td in row.find_elements("css selector", "td")][4:7] == [
        f"40.0 ± {sd:.1f}", f"{share['estimate']:.4f} ± {share['sd']:.4f}", "21"]
    assert _console_errors(browser) == []


@pytest.fixture(scope="module")
def two_sampled_pages(tmp_path_factory):
    """Two systems of several samples: A = (base, finetuned), B = (finetuned, finetuned,
    base; the second a copy); the report, the page and the text summary."""
    folder = tmp_path_factory.mktemp("two-sampled")
    copy = folder / "again.jsonl"
    copy.write_bytes(FINETUNED.read_bytes())
    rc, out, err = run_main("--no-embeddings", "--bootstrap", "200", "--trials", "500",
                            "--pred", f"A={BASE},{FINETUNED}", "--pred", f"B={FINETUNED},{copy},{BASE}",
                            "--gold", GOLD, "--report", folder / "r.json", "--html", folder / "audit.html")
    assert rc == 0, err
    return load_report(folder / "r.json"), folder / "audit.html", out


def _sample_composites(report: dict, name: str) -> dict[str, list]:
    """id -> each sample's composite of one system's entry (the report's rows)."""
    return {r["id"]: [s["metrics"]["composite"] for s in r["samples"]] for r in report["systems"][name]["per_entry"]}


def test_the_entry_list_of_systems_of_samples_shows_each_entrys_mean(two_sampled_pages):
    """Each entry's listed composite is its mean over the system's samples (before: the
    first sample's, so A = B = finetuned's on most rows and every difference +0.0000);
    their mean over the entries is the report's macro composite; the gains and losses
    rank the differences of those means."""
    report, page, _ = two_sampled_pages
    data = page_data(page.read_text(encoding="utf-8"))
    assert data["sampled"] == {"A": {"count": 2, "listed": "base"}, "B": {"count": 3, "listed": "finetuned"}}
    a, b = _sample_composites(report, "A"), _sample_composites(report, "B")
    for e in data["entries"]:
        got = [s["mean_composite"] for s in e["systems"]]
        # A: (base + finetuned) / 2; B: (2 finetuned + base) / 3, the samples of one entry
        assert got == pytest.approx([sum(a[e["id"]]) / 2, sum(b[e["id"]]) / 3], abs=1e-15), e["id"]
        assert [s["composite"] for s in e["systems"]] == [a[e["id"]][0], b[e["id"]][0]]  # the sample shown
    for s, name in enumerate("AB"):
        mean = sum(e["systems"][s]["mean_composite"] for e in data["entries"]) / len(data["entries"])
        assert mean == pytest.approx(report["systems"][name]["samples"]["metrics"]["hgr.macro.composite"]["estimate"],
                                     abs=1e-12)
    diffs = {e["id"]: e["systems"][1]["mean_composite"] - e["systems"][0]["mean_composite"] for e in data["entries"]}
    gains = next(x for x in data["examples"] if x["title"].startswith("The 5 largest gains of B over A"))
    assert gains["title"].endswith(ev.AuditPage.MEANS_WORDS)
    assert gains["ids"] == sorted((k for k in diffs if diffs[k] > 1e-12), key=lambda k: (-diffs[k], k))[:5]
    assert len(gains["ids"]) == 5 and sum(d > 1e-12 for d in diffs.values()) >= 5


def test_the_entry_list_of_systems_of_samples_in_the_browser(browser, two_sampled_pages):
    """The columns say "mean of k", a note above the list says what is listed and whose
    triplets the entry view shows; the rows show the means and their differences; the
    "B - A" sort puts the largest difference first; the entry view shows both composites."""
    report, page, _ = two_sampled_pages
    _open(browser, page)
    heads = _text(browser, "#list-head .row.head span")
    assert heads[1:6] == ["A\nmean of 2", "parse\nbase", "B\nmean of 3", "parse\nfinetuned", "Δ"]
    note = browser.find_element("id", "list-note").text
    assert note.startswith("A: each entry's composite is its mean over the 2 samples") and \
        "the entry view are those of its finetuned, the first of 3." in note
    a, b = _sample_composites(report, "A"), _sample_composites(report, "B")
    means = {k: (sum(a[k]) / 2, sum(b[k]) / 3) for k in a}
    row = browser.find_element("css selector", "#list-rows .row")
    key = row.get_attribute("data-id")
    cells = [c.text for c in row.find_elements("css selector", "span")]
    assert cells[1] == f"{means[key][0]:.4f}" and cells[3] == f"{means[key][1]:.4f}"
    assert cells[5] == f"{means[key][1] - means[key][0]:+.4f}"
    browser.execute_script("window.auditPage.setFilter({sort: 'diff_desc_1'})")
    best = max(means, key=lambda k: (round(means[k][1] - means[k][0], 12), [-ord(c) for c in k]))
    assert browser.execute_script("return window.auditPage.viewIds()")[0] == best
    browser.execute_script("window.auditPage.open(arguments[0])", key)
    view = _entry_shown(browser, key)
    assert view[0].find_element("css selector", "h3").text == f"A composite {means[key][0]:.4f} (mean of 2 samples)"
    assert view[0].find_element("css selector", "p.note").text == \
        f"shown: its base (the first of 2), composite {a[key][0]:.4f}"
    assert _console_errors(browser) == []


def test_the_pages_p_values_are_the_text_summarys(browser, two_sampled_pages):
    """The header prints each p as the text summary does, 4 decimals (before: two
    significant digits, "0.00020" and "0.63" where the text printed 0.0002 and 0.6265)."""
    report, page, text = two_sampled_pages
    printed = {}
    block = text.split("\nB - A ", 1)[1]
    for line in block.splitlines()[1:]:
        if not line.strip():
            break
        parts = line.split()
        printed[parts[0]] = next(p for p in parts[3:] if re.fullmatch(r"\d\.\d{4}", p))
    _open(browser, page)
    shown = {}
    for tr in browser.find_elements("css selector", "#headline table tbody tr"):
        path = tr.find_element("css selector", "td span").get_attribute("title")
        tds = tr.find_elements("css selector", "td")
        shown[path] = tds[4].text.rstrip(" *")
    assert len(printed) > 20 and {p: shown[p] for p in printed} == printed
    metrics = report["comparison"]["metrics"]["B"]
    assert all(printed[p] == f"{metrics[p]['p_value']:.4f}" for p in printed)


def test_filter_and_search_show_the_right_entries(browser, sample):
    """Class filter predicted: novel grounded for finetuned (UI selects) lists exactly the
    entries whose finetuned rows have such an item; a search then narrows to those whose
    id, prompt or titles contain the text; the counts line follows."""
    from selenium.webdriver.support.ui import Select
    report, page = sample
    _open(browser, page)
    Select(browser.find_element("id", "f-sys")).select_by_value("finetuned")
    Select(browser.find_element("id", "f-class")).select_by_value("pred:novel_grounded")
    want = [i for i, classes in _classes(report, "finetuned", "pred").items() if "novel_grounded" in classes]
    assert want and browser.execute_script("return auditPage.viewIds()") == want
    assert browser.execute_script("return auditPage.visibleIds()") == want
    assert browser.find_element("id", "count").text == f"{len(want)} of 25 entries"
    live = browser.find_element("css selector", 'td.live[data-sys="1"][data-key="pred:novel_grounded"]').text
    assert live == str(report["systems"]["finetuned"]["errors"]["counts"]["pred"]["novel_grounded"])
    data = page_data(page.read_text(encoding="utf-8"))
    word = next(e["id"] for e in data["entries"] if e["id"] in want)
    prompt_word = next(e["prompt"].split()[1] for e in data["entries"] if e["id"] == word).lower()
    box = browser.find_element("id", "f-search")
    box.send_keys(prompt_word)
    browser.execute_script("auditPage.search(arguments[0])", prompt_word)  # no wait on the typing's debounce

    def hay(e):
        titles = [t[k] or "" for a in e["systems"] if a for t in a["gold"] + a["pred"] for k in ("source", "target")]
        return "\n".join([e["id"], e["prompt"], *titles]).lower()
    narrowed = [e["id"] for e in data["entries"] if e["id"] in want and prompt_word in hay(e)]
    assert word in narrowed and browser.execute_script("return auditPage.viewIds()") == narrowed
    assert browser.find_element("id", "count").text == f"{len(narrowed)} of 25 entries"
    assert _console_errors(browser) == []


def test_parse_status_and_relation_filters(browser, sample):
    """Parse status empty in base: the entries whose base row is empty; then relation
    located_in (any system): the entries with a gold or valid predicted located_in."""
    from selenium.webdriver.support.ui import Select
    report, page = sample
    _open(browser, page)
    Select(browser.find_element("id", "f-sys")).select_by_value("base")
    Select(browser.find_element("id", "f-status")).select_by_value("empty")
    want = [r["id"] for r in report["systems"]["base"]["per_entry"] if r["parse_status"] == "empty"]
    assert want and browser.execute_script("return auditPage.viewIds()") == want
    browser.find_element("id", "f-reset").click()
    Select(browser.find_element("id", "f-rel")).select_by_value("located_in")
    data = page_data(page.read_text(encoding="utf-8"))
    want = [e["id"] for e in data["entries"] if any(
        t["relation"] == "located_in" for a in e["systems"] for t in a["gold"] + [p for p in a["pred"] if p["valid"]])]
    assert want and browser.execute_script("return auditPage.viewIds()") == want
    assert browser.find_element("id", "count").text == f"{len(want)} of 25 entries"


def test_class_and_slice_links_filter_the_list(browser, sample):
    """Clicking a count of the class table filters the list to that class and system;
    clicking a slice label to that slice's entries (as many as the slice table says)."""
    report, page = sample
    _open(browser, page)
    browser.find_element("css selector", '#classes a[data-filter*="gold:entities_absent"][data-filter*="base"]').click()
    want = [i for i, classes in _classes(report, "base", "gold").items() if "entities_absent" in classes]
    assert browser.execute_script("return auditPage.viewIds()") == want
    assert browser.find_element("id", "f-class").get_attribute("value") == "gold:entities_absent"
    browser.find_element("id", "f-reset").click()
    first = report["slices"]["keys"]["n_gold"][1]
    next(a for a in browser.find_elements("css selector", "#slices a") if a.text == first["label"]).click()
    shown = browser.execute_script("return auditPage.viewIds()")
    rows = {r["id"]: r["slices"]["n_gold"] for r in report["systems"]["base"]["per_entry"]}
    assert len(shown) == first["n_entries"] and all(ev.slice_label(rows[i]) == first["label"] for i in shown)


def test_example_lists_link_to_their_entries(browser, sample):
    """The examples section lists example_selections' ids (largest gains of finetuned first
    by difference); a click opens that entry."""
    report, page = sample
    _open(browser, page)
    chosen = ev.example_selections(report["systems"], 5, "base")
    lines = browser.find_elements("css selector", "#examples p")
    gains = next(p for p in lines if p.text.startswith("The 5 largest gains of finetuned over base"))
    links = gains.find_elements("css selector", "a.ex")
    assert [a.text for a in links] == chosen["finetuned"]["gains"]
    links[0].click()
    assert len(_entry_shown(browser, chosen["finetuned"]["gains"][0])) == 2


def test_sort_by_difference_and_composite(browser, sample):
    """Sorted by finetuned - base, largest first, then by finetuned's composite, smallest
    first (ties in file order)."""
    report, page = sample
    _open(browser, page)
    from selenium.webdriver.support.ui import Select
    Select(browser.find_element("id", "f-sort")).select_by_value("diff_desc_1")
    comp = {n: {r["id"]: r["metrics"]["composite"] for r in report["systems"][n]["per_entry"]} for n in ("base", "finetuned")}
    order = [r["id"] for r in report["systems"]["base"]["per_entry"]]
    want = sorted(order, key=lambda i: (-(comp["finetuned"][i] - comp["base"][i]), order.index(i)))
    assert browser.execute_script("return auditPage.viewIds()") == want
    Select(browser.find_element("id", "f-sys")).select_by_value("finetuned")
    Select(browser.find_element("id", "f-sort")).select_by_value("composite_asc")
    want = sorted(order, key=lambda i: (comp["finetuned"][i], order.index(i)))
    assert browser.execute_script("return auditPage.viewIds()") == want
    assert browser.execute_script("return auditPage.visibleIds()")[:3] == want[:3]


def test_three_systems(browser, tmp_path):
    """Three systems (base, finetuned, and base's answers again as "again"): a difference
    column and sort for each system after the baseline; the entry view has three columns."""
    shutil.copyfile(BASE, tmp_path / "again.jsonl")
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--pred", tmp_path / "again.jsonl", "--gold", GOLD,
                          *FAST, "--report", tmp_path / "r.json", "--html", tmp_path / "three.html")
    assert rc == 0, err
    report = load_report(tmp_path / "r.json")
    _open(browser, tmp_path / "three.html")
    from selenium.webdriver.support.ui import Select
    sort = Select(browser.find_element("id", "f-sort"))
    assert [o.get_attribute("value") for o in sort.options][-4:] == ["diff_desc_1", "diff_asc_1", "diff_desc_2",
                                                                    "diff_asc_2"]
    sort.select_by_value("diff_desc_2")
    comp = {n: {r["id"]: r["metrics"]["composite"] for r in sub["per_entry"]} for n, sub in report["systems"].items()}
    order = list(comp["base"])
    # again = base: every difference is 0, so the order is the file order
    assert set(comp["again"]) == set(order) and browser.execute_script("return auditPage.viewIds()") == order
    sort.select_by_value("diff_asc_1")
    want = sorted(order, key=lambda i: (comp["finetuned"][i] - comp["base"][i], order.index(i)))
    assert browser.execute_script("return auditPage.viewIds()") == want
    first = browser.find_element("css selector", "#list-rows .row")
    assert [c.text for c in first.find_elements("css selector", ".diff")][1] == "+0.0000"
    browser.execute_script("location.hash = 'entry=s04'")
    assert len(_entry_shown(browser, "s04")) == 3
    assert _console_errors(browser) == []


def test_entry_view_pairs_equal_the_report(browser, sample, tmp_path):
    """Opening s04 (click on its row): per system, the aligned pairs table's similarities
    and class, the unmatched gold and their classes, as the report's row has them; then a
    screenshot, and no console error."""
    report, page = sample
    _open(browser, page)
    browser.find_element("css selector", '#list-rows .row[data-id="s04"]').click()
    views = _entry_shown(browser, "s04")
    assert len(views) == 2
    for view, name in zip(views, ("base", "finetuned")):
        row = next(r for r in report["systems"][name]["per_entry"] if r["id"] == "s04")
        pred_classes = row["stats"]["errors"]["items"]["pred"]
        cells = [[td.text for td in tr.find_elements("tag name", "td")]
                 for tr in view.find_elements("css selector", "table.pairs tbody tr")]
        assert len(cells) == len(row["pairs"])
        for got, pair in zip(cells, row["pairs"]):
            assert got[2:6] == [f"{pair[k]:.4f}" for k in ("source_sim", "relation_sim", "target_sim", "align_sim")]
            assert got[6].splitlines()[0] == pred_classes[pair["pred_index"]].replace("_", " ")
        gold_classes = row["stats"]["errors"]["items"]["gold"]
        unmatched = [c for c in gold_classes if c in ev.AuditPage.UNMATCHED_GOLD]
        shown = [tr.find_elements("tag name", "td")[1].text
                 for tr in view.find_elements("css selector", "table.ugold tbody tr")]
        assert shown == [c.replace("_", " ") for c in unmatched]
    # base s04: one pair 0<->0 (target sim 0: wrong target); gold 1 one entity, gold 2 no entity predicted
    assert [td.text for td in views[0].find_elements("css selector", "table.ugold tbody tr td:nth-child(2)")] == \
        ["one entity predicted", "entities absent"]
    marks = _text(browser, "#entry .prompt mark.m-g")
    assert "Kessler bloom" in marks and "Lake Varnu" in marks
    browser.save_screenshot(str(tmp_path / "audit_page.png"))
    assert (tmp_path / "audit_page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _console_errors(browser) == []


def test_entries_without_ids_are_named_by_their_gold_line(browser, tmp_path):
    """Gold and predictions without ids (joined by line order): the page names each entry
    ``line N``; #entry=line%203 opens the third one, whose prompt is the gold's third."""
    gold = [json.loads(x) for x in GOLD.read_text(encoding="utf-8").splitlines()][:4]
    pred = [json.loads(x) for x in FINETUNED.read_text(encoding="utf-8").splitlines()][:4]
    write(tmp_path / "g.jsonl", [{k: v for k, v in g.items() if k != "id"} for g in gold])
    write(tmp_path / "p.jsonl", [{k: v for k, v in p.items() if k != "id"} for p in pred])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings",
                          "--quiet", "--no-report", "--html", tmp_path / "noid.html")
    assert rc == 0, err
    data = page_data((tmp_path / "noid.html").read_text(encoding="utf-8"))
    assert [e["id"] for e in data["entries"]] == ["line 1", "line 2", "line 3", "line 4"]
    browser.get((tmp_path / "noid.html").resolve().as_uri() + "#entry=line%203")
    assert _entry_shown(browser, "line 3")
    assert browser.find_element("css selector", "#entry .prompt").text == gold[2]["prompt"]
    assert _console_errors(browser) == []


def test_an_id_that_reads_line_n_is_an_entry_of_its_own(browser, tmp_path):
    """Gold line 1 has the id "line 2", line 2 none (joined by order): two entries, keyed
    '"line 2"' and 'line 2' (before, one key: the page lost an entry); each address opens
    its own prompt."""
    triplet = {"source": {"title": "Foo", "type": "c"}, "relation": {"type": "part_of", "weight": 0.9},
               "target": {"title": "Bar", "type": "c"}}
    write(tmp_path / "g.jsonl", [{"id": "line 2", "prompt": "first prompt", "triplets": [triplet]},
                                 {"prompt": "second prompt", "triplets": [triplet]}])
    write(tmp_path / "p.jsonl", [{"id": "line 2", "triplets": [triplet]}, {"triplets": []}])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings",
                          "--quiet", "--join", "order", "--no-report", "--html", tmp_path / "ids.html")
    assert rc == 0, err
    data = page_data((tmp_path / "ids.html").read_text(encoding="utf-8"))
    assert [(e["id"], e["prompt"]) for e in data["entries"]] == [('"line 2"', "first prompt"), ("line 2", "second prompt")]
    for address, key, prompt in (("line%202", "line 2", "second prompt"), ("%22line%202%22", '"line 2"', "first prompt")):
        browser.get((tmp_path / "ids.html").resolve().as_uri() + "#entry=" + address)
        assert _entry_shown(browser, key)
        assert browser.find_element("css selector", "#entry .prompt").text == prompt
    assert _console_errors(browser) == []


def test_slice_filter_keeps_apart_what_the_report_keeps_apart(browser, tmp_path):
    """grp = 1, "1", "(missing)", absent: four slices; each slice link and each option of
    the slice select lists that slice's entry only (before: the filter compared labels, so
    1 and "1", "(missing)" and absent each listed two entries)."""
    triplet = {"source": {"title": "Foo", "type": "c"}, "relation": {"type": "part_of", "weight": 0.9},
               "target": {"title": "Bar", "type": "c"}}
    groups = {"e0": 1, "e1": "1", "e2": "(missing)", "e3": None}
    write(tmp_path / "g.jsonl", [{"id": i, "prompt": "Foo is part of Bar.", "triplets": [triplet],
                                  **({"grp": g} if g is not None else {})} for i, g in groups.items()])
    write(tmp_path / "p.jsonl", [{"id": i, "triplets": [triplet]} for i in groups])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings",
                          "--quiet", "--slice-by", "grp", "--no-report", "--html", tmp_path / "s.html")
    assert rc == 0, err
    _open(browser, tmp_path / "s.html")
    from selenium.webdriver.support.ui import Select
    want = {"1": ["e0"], '"(missing)"': ["e2"], '"1"': ["e1"], "(missing)": ["e3"]}
    links = browser.find_elements("css selector", "#slices a")
    assert [a.text for a in links] == list(want)
    for k, label in enumerate(want):
        browser.find_elements("css selector", "#slices a")[k].click()
        assert browser.execute_script("return auditPage.viewIds()") == want[label], label
        browser.find_element("id", "f-reset").click()
        select = Select(browser.find_element("css selector", "select.f-slice"))
        select.select_by_visible_text("grp: " + label)
        assert browser.execute_script("return auditPage.viewIds()") == want[label], label
        browser.find_element("id", "f-reset").click()
    browser.execute_script("location.hash = 'entry=e1'")
    _entry_shown(browser, "e1")
    assert browser.find_element("css selector", "#entry p.muted").text == 'slices: grp "1"'
    assert _console_errors(browser) == []


def _p(x):
    """A p-value as the page prints it: as the text summary does, 4 decimals (before: two
    significant digits, 0.00050 and 0.63 where the text printed 0.0005 and 0.6265)."""
    return "" if x is None else f"{x:.4f}"


@pytest.mark.parametrize("correction", ["holm", None])
def test_header_shows_the_p_that_decides_significance(browser, tmp_path, correction):
    """--correction holm: the header has a "Holm p" column after "p", and * marks the Holm p
    of the significant differences (before: the raw p alone, next to a legend that said
    "after Holm's correction"); without one, * marks the p."""
    extra = ("--correction", correction) if correction else ()  # 2000 trials: p >= 1/2001, Holm's up to 29 times that
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet",
                          "--bootstrap", "200", "--trials", "2000", *extra,
                          "--report", tmp_path / "r.json", "--html", tmp_path / "h.html")
    assert rc == 0, err
    block = load_report(tmp_path / "r.json")["comparison"]["metrics"]["finetuned"]
    _open(browser, tmp_path / "h.html")
    table = browser.find_element("css selector", "#headline table")
    head = [th.text for th in table.find_elements("css selector", "thead th")]
    assert head == ["", "base", "finetuned", "finetuned \u2212 base", "p", *(["Holm p"] if correction else [])]
    data = page_data((tmp_path / "h.html").read_text(encoding="utf-8"))
    paths = [h["path"] for h in data["headline"] if h["table"] == data["headline"][0]["table"]]
    rows = [[td.text for td in tr.find_elements("tag name", "td")] for tr in table.find_elements("css selector", "tbody tr")]
    marks = 0
    for path, cells in zip(paths, rows):
        m = block[path]
        star = " *" if m["significant"] else ""
        marks += bool(star)
        if correction:
            assert (cells[4], cells[5]) == (_p(m["p_value"]), _p(m["p_adjusted"]) + star), path
        else:
            assert cells[4] == _p(m["p_value"]) + star and "*" not in cells[3], path
    assert marks and len(rows) == len(paths)
    assert not correction or any(cells[4] != cells[5].rstrip(" *") for cells in rows)  # the two p columns differ


def _headline_rows(driver, title: str) -> dict[str, list]:
    """The rows of the header's table ``title``: metric path -> its cells (td elements)."""
    box = next(d for d in driver.find_elements("css selector", "#headline > div")
               if d.find_element("tag name", "h3").text == title)
    rows = box.find_elements("css selector", "tbody tr")
    return {tr.find_element("css selector", "td span").get_attribute("title"): tr.find_elements("tag name", "td")
            for tr in rows}


def test_a_paired_macro_metric_shows_the_delta_of_the_text_summary(browser, sample):
    """A macro metric N/A on some entries is paired on the entries both systems define
    (relation accuracy, weight and type agreement of the sample: on 12 of 25 entries): its
    row shows the paired delta beside the paired interval and p, with the text summary's
    "paired on k of n entries" words, the same cells as format_comparison prints (before:
    the difference of the two estimates, type agr. +0.1377 beside the paired interval,
    and no label); the other rows keep the difference of the estimates."""
    report, page = sample
    block = report["comparison"]["metrics"]["finetuned"]
    paired = [p for p, m in block.items() if "paired_entries" in m and m["delta"] is not None]
    assert {"hgr.macro.relation_accuracy", "hgr.macro.weight_score", "hgr.macro.type_agreement"} <= set(paired)
    m = block["hgr.macro.type_agreement"]
    # 12 of 25 entries; the estimates' difference is not the paired delta (the page's number before)
    assert (m["paired_entries"], m["paired_of"]) == (12, 25) and m["paired_delta"] != m["delta"]
    data = page_data(page.read_text(encoding="utf-8"))
    values = {h["path"]: h["values"]["finetuned"] for h in data["headline"]}
    text = ev.format_comparison(report["comparison"]).split("finetuned - base", 1)[1]
    _open(browser, page)
    cells = _headline_rows(browser, "hgr macro (mean over entries)")
    for path in paired:
        m, v = block[path], values[path]
        assert (v["paired_delta"], v["delta_ci"], v["p_value"]) == (m["paired_delta"], m["delta_ci"], m["p_value"])
        delta = ev._format_cell(m["paired_delta"], m["delta_ci"], signed=True)
        words = ev._paired_text(m).strip()
        assert v["paired"] == words and re.search(rf"^{re.escape(path)} +{re.escape(delta)} .*{re.escape(words)}$",
                                                  text, re.M), path
        assert [td.text for td in cells[path][3:5]] == [f"{delta}\n{words}", _p(m["p_value"])], path
    micro = block["hgr.macro.composite"]  # defined on every entry: the difference of the estimates
    assert cells["hgr.macro.composite"][3].text == ev._format_cell(micro["delta"], micro["delta_ci"], signed=True)
    assert _console_errors(browser) == []


def test_the_headline_tables_fit_at_1400_pixels(browser, sample, tmp_path):
    """In a 1400 px window every header table fits: no scroll bar, the last column (p and
    its *) inside its box (before: "errors: gold triplets" of the sample was 678 px in a
    663 px column, its p column behind a scroll bar). Two systems: each table fits its
    half of the header (wrapped where needed); three systems with Holm's column (10
    columns, about 850 px even wrapped): each table takes the header's whole width."""
    shutil.copyfile(BASE, tmp_path / "third.jsonl")
    rc, _, err = run_main("--pred", BASE, "--pred", FINETUNED, "--pred", tmp_path / "third.jsonl", "--gold", GOLD,
                          *FAST, "--correction", "holm", "--no-report", "--html", tmp_path / "three.html")
    assert rc == 0, err
    for page, full in ((sample[1], 0), (tmp_path / "three.html", 5)):
        _open(browser, page)
        assert browser.execute_script("return window.innerWidth") == 1400
        boxes = browser.execute_script("""
          return Array.prototype.map.call(document.querySelectorAll('#headline > div'), function (d) {
            var right = d.getBoundingClientRect().right;
            var last = Array.prototype.map.call(d.querySelectorAll('tr > :last-child'), function (c) {
              return c.getBoundingClientRect().right; });
            return [d.querySelector('h3').textContent, d.scrollWidth, d.clientWidth, right,
                    Math.max.apply(null, last), d.classList.contains('full')];
          });""")
        assert len(boxes) == 5 and "errors: gold triplets (share of the valid gold)" in [b[0] for b in boxes]
        for title, scroll, client, right, last, _ in boxes:
            assert scroll <= client and last <= right + 0.5, (page.name, title, scroll, client, right, last)
        assert sum(b[5] for b in boxes) == full, page.name
        assert _console_errors(browser) == []


def test_a_single_run_without_intervals_shows_its_slice_numbers(browser, tmp_path):
    """One system, no --bootstrap: the report keeps each slice's numbers (no interval) under
    the system "" (no comparison block); the page shows them under its one system (before:
    n/a in every cell)."""
    rc, _, err = run_main("--pred", FINETUNED, "--gold", GOLD, "--no-embeddings", "--quiet", "--slice-by", "n_gold",
                          "--report", tmp_path / "r.json", "--html", tmp_path / "s.html")
    assert rc == 0, err
    slices = load_report(tmp_path / "r.json")["slices"]["keys"]["n_gold"]
    assert [list(s["metrics"]) for s in slices] == [[""]] * 3
    data = page_data((tmp_path / "s.html").read_text(encoding="utf-8"))
    assert data["systems"] == ["finetuned"]
    for mine, theirs in zip(data["slices"]["n_gold"], slices):
        assert mine["metrics"] == {"finetuned": {p: {"estimate": theirs["metrics"][""][p]["estimate"], "ci": None}
                                                 for p, _ in ev.SLICE_COLUMNS}}
    _open(browser, tmp_path / "s.html")
    rows = [[td.text for td in tr.find_elements("tag name", "td")]
            for tr in browser.find_elements("css selector", "table.slicetab tbody tr")]
    # 3-5: composite 0.8640, entity F1 0.7326, triplet F1 0.6628 (the text summary's)
    assert rows[2] == ["3-5", "23", "0.8640", "0.7326", "0.6628"]
    assert rows == [[s["label"], str(s["n_entries"]),
                     *(f"{s['metrics'][''][p]['estimate']:.4f}" for p, _ in ev.SLICE_COLUMNS)] for s in slices]
    assert _console_errors(browser) == []


def test_p_values_with_several_samples_say_why_they_can_disagree_with_the_interval(sampled_page, sample):
    """A comparison with a system of several samples: under the header's tables, unfolded,
    the note that the test treats each entry's average over its samples as fixed while the
    interval also resamples them (the report's note; not again among the folded notices);
    a comparison of single samples has neither the note nor the data's ``legend`` key."""
    report, page = sampled_page
    text = page.read_text(encoding="utf-8")
    data = page_data(text)
    assert ev.SAMPLES_TEST_NOTE in report["comparison"]["notes"]
    assert data["legend"] == [ev.SAMPLES_TEST_NOTE] and ev.SAMPLES_TEST_NOTE not in data["notices"]
    header = text.split("<code class=\"sig\">")[0]
    assert header.count(f'<p class="note">{html.escape(ev.SAMPLES_TEST_NOTE)}</p>') == 1
    plain = sample[1].read_text(encoding="utf-8")
    assert "legend" not in page_data(plain) and "treats each entry's average" not in plain


def test_keys_named_like_object_properties_are_data(browser, tmp_path):
    """Relations, ids, a slice key and system names that JavaScript objects have as
    properties (constructor, toString, valueOf, __proto__): each filter lists exactly its
    entries, each address opens its entry and an unknown one nothing, the class and
    header tables show the systems' numbers (before: relation constructor listed every
    entry, and a system named like a property broke the tables)."""
    def item(rel):
        return {"source": {"title": "Foo", "type": "c"}, "relation": {"type": rel, "weight": 0.9},
                "target": {"title": "Bar", "type": "c"}}
    rels = {"toString": "constructor", "__proto__": "country", "hasOwnProperty": "valueOf"}
    write(tmp_path / "g.jsonl", [{"id": i, "prompt": "Foo is part of Bar.", "triplets": [item(r)], "__proto__": r}
                                 for i, r in rels.items()])
    write(tmp_path / "p.jsonl", [{"id": i, "triplets": [item(r)]} for i, r in rels.items()])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl",
                          "--name", "constructor", "--name", "__proto__", *FAST, "--slice-by", "__proto__",
                          "--no-report", "--html", tmp_path / "o.html")
    assert rc == 0, err
    _open(browser, tmp_path / "o.html")
    from selenium.webdriver.support.ui import Select
    for entry, rel in rels.items():
        Select(browser.find_element("id", "f-rel")).select_by_value(rel)
        assert browser.execute_script("return auditPage.viewIds()") == [entry], rel
        browser.find_element("id", "f-reset").click()
        Select(browser.find_element("css selector", "select.f-slice")).select_by_visible_text("__proto__: " + rel)
        assert browser.execute_script("return auditPage.viewIds()") == [entry], rel
        browser.find_element("id", "f-reset").click()
        browser.execute_script("location.hash = arguments[0]", "entry=" + entry)
        assert len(_entry_shown(browser, entry)) == 2
    browser.execute_script("auditPage.open('valueOf'); auditPage.open('constructor')")
    assert _text(browser, "#entry h2") == ["entry hasOwnProperty"]
    for s in ("0", "1"):  # the report's count of found gold triplets, and the shown count, per system
        cell = browser.find_element("css selector", f'td.live[data-sys="{s}"][data-key="gold:found"]')
        assert cell.text == "3" and cell.find_element("xpath", "preceding-sibling::td[2]").text == "3"
    first = browser.find_element("css selector", "#headline table tbody tr")
    assert [td.text.split(" ")[0] for td in first.find_elements("tag name", "td")][1:3] == ["1.0000", "1.0000"]
    assert _console_errors(browser) == []


def test_marks_follow_the_grounding_rule(browser, tmp_path):
    """Gold "Bank of the West" is not in the prompt as written but grounded by its tokens
    (bank, of, the, west: 4 of 4): one occurrence of each, in the runs of adjacent title
    words with the most distinct words ("The bank of the", then "west of the"), not every
    "the" and "of" of the prompt (before: all 9 marked); "Lake Varnu" where it occurs;
    predicted "river" blue, predicted "Varnu" inside a gold mark stays gold, "Foo Bar Baz
    Qux" (1 of 4 tokens: not grounded) unmarked."""
    prompt = "The bank of the river lies west of the city. Of all the lakes, Lake Varnu is the largest; Lake Varnu freezes."
    def item(source, target):
        return {"source": {"title": source, "type": "c"}, "relation": {"type": "located_in", "weight": 0.9},
                "target": {"title": target, "type": "c"}}
    write(tmp_path / "g.jsonl", [{"id": "a", "prompt": prompt, "triplets": [item("Bank of the West", "Lake Varnu")]}])
    write(tmp_path / "p.jsonl", [{"id": "a", "triplets": [item("river", "Varnu"), item("Foo Bar Baz Qux", "Lake Varnu")]}])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings", "--quiet",
                          "--no-report", "--html", tmp_path / "m.html")
    assert rc == 0, err
    browser.get((tmp_path / "m.html").resolve().as_uri() + "#entry=a")
    _entry_shown(browser, "a")
    assert _text(browser, "#entry .prompt mark.m-g") == ["The bank of the", "west of the", "Lake Varnu", "Lake Varnu"]
    assert _text(browser, "#entry .prompt mark.m-p") == ["river"]
    assert browser.find_element("css selector", "#entry .prompt").text == prompt
    assert _console_errors(browser) == []


def test_a_long_prompt_is_drawn_in_part_until_show_all(browser, tmp_path):
    """A 119,999-character prompt: the first 50,000 characters are drawn with their marks
    and a "show all" button; a click draws the whole prompt, marks included."""
    prompt = "Alpha is part of Beta. " + "lorem ipsum " * 9998   # 23 + 12 * 9998 = 119,999
    triplet = {"source": {"title": "Alpha", "type": "c"}, "relation": {"type": "part_of", "weight": 0.9},
               "target": {"title": "ipsum", "type": "c"}}
    write(tmp_path / "g.jsonl", [{"id": "a", "prompt": prompt, "triplets": [triplet]}])
    write(tmp_path / "p.jsonl", [{"id": "a", "triplets": [triplet]}])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings", "--quiet",
                          "--no-report", "--html", tmp_path / "l.html")
    assert rc == 0, err
    browser.get((tmp_path / "l.html").resolve().as_uri() + "#entry=a")
    _entry_shown(browser, "a")
    box = "#entry .prompt"
    assert browser.execute_script(f"return document.querySelector('{box}').firstChild.textContent") == "Alpha"
    drawn = browser.execute_script(f"return Array.from(document.querySelector('{box}').childNodes).filter("
                                   "function (n) { return n.nodeName !== 'BUTTON'; }).map(function (n) { "
                                   "return n.textContent; }).join('')")
    assert drawn == prompt[:50000] + " \u2026 "
    count = f"return document.querySelectorAll('{box} mark.m-g').length"
    # Alpha, the 4164 whole ipsum of the first 50,000 characters (23 + 12 * 4164 + 9), and the one cut there ("ips")
    assert prompt[:50000].endswith("lorem ips") and browser.execute_script(count) == 1 + 4164 + 1
    browser.find_element("css selector", f"{box} button.show-all").click()
    assert browser.execute_script(f"return document.querySelector('{box}').textContent") == prompt
    assert browser.execute_script(count) == 1 + 9998
    assert _console_errors(browser) == []


def test_virtual_list_renders_only_the_visible_rows(browser, tmp_path):
    """400 entries (the sample's gold and predictions, 16 copies with new ids): about a
    window's worth of rows is in the document, and scrolling to the end renders the last."""
    gold = [json.loads(x) for x in GOLD.read_text(encoding="utf-8").splitlines()]
    pred = [json.loads(x) for x in FINETUNED.read_text(encoding="utf-8").splitlines()]
    write(tmp_path / "g.jsonl", [{**g, "id": f"{g['id']}-{k:02d}"} for k in range(16) for g in gold])
    write(tmp_path / "p.jsonl", [{**p, "id": f"{p['id']}-{k:02d}"} for k in range(16) for p in pred])
    rc, _, err = run_main("--pred", tmp_path / "p.jsonl", "--gold", tmp_path / "g.jsonl", "--no-embeddings",
                          "--quiet", "--no-report", "--html", tmp_path / "big.html")
    assert rc == 0, err
    _open(browser, tmp_path / "big.html")
    assert browser.find_element("id", "count").text == "400 of 400 entries"
    rows = browser.execute_script("return auditPage.visibleIds()")
    assert 10 <= len(rows) <= 40 and rows[0] == "s01-00"
    browser.execute_script("var l = document.getElementById('list'); l.scrollTop = l.scrollHeight;"
                           "l.dispatchEvent(new Event('scroll'));")
    browser.execute_script("return new Promise(function (r) { requestAnimationFrame(function () { r(1); }); })")
    rows = browser.execute_script("return auditPage.visibleIds()")
    assert rows[-1] == "s25-15" and len(rows) <= 40
    assert _console_errors(browser) == []
