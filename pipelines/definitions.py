"""The code location: ``dagster dev -w workspace.yaml`` or ``dagster ... -m situate.pipelines.definitions``."""

from __future__ import annotations

import dagster as dg

from situate.assets.blurbs import blurbs
from situate.assets.bm25_index import bm25_index
from situate.assets.chunks import chunks
from situate.assets.embeddings import embeddings
from situate.assets.fitted_preambles import fitted_preambles
from situate.assets.partitions import backfill_policy
from situate.assets.raw_documents import raw_documents
from situate.assets.retrieval_eval import retrieval_eval
from situate.pipelines.automation import documents_sensor, nightly_reingest
from situate.pipelines.jobs import index_job, ingest_job
from situate.pipelines.settings import check_environment, resources_from_env
from situate.resources.models import registry as models

models.use_offline_tiktoken()

ASSETS = [raw_documents, chunks, fitted_preambles, blurbs, embeddings, bm25_index, retrieval_eval]


#: Declarative automation is evaluated by a sensor that Dagster leaves stopped by default; this one
#: runs by default, so ``bm25_index`` (AutomationCondition.eager) is rebuilt after new embeddings.
bm25_automation = dg.AutomationConditionSensorDefinition(
    "bm25_automation",
    target=dg.AssetSelection.assets("bm25_index"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
)


def build_definitions(docs_path: str | None = None, home: str | None = None, plain: bool = False) -> dg.Definitions:
    """Definitions for a docs folder and data folder (defaults from the environment).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        A numeric setting outside its bound (:func:`situate.pipelines.settings.check_environment`): the
        code location refuses to load, so ``dagster … -m situate.pipelines.definitions`` and ``situate dev``
        start no run with it (a run's own resources check again at its start).
    """
    settings = check_environment()
    policy = backfill_policy(settings.docs_per_run)
    assets = [a.with_attributes(backfill_policy=policy) if a.partitions_def else a for a in ASSETS]
    return dg.Definitions(
        assets=assets,
        jobs=[ingest_job, index_job],
        sensors=[documents_sensor, bm25_automation],
        schedules=[nightly_reingest],
        resources=resources_from_env(docs_path, home, plain, settings),
        executor=dg.in_process_executor,
    )


defs = build_definitions()
