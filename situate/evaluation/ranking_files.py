"""Ranking files: the rankings ``situate eval --configs fusion-cv`` fuses, saved per query so a
fusion can be fitted again, or over several labelled sets at once
(:mod:`situate.evaluation.pooled_fit`), with no model loaded.

A ranking file is gzip JSON::

    {"format": "situate-rankings/1", "corpus": "codebase_chunks.json",
     "query_ids": ["q001", ...],
     "golden": [[["doc_1", 0], ["doc_1", 1]], ...],           # one list per query
     "rankings": {"dense": [[["doc_7", 3], ...], ...], ...}}  # top 150 per query, best first

Keys are ``(doc_id, chunk_index)`` pairs, as in the query files.  A ranking file is read from
outside (a colleague's, an old run's), so :func:`read_rankings` bounds and checks it and names the
file and the reason when it refuses one.

Examples
--------
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "r.json.gz")
>>> write_rankings(path, {"dense": [[("d", 1), ("d", 0)]]}, ["q1"], [[("d", 1)]], corpus="c.json")
>>> read_rankings(path)["rankings"]["dense"]
[[('d', 1), ('d', 0)]]
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The format tag a ranking file carries.
FORMAT = "situate-rankings/1"

#: Largest ranking file read: 64 MiB compressed (a codebase set's 124 queries × 12 rankings × 150
#: keys is about 1 MiB).
MAX_FILE_BYTES = 64 * 2**20

#: Largest decompressed ranking file: 512 MiB (JSON of keys compresses about 10:1).
MAX_DECOMPRESSED_BYTES = 512 * 2**20

#: Most queries, rankings, and keys a ranking holds per query (``situate eval`` keeps the top 150,
#: :data:`situate.evaluation.metrics.DEPTH`).
MAX_QUERIES, MAX_RANKINGS, MAX_DEPTH = 100_000, 64, 10_000

Key = tuple[str, int]


def write_rankings(
    path: str | os.PathLike,
    rankings: Mapping[str, Sequence[Sequence[Key]]],
    query_ids: Sequence[str],
    golden: Sequence[Sequence[Key]],
    corpus: str = "",
) -> None:
    """Write ``rankings`` (``{name: [[key, ...] per query]}``) with each query's id and golden
    keys to ``path`` (gzip JSON, :data:`FORMAT`).

    Raises
    ------
    ValueError
        A ranking or the golden list with another number of queries than ``query_ids``.
    """
    n = len(query_ids)
    for name, per_query in {**rankings, "golden": golden}.items():
        if len(per_query) != n:
            raise ValueError(f"{name} has {len(per_query)} queries, the query ids {n}")
    doc = {
        "format": FORMAT,
        "corpus": corpus,
        "query_ids": [str(q) for q in query_ids],
        "golden": [[[str(d), int(i)] for d, i in g] for g in golden],
        "rankings": {n: [[[str(d), int(i)] for d, i in r] for r in per_query] for n, per_query in rankings.items()},
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))


def read_rankings(path: str | os.PathLike) -> dict:
    """A ranking file's ``{"corpus", "query_ids", "golden", "rankings"}``, keys as ``(str, int)``.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ValueError
        The file is over :data:`MAX_FILE_BYTES` (or decompresses past
        :data:`MAX_DECOMPRESSED_BYTES`), is not gzip JSON of :data:`FORMAT`, or holds a malformed
        key, a ranking with another number of queries than the query ids, or more than
        :data:`MAX_QUERIES` queries, :data:`MAX_RANKINGS` rankings or :data:`MAX_DEPTH` keys a query.
        The message names the file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"ranking file {p} does not exist")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"ranking file {p}: {p.stat().st_size} bytes, over the {MAX_FILE_BYTES} allowed")
    try:
        with gzip.open(p, "rb") as f:
            raw = f.read(MAX_DECOMPRESSED_BYTES + 1)
        if len(raw) > MAX_DECOMPRESSED_BYTES:
            raise ValueError(f"ranking file {p}: decompresses past {MAX_DECOMPRESSED_BYTES} bytes")
        doc = json.loads(raw)
    except (OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"ranking file {p}: not gzip JSON ({e})") from None
    try:
        return _checked(doc)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise ValueError(f"ranking file {p}: {e}") from None


def _checked(doc) -> dict:
    """``doc`` with its keys as tuples; ValueError (or TypeError, KeyError) on the first flaw."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} file")
    qids = [str(q) for q in doc["query_ids"]]
    rankings = doc["rankings"]
    if not 0 < len(rankings) <= MAX_RANKINGS or len(qids) > MAX_QUERIES:
        raise ValueError(f"{len(rankings)} rankings and {len(qids)} queries (1-{MAX_RANKINGS}, at most {MAX_QUERIES})")
    out = {
        "corpus": str(doc.get("corpus", "")),
        "query_ids": qids,
        "golden": _lists("golden", doc["golden"], len(qids)),
        "rankings": {str(n): _lists(f"ranking {n!r}", v, len(qids)) for n, v in rankings.items()},
    }
    return out


def _lists(name: str, per_query, n: int) -> list[list[Key]]:
    """One list of ``(doc_id, chunk_index)`` keys per query, checked."""
    if not isinstance(per_query, list) or len(per_query) != n:
        raise ValueError(f"{name} does not have one list for each of the {n} queries")
    out = []
    for q, keys in enumerate(per_query):
        if not isinstance(keys, list) or len(keys) > MAX_DEPTH:
            raise ValueError(f"{name}, query {q}: not a list of at most {MAX_DEPTH} keys")
        row = []
        for key in keys:
            if not (isinstance(key, list) and len(key) == 2 and isinstance(key[0], str) and type(key[1]) is int):
                raise ValueError(f"{name}, query {q}: {key!r} is not a [doc_id, chunk_index] key")
            row.append((key[0], key[1]))
        out.append(row)
    return out
