"""Asset ``chunks``: token-sized chunks with stable ids and heading paths (stage ``chunks``)."""

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import for_each_document
from situate.contextual.chunking import document_chunks
from situate.contextual.code_context import document_contexts
from situate.contextual.tokens import count_cl100k
from situate.resources.documents.docs import Chunking
from situate.resources.store.store import Store, read_ok


def build_chunks(c: Collection) -> dg.AssetsDefinition:
    """Collection ``c``'s ``chunks`` asset (after its ``raw_documents``)."""

    @dg.asset(
        **c.per_document("chunks"),
        deps=[c.key("raw_documents")],
        required_resource_keys=c.resource_keys("store", "chunking"),
        kinds={"python", "file"},
        description=(
            "Chunks of at most chunk_tokens cl100k_base tokens, cut at paragraph or line "
            "boundaries, each with a stable id, its index, heading path and structural context "
            "(code: leading comment, enclosing definitions, names defined, by tree-sitter; "
            "prose: title > headings). A corpus file's documents keep their given chunks."
        ),
    )
    def chunks(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        r = c.resources(context)
        return materialize_chunks(context, r.store, r.chunking)

    return chunks


def materialize_chunks(context: dg.AssetExecutionContext, store: Store, chunking: Chunking) -> dg.MaterializeResult:
    """Chunk each document of the run (stage ``chunks``); metadata per document and in all."""

    def work(key: str) -> dict:
        doc = read_ok(store, key, "document")
        out = document_chunks(key, doc, chunking, count_cl100k)
        contexts = document_contexts(doc, [(c.start, c.end) for c in out], [c.heading_path for c in out])
        for c, ctx in zip(out, contexts):
            c.context = ctx
        store.write_stage(key, "chunks", {"doc_sha256": doc["sha256"], "chunks": [c.to_json() for c in out]})
        sizes = [c.n_tokens for c in out]
        return {
            "chunks": len(out),
            "tokens_max": max(sizes),
            "tokens_mean": round(sum(sizes) / len(sizes), 1),
            "given": doc.get("given_chunks") is not None,
        }

    report = for_each_document(context, store, "chunks", work)
    return dg.MaterializeResult(
        metadata=report.metadata(lambda ok: {"chunks_total": sum(v["chunks"] for v in ok.values())})
    )


chunks = build_chunks(DEFAULT)
