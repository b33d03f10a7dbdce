"""Fusions of scores fitted as rank fusions are: each query's candidates saved with their ranks
and scores in the three retrievers search uses, then every fusion of a fixed grid (RRF weights and
score fusions, :class:`situate.resources.store.fusion.KindFusion`) scored on them and chosen by
the pooled cross-validation of :mod:`situate.evaluation.pooled_fit`.

A candidate file holds, per query, exactly what :func:`situate.resources.store.retrieval.
hybrid_search` fuses (:func:`situate.resources.store.retrieval.candidates_of`): every chunk in the
dense, BM25 or structural BM25 top 150, its rank in each (0 where absent) and its cosine and BM25
scores.  It is a NumPy ``.npz`` (no pickles), read from outside and so bounded and checked
(:func:`read_candidates`).

Examples
--------
>>> import tempfile, os, numpy as np
>>> from situate.resources.store.fusion import Candidates, KindFusion
>>> c = Candidates(["x", "y"], np.array([[1, 2], [np.inf, 1], [np.inf, 1]]), np.array([[0.9, 0.8], [0, 3.0], [0, 3.0]]))
>>> path = os.path.join(tempfile.mkdtemp(), "c.npz")
>>> write_candidates(path, ["q1"], [[("d", 0)]], [c], {"x": ("d", 0), "y": ("d", 1)})
>>> got = read_candidates(path)
>>> per_query_pass([KindFusion("rrf", (1, 0, 0)), KindFusion("score", (1, 0, 1))], got, ks=(1,))[:, 0, 0].tolist()
[1.0, 0.0]
"""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from situate.evaluation.fusion_fit import KS, Key
from situate.resources.store.fusion import Candidates, KindFusion, kind_scores

#: Largest candidate file read: 256 MiB (CoSQA's 500 queries × about 350 candidates: about 3 MiB).
MAX_FILE_BYTES = 256 * 2**20
#: Most bytes a candidate file's arrays may declare in all (they are read whole): 1 GiB.
MAX_DECOMPRESSED_BYTES = 2**30
#: Most queries and candidates in all (the arrays are read whole).
MAX_QUERIES, MAX_CANDIDATES = 100_000, 50_000_000

#: The score fusions tried beside the RRF grid: cosine + α × a BM25 score over its best, α of
#: :data:`ALPHAS`, the BM25 share given to the index over the blurb (the rest to the structural
#: one) of :data:`BM25_SHARES`.  Fixed before the fit (2026-12-06), written for situate: α from
#: 0.02 (a tie-break between near-equal cosines; bge-small's first and twentieth cosines lie
#: 0.07–0.17 apart on the middle half of the labelled sets' queries) to 0.4 (BM25 worth more than
#: that span).
ALPHAS = (0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4)
BM25_SHARES = (0.0, 0.5, 1.0)


def score_space() -> list[KindFusion]:
    """The score fusions of :data:`ALPHAS` × :data:`BM25_SHARES` (27)."""
    return [KindFusion("score", (1.0, a * s, a * (1 - s))) for a in ALPHAS for s in BM25_SHARES]


def write_candidates(
    path: str | os.PathLike,
    query_ids: Sequence[str],
    golden: Sequence[Sequence[Key]],
    candidates: Sequence[Candidates],
    keys: dict[str, Key],
) -> None:
    """Write each query's :class:`Candidates` (chunk ids turned into their ``(doc_id,
    chunk_index)`` by ``keys``) with its id and golden keys to ``path`` (``.npz``).

    Raises
    ------
    ValueError
        ``candidates`` or ``golden`` of another length than ``query_ids``.
    """
    if not len(query_ids) == len(golden) == len(candidates):
        raise ValueError(f"{len(query_ids)} query ids, {len(golden)} golden lists, {len(candidates)} candidate lists")
    names = sorted({keys[i] for c in candidates for i in c.ids} | {tuple(g) for gs in golden for g in gs})
    at = {k: n for n, k in enumerate(names)}
    ranks = np.concatenate([np.where(np.isinf(c.ranks), 0, c.ranks) for c in candidates], axis=1)
    np.savez_compressed(
        path,
        query_ids=np.array(query_ids, dtype=str),
        doc_ids=np.array([d for d, _ in names], dtype=str),
        chunk_index=np.array([i for _, i in names], dtype=np.int64),
        offsets=np.cumsum([0] + [len(c.ids) for c in candidates]),
        candidate=np.array([at[keys[i]] for c in candidates for i in c.ids], dtype=np.int64),
        ranks=ranks.astype(np.int32),
        scores=np.concatenate([c.scores for c in candidates], axis=1).astype(np.float32),
        golden_offsets=np.cumsum([0] + [len(g) for g in golden]),
        golden=np.array([at[tuple(g)] for gs in golden for g in gs], dtype=np.int64),
    )


#: The arrays of a candidate file, with the kind of number each holds and its dimensions.
_MEMBERS = {
    "query_ids": ("U", 1),
    "doc_ids": ("U", 1),
    "chunk_index": ("iu", 1),
    "offsets": ("iu", 1),
    "candidate": ("iu", 1),
    "ranks": ("iu", 2),
    "scores": ("f", 2),
    "golden_offsets": ("iu", 1),
    "golden": ("iu", 1),
}


def _load(path: str | os.PathLike, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays ``names`` of a candidate file, each member's header checked (kind, dimensions,
    declared size: at most :data:`MAX_DECOMPRESSED_BYTES` in all) before it is read.

    Raises
    ------
    ValueError
        Not a regular file, too large, not an ``.npz`` of those arrays (the message names it).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: not a candidate file (no such regular file)")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{p}: {p.stat().st_size} bytes, more than {MAX_FILE_BYTES} for a candidate file")
    try:
        with zipfile.ZipFile(p) as zf:
            declared = 0
            for name in names:
                with zf.open(f"{name}.npy") as f:
                    fmt = np.lib.format
                    version = fmt.read_magic(f)
                    header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                    shape, _, dtype = header(f)
                kinds, ndim = _MEMBERS[name]
                if dtype.kind not in kinds or len(shape) != ndim:
                    raise ValueError(f"array {name} is {dtype} of {len(shape)} dimensions")
                declared += int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                if declared > MAX_DECOMPRESSED_BYTES:
                    raise ValueError(f"its arrays declare more than {MAX_DECOMPRESSED_BYTES} bytes")
        with np.load(p, allow_pickle=False) as z:
            return {name: z[name] for name in names}
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, TypeError) as e:
        raise ValueError(f"{p}: not a candidate file ({e})") from e


def _consistent(a: dict[str, np.ndarray]) -> bool:
    """Whether a candidate file's offsets, ranks, scores and key indices agree."""
    off, goff, n, keys = a["offsets"], a["golden_offsets"], len(a["candidate"]), len(a["doc_ids"])

    def runs(o: np.ndarray, total: int) -> bool:
        return len(o) >= 1 and o[0] == 0 and o[-1] == total and bool(np.all(np.diff(o) >= 0))

    return (
        len(off) - 1 <= MAX_QUERIES
        and n <= MAX_CANDIDATES
        and a["ranks"].shape == a["scores"].shape == (3, n)
        and runs(off, n)
        and len(goff) == len(off)
        and runs(goff, len(a["golden"]))
        and all(len(x) == 0 or (x.min() >= 0 and x.max() < keys) for x in (a["candidate"], a["golden"]))
        and bool(np.all(a["ranks"] >= 0))
        and bool(np.all(np.isfinite(a["scores"])))
    )


def read_candidates(path: str | os.PathLike) -> list[tuple[Candidates, set[int]]]:
    """Each query's :class:`Candidates` (ids: indices into the file's keys, as str) and its golden
    key indices, from a file :func:`write_candidates` wrote.

    Raises
    ------
    ValueError
        The file is not a regular file, too large, not a candidate file, or inconsistent (the
        message names it).
    """
    a = _load(path, ["doc_ids", "offsets", "candidate", "ranks", "scores", "golden_offsets", "golden"])
    if not _consistent(a):
        raise ValueError(f"{path}: inconsistent candidate file (offsets, ranks, scores and keys do not agree)")
    off, goff = a["offsets"], a["golden_offsets"]
    out = []
    for q in range(len(off) - 1):
        s, e = int(off[q]), int(off[q + 1])
        ranks = np.where(a["ranks"][:, s:e] > 0, a["ranks"][:, s:e], np.inf).astype(np.float64)
        ids = [str(int(i)) for i in a["candidate"][s:e]]
        gold = {int(g) for g in a["golden"][int(goff[q]) : int(goff[q + 1])]}
        out.append((Candidates(ids, ranks, a["scores"][:, s:e].astype(np.float64)), gold))
    return out


def candidate_query_ids(path: str | os.PathLike) -> list[str]:
    """The query ids of a candidate file, in its order (:func:`read_candidates` checks the rest).

    Raises
    ------
    ValueError
        The file is not a regular file, too large, or holds no query ids (the message names it).
    """
    return [str(q) for q in _load(path, ["query_ids"])["query_ids"][:MAX_QUERIES]]


def per_query_pass(
    space: Sequence[KindFusion], queries: Sequence[tuple[Candidates, set[int]]], ks: Sequence[int] = KS
) -> np.ndarray:
    """Pass@k (a fraction) of every query under every fusion: float64[len(space), n_queries,
    len(ks)], the candidates ordered by :func:`situate.resources.store.fusion.kind_scores` (ties:
    the candidate order, as search breaks them)."""
    out = np.zeros((len(space), len(queries), len(ks)))
    for q, (c, gold) in enumerate(queries):
        is_gold = np.array([int(i) in gold for i in c.ids])
        n_gold = max(len(gold), 1)
        for f, fusion in enumerate(space):
            order = np.argsort(-kind_scores(fusion, c.ranks, c.scores), kind="stable")
            hits = np.cumsum(is_gold[order])
            out[f, q] = [hits[min(k, len(hits)) - 1] / n_gold if len(hits) else 0.0 for k in ks]
    return out
