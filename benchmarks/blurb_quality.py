"""Blurb quality of the local LLM under prompt and decoding variants, on a sample of a corpus.

For each variant, the same chunks (the first ``--chunks`` chunks of ``--docs`` documents of the
cookbook codebase corpus, chosen by a fixed stride) go through the real pipeline code
(:func:`situate.contextual.contextualize.contextualize`, prefix reuse included); the report gives, in percent
of blurbs, those usable and those with each problem found by cleaning (empty, instruction
restated, tags echoed, chunk echoed, looped, dangling, unfinished, ungrounded names), the mean words of a usable
blurb and seconds per blurb.

Usage::

    python benchmarks/blurb_quality.py [--docs 4] [--chunks 8] [--out benchmarks/reports/blurb_quality]

Writes ``OUT.json`` and ``OUT.md``.  No timing is asserted anywhere; seconds are for comparing
variants measured in the same run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = ROOT / "eval" / "codebase" / "codebase_chunks.json"

#: name → (prompt name, repeat_penalty (None: the model's), max_tokens); the model is
#: ``SITUATE_LLM_MODEL`` (default: the default model)
VARIANTS = {
    "published": ("anthropic-2024", None, 80),
    "primed 'This chunk'": ("anthropic-2024-primed", None, 80),
    "primed 'This chunk is about' (default)": ("anthropic-2024-primed-about", None, 80),
    "system line": ("anthropic-2024+system", None, 80),
    "system line, primed": ("anthropic-2024+system-primed", None, 80),
    "code-aware system line": ("anthropic-2024+code-system", None, 80),
    "grammar: two sentences": ("anthropic-2024+grammar", None, 80),
}
PROBLEMS = ("empty", "restated", "tags", "chunk-echo", "looped", "dangling", "unfinished", "ungrounded", "truncated")


def sample(corpus: Path, n_docs: int, n_chunks: int) -> list[dict]:
    docs = [d for d in json.loads(corpus.read_text()) if 6 <= len(d["chunks"]) and len(d["content"]) < 16000]
    stride = max(1, len(docs) // n_docs)
    return docs[::stride][:n_docs]


def run_variant(docs, prompt_name, repeat_penalty, max_tokens, n_chunks, cache_dir) -> dict:
    from situate.contextual.code_context import detect_language
    from situate.contextual.contextualize import contextualize
    from situate.contextual.document_blurbs import STOP, blurb_key
    from situate.contextual.fitting import fit_document, prompt_builder
    from situate.contextual.prompts import PROMPTS
    from situate.pipelines.settings import resources_from_env
    from situate.resources.store.cache import BlurbCache

    base = resources_from_env(plain=True)["llm"]
    llm = base.model_copy(
        update={
            "repeat_penalty": repeat_penalty or base.repeat_penalty,
            "max_tokens": max_tokens,
            "prompt": prompt_name,
        }
    )
    template = PROMPTS[prompt_name]
    cache = BlurbCache(cache_dir) if cache_dir else None
    records, seconds = [], 0.0
    for d in docs:
        text = d["content"]
        chunks = sorted(d["chunks"], key=lambda c: c["original_index"])
        spans, pos = [], 0
        for c in chunks:
            s = text.index(c["content"], pos)
            spans.append((s, s + len(c["content"])))
            pos = s
        builder = prompt_builder(llm, template, source=detect_language(text) is not None)
        plan = fit_document(text, spans, builder, llm.n_ctx, llm.max_tokens)
        for w in plan.windows:  # keep the sample's first chunks only
            w.chunks[:] = [i for i in w.chunks if i < n_chunks]
        t0 = time.perf_counter()
        recs = contextualize(
            text,
            [c["content"] for c in chunks],
            plan,
            builder,
            lambda t: llm.generate(t, stop=STOP, grammar=template.grammar),
            cache=cache,
            cache_key=blurb_key(
                llm, prompt_name, system=builder.frame.head if template.system or template.system_code else ""
            )
            if cache
            else None,
            ground=True,
        )
        seconds += time.perf_counter() - t0
        records += [r for r in recs[:n_chunks] if r is not None]
    n = len(records)
    probs = collections.Counter(p for r in records for p in set(r.problems))
    usable = [r for r in records if r.status == "model"]
    return {
        "blurbs": n,
        "usable": round(100 * len(usable) / n, 1),
        **{p: round(100 * probs[p] / n, 1) for p in PROBLEMS},
        "mean_words_usable": round(sum(len(r.blurb.split()) for r in usable) / max(1, len(usable)), 1),
        "model_calls": sum(not r.cached for r in records),
        "seconds_per_blurb": round(seconds / max(1, sum(not r.cached for r in records)), 2),
        "examples": [r.blurb or f"[{r.status}] {r.raw[:120]}" for r in records[:4]],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--variants", help="comma-separated indexes into VARIANTS (default all)")
    ap.add_argument("--cache", help="a blurb cache folder to reuse (e.g. an eval data folder's cache/blurbs)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "reports" / "blurb_quality"))
    args = ap.parse_args(argv)
    from situate.resources.models import registry as models

    models.use_offline_tiktoken()
    docs = sample(Path(args.corpus), args.docs, args.chunks)
    names = list(VARIANTS)
    if args.variants:
        names = [names[int(i)] for i in args.variants.split(",")]
    results = {}
    for name in names:
        results[name] = run_variant(docs, *VARIANTS[name], args.chunks, args.cache)
        print(f"{name}: {json.dumps({k: v for k, v in results[name].items() if k != 'examples'})}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    from situate.pipelines.settings import resources_from_env

    meta = {
        "corpus": args.corpus,
        "documents": [d["doc_id"] for d in docs],
        "chunks_per_document": args.chunks,
        "llm": resources_from_env(plain=True)["llm"].resolved_model_id(),
        "cpu_count": os.cpu_count(),
    }
    out.with_suffix(".json").write_text(json.dumps({"sample": meta, "variants": results}, indent=2))
    cols = ["usable", *PROBLEMS, "mean_words_usable", "seconds_per_blurb"]
    lines = ["| variant | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(str(r[c]) for c in cols) + " |")
    lines.append(
        f"\n{sum(r['blurbs'] for r in results.values()) // max(1, len(results))} blurbs per variant "
        f"from {', '.join(meta['documents'])}; shares in percent of blurbs."
    )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
