"""Asset ``embeddings``: contextualised text → vectors, written as the document's rows of the
LanceDB table ``chunks`` (the pipeline's output)."""

import time

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import for_each_document
from situate.contextual.indexing import (
    build_rows,
    check_one_version,
    embedding_totals,
    fingerprint,
    indexed_texts,
    migration_message,
)
from situate.resources.documents.docs import Chunking
from situate.resources.models.llm import BlurbLLM, Embedder
from situate.resources.store.cache import embed_with_cache, embedding_cache_for
from situate.resources.store.store import Store, read_ok


def build_embeddings(c: Collection) -> dg.AssetsDefinition:
    """Collection ``c``'s ``embeddings`` asset (after its ``blurbs``): its rows of the table."""

    @dg.asset(
        **c.per_document("embeddings"),
        deps=[c.key("blurbs")],
        required_resource_keys=c.resource_keys("store", "embedder", "llm", "chunking"),
        kinds={"python", "llama.cpp", "lancedb"},
        description="Structural context + blurb + blank line + chunk, embedded with the local embedding model "
        "(document prefix, L2-normalised float32) and written as the document's rows of the LanceDB "
        "table `chunks`, replacing its previous rows in one merge_insert.",
    )
    def embeddings(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        r = c.resources(context)
        return materialize_embeddings(context, r.store, r.embedder, r.llm, r.chunking)

    return embeddings


def materialize_embeddings(
    context: dg.AssetExecutionContext, store: Store, embedder: Embedder, llm: BlurbLLM, chunking: Chunking
) -> dg.MaterializeResult:
    """Embed each document's contextualised text and replace its rows of the table."""
    fp = fingerprint(llm, embedder, chunking)
    embed_model = embedder.resolved_model_id()
    cache = embedding_cache_for(store, embedder)

    def work(key: str) -> dict:
        doc = read_ok(store, key, "document")
        chunk_data = read_ok(store, key, "chunks")
        chunk_list = chunk_data["chunks"]
        blurb_data = read_ok(store, key, "blurbs")
        check_one_version(key, doc, chunk_data, blurb_data)
        texts = indexed_texts(chunk_list, blurb_data["blurbs"])
        t0 = time.perf_counter()
        vectors, n_computed, n_cut = embed_with_cache(embedder, texts, cache)
        seconds = time.perf_counter() - t0
        if n_cut:
            context.log.warning(f"embeddings {key}: {n_cut} inputs cut to {embedder.n_ctx} tokens")
        rows = build_rows(
            key,
            doc,
            chunk_list,
            blurb_data["blurbs"],
            vectors,
            blurb_data["model_id"],
            embed_model,
            fp,
            blurb_data.get("backend", ""),
        )
        n = store.replace_document(key, rows)
        context.log.info(
            f"embeddings {key}: {n} rows, dim {vectors.shape[1]}, {n_computed} embedded, "
            f"{len(texts) - n_computed} from the cache, {seconds:.1f} s"
        )
        return {
            "rows": n,
            "dim": int(vectors.shape[1]),
            "inputs_cut": n_cut,
            "embedded": n_computed,
            "from_cache": len(texts) - n_computed,
            "embed_seconds": round(seconds, 2),
        }

    report = for_each_document(context, store, "embeddings", work)
    migration = store.migration()
    if migration:
        context.log.warning(migration_message(migration))
    return dg.MaterializeResult(
        metadata={
            **({"embedding_width_change": migration} if migration else {}),
            "table": f"{store.lancedb_uri}/chunks",
            "embed_model": embed_model,
            "fingerprint": fp,
            "table_rows": store.count_rows(),
            **report.metadata(embedding_totals),
        }
    )


embeddings = build_embeddings(DEFAULT)
