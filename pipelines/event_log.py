"""Dagster's SQLite event log at the cost of one write an event, not one file sync and checkpoint.

A run over many documents logs one materialization event a document and stage.  Dagster's SQLite
storage (``SqliteEventLogStorage``: a database a run and ``index.db``, in WAL mode) opens a new
connection for every event (SQLAlchemy ``NullPool``), commits with SQLite's default
``synchronous=FULL`` (a sync of the write-ahead log each commit) and closes it; the close of the
last connection to a database checkpoints the log into the database and deletes it.  Measured on
1,500 one-function documents (2 cores, ``SITUATE_CONTEXT=structure``; profile of ``situate
ingest``): about 11 ms an event around the models, two fifths of it in the commit's sync and the
close's checkpoint, so each stage spent 16 s on what its own code did in 3.

:func:`tune_sqlite_event_log` changes two things, for SQLite databases under the instance's folder
only, with SQLAlchemy's own ``connect`` event (no Dagster code is patched):

- ``PRAGMA synchronous=NORMAL`` on each new connection: in WAL mode a commit no longer syncs the
  log; SQLite's documentation: the database stays consistent, and a power loss or an operating
  system crash (not a crash of the process) may roll back the last transactions.  For situate's
  instance that is at most the last events of a run; every document's data is in the data folder,
  and the next ingest re-asks for what its own records lack.
- one connection kept open a database (at most :data:`KEPT` of them, the most recently
  used), so closing Dagster's connection is never the last close and does not checkpoint; SQLite
  then checkpoints every 1,000 pages of log (``wal_autocheckpoint``), as it does for any
  long-lived connection.

Only for runs that situate's own commands execute in their process (``situate ingest``,
``situate eval``: :func:`situate.pipelines.settings.ensure_dagster_home`), never in a code
location that Dagster's daemon, webserver or run workers load: there, with the connections kept
by the code server and a run worker, a run failed with SQLite's "disk I/O error" reading
``runs.db`` (a run through ``dagster-daemon``, ``benchmarks/scale_out.py``); its cause is not
known, so those processes keep Dagster's own behaviour.  ``synchronous=NORMAL`` alone changed
nothing measurable (1,500 documents: 132.6 / 132.9 s without it, 144.2 / 142.0 s with it, two
pairs in one sitting); the gain is the kept connection's.

The same 1,500 documents: 112.7 s → 76.4 s wall, each stage's step 16 s → 10 s, and
``embeddings`` 41.9 s → 31.6 s (benchmarks/reports/ingest-scale.md has the CoSQA figures).
"""

from __future__ import annotations

import collections
import os
import sqlite3
import threading

#: Databases kept open at once: a run's shard and ``index.db``, for the last few runs a process
#: wrote (a webserver or daemon writes to many runs' shards over its life).
KEPT = 8

#: Byte 18 of an SQLite database file's header is 2 when the file is in WAL mode (sqlite.org,
#: "Database File Format", section 1.3.4).
_WAL_VERSION_OFFSET, _WAL_VERSION = 18, 2

_roots: set[str] = set()
_kept: collections.OrderedDict[str, sqlite3.Connection] = collections.OrderedDict()
_lock = threading.Lock()


def tune_sqlite_event_log(root: str | os.PathLike) -> None:
    """Make Dagster's SQLite storage under folder ``root`` (the instance's ``DAGSTER_HOME``) cheap
    a write, as the module says.  Idempotent; other SQLite databases of the process are untouched,
    and an instance on another storage (Postgres, MySQL) is never matched.

    Parameters
    ----------
    root : str or os.PathLike
        The instance's folder; databases whose file lies under it are tuned.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    with _lock:
        first = not _roots
        _roots.add(os.path.realpath(root) + os.sep)
    if first:
        event.listen(Engine, "connect", _on_connect)


def _on_connect(dbapi_connection, _record) -> None:
    """SQLAlchemy's ``connect`` event: tune a new connection to a database under a tuned root."""
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    path = _main_file(dbapi_connection)
    if not path or not any(path.startswith(r) for r in _roots):
        return
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")
    _keep_open(path)


def _main_file(connection: sqlite3.Connection) -> str | None:
    """The file of ``connection``'s main database (``None`` in memory)."""
    for _, name, file in connection.execute("PRAGMA database_list"):
        if name == "main":
            return os.path.realpath(file) if file else None
    return None


def _keep_open(path: str) -> None:
    """Hold one connection to ``path`` open once the file is in WAL mode (a read attaches it to
    the log's shared memory), closing the least recently used beyond :data:`KEPT`."""
    with _lock:
        if path in _kept:
            _kept.move_to_end(path)
            return
        try:
            with open(path, "rb") as f:
                header = f.read(_WAL_VERSION_OFFSET + 1)
        except OSError:
            return
        if len(header) <= _WAL_VERSION_OFFSET or header[_WAL_VERSION_OFFSET] != _WAL_VERSION:
            return  # a new file: Dagster switches it to WAL first
        kept = sqlite3.connect(path, check_same_thread=False)  # only ever reads the line below
        kept.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        _kept[path] = kept
        while len(_kept) > KEPT:
            _kept.popitem(last=False)[1].close()
