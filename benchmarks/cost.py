"""The cost of situating a chunk, mode by mode, on the same documents in one run (issue 23).

For each mode (today's prompt, chunks by reference, the document mode; the structure mode makes no
LLM call) the same documents go through the same plain functions the ``blurbs`` asset calls
(:func:`situate.contextual.contextualize.contextualize`,
:func:`situate.contextual.document_blurbs.document_records`), each
document from an empty KV cache, with no blurb cache.  Reported per mode: LLM seconds a chunk,
prompt tokens evaluated and tokens generated a chunk, and the ratio to the floor.

The floor (issue 23): every document token prefilled once and every blurb token generated once,
``document tokens / prefill rate + blurb tokens / generation rate``, with the rates the machine
shows in this run, from llama.cpp's own counters (``llama_perf_context``): the prefill rate over
the calls that read a document (its first chunk's call), the generation rate over every call.
A mode's floor uses its own blurb tokens; the document mode reads at most ``document_tokens`` of
a document, so it can come in under the floor of a mode that reads all of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS_CORPUS = ROOT / "eval" / "docs" / "docs_chunks.json"

#: (label, context mode, prompt name) measured; today's prompt first, as the reference.
MODES = (
    ("today (anthropic-2024-primed-about)", "chunk", "anthropic-2024-primed-about"),
    ("by-reference", "chunk", "by-reference"),
    ("one generation (by-reference-window)", "chunk", "by-reference-window"),
    ("document", "document", ""),
    ("questions (doc2query by reference, issue 34)", "chunk", "questions"),
)


def corpus_spans(doc: dict) -> list[tuple[int, int]]:
    """Character spans of a cookbook-form document's chunks in its ``content``, in order."""
    text, out, pos = doc["content"], [], 0
    for c in doc["chunks"]:
        s = text.find(c["content"], pos)
        s = text.index(c["content"]) if s < 0 else s
        out.append((s, s + len(c["content"])))
        pos = s + 1
    return out


def pick_documents(quick: bool) -> list[tuple[str, dict]]:
    """Documents measured: quick, one source file of the codebase set (``doc_11``, 10 chunks) and
    one page of the docs set (the shortest with 4+ chunks); else three of each."""
    code = json.loads((ROOT / "eval" / "codebase" / "codebase_chunks.json").read_text())
    docs = json.loads(DOCS_CORPUS.read_text()) if DOCS_CORPUS.is_file() else []
    by_id = {d["doc_id"]: d for d in code}
    code_ids = ["doc_11"] if quick else ["doc_11", "doc_2", "doc_22"]
    pages = sorted((d for d in docs if len(d["chunks"]) >= 4), key=lambda d: len(d["content"]))
    out = [("codebase", by_id[i]) for i in code_ids if i in by_id]
    out += [("docs", d) for d in pages[: (1 if quick else 3)]]
    return out


def cost_section(quick: bool, log=print, docs: list[tuple[str, dict]] | None = None) -> dict:
    """Mode × document figures and the per-mode totals (see the module docstring).

    Parameters
    ----------
    quick : bool
        Fewer documents (:func:`pick_documents`).
    docs : list of (corpus name, cookbook-form document), optional
        The documents instead (``run.py --tiny``: one short one).
    """
    from situate.contextual.code_context import is_source
    from situate.contextual.contextualize import contextualize
    from situate.contextual.document_blurbs import document_records, stops
    from situate.contextual.fitting import document_builder, fit_bound, fit_document, fit_summary, prompt_builder
    from situate.contextual.prompts import PROMPTS
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.llm import BlurbLLM

    base = resources_from_env(plain=True)["llm"]
    L = base.load()
    docs = docs or pick_documents(quick)
    calls: list = []  # (mode label, Generation, reads the document)
    rows = []
    for label, mode, prompt in MODES:
        llm = BlurbLLM(**{**base.model_dump(), "context": mode, "prompt": prompt or base.prompt})
        for corpus, d in docs:
            text, spans = d["content"], corpus_spans(d)
            chunks = [c["content"] for c in d["chunks"]]
            gens = []

            # the two closures run within this iteration (contextualize calls them before the next)
            def generate(tokens, reasoning=False):
                g = llm.generate(tokens, stop=stops(reasoning), max_tokens=llm.max_tokens)  # noqa: B023
                gens.append(g)  # noqa: B023
                return g

            def generate_window(tokens, starts, max_tokens):
                g = llm.generate_lines(tokens, starts, stop=stops(False), max_tokens=max_tokens)  # noqa: B023
                gens.append(g)  # noqa: B023
                return g

            L.reset()
            if mode == "document":
                builder = document_builder(llm)
                plan = fit_summary(text, builder, llm)
                recs = document_records(text, len(chunks), plan, builder, generate, [None] * len(chunks))
            else:
                builder = prompt_builder(llm, PROMPTS[prompt], source=is_source({"format": "corpus", "text": text}))
                plan = fit_document(text, spans, builder, llm.n_ctx, fit_bound(llm, builder))
                recs = contextualize(
                    text,
                    chunks,
                    plan,
                    builder,
                    generate,
                    spans=spans,
                    generate_window=generate_window if builder.template.one_generation else None,
                )
            doc_tokens = len(builder.tokenizer.encode(text))
            calls += [(label, g, n == 0) for n, g in enumerate(gens)]
            rows.append(
                {
                    "mode": label,
                    "corpus": corpus,
                    "doc_id": d["doc_id"],
                    "chunks": len(chunks),
                    "document_tokens": doc_tokens,
                    "calls": len(gens),
                    "llm_seconds": round(sum(g.seconds for g in gens), 3),
                    "evaluated": sum(g.evaluated for g in gens),
                    "generated": sum(g.generated for g in gens),
                    "usable": sum(r.status == "model" for r in recs),
                    "one_generation_fallbacks": sum(
                        any(x.startswith("one-generation-fallback") for x in r.problems) for r in recs
                    ),
                    "blurbs": [r.blurb for r in recs][:3],
                }
            )
            log(
                f"cost {label} {d['doc_id']}: {len(chunks)} chunks, {rows[-1]['llm_seconds']:.1f} s, "
                f"{rows[-1]['evaluated']} evaluated, {rows[-1]['generated']} generated"
            )
    reads = [g for _, g, first in calls if first and g.prefill_seconds > 0]
    prefill_rate = sum(g.evaluated for g in reads) / sum(g.prefill_seconds for g in reads)
    gen_rate = sum(g.generated for _, g, _ in calls) / sum(g.generate_seconds for _, g, _ in calls)
    out: dict = {
        "llm_model": base.resolved_model_id(),
        "documents": [f"{c}/{d['doc_id']}" for c, d in docs],
        "rows": rows,
        "prefill_tokens_per_s": round(prefill_rate, 1),
        "generated_tokens_per_s": round(gen_rate, 2),
        "n_threads": L.context_params.n_threads,
        "load_average": round(os.getloadavg()[0], 2),
        "modes": {},
    }
    for label, _, _ in MODES:
        mine = [r for r in rows if r["mode"] == label]
        n = sum(r["chunks"] for r in mine)
        secs = sum(r["llm_seconds"] for r in mine)
        floor = sum(r["document_tokens"] for r in mine) / prefill_rate + sum(r["generated"] for r in mine) / gen_rate
        out["modes"][label] = {
            "chunks": n,
            "llm_seconds": round(secs, 2),
            "s_per_chunk": round(secs / n, 3),
            "evaluated_per_chunk": round(sum(r["evaluated"] for r in mine) / n, 1),
            "generated_per_chunk": round(sum(r["generated"] for r in mine) / n, 1),
            "usable": round(sum(r["usable"] for r in mine) / n, 3),
            "one_generation_fallbacks": sum(r["one_generation_fallbacks"] for r in mine),
            "floor_s": round(floor, 2),
            "over_floor": round(secs / floor, 3),
        }
    today = out["modes"][MODES[0][0]]["s_per_chunk"]
    for m in out["modes"].values():
        m["over_today"] = round(m["s_per_chunk"] / today, 3)
    # the configured default (SITUATE_CONTEXT / SITUATE_PROMPT as set, else situate's defaults)
    default = next(
        (
            label
            for label, mode, prompt in MODES
            if mode == base.context and (mode == "document" or prompt == base.prompt)
        ),
        None,
    )
    out["default_mode"] = default
    if default:
        out["cost_default_over_today"] = out["modes"][default]["over_today"]
        out["cost_default_over_floor"] = out["modes"][default]["over_floor"]
    out["modes"]["structure"] = {
        "chunks": out["modes"][MODES[0][0]]["chunks"],
        "llm_seconds": 0.0,
        "s_per_chunk": 0.0,
        "evaluated_per_chunk": 0.0,
        "generated_per_chunk": 0.0,
        "usable": 0.0,
        "floor_s": 0.0,
        "over_floor": None,
        "over_today": 0.0,
    }
    return out


def markdown(c: dict) -> list[str]:
    lines = [
        "",
        "## Cost of a chunk's context, by mode (same documents, one run)",
        "",
        f"The default ({c.get('default_mode')}): {c.get('cost_default_over_today')} × today's LLM seconds "
        f"a chunk, {c.get('cost_default_over_floor')} × the floor.",
        "",
        f"Model: {c.get('llm_model', 'not recorded')} (`SITUATE_LLM_MODEL`); documents: "
        f"{', '.join(c['documents'])}; {c['n_threads']} threads; rates in this run: prefill "
        f"{c['prefill_tokens_per_s']} tokens/s, generation {c['generated_tokens_per_s']} tokens/s; "
        f"load average at the end {c['load_average']}.",
        "",
        "| mode | chunks | LLM s a chunk | × today's | prompt tokens evaluated a chunk | tokens generated a chunk "
        "| floor s | × floor | usable | one-generation fallbacks |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in c["modes"].items():
        lines.append(
            f"| {name} | {m['chunks']} | {m['s_per_chunk']} | {m['over_today']} | {m['evaluated_per_chunk']} | "
            f"{m['generated_per_chunk']} | {m['floor_s']} | {m['over_floor'] if m['over_floor'] is not None else '—'} | "  # noqa: E501
            f"{m['usable']} | {m.get('one_generation_fallbacks', '—')} |"
        )
    return lines
