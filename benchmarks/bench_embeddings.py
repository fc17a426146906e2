"""Benchmark: embedding throughput (texts/s), cold vs warm embedding cache, and a whole run.

Run: ``uv run python benchmarks/bench_embeddings.py [--model DIR|NAME] [--texts N] [--repeat R]
[--no-run] [--device cpu|auto|cuda[:N]]``

1. Loads the model (default: all-MiniLM-L6-v2 int8 ONNX assembled from the dev-dependency
   wheels, exactly like the test fixture; pass ``--model`` for another directory or a cached
   fastembed name) and reports the load time.
2. Raw backend throughput on N generated short strings (entity-like titles, 1-6 words):
   unsorted vs sorted by length, for several batch sizes.
3. ``Embedder.embed`` cold (empty cache) vs warm (a fresh Embedder on the same cache file).
4. Unless ``--no-run``: the whole CLI on ../shared/data/parity-sample/combined.jsonl
   (``evaluate.py --pred combined.jsonl --embedding-model DIR --quiet --report R``) with a
   cold cache, a warm cache and ``--no-embedding-cache``, against the time to embed the run's
   unique strings (read back from the cache file the cold run wrote). Skipped when the data
   is absent.
5. With ``--device`` other than cpu (default: cpu): every step above runs on that device
   (the whole run with ``--embedding-device``), and the vectors of the N strings on the
   device are compared with the CPU ones: max |difference| of the vectors and of their
   similarities, and ``EmbeddingDevice.agreement`` at the thresholds 0.80 / 0.50 (pairs
   within the tolerance of a threshold, how many flipped, flips elsewhere: must be 0),
   plus the speed ratio device / CPU of ``Embedder.embed`` without a cache.
Not a test: wall-clock numbers on a shared 2-core machine are noisy; compare ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from evaluate import (  # noqa: E402
    DEFAULT_ALIGN_ACCEPT,
    DEFAULT_SIM_THRESHOLD,
    EmbeddingCache,
    EmbeddingDevice,
    _embedding_device,
    cosine_similarity_matrix,
    load_embedder,
)

SYLLABLES = ("ka", "lo", "mi", "ne", "ra", "to", "su", "vi", "del", "ber", "gan", "tor", "ist",
             "ion", "ex", "qua", "zen", "mor", "pli", "sta")
WORDS = ("neural", "network", "graph", "model", "river", "city", "labs", "vision", "corpus",
         "quantum", "engine", "harbor", "atlas", "signal", "protein", "market", "orbit",
         "language", "sensor", "forest", "bridge", "theory", "kernel", "museum", "valley")


def make_texts(n: int, seed: int = 0) -> list[str]:
    """n distinct short strings: mixes real words and made-up names, 1-6 words."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        words = []
        for _ in range(rng.choice((1, 1, 2, 2, 2, 3, 3, 4, 5, 6))):
            if rng.random() < 0.5:
                words.append(rng.choice(WORDS))
            else:
                words.append("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
        text = " ".join(words)
        out[text.capitalize() if rng.random() < 0.5 else text] = None
    return list(out)


def default_model_dir(tmp: Path) -> Path:
    from _helpers import minilm_model_dir  # the model the test fixture assembles

    return minilm_model_dir(tmp / "minilm-onnx")


def bench_backend(emb, texts: list[str], batch_sizes: tuple[int, ...], repeat: int) -> None:
    """Raw model calls (no memo/cache); configurations interleaved, best of ``repeat``."""
    backend = emb._backend
    configs = [(False, batch_sizes[0])] + [(True, bs) for bs in batch_sizes]
    best = {c: math.inf for c in configs}
    for _ in range(repeat):
        for sort, bs in configs:
            order = sorted(texts, key=len) if sort else texts
            t0 = time.perf_counter()
            for i in range(0, len(order), bs):
                backend.encode(order[i:i + bs])
            best[(sort, bs)] = min(best[(sort, bs)], time.perf_counter() - t0)
    print(f"\n[2] raw {emb.backend} throughput, {len(texts)} texts, best of {repeat}")
    for (sort, bs), el in best.items():
        print(f"    {'sorted  ' if sort else 'unsorted'} batch {bs:4d}: "
              f"{len(texts) / el:7.0f} texts/s ({el:.2f} s)")


def bench_cache(model: str, texts: list[str], cache_dir: Path, model_cache, device: str = "cpu") -> None:
    print(f"\n[3] Embedder.embed on {device}, {len(texts)} unique texts, cache in {cache_dir}")
    for label in ("cold", "warm"):
        emb = load_embedder(model, model_cache=model_cache, cache_dir=cache_dir, progress=False, device=device)
        t0 = time.perf_counter()
        emb.embed(texts)
        el = time.perf_counter() - t0
        s = emb.stats
        print(f"    {label}: {len(texts) / el:9.0f} texts/s ({el:.3f} s; load {s.load_seconds:.2f} s;"
              f" hits {s.cache_hits}, misses {s.cache_misses}, embedded {s.embedded})")
        emb.close()


def _evaluate_cmd() -> tuple[list[str], str]:
    return [sys.executable, str(ROOT / "evaluate.py")], "evaluate.py"


def bench_run(model: str, model_cache, tmp: Path, repeat: int, device: str = "cpu") -> None:
    data = ROOT.parent / "shared" / "data" / "parity-sample" / "combined.jsonl"
    if not data.is_file():
        print(f"\n[4] skipped: {data} is absent")
        return
    cmd, how = _evaluate_cmd()
    args = ["--pred", str(data), "--embedding-model", model, "--quiet",
            "--require-embeddings", "--report", str(tmp / "report.json")]
    if model_cache:
        args += ["--model-cache", str(model_cache)]
    args += ["--embedding-device", device]
    best: dict[str, float] = {}
    status: dict[str, str] = {}
    for r in range(repeat):
        xdg = tmp / f"xdg-cache-{r}"  # default_embedding_cache_dir() follows XDG_CACHE_HOME
        env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "PYTHONPATH": str(ROOT)}
        for label, extra in (("cold cache", []), ("warm cache", []),
                             ("no cache", ["--no-embedding-cache"])):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd + args + extra, env=env, capture_output=True, text=True,
                                  cwd=tmp)
            best[label] = min(best.get(label, math.inf), time.perf_counter() - t0)
            status[label] = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: " + (
                proc.stderr.strip().splitlines() or ["?"])[-1]
    print(f"\n[4] whole run ({how}, --embedding-device {device}) on {data.name}, best of {repeat}")
    for label, el in best.items():
        print(f"    {label:10s}: {el:6.2f} s  ({status[label]})")
    db = tmp / "xdg-cache-0" / "kg-triplet-eval" / EmbeddingCache.FILENAME
    if not db.is_file():
        print(f"    (no cache file at {db}: cannot list the run's unique strings)")
        return
    with sqlite3.connect(db) as conn:
        strings = [r[0] for r in conn.execute("SELECT text FROM emb")]
    el = math.inf
    for _ in range(repeat):
        emb = load_embedder(model, model_cache=model_cache, cache_dir=None, progress=False, device=device)
        t0 = time.perf_counter()
        emb.embed(strings)
        el = min(el, time.perf_counter() - t0)
        emb.close()
    print(f"    embedding the run's {len(strings)} unique strings alone: {el:.2f} s "
          f"({len(strings) / el:.0f} texts/s; plus model load {emb.stats.load_seconds:.2f} s)")
    print(f"    ratio whole process, cold cache / embedding alone: {best['cold cache'] / el:.2f}x "
          f"(the process also pays interpreter start, imports (fastembed alone ~0.75 s) and model load: "
          f"the warm-cache run, {best['warm cache']:.2f} s, is that fixed cost plus scoring)")
    # In-process: read + score the same file with a cold cache and a loaded model, vs embedding.
    import evaluate as ev
    in_proc = math.inf
    for r in range(repeat):
        emb = load_embedder(model, model_cache=model_cache, cache_dir=tmp / f"inproc-cache-{r}", progress=False,
                            device=device)
        t0 = time.perf_counter()
        loaded = ev.load_inputs(data, None)
        ev.evaluate_entries(loaded.entries, similarity=ev.EmbeddingSimilarity(emb))
        in_proc = min(in_proc, time.perf_counter() - t0)
        emb.close()
    print(f"    in-process evaluation, cold cache (read + embed + match + score, model loaded): "
          f"{in_proc:.2f} s = {in_proc / el:.2f}x the embedding time of its unique strings")


def bench_device(model: str, texts: list[str], model_cache, device: str, repeat: int, pairs: int) -> None:
    """The device's vectors against the CPU's (agreement, the may-flip count) and the speed ratio."""
    vectors, best = {}, {}
    for where in ("cpu", device):
        emb = load_embedder(model, model_cache=model_cache, cache_dir=None, progress=False, device=where)
        best[where] = math.inf
        for _ in range(repeat):
            emb._memo.clear()  # embed every text again: model time, no memo
            t0 = time.perf_counter()
            vectors[where] = emb.embed(texts)
            best[where] = min(best[where], time.perf_counter() - t0)
        print(f"\n[5] {where}: {emb.backend} on {emb.device}, batch {emb.batch_size}: "
              f"{len(texts) / best[where]:8.0f} texts/s ({best[where]:.3f} s, best of {repeat})")
        emb.close()
    cpu, dev = vectors["cpu"], vectors[device]
    print(f"    max |vector difference| {float(abs(dev - cpu).max()):.2e}; speed {device} / cpu: "
          f"{best['cpu'] / best[device]:.2f}x")
    sub = slice(0, min(pairs, len(texts)))
    ref = cosine_similarity_matrix(cpu[sub], cpu[sub])
    got = cosine_similarity_matrix(dev[sub], dev[sub])
    agree = EmbeddingDevice.agreement(ref, got, (DEFAULT_SIM_THRESHOLD, DEFAULT_ALIGN_ACCEPT))
    print(f"    similarities of {agree['pairs']} pairs: max |difference| {agree['max_difference']:.2e} (tolerance "
          f"{EmbeddingDevice.TOLERANCE}); within the tolerance of {DEFAULT_SIM_THRESHOLD}/{DEFAULT_ALIGN_ACCEPT}: "
          f"{agree['near']}, flipped {agree['flipped']}; other decisions changed: {agree['other_flips']} "
          f"-> {'agree' if agree['agree'] else 'DISAGREE'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="model directory or fastembed name (default: MiniLM fixture)")
    ap.add_argument("--model-cache", help="fastembed model cache (for a model name)")
    ap.add_argument("--texts", type=int, default=2000, help="generated strings (default 2000)")
    ap.add_argument("--batch-sizes", default="64,128,256", help="sorted batch sizes to try")
    ap.add_argument("--repeat", type=int, default=2, help="repetitions, best kept (default 2)")
    ap.add_argument("--no-run", action="store_true", help="skip the whole-CLI timing")
    ap.add_argument("--device", default="cpu", type=_embedding_device,
                    help="cpu (default), auto, cuda or cuda:N: steps 1-4 on it, and [5] against the CPU")
    ap.add_argument("--pairs", type=int, default=1000, help="texts whose pairwise similarities [5] compares")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-emb-") as tmp_s:
        tmp = Path(tmp_s)
        model = a.model or str(default_model_dir(tmp))
        texts = make_texts(a.texts)
        print(f"model: {model}; {len(texts)} texts, mean {sum(map(len, texts)) / len(texts):.1f}"
              f" chars; cpu count {os.cpu_count()}")
        t0 = time.perf_counter()
        emb = load_embedder(model, model_cache=a.model_cache, cache_dir=None, progress=False, device=a.device)
        print(f"[1] load_embedder: {time.perf_counter() - t0:.2f} s -> {emb.backend}, "
              f"{emb.model_id}, dim {emb.dim}, device {emb.device}")
        bench_backend(emb, texts, tuple(int(x) for x in a.batch_sizes.split(",")), a.repeat)
        emb.close()
        bench_cache(model, texts, tmp / "cache", a.model_cache, a.device)
        if not a.no_run:
            bench_run(model, a.model_cache, tmp, a.repeat, a.device)
        if a.device != "cpu":
            bench_device(model, texts, a.model_cache, a.device, a.repeat, a.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
