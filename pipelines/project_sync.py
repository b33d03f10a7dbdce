"""``situate sync NAME``: one collection of a Dagster project ingested from the command line.

Dagster's command line can launch a run over dynamic partitions (``dg launch --job product_ingest
--partition billing.md``) but cannot add them: only code or the UI's button registers a
document's partition, and the collection's sensor does that work when the daemon runs it (``dg
dev``).  :func:`sync_collection` does what one tick of collection ``NAME``'s sensor asks, without the
daemon or the UI: it loads the project's definitions from its defs folder (as ``dg list defs``
does, so the project must be installed in the environment), evaluates the sensor on
``$DAGSTER_HOME``'s instance, registers and removes the partitions it asks for, executes the
``<name>_ingest`` runs it asks for in this process (as ``dg launch`` does), then the
``<name>_bm25`` run.  The runs are the instance's: ``dg dev`` on the same ``DAGSTER_HOME`` shows them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from situate.pipelines.preflight import StartupError


@dataclass
class SyncResult:
    """What :func:`sync_collection` did: partitions added and removed, runs executed."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    runs: list[tuple[str, str, bool]] = field(default_factory=list)  # (job, documents, success)

    @property
    def failed(self) -> list[tuple[str, str, bool]]:
        """The runs that failed."""
        return [r for r in self.runs if not r[2]]


def _project_definitions(project: Path):
    """The definitions of the Dagster project at ``project`` (its defs folder).

    Raises
    ------
    StartupError
        No ``pyproject.toml`` (or ``dg.toml``) with ``[tool.dg]`` there, or its root module cannot
        be imported (the project is not installed in this environment).
    """
    import dagster as dg

    try:
        return dg.load_from_defs_folder(path_within_project=project)
    except Exception as e:  # dagster's own errors: no project configuration, a module not importable, a bad defs.yaml
        first = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
        hint = ""
        if isinstance(e, ModuleNotFoundError) or "Could not import module" in first:
            hint = ": install the project in this environment (`pip install -e .` in its folder, or `uv sync`)"
        raise StartupError(f"the Dagster project at {project} does not load: {first}{hint}") from None


def _sensor_of(defs, name: str):
    """Collection ``name``'s documents sensor in ``defs``.

    Raises
    ------
    StartupError
        The project has no collection of that name; the message names those it has.
    """
    sensors = {s.name: s for s in defs.sensors or []}
    sensor = sensors.get(f"{name}_documents_sensor")
    if sensor is None:
        have = sorted(n.removesuffix("_documents_sensor") for n in sensors if n.endswith("_documents_sensor"))
        raise StartupError(f"the project has no collection {name!r} (its collections: {', '.join(have) or 'none'})")
    return sensor


def _apply_partition_requests(instance, requests, result: SyncResult) -> None:
    """Carry out a sensor's dynamic partition requests on ``instance``."""
    import dagster as dg

    for req in requests:
        keys = list(req.partition_keys)
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, keys)
            result.added += keys
        else:
            for key in keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)
            result.removed += keys


def _run(defs, instance, job_name: str, echo, verbose: bool, **where) -> bool:
    """Execute job ``job_name`` of ``defs`` in process on ``instance``; returns its success."""
    from situate.pipelines.operations import _execute, _failure_reason

    run = _execute(defs.resolve_job_def(job_name), instance, verbose, **where)
    if not run.success:
        echo(f"situate: run {run.run_id} of {job_name} failed: {_failure_reason(run)}")
    return run.success


def sync_collection(name: str, project: str = ".", echo=print, verbose: bool = False) -> SyncResult:
    """Ingest collection ``name`` of the Dagster project at ``project`` from the command line: one
    tick of its documents sensor carried out on ``$DAGSTER_HOME``'s instance (partitions registered
    and removed, the ingest runs it asks for executed in this process), then its ``<name>_bm25`` run
    when anything was ingested or removed.

    Parameters
    ----------
    name : str
        The collection's name (the ``name`` attribute of its ``defs.yaml``).
    project : str
        The project's folder (where its ``pyproject.toml`` is), default the working folder.
    echo : callable
        Where the one-line progress messages go.
    verbose : bool
        Dagster's full console log of the runs instead of the short lines.

    Returns
    -------
    SyncResult
        The partitions added and removed and the runs executed.

    Raises
    ------
    StartupError
        ``DAGSTER_HOME`` is not set (the runs and partitions would go to a temporary instance, lost
        at exit), the project does not load, or it has no collection ``name``.
    """
    import dagster as dg

    from situate.pipelines.automation import RANGE_END, RANGE_START
    from situate.pipelines.settings import PLANNED_EVENTS

    if not os.environ.get("DAGSTER_HOME"):
        raise StartupError(
            "DAGSTER_HOME is not set: point it at the folder of the project's dagster.yaml "
            "(the instance `dg dev` uses), or the partitions and runs are lost at exit"
        )
    os.environ.setdefault(*PLANNED_EVENTS)
    defs = _project_definitions(Path(project).resolve())
    sensor = _sensor_of(defs, name)
    instance = dg.DagsterInstance.get()
    tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources))
    result = SyncResult()
    if isinstance(tick, dg.SkipReason):
        echo(f"situate: {name}: nothing to do ({tick.skip_message})")
        return result
    _apply_partition_requests(instance, tick.dynamic_partitions_requests or [], result)
    echo(f"situate: {name}: {len(result.added)} document(s) registered, {len(result.removed)} removed")
    for req in tick.run_requests or []:
        tags = dict(req.tags or {})
        docs = req.partition_key or f"{tags.get(RANGE_START)} … {tags.get(RANGE_END)}"
        echo(f"situate: {name}: {req.job_name} over {docs}")
        where = {"partition_key": req.partition_key} if req.partition_key else {}
        result.runs.append((req.job_name, docs, _run(defs, instance, req.job_name, echo, verbose, tags=tags, **where)))
    index = f"{name}_bm25"
    if (result.runs or result.removed) and index not in {job for job, _, _ in result.runs}:
        result.runs.append((index, "", _run(defs, instance, index, echo, verbose)))
    return result
