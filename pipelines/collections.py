"""A collection's definitions (:class:`situate.assets.collection.Collection`): its assets and
checks, jobs, sensor, automation sensor, schedule and resources, built from a
:class:`~situate.resources.settings.Settings`.  situate's own code location is the default
collection, built as an instance of the Dagster component (:mod:`situate.pipelines.component`),
which builds one collection per ``defs.yaml``.  Importing this module builds
nothing and reads no setting."""

from __future__ import annotations

import dataclasses

import dagster as dg

from situate.assets.blurbs import build_blurbs
from situate.assets.bm25_index import build_bm25_index
from situate.assets.chunks import build_chunks
from situate.assets.collection import Collection
from situate.assets.embeddings import build_embeddings
from situate.assets.fitted_preambles import build_fitted_preambles
from situate.assets.partitions import backfill_policy
from situate.assets.raw_documents import build_raw_documents
from situate.contextual.indexing import code_versions
from situate.pipelines.automation import NIGHTLY, documents_sensor_for, reingest_schedule_for
from situate.pipelines.jobs import jobs_for
from situate.pipelines.settings import resources_from_env
from situate.resources.settings import Settings

#: A collection's assets, in the order they are materialised.
BUILDERS = (
    build_raw_documents,
    build_chunks,
    build_fitted_preambles,
    build_blurbs,
    build_embeddings,
    build_bm25_index,
)


def bm25_automation_for(c: Collection) -> dg.AutomationConditionSensorDefinition:
    """Declarative automation is evaluated by a sensor that Dagster leaves stopped by default; this
    one runs by default, so collection ``c``'s ``bm25_index`` (``AutomationCondition.eager``) is
    rebuilt after new embeddings."""
    return dg.AutomationConditionSensorDefinition(
        c.job_name("bm25_automation"),
        target=dg.AssetSelection.assets(c.key("bm25_index")),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=30,
    )


def collection_definitions(
    c: Collection,
    settings: Settings,
    docs_path: str | None = None,
    home: str | None = None,
    plain: bool = False,
    cron: str | None = NIGHTLY,
) -> dg.Definitions:
    """Collection ``c``'s definitions: its six assets and their checks (code versions from
    ``settings``, backfills of ``settings.docs_per_run`` documents a run), its ``ingest`` and
    ``bm25`` jobs, its sensor, its automation sensor, its re-ingest schedule (``cron``; None for
    none), and its resources under its own keys (:meth:`Collection.resource_key`).

    Parameters
    ----------
    c : Collection
        Its names (key prefix, partitions, resource keys, jobs) and labels (group, owners, tags).
    settings : Settings
        Models, context mode, chunking and the rest (:func:`situate.resources.settings.read_settings`).
    docs_path, home : str, optional
        Its docs folder and data folder (default: ``settings.docs``, ``settings.home``).
    plain : bool
        Resources hold values, not the ``dg.EnvVar`` of each variable set (the command line).
    """
    res = resources_from_env(docs_path, home, plain, settings)
    known = res if plain else resources_from_env(docs_path, home, True, settings)
    versions = code_versions(known["llm"], known["embedder"], known["chunking"])
    c = dataclasses.replace(c, code_versions=tuple(sorted(versions.items())))
    policy = backfill_policy(settings.docs_per_run)
    assets = [build(c) for build in BUILDERS]
    assets = [a.with_attributes(backfill_policy=policy) if a.partitions_def else a for a in assets]
    ingest, index = jobs_for(c)
    return dg.Definitions(
        assets=assets,
        jobs=[ingest, index],
        sensors=[documents_sensor_for(c, ingest, index, settings.sync_interval_s), bm25_automation_for(c)],
        schedules=[reingest_schedule_for(c, ingest, cron)] if cron else [],
        resources={c.resource_key(role): r for role, r in res.items()},
    )
