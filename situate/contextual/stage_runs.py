"""The bookkeeping of a stage run over many documents, with no Dagster in it: when a progress line
is due and what it says, how the run's documents are cut into groups that commit together, and the
table of documents a stage's metadata shows (:mod:`situate.assets.per_document` runs the stages)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: The ``extra`` key that marks a progress line in a run's log (``context.log.info(line,
#: extra={PROGRESS_RECORD: True})``): the ``situate`` command's short logger prints these lines
#: (:mod:`situate.pipelines.progress_log`) and leaves a document's own lines to ``--verbose``.
PROGRESS_RECORD = "situate_progress"


def rate_text(items: int, seconds: float, unit: str = "chunks") -> str:
    """``items`` over ``seconds`` as a rate with two significant figures below 10 a second
    (``0.13 chunks/s``; one decimal place read 0.05 to 0.149 as the same "0.1") and whole
    numbers above.

    >>> rate_text(12, 90.0), rate_text(93, 0.4), rate_text(7, 2.0)
    ('0.13 chunks/s', '232 chunks/s', '3.5 chunks/s')
    """
    per_s = items / seconds
    return f"{per_s:.0f} {unit}/s" if per_s >= 10 else f"{per_s:.2g} {unit}/s"


def stage_chunks(ok: dict[str, dict]) -> tuple[int, int]:
    """``(chunks, from the cache)`` of a stage's finished documents: each entry's ``chunks`` (its
    ``rows`` in the embeddings stage, which names them so) and ``cached`` (``from_cache``)."""
    entries = [v for v in ok.values() if isinstance(v, dict)]
    chunks = sum(v.get("chunks", v.get("rows", 0)) or 0 for v in entries)
    return chunks, sum(v.get("cached", v.get("from_cache", 0)) or 0 for v in entries)


def progress_line(
    stage: str, done: int, total: int, seconds: float, ok: dict[str, dict], since: tuple[int, float] = (0, 0.0)
) -> str:
    """One line of a run's progress after ``done`` of ``total`` documents (``seconds`` since the
    stage started): chunks and cache hits where the stage counts them, the rate and an estimate of
    the time left (the mean time a document so far times the documents left).

    The rate is that of the chunks finished since the previous line, ``since`` = ``(chunks,
    seconds)`` at that line (the stage's start for the first): the mean since the start moved
    less and less as a long stage went on, so a stage that sped up or slowed down showed the same
    rate for its whole run.

    >>> progress_line("blurbs", 2, 8, 30.0, {"a": {"chunks": 5, "cached": 1}, "b": {"chunks": 7, "cached": 0}})
    'blurbs: 2/8 documents, 12 chunks (1 from the cache), 0.4 chunks/s, about 1 min 30 s left'
    >>> progress_line("blurbs", 3, 8, 40.0, {"a": {"chunks": 12}, "b": {"chunks": 8}}, since=(12, 30.0))
    'blurbs: 3/8 documents, 20 chunks (0 from the cache), 0.8 chunks/s, about 1 min 7 s left'
    """
    chunks, cached = stage_chunks(ok)
    left = round(seconds / max(1, done) * (total - done))
    eta = f"{left // 60} min {left % 60} s" if left >= 60 else f"{left} s"
    new, span = chunks - since[0], seconds - since[1]
    rate = f", {rate_text(new, span)}" if new > 0 and span > 0 else ""
    what = f", {chunks} chunks ({cached} from the cache){rate}" if chunks else ""
    return f"{stage}: {done}/{total} documents{what}, about {eta} left"


#: Seconds between two progress lines of a stage: each line is an event in the run's event log
#: (about 3 ms to store in Dagster's SQLite storage, measured here), and a line a document was a
#: quarter of the stage's time over thousands of small documents.
PROGRESS_EVERY_S = 10.0
#: Runs of at most this many documents log each document's own lines; a larger run has each
#: document's figures in the step's metadata table and logs its progress every
#: :data:`PROGRESS_EVERY_S` seconds (failures are always logged).
PER_DOCUMENT_LINES = 20


class Progress:
    """When a stage over ``total`` documents (started at ``t0``, ``time.perf_counter()``) logs a
    progress line: after the first document, then every :data:`PROGRESS_EVERY_S` seconds and at
    the last one; never for a run of one document.

    >>> p = Progress("chunks", 3, t0=time.perf_counter())
    >>> p.line(1, {}).startswith("chunks: 1/3 documents"), p.line(2, {}), p.line(3, {})[:21]
    (True, '', 'chunks: 3/3 documents')
    """

    def __init__(self, stage: str, total: int, t0: float):
        self.stage, self.total, self.t0, self.last = stage, total, t0, None
        self.since = (0, 0.0)  # (chunks, seconds since t0) at the last line

    def line(self, done: int, ok: dict[str, dict]) -> str:
        now = time.perf_counter()
        due = self.last is None or now - self.last >= PROGRESS_EVERY_S or done >= self.total
        if self.total <= 1 or not due:
            return ""
        self.last = now
        out = progress_line(self.stage, done, self.total, now - self.t0, ok, self.since)
        self.since = (stage_chunks(ok)[0], now - self.t0)
        return out


#: Documents a stage's metadata lists in its tables (documents, problems): Dagster copies a
#: multi-partition step's metadata into each partition's materialization event, so a table of 500
#: rows made each of CoSQA's 6,267 x 5 events 30-90 KB (the ingest slowed to 15 ms an event and
#: its event log grew to gigabytes); a larger run's entries go to a file
#: (:func:`situate.assets.per_document.write_report`).
TABLE_ROWS = 20


def documents_table(ok: dict[str, dict]) -> str:
    """A Markdown table of at most :data:`TABLE_ROWS` documents' entries (plain values)."""
    cols = sorted({c for v in ok.values() for c in v if not isinstance(v[c], (dict, list))})
    rows = ["| document | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for key, v in list(ok.items())[:TABLE_ROWS]:
        rows.append(f"| {key} | " + " | ".join(str(v.get(c, "")) for c in cols) + " |")
    if len(ok) > TABLE_ROWS:
        rows.append(f"\n{len(ok) - TABLE_ROWS} more documents: see every_document")
    return "\n".join(rows)


#: Documents a group of :func:`situate.assets.per_document.for_each_group` holds at most: 64
#: one-chunk documents make one commit of the table (and of the embedding cache) instead of 64; a
#: group holds its documents' locks (on an object store, a lease and its renewing thread each)
#: while it works.
GROUP_DOCUMENTS = 64
#: Chunks a group takes at most, so a group of large documents holds its locks no longer than a
#: few documents would (512 chunks: about 35 s of bge-small on 2 cores at 15 chunks/s).
GROUP_CHUNKS = 512


def document_groups(keys: list[str], chunks_of: Callable[[str], int]) -> list[list[str]]:
    """``keys`` cut, in order, into groups of at most :data:`GROUP_DOCUMENTS` documents and
    :data:`GROUP_CHUNKS` chunks (a larger document makes a group of its own).

    >>> document_groups(list("abcde"), {"a": 300, "b": 300, "c": 1, "d": 2000, "e": 1}.get)
    [['a'], ['b', 'c'], ['d'], ['e']]
    """
    groups: list[list[str]] = []
    size = 0
    for key in keys:
        n = max(1, chunks_of(key) or 1)
        if groups and len(groups[-1]) < GROUP_DOCUMENTS and size + n <= GROUP_CHUNKS:
            groups[-1].append(key)
            size += n
        else:
            groups.append([key])
            size = n
    return groups
