"""Running one stage over the documents of a run, one document at a time, never failing the run.

A run may carry one partition or many (``BackfillPolicy.single_run()``), and Dagster records one
materialization result for every partition of the run.  Each document is processed on its own: a bad
document is written to its stage file as an error, named in the log and the metadata, and skipped by
later stages, while the other documents go on.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import dagster as dg

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

    def metadata(self, summary: Callable[[dict[str, dict]], dict] | None = None) -> dict:
        """Dagster metadata: the document's own figures for a one-document run, else totals and a
        Markdown table of the documents; failures always named with their reasons."""
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
            cols = sorted({c for v in self.ok.values() for c in v if not isinstance(v[c], (dict, list))})
            rows = ["| document | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            for key, v in list(self.ok.items())[:500]:
                rows.append(f"| {key} | " + " | ".join(str(v.get(c, "")) for c in cols) + " |")
            md["documents"] = dg.MetadataValue.md("\n".join(rows))
        problems = {
            **{k: f"failed: {r}" for k, r in self.failed.items()},
            **{k: f"skipped: {r}" for k, r in self.skipped.items()},
        }
        if problems:
            md["problems"] = dg.MetadataValue.md(
                "| document | problem |\n|---|---|\n"
                + "\n".join(f"| {k} | {r.replace('|', '/')} |" for k, r in problems.items())
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


def tag_worker(context) -> None:
    """Record this process on the run (:data:`WORKER_TAGS`); once per run and process."""
    run = context.run
    pid = os.getpid()
    if run.tags.get("situate/pid") == str(pid):
        return
    context.instance.add_run_tags(
        run.run_id,
        {"situate/host": socket.gethostname(), "situate/pid": str(pid), "situate/pid_start": process_start(pid) or ""},
    )


def progress_line(stage: str, done: int, total: int, seconds: float, ok: dict[str, dict]) -> str:
    """One line of a run's progress after ``done`` of ``total`` documents (``seconds`` so far):
    chunks and cache hits where the stage counts them, the rate and an estimate of the time left
    (the mean so far times the documents left).

    >>> progress_line("blurbs", 2, 8, 30.0, {"a": {"chunks": 5, "cached": 1}, "b": {"chunks": 7, "cached": 0}})
    'blurbs: 2/8 documents, 12 chunks (1 from the cache), 0.4 chunks/s, about 1 min 30 s left'
    """
    chunks = sum(v.get("chunks", 0) for v in ok.values() if isinstance(v, dict))
    cached = sum(v.get("cached", 0) for v in ok.values() if isinstance(v, dict))
    left = round(seconds / max(1, done) * (total - done))
    eta = f"{left // 60} min {left % 60} s" if left >= 60 else f"{left} s"
    what = f", {chunks} chunks ({cached} from the cache), {chunks / seconds:.1f} chunks/s" if chunks and seconds else ""
    return f"{stage}: {done}/{total} documents{what}, about {eta} left"


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
    try:
        tag_worker(context)
    except Exception as e:  # a build_asset_context without a run: nothing to tag
        context.log.debug(f"no worker tags: {e}")
    keys = context.partition_keys if context.has_partition_key_range or context.has_partition_key else []
    from situate.resources.documents.keys import PartitionKeyError, check_key

    lock = threading.Lock()
    done = [0]

    def one(n: int, key: str) -> None:
        try:
            check_key(key)
        except PartitionKeyError as e:  # registered by hand (the UI takes any key): left alone
            report.failed[key] = f"invalid partition key, not processed: {e}"
            context.log.error(f"{stage} [{n}/{len(keys)}] {key!r}: {report.failed[key]}")
            return

        def waiting(key=key, n=n):
            context.log.warning(
                f"{stage} [{n}/{len(keys)}] {key}: another run is writing this document; "
                "waiting for it (two runs never write one document at once)"
            )

        try:
            with store.document_lock(key, on_wait=waiting):
                out = work(key)
            with lock:
                report.ok[key] = out
                done[0] += 1
                line = progress_line(stage, done[0], len(keys), time.perf_counter() - t0, dict(report.ok))
            if len(keys) > 1:
                context.log.info(line)
        except UpstreamError as e:
            report.skipped[key] = str(e)
            store.write_stage(key, stage, {"error": str(e), "upstream": True})
            context.log.debug(f"{stage} [{n}/{len(keys)}] {key}: skipped, earlier stage failed: {e}")
        except DocumentError as e:
            report.failed[key] = str(e)
            store.write_stage(key, stage, {"error": str(e), "bad_input": True, "sha256": getattr(e, "sha256", None)})
            context.log.error(f"{stage} [{n}/{len(keys)}] {key}: {e}")
        except Exception as e:  # one document's bug must not stop the others
            reason = f"{type(e).__name__}: {e}"
            report.failed[key] = reason
            store.write_stage(key, stage, {"error": reason})
            context.log.error(f"{stage} [{n}/{len(keys)}] {key}: {reason}\n{traceback.format_exc()}")

    if in_flight <= 1 or len(keys) <= 1:
        for n, key in enumerate(keys, start=1):
            one(n, key)
    else:
        with ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix=f"situate-{stage}") as pool:
            list(pool.map(one, range(1, len(keys) + 1), keys))
    report.seconds = time.perf_counter() - t0
    return report
