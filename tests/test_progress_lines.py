"""What an ingest prints: the progress line's rate and time left (real figures of a slow blurbs
stage; the time left of a stage that mixes prose and code), documents named by their paths, the
summary's lines, the short logger on a real in-process Dagster run, and Dagster's console log
behind ``verbose`` (the ``situate ingest`` command itself: tests/test_removal_bound.py)."""

from __future__ import annotations

import logging

import dagster as dg

import situate.contextual.stage_runs as stage_runs
from situate.contextual.stage_runs import (
    Progress,
    document_kind,
    document_name,
    duration_text,
    final_line,
    progress_line,
    rate_text,
    time_left,
)

#: A slow blurbs stage: a summary a prose document on 2 cores, 153 chunks of 46 files in 19.5 min.
SLOW = (153, 1170.0)


def test_the_rate_has_two_significant_figures_where_one_decimal_place_read_all_as_0_1():
    assert f"{SLOW[0] / SLOW[1]:.1f}" == f"{153 / 1800:.1f}" == "0.1"  # the old format: one figure for both
    assert rate_text(*SLOW) == "0.13 chunks/s"
    assert rate_text(153, 1800.0) == "0.085 chunks/s"
    assert rate_text(93, 14.3) == "6.5 chunks/s"
    assert rate_text(93, 0.3) == "310 chunks/s"


def test_the_rate_is_that_since_the_previous_line():
    ok = {f"d{i}": {"chunks": 1, "cached": 0} for i in range(10)}  # 10 one-chunk documents in 100 s
    first = progress_line("blurbs", 10, 46, 100.0, ok, left="about 6 min 0 s left")
    assert first == "blurbs: 10/46 documents, 10 chunks (0 from the cache), 0.1 chunks/s, about 6 min 0 s left"
    ok |= {f"e{i}": {"chunks": 4, "cached": 0} for i in range(2)}  # then 8 chunks in 12 s
    line = progress_line("blurbs", 12, 46, 112.0, ok, since=(10, 100.0))
    assert line == "blurbs: 12/46 documents, 18 chunks (0 from the cache), 0.67 chunks/s"  # 8 / 12, not 18 / 112
    # nothing finished since the last line: no rate rather than 0
    assert "chunks/s" not in progress_line("blurbs", 12, 46, 120.0, ok, since=(18, 112.0))
    # documents that failed here or at an earlier stage are counted, and said so
    assert progress_line("chunks", 5, 9, 1.0, {}, failed=2, skipped=1) == (
        "chunks: 5/9 documents (2 failed, 1 failed at an earlier stage)"
    )


#: A mixed stage as the click checkout's: prose documents (an LLM summary each, about 10 s on 2
#: cores) and code (structure: no LLM call, about 0.1 s).
PROSE, CODE = ["docs_.a.md", "docs_.b.md"], [f"src_.m{i}.py" for i in range(50)]


def test_the_time_left_comes_from_each_kinds_own_rate():
    # one prose document (10 s) and 10 code documents (1 s) done: 1 prose and 40 code left
    timed = {"prose": (1, 10.0), "code": (10, 1.0)}
    assert time_left({"prose": 1, "code": 40}, timed) == "about 14 s left"  # 10 + 40 x 0.1
    assert round(11.0 / 11 * 41) == 41  # what the mean of all documents so far said
    # only code is left: its own rate, not the prose's
    assert time_left({"prose": 0, "code": 40}, timed) == "about 4.0 s left"
    # two documents at once through a server: the seconds of each kind over the documents in flight
    assert time_left({"prose": 1, "code": 40}, timed, in_flight=2) == "about 7.0 s left"
    assert time_left({"prose": 30, "code": 400}, timed) == "about 5 min 40 s left"  # 300 + 40
    assert time_left({"code": 3}, {"code": (10, 0.1)}) == "less than 0.1 s left"  # not "about 0.0 s"


def test_a_kind_with_nothing_done_is_not_guessed():
    code_only = {"code": (10, 1.0)}  # 0.1 s a code document
    # the code's time is a floor: the prose's is unknown, and the code's rate would be 100 times off
    assert time_left({"prose": 2, "code": 40}, code_only) == "at least 4.0 s left (no prose done yet)"
    assert time_left({"prose": 1, "code": 0}, code_only) == "time left unknown (no prose done yet)"
    assert time_left({"prose": 2, "code": 0}, {"prose": (0, 0.0)}) == "time left unknown (no prose done yet)"
    assert time_left({"prose": 2, "corpus": 3}, {}) == "time left unknown (no prose or corpus done yet)"
    assert time_left({"prose": 1, "code": 3}, {"prose": (1, 10.0)}) == "at least 10 s left (no code done yet)"
    assert time_left({"prose": 1, "code": 3}, {"code": (10, 0.1)}) == "time left unknown (no prose done yet)"
    assert time_left({"prose": 0}, {"prose": (2, 20.0)}) == ""  # nothing left


def test_progress_times_each_kind_of_document_and_ends_with_the_stage_count(monkeypatch):
    now = [0.0]  # FAKE clock: each document's seconds are chosen
    monkeypatch.setattr(stage_runs.time, "perf_counter", lambda: now[0])
    p = Progress("blurbs", [PROSE[0], *CODE[:25], PROSE[1], *CODE[25:]], t0=0.0)
    ok = {}
    for key, seconds in [(PROSE[0], 10.0)] + [(k, 0.1) for k in CODE[:10]]:
        now[0] += seconds
        ok[key] = {"chunks": 1}
        p.end(key, seconds)
    now[0] = 10.0  # no line asked for yet: the first is due
    assert p.done == 11
    # 1 prose left at 10 s and 40 code at 0.1 s; the mean of all 11 documents said 41 s
    assert p.line(ok) == "blurbs: 11/52 documents, 11 chunks (0 from the cache), 1.1 chunks/s, about 14 s left"
    assert p.line(ok) == ""  # the next is due 10 s later
    for key in [*CODE[10:25], PROSE[1], *CODE[25:]]:
        p.end(key, 0.1)
    now[0] = 182.0
    assert p.line(ok) == ""  # the last document: the final line says it
    final = p.final(ok, failed=1)
    assert final == "blurbs: 52/52 documents (1 failed), 11 chunks (0 from the cache), done in 3 min 2 s"


def test_progress_says_what_it_cannot_time_yet(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(stage_runs.time, "perf_counter", lambda: now[0])
    p = Progress("blurbs", [*CODE[:3], *PROSE], t0=0.0)
    p.end(CODE[0], 0.1)
    now[0] = 0.1
    assert p.line({}) == "blurbs: 1/5 documents, at least 0.2 s left (no prose done yet)"
    p.end(CODE[1], 0.0, ok=False)  # a failure does not time its kind
    assert p.timed == {"code": (1, 0.1)} and p.done == 2
    assert p.final({}, skipped=5) == ""  # every document failed before: the earlier stage said so


def test_progress_keeps_the_chunks_and_seconds_of_its_last_line(monkeypatch):
    now = [0.0]  # FAKE clock: the seconds of each line are chosen, the rate computed from them
    monkeypatch.setattr(stage_runs.time, "perf_counter", lambda: now[0])
    p = Progress("blurbs", ["a", "b", "c", "d"], t0=0.0)
    now[0] = 40.0
    p.end("a", 40.0)
    assert "2 chunks (0 from the cache), 0.05 chunks/s" in p.line({"a": {"chunks": 2}})
    now[0] = 60.0
    p.end("b", 10.0)
    p.end("c", 10.0)
    ok = {"a": {"chunks": 2}, "b": {"chunks": 5}, "c": {"chunks": 5}}
    assert "12 chunks (0 from the cache), 0.5 chunks/s" in p.line(ok)  # 10 chunks in the last 20 s
    assert p.since == (12, 60.0)


def test_embeddings_entries_count_their_rows_and_cache_hits():
    ok = {"a": {"rows": 7, "from_cache": 3, "embedded": 4}, "b": {"rows": 5, "from_cache": 0, "embedded": 5}}
    assert final_line("embeddings", 2, 2.0, ok).startswith("embeddings: 2/2 documents, 12 chunks (3 from")


def test_lines_name_documents_by_path_and_say_times_as_people_do():
    assert document_name("tests_.test__utils_.____init____.py") == "tests/test_utils/__init__.py"
    assert document_name("(bm25 index)") == "(bm25 index)"  # no document key: itself
    assert document_name("a_ZZ") == "a_ZZ"  # a malformed escape (PartitionKeyError): the key itself
    kinds = [document_kind(k) for k in ("src_.click_.core.py", "README", "htmlcov_.index.html", "c.json_23doc__1")]
    assert kinds == ["code", "prose", "prose", "corpus"]
    assert [duration_text(s) for s in (0.04, 9.94, 10.0, 59.4, 60.0, 182.0, 3599.0, 7450.0)] == [
        "0.0 s",
        "9.9 s",
        "10 s",
        "59 s",
        "1 min 0 s",
        "3 min 2 s",
        "59 min 59 s",
        "2 h 4 min",
    ]


def test_the_summary_names_documents_by_path_and_says_llm_calls_and_seconds_a_call():
    from situate.pipelines.operations import IngestSummary

    s = IngestSummary(documents=190, ingested=187, unchanged=0, removed=1, removed_paths=["docs/old.md"])
    s.model_calls, s.llm_seconds, s.table_rows, s.seconds = 96, 2592.0, 1234, 3050.0
    s.failed = {
        "tests_.test__utils_.____init____.py": "document: tests/test_utils/__init__.py: empty (0 bytes)",
        "(bm25 index)": "run x failed",
    }
    lines = s.lines()
    assert lines[0] == "documents: 190 (187 ingested, 0 unchanged, 1 removed, 2 failed)"
    assert "table rows: 1234; 96 LLM calls, 27.0 s a call (43 min 12 s in all); wall time 50 min 50 s" in lines
    assert lines[-3:] == [
        "removed: docs/old.md",
        "FAILED tests/test_utils/__init__.py: document: empty (0 bytes)",
        "FAILED (bm25 index): run x failed",
    ]
    assert not any("blurbs/s" in line or "tests_." in line for line in lines)
    assert "table rows: 0; no LLM call; wall time 1.5 s" in IngestSummary(seconds=1.5).lines()


def test_the_summary_counts_skipped_files_by_reason_and_names_all_but_the_ignored():
    from situate.pipelines.operations import SHOWN_PATHS, IngestSummary

    skipped = {f"htmlcov/p{i}.html": "ignored by .gitignore" for i in range(2345)}
    skipped |= {f"pkg{i}/__init__.py": "empty (0 bytes)" for i in (3, 1, 2)}
    skipped |= {"logo.png": "unknown format"}
    skipped |= {f"img/{i:02}.png": "unknown format" for i in range(SHOWN_PATHS + 4)}
    s = IngestSummary(documents=5, ingested=5, skipped=skipped)
    lines = s.lines()
    assert lines[0] == "documents: 5 (5 ingested, 0 unchanged, 0 removed, 0 failed; 2,373 files skipped)"
    shown = ", ".join(f"img/{i:02}.png" for i in range(SHOWN_PATHS))
    assert lines[-3:] == [
        "skipped 2,345 files, ignored by .gitignore",  # thousands: counted, not named
        f"skipped 25 files, unknown format: {shown} and 5 more (the --json summary lists them)",
        "skipped 3 files, empty (0 bytes): pkg1/__init__.py, pkg2/__init__.py, pkg3/__init__.py",
    ]
    assert s.failed == {}  # a skipped file is no failure (the exit code reads ``failed``)
    assert IngestSummary().skipped == {} and not IngestSummary().skipped_lines()


def test_the_ingests_own_lines_name_documents_by_path():
    from types import SimpleNamespace

    from situate.pipelines.operations import plan_line, run_line

    keys = ["docs_.index.md", "src_.click_.core.py", "tests_.test__utils_.____init____.py"]
    assert run_line(keys) == "run over 3 documents: docs/index.md … tests/test_utils/__init__.py"
    assert run_line(keys[2:]) == "run over 1 document: tests/test_utils/__init__.py"
    plan = SimpleNamespace(refs=dict.fromkeys(keys), added=keys[:1], stale=keys[:2], fresh=keys[2:], removed=[])
    plan.known_bad = {"docs_.blob.md": "binary content"}
    assert plan_line(plan, "/src/click") == (
        "3 documents in /src/click; 1 new, 2 to ingest, 1 unchanged, 0 removed, "
        "1 failed before and unchanged since (not retried)"  # not "1 bad and unchanged since"
    )


class _Context:
    """A FAKE Dagster context: the run's partition keys and a logger that keeps its lines."""

    has_partition_key_range, has_partition_key = True, False

    def __init__(self, keys):
        self.partition_keys, self.lines = keys, []
        self.log = self

    def info(self, line, extra=None):
        self.lines.append(("info", line))

    def error(self, line):
        self.lines.append(("error", line))

    debug = warning = info

    @property
    def run(self):
        raise RuntimeError("no run")


def test_a_stage_names_its_failures_by_path_and_ends_with_its_count(tmp_path):
    from situate.assets.per_document import for_each_document, for_each_group
    from situate.resources.documents.reading import DocumentError
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    empty = "tests_.test__utils_.____init____.py"

    def work(key):
        if key == empty:
            raise DocumentError("tests/test_utils/__init__.py", "empty (0 bytes)")
        return {"chunks": 2}

    ctx = _Context([empty, "docs_.a.md", "src_.b.py"])
    report = for_each_document(ctx, store, "chunks", work)
    assert list(report.failed) == [empty]  # the key stays in Dagster's figures
    errors = [line for level, line in ctx.lines if level == "error"]
    assert errors == ["chunks [1/3] tests/test_utils/__init__.py: empty (0 bytes)"]  # the path said once
    last = ctx.lines[-1][1]
    assert last.startswith("chunks: 3/3 documents (1 failed), 4 chunks (0 from the cache), done in ")
    ctx = _Context(["docs_.a.md", "src_.b.py"])
    for_each_group(ctx, store, "embeddings", lambda k: k, lambda group: {k: {"rows": 1} for k in group})
    assert ctx.lines[-1][1].startswith("embeddings: 2/2 documents, 2 chunks (0 from the cache), done in ")


def _job() -> dg.JobDefinition:
    """A real one-asset job that logs as a stage does: a progress line, a document's own line, a
    warning and an error with a traceback's lines."""
    from situate.assets.per_document import log_progress

    @dg.asset
    def stage(context):
        log_progress(
            context, "blurbs: 2/8 documents, 12 chunks (1 from the cache), 0.4 chunks/s, about 1 min 30 s left"
        )
        context.log.info("blurbs a.md: 5 chunks, one summary")
        context.log.warning("embeddings: 3 of 12 inputs cut to the embedder's 512 tokens")
        context.log.error("blurbs b.md: ValueError: bad\nTraceback (most recent call last):\n  File x")

    return dg.Definitions(assets=[stage]).resolve_implicit_global_asset_job_def()


def test_the_short_logger_prints_progress_warnings_and_errors_and_verbose_prints_dagsters_log(capsys):
    from situate.pipelines.operations import _execute

    instance = dg.DagsterInstance.ephemeral()
    assert _execute(_job(), instance, verbose=False).success
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "situate: blurbs: 2/8 documents, 12 chunks (1 from the cache), 0.4 chunks/s, about 1 min 30 s left",
        "situate: warning: embeddings: 3 of 12 inputs cut to the embedder's 512 tokens",
        "situate: error: blurbs b.md: ValueError: bad",
    ]
    assert _execute(_job(), instance, verbose=True).success
    err = capsys.readouterr().err
    dagster_lines = [line for line in err.splitlines() if " - dagster - " in line]
    assert any(" - INFO - " in line and line.endswith("blurbs a.md: 5 chunks, one summary") for line in dagster_lines)
    assert any(" - WARNING - " in line and "cut to the embedder" in line for line in dagster_lines)
    assert "situate: " not in err
    assert min(len(line) for line in dagster_lines) > 100  # Dagster's format: time, level, job, run id, step


def test_short_line_of_a_record_without_dagsters_metadata():
    from situate.pipelines.progress_log import short_line

    plain = logging.makeLogRecord({"levelno": logging.INFO, "msg": "a document's own line"})
    assert short_line(plain) is None
    marked = logging.makeLogRecord({"levelno": logging.INFO, "msg": "chunks: 1/2 documents", "situate_progress": True})
    assert short_line(marked) == "situate: chunks: 1/2 documents"


def test_every_command_that_ingests_takes_verbose():
    from situate.pipelines.cli import _parser

    parser = _parser()
    for argv in (["ingest", "d"], ["sync", "docs"], ["eval"], ["demo"]):
        assert parser.parse_args([*argv, "--verbose"]).verbose is True, argv
        assert parser.parse_args(argv).verbose is False, argv
