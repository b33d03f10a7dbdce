"""Content-addressed caches under ``$SITUATE_HOME/cache``: model work is never done twice.

* :class:`BlurbCache`: what the LLM wrote for a prompt, keyed by sha256 of (LLM file sha256,
  prompt template, decoding settings, document window text, chunk text).  Cleaning and grounding
  run again on every read, so changing them costs no model call.  Settings that only change how
  llama.cpp computes (threads, flash attention, the KV cache type, weight repacking) are not in
  the key: they can move a greedy blurb by a rounding difference, but a cached blurb is still this
  model's answer to this prompt, and toggling a speed setting must not cost a re-run of hours.
* :class:`EmbeddingCache`: a vector per (embedder file sha256, task prefix, text), in a LanceDB
  table ``embedding_cache`` beside ``chunks``.

Both survive re-ingests, renamed files, changed chunking and a crash (an entry is written whole or
not at all).

Examples
--------
>>> import tempfile, numpy as np
>>> cache = EmbeddingCache(tempfile.mkdtemp(), model_key="fake-model")
>>> cache.put(["a"], np.ones((1, 4), np.float32))
>>> cache.get(["a", "b"])[0].shape, cache.get(["a", "b"])[1]
((4,), None)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

EMBED_TABLE = "embedding_cache"


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    from situate.resources.models.registry import sha256_of

    return sha256_of(Path(path))


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a model file, computed once per (path, size, mtime) in this process.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    """
    st = os.stat(path)
    return _file_sha256(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def digest(*parts) -> str:
    """sha256 hex of the JSON of ``parts`` (the cache key)."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()


class BlurbCache:
    """Raw LLM outputs as small JSON files ``<root>/<key[:2]>/<key>.json``.

    Parameters
    ----------
    root : path
        Folder of the cache (``$SITUATE_HOME/cache/blurbs``); with ``folder``, the prefix of the
        cache's objects in it (``cache/blurbs``).
    folder : situate.resources.store.objects.ObjectFolder, optional
        The object store of a data folder on one (each entry is then one object).
    """

    def __init__(self, root: str | os.PathLike, folder=None):
        self.root = Path(root) if folder is None else str(root).strip("/")
        self.folder = folder
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored entry (``{"raw", "prompt_tokens", "generated"}``) or None."""
        try:
            if self.folder is not None:
                raw = self.folder.get(f"{self.root}/{key[:2]}/{key}.json")
                if raw is None:
                    raise FileNotFoundError(key)
                entry = json.loads(raw)
            else:
                entry = json.loads(self._path(key).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def put(self, key: str, entry: dict) -> None:
        """Store ``entry`` under ``key`` (atomic: a temporary file, then a rename; one PUT on an
        object store)."""
        if self.folder is not None:
            self.folder.put(f"{self.root}/{key[:2]}/{key}.json", json.dumps(entry, ensure_ascii=False).encode())
            return
        from situate.resources.store.store import write_json_atomic

        write_json_atomic(self._path(key), entry)


class EmbeddingCache:
    """Vectors by text, in the LanceDB table ``embedding_cache`` (``key``: sha256 of model key and
    text; ``vector``: float32[dim], L2-normalised as the embedder returns it); vectors of another
    width go to ``embedding_cache_<dim>``.

    Parameters
    ----------
    lancedb_uri : path or str
        The LanceDB database folder or URI (the store's).
    model_key : str
        Identifies the embedder and the task prefix, e.g. ``"<file sha256>|search_document: "``.
    storage_options : dict, optional
        LanceDB ``storage_options`` of an object store (:meth:`situate.resources.store.store.Store.storage_options`).
    """

    def __init__(self, lancedb_uri: str | os.PathLike, model_key: str, storage_options: dict | None = None):
        self.uri = str(lancedb_uri)
        self.model_key = model_key
        self.storage_options = storage_options
        self.hits = 0
        self.misses = 0

    def _db(self):
        import lancedb

        if self.storage_options is not None:  # an object store (see situate.resources.store.objects)
            return lancedb.connect(self.uri, storage_options=self.storage_options)
        Path(self.uri).mkdir(parents=True, exist_ok=True)
        return lancedb.connect(self.uri)

    def _tables(self) -> list:
        """Every cache table: ``embedding_cache`` and, for embedders of another width,
        ``embedding_cache_<dim>`` (a LanceDB vector column has one fixed width)."""
        db = self._db()
        names, token = [], None
        while True:  # list_tables pages its answer
            page = db.list_tables(page_token=token)
            names += [n for n in page.tables if n == EMBED_TABLE or n.startswith(EMBED_TABLE + "_")]
            token = page.page_token
            if not token:
                break
        return [db.open_table(n) for n in sorted(names)]

    def _table(self, dim: int):
        """The table for ``dim``-wide vectors, created if missing."""
        db = self._db()
        for name in (EMBED_TABLE, f"{EMBED_TABLE}_{dim}"):
            try:
                table = db.open_table(name)
            except (FileNotFoundError, ValueError):
                schema = pa.schema(
                    [pa.field("key", pa.string(), nullable=False), pa.field("vector", pa.list_(pa.float32(), dim))]
                )
                try:
                    return db.create_table(name, schema=schema)
                except (OSError, ValueError):  # created meanwhile by another process
                    table = db.open_table(name)
            if table.schema.field("vector").type.list_size == dim:
                return table
        raise AssertionError("unreachable: embedding_cache_<dim> has width dim")

    def key(self, text: str) -> str:
        return digest(self.model_key, text)

    def get(self, texts: list[str]) -> list[np.ndarray | None]:
        """Cached vector per text (None where missing)."""
        keys = [self.key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        uniq = list(dict.fromkeys(keys))
        for table in self._tables() if keys else []:
            for i in range(0, len(uniq), 500):
                batch = uniq[i : i + 500]
                rows = (
                    table.search()
                    .where("key IN (" + ", ".join(f"'{k}'" for k in batch) + ")")
                    .select(["key", "vector"])
                    .limit(len(batch) * 2)
                    .to_arrow()
                )
                for k, v in zip(rows.column("key").to_pylist(), rows.column("vector").to_numpy(zero_copy_only=False)):
                    found[k] = np.asarray(v, dtype=np.float32)
        out = [found.get(k) for k in keys]
        self.hits += sum(v is not None for v in out)
        self.misses += sum(v is None for v in out)
        return out

    def put(self, texts: list[str], vectors: np.ndarray) -> None:
        """Store ``float32[len(texts), dim]`` (an existing key is left as it is)."""
        if not texts:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        keys = [self.key(t) for t in texts]
        uniq = {}
        for k, v in zip(keys, vectors):
            uniq.setdefault(k, v)
        dim = vectors.shape[1]
        table = self._table(dim)
        flat = pa.array(np.stack(list(uniq.values())).ravel(), pa.float32())
        data = pa.table(
            {"key": pa.array(list(uniq), pa.string()), "vector": pa.FixedSizeListArray.from_arrays(flat, dim)}
        )
        from situate.resources.store.store import retry_commit

        retry_commit(lambda: table.merge_insert("key").when_not_matched_insert_all().execute(data))


def embed_with_cache(
    embedder, texts: list[str], cache: EmbeddingCache | None, query: bool = False
) -> tuple[np.ndarray, int, int]:
    """Embed ``texts`` with ``embedder`` (:class:`situate.resources.models.llm.Embedder`), computing only what the
    cache lacks.

    Returns
    -------
    (vectors, n_computed, n_cut)
        ``float32[len(texts), dim]``; how many texts went through the model; how many were cut to
        the embedder's context.
    """
    if not texts:
        return np.zeros((0, 0), np.float32), 0, 0
    cached = cache.get(texts) if cache is not None else [None] * len(texts)
    todo = list(dict.fromkeys(t for t, v in zip(texts, cached) if v is None))
    n_cut = 0
    new: dict[str, np.ndarray] = {}
    if todo:
        prefix = embedder.query_prefix if query else embedder.document_prefix
        vecs, n_cut = embedder.embed(todo, prefix)
        new = dict(zip(todo, vecs))
        if cache is not None:
            cache.put(todo, vecs)
    out = np.stack([v if v is not None else new[t] for t, v in zip(texts, cached)]).astype(np.float32)
    return out, len(todo), n_cut


def embed_group(
    embedder, texts_of: dict[str, list[str]], cache: EmbeddingCache | None
) -> dict[str, tuple[np.ndarray, int, int, float]]:
    """:func:`embed_with_cache` for several documents' texts (document prefix): one cache look-up
    and one cache write for all of them, each document's missing texts embedded in one call (a
    text two documents share is embedded once).  A cache commit scans the cache's keys, so one a
    document made an ingest of many small documents quadratic.

    Returns
    -------
    dict
        Document key → ``(vectors, n_computed, n_cut, seconds)``: ``float32[len(texts), dim]``
        (``float32[0, 0]`` for no text), texts that went through the model, texts cut to the
        embedder's context, and the seconds its embedding took.
    """
    everything = [t for texts in texts_of.values() for t in texts]
    found = cache.get(everything) if cache is not None and everything else [None] * len(everything)
    cached = {t: v for t, v in zip(everything, found) if v is not None}
    new: dict[str, np.ndarray] = {}
    out = {}
    for key, texts in texts_of.items():
        todo = list(dict.fromkeys(t for t in texts if t not in cached and t not in new))
        t0 = time.perf_counter()
        n_cut = 0
        if todo:
            vecs, n_cut = embedder.embed(todo, embedder.document_prefix)
            new.update(zip(todo, vecs))
        seconds = time.perf_counter() - t0
        if texts:
            vectors = np.stack([cached[t] if t in cached else new[t] for t in texts]).astype(np.float32)
        else:
            vectors = np.zeros((0, 0), np.float32)
        out[key] = (vectors, len(todo), n_cut, seconds)
    if new and cache is not None:
        cache.put(list(new), np.stack(list(new.values())))
    return out


def embedding_cache_for(store, embedder, query: bool = False) -> EmbeddingCache:
    """The store's embedding cache for ``embedder``, keyed by what makes its vectors
    (:meth:`situate.resources.models.llm.Embedder.vector_key`: the file's sha256, context, prefix and, for
    an ONNX embedder, pooling, batch size and tokenizer)."""
    prefix = embedder.query_prefix if query else embedder.document_prefix
    return EmbeddingCache(store.lancedb_uri, embedder.vector_key(prefix), storage_options=store.storage_options())


def blurb_cache_for(store) -> BlurbCache:
    """The store's blurb cache (``$SITUATE_HOME/cache/blurbs``)."""
    if store.remote is not None:
        return BlurbCache("cache/blurbs", folder=store.remote)
    return BlurbCache(store.root / "cache" / "blurbs")
