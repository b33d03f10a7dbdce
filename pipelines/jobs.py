"""Jobs: ``ingest`` (the per-document chain over a partition or a range of them) and ``bm25``, per
collection (:class:`situate.assets.collection.Collection`: ``ingest`` and ``bm25`` for the default
one, ``<name>_ingest`` and ``<name>_bm25`` for a named one)."""

from __future__ import annotations

import dagster as dg

from situate.assets.collection import DEFAULT, Collection

PER_DOCUMENT = ["raw_documents", "chunks", "fitted_preambles", "blurbs", "embeddings"]


def jobs_for(c: Collection) -> tuple:
    """Collection ``c``'s ``ingest`` and ``bm25`` jobs.  In-process executor: one process per run,
    so each model is loaded once for every step and every document of the run.  Returns the two
    unresolved asset jobs of ``dg.define_asset_job``."""
    ingest = dg.define_asset_job(
        c.job_name("ingest"),
        selection=dg.AssetSelection.assets(*(c.key(a) for a in PER_DOCUMENT)),
        executor_def=dg.in_process_executor,
        description="raw_documents → chunks → fitted_preambles → blurbs → embeddings for the run's documents.",
    )
    index = dg.define_asset_job(
        c.job_name("bm25"),
        selection=dg.AssetSelection.assets(c.key("bm25_index")),
        executor_def=dg.in_process_executor,
        description="Rebuild the BM25 index from the table.",
    )
    return ingest, index


ingest_job, index_job = jobs_for(DEFAULT)
