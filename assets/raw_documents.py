"""Asset ``raw_documents``: one source document → its text and metadata (stage ``document``)."""

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import for_each_document, per_document_lines
from situate.resources.documents.docs import DocsFolder
from situate.resources.documents.reading import DocumentError, load
from situate.resources.store.store import Store


def build_raw_documents(c: Collection) -> dg.AssetsDefinition:
    """Collection ``c``'s ``raw_documents`` asset, with its ``documents_readable`` check."""

    @dg.asset(
        **c.per_document("raw_documents"),
        required_resource_keys=c.resource_keys("docs", "store"),
        kinds={"python", "file"},
        check_specs=[
            dg.AssetCheckSpec(
                "documents_readable",
                asset=c.key("raw_documents"),
                description="Every document of the run could be read.",
            )
        ],
        description="A source document's text and metadata: path relative to the docs folder, title, "
        "sha256 of the bytes, size, format. Written to <data folder>/stages/<key>/document.json.",
    )
    def raw_documents(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        r = c.resources(context)
        return materialize_raw_documents(context, r.docs, r.store)

    return raw_documents


def materialize_raw_documents(
    context: dg.AssetExecutionContext, docs: DocsFolder, store: Store
) -> dg.MaterializeResult:
    """Read each document of the run (stage ``document``); a bad one fails alone, named."""

    chatty = per_document_lines(context)

    def work(key: str) -> dict:
        ref = docs.resolve(key)
        try:
            doc = load(ref)
        except DocumentError as e:
            e.sha256 = ref.sha256  # not retried until the file changes
            store.delete_rows(key)  # its old text is gone: no stale rows in search
            raise
        store.write_stage(key, "document", doc.to_json())
        if chatty:
            size = f"{doc.size_bytes:,} bytes, {len(doc.text):,} chars"
            context.log.info(f"raw_documents {doc.source}: {doc.format}, {size}")
        for note in doc.notes:
            context.log.warning(f"raw_documents {doc.source}: {note}")
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


raw_documents = build_raw_documents(DEFAULT)
