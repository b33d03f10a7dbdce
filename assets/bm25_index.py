"""Asset ``bm25_index``: bm25s indexes over the contextualised text of every row of the table and over
the same without the blurb (the third ranking of :func:`situate.resources.store.retrieval.hybrid_search`)."""

import dagster as dg

from situate.assets.partitions import PARTITIONS
from situate.assets.per_document import tag_worker
from situate.contextual import table_checks
from situate.resources.models.llm import parse_setting
from situate.resources.settings import env
from situate.resources.store.retrieval import bm25_ids, rebuild_bm25_from_table
from situate.resources.store.store import Store

CHECKS = {
    "ids_match_table": "The BM25 index's row ids equal the table's chunk ids.",
    "rows_match_chunks": "Per document, rows in the table equal chunks in its chunks stage file; "
    "no rows of unregistered documents.",
    "unique_chunk_ids": "No chunk_id appears twice in the table.",
    "vectors_sound": "Every vector has the embedder's dimension, finite values and unit L2 norm.",
    "fallback_share": "The share of blurbs that fell back to the chunk alone is under the threshold "
    "(SITUATE_MAX_FALLBACK_SHARE, default 0.9).",
    "documents_not_stuck": "No document has used its run attempts (MAX_RUN_ATTEMPTS failed runs of the "
    "same version): the sensor stopped asking for it; fails naming it and its last error.",
    "no_removal_held": "No sync is holding back the removal of most (or all) documents: an unmounted or "
    "emptied docs folder removes nothing until SITUATE_ALLOW_MASS_REMOVAL=1 or "
    "`situate ingest --allow-removal`.",
}


class TableCheckConfig(dg.Config):
    """Thresholds of the table checks.

    Attributes
    ----------
    max_fallback_share : float or None
        The ``fallback_share`` check's threshold (a share of a document's chunks); None for
        :func:`max_fallback_share`, read when the run starts.
    """

    max_fallback_share: float | None = None


def max_fallback_share() -> float:
    """``$SITUATE_MAX_FALLBACK_SHARE`` within its bound, else
    :data:`situate.contextual.table_checks.MAX_FALLBACK_SHARE`.

    Raises
    ------
    situate.resources.errors.SettingError
        The value is not a number or is outside 0 to 1.
    """
    raw = env("SITUATE_MAX_FALLBACK_SHARE")
    return parse_setting("SITUATE_MAX_FALLBACK_SHARE", raw) if raw else table_checks.MAX_FALLBACK_SHARE


def ids_match(store: Store) -> tuple[bool, dict]:
    """Whether the saved BM25 index's ids equal the table's chunk ids, with the counts."""
    index_ids = bm25_ids(store.bm25_dir) or []
    table_ids = store.columns(["chunk_id"]).column("chunk_id").to_pylist()
    missing = sorted(set(table_ids) - set(index_ids))
    extra = sorted(set(index_ids) - set(table_ids))
    ok = not missing and not extra and len(index_ids) == len(table_ids)
    return ok, {
        "index_rows": len(index_ids),
        "table_rows": len(table_ids),
        "missing_from_index": len(missing),
        "stale_in_index": len(extra),
    }


@dg.asset(
    deps=["embeddings"],
    kinds={"python", "bm25s"},
    group_name="ingest",
    automation_condition=dg.AutomationCondition.eager(),
    check_specs=[dg.AssetCheckSpec(name, asset="bm25_index", description=d) for name, d in CHECKS.items()],
    description="bm25s indexes (English stopwords, Snowball stemmer) over structural context + blurb + chunk "
    "of every row, and over structural context + chunk without the blurb (the third ranking of "
    "search), of the LanceDB table, saved under $SITUATE_HOME/bm25 with the row ids. Corpus-wide: "
    "rebuilt whenever documents change. From 10,000 rows the table's vectors also get an "
    "IVF_FLAT index (updated on later runs).",
)
def bm25_index(context: dg.AssetExecutionContext, config: TableCheckConfig, store: Store) -> dg.MaterializeResult:
    tag_worker(context)
    built = rebuild_bm25_from_table(store)
    ok, figures = ids_match(store)
    context.log.info(f"bm25_index: {built['rows']} rows from table version {built['table_version']}")
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
                context.instance.get_dynamic_partitions(PARTITIONS),
                config.max_fallback_share if config.max_fallback_share is not None else max_fallback_share(),
            ),
        ],
    )


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
