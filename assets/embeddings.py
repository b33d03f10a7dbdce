"""Asset ``embeddings``: contextualised text → vectors, written as the document's rows of the
LanceDB table ``chunks`` (the pipeline's output)."""

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import for_each_group
from situate.contextual.indexing import (
    build_rows,
    check_one_version,
    embedding_entry,
    embedding_totals,
    fingerprint,
    indexed_texts,
    migration_message,
)
from situate.resources.documents.docs import Chunking
from situate.resources.models.llm import BlurbLLM, Embedder
from situate.resources.store.cache import embed_group, embedding_cache_for
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

    def chunks_of(key: str) -> int:
        """The document's chunk count, for the groups' sizes (read again, under its lock, by prepare)."""
        data = store.read_stage_if_any(key, "chunks")
        return len(data["chunks"]) if isinstance(data, dict) and isinstance(data.get("chunks"), list) else 1

    def prepare(key: str) -> dict:
        doc = read_ok(store, key, "document")
        chunk_data = read_ok(store, key, "chunks")
        blurb_data = read_ok(store, key, "blurbs")
        check_one_version(key, doc, chunk_data, blurb_data)
        chunk_list = chunk_data["chunks"]
        return {
            "doc": doc,
            "chunks": chunk_list,
            "blurbs": blurb_data,
            "texts": indexed_texts(chunk_list, blurb_data["blurbs"]),
        }

    def commit(group: dict[str, dict]) -> dict[str, dict]:
        embedded = embed_group(embedder, {k: p["texts"] for k, p in group.items()}, cache)
        rows = {}
        for key, p in group.items():
            b = p["blurbs"]
            vectors = embedded[key][0]
            rows[key] = build_rows(
                key, p["doc"], p["chunks"], b["blurbs"], vectors, b["model_id"], embed_model, fp, b.get("backend", "")
            )
        written = store.replace_documents(rows)
        entries = {key: embedding_entry(written[key], *embedded[key]) for key in group}
        for key, entry in entries.items():  # replaces the error an earlier run may have left
            store.write_stage(key, "embeddings", entry)
        return entries

    report = for_each_group(context, store, "embeddings", prepare, commit, chunks_of=chunks_of)
    totals = embedding_totals(report.ok)
    if totals["inputs_cut"]:  # once a run, not once a group of documents
        context.log.warning(
            f"embeddings: {totals['inputs_cut']} of {totals['rows_written']} chunks' indexed text cut to the "
            f"embedder's {embedder.n_ctx} tokens (BM25 indexes all of each)"
        )
    migration = store.migration()
    if migration:
        context.log.warning(migration_message(migration))
    return dg.MaterializeResult(
        metadata={
            **({"embedding_width_change": migration} if migration else {}),
            "table": f"{store.lancedb_uri}/chunks",
            "embed_model": embed_model,
            # the query map search applies to code chunks (no row depends on it: switching it re-embeds nothing)
            "code_query_map": embedder.code_adapter_id(),
            "fingerprint": fp,
            "table_rows": store.count_rows(),
            **report.metadata(embedding_totals),
        }
    )


embeddings = build_embeddings(DEFAULT)
