"""Ingest and search as plain functions: what the command line, the demo, the evaluation and the
public API (:mod:`situate`) call.  They set up the environment (data folder, Dagster instance,
offline tokenizer) and run the ingest job in process."""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import threading
import time
from pathlib import Path

from situate.resources.errors import QueryError  # noqa: F401  (importable from here as before)
from situate.resources.settings import data_folder, override


def prepare_env(home: str | None, docs: str | None = None) -> None:
    """Point this process at a data folder and docs folder (absolute ``SITUATE_HOME`` and
    ``SITUATE_DOCS``, set as overrides (:func:`situate.resources.settings.override`), not in the
    environment), a Dagster instance and the offline cl100k_base tokenizer."""
    if home:
        from situate.resources.store.objects import normalize_home

        override("SITUATE_HOME", normalize_home(home))
    if docs:
        override("SITUATE_DOCS", str(Path(docs).expanduser().resolve()))
    from situate.pipelines.settings import ensure_dagster_home
    from situate.resources.models import registry as models

    ensure_dagster_home()
    models.use_offline_tiktoken()


def check_readable_home(home: str) -> None:
    """A search's data folder exists (a search never creates one it was pointed at by mistake)
    and, on an object store, answers (one try per request).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        One line: the folder does not exist / holds no situate data, or the object store is
        unreachable, refuses the credentials or lacks the bucket.
    """
    from situate.pipelines.preflight import StartupError
    from situate.resources.store.objects import ObjectFolder, StoreUnavailable, is_uri, normalize_home
    from situate.resources.store.store import DATA_MARKER

    if is_uri(home):
        uri = normalize_home(home)
        try:
            folder = ObjectFolder(uri, retries=0)
            found = folder.get(DATA_MARKER) is not None or folder.get("docs-root") is not None
        except StoreUnavailable as e:
            raise StartupError(f"data folder {uri}: {e}") from None
        if not found:
            raise StartupError(
                f"data folder {uri} holds no situate data: run `situate ingest PATH --home "
                f"{uri}` first, or give the --home you ingested into"
            )
        return
    root = Path(home).expanduser().resolve()
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        raise StartupError(
            f"data folder {root} {what}: run `situate ingest PATH` first, or give the --home you ingested into"
        )
    if not is_data_folder(root):  # opening its table would create lancedb/ in a folder of the user's
        raise StartupError(
            f"{root} is not a situate data folder (no {DATA_MARKER}): run `situate ingest "
            f"PATH --home {root}` first, or give the --home you ingested into"
        )


def is_data_folder(root: Path) -> bool:
    """Whether local folder ``root`` is a situate data folder: its mark (``.situate-data``), or an
    earlier situate's ``docs-root`` file or table (as :func:`situate.pipelines.preflight.check_data_folder`
    accepts them).  Reading never creates one."""
    from situate.resources.store.store import DATA_MARKER

    return (root / DATA_MARKER).is_file() or (root / "docs-root").is_file() or (root / "lancedb").is_dir()


@dataclasses.dataclass
class IngestSummary:
    """What ``situate ingest`` did."""

    documents: int = 0
    ingested: int = 0
    unchanged: int = 0
    removed: int = 0
    #: the paths of the removed documents (the lines name them)
    removed_paths: list = dataclasses.field(default_factory=list)
    #: partition key → why the document failed (the lines name its path:
    #: :func:`situate.contextual.stage_runs.document_name`)
    failed: dict = dataclasses.field(default_factory=dict)
    #: path → why discovery left the file out (``empty (0 bytes)``, ``ignored by .gitignore``,
    #: ``unknown format``): not a failure
    skipped: dict = dataclasses.field(default_factory=dict)
    chunks: int = 0
    blurbs_from_model: int = 0
    model_calls: int = 0
    blurbs_from_cache: int = 0
    blurb_fallbacks: int = 0
    blurbs_skipped: int = 0
    #: chunks with no LLM call, by reason (``skipped:<reason>``: structure mode, lock file, ...)
    skipped_reasons: dict = dataclasses.field(default_factory=dict)
    #: blurbs kept from a document's earlier version (an edit re-situates only what changed)
    blurbs_kept: int = 0
    table_rows: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_tokens_reused: int = 0
    #: model calls whose prompt tokens reused the server did not report (their reuse counts 0 in
    #: ``prompt_tokens_reused``; all of them: the summary says "not reported by this server")
    model_calls_reuse_not_reported: int = 0
    #: of the evaluated prompt tokens, those an API wrote to its prompt cache (Anthropic)
    prompt_tokens_cache_written: int = 0
    generated_tokens: int = 0
    #: what a paid API billed this run (:data:`situate.resources.models.llm.API_USAGE`): every answer,
    #: those of documents that then failed included
    api_usage: dict = dataclasses.field(default_factory=dict)
    #: USD of ``api_usage`` at ``cost_rates``, None where no rate is known
    cost_usd: float | None = None
    cost_rates: str = ""
    llm_seconds: float = 0.0
    seconds: float = 0.0
    per_document: dict = dataclasses.field(default_factory=dict)
    #: why a mass removal was held (:func:`situate.pipelines.sync.removal_held`), else empty
    removal_held: str = ""
    #: which context each kind of document got (:func:`situate.contextual.policy.describe`)
    policy: str = ""
    #: seconds before the first run started (reading the folder, the plan, partitions registered)
    start_seconds: float = 0.0
    #: per stage (asset), summed over the ingest's runs: ``seconds`` its steps took in all, and
    #: ``work_seconds`` of them in situate's own code (the rest is Dagster's bookkeeping: an event
    #: a document and asset)
    stages: dict = dataclasses.field(default_factory=dict)
    #: each ingest run in order: its documents, wall seconds and the process's peak resident
    #: memory after it (MB, ``getrusage``'s ``ru_maxrss``): a document's cost and the memory stay
    #: flat over a large ingest (``benchmarks/ingest_scale.py``)
    runs: list = dataclasses.field(default_factory=list)

    def add_stage_times(self, times: dict[str, dict]) -> None:
        """Add one run's :func:`stage_times`."""
        for stage, t in times.items():
            mine = self.stages.setdefault(stage, {"seconds": 0.0, "work_seconds": 0.0})
            mine["seconds"] += t["seconds"]
            mine["work_seconds"] += t["work_seconds"]

    def stage_line(self) -> str:
        """Seconds per stage and its rate (chunks/s where the ingest made chunks)."""
        from situate.contextual.stage_runs import rate_text

        parts = [f"start {self.start_seconds:.1f} s"]
        for stage, t in self.stages.items():
            rate = f", {rate_text(self.chunks, t['seconds'])}" if self.chunks and t["seconds"] > 0 else ""
            parts.append(f"{stage} {t['seconds']:.1f} s{rate}")
        other = self.seconds - self.start_seconds - sum(t["seconds"] for t in self.stages.values())
        if self.seconds and other > 0:
            parts.append(f"runs' start and end {other:.1f} s")
        return "stages: " + "; ".join(parts)

    def add_document(self, key: str, s: dict) -> None:
        """Count one ingested document's blurb summary ``s``
        (:func:`situate.contextual.document_blurbs.blurb_summary`)."""
        self.per_document[key] = s
        self.ingested += 1
        self.chunks += s["chunks"]
        self.blurbs_from_model += s["blurbs_from_model"]
        self.model_calls += s["model_calls"]
        self.blurbs_from_cache += s["cached"]
        self.blurb_fallbacks += s["fallbacks"]
        self.blurbs_skipped += s.get("skipped", 0)
        self.blurbs_kept += s.get("kept_from_earlier_version", 0)
        for why, n in s.get("skipped_reasons", {}).items():
            self.skipped_reasons[why] = self.skipped_reasons.get(why, 0) + n
        self.prompt_tokens_evaluated += s["prompt_tokens_evaluated"]
        reused = s["prompt_tokens_reused"]
        self.prompt_tokens_reused += reused if isinstance(reused, int) else 0
        self.model_calls_reuse_not_reported += s.get("model_calls_reuse_not_reported", 0)
        self.prompt_tokens_cache_written += s.get("prompt_tokens_cache_written", 0)
        self.generated_tokens += s.get("generated_tokens_called", 0)
        self.llm_seconds += s["llm_seconds"]

    def reuse_line(self) -> str:
        """Prompt tokens evaluated and reused; where the server reported no call's reuse, the tokens
        sent and "not reported by this server" (never a 0 that reads as measured)."""
        from situate.contextual.document_blurbs import REUSE_NOT_REPORTED

        n, calls = self.model_calls_reuse_not_reported, self.model_calls
        if calls and n >= calls:
            sent = self.prompt_tokens_evaluated + self.prompt_tokens_reused
            return f"prompt tokens sent: {sent:,}, reused from the KV cache: {REUSE_NOT_REPORTED}"
        return (
            f"prompt tokens evaluated: {self.prompt_tokens_evaluated:,}, reused from the KV cache: "
            f"{self.prompt_tokens_reused:,}"
            + (f" (not reported by the server for {n:,} of {calls:,} calls)" if n else "")
        )

    def llm_line(self) -> str:
        """The table's rows, the LLM calls and seconds a call, and the wall time."""
        from situate.contextual.stage_runs import duration_text

        calls = self.model_calls
        llm = (
            f"{calls:,} LLM call{'' if calls == 1 else 's'}, {self.llm_seconds / calls:.1f} s a call "
            f"({duration_text(self.llm_seconds)} in all)"
            if calls
            else "no LLM call"
        )
        return f"table rows: {self.table_rows}; {llm}; wall time {duration_text(self.seconds)}"

    def skipped_lines(self) -> list[str]:
        """The files discovery left out, by reason: how many, and each one's path except for the
        ignored ones (a project's ignored files can be thousands); at most :data:`SHOWN_PATHS` a
        reason."""
        by_reason: dict[str, list[str]] = {}
        for path, reason in self.skipped.items():
            by_reason.setdefault(reason, []).append(path)
        out = []
        for reason, paths in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            head = f"skipped {len(paths):,} file{'' if len(paths) == 1 else 's'}, {reason}"
            out.append(head if reason.startswith("ignored") else f"{head}: {_paths_text(sorted(paths))}")
        return out

    def lines(self) -> list[str]:
        """What ``situate ingest`` prints: the counts, the LLM's work, the times, and each removed,
        skipped and failed document by its path."""
        from situate.contextual.stage_runs import named

        out = [
            f"documents: {self.documents} ({self.ingested} ingested, {self.unchanged} unchanged, "
            f"{self.removed} removed, {len(self.failed)} failed"
            + (f"; {len(self.skipped):,} files skipped" if self.skipped else "")
            + ")",
            f"chunks ingested: {self.chunks}; LLM calls: {self.model_calls}, blurbs from the cache: "
            f"{self.blurbs_from_cache}; usable blurbs: {self.blurbs_from_model}, "
            f"fallbacks to the chunk alone: {self.blurb_fallbacks}"
            + (
                f", no LLM call: {self.blurbs_skipped} ("
                + ", ".join(f"{k} {v}" for k, v in sorted(self.skipped_reasons.items()))
                + ")"
                if self.blurbs_skipped
                else ""
            )
            + (f", kept from an earlier version: {self.blurbs_kept}" if self.blurbs_kept else ""),
            self.reuse_line()
            + (
                f" (written to the API's cache: {self.prompt_tokens_cache_written:,})"
                if self.prompt_tokens_cache_written
                else ""
            )
            + f"; generated: {self.generated_tokens:,}"
            + (
                f"; cost ${self.cost_usd:,.4f} for {self.api_usage.get('requests', 0) + self.api_usage.get('batch_requests', 0)} "  # noqa: E501
                f"API answers at {self.cost_rates}"
                if self.cost_usd is not None
                else ""
            ),
            f"context: {self.policy}" if self.policy else "",
            self.stage_line() if self.stages else "",
            self.llm_line(),
        ]
        out = [line for line in out if line]
        if self.removed_paths:
            out.append(f"removed: {_paths_text(self.removed_paths)}")
        out += self.skipped_lines()
        for key, reason in self.failed.items():
            out.append(f"FAILED {named(key, reason)}")
        if self.removal_held:
            out.append(f"HELD removal: {self.removal_held}")
        return out


#: Paths a summary line names at most (removed documents, skipped files of one reason); the JSON
#: summary (``--json``) lists every one.
SHOWN_PATHS = 20


def _paths_text(paths: list[str]) -> str:
    """``a.md, b.md``: at most :data:`SHOWN_PATHS` of ``paths``, then how many more."""
    more = len(paths) - SHOWN_PATHS
    return ", ".join(paths[:SHOWN_PATHS]) + (f" and {more:,} more (the --json summary lists them)" if more > 0 else "")


def stage_times(result) -> dict[str, dict]:
    """Each step's seconds in an ``execute_in_process`` ``result``: ``seconds`` from Dagster's
    step-success (or failure) event, and ``work_seconds`` from the ``seconds`` the asset put in
    its materialization's metadata (:class:`situate.assets.per_document.StageReport`), 0 where it
    gave none."""
    out: dict[str, dict] = {}
    for ev in result.all_events:
        step = ev.step_key
        if not step:
            continue
        if ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            ms = getattr(ev.event_specific_data, "duration_ms", None) or 0.0
            out.setdefault(step, {"seconds": 0.0, "work_seconds": 0.0})["seconds"] = ms / 1000
        elif ev.event_type_value == "ASSET_MATERIALIZATION":
            entry = out.setdefault(step, {"seconds": 0.0, "work_seconds": 0.0})
            if not entry["work_seconds"]:
                seconds = ev.event_specific_data.materialization.metadata.get("seconds")
                entry["work_seconds"] = float(getattr(seconds, "value", 0.0) or 0.0)
    return out


def was_interrupted(result) -> bool:
    """Whether a failed ``execute_in_process`` result was stopped by a signal (Ctrl-C, SIGTERM), which
    Dagster reports as a step failure of class ``DagsterExecutionInterruptedError``."""
    return any(
        ev.is_step_failure
        and getattr(ev.event_specific_data.error, "cls_name", "")
        in ("DagsterExecutionInterruptedError", "KeyboardInterrupt")
        for ev in result.all_events
    )


def ingest(
    path: str,
    home: str | None = None,
    echo=print,
    replace: bool = False,
    allow_removal: bool = False,
    verbose: bool = False,
) -> IngestSummary:
    """Sync ``path`` (a folder or a corpus file) with Dagster and materialise new and changed
    documents, then the BM25 index.  Same assets, same instance as ``dagster dev``.

    ``replace``: the data folder may hold another docs folder's documents; they are replaced.

    ``verbose``: the runs print Dagster's console log (every INFO line, each document's own);
    otherwise one short line a progress step, warning and error, to standard error
    (:mod:`situate.pipelines.progress_log`).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        ``path`` does not exist, the data folder is not writable or is a folder of the user's, it
        holds another docs folder's documents and ``replace`` is false, a model file is missing or
        corrupt (one line each; see :mod:`situate.pipelines.preflight`).
    """
    from situate.pipelines.settings import restored_env

    # Dagster's in-process runs read the data folder from the environment (its resources are
    # EnvVars): the variables are set for this call only and put back after, and ingests in one
    # process take turns, so a concurrent search (which never reads them) or another ingest in
    # another thread is never pointed at this call's folder.
    with _INGEST_LOCK, restored_env():
        return _ingest(path, home, echo, replace, allow_removal, verbose)


#: One in-process ingest at a time (see :func:`ingest`).
_INGEST_LOCK = threading.RLock()


def _ingest(
    path: str, home: str | None, echo, replace: bool, allow_removal: bool = False, verbose: bool = False
) -> IngestSummary:
    """:func:`ingest`, with the environment pointed at this call's folders."""
    import dagster as dg  # local: 0.7 s to import, and search, the service and MCP use this module without it

    from situate.contextual.policy import describe, uses_llm
    from situate.contextual.stage_runs import document_name
    from situate.pipelines.automation import apply_to_instance, plan_for, reap_dead_runs
    from situate.pipelines.definitions import build_definitions
    from situate.pipelines.preflight import check_data_folder, check_docs, check_same_docs, preflight
    from situate.pipelines.settings import record_docs_root, resources_from_env
    from situate.resources.models.llm import API_USAGE, forget_servers

    t0 = time.perf_counter()
    docs_path = check_docs(path)
    home_path = check_data_folder(data_folder(home))
    check_same_docs(home_path, docs_path, replace)
    prepare_env(home, path)
    record_docs_root(path)
    forget_servers()  # a model server is checked again at each ingest: it may serve another model now
    usage0 = dict(API_USAGE)
    res = resources_from_env(plain=True)
    store = res["store"]
    for warning in preflight(None, res, store.location):
        echo(f"situate: warning: {warning}")
    defs = build_definitions(plain=True)
    instance = dg.DagsterInstance.get()
    reap_dead_runs(instance, log=lambda m: echo(f"situate: {m}"))
    plan, fp = plan_for(
        instance, res["docs"], store, res["llm"], res["embedder"], res["chunking"], allow_removal=allow_removal
    )
    summary = IngestSummary(
        documents=len(plan.refs),
        unchanged=len(plan.fresh),
        removed=len(plan.removed),
        removed_paths=[document_name(k) for k in plan.removed],
        skipped=dict(plan.passed_over),
        removal_held=plan.held,
    )
    if plan.held:
        echo(f"situate: {plan.held}")
    echo(f"situate: {plan_line(plan, res['docs'].root)}")
    order = apply_to_instance(instance, store, plan)
    for key, why in plan.invalid.items():
        echo(f"situate: warning: partition {document_name(key)!r} left alone (not deleted, not run): {why}")
    for key, reason in plan.known_bad.items():
        summary.failed[key] = f"{reason} (unchanged since it failed)"
    summary.policy = describe(res["llm"])
    summary.start_seconds = time.perf_counter() - t0
    _run_ingest_ranges(defs, instance, order, plan.stale, summary, echo, verbose)
    _rebuild_index_if_behind(defs, instance, store, plan, summary, echo, verbose)
    _add_document_summaries(store, plan.stale, summary)
    _name_stuck_documents(store, plan, summary)
    summary.table_rows = store.count_rows()
    summary.seconds = time.perf_counter() - t0
    if res["llm"].api == "anthropic" and uses_llm(res["llm"]):
        _add_api_cost(res["llm"], usage0, summary)
    return summary


def plan_line(plan, root) -> str:
    """What an ingest will do, in one line: the documents in ``root`` and how many of them are new,
    to ingest, unchanged, removed, and failed before and unchanged since (not retried)."""
    return (
        f"{len(plan.refs)} documents in {root}; {len(plan.added)} new, {len(plan.stale)} to ingest, "
        f"{len(plan.fresh)} unchanged, {len(plan.removed)} removed"
        + (f", {len(plan.known_bad)} failed before and unchanged since (not retried)" if plan.known_bad else "")
    )


def run_line(keys: list[str]) -> str:
    """The line that starts an ingest run over the documents ``keys``, named by their paths."""
    from situate.contextual.stage_runs import document_name

    if len(keys) == 1:
        return f"run over 1 document: {document_name(keys[0])}"
    return f"run over {len(keys)} documents: {document_name(keys[0])} … {document_name(keys[-1])}"


def _execute(job, instance, verbose: bool, **where):
    """``job`` run in process (``raise_on_error=False``) with the short logger, or Dagster's console
    log at INFO when ``verbose`` (:func:`situate.pipelines.progress_log.run_config`); SIGTERM's
    handling is what it was before the run (:func:`_sigterm_kept`)."""
    from situate.pipelines.progress_log import run_config, with_progress_logger

    with _sigterm_kept():
        return with_progress_logger(job).execute_in_process(
            instance=instance, run_config=run_config(verbose), raise_on_error=False, **where
        )


@contextlib.contextmanager
def _sigterm_kept():
    """Give SIGTERM back its handling after a Dagster run.  Dagster's ``capture_interrupts`` ends a
    run by setting SIGTERM to whatever SIGINT has; in a process started in the background by a
    non-interactive shell (``situate ingest … &``, a CI step, a test suite) SIGINT is ignored, so
    SIGTERM was left ignored: the process could no longer be stopped with ``kill``, and every
    child it started later inherited it (Dagster's own log-tailing processes then outlived their
    run and held its end 60 s, two ``terminate`` + 30 s waits).  Main thread only, as signals."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None and signal.getsignal(signal.SIGTERM) is not before:
            signal.signal(signal.SIGTERM, before)


def _failure_reason(result) -> str:
    """The last line of the first failed step's error in an in-process run's ``result``."""
    return next(
        (
            str(ev.event_specific_data.error.message).strip().splitlines()[-1]
            for ev in result.all_events
            if ev.is_step_failure
        ),
        "see the run's log",
    )


def _run_ingest_ranges(
    defs, instance, order: list[str], stale, summary: IngestSummary, echo, verbose: bool = False
) -> None:
    """Run the ingest job in process over the ``stale`` partitions, in runs of at most
    ``SITUATE_DOCS_PER_RUN`` consecutive keys of ``order``; a failed run's documents go to
    ``summary.failed``.

    Raises
    ------
    KeyboardInterrupt
        When a run was interrupted (Ctrl-C or SIGTERM): the documents left are not started.
    """
    from situate.pipelines.automation import RANGE_END, RANGE_START, docs_per_run
    from situate.pipelines.sync import run_ranges

    job = defs.resolve_job_def("ingest")
    for first, last in run_ranges(order, stale, docs_per_run()):
        keys = order[order.index(first) : order.index(last) + 1]
        echo(f"situate: {run_line(keys)}")
        if first == last:
            where = {"partition_key": first}
        else:
            where = {"tags": {RANGE_START: first, RANGE_END: last}}
        t0 = time.perf_counter()
        result = _execute(job, instance, verbose, **where)
        summary.add_stage_times(stage_times(result))
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        summary.runs.append(
            {"documents": len(keys), "seconds": round(time.perf_counter() - t0, 2), "peak_mb": round(peak_mb)}
        )
        if result.success:
            continue
        reason = _failure_reason(result)
        echo(f"situate: run {result.run_id} failed: {reason}")
        for key in keys:
            summary.failed.setdefault(key, f"run {result.run_id} failed: {reason}")
        if was_interrupted(result):
            # Ctrl-C or SIGTERM: Dagster turned the signal into a failed run; stop here rather
            # than go on with the next documents (finished blurbs are in the cache: rerun resumes)
            echo(
                f"situate: interrupted: {len(keys)} document(s) of run {result.run_id} not finished; "
                "the same command resumes (finished blurbs are cached)"
            )
            raise KeyboardInterrupt


def _rebuild_index_if_behind(defs, instance, store, plan, summary: IngestSummary, echo, verbose: bool = False) -> None:
    """Run the BM25 index job when documents changed or the index is of an older version; a failed
    index run is a failure of the ingest (``summary.failed["(bm25 index)"]``), not a footnote."""
    from situate.contextual.table_checks import ids_match
    from situate.resources.store.retrieval import STRUCTURAL

    behind = not ids_match(store)[0] or not (store.bm25_dir / STRUCTURAL).exists()
    if not (plan.stale or plan.removed or behind):
        return
    index = _execute(defs.resolve_job_def("bm25"), instance, verbose)
    summary.add_stage_times(stage_times(index))
    if not index.success:
        reason = _failure_reason(index)
        summary.failed["(bm25 index)"] = f"run {index.run_id} failed: {reason}"
        echo(f"situate: the BM25 index was not rebuilt: run {index.run_id} failed: {reason}")


def _stage_error(store, key: str) -> str | None:
    """The first stage error stored for document ``key`` (not one passed on from upstream)."""
    for stage in ("document", "chunks", "preambles", "blurbs", "embeddings"):
        d = store.read_stage_if_any(key, stage)
        if isinstance(d, dict) and d.get("error") and not d.get("upstream"):
            return f"{stage}: {d['error']}"
    return None


def _add_document_summaries(store, stale, summary: IngestSummary) -> None:
    """Add each ingested document's blurb summary to ``summary``; a document with a stage error
    goes to ``summary.failed`` with it."""
    from situate.contextual.contextualize import BlurbRecord
    from situate.contextual.document_blurbs import blurb_summary

    for key in stale:
        err = _stage_error(store, key)
        if err:
            summary.failed[key] = err
            continue
        stored = None if key in summary.failed else store.read_stage_if_any(key, "blurbs")
        if stored is None:  # its run failed as a whole, or it wrote no blurbs
            continue
        recs = [BlurbRecord(**{k: v for k, v in b.items() if k != "chunk_id"}) for b in stored["blurbs"]]
        summary.add_document(key, blurb_summary(recs))


def _name_stuck_documents(store, plan, summary: IngestSummary) -> None:
    """Documents the sensor gave up on (``MAX_RUN_ATTEMPTS`` failed runs): named with their last
    error while they still fail, cleared once ingested."""
    from situate.contextual.table_checks import record_stuck, stuck_documents

    stuck = stuck_documents(store)
    if not stuck:
        return
    left = {}
    for key, why in stuck.items():
        if key in plan.refs and key not in summary.failed and key not in plan.known_bad:
            continue  # ingested now (or unchanged and whole)
        left[key] = why
        if key in summary.failed:
            summary.failed[key] += f" (the sensor stopped asking for it after {why})"
    record_stuck(store, left)


def _add_api_cost(llm, usage0: dict, summary: IngestSummary) -> None:
    """The Anthropic API's usage since ``usage0`` and, where the model's rate is known, its cost."""
    from situate.pipelines.settings import check_environment, llm_price
    from situate.resources.models.anthropic_api import usage_cost_usd
    from situate.resources.models.llm import api_usage_since

    summary.api_usage = api_usage_since(usage0)
    price = llm_price(llm.resolved_model_id(), check_environment())
    if price is None:
        summary.cost_rates = "no rate known for this model: set SITUATE_LLM_PRICE_INPUT and _OUTPUT"
        return
    summary.cost_usd = usage_cost_usd(price, summary.api_usage)
    summary.cost_rates = f"${price.input}/${price.output} per million input/output tokens ({price.source})" + (
        ", Message Batches answers at half" if llm.api_batch else ""
    )


#: Largest ``-k`` (and ``--rerank``) a search takes: LanceDB limits are 64-bit, and a larger
#: number was a traceback.
MAX_K = 1_000_000
#: Longest query the service and the MCP tool take, in characters: the embedder reads 2,048
#: tokens of it at most (about 8,000 characters of English) and BM25 every word; from a network
#: caller a 1 MB query is refused, not tokenized.  ``import situate`` and the command line take
#: any length and cut it for the embedder with a warning.
MAX_QUERY_CHARS = 8000


def check_query(query: str, k: int, rerank: int | None) -> None:
    """Refuse a search's arguments before any model loads.

    Raises
    ------
    QueryError
        The query is empty or whitespace; ``k`` is under 1 or over :data:`MAX_K`; ``rerank`` is
        under 0 or over :data:`MAX_K`.
    """
    if not query or not query.strip():
        raise QueryError("empty query: give the words to search for")
    if k < 1:
        raise QueryError(f"-k must be at least 1, got {k}")
    if k > MAX_K:
        raise QueryError(f"-k must be at most {MAX_K:,}, got {k}")
    if rerank is not None and rerank > MAX_K:
        raise QueryError(f"--rerank must be at most {MAX_K:,}, got {rerank}")
    if rerank is not None and rerank < 0:
        raise QueryError(f"--rerank must be 0 (off) or more, got {rerank}")


def check_vector_width(store, embedder, width: int) -> None:
    """Refuse a query vector of ``width`` numbers that the table's vectors do not match.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        The table holds vectors of another width (an ingest with another embedder is under way,
        :meth:`situate.resources.store.store.Store.migration`, or the embedder setting changed).
    """
    from situate.pipelines.preflight import StartupError

    table_dim = store.table().schema.field("vector").type.list_size
    if width == table_dim:
        return
    migration = store.migration()
    under_way = (
        f" ({migration['documents_done']} documents embedded again, {migration['documents_waiting']} to go)"
        if migration
        else ""
    )
    raise StartupError(
        f"the table in {store.location} holds {table_dim}-wide vectors and the embedder "
        f"{embedder.resolved_model_id()} writes {width}-wide ones{under_way}: "
        "finish `situate ingest` with this embedder, or set SITUATE_EMBED_MODEL back"
    )


def code_query_vector(embedder, query_vector, wanted: bool = False) -> tuple:
    """``(the query's vector for code chunks or None, warnings)``: a code query map that is not
    where the install put it, or is damaged, is a warning naming it, and code chunks are compared
    with the plain vector (:meth:`situate.resources.models.llm.Embedder.code_query_vector`).
    ``wanted`` (``SITUATE_CODE_ADAPTER`` on) with no map for this embedder (another model, or one
    behind a server) is a warning too, not silence."""
    if wanted and not embedder.code_adapter:
        where = f"served at {embedder.server_url}" if embedder.server_url else "run in process"
        return None, [
            f"SITUATE_CODE_ADAPTER=1, but there is no code query map for the embedder "
            f"{embedder.resolved_model_id()} {where}: "
            "the map was learnt for bge-small-en-v1.5 run in process; code compared with the plain query vector"
        ]
    try:
        return embedder.code_query_vector(query_vector), []
    except FileNotFoundError as e:
        why = f"no code query map at {e.filename}"
    except (ValueError, OSError) as e:
        why = f"the code query map is not usable: {e}"
    return None, [f"{why}: code compared with the plain query vector (reinstall situate, or SITUATE_CODE_ADAPTER=0)"]


def search(query: str, k: int = 10, home: str | None = None, rerank: int | None = None):
    """Hybrid search of the data folder (see :func:`situate.resources.store.retrieval.hybrid_search`), then the
    first stage's top ``rerank`` reranked by the local cross-encoder, its order fused with the
    first stage's (:func:`situate.resources.models.reranker.rerank_hits`).

    Parameters
    ----------
    rerank : int or None
        Candidates reranked; ``None`` means ``SITUATE_RERANK_DEPTH`` or 0
        (:data:`situate.resources.models.reranker.SEARCH_RERANK_DEPTH`: no rerank).  About 0.06-0.08 s a candidate on 2
        CPU cores (``benchmarks/run.py --only rerank``).

    Returns
    -------
    (hits, warnings)
        At most ``k`` hits; warnings for an empty table, a query cut for the embedder, a query
        with no BM25 terms (stopwords only), ``k`` above the row count, a reranker not installed
        (the first stage's order is kept).

    Raises
    ------
    QueryError
        The query is empty or whitespace, ``k`` < 1 or ``rerank`` < 0.
    situate.pipelines.preflight.StartupError
        The data folder does not exist or is not a folder; ``SITUATE_RERANK_DEPTH`` is not a
        whole number ≥ 0; the table's vectors are not the embedder's width (an ingest with
        another embedder is under way, :meth:`situate.resources.store.store.Store.migration`).
    """
    from situate.pipelines.settings import check_environment, reranker_from_env, resources_from_env
    from situate.resources.models.reranker import rerank_hits
    from situate.resources.store.retrieval import hybrid_search

    check_query(query, k, rerank)
    if rerank is None:
        rerank = check_environment().rerank_depth

    from situate.resources.store.objects import normalize_home

    # this call's data folder, passed down: a search never changes the process environment, so
    # threads searching different folders never see each other's
    home = normalize_home(data_folder(home))
    check_readable_home(home)
    res = resources_from_env(plain=True, home=home)
    store = res["store"]
    rows = store.count_rows()
    if rows == 0:
        return [], [f"the table in {store.location} is empty: run `situate ingest PATH` first"]
    embedder = res["embedder"]
    vecs, n_cut = embedder.embed([query], embedder.query_prefix)
    check_vector_width(store, embedder, vecs.shape[1])
    code_vector, missing_map = code_query_vector(embedder, vecs[0], check_environment().code_adapter)
    hits, warnings = hybrid_search(store, vecs[0], query, max(k, rerank), code_vector=code_vector)
    warnings += missing_map
    if n_cut:
        warnings.append(
            f"the query is longer than the embedder's {embedder.n_ctx} tokens: "
            "its end was cut for the dense search (BM25 used all of it)"
        )
    if k > rows:
        warnings.append(f"-k {k} is more than the {rows} rows in the table: every row can be returned")
    if rerank > 0 and hits:
        try:
            hits = rerank_hits(reranker_from_env(), query, hits, rerank)
        except FileNotFoundError as e:  # the reranker is not installed: answer from the first stage
            warnings.append(
                f"no reranker at {e.filename}: first-stage order kept (run `situate models "
                "install`, or --rerank 0 to silence this)"
            )
    return hits[:k], warnings


def search_collections(
    query: str, collections: dict[str, str], k: int = 10, rerank: int | None = None, missing: list | None = None
):
    """Search several collections' data folders and fuse their hits by reciprocal rank fusion:
    each collection's ranking counts as one list (:func:`situate.resources.store.retrieval.rrf`,
    k = 60), since scores of different indexes are not comparable; each hit names its collection.

    Parameters
    ----------
    query : str
        What to look for, in words.
    collections : dict
        Collection name → data folder (a path or an object-store URI), searched in this order
        (ties of the fusion keep it).
    k, rerank : int
        As :func:`search`, for each collection and for the fused list.
    missing : list, optional
        When given, a collection whose data folder cannot be read (missing, not situate's, its
        store unreachable: :func:`check_readable_home`) is left out and its name appended here, and
        the others are searched; only when every one is missing does the first one's error stand.

    Returns
    -------
    (hits, warnings)
        At most ``k`` hits, ranks 1… and RRF scores; each warning prefixed with its collection.

    Raises
    ------
    QueryError
        No collection, or a name that is not a collection name; as :func:`search`.
    situate.pipelines.preflight.StartupError
        As :func:`search`, for the first data folder that fails (with ``missing``: the first one
        that fails otherwise, or the first missing one when all are).
    """
    from situate.assets.collection import NAME_PATTERN
    from situate.resources.store.retrieval import rrf

    if not collections:
        raise QueryError("no collection to search: give NAME=DATA_FOLDER")
    bad = [n for n in collections if not NAME_PATTERN.fullmatch(n)]
    if bad:
        raise QueryError(f"collection name {bad[0]!r}: use lower-case letters, digits and _")
    from situate.pipelines.preflight import StartupError
    from situate.resources.store.objects import normalize_home

    found, warnings, first = {}, [], None
    for name, home in collections.items():
        if missing is not None:
            try:
                check_readable_home(normalize_home(data_folder(home)))
            except StartupError as e:
                missing.append(name)
                first = first or e
                continue
        hits, said = search(query, k, home, rerank)
        warnings += [f"{name}: {w}" for w in said]
        found.update({(name, h.chunk_id): h for h in hits})
    if first is not None and len(missing) == len(collections):
        raise first
    rankings = [[f"{n}\0{c}" for (n, c) in found if n == name] for name in collections]
    out = []
    for rank, (key, score) in enumerate(rrf(rankings)[:k], 1):
        name, chunk_id = key.split("\0", 1)
        out.append(dataclasses.replace(found[(name, chunk_id)], rank=rank, score=score, collection=name))
    return out, warnings
