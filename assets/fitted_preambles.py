"""Asset ``fitted_preambles``: the document text each blurb prompt carries, fitted to ``n_ctx``.

Counts are exact, in the loaded LLM's own tokens (its vocabulary is loaded in process).
"""

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import for_each_document
from situate.contextual.fitting import builders_by_kind, document_builder, document_plan, plan_summary
from situate.contextual.lead import summary_source
from situate.contextual.policy import NO_LLM_MODES, for_document
from situate.resources.models.llm import BlurbLLM
from situate.resources.store.store import Store, read_ok


def build_fitted_preambles(c: Collection) -> dg.AssetsDefinition:
    """Collection ``c``'s ``fitted_preambles`` asset (after its ``chunks``)."""

    @dg.asset(
        **c.per_document("fitted_preambles"),
        deps=[c.key("chunks")],
        required_resource_keys=c.resource_keys("store", "llm"),
        kinds={"python", "llama.cpp", "file"},
        description="Document windows held to n_ctx − blurb max_tokens − chunk allowance − chat "
        "template, counted exactly with the LLM's tokenizer; a long document gets "
        "consecutive windows, each shared by the chunks inside it.",
    )
    def fitted_preambles(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        r = c.resources(context)
        return materialize_preambles(context, r.store, r.llm)

    return fitted_preambles


def materialize_preambles(context: dg.AssetExecutionContext, store: Store, llm: BlurbLLM) -> dg.MaterializeResult:
    """Fit each document's windows to the LLM's context (stage ``preambles``)."""
    builder_for = builders_by_kind(llm)

    def work(key: str) -> dict:
        doc = read_ok(store, key, "document")
        spans = [(c["start"], c["end"]) for c in read_ok(store, key, "chunks")["chunks"]]
        view = for_document(llm, doc)  # its kind's mode (situate.contextual.policy)
        mode = view.context
        builder = None if mode in NO_LLM_MODES else document_builder(view) if mode == "document" else builder_for(doc)
        text = summary_source(doc, view.summary_reading) if mode == "document" else doc["text"]
        plan = document_plan(text, spans, view, builder)
        store.write_stage(key, "preambles", plan.to_json())
        if plan.reason and mode == "chunk":
            context.log.warning(f"fitted_preambles {doc['source']}: {plan.reason}")
        return plan_summary(plan, len(doc["text"]))

    report = for_each_document(context, store, "preambles", work)
    return dg.MaterializeResult(
        metadata=report.metadata(lambda ok: {"windows_total": sum(v["windows"] for v in ok.values())})
    )


fitted_preambles = build_fitted_preambles(DEFAULT)
