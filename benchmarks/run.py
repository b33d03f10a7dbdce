"""situate's benchmark suite: one run, real text, ratios measured side by side.

Usage::

    python benchmarks/run.py [--quick | --tiny] --json OUT [--markdown OUT.md] [--only llm,embed,...|all]

Sections (each a function below, each returning a dict that goes into the report):

``cost``
    Issue 23's measure: LLM seconds a chunk for today's prompt, chunks by reference and the
    document mode on the same documents in one run, each mode's prompt tokens evaluated and tokens
    generated a chunk, and its ratio to the floor (:mod:`benchmarks.cost`).
``threads``
    The default blurb model's prefill and generation rates idle and beside one busy core, for
    2 and 1 threads, OpenMP's passive waiting and situate's default (threads follow the free
    cores) (:mod:`benchmarks.threads`).
``skipping``
    The chunks the no-model tests flag on the two labelled corpora and on installed packages'
    folders (minified JavaScript, numpy's data), by reason (:mod:`benchmarks.skipping`).
``llm``
    Prefix reuse on codebase documents of 2k-7k LLM tokens with 10+ chunks (llama.cpp's own
    counters: prompt tokens evaluated / reused); time per blurb with the KV cache kept vs the same
    prompts with the cache reset each time; the A,A,B,B vs A,B,A,B order; the model's prompt-eval
    and generation rates at the documents' depth and each blurb's time against the limit they
    imply; shared-prefix batching against the sequential path, with the outputs compared token for
    token.
``models``
    Each installed blurb model (``situate models list``) on the same document and chunks, with the
    default prompt: time per blurb with the prefix kept, blurbs/s, its prompt-eval and generation
    rates at that depth and the blurbs' time against the limit they imply; for the default model
    also llama.cpp flash attention, a q8_0 KV cache, 1 thread against all, llama.cpp's CPU weight
    repacking on (``repack=True``) against the default off, and a long document's blurbs through
    4,096-token windows against 8,192.
``embedq``
    A GGUF embedder as installed (f16) against the same GGUF quantised to Q8_0 by llama.cpp: tokens/s
    on the same chunks, and the cosine between the two vectors of each chunk.  It does not apply
    to an ONNX embedder (the default, bge-small-en-v1.5): the section says so and measures nothing.
``embed``
    Embedding throughput of the configured embedder (ONNX or GGUF, through the pipeline's own
    :class:`situate.resources.models.llm.Embedder`) at batch sizes 1..64, in its own tokens.
``embedders``
    Issue 25: each installed embedder of ``situate models`` on the same chunks (tokens/s, seconds
    a chunk and its ratio to the default's, a query's ms, the width) and search p50/p95 over
    100,000 rows of its width (:mod:`benchmarks.embedders`).
``search``
    ``hybrid_search`` latency over 10k and 100k rows, exact and with the IVF_FLAT index, and the
    index's recall@10 against exact search (benchmarks/search_scale.py).
``rerank``
    The cross-encoder's time per query at the default depth (30 first-stage candidates, real
    chunks and the developers' queries) in one-pair calls and in padded batches of 8 and 32; and
    with passages long enough to fill the pair (``MAX_PAIR_TOKENS``, as 800-token chunks do).
``reingest``
    A second ``situate ingest`` of an unchanged corpus: model calls (must be 0) and wall time.
``partitions``
    Registering 10,000 document partitions in batches, and the sensor's tick at that size.
``service`` (``--only service --service-home DIR``, or after ``reingest`` in the same run)
    ``situate serve`` over HTTP: :mod:`benchmarks.service`; without ``--service-home`` it serves
    the data folder the ``reingest`` section ingested.
``scale_out`` (``--only scale_out``)
    Search p50/p95 over 10,000 rows with the data folder on S3 (SeaweedFS on this machine) against
    local disk, and documents per hour through the Dagster daemon with 1 and 2 parallel runs:
    :mod:`benchmarks.scale_out`.

Every section runs with the default models (or, ``embedq``, says it does not apply to them);
synthetic rows are as wide as the configured embedder's vectors.

Nothing here asserts a timing: the figures go to the JSON and a Markdown table.  ``--quick``
(one document per LLM measurement, fewer texts and queries) finishes in about 10 minutes on 2
cores.  ``--tiny`` is a smoke run for ``tests/test_benchmarks_quick.py``: every section on a few
texts (``--only all``: each section; the figures mean nothing), so that a change of default
model cannot break a section unseen.  The corpus is the cookbook's codebase set (``eval/codebase``, or
``SITUATE_BENCH_CORPUS``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DEFAULT_CORPUS = ROOT / "eval" / "codebase" / "codebase_chunks.json"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_corpus() -> list[dict]:
    """The cookbook corpus: ``[{"doc_id", "content", "chunks": [{"content", ...}]}]``.

    Raises
    ------
    FileNotFoundError
        Neither ``SITUATE_BENCH_CORPUS`` nor ``eval/codebase/codebase_chunks.json`` exists.
    """
    path = Path(os.environ.get("SITUATE_BENCH_CORPUS", DEFAULT_CORPUS))
    if not path.is_file():
        raise FileNotFoundError(f"benchmark corpus {path} not found: set SITUATE_BENCH_CORPUS")
    return json.loads(path.read_text())


def tiny_corpus(corpus: list[dict], n_docs: int = 6, n_chunks: int = 3, max_chars: int = 400) -> list[dict]:
    r"""``--tiny``'s documents for the LLM sections: the ``n_docs`` shortest documents with
    ``n_chunks``+ chunks, each its first ``n_chunks`` chunks cut to at most ``max_chars``
    characters (at a line end where there is one), its ``content`` those chunks joined by a line
    break: real text, prompts of 300-450 tokens with the default model.

    Examples
    --------
    >>> doc = {"doc_id": "d", "content": "a\nbb\n" * 300, "chunks": [{"content": "a\nbb\n" * 100}] * 3}
    >>> t = tiny_corpus([doc], n_docs=1, max_chars=8)[0]
    >>> t["chunks"][0]["content"], t["content"]
    ('a\nbb\na\n', 'a\nbb\na\n\na\nbb\na\n\na\nbb\na\n')
    """

    def cut(text: str) -> str:
        head = text[:max_chars]
        end = head.rfind("\n") + 1
        return head[:end] if end > max_chars // 2 else head

    out = []
    for d in sorted((d for d in corpus if len(d["chunks"]) >= n_chunks), key=lambda d: len(d["content"]))[:n_docs]:
        chunks = [{**c, "content": cut(c["content"])} for c in d["chunks"][:n_chunks]]
        out.append({**d, "content": "\n".join(c["content"] for c in chunks), "chunks": chunks})
    return out


# -- LLM ---------------------------------------------------------------------------------------
def _doc_prompts(builder, d: dict, k: int | None = None) -> tuple[list[int], list[list[int]]]:
    """The prefix (the whole document as one window) and the first ``k`` chunks' suffixes of a
    corpus document, with the builder's prompt (chunks by reference included)."""
    from cost import corpus_spans

    text, spans = d["content"], corpus_spans(d)
    chunks = d["chunks"][:k] if k else d["chunks"]
    return (
        builder.window_prefix(text, spans, 0, len(text)),
        [builder.suffix(c["content"], i) for i, c in enumerate(chunks)],
    )


def _rates_at_depth(L, depth: int, probe: list[int], tries: int, steps: int) -> tuple[float, float]:
    """The loaded model's prompt-eval and generation rates (tokens/s) after ``depth`` cached tokens:
    the best of ``tries`` (a limit is the machine's best).  The first ``depth`` tokens must be in
    the KV cache; each try drops what follows them."""
    prompt_rate = gen_rate = 0.0
    for _ in range(tries):
        L._ctx.kv_cache_seq_rm(-1, depth, -1)
        L.n_tokens = depth
        t0 = time.perf_counter()
        L.eval(probe)
        prompt_rate = max(prompt_rate, len(probe) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(steps):
            L.eval([probe[-1]])
        gen_rate = max(gen_rate, steps / (time.perf_counter() - t0))
    return prompt_rate, gen_rate


def llm_section(corpus: list[dict], quick: bool, tiny: bool = False) -> dict:
    """The ``llm`` figures (module docstring).  ``tiny`` (a smoke run): the shortest document with
    3+ chunks, one blurb with the cache reset, the two shortest documents for the order, rates
    over 32 tokens, one batch of 2.

    Raises
    ------
    ValueError
        The corpus holds no document of the size measured.
    """
    from situate.contextual.document_blurbs import STOP
    from situate.contextual.fitting import prompt_builder
    from situate.pipelines.settings import resources_from_env

    llm = resources_from_env(plain=True)["llm"]
    builder = prompt_builder(llm)
    L = llm.load()
    min_chunks, lo, hi = (3, 0, 1500) if tiny else (10, 2000, 7000)
    docs = []
    for d in corpus:
        if len(d["chunks"]) < min_chunks:
            continue
        prefix, sufs = _doc_prompts(builder, d)
        if lo <= len(prefix) <= hi:
            docs.append((d["doc_id"], prefix, sufs))
    if not docs:
        raise ValueError(f"no document of {lo:,}-{hi:,} LLM tokens with {min_chunks}+ chunks in the corpus")
    if tiny:  # the shortest
        main = min(docs, key=lambda d: len(d[1]))
    else:  # quick: the document with the most chunks among those of at most 3,300 prefix tokens
        main = max((d for d in docs if len(d[1]) <= 3300), key=lambda d: len(d[2]), default=docs[0])
    measured = [main] if quick or tiny else docs
    out: dict = {"llm_model": llm.resolved_model_id(), "documents": [], "n_threads": L.context_params.n_threads}

    # 1. sequential, KV cache kept between the chunks of a document
    seq_runs = {}
    for doc_id, prefix, sufs in measured:
        L.reset()
        gens = [llm.generate(prefix + s, stop=STOP) for s in sufs]
        seq_runs[doc_id] = gens
        prompt = sum(g.prompt_tokens for g in gens)
        reused = sum(g.reused for g in gens)
        secs = sum(g.seconds for g in gens)
        out["documents"].append(
            {
                "doc_id": doc_id,
                "prefix_tokens": len(prefix),
                "chunks": len(sufs),
                "prompt_tokens": prompt,
                "reused": reused,
                "evaluated": prompt - reused,
                "generated": sum(g.generated for g in gens),
                "seconds": round(secs, 2),
                "seconds_per_blurb": round(secs / len(gens), 3),
            }
        )
        log(f"llm reuse {doc_id}: {len(gens)} blurbs, {reused}/{prompt} prompt tokens reused, {secs:.1f} s")
    prompt = sum(d["prompt_tokens"] for d in out["documents"])
    reused = sum(d["reused"] for d in out["documents"])
    out["prefix_reuse_ratio"] = round(reused / prompt, 4)

    # 2. the same prompts with the cache reset before each
    doc_id, prefix, sufs = main
    k = 1 if tiny else 2 if quick else 3
    cold = []
    for s in sufs[:k]:
        L.reset()
        cold.append(llm.generate(prefix + s, stop=STOP))
    with_reuse = (
        out["documents"][0]["seconds_per_blurb"]
        if measured[0] is main
        else sum(g.seconds for g in seq_runs[doc_id]) / len(sufs)
    )
    cold_s = sum(g.seconds for g in cold) / k
    out["no_reuse"] = {
        "doc_id": doc_id,
        "blurbs": k,
        "seconds_per_blurb": round(cold_s, 3),
        "evaluated_per_blurb": sum(g.evaluated for g in cold) / k,
        "same_text": all(a.text == b.text for a, b in zip(cold, seq_runs[doc_id])),
    }
    out["cache_speedup"] = round(cold_s / with_reuse, 2)
    log(f"llm no reuse: {cold_s:.2f} s a blurb against {with_reuse:.2f} s with reuse (x{out['cache_speedup']})")

    # 3. A,A,B,B against A,B,A,B: two documents of 1k+ tokens, two chunks each
    pair = sorted(
        (d for d in corpus if len(d["chunks"]) >= 2 and len(d["content"]) >= (0 if tiny else 4000)),
        key=lambda d: len(d["content"]),
    )[:2]
    (a_id, a_pre, a_suf), (b_id, b_pre, b_suf) = [(d["doc_id"], *_doc_prompts(builder, d, 2)) for d in pair]
    orders = {
        "AABB": [(a_pre, a_suf[0]), (a_pre, a_suf[1]), (b_pre, b_suf[0]), (b_pre, b_suf[1])],
        "ABAB": [(a_pre, a_suf[0]), (b_pre, b_suf[0]), (a_pre, a_suf[1]), (b_pre, b_suf[1])],
    }
    out["order"] = {"documents": [a_id, b_id]}
    for name, prompts in orders.items():
        L.reset()
        gens = [llm.generate(p + s, stop=STOP) for p, s in prompts]
        p_all = sum(g.prompt_tokens for g in gens)
        out["order"][name] = {
            "evaluated": sum(g.evaluated for g in gens),
            "prompt_tokens": p_all,
            "reuse_ratio": round(sum(g.reused for g in gens) / p_all, 4),
            "seconds": round(sum(g.seconds for g in gens), 2),
        }
    out["order"]["ABAB_over_AABB_seconds"] = round(out["order"]["ABAB"]["seconds"] / out["order"]["AABB"]["seconds"], 2)
    log(f"llm order: {out['order']}")

    # 4. the model's rates at the main document's depth (the best of 3 tries: a limit is the
    #    machine's best), and each blurb's wall time against the limit they imply
    L.reset()
    L.eval(prefix)
    prompt_rate, gen_rate = _rates_at_depth(
        L,
        len(prefix),
        [t for s in sufs for t in s][: 32 if tiny else 256],
        tries=1 if tiny else 3,
        steps=4 if tiny else 24,
    )
    gens = seq_runs[doc_id][1:]  # the first blurb also reads the prefix, from depth 0
    measured_s = sum(g.seconds for g in gens)
    limit_s = sum(g.evaluated / prompt_rate + g.generated / gen_rate for g in gens)
    out["rates"] = {
        "depth_tokens": len(prefix),
        "prompt_tokens_per_s": round(prompt_rate, 1),
        "generated_tokens_per_s": round(gen_rate, 1),
        "blurbs": len(gens),
        "measured_s": round(measured_s, 2),
        "limit_s": round(limit_s, 2),
    }
    out["blurb_time_vs_limit"] = round(measured_s / limit_s, 3)
    log(
        f"llm rates at depth {len(prefix)}: prompt {prompt_rate:.0f} tok/s, generation {gen_rate:.1f} tok/s; "
        f"blurbs {measured_s:.1f} s against a limit of {limit_s:.1f} s"
    )

    # 5. shared-prefix batching against the sequential run of the same document
    from situate.resources.models.batching import SharedPrefixBatcher

    n_batch_chunks = 2 if tiny else 8 if quick else len(sufs)  # quick: one batch of 8, the first 8 chunks
    seq = seq_runs[doc_id][:n_batch_chunks]
    seq_s = sum(g.seconds for g in seq)
    sufs = sufs[:n_batch_chunks]
    out["batched"] = {}
    for n_seq in (2,) if tiny else (8,) if quick else (2, 4, 8):
        b = SharedPrefixBatcher(
            L,
            n_seq=n_seq,
            n_ctx=llm.n_ctx,
            n_batch=llm.n_batch,
            max_tokens=llm.max_tokens,
            repeat_penalty=llm.repeat_penalty,
            stop=STOP,
        )
        t0 = time.perf_counter()
        bat = b.generate(prefix, sufs)
        bat_s = time.perf_counter() - t0
        b.close()
        same = sum(x.text == y.text and x.generated == y.generated for x, y in zip(seq, bat))
        out["batched"][n_seq] = {
            "seconds": round(bat_s, 2),
            "sequential_seconds": round(seq_s, 2),
            "speedup": round(seq_s / bat_s, 3),
            "identical": same,
            "blurbs": len(seq),
        }
        log(f"llm batched x{n_seq}: {bat_s:.1f} s against {seq_s:.1f} s sequential; {same}/{len(seq)} blurbs identical")
    best = max(out["batched"].values(), key=lambda r: r["speedup"])
    out["batched_speedup"] = best["speedup"]
    out["batched_identical"] = all(r["identical"] == r["blurbs"] for r in out["batched"].values())
    return out


# -- blurb models and llama.cpp settings ------------------------------------------------------
def _blurb_run(llm, builder, prefix: list[int], sufs: list[list[int]], tiny: bool = False) -> dict:
    """Blurbs of ``sufs`` after ``prefix`` back to back (cache reset first), and the model's rates
    at that depth; the first blurb (which reads the prefix) is reported apart."""
    from situate.contextual.document_blurbs import stops

    L = llm.load()
    L.reset()
    gens = [llm.generate(prefix + s, stop=stops(False)) for s in sufs]
    first, rest = gens[0], gens[1:]
    prompt_rate, gen_rate = _rates_at_depth(
        L,
        len(prefix),
        [t for s in sufs for t in s][: 16 if tiny else 256],
        tries=1 if tiny else 2,
        steps=2 if tiny else 16,
    )
    measured = sum(g.seconds for g in rest)
    limit = sum(g.evaluated / prompt_rate + g.generated / gen_rate for g in rest)
    return {
        "prefix_tokens": len(prefix),
        "first_blurb_s": round(first.seconds, 2),
        "blurbs": len(rest),
        "s_per_blurb": round(measured / len(rest), 3),
        "blurbs_per_s": round(len(rest) / measured, 3),
        "generated_per_blurb": round(sum(g.generated for g in rest) / len(rest), 1),
        "prompt_tokens_per_s": round(prompt_rate, 1),
        "generated_tokens_per_s": round(gen_rate, 1),
        "measured_over_limit": round(measured / limit, 3),
        "texts": [g.text for g in gens],
    }


def models_section(corpus: list[dict], quick: bool, tiny: bool = False) -> dict:
    """The ``models`` figures (module docstring).  ``tiny`` (a smoke run): 2 chunks of the shortest
    document with 2+, every model and setting; the window comparison on the shortest document
    that needs 2+ windows of 384 tokens, against 768, one blurb a window."""
    from situate.contextual.fitting import prompt_builder
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models import registry as models
    from situate.resources.models.llm import _CACHE, BlurbLLM, amx_build

    base = resources_from_env(plain=True)["llm"]
    n = 2 if tiny else 4 if quick else 8
    if tiny:
        doc = min((d for d in corpus if len(d["chunks"]) >= n), key=lambda d: len(d["content"]))
    else:  # a code document of 2k-3.3k tokens with enough chunks (the llm section's quick document)
        doc = max(
            (d for d in corpus if 6000 <= len(d["content"]) <= 11000 and len(d["chunks"]) > n),
            key=lambda d: len(d["chunks"]),
        )
    out: dict = {"doc_id": doc["doc_id"], "chunks": n, "prompt": base.prompt, "by_model": {}, "settings": {}}

    def run(llm: BlurbLLM, d: dict = doc, k: int = n) -> dict:
        builder = prompt_builder(llm, source=True)
        r = _blurb_run(llm, builder, *_doc_prompts(builder, d, k), tiny=tiny)
        _CACHE.clear()  # one model in memory at a time
        return r

    for name, spec in models.LLMS.items():
        if not models.is_installed(spec, verify=False):
            log(f"models: {name} not installed, skipped (situate models install {name})")
            continue
        llm = BlurbLLM(
            **{
                **base.model_dump(),
                "model_path": str(models.path_of(spec)),
                "model_id": spec.model_id,
                "repeat_penalty": spec.repeat_penalty,
            }
        )
        out["by_model"][name] = r = run(llm)
        log(
            f"models {name}: {r['s_per_blurb']} s a blurb, prompt {r['prompt_tokens_per_s']} tok/s, "
            f"generation {r['generated_tokens_per_s']} tok/s, measured/limit {r['measured_over_limit']}"
        )
    variants = {
        "default": {},
        "flash_attn": {"flash_attn": True},
        "kv_q8_0": {"kv_type": "q8_0"},
        "threads_1": {"n_threads": 1},
        "repack_on": {"repack": True},
    }
    for name, change in variants.items():
        if change.get("repack") and amx_build():  # repacking on would kill this process (amx_build)
            out["settings"][name] = {"skipped": "llama.cpp built with AMX: repacking on crashes it"}
            log(f"models setting {name}: skipped, {out['settings'][name]['skipped']}")
            continue
        out["settings"][name] = r = run(BlurbLLM(**{**base.model_dump(), **change}))
        r["same_text_as_default"] = r["texts"] == out["settings"]["default"]["texts"]
        log(f"models setting {name}: {r['s_per_blurb']} s a blurb; same text: {r['same_text_as_default']}")
    # a long document: windows of 4,096 against 8,192 tokens (each chunk reads less document)
    from cost import corpus_spans

    from situate.contextual.fitting import fit_document, generation_bound

    sizes = (768, 384) if tiny else (8192, 4096)

    def plan_of(d: dict, n_ctx: int):
        llm = BlurbLLM(**{**base.model_dump(), "n_ctx": n_ctx})
        builder = prompt_builder(llm, source=True)
        return llm, builder, fit_document(d["content"], corpus_spans(d), builder, n_ctx, generation_bound(llm, builder))

    if tiny:  # the shortest document that the smaller windows cut in two or more
        long_doc = next(
            d
            for d in sorted(corpus, key=lambda d: len(d["content"]))
            if len(d["chunks"]) >= 2 and len(plan_of(d, sizes[1])[2].windows) >= 2
        )
    else:
        long_doc = max((d for d in corpus if 30000 <= len(d["content"]) <= 60000), key=lambda d: len(d["chunks"]))
    out["windows"] = {"doc_id": long_doc["doc_id"]}
    for n_ctx in sizes:
        llm, builder, plan = plan_of(long_doc, n_ctx)
        spans = corpus_spans(long_doc)
        t0 = time.perf_counter()
        L = llm.load()
        L.reset()
        k = 0
        for w in plan.windows[:2]:  # the first two windows, every chunk in them
            prefix = builder.window_prefix(long_doc["content"], spans, w.start, w.end)
            for i in w.chunks[: (1 if tiny else 3 if quick else 6)]:
                llm.generate(prefix + builder.suffix(long_doc["chunks"][i]["content"], i))
                k += 1
        secs = time.perf_counter() - t0
        _CACHE.clear()
        out["windows"][n_ctx] = {
            "windows": len(plan.windows),
            "blurbs": k,
            "seconds": round(secs, 1),
            "s_per_blurb": round(secs / k, 2),
        }
        log(f"models window {n_ctx}: {len(plan.windows)} windows, {k} blurbs in {secs:.1f} s")
    for r in [*out["by_model"].values(), *out["settings"].values()]:
        if "texts" in r:
            r["texts"] = r["texts"][:3]
    return out


def embedq_section(corpus: list[dict], quick: bool, work: Path, tiny: bool = False) -> dict:
    """The configured embedder as installed against the same GGUF quantised to Q8_0 by llama.cpp.

    It applies to a GGUF embedder only (``SITUATE_EMBED_MODEL=nomic-embed-text-v1.5``): for an
    ONNX one (the default, bge-small-en-v1.5, whose weights are INT8 already) the section returns
    ``{"applies": False, "embed_model", "reason"}`` and measures nothing.

    Raises
    ------
    RuntimeError
        llama.cpp's quantisation failed.
    """
    import numpy as np

    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.llm import _CACHE, Embedder
    from situate.resources.models.registry import sha256_of

    base = resources_from_env(plain=True)["embedder"]
    if base.is_onnx():
        reason = (
            f"the embedder {base.resolved_model_id()} is an ONNX model (onnxruntime, INT8 weights): "
            "llama.cpp quantises GGUF files only; set SITUATE_EMBED_MODEL=nomic-embed-text-v1.5 "
            "(situate models install nomic-embed-text-v1.5) to measure a GGUF embedder"
        )
        log(f"embedq: does not apply: {reason}")
        return {"applies": False, "embed_model": base.resolved_model_id(), "reason": reason}
    import llama_cpp

    q8 = work / (Path(base.model_path).name.removesuffix(".gguf").removesuffix(".f16") + ".Q8_0.gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(base.model_path.encode(), str(q8).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc})")
    out = {
        "quantize_s": round(time.perf_counter() - t0, 1),
        "q8_0_bytes": q8.stat().st_size,
        "q8_0_sha256": sha256_of(q8),
    }
    texts = [c["content"] for d in corpus for c in d["chunks"]][: (4 if tiny else 24 if quick else 96)]
    out.update(applies=True, embed_model=base.resolved_model_id())
    vecs = {}
    for name, path in (("f16", base.model_path), ("q8_0", str(q8)), ("f16 again", base.model_path)):
        emb = Embedder(**{**base.model_dump(), "model_path": path})
        emb.embed_documents(texts[:2])
        t0 = time.perf_counter()
        vecs[name], _ = emb.embed_documents(texts)
        out[name] = {"seconds": round(time.perf_counter() - t0, 2)}
        _CACHE.clear()
    out["speedup_q8_0"] = round((out["f16"]["seconds"] + out["f16 again"]["seconds"]) / 2 / out["q8_0"]["seconds"], 3)
    cos = (vecs["f16"] * vecs["q8_0"]).sum(axis=1)
    out["cosine_f16_q8_0_min"] = round(float(cos.min()), 5)
    out["cosine_f16_q8_0_mean"] = round(float(np.mean(cos)), 5)
    log(f"embedq: q8_0 x{out['speedup_q8_0']} against f16, cosine min {out['cosine_f16_q8_0_min']}")
    return out


# -- embeddings --------------------------------------------------------------------------------
def embed_section(corpus: list[dict], quick: bool, tiny: bool = False) -> dict:
    """Embedding throughput of the configured embedder (ONNX or GGUF, through
    :class:`situate.resources.models.llm.Embedder` as the pipeline runs it) by batch size; tokens are
    the embedder's own, each text cut to its context (:func:`embedders.tokens_read`).

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        The embedder's files are missing, corrupt or not loadable.
    """
    from embedders import tokens_read

    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.llm import Embedder

    base = resources_from_env(plain=True)["embedder"]
    texts = [c["content"] for d in corpus for c in d["chunks"]][: (4 if tiny else 16 if quick else 64)]
    sizes = (1, 4) if tiny else (1, 4, 16) if quick else (1, 2, 4, 8, 16, 32, 64)
    tokens = tokens_read(base, texts)
    base.embed_documents(texts[:2])  # warm-up
    out = {
        "embed_model": base.resolved_model_id(),
        "runtime": "onnxruntime" if base.is_onnx() else "llama.cpp",
        "texts": len(texts),
        "tokens": tokens,
        "by_batch": {},
        "default_batch": base.batch_size,
    }
    for bs in sizes:
        emb = Embedder(**{**base.model_dump(), "batch_size": bs})
        t0 = time.perf_counter()
        emb.embed_documents(texts)
        dt = time.perf_counter() - t0
        out["by_batch"][bs] = {
            "seconds": round(dt, 2),
            "tokens_per_s": round(tokens / dt, 1),
            "chunks_per_s": round(len(texts) / dt, 2),
        }
        log(f"embed batch {bs}: {tokens / dt:.0f} tokens/s, {len(texts) / dt:.2f} chunks/s")
    best = max(out["by_batch"], key=lambda b: out["by_batch"][b]["tokens_per_s"])
    out["best_batch"] = best
    out["embed_tokens_per_s"] = out["by_batch"].get(base.batch_size, out["by_batch"][best])["tokens_per_s"]
    return out


# -- search ------------------------------------------------------------------------------------
def search_section(corpus: list[dict], quick: bool, work: Path, tiny: bool = False) -> dict:
    """``hybrid_search`` over 10,000 and 100,000 synthetic rows as wide as the configured
    embedder's vectors (:mod:`search_scale`); ``tiny`` (a smoke run): 500 and 2,000 rows, 5
    queries, the figures still filed under the ``10k`` / ``100k`` keys."""
    import search_scale

    texts = [c["content"] for d in corpus for c in d["chunks"]]
    small, large = (500, 2_000) if tiny else (10_000, 100_000)
    res = search_scale.run(work, texts, sizes=(small, large), n_queries=5 if tiny else 20 if quick else 50, log=log)
    big = res[large]
    mode = "indexed" if big["index_by_default"] else "exact"
    return {
        "sizes": res,
        "search_p50_ms_100k": big[mode]["p50_ms"],
        "search_p95_ms_100k": big[mode]["p95_ms"],
        "search_p95_ms_10k": res[small]["indexed" if res[small]["index_by_default"] else "exact"]["p95_ms"],
        "indexed_recall_at_10": big["indexed_recall_at_10"],
    }


# -- rerank ----------------------------------------------------------------------------------
def rerank_section(corpus: list[dict], quick: bool, tiny: bool = False) -> dict:
    """Seconds per query for the cross-encoder over ``RERANK_DEPTH`` real chunks (contextualised
    texts are longer; these are the chunks alone, 237-3,898 characters), by batch size; ``tiny``
    (a smoke run): one query over 4 chunks."""
    import random

    from situate.pipelines.settings import reranker_from_env
    from situate.resources.models.reranker import MAX_PAIR_TOKENS, RERANK_DEPTH

    queries_path = Path(os.environ.get("SITUATE_BENCH_CORPUS", DEFAULT_CORPUS)).with_name("queries_dev.jsonl")
    queries = (
        [json.loads(line)["query"] for line in queries_path.read_text().splitlines() if line.strip()]
        if queries_path.is_file()
        else [d["chunks"][0]["content"][:80] for d in corpus]
    )
    chunks = [c["content"] for d in corpus for c in d["chunks"]]
    rng = random.Random(0)
    n = 1 if tiny else 4 if quick else 12
    depth = 4 if tiny else RERANK_DEPTH
    work = [(queries[i * 7 % len(queries)], rng.sample(chunks, depth)) for i in range(n)]
    base = reranker_from_env()
    base.score("warm up", ["a passage"])
    out = {
        "queries": n,
        "depth": depth,
        "threads": base.n_threads or os.cpu_count(),
        "default_batch": base.batch_size,
        "by_batch": {},
    }
    for bs in (1, 8, 32):
        r = base.model_copy(update={"batch_size": bs})
        t0 = time.perf_counter()
        for q, passages in work:
            r.score(q, passages)
        dt = (time.perf_counter() - t0) / n
        out["by_batch"][bs] = {"s_per_query": round(dt, 3), "s_per_pair": round(dt / depth, 4)}
        log(f"rerank batch {bs}: {dt:.2f} s a query ({depth} pairs)")
    out["rerank_s_per_query"] = out["by_batch"][base.batch_size]["s_per_query"]
    # passages that fill the pair (MAX_PAIR_TOKENS WordPiece tokens), as 800-token chunks do
    long = [(q, [" ".join(rng.sample(chunks, 6)) for _ in passages]) for q, passages in work]
    t0 = time.perf_counter()
    for q, passages in long:
        base.score(q, passages)
    dt = (time.perf_counter() - t0) / n
    out["full_pairs"] = {
        "s_per_query": round(dt, 3),
        "s_per_pair": round(dt / depth, 4),
        "pair_tokens": MAX_PAIR_TOKENS,
    }
    out["rerank_s_per_query_full_pairs"] = out["full_pairs"]["s_per_query"]
    log(f"rerank {depth} full pairs of {MAX_PAIR_TOKENS} tokens, batch {base.batch_size}: {dt:.2f} s a query")
    return out


# -- re-ingest ---------------------------------------------------------------------------------
def reingest_section(corpus: list[dict], quick: bool, work: Path, tiny: bool = False) -> dict:
    """Two ``situate ingest`` of the ``n`` shortest documents with 2+ chunks (20; quick 6; tiny 2)
    into ``work/reingest-home``, which the ``service`` section of the same run may serve."""
    from situate.pipelines.cli import ingest
    from situate.pipelines.settings import DATA_ENV, restored_env
    from situate.resources.models.llm import CALLS

    n = 2 if tiny else 6 if quick else 20
    small = sorted((d for d in corpus if len(d["chunks"]) >= 2), key=lambda d: len(d["content"]))[:n]
    path = work / "reingest-corpus.json"
    path.write_text(json.dumps(small))
    home = work / "reingest-home"
    quiet = lambda *_: None  # noqa: E731
    with restored_env(DATA_ENV + ("SITUATE_CODE_CONTEXT",)):  # ingest points SITUATE_HOME etc. at its own data folder
        # the codebase set is source code, which gets no LLM call by default: here it gets a summary,
        # so the first ingest asks the model and the second is seen to ask nothing
        os.environ["SITUATE_CODE_CONTEXT"] = "document"
        CALLS.clear()
        first = ingest(str(path), home=str(home), echo=quiet)
        first_calls = dict(CALLS)
        CALLS.clear()
        second = ingest(str(path), home=str(home), echo=quiet)
        second_calls = dict(CALLS)
    out = {
        "documents": n,
        "chunks": first.chunks,
        "first_seconds": round(first.seconds, 1),
        "first_llm_calls": first_calls.get("llm_generate", 0),
        "first_embed_calls": first_calls.get("embed_texts", 0),
        "second_seconds": round(second.seconds, 2),
        "second_failed": len(second.failed),
        "reingest_llm_calls": second_calls.get("llm_generate", 0),
        "reingest_embed_calls": second_calls.get("embed_texts", 0),
        "reingest_s_per_100_docs": round(second.seconds / n * 100, 1),
    }
    log(
        f"reingest: first {out['first_seconds']} s ({out['first_llm_calls']} LLM, {out['first_embed_calls']} "
        f"embed calls); second {out['second_seconds']} s, {out['reingest_llm_calls']} LLM, "
        f"{out['reingest_embed_calls']} embed calls"
    )
    return out


# -- partitions --------------------------------------------------------------------------------
def partitions_section(work: Path, n: int = 10_000) -> dict:
    import dagster as dg

    from situate.pipelines.automation import documents_sensor
    from situate.pipelines.settings import resources_from_env
    from situate.pipelines.sync import ADD_BATCH, PARTITIONS

    docs_dir = work / "many-docs"
    docs_dir.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (docs_dir / f"note-{i:05d}.md").write_text(f"# Note {i}\n\nSome text for note {i}.\n")
    res = resources_from_env(docs_path=str(docs_dir), home=str(work / "partitions-home"), plain=True)
    keys = [r.key for r in res["docs"].discover()]
    (work / "partitions-dagster").mkdir(parents=True, exist_ok=True)
    with dg.instance_for_test(temp_dir=str(work / "partitions-dagster")) as instance:
        t0 = time.perf_counter()
        for i in range(0, len(keys), ADD_BATCH):
            instance.add_dynamic_partitions(PARTITIONS, keys[i : i + ADD_BATCH])
        register_s = time.perf_counter() - t0
        ctx = dg.build_sensor_context(instance=instance, resources=res)
        t0 = time.perf_counter()
        result = documents_sensor(ctx)
        tick_s = time.perf_counter() - t0
        requested = len(result.run_requests or [])
    out = {
        "partitions": len(keys),
        "batch": ADD_BATCH,
        "partitions_10k_register_s": round(register_s, 2),
        "sensor_tick_s": round(tick_s, 2),
        "sensor_run_requests": requested,
    }
    log(f"partitions: {len(keys)} registered in {register_s:.1f} s; sensor tick {tick_s:.1f} s")
    return out


# -- report ------------------------------------------------------------------------------------
KEYS = [
    "cost_default_over_today",
    "cost_default_over_floor",
    "prefix_reuse_ratio",
    "cache_speedup",
    "blurb_time_vs_limit",
    "batched_speedup",
    "embed_tokens_per_s",
    "search_p50_ms_100k",
    "search_p95_ms_100k",
    "indexed_recall_at_10",
    "rerank_s_per_query",
    "rerank_s_per_query_full_pairs",
    "reingest_llm_calls",
    "reingest_embed_calls",
    "partitions_10k_register_s",
]
TARGETS = {
    "cost_default_over_today": "<= 0.4 (or <= 1.15 x floor)",
    "cost_default_over_floor": "<= 1.15",
    "prefix_reuse_ratio": ">= 0.85",
    "cache_speedup": ">= 3",
    "blurb_time_vs_limit": "<= 1.25",
    "batched_speedup": ">= 1.5 (identical output)",
    "search_p95_ms_100k": "<= 100",
    "indexed_recall_at_10": ">= 0.95",
    "reingest_llm_calls": "0",
    "reingest_embed_calls": "0",
}


def markdown(report: dict) -> str:
    kind = "tiny (smoke: figures meaningless)" if report.get("tiny") else "quick" if report["quick"] else "full"
    lines = [
        f"# Performance ({kind} run, {report['date']})",
        "",
        f"Machine: {report['machine']}. Command: `{report['command']}` ({report['seconds']:.0f} s). "
        f"Load average at start: {report.get('load_average_at_start', 'n/a')}"
        + (
            " (busy machine: timings unreliable)."
            if report.get("load_average_at_start", 0) > 0.5 * (os.cpu_count() or 1)
            else "."
        ),
        "",
        "| figure | value | target |",
        "|---|---|---|",
    ]
    for k in KEYS:
        lines.append(f"| {k} | {report.get(k, 'n/a')} | {TARGETS.get(k, '')} |")
    s = report.get("sections", {})
    if "cost" in s:
        import cost

        lines += cost.markdown(s["cost"])
    if "threads" in s:
        import threads

        lines += threads.markdown(s["threads"])
    if "embedders" in s:
        import embedders

        lines += embedders.markdown(s["embedders"])
    if "skipping" in s:
        import skipping

        lines += skipping.markdown(s["skipping"])
    if "llm" in s:
        llm = s["llm"]
        r = llm["rates"]
        lines += [
            "",
            "## LLM (blurbs)",
            "",
            f"- Prompt tokens reused / all over {len(llm['documents'])} document(s): {llm['prefix_reuse_ratio']}.",
            f"- Time per blurb: {llm['no_reuse']['seconds_per_blurb']} s with the cache reset, "
            f"{llm['documents'][0]['seconds_per_blurb']} s with the prefix kept (x{llm['cache_speedup']}); "
            f"same text: {llm['no_reuse']['same_text']}.",
            f"- Order: A,A,B,B {llm['order']['AABB']['seconds']} s (reuse {llm['order']['AABB']['reuse_ratio']}), "
            f"A,B,A,B {llm['order']['ABAB']['seconds']} s (reuse {llm['order']['ABAB']['reuse_ratio']}).",
            f"- Rates at depth {r['depth_tokens']} tokens: prompt {r['prompt_tokens_per_s']} tokens/s, "
            f"generation {r['generated_tokens_per_s']} tokens/s; {r['blurbs']} blurbs took {r['measured_s']} s "
            f"against a limit of {r['limit_s']} s.",
            "",
            "| batch | batched s | sequential s | speedup | identical blurbs |",
            "|---|---|---|---|---|",
        ]
        for n, b in llm["batched"].items():
            lines.append(
                f"| {n} | {b['seconds']} | {b['sequential_seconds']} | {b['speedup']} | "
                f"{b['identical']}/{b['blurbs']} |"
            )
    if "models" in s:
        m = s["models"]
        lines += [
            "",
            f"## Blurb models ({m['doc_id']}, {m['chunks']} chunks, prompt {m['prompt']})",
            "",
            "| model / setting | first blurb s | s a blurb | blurbs/s | prompt tok/s | generation tok/s | "
            "measured / limit | same text as default |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, r in [*m["by_model"].items(), *[(f"default model, {k}", v) for k, v in m["settings"].items()]]:
            if "skipped" in r:
                lines.append(f"| {name} | skipped: {r['skipped']} |||||||")
                continue
            lines.append(
                f"| {name} | {r['first_blurb_s']} | {r['s_per_blurb']} | {r['blurbs_per_s']} | "
                f"{r['prompt_tokens_per_s']} | {r['generated_tokens_per_s']} | {r['measured_over_limit']} | "
                f"{r.get('same_text_as_default', '')} |"
            )
        w = m["windows"]
        lines += [
            "",
            f"Windows on {w['doc_id']}: "
            + "; ".join(
                f"n_ctx {k}: {v['windows']} windows, {v['blurbs']} blurbs, {v['s_per_blurb']} s a blurb"
                for k, v in w.items()
                if k != "doc_id"
            )
            + ".",
        ]
    if "embedq" in s and not s["embedq"].get("applies", True):
        lines += ["", "## Embedder f16 against Q8_0", "", f"Does not apply: {s['embedq']['reason']}."]
    elif "embedq" in s:
        e = s["embedq"]
        lines += [
            "",
            "## Embedder f16 against Q8_0",
            "",
            f"Q8_0 by llama.cpp in {e['quantize_s']} s: {e['q8_0_bytes']:,} bytes, sha256 {e['q8_0_sha256']}; "
            f"f16 {e['f16']['seconds']} / {e['f16 again']['seconds']} s, Q8_0 {e['q8_0']['seconds']} s "
            f"(x{e['speedup_q8_0']}); cosine f16 / Q8_0 min {e['cosine_f16_q8_0_min']}, mean "
            f"{e['cosine_f16_q8_0_mean']}.",
        ]
    if "embed" in s:
        e = s["embed"]
        title = (
            f"## Embeddings ({e.get('embed_model', 'the embedder')}, {e.get('runtime', 'llama.cpp')}: "
            f"{e['texts']} chunks, {e['tokens']} tokens)"
        )
        lines += ["", title, "", "| batch | tokens/s | chunks/s |", "|---|---|---|"]
        for n, b in e["by_batch"].items():
            lines.append(f"| {n} | {b['tokens_per_s']} | {b['chunks_per_s']} |")
    if "search" in s:
        lines += [
            "",
            "## Search (hybrid: dense top-150 + BM25 top-150, RRF, top 10)",
            "",
            "| rows | exact p50 / p95 ms | indexed p50 / p95 ms | index build s | recall@10 |",
            "|---|---|---|---|---|",
        ]
        for n, r in s["search"]["sizes"].items():
            lines.append(
                f"| {int(n):,} | {r['exact']['p50_ms']} / {r['exact']['p95_ms']} | "
                f"{r['indexed']['p50_ms']} / {r['indexed']['p95_ms']} | {r['index_build_s']} | "
                f"{r['indexed_recall_at_10']} |"
            )
    if "rerank" in s:
        r = s["rerank"]
        lines += [
            "",
            f"## Rerank ({r['depth']} candidates a query, {r['queries']} queries, {r['threads']} threads)",
            "",
            "| batch | s a query | s a pair |",
            "|---|---|---|",
        ]
        for n, b in r["by_batch"].items():
            lines.append(
                f"| {n}{' (default)' if int(n) == r['default_batch'] else ''} | "
                f"{b['s_per_query']} | {b['s_per_pair']} |"
            )
        if "full_pairs" in r:
            f = r["full_pairs"]
            lines.append(
                f"| {r['default_batch']}, every pair {f['pair_tokens']} tokens | {f['s_per_query']} | "
                f"{f['s_per_pair']} |"
            )
    if "reingest" in s:
        r = s["reingest"]
        lines += [
            "",
            "## Re-ingest",
            "",
            f"{r['documents']} documents ({r['chunks']} chunks): first ingest {r['first_seconds']} s "
            f"({r['first_llm_calls']} LLM calls, {r['first_embed_calls']} texts embedded); second "
            f"{r['second_seconds']} s with {r['reingest_llm_calls']} LLM calls and "
            f"{r['reingest_embed_calls']} texts embedded ({r['reingest_s_per_100_docs']} s per 100 documents).",
        ]
    if "partitions" in s:
        p = s["partitions"]
        lines += [
            "",
            "## Partitions",
            "",
            f"{p['partitions']:,} partitions registered in batches of {p['batch']} in "
            f"{p['partitions_10k_register_s']} s; one sensor tick at that size {p['sensor_tick_s']} s "
            f"({p['sensor_run_requests']} run request(s)).",
        ]
    if "service" in s:
        lines += [
            "",
            "## Search service (situate serve over HTTP, k = 10)",
            "",
            "| rows | first stage p50 / p95 (ms) | rerank 30 p50 / p95 (ms) | 4 clients: requests/s |",
            "|---|---|---|---|",
        ]
        for name in ("real", "synthetic"):
            r = s["service"][name]
            lines.append(
                f"| {r['rows']:,} ({name}) | {r['first_stage']['p50_ms']} / {r['first_stage']['p95_ms']} | "
                f"{r['reranked_30']['p50_ms']} / {r['reranked_30']['p95_ms']} | "
                f"{r['concurrent']['requests_per_s']} |"
            )
    if "backends" in s:  # the section's own Markdown (benchmarks/backends.py), its title a section's
        import backends

        body = backends.markdown({"date": report["date"], **s["backends"]})
        lines += [""] + [
            "## Backends" + ln[len("# Backends") :] if ln.startswith("# Backends") else ln for ln in body.splitlines()
        ]
    if "scale_out" in s:  # the section's own Markdown (benchmarks/scale_out.py), without its title
        import scale_out

        body = scale_out.markdown(
            {"command": report["command"], "cpu_count": os.cpu_count(), "date": report["date"], **s["scale_out"]}
        )
        lines += [""] + ["#" + ln if ln.startswith("## ") else ln for ln in body.splitlines()[4:]]
    return "\n".join(lines) + "\n"


#: The sections ``--only`` runs by default (``--quick`` included).
DEFAULT_SECTIONS = ("cost", "threads", "skipping", "llm", "embed", "search", "rerank", "reingest", "partitions")
#: Every section, in the order ``--only all`` runs them (``service`` after ``reingest``: without
#: ``--service-home`` it serves the data folder that section ingested).
ALL_SECTIONS = (
    "cost",
    "threads",
    "skipping",
    "llm",
    "models",
    "embedq",
    "embed",
    "embedders",
    "search",
    "rerank",
    "reingest",
    "partitions",
    "service",
    "scale_out",
    "backends",
)


def main(argv: list[str] | None = None) -> int:
    """Run the sections ``--only`` names and write the JSON report and its Markdown.

    Raises
    ------
    SystemExit
        An unknown section, or ``service`` with neither ``--service-home`` nor a ``reingest``
        section before it in the same run.
    FileNotFoundError
        The corpus is missing (:func:`load_corpus`).
    """
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one document per LLM figure; about 10 minutes")
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="a smoke run: every section on a few texts (tests/test_benchmarks_quick.py); the figures mean nothing",
    )
    ap.add_argument("--json", required=True, help="report path (JSON)")
    ap.add_argument("--markdown", help="Markdown table path (default: the JSON path with .md)")
    ap.add_argument(
        "--only",
        default=",".join(DEFAULT_SECTIONS),
        help="comma-separated sections, or all (also: models, embedq, embedders, service, scale_out, backends)",
    )
    ap.add_argument(
        "--service-home",
        help="for service: an ingested data folder (benchmarks/service.py); "
        "default: the reingest section's, when it ran before",
    )
    args = ap.parse_args(argv)
    sections = (
        list(ALL_SECTIONS) if args.only.strip() == "all" else [s.strip() for s in args.only.split(",") if s.strip()]
    )
    unknown = [s for s in sections if s not in ALL_SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s) {', '.join(unknown)}: choose from {', '.join(ALL_SECTIONS)} or all")
    quick, tiny = args.quick or args.tiny, args.tiny
    t0 = time.perf_counter()
    corpus = load_corpus()
    small = tiny_corpus(corpus) if tiny else corpus  # what the LLM sections read
    report: dict = {
        "quick": args.quick,
        "tiny": tiny,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "command": "python benchmarks/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "sections": {},
    }
    load = os.getloadavg()[0]
    report["load_average_at_start"] = round(load, 2)
    if load > 0.5 * (os.cpu_count() or 1):
        log(
            f"warning: load average {load:.1f} on {os.cpu_count()} CPUs before the run: another process "
            "(another llama.cpp model above all) distorts every timing and ratio below"
        )
    work = Path(tempfile.mkdtemp(prefix="situate-bench-"))
    try:
        for name in sections:
            log(f"section {name}")
            t_section = time.perf_counter()
            if name == "cost":
                import cost

                r = cost.cost_section(quick, log, docs=[("codebase", small[0])] if tiny else None)
            elif name == "threads":
                import threads

                r = threads.threads_section(log, tiny=tiny)
            elif name == "skipping":
                import skipping

                cost_r = report["sections"].get("cost", {}).get("modes", {})
                default = report["sections"].get("cost", {}).get("default_mode")
                r = skipping.skipping_section(
                    cost_r.get(default, {}).get("s_per_chunk"), log, max_bytes=200_000 if tiny else 60_000_000
                )
            elif name == "llm":
                r = llm_section(small, quick, tiny)
            elif name == "models":
                r = models_section(small, quick, tiny)
            elif name == "embedq":
                r = embedq_section(corpus, quick, work, tiny)
            elif name == "embed":
                r = embed_section(corpus, quick, tiny)
            elif name == "embedders":
                import embedders

                r = embedders.embedders_section(corpus, quick, work, log, tiny=tiny)
            elif name == "search":
                r = search_section(corpus, quick, work, tiny)
            elif name == "rerank":
                r = rerank_section(corpus, quick, tiny)
            elif name == "reingest":
                r = reingest_section(small, quick, work, tiny)
            elif name == "partitions":
                r = partitions_section(work, 50 if tiny else 10_000)
            elif name == "service":  # situate serve over HTTP: the section lives in benchmarks/service.py
                home = Path(args.service_home) if args.service_home else work / "reingest-home"
                if not args.service_home and "reingest" not in report["sections"]:
                    raise SystemExit(
                        "service needs --service-home (an ingested data folder), or the reingest "
                        "section before it in the same run"
                    )
                import service

                q = [json.loads(x)["query"] for x in service.QUERIES.read_text().splitlines() if x.strip()]
                n_lat, n_rerank, clients, per_client, rows = (3, 2, 2, 2, 2_000) if tiny else (50, 20, 4, 25, 100_000)
                r = {
                    "real": service.measure_home(home, q, n_lat, n_rerank, clients, per_client),
                    "synthetic": service.measure_home(
                        service.synthetic_home(work, rows), q, n_lat, n_rerank, clients, per_client
                    ),
                }
            elif name == "scale_out":  # S3 against local disk, 1 and 2 parallel runs: benchmarks/scale_out.py
                import scale_out
                from s3server import seaweedfs

                from situate.pipelines.settings import restored_env

                with seaweedfs(work / "s3") as s3, restored_env((*s3["env"], "SITUATE_CACHE")):
                    os.environ.update(s3["env"])
                    os.environ["SITUATE_CACHE"] = str(work / "cache")
                    r = {
                        "search": scale_out.search_section(500 if tiny else 10_000, work, s3, 10 if tiny else 60),
                        "docs_per_hour": scale_out.docs_per_hour_section(
                            work, s3, 1 if tiny else 4 if quick else 8, parallel=not tiny
                        ),
                    }
            elif name == "backends":  # in process, llama_cpp.server, llama-server: benchmarks/backends.py
                import backends

                r = backends.measure(("variables.py",), (1,), ("chunk",), False) if tiny else backends.measure()
            report["sections"][name] = r
            report.setdefault("section_seconds", {})[name] = round(time.perf_counter() - t_section, 1)
            report.update({k: r[k] for k in KEYS if k in r})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    md = Path(args.markdown) if args.markdown else out.with_suffix(".md")
    md.write_text(markdown(report))
    log(f"wrote {out} and {md} in {report['seconds']:.0f} s")
    print(json.dumps({k: report.get(k) for k in KEYS}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
