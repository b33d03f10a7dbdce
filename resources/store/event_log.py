"""Dagster's SQLite event log, with one SQLAlchemy engine a database instead of one an event.

A run over many documents logs one materialization event a document and stage.  Dagster's own
``SqliteEventLogStorage`` (a database a run and ``index.db``, in WAL mode) builds a new SQLAlchemy
``Engine`` for every connection it opens, that is for every event, twice for an asset event (the
run's database and the index).  A new engine has an empty statement cache, so each insert is
compiled to SQL again; and before writing an asset event's tags it asks whether the tags table
exists, on yet another new engine and connection.  Profiled on 300 partitions of a two-asset job
(py-spy, 2 cores): of the time in ``store_event``, about a quarter went to compiling statements
and building engines; in ``situate ingest`` of 600 one-function documents a sixth of it went to
``has_table``.

:class:`SqliteEventLog` keeps Dagster's storage as it is (the same files, the same schema, the same
``NullPool``: a fresh SQLite connection for every event, closed after it, so no connection outlives
its use or is shared between threads or processes) and keeps only the ``Engine`` a database, for
the most recently used :data:`ENGINES` databases, and the names of the tables it has found.  The
engine holds no connection; what it keeps is SQLAlchemy's compiled-statement cache.

Measured (``benchmarks/event_log.py``, report ``benchmarks/reports/event-log.md``; 2 cores,
2026-12-06): one run of two assets over 1,000 partitions, three runs each alternating, 11.3 ms a
materialization with Dagster's storage, 8.8 with this one (0.77x).

A new instance folder gets it in its ``dagster.yaml``
(:data:`situate.pipelines.settings.DAGSTER_YAML`); an instance that names no
``event_log_storage`` keeps Dagster's own.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import dagster as dg
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

#: Engines kept at once: ``index.db`` and the run databases a process wrote last (a webserver
#: or daemon reads many runs' databases over its life; each engine's statement cache is bounded
#: by SQLAlchemy, 500 statements).
ENGINES = 16


def default_base_dir() -> str:
    """Where Dagster's default storage keeps the event log: ``$DAGSTER_HOME/history/runs``.

    Raises
    ------
    situate.resources.errors.SettingError
        ``DAGSTER_HOME`` is not set.
    """
    from situate.resources.errors import SettingError

    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise SettingError("situate's event log storage needs DAGSTER_HOME (or base_dir in dagster.yaml)")
    return os.path.join(os.path.abspath(os.path.expanduser(home)), "history", "runs")


class SqliteEventLog(SqliteEventLogStorage):
    """Dagster's ``SqliteEventLogStorage`` with one engine a database (the module says why).

    ``dagster.yaml``::

        event_log_storage:
          module: situate.resources.store.event_log
          class: SqliteEventLog

    Config ``base_dir`` (optional): the folder of the databases, default
    :func:`default_base_dir` (Dagster's own place, so the runs already logged stay visible).
    """

    def __init__(self, base_dir: str, inst_data: dg.ConfigurableClassData | None = None):
        self._engines: collections.OrderedDict[str, Engine] = collections.OrderedDict()  # before Dagster's
        self._tables: set[str] = set()
        self._engines_lock = threading.Lock()  # not Dagster's _db_lock: has_table runs under it
        super().__init__(base_dir, inst_data=inst_data)  # own __init__, which connects

    @classmethod
    def config_type(cls) -> dict:
        return {"base_dir": dg.Field(dg.StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> SqliteEventLog:
        return cls(config_value.get("base_dir") or default_base_dir(), inst_data=inst_data)

    def _engine(self, shard: str) -> Engine:
        """The shard's engine, built once."""
        with self._engines_lock:
            return self._kept_engine(shard)

    def _kept_engine(self, shard: str) -> Engine:
        engine = self._engines.get(shard)
        if engine is None:
            engine = create_engine(
                self.conn_string_for_shard(shard),
                poolclass=NullPool,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
            )
            self._engines[shard] = engine
            while len(self._engines) > ENGINES:
                self._engines.popitem(last=False)[1].dispose()
        else:
            self._engines.move_to_end(shard)
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # Dagster's own _connect (sqlite_event_log.py), with the engine kept
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def has_table(self, table_name: str) -> bool:
        # Dagster asks before each asset event's tags are written, on a new engine and connection
        # each time; a table once found is not looked for again (Dagster's migrations add tables,
        # none drops one)
        if table_name in self._tables:
            return True
        engine = self._engine(INDEX_SHARD_NAME)  # (Dagster's own takes no lock either)
        with engine.connect() as conn:
            found = bool(engine.dialect.has_table(conn, table_name))
        if found:
            self._tables.add(table_name)
        return found
