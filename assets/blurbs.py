"""Asset ``blurbs``: a situating context for every chunk, written by the in-process LLM
(:class:`situate.contextual.document_blurbs.DocumentBlurber`, one document at a time).

One ``Llama`` object works through a document's chunks back to back; the document window is a
token-identical prefix, so llama.cpp evaluates it once and reuses its KV cache for the next chunk.
"""

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import for_each_document, log_progress
from situate.contextual.document_blurbs import DocumentBlurber, blurb_totals
from situate.contextual.policy import describe, uses_llm
from situate.contextual.prompts import PROMPT_VERSION
from situate.resources.models.llm import API_USAGE, BlurbLLM, api_usage_since
from situate.resources.models.message_batches import BatchLedger
from situate.resources.store.store import Store


def build_blurbs(c: Collection) -> dg.AssetsDefinition:
    """Collection ``c``'s ``blurbs`` asset (after its ``fitted_preambles``), in its LLM pool."""

    @dg.asset(
        **c.per_document("blurbs"),
        pool=c.pool,
        deps=[c.key("fitted_preambles")],
        required_resource_keys=c.resource_keys("store", "llm"),
        kinds={"python", "llama.cpp", "file"},
        description="A situating context for each chunk, as SITUATE_CONTEXT says for prose and "
        "SITUATE_CODE_CONTEXT for source code (default: a summary per prose document, structure for code): "
        "chunk (a blurb per chunk: "
        "Anthropic's published prompt, or chunks by reference in the cached document, through the "
        "in-process llama-cpp-python model), document (one summary per document) or structure (no "
        "LLM). Blurbs are cleaned and grounded; an unusable one falls back to the chunk alone; lock "
        "files, minified, encoded, numeric and degenerate chunks get no LLM call; an edited "
        "document keeps the blurbs of its unchanged chunks.",
    )
    def blurbs(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        r = c.resources(context)
        return materialize_blurbs(context, r.store, r.llm)

    return blurbs


def materialize_blurbs(context: dg.AssetExecutionContext, store: Store, llm: BlurbLLM) -> dg.MaterializeResult:
    """Write each chunk's context for the run's documents (stage ``blurbs``)."""
    usage0 = dict(API_USAGE)  # what a paid API bills this step: every answer, failed documents' too
    # Anthropic's Message Batches: a first pass gathers the run's requests, then they are answered
    # from the batches (situate.resources.models.message_batches)
    batches = llm.batch_round() if uses_llm(llm) else None
    blurber = DocumentBlurber(store, llm, context.log, batches)
    batch_summary = {}
    if batches is not None:
        batch_summary = _answer_batches(context, store, blurber, batches)
    # documents in flight: through a server or an API (the in-process model takes one call at a
    # time), and not while a Message Batch round answers (its bookkeeping is per document)
    report = for_each_document(
        context, store, "blurbs", blurber.work, in_flight=llm.in_flight if llm.remote and batches is None else 1
    )
    return dg.MaterializeResult(
        metadata={
            "model": blurber.model_id,
            "prompt_version": PROMPT_VERSION,
            "prompt": llm.prompt,
            "context_mode": describe(llm),
            "backend": llm.backend() if uses_llm(llm) else "none",
            **report.metadata(blurb_totals),
            **blurber.file_summary(),
            **({"message_batches": batch_summary} if batch_summary else {}),
            **({"api_usage": api_usage_since(usage0)} if llm.api == "anthropic" else {}),
        }
    )


blurbs = build_blurbs(DEFAULT)


def _answer_batches(context: dg.AssetExecutionContext, store: Store, blurber: DocumentBlurber, batches) -> dict:
    """Gather the run's requests (a first pass over its documents), submit them to the Message
    Batches API and wait for the answers; returns the round's summary."""
    for key in context.partition_keys if context.has_partition_key_range or context.has_partition_key else []:
        try:
            blurber.work(key)
        except Exception as e:  # noqa: BLE001 - the answering pass below reports each document's error
            context.log.debug(f"blurbs {key}: not gathered for the Message Batch: {e}")
    log_progress(context, f"blurbs: {len(batches.requests)} request(s) gathered for the Message Batches API")
    summary = batches.submit_and_wait(log=lambda line: log_progress(context, line), ledger=BatchLedger(store))
    log_progress(context, f"blurbs: Message Batches {summary}")
    return summary
