"""Search at scale: latency of the product's hybrid search over 10k and 100k rows, with and
without the IVF_FLAT vector index, and the index's recall against exact search.

Rows are synthetic with real shapes: L2-normalised float32 vectors as wide as the configured
embedder's (:func:`embedder_width`: 384 for the default bge-small-en-v1.5) drawn around one cluster
centre per 50 rows (a corpus's embeddings cluster by topic and document, not uniformly on the
sphere; the cookbook codebase set has 8 chunks a document), and
texts cut from the cookbook codebase corpus, so BM25 sees a real vocabulary.  Queries are
perturbed copies of row vectors and word windows from the same texts.  The search timed is
:func:`situate.resources.store.retrieval.hybrid_search` (dense top-150 + BM25 top-150, RRF, top 10), no rerank.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

#: Width of nomic-embed-text-v1.5, the embedder before bge-small-en-v1.5 (kept for callers that
#: name it); rows are as wide as :func:`embedder_width` unless a width is given.
DIM = 768


def embedder_width() -> int:
    """The vector width of the configured embedder (``SITUATE_EMBED_MODEL``, default
    bge-small-en-v1.5: 384), from the registry, with no model loaded; a GGUF path is taken as
    the registry takes it (nomic-embed-text-v1.5's 768).

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        ``SITUATE_EMBED_MODEL`` is neither an embedder name nor a path.
    """
    from situate.resources.models import registry as models

    return models.resolve_embedder(os.environ.get("SITUATE_EMBED_MODEL"))[3].width


def synthetic_rows(n: int, texts: list[str], seed: int = 0, dim: int | None = None) -> tuple[np.ndarray, list[str]]:
    """``(float32[n, dim] unit vectors, n texts)``: vectors around ``n // 50`` centres, 40-word
    windows of ``texts``.  ``dim`` is the embedder's width (default :func:`embedder_width`; 768
    for nomic v1.5, 384 for bge-small)."""
    dim = dim or embedder_width()
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, n // 50), dim)).astype(np.float32)
    assign = rng.integers(0, len(centres), n)
    vecs = centres[assign] + 0.6 * rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    words = [t.split() for t in texts if len(t.split()) > 40]
    out = []
    for i in range(n):
        w = words[i % len(words)]
        start = int(rng.integers(0, len(w) - 40))
        out.append(" ".join(w[start : start + 40]))
    return vecs, out


def build_store(root: Path | str, vecs: np.ndarray, texts: list[str]):
    """A :class:`situate.resources.store.store.Store` at ``root`` (a folder, or an object store URI) whose
    table holds the rows (no model), with the BM25 index published from the same texts."""
    import pyarrow as pa

    from situate.resources.store.retrieval import publish_bm25
    from situate.resources.store.store import TABLE, Store, table_schema

    store = Store(home=str(root))
    n = len(texts)
    dim = int(vecs.shape[1])
    ids = [f"row-{i:07d}" for i in range(n)]
    schema = table_schema(dim)
    cols = {f.name: pa.array([""] * n, f.type) if f.type == pa.string() else pa.nulls(n, f.type) for f in schema}
    cols.update(
        chunk_id=pa.array(ids),
        document_key=pa.array([f"doc-{i // 10}" for i in range(n)]),
        doc_id=pa.array([f"doc-{i // 10}" for i in range(n)]),
        text=pa.array(texts),
        chunk_index=pa.array([i % 10 for i in range(n)], pa.int32()),
        vector=pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), dim),
    )
    table = pa.table({f.name: cols[f.name] for f in schema}, schema=schema)
    db = store.connect()
    db.create_table(TABLE, data=table, schema=schema, mode="overwrite")
    publish_bm25(store, ids, texts, texts)  # both BM25 indexes, as search reads them
    return store


def measure(store, queries: list[tuple[np.ndarray, str]], k: int = 10) -> dict:
    """p50/p95/mean ms of ``hybrid_search`` over ``queries`` (after one warm-up query)."""
    from situate.resources.store.retrieval import hybrid_search

    hybrid_search(store, queries[0][0], queries[0][1], k=k)
    times = []
    for vec, text in queries:
        t0 = time.perf_counter()
        hybrid_search(store, vec, text, k=k)
        times.append((time.perf_counter() - t0) * 1000)
    return {
        "p50_ms": round(float(np.percentile(times, 50)), 1),
        "p95_ms": round(float(np.percentile(times, 95)), 1),
        "mean_ms": round(float(np.mean(times)), 1),
        "queries": len(times),
    }


def dense_top(store, vec: np.ndarray, k: int, indexed: bool) -> list[str]:
    from situate.resources.store.store import NPROBES

    q = store.table().search(vec, vector_column_name="vector").distance_type("cosine").limit(k)
    if indexed:
        q = q.nprobes(NPROBES)
    else:
        q = q.bypass_vector_index()
    return [r["chunk_id"] for r in q.select(["chunk_id", "_distance"]).to_list()]


def run(
    work: Path, texts: list[str], sizes=(10_000, 100_000), n_queries: int = 50, log=print, dim: int | None = None
) -> dict:
    """Figures for each size: exact and (where built) indexed latency, index build time, recall@10,
    and the data folder's bytes on disk (table, vector index, BM25); vectors ``dim`` wide
    (default :func:`embedder_width`)."""
    from situate.resources.store.store import VECTOR_INDEX_MIN_ROWS

    dim = dim or embedder_width()
    out: dict = {}
    rng = np.random.default_rng(1)
    for n in sizes:
        vecs, row_texts = synthetic_rows(n, texts, dim=dim)
        t0 = time.perf_counter()
        store = build_store(work / f"search-{n}", vecs, row_texts)
        built_s = time.perf_counter() - t0
        picks = rng.integers(0, n, n_queries)
        queries = []
        for i in picks:
            v = vecs[i] + 0.05 * rng.standard_normal(dim).astype(np.float32)
            words = row_texts[i].split()
            queries.append((v / np.linalg.norm(v), " ".join(words[5:12])))
        res = {"rows": n, "dim": dim, "write_and_bm25_s": round(built_s, 1), "exact": measure(store, queries)}
        log(f"search {n:,} rows exact: {res['exact']}")
        t0 = time.perf_counter()
        state = store.ensure_vector_index(min_rows=0)
        res["index_build_s"] = round(time.perf_counter() - t0, 1)
        res["indexed"] = measure(store, queries)
        recalls = []
        for vec, _ in queries:
            exact = dense_top(store, vec, 10, indexed=False)
            approx = dense_top(store, vec, 10, indexed=True)
            recalls.append(len(set(exact) & set(approx)) / len(exact))
        res["indexed_recall_at_10"] = round(float(np.mean(recalls)), 4)
        res["index"] = state["vector_index"]
        res["index_by_default"] = n >= VECTOR_INDEX_MIN_ROWS
        res["folder_bytes"] = sum(f.stat().st_size for f in (work / f"search-{n}").rglob("*") if f.is_file())
        log(
            f"search {n:,} rows indexed ({res['index_build_s']} s to build): {res['indexed']}, "
            f"recall@10 {res['indexed_recall_at_10']}"
        )
        out[n] = res
    return out


if __name__ == "__main__":
    import sys
    import tempfile

    corpus = json.load(open(sys.argv[1]))
    texts = [c["content"] for d in corpus for c in d["chunks"]]
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(Path(tmp), texts, sizes=tuple(int(x) for x in sys.argv[2:]) or (10_000,)), indent=1))
