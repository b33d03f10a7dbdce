"""What an ingest prints: the progress line's rate and time left (real figures of a slow blurbs
stage), the short logger on a real in-process Dagster run, and Dagster's console log behind
``verbose`` (the ``situate ingest`` command itself: tests/test_removal_bound.py)."""

from __future__ import annotations

import logging

import dagster as dg

import situate.contextual.stage_runs as stage_runs
from situate.contextual.stage_runs import Progress, progress_line, rate_text

#: A slow blurbs stage: a summary a prose document on 2 cores, 153 chunks of 46 files in 19.5 min.
SLOW = (153, 1170.0)


def test_the_rate_has_two_significant_figures_where_one_decimal_place_read_all_as_0_1():
    assert f"{SLOW[0] / SLOW[1]:.1f}" == f"{153 / 1800:.1f}" == "0.1"  # the old format: one figure for both
    assert rate_text(*SLOW) == "0.13 chunks/s"
    assert rate_text(153, 1800.0) == "0.085 chunks/s"
    assert rate_text(93, 14.3) == "6.5 chunks/s"
    assert rate_text(93, 0.3) == "310 chunks/s"


def test_the_rate_is_that_since_the_previous_line_and_the_time_left_the_mean_a_document():
    ok = {f"d{i}": {"chunks": 1, "cached": 0} for i in range(10)}  # 10 one-chunk documents in 100 s
    first = progress_line("blurbs", 10, 46, 100.0, ok)
    assert first == "blurbs: 10/46 documents, 10 chunks (0 from the cache), 0.1 chunks/s, about 6 min 0 s left"
    ok |= {f"e{i}": {"chunks": 4, "cached": 0} for i in range(2)}  # then 8 chunks in 12 s
    line = progress_line("blurbs", 12, 46, 112.0, ok, since=(10, 100.0))
    assert "18 chunks (0 from the cache), 0.67 chunks/s" in line  # 8 / 12; the mean since the start: 0.16
    assert line.endswith(f"about {round(112.0 / 12 * 34) // 60} min {round(112.0 / 12 * 34) % 60} s left")
    # nothing finished since the last line: no rate rather than 0
    assert "chunks/s" not in progress_line("blurbs", 12, 46, 120.0, ok, since=(18, 112.0))


def test_progress_keeps_the_chunks_and_seconds_of_its_last_line(monkeypatch):
    now = [0.0]  # FAKE clock: the seconds of each line are chosen, the rate computed from them
    monkeypatch.setattr(stage_runs.time, "perf_counter", lambda: now[0])
    p = Progress("blurbs", 3, t0=0.0)
    now[0] = 40.0
    assert "2 chunks (0 from the cache), 0.05 chunks/s" in p.line(1, {"a": {"chunks": 2}})
    now[0] = 60.0
    ok = {"a": {"chunks": 2}, "b": {"chunks": 5}, "c": {"chunks": 5}}
    assert "12 chunks (0 from the cache), 0.5 chunks/s" in p.line(3, ok)  # 10 chunks in the last 20 s
    assert p.since == (12, 60.0)


def test_embeddings_entries_count_their_rows_and_cache_hits():
    ok = {"a": {"rows": 7, "from_cache": 3, "embedded": 4}, "b": {"rows": 5, "from_cache": 0, "embedded": 5}}
    assert progress_line("embeddings", 2, 2, 2.0, ok).startswith("embeddings: 2/2 documents, 12 chunks (3 from")


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
