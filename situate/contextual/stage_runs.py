"""The bookkeeping of a stage run over many documents, with no Dagster in it: when a progress line
is due and what it says (each document named by its path, the time left from each kind's own
rate, the stage's final count), how the run's documents are cut into groups that commit together,
and the table of documents a stage's metadata shows (:mod:`situate.assets.per_document` runs the
stages)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import PurePosixPath

from situate.resources.documents.keys import PartitionKeyError, decode_key
from situate.resources.documents.reading import format_of

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


def document_name(key: str) -> str:
    """The path a user knows document ``key`` by (:func:`situate.resources.documents.keys.decode_key`:
    ``tests/test_utils/__init__.py`` for ``tests_.test__utils_.____init____.py``), or ``key``
    itself where it is no document key (``(bm25 index)``, a key registered by hand).  The key stays
    in Dagster (partitions, metadata, tags); every line a user reads names the path.

    >>> document_name("tests_.test__utils_.____init____.py"), document_name("(bm25 index)")
    ('tests/test_utils/__init__.py', '(bm25 index)')
    """
    try:
        return decode_key(key)
    except PartitionKeyError:
        return key


def named(key: str, reason: str) -> str:
    """``<path>: <reason>`` for document ``key`` (:func:`document_name`), the path said once where
    the reason already starts with it, after its stage's name or not (a
    :class:`situate.resources.errors.DocumentError` names its file).

    >>> named("tests_.a.py", "document: tests/a.py: empty (0 bytes)"), named("b.md", "ValueError: bad")
    ('tests/a.py: document: empty (0 bytes)', 'b.md: ValueError: bad')
    """
    name = document_name(key)
    return f"{name}: " + re.sub(rf"^((?:\w+: )?){re.escape(name)}: ", r"\1", reason, count=1)


def document_kind(key: str) -> str:
    """The kind of document ``key`` names, told from its path alone (a document left is not read
    to estimate its time): ``code`` (a code file by its name,
    :func:`situate.resources.documents.reading.format_of`), ``corpus`` (an entry of a corpus
    file, ``corpus.json#doc_1``: code or prose by its text) or ``prose``.  The context policy
    (:mod:`situate.contextual.policy`) gives each kind its own context, so each costs its own time:
    under the defaults a prose document gets an LLM call and code none.

    >>> [document_kind(k) for k in ("src_.click_.core.py", "docs_.index.md", "c.json_23doc__1", "Makefile")]
    ['code', 'prose', 'corpus', 'code']
    """
    path = document_name(key)
    if "#" in path and path.split("#", 1)[0].lower().endswith(".json"):
        return "corpus"
    return "code" if format_of(PurePosixPath(path)) == "code" else "prose"


def duration_text(seconds: float) -> str:
    """``seconds`` as a person says it: one decimal place under 10 s, whole seconds under a
    minute, minutes and seconds under an hour, then hours and minutes.

    >>> duration_text(0.34), duration_text(42.4), duration_text(182), duration_text(7450)
    ('0.3 s', '42 s', '3 min 2 s', '2 h 4 min')
    """
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    return f"{s // 60} min {s % 60} s" if s < 3600 else f"{s // 3600} h {s % 3600 // 60} min"


def time_left(left: dict[str, int], timed: dict[str, tuple[int, float]], in_flight: int = 1) -> str:
    """The time a stage has left, from each kind's own rate (:func:`document_kind`).

    A kind's documents left cost the mean seconds of those of its kind done so far: with prose at
    an LLM call each (about 10 s on 2 cores) and code at none (0.1 s) in one stage, the mean of all
    documents so far said "about 124 min left" for a stage of a few minutes.  A kind with none done
    yet has no time of its own, and another kind's would be wrong a hundredfold either way, so it
    is not guessed: the time of the kinds timed is said as a floor ("at least"), or, where that is
    under 0.1 s or there is none, the time left is unknown.  With ``in_flight`` documents worked on
    at once, the sum is divided by ``in_flight``.  ``""`` when no document is left.

    Parameters
    ----------
    left : dict
        Kind → documents of that kind not finished yet.
    timed : dict
        Kind → ``(documents, seconds)`` of those of that kind finished so far.
    in_flight : int
        Documents worked on at once.

    Examples
    --------
    Two prose documents at 10 s and 50 code documents at 0.1 s, one prose and 10 code done:

    >>> time_left({"prose": 1, "code": 40}, {"prose": (1, 10.0), "code": (10, 1.0)})
    'about 14 s left'
    >>> time_left({"prose": 2, "code": 40}, {"code": (10, 10.0)}), time_left({"prose": 2, "code": 40}, {})
    ('at least 40 s left (no prose done yet)', 'time left unknown (no prose or code done yet)')
    """
    known = {k: n for k, n in left.items() if n > 0 and timed.get(k, (0, 0.0))[0] > 0}
    untimed = " or ".join(k for k, n in left.items() if n > 0 and k not in known)
    seconds = sum(timed[k][1] / timed[k][0] * n for k, n in known.items()) / max(1, in_flight)
    if untimed:
        floor = f"at least {duration_text(seconds)} left" if seconds >= 0.05 else "time left unknown"
        return f"{floor} (no {untimed} done yet)"
    if not known:
        return ""
    return f"about {duration_text(seconds)} left" if seconds >= 0.05 else "less than 0.1 s left"


def _counts_text(chunks: int, cached: int, failed: int, skipped: int) -> str:
    """The figures after a stage line's ``done/total documents``: failures and documents skipped
    (an earlier stage failed them), then chunks and cache hits where the stage counts them."""
    problems = [f"{failed} failed"] if failed else []
    problems += [f"{skipped} failed at an earlier stage"] if skipped else []
    out = f" ({', '.join(problems)})" if problems else ""
    return out + (f", {chunks} chunk{'' if chunks == 1 else 's'} ({cached} from the cache)" if chunks else "")


def progress_line(
    stage: str,
    done: int,
    total: int,
    seconds: float,
    ok: dict[str, dict],
    since: tuple[int, float] = (0, 0.0),
    left: str = "",
    failed: int = 0,
    skipped: int = 0,
) -> str:
    """One line of a run's progress after ``done`` of ``total`` documents finished (``seconds``
    since the stage started; ``failed`` and ``skipped`` of them did not make it): chunks and
    cache hits where the stage counts them, the rate, and the time left (``left``, from
    :func:`time_left`).

    The rate is that of the chunks finished since the previous line, ``since`` = ``(chunks,
    seconds)`` at that line (the stage's start for the first): the mean since the start moved
    less and less as a long stage went on, so a stage that sped up or slowed down showed the same
    rate for its whole run.

    >>> progress_line("blurbs", 2, 8, 30.0, {"a": {"chunks": 5, "cached": 1}, "b": {"chunks": 7}}, left="about 2 s")
    'blurbs: 2/8 documents, 12 chunks (1 from the cache), 0.4 chunks/s, about 2 s'
    >>> progress_line("blurbs", 3, 8, 40.0, {"a": {"chunks": 12}, "b": {"chunks": 8}}, since=(12, 30.0), failed=1)
    'blurbs: 3/8 documents (1 failed), 20 chunks (0 from the cache), 0.8 chunks/s'
    """
    chunks, cached = stage_chunks(ok)
    new, span = chunks - since[0], seconds - since[1]
    rate = f", {rate_text(new, span)}" if new > 0 and span > 0 else ""
    what = _counts_text(chunks, cached, failed, skipped) + (rate if chunks else "")
    return f"{stage}: {done}/{total} documents{what}" + (f", {left}" if left else "")


def final_line(stage: str, total: int, seconds: float, ok: dict[str, dict], failed: int = 0, skipped: int = 0) -> str:
    """The line that ends a stage over ``total`` documents: how many finished, failed and were
    skipped, its chunks and the time it took.

    >>> final_line("blurbs", 190, 182.0, {"a": {"chunks": 1200, "cached": 20}}, failed=2, skipped=1)[:68]
    'blurbs: 190/190 documents (2 failed, 1 failed at an earlier stage), '
    >>> final_line("blurbs", 190, 182.0, {"a": {"chunks": 1200, "cached": 20}})
    'blurbs: 190/190 documents, 1200 chunks (20 from the cache), done in 3 min 2 s'
    """
    chunks, cached = stage_chunks(ok)
    what = _counts_text(chunks, cached, failed, skipped)
    return f"{stage}: {total}/{total} documents{what}, done in {duration_text(seconds)}"


#: Seconds between two progress lines of a stage: each line is an event in the run's event log
#: (about 3 ms to store in Dagster's SQLite storage, measured here), and a line a document was a
#: quarter of the stage's time over thousands of small documents.
PROGRESS_EVERY_S = 10.0
#: Runs of at most this many documents log each document's own lines; a larger run has each
#: document's figures in the step's metadata table and logs its progress every
#: :data:`PROGRESS_EVERY_S` seconds (failures are always logged).
PER_DOCUMENT_LINES = 20


class Progress:
    """The progress of a stage over the documents ``keys`` (started at ``t0``,
    ``time.perf_counter()``): each document's end and seconds (:meth:`end`), the time left by
    kind (:func:`time_left`), and when a line is due: after the first document, then every
    :data:`PROGRESS_EVERY_S` seconds, never at the last one nor for a run of one document; the
    stage ends with :meth:`final`.

    >>> p = Progress("chunks", ["a.md", "b.md", "c.py"], t0=time.perf_counter())
    >>> p.end("a.md", 2.0); p.line({"a.md": {}})
    'chunks: 1/3 documents, at least 2.0 s left (no code done yet)'
    >>> p.end("b.md", 2.0); p.line({}), p.final({"a.md": {}})[:34]
    ('', 'chunks: 3/3 documents, done in 0.0')
    """

    def __init__(self, stage: str, keys: list[str], t0: float, in_flight: int = 1):
        self.stage, self.total, self.t0, self.in_flight, self.last = stage, len(keys), t0, in_flight, None
        self.left = Counter(document_kind(k) for k in keys)  # kind -> documents not finished
        self.timed: dict[str, tuple[int, float]] = {}  # kind -> (documents done, their seconds)
        self.since = (0, 0.0)  # (chunks, seconds since t0) at the last line

    @property
    def done(self) -> int:
        """Documents finished: done, failed, or skipped after failing at an earlier stage."""
        return self.total - sum(self.left.values())

    def end(self, key: str, seconds: float, ok: bool = True) -> None:
        """Document ``key`` finished after ``seconds``; a document done (``ok``) times its kind."""
        kind = document_kind(key)
        self.left[kind] -= 1
        if ok:
            n, s = self.timed.get(kind, (0, 0.0))
            self.timed[kind] = (n + 1, s + seconds)

    def line(self, ok: dict[str, dict], failed: int = 0, skipped: int = 0) -> str:
        """The progress line due now, or ``""``; ``ok`` the entries of the documents done."""
        now = time.perf_counter()
        due = self.last is None or now - self.last >= PROGRESS_EVERY_S
        if self.total <= 1 or not due or self.done >= self.total:
            return ""
        self.last = now
        left = time_left(dict(self.left), self.timed, self.in_flight)
        out = progress_line(self.stage, self.done, self.total, now - self.t0, ok, self.since, left, failed, skipped)
        self.since = (stage_chunks(ok)[0], now - self.t0)
        return out

    def final(self, ok: dict[str, dict], failed: int = 0, skipped: int = 0) -> str:
        """The stage's last line (:func:`final_line`); ``""`` for a stage over no document, or one
        whose every document had failed at an earlier stage (that stage's lines said so)."""
        if not self.total or not (ok or failed):
            return ""
        return final_line(self.stage, self.total, time.perf_counter() - self.t0, ok, failed, skipped)


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
