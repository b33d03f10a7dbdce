"""The sensor that follows the docs folder and the schedule that re-ingests periodically."""

import hashlib
import json
import socket

import dagster as dg

from situate.assets.collection import DEFAULT, ROLES, Collection
from situate.contextual.indexing import fingerprint
from situate.contextual.stage_runs import document_name
from situate.contextual.table_checks import record_removal_hold, record_stuck
from situate.pipelines.jobs import index_job, ingest_job
from situate.pipelines.preflight import claim_data_folder
from situate.pipelines.sync import (
    ADD_BATCH,
    PARTITIONS,
    SyncPlan,
    bad_inputs_from_store,
    plan_sync,
    run_key,
    run_ranges,
)
from situate.resources.documents.docs import Chunking, DocsFolder
from situate.resources.models.llm import BlurbLLM, Embedder
from situate.resources.settings import read_settings
from situate.resources.store.retrieval import rebuild_bm25_from_table
from situate.resources.store.store import Store

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
#: Run tag naming the work a run was asked for (:func:`situate.pipelines.sync.run_key`: its documents'
#: keys and content hashes and the settings): failed runs are counted per this, so an edited
#: document (a new hash) starts its attempts again.
RUN_BASE = "situate/run_base"


def plan_for(
    instance: dg.DagsterInstance,
    docs: DocsFolder,
    store: Store,
    llm: BlurbLLM,
    embedder: Embedder,
    chunking: Chunking,
    allow_removal: bool = False,
    partitions: str = PARTITIONS,
) -> tuple[SyncPlan, str]:
    """Plan a sync of ``docs`` against the instance's partitions and the store's table.  A mass
    removal (:func:`situate.pipelines.sync.removal_held`) is held unless ``allow_removal`` or
    ``SITUATE_ALLOW_MASS_REMOVAL=1``; the data folder records the hold (the ``no_removal_held``
    check of ``bm25_index`` fails while it lasts).  ``partitions``: the collection's dynamic
    partitions (:attr:`situate.assets.collection.Collection.partitions_name`)."""
    fp = fingerprint(llm, embedder, chunking)
    registered = instance.get_dynamic_partitions(partitions)
    skipped: list[str] = []
    passed_over: dict[str, str] = {}
    refs = docs.discover(skipped, passed_over)
    plan = plan_sync(
        refs,
        registered,
        store.document_states(),
        fp,
        bad_inputs_from_store(store, [r.key for r in refs]),
        allow_mass_removal=allow_removal or read_settings().allow_mass_removal,
    )
    plan.skipped = skipped
    plan.passed_over = passed_over
    record_removal_hold(store, plan.held, plan.held_keys)
    return plan, fp


def remove_documents(store: Store, keys: list[str]) -> None:
    """Delete removed documents' rows and stage files, then rebuild the BM25 index from the table."""
    if keys:
        store.delete_documents(keys)
        rebuild_bm25_from_table(store)


def apply_to_instance(
    instance: dg.DagsterInstance, store: Store, plan: SyncPlan, partitions: str = PARTITIONS
) -> list[str]:
    """Carry out a plan's removals (rows, stage files, BM25 entries, partitions) and register its
    new documents (in batches of ADD_BATCH) in the dynamic partitions ``partitions``.  Returns the
    instance's partition keys, in order."""
    remove_documents(store, plan.removed)
    for key in plan.removed:
        instance.delete_dynamic_partition(partitions, key)
    for i in range(0, len(plan.added), ADD_BATCH):
        instance.add_dynamic_partitions(partitions, plan.added[i : i + ADD_BATCH])
    return list(instance.get_dynamic_partitions(partitions))


ACTIVE = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def reap_dead_runs(instance: dg.DagsterInstance, log=None) -> list[str]:
    """Mark FAILURE every run of situate's (any collection's ``ingest`` or ``bm25``, or the
    automation's ``__ASSET_JOB`` run of a ``bm25_index``) still STARTED whose worker process, on this
    host, is gone (killed with ``kill -9``, out of memory, the machine restarted).  Its documents are then
    no longer "in flight", so the next sync asks for them again; the blurbs it finished are in the
    blurb cache and are not written again.  Returns the run ids marked.

    A run is judged by the tags :func:`situate.assets.per_document.tag_worker` wrote (host, pid, and the
    pid's start time, so a reused pid does not pass for the dead worker); runs without them
    (queued, or still starting) are left alone.
    """
    from situate.assets.per_document import process_start

    host = socket.gethostname()
    reaped = []
    # every started run: situate's are those with its worker tags (the jobs', and the runs Dagster's
    # automation launches for bm25_index, whose killed worker would otherwise block eager() for good)
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        tags = run.tags
        if tags.get("situate/host") != host or not tags.get("situate/pid", "").isdigit():
            continue
        started = process_start(int(tags["situate/pid"]))
        if started is not None and (not tags.get("situate/pid_start") or started == tags["situate/pid_start"]):
            continue  # still working
        msg = (
            f"run worker (pid {tags['situate/pid']} on {host}) is gone without finishing (killed or crashed); "
            "its documents will be ingested again, finished blurbs come from the cache"
        )
        instance.report_run_failed(run, message=msg)
        reaped.append(run.run_id)
        if log is not None:
            log(f"marked run {run.run_id} failed: {msg}")
    return reaped


#: Times a document's run may fail as a whole (its worker killed, out of memory, the machine lost)
#: and still be requested again by the sensor and the schedule; after that it waits for a change
#: of the document or the settings (a run that keeps dying would otherwise be relaunched every
#: minute).  A document's own error never fails the run: it is recorded and the run goes on.
MAX_RUN_ATTEMPTS = 3


def _run_keys_of(run: dg.DagsterRun, pos: dict[str, int], order: list[str]) -> list[str]:
    tags = run.tags
    if "dagster/partition" in tags:
        return [tags["dagster/partition"]]
    if tags.get(RANGE_START) in pos and tags.get(RANGE_END) in pos:
        return order[pos[tags[RANGE_START]] : pos[tags[RANGE_END]] + 1]
    return []


def failed_attempts(
    instance: dg.DagsterInstance, order: list[str] | None = None, limit: int = 1000, job: str = "ingest"
) -> dict[str, tuple[int, str]]:
    """``job`` (a collection's ``ingest``) runs that failed or were canceled as a whole (among the
    last ``limit``), counted per the work they were asked for (their :data:`RUN_BASE` tag: the
    same documents at the same versions with the same settings): base → (number of those runs, the latest one's id).
    ``order`` is accepted for the callers of earlier versions and not used."""
    out: dict[str, tuple[int, str]] = {}
    runs = instance.get_runs(
        filters=dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]),
        limit=limit,
    )
    for run in runs:  # newest first
        base = run.tags.get(RUN_BASE)
        if base:
            n, last = out.get(base, (0, run.run_id))
            out[base] = (n + 1, last)
    return out


def run_error(instance: dg.DagsterInstance, run_id: str) -> str:
    """The first line of a failed run's first step failure (or of its run failure), for people."""
    for kind in (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE):
        for rec in instance.all_logs(run_id, of_type=kind):
            ev = rec.dagster_event
            err = getattr(getattr(ev, "event_specific_data", None), "error", None) if ev else None
            text = (err.message if err else (ev.message if ev else "")) or ""
            if text.strip():
                return text.strip().splitlines()[-1][:300]
    return "the run failed (its worker died?)"


def in_flight_keys(instance: dg.DagsterInstance, order: list[str], job: str = "ingest") -> set[str]:
    """Documents in ``job`` (a collection's ``ingest``) runs that are queued or running: not
    requested again meanwhile.
    Runs whose worker died are marked failed first (:func:`reap_dead_runs`)."""
    reap_dead_runs(instance)
    keys: set[str] = set()
    pos = {k: i for i, k in enumerate(order)}
    for run in instance.get_runs(filters=dg.RunsFilter(job_name=job, statuses=ACTIVE)):
        keys.update(_run_keys_of(run, pos, order))
    return keys


def docs_per_run() -> int:
    """``SITUATE_DOCS_PER_RUN``: most documents in one ``ingest`` run (0, the default: no limit)."""
    return read_settings().docs_per_run


def run_requests(
    plan: SyncPlan,
    order: list[str],
    fp: str,
    per_run: int | None = None,
    failures: dict[str, tuple[int, str]] | None = None,
    stuck: dict[str, tuple[int, str]] | None = None,
    job: str = "ingest",
) -> list[dg.RunRequest]:
    """One ``job`` (a collection's ``ingest``) run per contiguous range of stale keys, of at most ``per_run`` documents
    (default :func:`docs_per_run`; one model load serves the range), tagged with its work
    (:data:`RUN_BASE`).

    ``failures`` (:func:`failed_attempts`) salts the run key: work whose earlier run failed is
    asked for again (Dagster skips a run key it has seen), up to :data:`MAX_RUN_ATTEMPTS` runs;
    then it is not asked for, and each of its documents goes into ``stuck`` (key → (failed runs,
    the last run's id)).  An edit changes the work, so an edited document has its attempts again."""
    per_run = docs_per_run() if per_run is None else per_run
    failures = failures or {}
    reqs = []
    for first, last in run_ranges(order, plan.stale, per_run):
        keys = order[order.index(first) : order.index(last) + 1]
        base = run_key(keys, plan, fp)
        n, last_run = failures.get(base, (0, ""))
        if n >= MAX_RUN_ATTEMPTS:
            if stuck is not None:
                stuck.update({k: (n, last_run) for k in keys if k in plan.refs})
            continue
        tags = {RUN_BASE: base, **({RANGE_START: first, RANGE_END: last} if first != last else {})}
        reqs.append(
            dg.RunRequest(
                run_key=base + (f"-retry{n}" if n else ""),
                job_name=job,
                partition_key=first if first == last else None,
                tags=tags,
            )
        )
    return reqs


def stuck_reasons(instance: dg.DagsterInstance, stuck: dict[str, tuple[int, str]]) -> dict[str, str]:
    """key → "N failed runs; last run R: error" for the documents :func:`run_requests` gave up on."""
    errors = {run: run_error(instance, run) for run in {r for _, r in stuck.values()}}
    return {k: f"{n} failed runs; last run {run}: {errors[run]}" for k, (n, run) in stuck.items()}


def ingest_requests(
    context, store: Store, plan: SyncPlan, order: list[str], fp: str, job: str = "ingest"
) -> tuple[list[dg.RunRequest], dict[str, str]]:
    """The sensor's and the schedule's ``ingest`` run requests (:func:`run_requests`, failures
    counted on the instance), and key → reason for the documents given up on: recorded in the
    data folder (the ``documents_not_stuck`` check) and logged, at most 20 lines."""
    stuck: dict = {}
    failures = failed_attempts(context.instance, job=job)
    requests = run_requests(plan, order, fp, failures=failures, stuck=stuck, job=job)
    reasons = stuck_reasons(context.instance, stuck)
    record_stuck(store, reasons)
    for key, why in list(reasons.items())[:20]:
        context.log.warning(f"sync: {document_name(key)}: not asked for again after {why}")
    return requests, reasons


def documents_sensor_for(c: Collection, ingest, index, interval_s: int | None = None) -> dg.SensorDefinition:
    """Collection ``c``'s sensor on its docs source: registers a partition per document, asks
    ``ingest`` runs of new and changed ones, removes the partitions and rows of removed ones;
    evaluated at most every ``interval_s`` seconds (default ``SITUATE_SYNC_INTERVAL_S``, 60)."""

    @dg.sensor(
        name=c.job_name("documents_sensor"),
        jobs=[ingest, index],
        minimum_interval_seconds=read_settings().sync_interval_s if interval_s is None else interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys=c.resource_keys(*ROLES),
        description=f"Registers one `{c.partitions_name}` partition per document in the docs folder, asks for "
        "runs of new and changed ones, and deletes the partitions and rows of removed ones.",
    )
    def documents_sensor(context: dg.SensorEvaluationContext, **_resources):
        # (a direct call, ``documents_sensor(context)``, passes the resources by key too)
        r = c.resources(context)
        return sync_from_sensor(context, c, r.docs, r.store, r.llm, r.embedder, r.chunking)

    return documents_sensor


def sync_from_sensor(
    context: dg.SensorEvaluationContext,
    c: Collection,
    docs: DocsFolder,
    store: Store,
    llm: BlurbLLM,
    embedder: Embedder,
    chunking: Chunking,
):
    """One evaluation of collection ``c``'s sensor: a ``dg.SensorResult`` (runs and partition
    changes) or a ``dg.SkipReason``.

    Raises
    ------
    situate.resources.errors.StartupError
        The data folder is not one situate may use (:func:`situate.pipelines.preflight.claim_data_folder`:
        a non-empty folder of the user's, another collection's): nothing is listed or written.
    """
    claim_data_folder(store.home, c.name)
    if not docs.exists():
        return dg.SkipReason(f"docs path {docs.where()} does not exist (set SITUATE_DOCS)")
    ingest, bm25 = c.job_name("ingest"), c.job_name("bm25")
    plan, fp = plan_for(context.instance, docs, store, llm, embedder, chunking, partitions=c.partitions_name)
    remove_documents(store, plan.removed)
    registered = [k for k in context.instance.get_dynamic_partitions(c.partitions_name) if k not in plan.removed]
    order = registered + plan.added
    busy = in_flight_keys(context.instance, registered, job=ingest)
    plan.stale = [k for k in plan.stale if k not in busy]  # a running document is not asked for twice
    requests, reasons = ingest_requests(context, store, plan, order, fp, job=ingest)
    if reasons:  # one index run per stuck set, so the failing check shows in the UI
        requests.append(
            dg.RunRequest(
                run_key="stuck-" + hashlib.sha256(json.dumps(sorted(reasons)).encode()).hexdigest()[:16],
                job_name=bm25,
            )
        )
    if plan.removed:  # rows and index are already clean; record the rebuilt index in Dagster too
        requests.append(dg.RunRequest(run_key=run_key([], plan, fp) + "-".join(plan.removed)[:64], job_name=bm25))
    if plan.held:  # one warning; one index run, so the failing check shows in the UI
        context.log.warning(f"sync: {plan.held}")
        requests.append(
            dg.RunRequest(run_key="held-" + hashlib.sha256(plan.held.encode()).hexdigest()[:16], job_name=bm25)
        )
    context.log.info(
        f"sync: {len(plan.refs)} documents, {len(plan.added)} new, {len(plan.removed)} removed, "
        f"{len(plan.stale)} to ingest, {len(plan.known_bad)} known bad"
    )
    for key, why in plan.invalid.items():
        context.log.warning(f"sync: partition {document_name(key)!r} left alone (not deleted, not run): {why}")
    for line in plan.skipped:
        context.log.warning(f"sync: {line}")
    parts = c.partitions
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[
            r
            for r in (
                parts.build_add_request(plan.added) if plan.added else None,
                parts.build_delete_request(plan.removed) if plan.removed else None,
            )
            if r is not None
        ],
    )


#: When the default collection re-ingests (02:00 every night, the instance's time zone).
NIGHTLY = "0 2 * * *"


def reingest_schedule_for(c: Collection, ingest, cron: str = NIGHTLY) -> dg.ScheduleDefinition:
    """Collection ``c``'s periodic re-ingest (``cron``): the same sync as the sensor, for when the
    sensor is off or missed a change."""

    @dg.schedule(
        name=c.job_name("nightly_reingest"),
        cron_schedule=cron,
        job=ingest,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        required_resource_keys=c.resource_keys(*ROLES),
        description="Periodic re-ingest: the same sync as the sensor (new, changed and removed "
        "documents), for when the sensor is off or missed a change.",
    )
    def nightly_reingest(context: dg.ScheduleEvaluationContext, **_resources):
        r = c.resources(context)
        return sync_from_schedule(context, c, r.docs, r.store, r.llm, r.embedder, r.chunking)

    return nightly_reingest


def sync_from_schedule(
    context: dg.ScheduleEvaluationContext,
    c: Collection,
    docs: DocsFolder,
    store: Store,
    llm: BlurbLLM,
    embedder: Embedder,
    chunking: Chunking,
):
    """One tick of collection ``c``'s schedule: its ``ingest`` run requests or a ``dg.SkipReason``.

    Raises
    ------
    situate.resources.errors.StartupError
        As :func:`sync_from_sensor`.
    """
    claim_data_folder(store.home, c.name)
    if not docs.exists():
        return dg.SkipReason(f"docs path {docs.where()} does not exist (set SITUATE_DOCS)")
    plan, fp = plan_for(context.instance, docs, store, llm, embedder, chunking, partitions=c.partitions_name)
    order = apply_to_instance(context.instance, store, plan, c.partitions_name)
    if plan.held:
        context.log.warning(f"sync: {plan.held}")
    for key, why in plan.invalid.items():
        context.log.warning(f"sync: partition {document_name(key)!r} left alone (not deleted, not run): {why}")
    for line in plan.skipped:
        context.log.warning(f"sync: {line}")
    busy = in_flight_keys(context.instance, order, job=c.job_name("ingest"))
    plan.stale = [k for k in plan.stale if k not in busy]
    requests, _ = ingest_requests(context, store, plan, order, fp, job=c.job_name("ingest"))
    return requests or dg.SkipReason("every document is up to date")


documents_sensor = documents_sensor_for(DEFAULT, ingest_job, index_job)
nightly_reingest = reingest_schedule_for(DEFAULT, ingest_job)
