"""Asset ``bm25_index``: bm25s indexes over the contextualised text of every row of the table and over
the same without the blurb (the third ranking of :func:`situate.resources.store.retrieval.hybrid_search`)."""

import dagster as dg

from situate.assets.collection import DEFAULT, Collection
from situate.assets.per_document import log_progress, tag_worker
from situate.contextual import table_checks
from situate.contextual.table_checks import CHECKS, ids_match, max_fallback_share
from situate.resources.store.retrieval import rebuild_bm25_from_table
from situate.resources.store.store import Store


class TableCheckConfig(dg.Config):
    """Thresholds of the table checks.

    Attributes
    ----------
    max_fallback_share : float or None
        The ``fallback_share`` check's threshold (a share of a document's chunks); None for
        :func:`max_fallback_share`, read when the run starts.
    """

    max_fallback_share: float | None = None


def build_bm25_index(c: Collection) -> dg.AssetsDefinition:
    """Collection ``c``'s ``bm25_index`` asset (after its ``embeddings``), with the table checks."""

    @dg.asset(
        **c.asset_attributes("bm25_index"),
        deps=[c.key("embeddings")],
        required_resource_keys=c.resource_keys("store"),
        kinds={"python", "bm25", "lancedb"},
        automation_condition=dg.AutomationCondition.eager(),
        check_specs=[dg.AssetCheckSpec(name, asset=c.key("bm25_index"), description=d) for name, d in CHECKS.items()],
        description="bm25s indexes (English stopwords, Snowball stemmer) over structural context + blurb + chunk "
        "of every row, and over structural context + chunk without the blurb (the third ranking of "
        "search), of the LanceDB table, saved under <data folder>/bm25 with the row ids. Corpus-wide: "
        "rebuilt whenever documents change. From 10,000 rows the table's vectors also get an "
        "IVF_FLAT index (updated on later runs).",
    )
    def bm25_index(context: dg.AssetExecutionContext, config: TableCheckConfig) -> dg.MaterializeResult:
        return materialize_bm25_index(context, config, c.resources(context).store, c.partitions_name)

    return bm25_index


def materialize_bm25_index(
    context: dg.AssetExecutionContext, config: TableCheckConfig, store: Store, partitions: str
) -> dg.MaterializeResult:
    """Rebuild the BM25 indexes from the table and run the table checks over the documents of
    the dynamic partitions ``partitions``."""
    tag_worker(context)
    built = rebuild_bm25_from_table(store)
    ok, figures = ids_match(store)
    log_progress(context, f"bm25_index: {built['rows']} rows from table version {built['table_version']}")
    vindex = store.ensure_vector_index(store.vector_index_min_rows)
    context.log.info(f"bm25_index: vector index {vindex['vector_index']} ({vindex['seconds']} s)")
    return dg.MaterializeResult(
        metadata={
            "rows": built["rows"],
            "table_version": built["table_version"] or 0,
            "path": str(store.bm25_dir),
            "vector_index": vindex["vector_index"],
            "vector_index_seconds": vindex["seconds"],
        },
        check_results=[
            dg.AssetCheckResult(check_name="ids_match_table", passed=ok, metadata=figures),
            *table_check_results(
                store,
                context.instance.get_dynamic_partitions(partitions),
                config.max_fallback_share if config.max_fallback_share is not None else max_fallback_share(),
            ),
        ],
    )


bm25_index = build_bm25_index(DEFAULT)


def table_check_results(store: Store, keys: list[str], max_fallback_share: float) -> list[dg.AssetCheckResult]:
    """The table checks of :mod:`situate.contextual.table_checks` as Dagster check results (a failed check
    is an ERROR: the table is not what the documents say)."""
    runs = {
        "rows_match_chunks": lambda: table_checks.rows_match_chunks(store, keys),
        "unique_chunk_ids": lambda: table_checks.unique_chunk_ids(store),
        "vectors_sound": lambda: table_checks.vectors_sound(store),
        "fallback_share": lambda: table_checks.fallback_share(store, max_fallback_share),
        "no_removal_held": lambda: table_checks.no_removal_held(store),
        "documents_not_stuck": lambda: table_checks.documents_not_stuck(store),
    }
    out = []
    for name, fn in runs.items():
        passed, md = fn()
        out.append(
            dg.AssetCheckResult(check_name=name, passed=passed, metadata=md, severity=dg.AssetCheckSeverity.ERROR)
        )
    return out
