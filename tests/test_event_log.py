"""Dagster's SQLite event log under situate's instance folder: a commit does not sync and a
connection's close does not checkpoint; SQLite databases elsewhere are untouched."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from situate.pipelines.event_log import tune_sqlite_event_log


def _wal_db(path) -> sa.Engine:
    """A WAL-mode database at ``path`` with one table, opened as Dagster opens its storage."""
    engine = sa.create_engine(f"sqlite:///{path}", poolclass=NullPool)
    with engine.begin() as c:
        c.execute(sa.text("PRAGMA journal_mode=WAL"))
        c.execute(sa.text("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, body TEXT)"))
    return engine


def _write_and_close(engine: sa.Engine) -> int:
    """One event written on a new connection, as Dagster writes one; the connection's
    ``synchronous`` level (2 FULL, 1 NORMAL)."""
    with engine.begin() as c:
        c.execute(sa.text("INSERT INTO events (body) VALUES ('x')"))
        return c.execute(sa.text("PRAGMA synchronous")).scalar()


def test_only_the_instance_folders_databases_are_tuned(tmp_path):
    instance, elsewhere = tmp_path / "dagster", tmp_path / "other"
    instance.mkdir()
    elsewhere.mkdir()
    tune_sqlite_event_log(instance)
    inside, outside = _wal_db(instance / "index.db"), _wal_db(elsewhere / "app.db")

    assert _write_and_close(inside) == 1  # NORMAL: a commit does not sync the log
    assert _write_and_close(outside) == 2  # FULL, SQLite's default, untouched
    # the kept connection makes Dagster's close not the last one: the log is not checkpointed
    # into the database and deleted at each event; outside the folder it is
    assert (instance / "index.db-wal").exists()
    assert not (elsewhere / "app.db-wal").exists()
    with inside.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM events")).scalar() == 1
