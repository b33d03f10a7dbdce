"""What an in-process ingest run prints: one short line per progress step (Dagster's
``situate_progress`` logger, below), or Dagster's own console log (``--verbose``).

Each stage logs a progress line through ``context.log.info(line, extra={PROGRESS_RECORD: True})``
(:mod:`situate.assets.per_document`); the short logger prints those, and the first line of every
warning and error, to standard error, and nothing else.  Dagster's console logger prints every
record of level INFO and above as ``<time> - dagster - <LEVEL> - <job> - <run id> - <step> -
<message>`` (about 200 characters a line).

Examples
--------
>>> import logging
>>> r = logging.makeLogRecord({"levelno": logging.INFO, PROGRESS_RECORD: True,
...     "dagster_meta": {"orig_message": "blurbs: 2/8 documents, 0.4 chunks/s, about 1 min 30 s left"}})
>>> short_line(r)
'situate: blurbs: 2/8 documents, 0.4 chunks/s, about 1 min 30 s left'
"""

from __future__ import annotations

import logging
import sys

import dagster as dg

from situate.contextual.stage_runs import PROGRESS_RECORD

#: The name of the short logger in a run's config (``loggers:``).
SHORT_LOGGER = "situate_progress"


def short_line(record: logging.LogRecord) -> str | None:
    """The line the short logger prints for ``record``, or None for none: ``situate: <message>``
    for a progress record, ``situate: warning: <first line>`` and ``situate: error: <first
    line>`` for a warning or an error (a traceback's lines stay in Dagster's event log, which
    ``--verbose`` prints); None for any other record (a document's own INFO lines).

    The message is Dagster's ``orig_message`` (the text the asset logged) where the record has
    Dagster's metadata, else the record's own message.
    """
    meta = getattr(record, "dagster_meta", None)
    text = meta.get("orig_message") if isinstance(meta, dict) else None
    text = str(text if text is not None else record.getMessage())
    first = text.strip().splitlines()[0] if text.strip() else ""
    if record.levelno >= logging.ERROR:
        return f"situate: error: {first}"
    if record.levelno >= logging.WARNING:
        return f"situate: warning: {first}"
    if getattr(record, PROGRESS_RECORD, False):
        return f"situate: {first}"
    return None


class ShortLineHandler(logging.StreamHandler):
    """A :class:`logging.StreamHandler` that writes :func:`short_line` of each record it is given
    and drops the records that have none."""

    def emit(self, record: logging.LogRecord) -> None:
        line = short_line(record)
        if line is None:
            return
        try:
            self.stream.write(line + self.terminator)
            self.flush()
        except Exception:  # noqa: BLE001 - logging's own policy: a broken stream never stops the run
            self.handleError(record)


@dg.logger(description="One short line per progress step, warning and error, to standard error.")
def situate_progress(init_context: dg.InitLoggerContext) -> logging.Logger:
    """The short logger: a :class:`logging.Logger` of level INFO with one :class:`ShortLineHandler`
    on the standard error of the moment the run starts (the ``situate`` command's escaping stream,
    :class:`situate.pipelines.output.EscapingStream`)."""
    log = logging.Logger(f"situate.progress.{init_context.run_id}", level=logging.INFO)
    log.addHandler(ShortLineHandler(sys.stderr))
    return log


def with_progress_logger(job: dg.JobDefinition) -> dg.JobDefinition:
    """``job`` with Dagster's console logger and :func:`situate_progress` to choose from in its run
    config (:func:`run_config`)."""
    return job.with_logger_defs({**dg.default_loggers(), **(job.loggers or {}), SHORT_LOGGER: situate_progress})


def run_config(verbose: bool) -> dict:
    """The run config of an in-process ingest or index run: Dagster's console log at INFO when
    ``verbose``, else only the short logger."""
    if verbose:
        return {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
    return {"loggers": {SHORT_LOGGER: {}}}
