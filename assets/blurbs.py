"""Asset ``blurbs``: a situating context for every chunk, written by the in-process LLM.

One ``Llama`` object works through a document's chunks back to back; the document window is a
token-identical prefix, so llama.cpp evaluates it once and reuses its KV cache for the next chunk.
"""


import collections
import dataclasses

import dagster as dg

from assets.contextualize import BlurbRecord, contextualize
from assets.fitted_preambles import builders_by_kind, generation_bound
from assets.per_document import for_each_document, read_ok
from assets.preambles import FitPlan
from assets.prompting import ANTHROPIC_2024, PROMPT_VERSION
from assets.partitions import BACKFILL, LLM_POOL, documents
from resources.cache import blurb_cache_for, digest, file_sha256
from resources.llm import BlurbLLM
from resources.store import Store

#: Generation stops at a blank line or an echoed tag: a blurb is one short paragraph.
STOP = ["\n\n", "</chunk>", "<document>", "<chunk>"]


def stops(reasoning: bool) -> list[str]:
    """Stop strings: :data:`STOP`; without the blank line for a reasoning model, whose reasoning
    has blank lines before the answer (cleaning keeps the answer's first paragraph instead)."""
    return [s for s in STOP if s != "\n\n"] if reasoning else list(STOP)


def blurb_key(llm: BlurbLLM, template_name: str = ANTHROPIC_2024.name, reasoning: bool = False,
              max_tokens: int | None = None, system: str = ""):
    """The blurb cache key function: ``(window text, chunk prompt text) -> sha256 hex`` over the LLM
    file's sha256, the prompt template and version, and the decoding settings (``system``: the
    chat frame's head, when the template sets a system line; empty for the model's default)."""
    settings = {"llm_sha256": file_sha256(llm.model_path), "template": template_name,
                "prompt_version": PROMPT_VERSION, "max_tokens": max_tokens or llm.max_tokens,
                "repeat_penalty": llm.repeat_penalty, "stop": stops(reasoning), "temperature": 0.0, "seed": llm.seed}
    if system:
        settings["system"] = system

    def key(window: str, chunk_prompt: str) -> str:
        return digest(settings, window, chunk_prompt)

    return key


def skipped_records(n: int, reason: str) -> list[BlurbRecord]:
    """``n`` records of chunks that get no blurb on purpose (status ``skipped:<reason>``, no model
    call): not a fallback, so the ``fallback_share`` check does not count them."""
    return [BlurbRecord("", f"skipped:{reason}", "", [], 0, 0, 0, 0, 0.0, -1) for _ in range(n)]


def blurb_summary(records: list) -> dict:
    """Per-document figures: blurbs, fallbacks by reason, model calls and blurbs from the cache,
    prompt tokens evaluated / reused (over model calls only), problems found by cleaning."""
    fresh = [r for r in records if not getattr(r, "cached", False)]
    prompt = sum(r.prompt_tokens for r in fresh)
    evaluated = sum(r.evaluated for r in fresh)
    seconds = sum(r.seconds for r in fresh)
    problems = collections.Counter(p for r in records for p in r.problems)
    reasons = collections.Counter(r.status.split(":", 1)[1] for r in records if r.status.startswith("fallback:"))
    called = [r for r in fresh if r.window >= 0]  # no window: no prompt was sent
    return {"chunks": len(records), "blurbs_from_model": sum(r.status == "model" for r in records),
            "fallbacks": sum(reasons.values()),
            "fallback_reasons": ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())) or "none",
            "skipped": sum(r.status.startswith("skipped:") for r in records),
            "problems": dict(sorted(problems.items())),
            "model_calls": len(called), "cached": len(records) - len(fresh),
            "prompt_tokens": prompt, "prompt_tokens_evaluated": evaluated,
            "prompt_tokens_reused": prompt - evaluated,
            "reuse_ratio": round((prompt - evaluated) / prompt, 3) if prompt else 0.0,
            "generated_tokens": sum(r.generated for r in records),
            "llm_seconds": round(seconds, 2),
            "blurbs_per_second": round(len(fresh) / seconds, 3) if seconds else 0.0}


@dg.asset(
    partitions_def=documents,
    backfill_policy=BACKFILL,
    pool=LLM_POOL,
    deps=["fitted_preambles"],
    kinds={"python", "file"},
    group_name="ingest",
    description="For each chunk, Anthropic's published prompt (document window first, then the "
                "chunk and the instruction) through the in-process llama-cpp-python model; the "
                "blurb is cleaned, and an unusable one falls back to the chunk alone.",
)
def blurbs(context: dg.AssetExecutionContext, store: Store, llm: BlurbLLM) -> dg.MaterializeResult:
    builder_for = builders_by_kind(llm)
    model_id = llm.resolved_model_id()
    cache = blurb_cache_for(store)

    def work(key: str) -> dict:
        doc = read_ok(store, key, "document")
        builder = builder_for(doc)
        reasoning, bound = builder.frame.reasoning, generation_bound(llm, builder)
        key_fn = blurb_key(llm, llm.prompt, reasoning, bound,
                           system=builder.frame.head if builder.template.system or builder.template.system_code else "")
        grammar = builder.template.grammar

        def generate(tokens: list[int]):
            return llm.generate(tokens, stop=stops(reasoning), max_tokens=bound, grammar=grammar)

        chunk_list = read_ok(store, key, "chunks")["chunks"]
        plan = FitPlan.from_json(read_ok(store, key, "preambles"))
        texts = [c["text"] for c in chunk_list]
        n = len(texts)

        def progress(i: int, rec) -> None:
            how = ("from the cache" if rec.cached else
                   f"{rec.evaluated}/{rec.prompt_tokens} prompt tokens evaluated, {rec.seconds:.1f} s")
            context.log.info(f"blurbs {key} [{i + 1}/{n}] {rec.status}, {how}: {rec.blurb[:100]!r}")

        class _Log:
            def warning(self, msg, *args):
                context.log.warning(f"blurbs {key}: " + (msg % args))

        limit = llm.max_chunks_per_document
        if limit and n > limit:
            context.log.warning(f"blurbs {key}: large document, {n:,} chunks > {limit:,} "
                                "(SITUATE_MAX_BLURB_CHUNKS): no LLM blurbs, its chunks are indexed with "
                                "their structural context")
            records = skipped_records(n, "large-document")
        else:
            records = contextualize(doc["text"], texts, plan, builder, generate, log=_Log(), on_blurb=progress,
                                    cache=cache, cache_key=key_fn,
                                    generate_batch=llm.batcher(stops(reasoning), bound).generate if llm.batch > 1 else None)
        store.write_stage(key, "blurbs", {
            "model_id": model_id, "prompt_version": PROMPT_VERSION, "prompt": llm.prompt,
            "blurbs": [dataclasses.asdict(r) | {"chunk_id": c["chunk_id"]} for r, c in zip(records, chunk_list)]})
        return blurb_summary(records)

    report = for_each_document(context, store, "blurbs", work)

    def totals(ok: dict) -> dict:
        prompt = sum(v["prompt_tokens"] for v in ok.values())
        evaluated = sum(v["prompt_tokens_evaluated"] for v in ok.values())
        secs = sum(v["llm_seconds"] for v in ok.values())
        n = sum(v["chunks"] for v in ok.values())
        return {"blurbs_total": n, "fallbacks_total": sum(v["fallbacks"] for v in ok.values()),
                "skipped_total": sum(v.get("skipped", 0) for v in ok.values()),
                "model_calls_total": sum(v["model_calls"] for v in ok.values()),
                "blurbs_from_cache_total": sum(v["cached"] for v in ok.values()),
                "prompt_tokens_evaluated_total": evaluated, "prompt_tokens_reused_total": prompt - evaluated,
                "blurbs_per_second": round(n / secs, 3) if secs else 0.0}

    return dg.MaterializeResult(metadata={"model": model_id, "prompt_version": PROMPT_VERSION, "prompt": llm.prompt,
                                          **report.metadata(totals)})
