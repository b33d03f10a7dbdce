"""The store: a data folder holding the LanceDB table ``chunks``, the BM25 index and stage files.

``$SITUATE_HOME`` is a local folder or an object store URI (``s3://bucket/prefix``, ``gs://…``,
``az://…``: :mod:`situate.resources.store.objects`); the layout is the same in both.  Layout (default
``./.situate``)::

    lancedb/            LanceDB database; table ``chunks`` is the pipeline's output
    bm25/               bm25s index over every row's contextualised text, plus ids.json
    stages/<key>/       one folder per document (partition key): document.json, chunks.json,
                        preambles.json, blurbs.json, written by the per-document assets
    locks/<key>.lock    one writer per document at a time (:meth:`Store.document_lock`); on an
                        object store ``locks/<key>.lease`` (:mod:`situate.resources.store.leases`)
    dagster/            the Dagster instance, when DAGSTER_HOME is unset (local folders only: with
                        an object store it is ``~/.cache/situate/instance/<hash>`` unless set)

On an object store the BM25 index is ``bm25/v-<id>/…`` published by the pointer object
``bm25/CURRENT`` (object stores have no symbolic links), and searched from a local copy in
``~/.cache/situate/bm25/<hash>/`` (``SITUATE_CACHE``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa

from situate.resources.errors import UpstreamError

TABLE = "chunks"
#: Table that collects a document's rows while the embedding width changes: the ``chunks`` table
#: keeps serving every document until each of its documents has rows here, then one commit
#: makes these rows the ``chunks`` table (see :meth:`Store.replace_document`).
NEXT_TABLE = "chunks-next"
#: File that marks a folder as a situate data folder (written when situate first uses it): a
#: non-empty folder without it is refused as a data folder, and a docs folder's subfolder with it
#: is never ingested as documents.
DATA_MARKER = ".situate-data"

#: Embedding width of the default embedder (bge-small-en-v1.5: 384 dimensions).
DEFAULT_DIM = 384

#: Rows from which the table gets an approximate vector index (IVF_FLAT, cosine); below it the
#: dense search is exact.  Measured (benchmarks/reports/performance.md): LanceDB's exact search
#: takes about 45 ms a query over 10k rows and 560 ms over 100k (768-d, 2 cores), against about
#: 20 ms with the index at recall@10 1.0; IVF_PQ and IVF_HNSW_SQ were slower or less exact.
VECTOR_INDEX_MIN_ROWS = 10_000

#: Partitions probed by an indexed search.  With sqrt(rows) partitions, 40 probes gave recall@10
#: of 1.0 against exact search over 100k rows (benchmarks/search_scale.py; 20 probes: 0.967).
NPROBES = 40


def table_schema(dim: int) -> pa.Schema:
    """Arrow schema of the ``chunks`` table for ``dim``-wide float32 vectors."""
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("document_key", pa.string(), nullable=False),
            pa.field("doc_id", pa.string()),
            pa.field("source", pa.string()),
            pa.field("title", pa.string()),
            pa.field("chunk_index", pa.int32()),
            pa.field("heading_path", pa.string()),
            pa.field("context", pa.string()),
            pa.field("text", pa.string()),
            pa.field("blurb", pa.string()),
            pa.field("blurb_status", pa.string()),
            pa.field("content_sha256", pa.string()),
            pa.field("doc_sha256", pa.string()),
            pa.field("llm_model", pa.string()),
            # what ran the blurb model: in-process, openai-compatible <url>, anthropic-messages <url>,
            # anthropic-batches <url> (empty in rows of a table written before it was recorded)
            pa.field("llm_backend", pa.string()),
            pa.field("embed_model", pa.string()),
            pa.field("prompt_version", pa.string()),
            pa.field("fingerprint", pa.string()),
            # what made the row's context: chunk:<prompt>, document or structure (no LLM call)
            pa.field("context_mode", pa.string()),
            # the kind of document the chunk is from: code or prose (situate.contextual.policy.kind_of);
            # search fuses each kind's rankings by its own weights (empty in rows written before it)
            pa.field("kind", pa.string()),
            # sha256 of the document version the blurb was written against (an edit keeps the
            # blurbs of unchanged chunks: then it is an earlier version's)
            pa.field("blurb_doc_sha256", pa.string()),
            # where the chunk is in its document's text (situate.contextual.snippets.line_spans):
            # 1-based lines, inclusive; UTF-8 byte offsets [start, end) (null in rows written before)
            pa.field("start_line", pa.int32()),
            pa.field("end_line", pa.int32()),
            pa.field("start_byte", pa.int64()),
            pa.field("end_byte", pa.int64()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ]
    )


_CONNECTIONS: dict[str, object] = {}
_FOLDERS: dict[str, object] = {}

#: Seconds a process trusts the BM25 pointer it last read (``bm25/CURRENT`` on an object store)
#: before reading it again: a search costs one small GET at most this often, and sees a new index
#: within this long after it is published.
BM25_POINTER_TTL_S = 2.0
#: Object naming the current BM25 version on an object store.
BM25_POINTER = "bm25/CURRENT"
#: What a BM25 version id looks like (``v-`` and 16 hex digits, :func:`situate.resources.store.retrieval.publish_bm25`):
#: the pointer's content is checked against it before it becomes part of a local path.
BM25_VERSION_RE = re.compile(r"v-[0-9a-f]{16}")
_POINTERS: dict[str, tuple[float, str | None]] = {}


def bm25_version_of(raw: bytes | None, uri: str = "") -> str | None:
    """The version id in the BM25 pointer's bytes, None when there is none.

    Raises
    ------
    ValueError
        The pointer holds anything but a version id (``../../x``, a path, a long string): it is
        never joined to a local path.
    """
    if not raw:
        return None
    version = raw.decode("utf-8", "replace").strip()
    if not BM25_VERSION_RE.fullmatch(version):
        raise ValueError(f"{uri}/{BM25_POINTER} holds {version[:40]!r}, not a BM25 version id (v- and 16 hex digits)")
    return version


def _remote_bm25_dir(folder) -> Path:
    """The local copy of the BM25 version that ``bm25/CURRENT`` names (downloaded once per
    version into :func:`situate.resources.store.objects.cache_dir_for`); a path that does not exist when no
    index is published."""
    from situate.resources.store.objects import cache_dir_for

    base = cache_dir_for(folder.uri, "bm25")
    now = time.monotonic()
    hit = _POINTERS.get(folder.uri)
    if hit is None or now - hit[0] > BM25_POINTER_TTL_S:
        version = bm25_version_of(folder.get(BM25_POINTER), folder.uri)
        _POINTERS[folder.uri] = hit = (now, version)
    version = hit[1]
    if not version:
        return base / "none"
    local = base / version
    if not local.is_dir():
        folder.download_dir(f"bm25/{version}", local)
        for old in base.glob("v-*"):  # earlier versions of this machine's copy
            if old.name != version and not old.name.startswith(version):
                shutil.rmtree(old, ignore_errors=True)
    return local


def forget_bm25_pointer(uri: str) -> None:
    """Make the next :attr:`Store.bm25_dir` read the pointer again (after a publish)."""
    _POINTERS.pop(uri, None)


#: Attempts and first back-off (seconds, doubled each time, with jitter) for a LanceDB commit that
#: lost a race with another writer.  Lance retries compatible commits itself (appends and
#: merge-inserts of other rows rebase on the new version); what still surfaces is a conflict it
#: cannot rebase (a concurrent ``optimize``, index build or overlapping delete), which is safe to
#: run again because each of our writes is idempotent (a whole document's rows by ``chunk_id``).
COMMIT_ATTEMPTS = 8
COMMIT_BACKOFF_S = 0.05


def is_commit_conflict(error: BaseException) -> bool:
    """Whether ``error`` is a LanceDB/Lance commit conflict (another writer committed first)."""
    text = f"{type(error).__name__}: {error}".lower()
    return "conflict" in text and ("commit" in text or "retry" in text or "version" in text)


def retry_commit(fn, *, attempts: int = COMMIT_ATTEMPTS, backoff_s: float = COMMIT_BACKOFF_S, sleep=time.sleep):
    """Call ``fn()`` until it does not raise a commit conflict, at most ``attempts`` times.

    Raises
    ------
    Exception
        ``fn``'s own error when it is not a conflict, or the last conflict after ``attempts``.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - filtered just below
            if attempt == attempts or not is_commit_conflict(e):
                raise
            sleep(backoff_s * 2 ** (attempt - 1) * (1 + random.random()))
    raise AssertionError("unreachable")


def vector_index_name(table) -> str | None:
    """Name of the index on a LanceDB table's ``vector`` column, or None (exact search)."""
    for idx in table.list_indices():
        if "vector" in list(idx.columns):
            return idx.name
    return None


def _fields(schema: pa.Schema) -> dict[str, pa.DataType]:
    """Column name to type, ignoring order and nullability (a column added in place comes last
    and is nullable)."""
    return {f.name: f.type for f in schema}


def _vector_type(schema: pa.Schema) -> pa.DataType:
    return schema.field("vector").type


def _keys(table) -> set[str]:
    return set(table.search().select(["document_key"]).limit(None).to_arrow().column("document_key").to_pylist())


def _migrate_columns(table, schema: pa.Schema) -> bool:
    """Add ``schema``'s columns that ``table`` lacks (null in its rows), in one commit; True when
    the table then has ``schema``'s columns and types, False when it cannot (a column of another
    type, or a column ``schema`` no longer has)."""
    have, want = _fields(table.schema), _fields(schema)
    if any(name in have and have[name] != t for name, t in want.items()) or set(have) - set(want):
        return False
    missing = [pa.field(f.name, f.type, nullable=True) for f in schema if f.name not in have]
    if missing:
        table.add_columns(missing)
    return True


def sql_quote(value: str) -> str:
    """``value`` as an SQL string literal for a LanceDB filter (each ``'`` doubled)."""
    return "'" + value.replace("'", "''") + "'"


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to ``path`` through a temporary file and a rename (no half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    os.replace(tmp, path)


class Store(dg.ConfigurableResource):
    """The data folder: LanceDB table, BM25 index and per-document stage files.

    Attributes
    ----------
    home : str
        The data folder (``SITUATE_HOME``; default ``.situate``), created on first use.
    vector_index_min_rows : int
        Rows from which the vectors get an IVF_FLAT index (``SITUATE_VECTOR_INDEX_MIN_ROWS``,
        default :data:`VECTOR_INDEX_MIN_ROWS`).
    """

    home: str = ".situate"
    vector_index_min_rows: int = VECTOR_INDEX_MIN_ROWS

    # -- paths ---------------------------------------------------------------------------------
    @property
    def remote(self):
        """The data folder as an :class:`situate.resources.store.objects.ObjectFolder` when ``home`` is an
        object store URI, else None (one client per URI and process)."""
        from situate.resources.store.objects import ObjectFolder, is_uri

        if not is_uri(self.home):
            return None
        folder = _FOLDERS.get(self.home)
        if folder is None:
            folder = _FOLDERS[self.home] = ObjectFolder(self.home)
        return folder

    @property
    def location(self) -> str:
        """The data folder for messages: its URI, or its absolute path."""
        return self.remote.uri if self.remote is not None else str(self.root)

    @property
    def root(self) -> Path:
        """The data folder, absolute (a local folder).

        Raises
        ------
        ValueError
            The data folder is an object store URI (use :attr:`location` / :attr:`remote`).
        """
        from situate.resources.store.objects import is_uri

        if is_uri(self.home):
            raise ValueError(f"the data folder {self.home} is on an object store, not a local folder")
        return Path(self.home).expanduser().resolve()

    @property
    def lancedb_uri(self) -> Path | str:
        """``$SITUATE_HOME/lancedb`` (a path, or a URI on an object store)."""
        if self.remote is not None:
            return self.remote.child("lancedb")
        return self.root / "lancedb"

    def storage_options(self) -> dict | None:
        """LanceDB ``storage_options`` for this data folder (None for a local folder)."""
        return self.remote.storage_options() if self.remote is not None else None

    @property
    def bm25_dir(self) -> Path:
        """The BM25 index to search, a local folder: ``$SITUATE_HOME/bm25`` (a symbolic link to
        the current version); on an object store the local copy of the version ``bm25/CURRENT``
        names (downloaded on first use; a path that does not exist when none is published)."""
        if self.remote is None:
            return self.root / "bm25"
        return _remote_bm25_dir(self.remote)

    def _stage_name(self, key: str) -> str:
        from situate.resources.documents.keys import PartitionKeyError, check_key

        check_key(key)
        name = key if len(key) <= 200 else f"{key[:160]}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        if name in (".", "..") or "/" in name or os.sep in name:
            raise PartitionKeyError(f"partition key {key!r} would leave stages/")
        return name

    def stage_dir(self, key: str) -> Path:
        """``stages/<key>`` of a local data folder; a key too long for a file name (over 200
        bytes) is shortened and suffixed with a hash of the whole key.

        Raises
        ------
        situate.resources.documents.keys.PartitionKeyError
            ``key`` is not a valid document key (:func:`situate.resources.documents.keys.check_key`), or its folder
            would not lie inside ``stages/``: nothing is read, written or deleted through it.
        ValueError
            The data folder is on an object store.
        """
        from situate.resources.documents.keys import PartitionKeyError

        name = self._stage_name(key)
        stages = self.root / "stages"
        path = stages / name
        if path.parent != stages:
            raise PartitionKeyError(f"partition key {key!r} would leave {stages}")
        return path

    def stage_path(self, key: str, stage: str) -> Path:
        """``stages/<key>/<stage>.json`` of a local data folder."""
        return self.stage_dir(key) / f"{stage}.json"

    def _stage_object(self, key: str, stage: str) -> str:
        return f"stages/{self._stage_name(key)}/{stage}.json"

    # -- one writer per document ---------------------------------------------------------------
    def _lock_name(self, key: str) -> str:
        return self._stage_name(key)

    @contextlib.contextmanager
    def lock(self, name: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the named lock of this data folder for the block (see :meth:`document_lock`).

        Local folder: an exclusive ``fcntl.flock`` on ``locks/<name>.lock``, released when the
        block ends or the process dies.  Object store: the lease ``locks/<name>.lease``
        (:func:`situate.resources.store.leases.object_lease`: a conditional put, renewed while held, taken over
        :data:`situate.resources.store.leases.STALE_S` seconds after its holder died), so it holds across
        machines.  ``on_wait`` is called once if another holder has it, before waiting.

        Raises
        ------
        situate.resources.store.objects.StoreUnavailable
            The object store failed while taking the lease.
        """
        if self.remote is not None:
            from situate.resources.store.leases import object_lease

            with object_lease(self.remote, f"locks/{name}.lease", on_wait=on_wait):
                yield
            return

        path = self.root / "locks" / f"{name}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+b") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def lock_busy(self, name: str) -> bool:
        """Whether another holder has the named lock now (:meth:`lock`)."""
        if self.remote is not None:
            from situate.resources.store.leases import lease_busy

            return lease_busy(self.remote, f"locks/{name}.lease")

        path = self.root / "locks" / f"{name}.lock"
        if not path.exists():
            return False
        with open(path, "a+b") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    @contextlib.contextmanager
    def document_lock(self, key: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold document ``key`` for writing: a second run that reaches the same document (a
        backfill launched by hand over a document the sensor's run is ingesting, or a worker on
        another machine) waits here until the first is done, so two runs never write one document
        at once (LanceDB ``merge_insert`` of the same keys from two writers can duplicate rows:
        lance-format/lance #8949).  A lock per document (:meth:`lock`): a file lock in a local
        folder, a lease object on an object store.

        Raises
        ------
        situate.resources.documents.keys.PartitionKeyError
            ``key`` is not a valid document key.
        situate.resources.store.objects.StoreUnavailable
            The object store failed while taking the lease.
        """
        with self.lock(self._lock_name(key), on_wait=on_wait):
            yield

    def check_lease(self, key: str) -> None:
        """Before a commit for document ``key`` on an object store: raise
        :class:`situate.resources.store.leases.LeaseLost` when this thread's lease of the document was
        taken over or not renewed in time (fencing); nothing in a local folder or outside
        :meth:`document_lock`."""
        if self.remote is not None:
            from situate.resources.store.leases import check_held

            check_held(f"/{self._lock_name(key)}.lease")

    def document_busy(self, key: str) -> bool:
        """Whether another writer holds document ``key`` now (:meth:`document_lock`)."""
        return self.lock_busy(self._lock_name(key))

    # -- small files of the data folder (docs-root, the marker) ---------------------------------
    def read_file(self, rel: str) -> bytes | None:
        """The bytes of the data folder's file ``rel`` (``/``-separated), or None when absent."""
        if self.remote is not None:
            return self.remote.get(rel)
        try:
            return (self.root / rel).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write_file(self, rel: str, data: bytes) -> None:
        """Write the data folder's file ``rel`` atomically (a temporary file and a rename; one PUT
        on an object store)."""
        if self.remote is not None:
            self.remote.put(rel, data)
            return
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    # -- stage files ---------------------------------------------------------------------------
    def write_stage(self, key: str, stage: str, obj) -> str:
        """Write a stage's JSON for document ``key`` atomically (a temporary file and a rename;
        one PUT on an object store); returns where it went."""
        if self.remote is not None:
            rel = self._stage_object(key, stage)
            self.check_lease(key)
            self.remote.put(rel, json.dumps(obj, ensure_ascii=False).encode("utf-8"))
            return self.remote.child(rel)
        p = self.stage_path(key, stage)
        write_json_atomic(p, obj)
        return str(p)

    def read_stage_if_any(self, key: str, stage: str):
        """The stage's JSON, or None when it was never written (or is not valid JSON)."""
        if self.remote is not None:
            raw = self.remote.get(self._stage_object(key, stage))
        else:
            p = self.stage_path(key, stage)
            try:
                raw = p.read_bytes()
            except FileNotFoundError:
                return None
        if raw is None:
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    def read_stage(self, key: str, stage: str):
        """The stage's JSON.

        Raises
        ------
        FileNotFoundError
            The upstream stage was never materialised for ``key``.
        """
        obj = self.read_stage_if_any(key, stage)
        if obj is None:
            where = (
                self.remote.child(self._stage_object(key, stage))
                if self.remote is not None
                else self.stage_path(key, stage)
            )
            raise FileNotFoundError(f"{stage} for {key} not materialised ({where} missing)")
        return obj

    def delete_stages(self, key: str) -> None:
        """Remove document ``key``'s stage folder; nothing for a key that is not a valid document
        key (it can have none, and nothing is ever deleted through it)."""
        from situate.resources.documents.keys import PartitionKeyError

        try:
            name = self._stage_name(key)
            if self.remote is not None:
                self.remote.delete_prefix(f"stages/{name}")
                return
            folder = self.stage_dir(key)
        except PartitionKeyError:
            return
        shutil.rmtree(folder, ignore_errors=True)

    # -- LanceDB -------------------------------------------------------------------------------
    def connect(self):
        """The process's LanceDB connection to ``lancedb_uri`` (created if missing).  One per
        folder and process, so its session caches (index partitions, metadata) last across
        searches: a fresh connection per search re-reads the IVF index every time."""
        import lancedb

        uri = str(self.lancedb_uri)
        conn = _CONNECTIONS.get(uri)
        if self.remote is not None:
            if conn is None:
                conn = _CONNECTIONS[uri] = lancedb.connect(uri, storage_options=self.storage_options())
            return conn
        if conn is None or not self.lancedb_uri.is_dir():
            self.lancedb_uri.mkdir(parents=True, exist_ok=True)
            conn = _CONNECTIONS[uri] = lancedb.connect(uri)
        return conn

    def table(self):
        """The ``chunks`` table, opened fresh (a held handle does not see later commits), or None."""
        db = self.connect()
        try:
            return db.open_table(TABLE)
        except (FileNotFoundError, ValueError):
            return None

    def replace_document(self, key: str, rows: pa.Table) -> int:
        """Make ``rows`` the table's rows for document ``key``, in one commit.

        ``merge_insert`` on ``chunk_id`` updates matching rows, inserts new ones and deletes the
        document's rows that are not in ``rows``: no duplicates, no stale rows.  ``rows`` must have
        unique ``chunk_id`` values (merge_insert rejects duplicate keys in its source).

        A table written by an older schema (columns missing) gets the new columns in place, null
        in its other rows, in one commit before the merge.  Rows of another embedding width
        (another embedder) go to ``chunks-next`` instead, while ``chunks`` keeps every row it has;
        when every document of ``chunks`` has rows in ``chunks-next``, one commit (an overwrite,
        a new version of ``chunks``) makes them the table: no row is dropped before its
        replacement is written, and there is never a moment without a table.
        :meth:`migration` says how far such a change is.

        Returns
        -------
        int
            Rows the document now has.

        Raises
        ------
        ValueError
            ``rows`` has duplicate chunk ids, or rows of another document.
        """
        ids = rows.column("chunk_id").to_pylist() if rows.num_rows else []
        if len(set(ids)) != len(ids):
            raise ValueError(f"{key}: duplicate chunk ids in the rows to write")
        if rows.num_rows and set(rows.column("document_key").to_pylist()) != {key}:
            raise ValueError(f"{key}: rows belong to other documents")
        self.check_lease(key)  # fencing: a holder that lost the document's lease writes nothing
        return retry_commit(lambda: self._replace_document(key, rows))

    def replace_documents(self, rows_of: dict[str, pa.Table]) -> dict[str, int]:
        """:meth:`replace_document` for several documents in one commit: one ``merge_insert`` of
        their rows, deleting each one's rows that are not in the new ones.  A commit costs a scan
        of the table's keys, so one commit a document made an ingest of many small documents
        quadratic; one a group keeps a document's cost flat.  While the table's schema or width
        changes (:meth:`replace_document`'s cases), each document is replaced on its own.

        Parameters
        ----------
        rows_of : dict
            Document key → its rows (schema :func:`table_schema` of one width for all).

        Returns
        -------
        dict
            Document key → rows it now has.

        Raises
        ------
        ValueError
            A document's rows have duplicate chunk ids, or rows of another document.
        """
        for key, rows in rows_of.items():
            ids = rows.column("chunk_id").to_pylist() if rows.num_rows else []
            if len(set(ids)) != len(ids):
                raise ValueError(f"{key}: duplicate chunk ids in the rows to write")
            if rows.num_rows and set(rows.column("document_key").to_pylist()) != {key}:
                raise ValueError(f"{key}: rows belong to other documents")
            self.check_lease(key)
        return retry_commit(lambda: self._replace_documents(rows_of))

    def _replace_documents(self, rows_of: dict[str, pa.Table]) -> dict[str, int]:
        table = self.table()
        filled = [t for t in rows_of.values() if t.num_rows]
        same = table is not None and all(_fields(t.schema) == _fields(table.schema) for t in filled)
        if len(rows_of) == 1 or not filled or not same or self._open(NEXT_TABLE) is not None:
            return {key: self._replace_document(key, rows) for key, rows in rows_of.items()}
        keys = "document_key IN (" + ", ".join(sql_quote(k) for k in rows_of) + ")"
        (
            table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(keys)
            .execute(pa.concat_tables(filled))
        )
        return {key: rows.num_rows for key, rows in rows_of.items()}

    def _open(self, name: str):
        try:
            return self.connect().open_table(name)
        except (FileNotFoundError, ValueError):
            return None

    def _replace_document(self, key: str, rows: pa.Table) -> int:
        table = self.table()
        nxt = self._open(NEXT_TABLE)
        if nxt is not None and (table is None or _fields(nxt.schema) == _fields(table.schema)):
            self.connect().drop_table(NEXT_TABLE)  # left over from a promotion killed before its drop
            nxt = None
        if table is not None and rows.num_rows and _fields(table.schema) != _fields(rows.schema):
            if _vector_type(table.schema) == _vector_type(rows.schema) and _migrate_columns(table, rows.schema):
                pass  # an older schema, migrated in place: every row stays
            else:
                # another embedding width: the table keeps serving its rows; this document's
                # rows wait in NEXT_TABLE until every document has been embedded again
                self._merge_document(NEXT_TABLE, nxt, key, rows)
                self._promote_if_complete()
                return rows.num_rows
        if nxt is not None and not rows.num_rows:
            nxt.delete(f"document_key = {sql_quote(key)}")
        n = self._merge_document(TABLE, table, key, rows)
        if nxt is not None:
            self._promote_if_complete()
        return n

    def _merge_document(self, name: str, table, key: str, rows: pa.Table) -> int:
        if table is None:
            if not rows.num_rows:
                return 0
            table = self._create_table(name, rows)
            if table is None:
                return rows.num_rows  # created with these rows
        if not rows.num_rows:
            table.delete(f"document_key = {sql_quote(key)}")
            return 0
        (
            table.merge_insert("chunk_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(f"document_key = {sql_quote(key)}")
            .execute(rows)
        )
        return rows.num_rows

    def _create_table(self, name: str, rows: pa.Table):
        """Create table ``name`` holding ``rows``, or return the table another run created first.

        Creation is serialised by the data folder's ``.table-<name>`` lock (:meth:`lock`) and the
        table is looked for again inside it: Lance commits a ``create`` that raced another
        writer's as a new version that *overwrites* it (seen here: three writers starting on an
        empty folder, version 2 of ``chunks`` held only the second writer's document, the first's
        rows gone), so an unserialised create can drop a document another run has just written.

        Returns
        -------
        lancedb.table.Table or None
            The existing table to merge ``rows`` into, or None when this call created it.
        """
        with self.lock(f".table-{name}"):  # no document key starts with "."
            table = self._open(name)
            if table is None:
                self.connect().create_table(name, data=rows, schema=rows.schema)
            return table

    def _promote_if_complete(self) -> bool:
        """Make NEXT_TABLE's rows the ``chunks`` table once every document of ``chunks`` has rows
        there, in one commit (an overwrite: a new version of the same table, so a reader sees
        the old rows or the new ones, never no table); True when it did."""
        table, nxt = self.table(), self._open(NEXT_TABLE)
        if table is None or nxt is None:
            return False
        waiting = _keys(table) - _keys(nxt)
        if waiting:
            return False
        table.add(nxt.to_arrow(), mode="overwrite")
        self.connect().drop_table(NEXT_TABLE)
        return True

    def migration(self) -> dict | None:
        """An embedding-width change under way, or None.

        Returns
        -------
        dict or None
            ``{"table_dim", "next_dim", "documents_done", "documents_waiting"}``: the ``chunks``
            table (still the one searched) holds ``table_dim``-wide vectors; ``documents_done``
            documents have ``next_dim``-wide rows waiting in ``chunks-next``, and
            ``documents_waiting`` documents of the table have none yet.
        """
        table, nxt = self.table(), self._open(NEXT_TABLE)
        if table is None or nxt is None:
            return None
        done, have = _keys(nxt), _keys(table)
        return {
            "table_dim": _vector_type(table.schema).list_size,
            "next_dim": _vector_type(nxt.schema).list_size,
            "documents_done": len(done),
            "documents_waiting": len(have - done),
        }

    def delete_rows(self, key: str) -> None:
        """Remove document ``key``'s rows (its stage files stay), from ``chunks-next`` too."""
        for table in (self.table(), self._open(NEXT_TABLE)):
            if table is not None:
                retry_commit(lambda: table.delete(f"document_key = {sql_quote(key)}"))  # noqa: B023 (called here)

    def delete_documents(self, keys: list[str]) -> None:
        """Remove every row of the documents ``keys`` and their stage files."""
        for table in (self.table(), self._open(NEXT_TABLE)):
            for i in range(0, len(keys), 200):
                batch = keys[i : i + 200]
                if table is not None and batch:
                    where = f"document_key IN ({', '.join(sql_quote(k) for k in batch)})"
                    retry_commit(lambda: table.delete(where))  # noqa: B023 (called here)
        if keys:
            retry_commit(self._promote_if_complete)  # the deleted documents may be the last waited for
        for k in keys:
            self.delete_stages(k)

    def columns(self, names: list[str]) -> pa.Table:
        """Selected columns of every row (an empty table when there is none)."""
        table = self.table()
        if table is None:
            return pa.table({n: pa.array([], pa.string()) for n in names})
        return table.search().select(names).limit(None).to_arrow()

    def document_states(self) -> dict[str, dict]:
        """Per document key in the table: ``{"rows", "doc_sha256", "fingerprint"}``."""
        cols = self.columns(["document_key", "doc_sha256", "fingerprint"]).to_pylist()
        out: dict[str, dict] = {}
        for r in cols:
            s = out.setdefault(r["document_key"], {"rows": 0, "doc_sha256": set(), "fingerprint": set()})
            s["rows"] += 1
            s["doc_sha256"].add(r["doc_sha256"])
            s["fingerprint"].add(r["fingerprint"])
        return out

    def vector_index(self) -> str | None:
        """Name of the vector column's index, or None when the dense search is exact."""
        table = self.table()
        return None if table is None else vector_index_name(table)

    def ensure_vector_index(self, min_rows: int = VECTOR_INDEX_MIN_ROWS) -> dict:
        """Build an IVF_FLAT cosine index on ``vector`` once the table has ``min_rows`` rows; when
        one exists, fold new rows into it (``table.optimize()``, which also compacts the small
        per-document commits).

        Parameters
        ----------
        min_rows : int
            Row threshold (:data:`VECTOR_INDEX_MIN_ROWS`).

        Returns
        -------
        dict
            ``{"rows", "vector_index": "built" | "updated" | "none", "seconds"}``.
        """
        t0 = time.perf_counter()
        table = self.table()
        rows = 0 if table is None else table.count_rows()
        state = "none"
        if table is not None and self.vector_index():
            retry_commit(table.optimize)
            state = "updated"
        elif table is not None and rows >= min_rows:
            from lancedb.index import BTree, IvfFlat

            # with ``config``, the first argument names the column (lancedb >= 0.25)
            retry_commit(
                lambda: table.create_index(
                    "vector",
                    replace=True,
                    config=IvfFlat(distance_type="cosine", num_partitions=max(1, int(round(rows**0.5)))),
                )
            )
            # the search fetches its hits by chunk_id: a BTREE index spares a scan of the column
            retry_commit(lambda: table.create_index("chunk_id", replace=True, config=BTree()))
            state = "built"
        return {"rows": rows, "vector_index": state, "seconds": round(time.perf_counter() - t0, 2)}

    def count_rows(self) -> int:
        """Rows in the ``chunks`` table (0 before the first write)."""
        table = self.table()
        return 0 if table is None else table.count_rows()


def read_ok(store: Store, key: str, stage: str):
    """Stage ``stage``'s JSON for document ``key``.

    Raises
    ------
    situate.resources.errors.UpstreamError
        That stage recorded a failure (``{"error": ...}``): the document stops here, with its reason.
    """
    data = store.read_stage(key, stage)
    if isinstance(data, dict) and data.get("error"):
        raise UpstreamError(data["error"])
    return data
