"""Running one stage over the documents of a run, one document at a time, never failing the run.

A run may carry one partition or many (``BackfillPolicy.single_run()``), and Dagster records one
materialization result for every partition of the run.  Each document is processed on its own: a bad
document is written to its stage file as an error, named in the log and the metadata, and skipped by
later stages, while the other documents go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import dagster as dg

from situate.contextual.stage_runs import (
    PER_DOCUMENT_LINES,
    PROGRESS_RECORD,
    TABLE_ROWS,
    Progress,
    document_groups,
    document_name,
    documents_table,
    named,
)
from situate.resources.documents.reading import DocumentError
from situate.resources.errors import UpstreamError


@dataclasses.dataclass
class StageReport:
    """Per-document outcomes of one stage in one run."""

    stage: str
    ok: dict[str, dict] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    #: where every document's entry was written (:func:`write_report`), for a large run
    file: str = ""

    def metadata(self, summary: Callable[[dict[str, dict]], dict] | None = None) -> dict:
        """Dagster metadata: the document's own figures for a one-document run, else totals, a
        Markdown table of the documents (a run of more than :data:`TABLE_ROWS` names the file that
        holds them instead) and the problems (at most :data:`TABLE_ROWS`, each named with its
        reason).  Dagster copies a multi-partition step's metadata into every partition's
        materialization event, so it stays this small whatever the run's size."""
        md: dict = {
            "documents_ok": len(self.ok),
            "documents_failed": len(self.failed),
            "documents_skipped": len(self.skipped),
            "seconds": round(self.seconds, 3),
        }
        if len(self.ok) == 1 and not self.failed and not self.skipped:
            md.update(next(iter(self.ok.values())))
        elif self.ok:
            if summary:
                md.update(summary(self.ok))
            if not self.file:  # a larger run's entries are in its file, not in every event
                md["documents"] = dg.MetadataValue.md(documents_table(self.ok))
        if self.file:
            md["every_document"] = dg.MetadataValue.path(self.file)
        problems = {
            **{k: f"failed: {r}" for k, r in self.failed.items()},
            **{k: f"skipped: {r}" for k, r in self.skipped.items()},
        }
        if problems:
            shown = list(problems.items())[:TABLE_ROWS]
            md["problems"] = dg.MetadataValue.md(
                "| document | problem |\n|---|---|\n"
                + "\n".join(f"| {k} | {r.replace('|', '/')[:500]} |" for k, r in shown)
                + (
                    f"\n\n{len(problems) - len(shown)} more in {self.file or 'the run log'}"
                    if len(problems) > len(shown)
                    else ""
                )
            )
        return md

    def check_result(self, check_name: str) -> dg.AssetCheckResult:
        """A check that passes when no document failed at this stage."""
        return dg.AssetCheckResult(
            check_name=check_name,
            passed=not self.failed,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={
                "failed": len(self.failed),
                "reasons": dg.MetadataValue.json(self.failed) if self.failed else "none",
            },
        )


def write_report(context: dg.AssetExecutionContext, store, report: StageReport) -> None:
    """Write every document's entry of a run larger than :data:`TABLE_ROWS` documents to the data
    folder (``runs/<run id>/<stage>.json``: ``{"ok", "failed", "skipped", "seconds"}``) and name
    it in ``report.file``; nothing for a smaller run or a context without a run."""
    if len(report.ok) + len(report.failed) + len(report.skipped) <= TABLE_ROWS:
        return
    try:
        run_id = context.run.run_id
    except Exception:  # a FAKE or build_asset_context: no run
        return
    rel = f"runs/{run_id}/{report.stage}.json"
    body = {"ok": report.ok, "failed": report.failed, "skipped": report.skipped, "seconds": report.seconds}
    store.write_file(rel, json.dumps(body, ensure_ascii=False, default=str).encode("utf-8"))
    report.file = f"{store.location}/{rel}"


#: Run tags naming the process that works on a run, so a later sync can tell a run whose process
#: was killed (``kill -9``, out of memory, a power cut) from one still working: Dagster's default
#: run launcher has no health check, and such a run would stay STARTED, its documents "in flight"
#: forever.  See :func:`situate.pipelines.automation.reap_dead_runs`.
WORKER_TAGS = ("situate/host", "situate/pid", "situate/pid_start")


def process_start(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22;
    tells a reused pid from the original); ``""`` where ``/proc`` is missing (macOS); ``None``
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        if not os.path.isdir("/proc"):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None  # type: ignore[return-value]
            except PermissionError:
                pass
            return ""
        return None  # type: ignore[return-value]


def tag_worker(context: dg.AssetExecutionContext) -> None:
    """Record this process on the run (:data:`WORKER_TAGS`); once per run and process."""
    run = context.run
    pid = os.getpid()
    if run.tags.get("situate/pid") == str(pid):
        return
    context.instance.add_run_tags(
        run.run_id,
        {"situate/host": socket.gethostname(), "situate/pid": str(pid), "situate/pid_start": process_start(pid) or ""},
    )


def log_progress(context: dg.AssetExecutionContext, line: str) -> None:
    """Log ``line`` at INFO as a progress line (:data:`PROGRESS_RECORD`): the one the ``situate``
    command prints without ``--verbose``."""
    context.log.info(line, extra={PROGRESS_RECORD: True})


def per_document_lines(context: dg.AssetExecutionContext) -> bool:
    """Whether this run logs each document's own lines (:data:`PER_DOCUMENT_LINES`)."""
    return len(run_keys(context)) <= PER_DOCUMENT_LINES


def for_each_document(
    context: dg.AssetExecutionContext, store, stage: str, work: Callable[[str], dict], in_flight: int = 1
) -> StageReport:
    """Call ``work(key)`` for every partition key of the run and collect the outcomes.

    ``work`` writes the stage file itself and returns the document's metadata.  A
    :class:`DocumentError` or any other exception is caught: the error is written as the stage file
    (``{"error": ...}``) so later stages skip the document, and logged.  An :class:`UpstreamError`
    marks the document skipped.  A key that is not a valid document key
    (:func:`situate.resources.documents.keys.check_key`: registered by hand, e.g. ``../x``) is reported as failed and
    nothing is read, written or deleted for it.

    ``in_flight``: documents worked on at once, each in its own thread (a model server's
    continuous batching serves several documents' requests together; a document's own chunks
    still go one after another, so its first request has written the server's cache before the
    next is sent).  1: one after another, in the run's order.
    """
    report = StageReport(stage)
    t0 = time.perf_counter()
    _tag(context)
    keys = run_keys(context)
    progress = Progress(stage, keys, t0, in_flight=max(1, in_flight))
    lock = threading.Lock()

    def one(n: int, key: str) -> None:
        started = time.perf_counter()
        ok, out = False, None
        if _valid_key(context, report, stage, n, len(keys), key):

            def work_locked(key=key, n=n) -> dict:
                with store.document_lock(key, on_wait=_waiting(context, stage, n, len(keys), key)):
                    return work(key)

            ok, out = _guarded(context, store, report, stage, n, len(keys), key, work_locked)
        with lock:
            if ok:
                report.ok[key] = out
            progress.end(key, time.perf_counter() - started, ok)
            line = progress.line(report.ok, len(report.failed), len(report.skipped))
        if line:
            log_progress(context, line)

    if in_flight <= 1 or len(keys) <= 1:
        for n, key in enumerate(keys, start=1):
            one(n, key)
    else:
        with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix=f"situate-{stage}") as pool:
            list(pool.map(one, range(1, len(keys) + 1), keys))
    return _finish(context, store, report, progress, t0)


def _finish(
    context: dg.AssetExecutionContext, store, report: StageReport, progress: Progress, t0: float
) -> StageReport:
    """End a stage: its seconds, its entries' file (:func:`write_report`) and its final line."""
    report.seconds = time.perf_counter() - t0
    write_report(context, store, report)
    line = progress.final(report.ok, len(report.failed), len(report.skipped))
    if line:
        log_progress(context, line)
    return report


def _tag(context: dg.AssetExecutionContext) -> None:
    """:func:`tag_worker`, where the context has a run (a ``build_asset_context`` has none)."""
    try:
        tag_worker(context)
    except Exception as e:
        context.log.debug(f"no worker tags: {e}")


def run_keys(context: dg.AssetExecutionContext) -> list[str]:
    """The partition keys of the run, in order (none for an unpartitioned context)."""
    return list(context.partition_keys) if context.has_partition_key_range or context.has_partition_key else []


def _valid_key(
    context: dg.AssetExecutionContext, report: StageReport, stage: str, n: int, total: int, key: str
) -> bool:
    """Whether ``key`` is a valid document key; one registered by hand (the UI takes any key, e.g.
    ``../x``) is reported as failed and nothing is read, written or deleted for it."""
    from situate.resources.documents.keys import PartitionKeyError, check_key

    try:
        check_key(key)
    except PartitionKeyError as e:
        report.failed[key] = f"invalid partition key, not processed: {e}"
        context.log.error(f"{stage} [{n}/{total}] {key!r}: {report.failed[key]}")
        return False
    return True


def _waiting(context: dg.AssetExecutionContext, stage: str, n: int, total: int, key: str) -> Callable[[], None]:
    """The warning logged once when another run holds document ``key``."""

    def waiting() -> None:
        context.log.warning(
            f"{stage} [{n}/{total}] {document_name(key)}: another run is writing this document; "
            "waiting for it (two runs never write one document at once)"
        )

    return waiting


def _guarded(
    context: dg.AssetExecutionContext,
    store,
    report: StageReport,
    stage: str,
    n: int,
    total: int,
    key: str,
    fn: Callable[[], dict],
):
    """``(True, fn())``, or ``(False, None)`` with the document's error recorded: an
    :class:`UpstreamError` marks it skipped, a :class:`DocumentError` or any other exception
    failed, each written as its stage file (``{"error": ...}``) so later stages skip it, and
    logged."""
    try:
        return True, fn()
    except UpstreamError as e:
        report.skipped[key] = str(e)
        store.write_stage(key, stage, {"error": str(e), "upstream": True})
        context.log.debug(f"{stage} [{n}/{total}] {document_name(key)}: skipped, earlier stage failed: {e}")
    except DocumentError as e:
        report.failed[key] = str(e)
        store.write_stage(key, stage, {"error": str(e), "bad_input": True, "sha256": getattr(e, "sha256", None)})
        context.log.error(f"{stage} [{n}/{total}] {named(key, str(e))}")
    except Exception as e:  # one document's bug must not stop the others
        reason = f"{type(e).__name__}: {e}"
        report.failed[key] = reason
        store.write_stage(key, stage, {"error": reason})
        context.log.error(f"{stage} [{n}/{total}] {document_name(key)}: {reason}\n{traceback.format_exc()}")
    return False, None


def for_each_group(
    context: dg.AssetExecutionContext,
    store,
    stage: str,
    prepare: Callable[[str], object],
    commit: Callable[[dict[str, object]], dict[str, dict]],
    chunks_of: Callable[[str], int] = lambda key: 1,
) -> StageReport:
    """Like :func:`for_each_document`, for a stage whose cost is a commit a document: the run's
    documents go in groups (:func:`document_groups`), each group's locks held together (taken in
    key order, so two runs never wait on each other in a cycle), ``prepare(key)`` called for each
    document and ``commit({key: prepared})`` once for the group, returning each document's
    metadata.  A document whose ``prepare`` raises is recorded as :func:`for_each_document` does
    and left out of the commit; when the group's commit raises, each document is committed alone,
    so one bad document never fails the others.
    """
    report = StageReport(stage)
    t0 = time.perf_counter()
    _tag(context)
    given = run_keys(context)
    keys = [k for n, k in enumerate(given, start=1) if _valid_key(context, report, stage, n, len(given), k)]
    total = len(keys)
    pos = {k: n for n, k in enumerate(keys, start=1)}
    progress = Progress(stage, given, t0)
    for key in report.failed:  # invalid keys: finished before any work
        progress.end(key, 0.0, ok=False)
    for group in document_groups(keys, chunks_of):
        started = time.perf_counter()
        prepared: dict[str, object] = {}
        with contextlib.ExitStack() as held:
            for key in sorted(group):
                held.enter_context(store.document_lock(key, on_wait=_waiting(context, stage, pos[key], total, key)))
            for key in group:
                ok, out = _guarded(context, store, report, stage, pos[key], total, key, lambda k=key: prepare(k))
                if ok:
                    prepared[key] = out
            _commit_group(context, store, report, stage, prepared, commit, pos)
        share = (time.perf_counter() - started) / len(group)  # the group's seconds, shared by its documents
        for key in group:
            progress.end(key, share, key in report.ok)
        line = progress.line(report.ok, len(report.failed), len(report.skipped))
        if line:
            log_progress(context, line)
    return _finish(context, store, report, progress, t0)


def _commit_group(
    context: dg.AssetExecutionContext, store, report: StageReport, stage: str, prepared: dict, commit, pos: dict
) -> None:
    """``commit(prepared)`` into ``report``; on an error, each document committed alone (a group of
    one is committed once, its error recorded as :func:`_guarded` records it)."""
    if len(prepared) > 1:
        try:
            report.ok.update(commit(prepared))
            return
        except Exception as e:
            context.log.warning(f"{stage}: a group of {len(prepared)} documents failed ({e}); committing each alone")
    for key, p in prepared.items():
        ok, out = _guarded(
            context, store, report, stage, pos[key], len(pos), key, lambda key=key, p=p: commit({key: p})
        )
        if ok:
            report.ok.update(out)
