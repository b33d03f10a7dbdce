"""Jobs: ``ingest`` (the per-document chain over a partition or a range of them) and ``bm25``."""

from __future__ import annotations

import dagster as dg

PER_DOCUMENT = ["raw_documents", "chunks", "fitted_preambles", "blurbs", "embeddings"]

#: In-process executor: one process per run, so each model is loaded once for every step and
#: every document of the run.
ingest_job = dg.define_asset_job(
    "ingest",
    selection=dg.AssetSelection.assets(*PER_DOCUMENT),
    executor_def=dg.in_process_executor,
    description="raw_documents → chunks → fitted_preambles → blurbs → embeddings for the run's documents.",
)

index_job = dg.define_asset_job(
    "bm25",
    selection=dg.AssetSelection.assets("bm25_index"),
    executor_def=dg.in_process_executor,
    description="Rebuild the BM25 index from the table.",
)
