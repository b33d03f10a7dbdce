"""Asset ``raw_documents``: one source document → its text and metadata (stage ``document``)."""

import dagster as dg

from situate.assets.partitions import BACKFILL, documents
from situate.assets.per_document import for_each_document
from situate.resources.documents.docs import DocsFolder
from situate.resources.documents.reading import DocumentError, load
from situate.resources.store.store import Store


@dg.asset(
    partitions_def=documents,
    backfill_policy=BACKFILL,
    kinds={"python", "file"},
    group_name="ingest",
    check_specs=[
        dg.AssetCheckSpec(
            "documents_readable", asset="raw_documents", description="Every document of the run could be read."
        )
    ],
    description="A source document's text and metadata: path relative to the docs folder, title, "
    "sha256 of the bytes, size, format. Written to $SITUATE_HOME/stages/<key>/document.json.",
)
def raw_documents(context: dg.AssetExecutionContext, docs: DocsFolder, store: Store) -> dg.MaterializeResult:
    def work(key: str) -> dict:
        ref = docs.resolve(key)
        try:
            doc = load(ref)
        except DocumentError as e:
            e.sha256 = ref.sha256  # not retried until the file changes
            store.delete_rows(key)  # its old text is gone: no stale rows in search
            raise
        store.write_stage(key, "document", doc.to_json())
        context.log.info(f"raw_documents {key}: {doc.format}, {doc.size_bytes:,} bytes, {len(doc.text):,} chars")
        for note in doc.notes:
            context.log.warning(f"raw_documents {key}: {note}")
        return {
            "source": doc.source,
            "title": doc.title,
            "format": doc.format,
            "size_bytes": doc.size_bytes,
            "characters": len(doc.text),
            "sha256": doc.sha256,
            "notes": "; ".join(doc.notes) or "none",
        }

    report = for_each_document(context, store, "document", work)
    return dg.MaterializeResult(metadata=report.metadata(), check_results=[report.check_result("documents_readable")])
