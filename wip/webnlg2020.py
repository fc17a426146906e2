"""WebNLG+ 2020 Text-to-RDF scorer, reproduced (section: ``webnlg2020``).

Reimplements ``Evaluation_script_json.py`` of WebNLG/WebNLG-Text-to-triples at
commit 6a40950 (metric code identical to ``Evaluation_script.py``, last changed in
0b8c131, 2020-09-16), the official scorer of the WebNLG+ 2020 challenge, Text-to-RDF
task (Castro Ferreira et al., "The 2020 Bilingual, Bi-Directional WebNLG+ Shared Task:
Overview and Evaluation Results", WebNLG+ 2020, ACL Anthology 2020.webnlg-1.7), together
with the part of ``nervaluate`` 0.1.7 it relies on (SemEval-2013 task 9.1 counting).
Written from the behaviour documented in the shared data README
(``shared/data/webnlg2020/README.md``); no code was copied.  Every count and every
P/R/F1 of ``expected.json`` (Amazon AI (Shanghai) and the organisers' baseline, splits
all / seen / unseen_entities / unseen_categories) is reproduced bit for bit.

Pipeline (one call of :func:`webnlg2020_score`):

1. Normalise each triple string ``"s | p | o"``: a space at every ``[a-z][A-Z]``
   boundary, lower-case, ``_`` -> space, collapse whitespace, drop a final
   parenthesised suffix `` (...)`` of the object only.
2. Per entry, pad the shorter triple list with ``''`` to ``k = max(n_cand, n_ref)``
   and score all ``k*k`` (candidate, reference) pairs: each element (SUB, PRED, OBJ) is
   tokenised with ``nltk.word_tokenize``, candidate tokens are aligned greedily to
   reference tokens (longest common n-gram first), spans are built from the alignment,
   and the spans are counted SemEval-style (strict / exact / partial / ent_type).
3. Choose the one-to-one assignment candidate ``i`` -> reference ``perm[i]``
   maximising the float sum ``((0 + f[0][perm[0]]) + f[1][perm[1]]) + ...`` where
   ``f = statistics.mean([F1_ent_type, F1_partial, F1_strict, F1_exact])``; ties go to
   the lexicographically first ``perm`` (see :func:`_webnlg_best_assignment`, which
   does this in O(k^2 2^k) instead of the official O(k! k) without changing the result).
4. Counts are summed over the selected pairs; Precision / Recall / F1 are the
   unweighted means over all selected pairs of the per-pair values (macro over triple
   pairs).  ``Exact_match`` is a macro P/R/F1 over distinct lower-cased raw triple
   strings (the official sklearn ``MultiLabelBinarizer`` + ``average='macro'``).

Quirks of the official scorer reproduced ON PURPOSE (they are what the published
numbers measure; numbering follows the README's section 5 where it has one):

* (1) Asymmetric punctuation filter: reference tokens made only of punctuation
  characters are dropped, candidate tokens only when they are a single punctuation
  character, so Treebank's two-character quote tokens (````` ``''``) survive on the
  candidate side: an exact copy of ``... | "City Manager"`` scores Exact F1 2/3.
* (2) Subject/object swap fallback: when neither subject nor object shares a token,
  candidate object is aligned with reference subject and candidate subject with
  reference object (labels crossed); the predicate spans are then rebuilt from the
  token lists of the reference-object/candidate-subject comparison, not from the
  predicates, and the object spans keep the offset computed with the old predicate
  length.  Further fallbacks: subject/predicate, then predicate/object swaps.  In all
  swap comparisons every token containing any punctuation character is dropped.
* (5) Type-based scores can be non-zero when every element has the wrong role.
* (6) The "glue leading words to the first match" test is ``token.endswith('-0')`` on
  the ``FOUNDCAND-<n>-<refidx>`` marker (kept as is).
* (7) nervaluate tests overlaps on ``range(start, end)`` (end-exclusive), so a one-token
  span can never partially match; and the span builder emits one extra, overlapping
  candidate span for every unmatched reference word that follows a matched candidate
  n-gram (``new city`` vs ``new york city`` -> 3 candidate spans).
* A candidate element whose tokens are all dropped makes the element's token-index
  block 1 long instead of ``len(reference tokens)`` (the official code stores the span
  dict list as the "total list" in that branch), shifting the later element blocks.
* Spurious candidate spans are added to the spurious count of all three tags
  (SUB, PRED, OBJ) in ``Scores_per_tag``.
* A padded reference slot makes the candidate triple 3 spurious spans, a padded
  candidate slot makes the reference triple 3 missed spans (P = R = F1 = 0 for the
  pair); duplicates are neither merged nor removed.
* The ``foundnum`` counter of the n-gram alignment is a per-recursion-level local, and
  after a recursive call the caller keeps scanning its stale n-gram list (the source of
  bug 3 below).

Deviations (clean behaviour where the official script crashes):

* (3) Crash case: when a stale n-gram is found in the reference but no longer in the
  candidate (candidate repeats a word that the reference holds more often, e.g.
  reference ``a y a z a``, candidate ``a x a``) the official script raises
  ``TypeError``.  Default ``on_crash="skip"``: that n-gram is skipped *before* the
  reference tokens are marked (the spirit of IBM ReGen's patch: the unmatched
  reference occurrence stays unmatched).  ``on_crash="raise"`` raises ``ValueError``.
  None of the 16 official English runs hits this case.
* (4) A triple whose normalised string does not split into exactly 3 parts on
  ``" | "`` (empty element, element containing ``|`` surrounded by spaces/underscores)
  breaks the official script; here it raises ``ValueError``.
* Different numbers of reference and candidate entries: the official script silently
  ignores extra references for Total_scores but then crashes in the sklearn
  ``Exact_match`` step (inconsistent sample counts); here ``ValueError``.
* ``Exact_match`` means are computed exactly (correctly rounded) instead of in the
  hash-seed dependent class order of ``list(set(...))``; the official last digit
  varies between runs (README item 9), the value agrees to ~1e-16.

Verification: all 8 official runs in ``expected.json`` (2 submissions x 4 splits) are
reproduced bit for bit (every count, P, R, F1 of ``Total_scores`` and ``Scores_per_tag``;
``Exact_match`` to 1e-12).  Deliberately breaking a quirk shows which ones the data pins
down: the span-builder glitch, the missing ``collecting`` reset, the swap-predicate bug,
the sub/obj and sub/pred swap offsets, the asymmetric punctuation filter and the float
tie rule each change the reproduced numbers; the ``'-0'`` test (6), the block length 1
of an all-dropped candidate element and the pred/obj swap offsets are not exercised by
these files (kept as read from the official code).

NLTK: ``nltk.word_tokenize`` (Punkt ``english`` + the improved Treebank tokenizer) is
imported lazily.  nltk 3.9.2 with the ``punkt_tab/english`` tables reproduces every
number of the official run (which used nltk 3.4.5 + an ``english.pickle`` with the same
Punkt parameters): the 4,471 distinct normalised elements of the references and of both
shared submissions tokenise identically under nltk 3.4.5, 3.8.1 and 3.9.2 (same Punkt
parameters).  The versions do differ elsewhere: nltk >= 3.5 splits ``*`` and ``..`` and
keeps ``'n`` together (``rock 'n' roll``), which 3.4.5 does not; 3.8.1 and 3.9.2 agree on
all probes tried.  3.8.1 needs the pickled ``tokenizers/punkt/english.pickle``; >= 3.9
reads ``punkt_tab``.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Sequence

WEBNLG_TAGS: tuple[str, ...] = ("SUB", "PRED", "OBJ")
"""nervaluate tags of the three triple elements, in element order."""

WEBNLG_TAG_NAMES: dict[str, str] = {"SUB": "Subjects", "PRED": "Predicates", "OBJ": "Objects"}
"""Output names of the tags in ``Scores_per_tag``."""

WEBNLG_SCHEMA_NAMES: tuple[tuple[str, str], ...] = (
    ("ent_type", "Ent_type"),
    ("partial", "Partial"),
    ("strict", "Strict"),
    ("exact", "Exact"),
)
"""(nervaluate schema, output name), in the official output order."""

_WEBNLG_SCHEMAS = ("strict", "ent_type", "partial", "exact")  # internal index order
_WEBNLG_S_STRICT, _WEBNLG_S_ENT, _WEBNLG_S_PARTIAL, _WEBNLG_S_EXACT = range(4)
# count slots: correct, incorrect, partial, missed, spurious
_WEBNLG_COR, _WEBNLG_INC, _WEBNLG_PAR, _WEBNLG_MIS, _WEBNLG_SPU = range(5)

_WEBNLG_CAMEL_RE = re.compile(r"([a-z])([A-Z])")
_WEBNLG_WS_RE = re.compile(r"\s+")
_WEBNLG_OBJ_SUFFIX_RE = re.compile(r"^(.*?)(\s\((.*?)\))$")
_WEBNLG_P = re.escape(string.punctuation)
_WEBNLG_ALLPUNCT_RE = re.compile(r"^[" + _WEBNLG_P + r"]+$")  # reference-side filter
_WEBNLG_ONEPUNCT_RE = re.compile(r"^[" + _WEBNLG_P + r"]$")  # candidate-side filter
_WEBNLG_ANYPUNCT_RE = re.compile(r"[" + _WEBNLG_P + r"]")  # swap comparisons, both sides
_WEBNLG_FIRSTCAND_RE = re.compile(r"^(FOUNDCAND-\d+)-")
_WEBNLG_CURCAN_RE = re.compile(r"^((.*?)-\d+)")


class _WebNLGCrash(Exception):
    """The official scorer would raise TypeError here (README bug 3)."""


# ======================================================================================
# Reading
# ======================================================================================


def webnlg_read_jsonl(path: str | Path) -> list[list[tuple[str, str, str]]]:
    """Read a WebNLG JSONL file (the shared ``refs_*.jsonl`` / ``<team>_*.jsonl`` format).

    Args:
        path: JSONL file, one JSON object per entry with a ``"triples"`` key holding a
            list of ``[subject, predicate, object]`` string lists (references: the
            ``<modifiedtripleset>``; candidates: the ``<generatedtripleset>``).
    Returns:
        One list per entry (file order; the scorer pairs entries by position) of
        ``(s, p, o)`` string tuples, duplicates kept.
    Raises:
        ValueError: a line is not a JSON object with a ``triples`` list of 3-string lists.
    Source: format described in ``shared/data/webnlg2020/README.md`` ("Format").
    """
    out: list[list[tuple[str, str, str]]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if not isinstance(obj, dict) or not isinstance(obj.get("triples"), list):
                raise ValueError(f"{path}:{lineno}: expected an object with a 'triples' list")
            entry = []
            for t in obj["triples"]:
                if not (isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) for x in t)):
                    raise ValueError(f"{path}:{lineno}: triple is not 3 strings: {t!r}")
                entry.append((t[0], t[1], t[2]))
            out.append(entry)
    return out


_WEBNLG_REF_OK_RE = re.compile(r"&(?:#[0-9]+;|#[xX][0-9a-fA-F]+;|[A-Za-z][A-Za-z0-9]*;)")


def _webnlg_escape_bare_amp(text: str) -> str:
    """Escape every ``&`` that does not start a known ``&name;`` or a ``&#n;`` reference.

    libxml2's HTML parser (behind ``BeautifulSoup(..., 'lxml')``) keeps such ``&`` as
    text; escaping them first makes ``html.unescape`` (which would otherwise decode
    legacy names without ``;``, e.g. ``&amp`` or ``&notit;``) leave them alone.
    """
    from html.entities import html5

    out = []
    pos = 0
    for i in (m.start() for m in re.finditer("&", text)):
        out.append(text[pos:i])
        m = _WEBNLG_REF_OK_RE.match(text, i)
        ok = m is not None and (m.group()[1] == "#" or m.group()[1:] in html5)
        out.append("&" if ok else "&amp;")
        pos = i + 1
    out.append(text[pos:])
    return "".join(out)


def webnlg_read_xml(path: str | Path, kind: str = "auto") -> list[list[tuple[str, str, str]]]:
    """Read a WebNLG XML file the way the official scorer does (lenient HTML parse).

    The official scorer parses with ``BeautifulSoup(fp, 'lxml')`` (an HTML parser), so a
    file that is not well-formed XML (the Amazon/CycleGT ``primary.xml`` files contain
    unescaped ``&`` as in ``College_of_William_&_Mary``) is still read, keeping the
    bare ``&``.  This reader uses the stdlib ``html.parser`` after escaping bare ``&``;
    well-formed references (``&amp;``, ``&quot;``, ``&#233;``, ...) are decoded
    (``html.unescape``).  Tag names are case-insensitive.

    Args:
        path: XML file with ``<entry>`` elements.
        kind: ``"reference"``: per entry the ``<mtriple>`` texts of the FIRST
            ``<modifiedtripleset>``; ``"candidate"``: the ``<gtriple>`` texts of the
            first ``<generatedtripleset>``; ``"auto"`` (default): ``"reference"`` if the
            file contains any ``<modifiedtripleset>``, else ``"candidate"``.
    Returns:
        One list of ``(s, p, o)`` tuples per ``<entry>`` in document order (triple text
        split on ``" | "``).  An entry without the triple-set tag gives ``[]`` (the
        official script crashes on it; see the module docstring).
    Raises:
        ValueError: unknown ``kind``, or a triple text that does not split into exactly
            3 parts on ``" | "`` (official bug 4).
    Source: ``getRefs`` / ``getCands`` of Evaluation_script_json.py @ 6a40950 as
    described in the shared README, section 1.
    """
    from html.parser import HTMLParser

    if kind not in ("auto", "reference", "candidate"):
        raise ValueError(f"kind must be 'auto', 'reference' or 'candidate', got {kind!r}")
    text = Path(path).read_text(encoding="utf-8")

    class _P(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.stack: list[str] = []
            # per entry: {"modifiedtripleset": [[texts]] | None, "generatedtripleset": ...}
            self.entries: list[dict[str, list[str] | None]] = []
            self.cur: dict[str, Any] | None = None
            self.set_tag: str | None = None  # triple-set tag we are collecting inside
            self.triple_buf: list[str] | None = None
            self.seen_mod = False

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            self.stack.append(tag)
            if tag == "entry":
                self.cur = {"modifiedtripleset": None, "generatedtripleset": None}
                self.entries.append(self.cur)
            elif tag in ("modifiedtripleset", "generatedtripleset") and self.cur is not None:
                self.seen_mod |= tag == "modifiedtripleset"
                if self.cur[tag] is None and self.set_tag is None:  # only the first set
                    self.cur[tag] = []
                    self.set_tag = tag
            elif tag in ("mtriple", "gtriple") and self.set_tag is not None:
                if (tag == "mtriple") == (self.set_tag == "modifiedtripleset") and self.triple_buf is None:
                    self.triple_buf = []

        def handle_startendtag(self, tag: str, attrs: Any) -> None:
            self.handle_starttag(tag, attrs)
            self.handle_endtag(tag)

        def handle_endtag(self, tag: str) -> None:
            if tag not in self.stack:
                return  # stray end tag: ignored, as a lenient HTML parser does
            while self.stack:
                t = self.stack.pop()
                self._close(t)
                if t == tag:
                    break

        def _close(self, tag: str) -> None:
            if tag in ("mtriple", "gtriple") and self.triple_buf is not None:
                if (tag == "mtriple") == (self.set_tag == "modifiedtripleset"):
                    assert self.cur is not None and self.set_tag is not None
                    self.cur[self.set_tag].append("".join(self.triple_buf))
                    self.triple_buf = None
            elif tag == self.set_tag:
                self.set_tag = None
                self.triple_buf = None
            elif tag == "entry":
                self.cur = None
                self.set_tag = None
                self.triple_buf = None

        def handle_data(self, data: str) -> None:
            if self.triple_buf is not None:
                self.triple_buf.append(data)

    parser = _P()
    parser.feed(_webnlg_escape_bare_amp(text))
    parser.close()
    if kind == "auto":
        kind = "reference" if parser.seen_mod else "candidate"
    key = "modifiedtripleset" if kind == "reference" else "generatedtripleset"
    out: list[list[tuple[str, str, str]]] = []
    for ent in parser.entries:
        triples = []
        for s in ent[key] or []:
            parts = s.split(" | ")
            if len(parts) != 3:
                raise ValueError(f"{path}: triple does not split into 3 parts on ' | ': {s!r}")
            triples.append((parts[0], parts[1], parts[2]))
        out.append(triples)
    return out


# ======================================================================================
# Normalisation and tokenisation
# ======================================================================================


def _webnlg_normalise(triple: str) -> str:
    """Official triple-string normalisation (getRefs/getCands), on ``"s | p | o"``."""
    t = _WEBNLG_CAMEL_RE.sub(r"\g<1> \g<2>", triple).lower()
    t = t.replace("_", " ")
    t = _WEBNLG_WS_RE.sub(" ", t)
    parts = t.split(" | ")
    m = _WEBNLG_OBJ_SUFFIX_RE.search(parts[-1])
    if m:
        parts[-1] = m.group(1)
        t = " | ".join(parts)
    return t


class _WebNLGTokens:
    """Per-call cache of ``nltk.word_tokenize`` and of the three token filters."""

    def __init__(self, tokenize: Callable[[str], list[str]]) -> None:
        self._tok = tokenize
        self._raw: dict[str, list[str]] = {}
        self._ref: dict[str, list[str]] = {}
        self._cand: dict[str, list[str]] = {}
        self._swap: dict[str, list[str]] = {}

    def raw(self, s: str) -> list[str]:
        r = self._raw.get(s)
        if r is None:
            r = self._raw[s] = list(self._tok(s))
        return r

    def ref(self, s: str) -> list[str]:
        r = self._ref.get(s)
        if r is None:
            r = self._ref[s] = [x.lower() for x in self.raw(s) if _WEBNLG_ALLPUNCT_RE.search(x) is None]
        return r

    def cand(self, s: str) -> list[str]:
        r = self._cand.get(s)
        if r is None:
            r = self._cand[s] = [x.lower() for x in self.raw(s) if _WEBNLG_ONEPUNCT_RE.search(x) is None]
        return r

    def swap(self, s: str) -> list[str]:
        r = self._swap.get(s)
        if r is None:
            r = self._swap[s] = [x.lower() for x in self.raw(s) if _WEBNLG_ANYPUNCT_RE.search(x) is None]
        return r


def _webnlg_default_tokenizer() -> Callable[[str], list[str]]:
    import nltk  # optional extra: imported lazily

    return nltk.word_tokenize


# ======================================================================================
# One candidate triple vs one reference triple (evaluaterefcand)
# ======================================================================================


def _webnlg_find_sub_list(sl: list[str], lst: list[str]) -> tuple[int, int] | None:
    """First occurrence of ``sl`` in ``lst`` as (start, end inclusive), else None."""
    n = len(sl)
    first = sl[0]
    for i, e in enumerate(lst):
        if e == first and lst[i : i + n] == sl:
            return i, i + n - 1
    return None


def _webnlg_nonrefwords(ref: list[str], cand: list[str], foundnum: int, n: int, on_crash: str) -> None:
    """Greedy longest-n-gram alignment; marks ``ref``/``cand`` in place (official ``nonrefwords``).

    Matched reference tokens become ``FOUNDREF-<foundnum>-<refidx>``, the candidate
    tokens ``FOUNDCAND-<foundnum>-<refidx>``.  Faithful to the recursion, including the
    stale n-gram list scanned after each recursive call and the local ``foundnum``.
    """
    while n > 0:
        grams = [cand[i : i + n] for i in range(len(cand) - n + 1)]
        for gram in grams:
            fr = _webnlg_find_sub_list(gram, ref)
            if fr is None:
                continue
            fc = _webnlg_find_sub_list(gram, cand)
            if fc is None:  # official: marks ref, then TypeError on None[0]
                if on_crash == "raise":
                    raise _WebNLGCrash(gram)
                continue
            refidx = range(fr[0], fr[1] + 1)
            for idx in refidx:
                ref[idx] = f"FOUNDREF-{foundnum}-{idx}"
            for j, val in enumerate(range(fc[0], fc[1] + 1)):
                cand[val] = f"FOUNDCAND-{foundnum}-{refidx[j]}"
            foundnum += 1
            _webnlg_nonrefwords(ref, cand, foundnum, n, on_crash)
        n -= 1


def _webnlg_getrefdict(
    newreflist: list[str], newcandlist: list[str], tagref: str, tagcand: str, baseidx: int
) -> tuple[bool, list[tuple[str, int, int]], list[tuple[str, int, int]], int]:
    """Spans of one element comparison (official ``getrefdict``).

    Returns (candidate found, reference spans, candidate spans, length of the element's
    token block).  Spans are ``(label, start, end)`` with ``end`` inclusive as written
    by the official code (nervaluate later uses ``range(start, end)``).  Mutates
    ``newcandlist`` (``-LINKED`` markers) exactly like the official code.
    """
    firstfoundidx = -1
    for i, tok in enumerate(newcandlist):
        if tok.startswith("FOUNDCAND"):
            firstfoundidx = i
            break
    if firstfoundidx < 0:
        nr, nc = len(newreflist), len(newcandlist)
        if nr == 0:
            return False, [], [(tagcand, baseidx, baseidx + nc - 1)], nc
        if nc == 0:
            # official: ``totallist = refdictlist`` -> block length 1 (quirk)
            return False, [(tagref, baseidx, baseidx + nr - 1)], [], 1
        tot = nr + nc
        return False, [(tagref, baseidx, baseidx + nr - 1)], [(tagcand, baseidx + tot - nc, baseidx + tot - 1)], tot

    unlinked: list[str] = []
    before: list[str] = []
    after: list[str] = []
    firstcand = ""
    beforelinked = newcandlist[firstfoundidx].endswith("-0")
    if beforelinked:
        firstcand = _WEBNLG_FIRSTCAND_RE.search(newcandlist[firstfoundidx]).group(1)  # type: ignore[union-attr]
    lastfoundidx = None
    afterlinked = False
    lastcand = ""
    if newreflist[-1].startswith("FOUNDREF") and not newcandlist[-1].startswith("FOUNDCAND"):
        lastfound = [x for x in newcandlist if x.startswith("FOUNDCAND")][-1]
        if lastfound == newreflist[-1].replace("FOUNDREF", "FOUNDCAND"):
            lastfoundidx = newcandlist.index(lastfound)
            afterlinked = True
            lastcand = _WEBNLG_FIRSTCAND_RE.search(lastfound).group(1)  # type: ignore[union-attr]
    unlinknumber = 1
    for idx, can in enumerate(newcandlist):
        if not can.startswith("FOUNDCAND"):
            if idx < firstfoundidx and beforelinked:
                newcandlist[idx] = firstcand + "-LINKED"
                before.append(firstcand + "-LINKED")
            elif lastfoundidx is not None and afterlinked and idx > lastfoundidx:
                newcandlist[idx] = lastcand + "-LINKED"
                after.append(lastcand + "-LINKED")
            else:
                unlinked.append(f"NOTFOUND-{unlinknumber}")
        else:
            unlinknumber += 1

    totallist = before + newreflist + after + unlinked
    refstart = len(before)
    refend = len(before) + len(newreflist) - 1
    refspans = [(tagref, baseidx + refstart, baseidx + refend)]

    candspans: list[tuple[str, int, int]] = []
    current = ""
    beginidx = 0
    collecting = False
    last = len(totallist) - 1
    for idx, tok in enumerate(totallist):
        tok = tok.replace("FOUNDREF", "FOUNDCAND")
        if tok.startswith("FOUNDCAND") or tok.startswith("NOTFOUND"):
            collecting = True
            curcan = _WEBNLG_CURCAN_RE.search(tok).group(1)  # type: ignore[union-attr]
            if curcan != current:
                if current != "":
                    candspans.append((tagcand, baseidx + beginidx, baseidx + idx - 1))
                current = curcan
                beginidx = idx
            if idx == last:
                candspans.append((tagcand, baseidx + beginidx, baseidx + idx))
        elif collecting:  # unmatched reference word: glitch, no reset (quirk 7)
            candspans.append((tagcand, baseidx + beginidx, baseidx + idx - 1))
    return True, refspans, candspans, len(totallist)


def _webnlg_nervaluate(true: list[tuple[str, int, int]], pred: list[tuple[str, int, int]]) -> tuple:
    """nervaluate 0.1.7 ``compute_metrics`` + P/R/F1 for one document.

    Returns ``(overall, per_tag)``: ``overall[schema]`` and ``per_tag[tag][schema]`` are
    tuples ``(correct, incorrect, partial, missed, spurious, possible, actual,
    precision, recall, f1)`` with schema in ``_WEBNLG_SCHEMAS`` order.
    """
    ov = [[0, 0, 0, 0, 0] for _ in range(4)]
    tg = {t: [[0, 0, 0, 0, 0] for _ in range(4)] for t in WEBNLG_TAGS}
    overlapped: list[tuple[str, int, int]] = []
    for p in pred:
        if p in true:
            overlapped.append(p)
            a = tg[p[0]]
            for s in range(4):
                ov[s][_WEBNLG_COR] += 1
                a[s][_WEBNLG_COR] += 1
            continue
        found = False
        pl, ps, pe = p
        for t in true:
            tl, ts, te = t
            if ts == ps and pe == te and tl != pl:
                res = (_WEBNLG_INC, _WEBNLG_INC, _WEBNLG_COR, _WEBNLG_COR)
            elif max(ts, ps) < min(te, pe):  # range(ts,te) & range(ps,pe) non-empty
                if pl == tl:
                    res = (_WEBNLG_INC, _WEBNLG_COR, _WEBNLG_PAR, _WEBNLG_INC)
                else:
                    res = (_WEBNLG_INC, _WEBNLG_INC, _WEBNLG_PAR, _WEBNLG_INC)
            else:
                continue
            a = tg[tl]
            for s in range(4):
                ov[s][res[s]] += 1
                a[s][res[s]] += 1
            overlapped.append(t)
            found = True
            break
        if not found:
            for s in range(4):
                ov[s][_WEBNLG_SPU] += 1
            for t in WEBNLG_TAGS:
                for s in range(4):
                    tg[t][s][_WEBNLG_SPU] += 1
    for t in true:
        if t not in overlapped:
            a = tg[t[0]]
            for s in range(4):
                ov[s][_WEBNLG_MIS] += 1
                a[s][_WEBNLG_MIS] += 1
    overall = tuple(_webnlg_prf(c, s) for s, c in enumerate(ov))
    per_tag = tuple(tuple(_webnlg_prf(c, s) for s, c in enumerate(tg[t])) for t in WEBNLG_TAGS)
    return overall, per_tag


def _webnlg_prf(c: list[int], schema: int) -> tuple:
    """nervaluate ``compute_actual_possible`` + ``compute_precision_recall`` (same float ops)."""
    cor, inc, par, mis, spu = c
    possible = cor + inc + par + mis
    actual = cor + inc + par + spu
    if schema in (_WEBNLG_S_PARTIAL, _WEBNLG_S_ENT):
        precision = (cor + 0.5 * par) / actual if actual > 0 else 0
        recall = (cor + 0.5 * par) / possible if possible > 0 else 0
    else:
        precision = cor / actual if actual > 0 else 0
        recall = cor / possible if possible > 0 else 0
    f1 = 2 * precision * recall / (precision + recall) if (precision + recall) > 0 else 0
    return (cor, inc, par, mis, spu, possible, actual, precision, recall, f1)


def _webnlg_eval_pair(reference: str, candidate: str, tok: _WebNLGTokens, on_crash: str) -> tuple:
    """Official ``evaluaterefcand`` on two normalised triple strings (``''`` = padding)."""
    newreference = reference.split(" | ")
    newcandidate = candidate.split(" | ")
    if len(newreference) > 1 and len(newcandidate) > 1:
        pass
    elif len(newreference) == 1:
        newreference = ["", "", ""]
    else:
        newcandidate = ["", "", ""]

    def compare(ri: int, ci: int, swap: bool) -> tuple[list[str], list[str]]:
        if swap:
            r, c = list(tok.swap(newreference[ri])), list(tok.swap(newcandidate[ci]))
        else:
            r, c = list(tok.ref(newreference[ri])), list(tok.cand(newcandidate[ci]))
        _webnlg_nonrefwords(r, c, 1, len(c), on_crash)
        return r, c

    r, c = compare(0, 0, False)
    sf, sref, scand, stot = _webnlg_getrefdict(r, c, "SUB", "SUB", 0)
    r, c = compare(1, 1, False)
    pf, pref, pcand, ptot = _webnlg_getrefdict(r, c, "PRED", "PRED", stot)
    r, c = compare(2, 2, False)
    of, oref, ocand, otot = _webnlg_getrefdict(r, c, "OBJ", "OBJ", stot + ptot)

    switched = False
    if not sf and not of:  # subject <-> object
        r, c = compare(0, 2, True)
        f1_, rd1, cd1, tl1 = _webnlg_getrefdict(r, c, "SUB", "OBJ", 0)
        r2, c2 = compare(2, 0, True)
        f2_, rd2, cd2, tl2 = _webnlg_getrefdict(r2, c2, "OBJ", "SUB", tl1 + ptot)
        if f1_ or f2_:
            sf, sref, scand, stot = f1_, rd1, cd1, tl1
            of, oref, ocand, otot = f2_, rd2, cd2, tl2
            # quirk 2: predicate rebuilt from the ref-object / cand-subject lists
            pf, pref, pcand, ptot = _webnlg_getrefdict(r2, c2, "PRED", "PRED", stot)
            switched = True
    if not sf and not pf and not switched:  # subject <-> predicate
        r, c = compare(0, 1, True)
        f1_, rd1, cd1, tl1 = _webnlg_getrefdict(r, c, "SUB", "PRED", 0)
        r2, c2 = compare(1, 0, True)
        f2_, rd2, cd2, tl2 = _webnlg_getrefdict(r2, c2, "PRED", "SUB", tl1)
        if f1_ or f2_:
            sf, sref, scand, stot = f1_, rd1, cd1, tl1
            pf, pref, pcand, ptot = f2_, rd2, cd2, tl2
            switched = True
    if not pf and not of and not switched:  # predicate <-> object
        r, c = compare(1, 2, True)
        f1_, rd1, cd1, tl1 = _webnlg_getrefdict(r, c, "PRED", "OBJ", stot)
        r2, c2 = compare(2, 1, True)
        f2_, rd2, cd2, tl2 = _webnlg_getrefdict(r2, c2, "OBJ", "PRED", stot + tl1)
        if f1_ or f2_:
            pf, pref, pcand, ptot = f1_, rd1, cd1, tl1
            of, oref, ocand, otot = f2_, rd2, cd2, tl2
            switched = True

    return _webnlg_nervaluate(sref + pref + oref, scand + pcand + ocand)


# ======================================================================================
# Assignment search (replaces the k! permutation loop)
# ======================================================================================


def _webnlg_pair_objective(overall: tuple) -> float:
    """``statistics.mean([F1_ent_type, F1_partial, F1_strict, F1_exact])`` of one pair.

    statistics.mean returns the correctly rounded exact mean.  ``math.fsum`` returns the
    correctly rounded exact sum and dividing by 4 is exact for these values (a power of
    two; the sum is 0 or >= 1e-3, far from subnormals), so ``fsum(xs) / 4`` is the
    same float.
    """
    return math.fsum(overall[s][9] for s in range(4)) / 4


def _webnlg_best_assignment(f: Sequence[Sequence[float]]) -> tuple[int, ...]:
    """Lexicographically first permutation maximising the official left-fold float sum.

    Args:
        f: ``k x k`` matrix, ``f[i][j]`` = objective of candidate ``i`` with reference ``j``.
    Returns:
        ``perm`` (candidate ``i`` -> reference ``perm[i]``) that the official loop keeps:
        over ``itertools.permutations(range(k))`` in order, the score is
        ``s = 0; for i: s = s + f[i][perm[i]]`` (IEEE doubles), and a permutation
        replaces the kept one only if its score is strictly greater, so the result is
        the FIRST permutation attaining the maximal float score ``V*``.

    Why this is exact (not just "equal up to rounding"):

    * IEEE-754 round-to-nearest addition is monotone: ``x <= y`` implies
      ``fl(x + z) <= fl(y + z)``.  Hence for a fixed set ``M`` of references used by
      candidates ``0..|M|-1``, the largest float prefix sum over all orderings of ``M``,
      ``D[M]``, satisfies ``D[M] = max_{j in M} fl(D[M - j] + f[|M|-1][j])`` and every
      prefix sum reaching ``M`` is ``<= D[M]``.  So ``V* = D[all]`` exactly, computed in
      the official summation order (left fold, candidate order), with O(k 2^k) adds.
    * The same argument from an arbitrary start value gives ``C(a, M)``, the maximal
      final float score over all completions of a prefix with value ``a`` that used
      ``M``.  The lexicographically first optimal permutation is then built greedily:
      at step ``i`` take the smallest free ``j`` with
      ``C(fl(a + f[i][j]), M + j) == V*`` (one exists, as the current prefix is optimal-
      completable).  Comparisons are float ``==`` on values computed with exactly the
      official additions, so near-ties are resolved exactly as the official loop does.
      Cost O(k^2 2^k) float additions in the worst case instead of O(k! k).
    * Exact rational arithmetic would NOT be equivalent: on the shared 'all' files, 10
      Amazon and 60 baseline entries have a different lexicographically-first argmax
      under exact sums than under the official float sums (float near-ties such as
      ``0.1 + 0.2 > 0.3 + 0.0``), and resolving them with a tolerance changes the
      reproduced numbers; hence the float-exact search.
    """
    k = len(f)
    if k <= 1:
        return tuple(range(k))
    full = (1 << k) - 1
    pc = [bin(m).count("1") for m in range(1 << k)]

    def complete(a: float, used: int) -> float:
        best = {used: a}
        for _ in range(k - pc[used]):
            nb: dict[int, float] = {}
            for mask, v in best.items():
                row = f[pc[mask]]
                for j in range(k):
                    bit = 1 << j
                    if not mask & bit:
                        w = v + row[j]
                        nm = mask | bit
                        o = nb.get(nm)
                        if o is None or w > o:
                            nb[nm] = w
            best = nb
        return best[full]

    vstar = complete(0, 0)
    perm: list[int] = []
    a: float = 0
    used = 0
    for i in range(k):
        row = f[i]
        for j in range(k):
            bit = 1 << j
            if used & bit:
                continue
            na = a + row[j]
            if complete(na, used | bit) == vstar:
                perm.append(j)
                a, used = na, used | bit
                break
        else:  # pragma: no cover - impossible by the argument above
            raise AssertionError("no optimal completion")
    return tuple(perm)


# ======================================================================================
# Corpus score
# ======================================================================================


def _webnlg_mean(values: list) -> float | int:
    """``statistics.mean`` (exact rational mean, correctly rounded), grouped for speed."""
    if not values:
        raise ValueError("no triple pairs to average")
    cnt = Counter(values)
    total = sum((Fraction(v) * n for v, n in cnt.items()), Fraction(0))
    mean = total / len(values)
    if all(isinstance(v, int) for v in cnt):
        return int(mean) if mean.denominator == 1 else float(mean)
    return float(mean)


def _webnlg_block(rows: list[tuple]) -> dict[str, float | int]:
    keys = ("Correct", "Incorrect", "Partial", "Missed", "Spurious", "Possible", "Actual")
    out: dict[str, float | int] = {k: sum(r[i] for r in rows) for i, k in enumerate(keys)}
    out["Precision"] = _webnlg_mean([r[7] for r in rows])
    out["Recall"] = _webnlg_mean([r[8] for r in rows])
    out["F1"] = _webnlg_mean([r[9] for r in rows])
    return out


def _webnlg_exact_match(references: Sequence[Sequence[str]], candidates: Sequence[Sequence[str]]) -> dict:
    """sklearn macro P/R/F1 over a MultiLabelBinarizer of lower-cased raw triple strings."""
    tp: Counter = Counter()
    npred: Counter = Counter()
    ntrue: Counter = Counter()
    for ref, cand in zip(references, candidates):
        rs = {t.lower() for t in ref}
        cs = {t.lower() for t in cand}
        ntrue.update(rs)
        npred.update(cs)
        tp.update(rs & cs)
    classes = set(ntrue) | set(npred)
    ps, rs_, fs = [], [], []
    for c in classes:
        p = tp[c] / npred[c] if npred[c] else 0.0
        r = tp[c] / ntrue[c] if ntrue[c] else 0.0
        ps.append(p)
        rs_.append(r)
        fs.append(2 * p * r / (p + r) if (p + r) else 0.0)
    if not classes:
        return {"Precision": 0.0, "Recall": 0.0, "F1": 0.0}
    return {"Precision": float(_webnlg_mean(ps)), "Recall": float(_webnlg_mean(rs_)), "F1": float(_webnlg_mean(fs))}


def _webnlg_join(triple: Sequence[str] | str) -> str:
    if isinstance(triple, str):
        return triple
    if len(triple) != 3 or not all(isinstance(x, str) for x in triple):
        raise ValueError(f"a triple must be 3 strings, got {triple!r}")
    return " | ".join(triple)


def webnlg2020_score(
    references: Sequence[Sequence[Sequence[str]]],
    candidates: Sequence[Sequence[Sequence[str]]],
    *,
    on_crash: str = "skip",
    tokenize: Callable[[str], list[str]] | None = None,
) -> dict[str, Any]:
    """Score candidate triples against references exactly like the WebNLG+ 2020 scorer.

    Args:
        references: one list per entry of reference triples ``(s, p, o)`` (3 strings,
            e.g. from :func:`webnlg_read_jsonl`; a raw ``"s | p | o"`` string is accepted
            too).  Entries are paired with ``candidates`` BY POSITION.
        candidates: same shape; an entry may be empty (no predicted triple).
        on_crash: ``"skip"`` (default) or ``"raise"`` for the official crash case
            (README bug 3, see the module docstring).
        tokenize: word tokenizer; default ``nltk.word_tokenize`` (imported lazily;
            needs the Punkt ``english`` model, e.g. ``NLTK_DATA`` holding
            ``tokenizers/punkt_tab/english``).
    Returns:
        ``{"Total_scores": {"Ent_type"|"Partial"|"Strict"|"Exact": block},
        "Scores_per_tag": {"Subjects"|"Predicates"|"Objects": {same 4 blocks}},
        "Exact_match": {"Precision", "Recall", "F1"}}`` where a block is
        ``{"Correct", "Incorrect", "Partial", "Missed", "Spurious", "Possible",
        "Actual"}`` (ints, summed over the selected triple pairs) plus
        ``"Precision", "Recall", "F1"`` in [0, 1]: unweighted means over all selected
        triple pairs (``sum_entries max(n_cand, n_ref)`` of them) of nervaluate's
        per-pair ``P = correct/actual``, ``R = correct/possible`` (partial / ent_type:
        ``correct + 0.5 partial``), ``F1 = 2PR/(P+R)`` (0 on a zero denominator).
        Same keys and nesting as the official ``Evaluation_script_json.py`` output.
    Raises:
        ValueError: different numbers of reference and candidate entries, a triple
            that is not 3 strings or whose normalised form does not split into 3 parts
            on ``" | "`` (empty element, ...), no triple pair at all, a bad
            ``on_crash``, or (``on_crash="raise"``) the official crash case.
    Source: Evaluation_script_json.py @ 6a40950 (WebNLG/WebNLG-Text-to-triples) with
    nervaluate 0.1.7, as documented in ``shared/data/webnlg2020/README.md``; quirks
    and deviations listed in the module docstring.
    """
    if on_crash not in ("skip", "raise"):
        raise ValueError(f"on_crash must be 'skip' or 'raise', got {on_crash!r}")
    if len(references) != len(candidates):
        raise ValueError(
            f"{len(references)} reference entries but {len(candidates)} candidate entries "
            "(entries are paired by position)"
        )
    tok = _WebNLGTokens(tokenize or _webnlg_default_tokenizer())
    raw_refs = [[_webnlg_join(t) for t in e] for e in references]
    raw_cands = [[_webnlg_join(t) for t in e] for e in candidates]
    norm_cache: dict[str, str] = {}

    def norm(s: str) -> str:
        n = norm_cache.get(s)
        if n is None:
            n = _webnlg_normalise(s)
            if len(n.split(" | ")) != 3:
                raise ValueError(f"triple does not split into 3 parts on ' | ' after normalisation: {s!r}")
            norm_cache[s] = n
        return n

    pair_cache: dict[tuple[str, str], tuple] = {}
    selected: list[tuple] = []
    for eidx, (rr, cc) in enumerate(zip(raw_refs, raw_cands)):
        nref = [norm(t) for t in rr]
        ncand = [norm(t) for t in cc]
        k = max(len(nref), len(ncand))
        nref += [""] * (k - len(nref))
        ncand += [""] * (k - len(ncand))
        res = []
        for c in ncand:
            row = []
            for r in nref:
                key = (r, c)
                v = pair_cache.get(key)
                if v is None:
                    try:
                        v = _webnlg_eval_pair(r, c, tok, on_crash)
                    except _WebNLGCrash as exc:
                        raise ValueError(
                            f"entry {eidx}: official scorer crash case (bug 3) for reference {r!r} "
                            f"vs candidate {c!r}"
                        ) from exc
                    pair_cache[key] = v
                row.append(v)
            res.append(row)
        perm = _webnlg_best_assignment([[_webnlg_pair_objective(v[0]) for v in row] for row in res])
        selected.extend(res[i][j] for i, j in enumerate(perm))
    if not selected:
        raise ValueError("no triple pairs to score (all entries empty)")

    order = {name: i for i, name in enumerate(_WEBNLG_SCHEMAS)}
    total = {out: _webnlg_block([p[0][order[s]] for p in selected]) for s, out in WEBNLG_SCHEMA_NAMES}
    per_tag = {
        WEBNLG_TAG_NAMES[tag]: {out: _webnlg_block([p[1][ti][order[s]] for p in selected]) for s, out in WEBNLG_SCHEMA_NAMES}
        for ti, tag in enumerate(WEBNLG_TAGS)
    }
    return {
        "Total_scores": total,
        "Scores_per_tag": per_tag,
        "Exact_match": _webnlg_exact_match(raw_refs, raw_cands),
    }
