"""BM25 index (bm25s) and hybrid search: dense top-150 + BM25 top-150, fused by each kind of chunk's
own fusion (code or prose, :data:`situate.resources.store.fusion.FUSION_BY_KIND`).

Constants
---------
* ``CANDIDATES = 150``: each retriever's depth, as in Anthropic's contextual-embeddings cookbook.
* ``RRF_K = 60``: reciprocal rank fusion, score = Σ 1 / (k + rank), Cormack, Clarke & Büttcher,
  "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods" (SIGIR 2009).
  On the cookbook's codebase set it beat the cookbook's 0.8/0.2 weighting (eval/README.md:
  dev Pass@20 92.09 vs 90.19).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import Stemmer

from situate.resources.store.fusion import (
    FUSION_BY_KIND,
    RRF_K,
    Candidates,
    fuse_by_kind,
    kind_positions,
    kind_scores,
)

CANDIDATES = 150


def contextualized_text(blurb: str, chunk: str, context: str = "") -> str:
    """The text that is embedded and BM25-indexed: the structural context and the blurb (each
    when not empty, one per line), a blank line, then the chunk; the chunk alone when both are
    empty.  Blurb, blank line, chunk is Anthropic's cookbook's form."""
    head = "\n".join(x for x in (context, blurb) if x)
    return f"{head}\n\n{chunk}" if head else chunk


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[tuple[str, float]]:
    """Reciprocal rank fusion of ranked id lists.

    Parameters
    ----------
    rankings : sequence of sequences of str
        Each a ranking, best first; ranks count from 1.
    k : int
        The RRF constant (60, Cormack et al. 2009).

    Returns
    -------
    list of (id, score)
        Every id in any ranking, by descending ``Σ 1/(k + rank)``; ties keep first-seen order.

    Examples
    --------
    >>> rrf([["a", "b"], ["b", "c"]])[0][0]
    'b'
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


#: The cookbook's weighting (anthropic-cookbook, skills/contextual-embeddings): score =
#: 0.8 / (dense rank + 1) + 0.2 / (BM25 rank + 1), ranks from 0.
COOKBOOK_WEIGHTS = (0.8, 0.2)
#: Fusion methods by name; ``rrf`` is the default (dev Pass@20 92.09 vs 90.19 without context,
#: eval/README.md; re-measured per configuration by ``situate eval``).
FUSIONS = ("rrf", "weighted")


def weighted_fusion(
    rankings: Sequence[Sequence[str]], weights: Sequence[float] = COOKBOOK_WEIGHTS
) -> list[tuple[str, float]]:
    """The cookbook's weighted fusion: ``Σ w_i / (rank_i + 1)`` with ranks from 0.

    Examples
    --------
    >>> weighted_fusion([["a", "b"], ["b", "c"]])[0]
    ('a', 0.8)
    """
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    for w, ranking in zip(weights, rankings):
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + w / (rank + 1)
    return sorted(scores.items(), key=lambda kv: -kv[1])


def fuse(rankings: Sequence[Sequence[str]], method: str = "rrf") -> list[tuple[str, float]]:
    """Fuse ranked id lists by ``method`` (one of :data:`FUSIONS`).

    Raises
    ------
    ValueError
        Unknown method.
    """
    if method == "rrf":
        return rrf(rankings)
    if method == "weighted":
        return weighted_fusion(rankings)
    raise ValueError(f"unknown fusion {method!r}: choose one of {', '.join(FUSIONS)}")


#: Scripts written without spaces between words (CJK ideographs, kana, hangul syllables): each
#: character is a token, so a Chinese query finds Chinese text (character unigrams, the usual
#: baseline for Chinese BM25).  Other text: runs of 2+ word characters, bm25s's default.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
TOKEN_PATTERN = f"(?u)[{_CJK}]|(?:(?![{_CJK}])\\w){{2,}}"


#: A run of identifier characters (one pass over the text, no backtracking).
_NAME = re.compile(r"[A-Za-z0-9_]+")
#: A compound identifier, matched from a name's start: ``snake_case`` (letters or digits joined by
#: ``_``), ``camelCase`` / ``PascalCase`` (a lower-case letter or digit followed by a capital), or an
#: acronym followed by a word (``HTTPServer``).
_COMPOUND = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+|[A-Za-z0-9]*?[a-z0-9][A-Z]|[A-Z]{2,}[a-z]")
#: The words of a compound identifier: an acronym, a (capitalised) word, or a number.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def split_identifiers(text: str) -> str:
    """``text`` with each compound code identifier followed by its words, so BM25 matches a
    question's words against a name (``FrameTimer`` → ``FrameTimer Frame Timer``,
    ``reset_hasher`` → ``reset_hasher reset hasher``, ``HTTPServer`` → ``HTTPServer HTTP Server``).

    The identifier itself is kept, so a query naming it still matches it whole.  Linear in the
    length of ``text``: one pass over its names (a 40,000-letter word: 34 ms here, where a
    backtracking pattern took 47 s).  The rule is the
    usual camel-case and underscore split of code search (Enslen et al. 2009, "Mining source code
    to automatically split identifiers", their baseline "conservative" splitter).

    Examples
    --------
    >>> split_identifiers("reset_hasher(self)")
    'reset_hasher reset hasher(self)'
    """

    def words(m: re.Match) -> str:
        name = m.group(0).lstrip("_")
        if not name[:1].isalpha() or not _COMPOUND.match(name):
            return m.group(0)
        parts = _WORD.findall(name)
        return f"{m.group(0)} {' '.join(parts)}" if len(parts) > 1 else m.group(0)

    return _NAME.sub(words, text)


def tokenize(texts: list[str], identifiers: bool = False):
    """bm25s tokens of ``texts``: :data:`TOKEN_PATTERN`, English stopwords, Snowball English
    stemmer (the index and every query use the same).  With ``identifiers``, compound code
    identifiers also give their words (:func:`split_identifiers`): a measured option of
    ``situate eval --configs fusion-cv`` (``bm25-identifiers``), not the index's tokenizer."""
    import bm25s

    if identifiers:
        texts = [split_identifiers(t) for t in texts]
    return bm25s.tokenize(
        texts, token_pattern=TOKEN_PATTERN, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
    )


#: The sub-folder of a BM25 version that holds the second index, over each chunk's structural
#: context and text without the LLM blurb (:func:`hybrid_search`'s third ranking).
STRUCTURAL = "structural"


def _save_index(ids: list[str], texts: list[str], folder: Path) -> None:
    import bm25s

    folder.mkdir(parents=True, exist_ok=True)
    tokens = tokenize(texts) if ids else None
    if tokens is not None and tokens.vocab:
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        retriever.save(str(folder))
    (folder / "ids.json").write_text(json.dumps(ids))


def build_bm25(
    ids: list[str],
    texts: list[str],
    out_dir: Path,
    structural_texts: list[str] | None = None,
    kinds: list[str] | None = None,
) -> int:
    """Index ``texts`` with bm25s (English stopwords, Snowball stemmer) and save it to ``out_dir``.

    With ``structural_texts`` (one per id: the structural context and the chunk, no blurb), a
    second index of them is saved in the same version, in ``out_dir/structural`` (:data:`STRUCTURAL`),
    so both are swapped in together.  With ``kinds`` (one per id: ``code`` or ``prose``), they are
    saved as ``kinds.json`` beside ``ids.json``: search fuses each kind by its own weights
    (:func:`situate.resources.store.fusion.fuse_by_kind`).

    The index and ``ids.json`` (row ``i`` of the index is ``ids[i]``) are written to a new sibling
    folder ``<name>.v-<random>``; ``out_dir`` is a symbolic link that is then pointed at it with one
    ``rename`` (atomic on POSIX), so a reader, or a process killed at any instant, sees the old
    index or the new one, never half of one and never none.  Older versions are removed after.
    A corpus with no BM25 term at all (every text stopwords or single letters) gets an index with
    its ids and no terms: BM25 then finds nothing, dense search still works.

    Returns
    -------
    int
        Documents indexed.

    Raises
    ------
    ValueError
        ``ids`` and ``texts`` (or ``structural_texts``) differ in length, or ``ids`` has duplicates.
    """
    if kinds is not None and len(kinds) != len(ids):
        raise ValueError(f"{len(ids)} ids for {len(kinds)} kinds")
    if len(ids) != len(texts) or (structural_texts is not None and len(structural_texts) != len(ids)):
        raise ValueError(
            f"{len(ids)} ids for {len(texts)} texts"
            + (f" and {len(structural_texts)} structural texts" if structural_texts is not None else "")
        )
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate ids")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=out_dir.name + ".v-"))
    _save_index(ids, texts, tmp)
    if kinds is not None:
        (tmp / "kinds.json").write_text(json.dumps(kinds))
    if structural_texts is not None:
        _save_index(ids, structural_texts, tmp / STRUCTURAL)
    if out_dir.exists() and not out_dir.is_symlink():  # an index saved as a plain folder (<= 0.2)
        legacy = out_dir.with_name(out_dir.name + ".v-legacy")
        shutil.rmtree(legacy, ignore_errors=True)
        out_dir.rename(legacy)
        os.symlink(legacy.name, out_dir)
    link = out_dir.with_name(f"{out_dir.name}.link-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    os.symlink(tmp.name, link)  # relative: the data folder can be moved
    os.replace(link, out_dir)
    for old in out_dir.parent.glob(out_dir.name + ".v-*"):
        if old.name != tmp.name:
            shutil.rmtree(old, ignore_errors=True)
    return len(ids)


_LOADED: dict[str, tuple] = {}
#: What reading a damaged index file raises (RecursionError: JSON nested deeper than the parser goes).
_DAMAGED = (OSError, ValueError, KeyError, RecursionError)


def _loaded(index_dir: Path):
    """``(ids, retriever or None, kinds or None)`` of a saved index (:func:`_read_kinds`), loaded
    once per version of ``ids.json`` (the index is swapped in whole by :func:`build_bm25`,
    ``ids.json`` with it); None without an index.

    A file of the index that cannot be read (deleted, not JSON, nested deeper than the parser
    goes) makes the index read as none: search warns and ranks by dense scores only, and the next
    ingest finds the ids out of step with the table and rebuilds it.
    """
    import bm25s

    try:
        version = Path(index_dir).resolve(strict=True)  # the folder the link points at now
        p = version / "ids.json"
        st = p.stat()
    except FileNotFoundError:
        return None
    stamp = (str(version), st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _LOADED.get(str(index_dir))
    if hit is None or hit[0] != stamp:
        try:
            ids = _read_ids(p)
            has_terms = (version / "params.index.json").exists()
            retriever = bm25s.BM25.load(str(version)) if ids and has_terms else None
            kinds = _read_kinds(version / "kinds.json", ids)
        except _DAMAGED:  # a file of the index deleted or damaged (by hand, or on the object
            return None  # store): as if there were none; the next ingest sees the mismatch and rebuilds it
        hit = (stamp, ids, retriever, kinds)
        _LOADED[str(index_dir)] = hit
    return hit[1], hit[2], hit[3]


def _read_ids(path: Path) -> list[str]:
    """The chunk ids of a version's ``ids.json``.

    Raises
    ------
    OSError, ValueError, RecursionError
        The file cannot be read, is not a JSON list of strings, or is nested deeper than the
        parser goes (:data:`_DAMAGED`; :func:`_loaded` reads the index as none).
    """
    ids = json.loads(path.read_text())
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError(f"{path} is not a list of chunk ids")
    return ids


def _read_kinds(path: Path, ids: list[str]) -> dict[str, str] | None:
    """``chunk id → kind`` from a version's ``kinds.json`` (None without one: an index written
    before kinds were kept, or one whose kinds are not a list of strings, one per id).

    Raises
    ------
    OSError, ValueError, RecursionError
        The file cannot be read, is not JSON, or is nested deeper than the parser goes
        (:data:`_DAMAGED`; :func:`_loaded` reads the index as none).
    """
    if not path.exists():
        return None
    kinds = json.loads(path.read_text())
    if not isinstance(kinds, list) or len(kinds) != len(ids) or not all(isinstance(k, str) for k in kinds):
        return None
    return dict(zip(ids, kinds))


def bm25_kinds(index_dir: Path) -> dict[str, str] | None:
    """``chunk id → kind`` (``code``, ``prose``) of a saved index, None when it keeps none."""
    loaded = _loaded(index_dir)
    return None if loaded is None else loaded[2]


def bm25_version(store) -> str | None:
    """The name of the BM25 version the store serves now (``v-<id>``), or None without one."""
    d = store.bm25_dir
    return d.resolve().name if d.exists() else None


def bm25_ids(index_dir: Path) -> list[str] | None:
    """The ids of a saved index, in index order; None when there is no index."""
    loaded = _loaded(index_dir)
    return None if loaded is None else loaded[0]


def bm25_scores(index_dir: Path, query: str) -> tuple[list[str], np.ndarray] | None:
    """The index's chunk ids and every chunk's BM25 score for ``query`` (float32[n_rows], bm25s's
    Lucene BM25; 0 for a chunk with none of the query's terms, and everywhere for a query with no
    term in the index); None without an index.

    The index is loaded once per process and version (a search service pays the load once)."""
    loaded = _loaded(index_dir)
    if loaded is None or not loaded[0] or loaded[1] is None:
        return None
    ids, retriever, _ = loaded
    tokens = tokenize([query])
    words = {i: w for w, i in tokens.vocab.items()}
    terms = [words[i] for i in (tokens.ids[0] if tokens.ids else []) if words[i] in retriever.vocab_dict]
    if not terms:
        return ids, np.zeros(len(ids), dtype=np.float32)
    return ids, np.asarray(retriever.get_scores(terms), dtype=np.float32)


def top_ids(ids: list[str], scores: np.ndarray, k: int) -> list[str]:
    """The ids of the ``k`` highest ``scores`` above 0, best first (ties: the index's order, also
    at the cut).

    Examples
    --------
    >>> top_ids(list("abcdef"), np.array([1, 2, 2, 2, 0, 3.0]), 3)
    ['f', 'b', 'c']
    """
    k = min(k, len(ids))
    if k <= 0:
        return []
    kth = -np.partition(-scores, k - 1)[k - 1]  # the k-th highest score
    above = np.flatnonzero(scores > kth)
    best = np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])  # ties at the cut: first rows
    best = best[np.lexsort((best, -scores[best]))]
    return [ids[int(i)] for i in best if scores[i] > 0]


def bm25_search(index_dir: Path, query: str, k: int = CANDIDATES) -> list[str]:
    """Ids of the top ``k`` rows for ``query`` by BM25, best first ([] without an index)."""
    scored = bm25_scores(index_dir, query)
    return [] if scored is None else top_ids(*scored, k)


def publish_bm25(
    store, ids: list[str], texts: list[str], structural_texts: list[str] | None = None, kinds: list[str] | None = None
) -> int:
    """Build the BM25 index of ``texts`` (and of ``structural_texts``, with ``kinds``,
    :func:`build_bm25`) and make it the store's current one.

    A local data folder: :func:`build_bm25` into ``bm25/`` (a symbolic link swapped atomically).
    An object store: built in a local temporary folder, uploaded to ``bm25/v-<id>/``, then
    published by writing the pointer object ``bm25/CURRENT`` (one PUT: a reader sees the old
    version or the new one, never half), under the ``.bm25`` lease (fenced: a publisher that
    lost it writes no pointer).  Older versions are deleted once they are :data:`BM25_KEEP_S`
    older than the newest, never the new one, the previous one or the one the pointer names.

    Returns
    -------
    int
        Documents indexed.

    Raises
    ------
    ValueError
        ``ids`` and ``texts`` differ in length, or ``ids`` has duplicates.
    situate.resources.store.objects.StoreUnavailable
        The object store failed; the published index is then unchanged.
    """
    folder = store.remote
    if folder is None:
        return build_bm25(ids, texts, store.bm25_dir, structural_texts, kinds)

    from situate.resources.store.leases import check_held
    from situate.resources.store.store import BM25_POINTER, bm25_version_of, forget_bm25_pointer

    with tempfile.TemporaryDirectory(prefix="situate-bm25-") as tmp:
        n = build_bm25(ids, texts, Path(tmp) / "bm25", structural_texts, kinds)
        built = (Path(tmp) / "bm25").resolve()
        version = f"v-{uuid.uuid4().hex[:16]}"
        folder.upload_dir(built, f"bm25/{version}")
    try:
        previous = bm25_version_of(folder.get(BM25_POINTER), folder.uri)
    except ValueError:  # a damaged pointer: replaced below, nothing kept for it
        previous = None
    check_held("/.bm25.lease")  # fencing: a publisher that lost the lease leaves the pointer alone
    folder.put(BM25_POINTER, version.encode())
    forget_bm25_pointer(folder.uri)
    _delete_old_bm25_versions(folder, keep={version, previous})
    return n


#: Seconds a BM25 version stays after a newer one is published: a reader that read the old
#: pointer just before has this long to download it (a few MB: seconds) before it may go.
BM25_KEEP_S = 600.0


def _delete_old_bm25_versions(folder, keep: set) -> None:
    """Delete ``bm25/v-*`` versions other than ``keep`` and the one ``bm25/CURRENT`` names now
    (another publisher may have moved it), and only those uploaded :data:`BM25_KEEP_S` seconds
    before the newest (both times from the store's own ``Last-Modified``: no machine's clock)."""
    from situate.resources.store.store import BM25_POINTER, bm25_version_of

    try:
        keep = keep | {bm25_version_of(folder.get(BM25_POINTER), folder.uri)}
    except ValueError:
        pass
    files: dict[str, list[str]] = {}
    for rel in folder.list("bm25"):
        name = rel.split("/")[1] if rel.count("/") >= 2 else None
        if name and name.startswith("v-"):
            files.setdefault(name, []).append(rel)
    stamps = {}
    for name, rels in files.items():
        meta = folder.head(sorted(rels)[0])
        stamps[name] = meta["last_modified"].timestamp() if meta else None
    newest = max((t for t in stamps.values() if t is not None), default=None)
    for name, rels in files.items():
        if name in keep or newest is None or stamps[name] is None or newest - stamps[name] < BM25_KEEP_S:
            continue
        for rel in rels:
            folder.delete(rel)


def rebuild_bm25_from_table(store) -> dict:
    """Rebuild the BM25 indexes from every row of the store's table: the contextualised text
    (structural context + blurb + chunk) and, in :data:`STRUCTURAL`, the same without the blurb.

    Holds the data folder's ``.bm25`` lock (:meth:`situate.resources.store.store.Store.lock`: a file lock, or a
    lease object shared by every machine on an object store) from reading the table to
    publishing the index, so two runs finishing together publish their indexes one after the
    other and the last one published has read every row committed before it: the index never
    goes back to an older table version.

    Returns
    -------
    dict
        ``{"rows": n, "table_version": v}``.
    """
    with store.lock(".bm25"):  # no document key starts with "."
        table = store.table()
        if table is None:
            publish_bm25(store, [], [], [])
            return {"rows": 0, "table_version": None}
        version = table.version
        names = [n for n in ("chunk_id", "context", "blurb", "text", "kind") if n in table.schema.names]
        data = table.search().select(names).limit(None).to_arrow().to_pylist()
        data.sort(key=lambda r: r["chunk_id"])
        ids = [r["chunk_id"] for r in data]
        texts = [contextualized_text(r["blurb"] or "", r["text"], r.get("context") or "") for r in data]
        structural = [contextualized_text("", r["text"], r.get("context") or "") for r in data]
        kinds = [r.get("kind") or "prose" for r in data] if "kind" in names else None
        publish_bm25(store, ids, texts, structural, kinds)
        return {"rows": len(ids), "table_version": version}


@dataclasses.dataclass
class Hit:
    """One search result (the JSON of ``situate search --json``)."""

    rank: int
    score: float
    chunk_id: str
    doc_id: str
    source: str
    chunk_index: int
    blurb: str
    text: str
    context: str = ""
    #: The cross-encoder's logit when the hit was reranked (:func:`situate.resources.models.reranker.rerank_hits`),
    #: else ``None``.
    rerank_score: float | None = None
    #: What placed a reranked hit (``None`` otherwise): its rank in the first stage's order and in
    #: the cross-encoder's order of the reranked candidates (1 = highest logit).  With the default
    #: ``rrf`` rerank fusion, ``score = 1/(60 + first_stage_rank) + 1/(60 + rerank_rank)`` and the
    #: hits are in descending ``score``, so a higher logit can sit below a lower one that the first
    #: stage ranked far higher.
    first_stage_rank: int | None = None
    rerank_rank: int | None = None
    #: The collection the hit comes from, in a search of several (:func:`situate.pipelines.operations.
    #: search_collections`); ``""`` in a search of one data folder.
    collection: str = ""
    #: Where the chunk is in its document: 1-based lines (inclusive) and UTF-8 byte offsets
    #: ``[start, end)`` of the text situate read (``None`` in rows of a table written before).
    start_line: int | None = None
    end_line: int | None = None
    start_byte: int | None = None
    end_byte: int | None = None
    #: The cosine similarity of the query's and the chunk's embedding vectors (the dense ranking's
    #: own measure, -1 to 1): one scale across queries of one embedder, unlike ``score`` (the
    #: fused score, which orders the hits of one query: its best is near 1 whatever it found).
    #: Below :data:`WEAK_MATCH` for bge-small-en-v1.5, a hit is unlikely to answer the query.
    similarity: float | None = None

    @property
    def location(self) -> str:
        """``source:start-end`` (``source:line`` for one line; the source alone without lines)."""
        if self.start_line is None:
            return self.source
        end = f"-{self.end_line}" if self.end_line and self.end_line != self.start_line else ""
        return f"{self.source}:{self.start_line}{end}"

    def to_json(self) -> dict:
        """The hit as JSON, with its :attr:`location`; ``collection`` only in a search of several
        collections."""
        out = dataclasses.asdict(self) | {"location": self.location}
        if not self.collection:
            del out["collection"]
        return out


def dense_scored(table, query_vector, candidates: int) -> list[tuple[str, float]]:
    """``(chunk id, cosine similarity)`` of the ``candidates`` rows of the LanceDB ``table``
    nearest ``query_vector`` (shape ``(dim,)``), nearest first; through the vector index when the
    table has one (probing :data:`situate.resources.store.store.NPROBES` partitions)."""
    from situate.resources.store.store import NPROBES, vector_index_name

    q = (
        table.search(np.asarray(query_vector, dtype=np.float32), vector_column_name="vector")
        .distance_type("cosine")
        .limit(candidates)
        .select(["chunk_id", "_distance"])
    )
    if vector_index_name(table) is not None:  # approximate: probe enough partitions for recall
        q = q.nprobes(NPROBES)
    return [(r["chunk_id"], 1.0 - float(r["_distance"])) for r in q.to_list()]


def dense_search(table, query_vector, candidates: int) -> list[str]:
    """The ids of :func:`dense_scored`, nearest first."""
    return [cid for cid, _ in dense_scored(table, query_vector, candidates)]


def _chunk_ids_in(chunk_ids: list[str]) -> str:
    """The LanceDB filter ``chunk_id IN (...)`` of ``chunk_ids`` (each quoted)."""
    from situate.resources.store.store import sql_quote

    return f"chunk_id IN ({', '.join(sql_quote(c) for c in chunk_ids)})"


def cosines_of(table, query_vector, chunk_ids: list[str]) -> dict[str, float]:
    """The cosine similarity of ``query_vector`` and each row of ``chunk_ids`` still in ``table``
    (read from the rows' vectors: for a BM25 candidate outside the dense top list)."""
    if not chunk_ids:
        return {}
    rows = table.search().where(_chunk_ids_in(chunk_ids)).select(["chunk_id", "vector"]).limit(len(chunk_ids))
    q = np.asarray(query_vector, dtype=np.float64)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    out = {}
    for r in rows.to_list():
        v = np.asarray(r["vector"], dtype=np.float64)
        out[r["chunk_id"]] = float(q @ v) / max(float(np.linalg.norm(v)), 1e-12)
    return out


def candidates_of(
    table,
    query_vector,
    dense: list[tuple[str, float]],
    sparse: list,
    cosines: bool = True,
    dense_ranks: dict | None = None,
) -> Candidates:
    """Every chunk in the dense or a BM25 top list, with its rank and score in each
    (:class:`situate.resources.store.fusion.Candidates`).

    Parameters
    ----------
    dense : list of (str, float)
        :func:`dense_scored`'s list.
    sparse : list of (list of str, (ids, float32[n_rows]) or None)
        Each BM25 index's top list and :func:`bm25_scores`' whole answer.
    cosines : bool
        Read the cosine of the candidates outside the dense top list from their vectors (a
        filtered read of the table: about 40 ms at 6,267 rows without a ``chunk_id`` index, here);
        without, they get -1 (:func:`read_cosines_where_needed` reads only those a fusion needs).
    dense_ranks : dict, optional
        Each dense chunk's rank (from 1) when it is not its place in ``dense`` (:func:`dense_by_kind`:
        code and prose chunks ranked by their own query vectors).
    """
    ids = list(dict.fromkeys([c for c, _ in dense] + [c for top, _ in sparse for c in top]))
    at = {c: i for i, c in enumerate(ids)}
    ranks = np.full((1 + len(sparse), len(ids)), np.inf)
    scores = np.zeros((1 + len(sparse), len(ids)))
    cos = dict(dense)
    if cosines:
        cos |= cosines_of(table, query_vector, [c for c in ids if c not in cos])
    scores[0] = [cos.get(c, -1.0) for c in ids]  # -1: a BM25 row no longer in the table
    for r, (c, _) in enumerate(dense, start=1):
        ranks[0, at[c]] = r if dense_ranks is None else dense_ranks[c]
    for j, (top, scored) in enumerate(sparse, start=1):
        for r, c in enumerate(top, start=1):
            ranks[j, at[c]] = r
        if scored is not None:
            rows = _rows_by_id(scored[0])
            scores[j] = [scored[1][rows[c]] if c in rows else 0.0 for c in ids]
    return Candidates(ids, ranks, scores)


def read_cosines_where_needed(
    table, query_vector, cands: Candidates, kinds: dict[str, str], keep: int, code_vector=None
) -> int:
    """Give the candidates outside the dense top list their cosine where a score fusion needs it:
    each first gets the lowest cosine dense returned (an upper bound: dense did not return it);
    then, until no bound is left there, the ones a score fusion of the folder's kinds
    (:data:`FUSION_BY_KIND`) puts at or above the deepest position the merged first ``keep``
    reach (:func:`situate.resources.store.fusion.kind_positions`) are read from their vectors
    (:func:`cosines_of`).  So the first ``keep`` of :func:`situate.resources.store.fusion.fuse_by_kind`
    are exact, at no read of the table in most searches (19 of CoSQA's 500 with ``keep = 20``)
    and one or two in the others.  With ``code_vector``, a code chunk's cosine is with that vector
    (:func:`dense_by_kind`).  Changes ``cands.scores[0]`` in place; returns the cosines read.
    """
    missing = np.isinf(cands.ranks[0])
    if not missing.any():
        return 0
    exact = ~missing
    # the bound: the lowest cosine dense returned with the same query vector (one per kind with a code vector)
    groups = [np.ones(len(cands.ids), bool)]
    if code_vector is not None:
        code = np.array([kinds.get(i) == "code" for i in cands.ids])
        groups = [code, ~code]
    for g in groups:
        cands.scores[0][missing & g] = float(cands.scores[0][exact & g].min()) if (exact & g).any() else 1.0
    prose = FUSION_BY_KIND["prose"]
    by_score = {FUSION_BY_KIND.get(kinds.get(i, "prose"), prose) for i in cands.ids}
    by_score = [f for f in by_score if f.method == "score"]
    read = 0
    while by_score:
        position = np.sort(kind_positions(cands, kinds))
        depth = int(max(keep, position[min(keep, len(position)) - 1] + 1))  # +1: a tie at the cut
        need = set()
        for f in by_score:
            top = np.argsort(-kind_scores(f, cands.ranks, cands.scores), kind="stable")[:depth]
            need |= {int(i) for i in top if not exact[i]}
        if not need:
            break
        cos = kind_cosines(table, query_vector, code_vector, [cands.ids[i] for i in need], kinds)
        for i in need:
            cands.scores[0][i], exact[i] = cos.get(cands.ids[i], -1.0), True
        read += len(need)
    return read


def kind_cosines(table, query_vector, code_vector, chunk_ids: list[str], kinds: dict[str, str]) -> dict[str, float]:
    """:func:`cosines_of` ``chunk_ids``, code chunks' with ``code_vector`` when it is given."""
    if code_vector is None:
        return cosines_of(table, query_vector, chunk_ids)
    code = [c for c in chunk_ids if kinds.get(c) == "code"]
    other = [c for c in chunk_ids if kinds.get(c) != "code"]
    return cosines_of(table, query_vector, other) | cosines_of(table, code_vector, code)


_PRESENT: dict[int, tuple[dict, frozenset]] = {}


def kinds_present(kinds: dict[str, str]) -> frozenset:
    """The kinds ``kinds`` holds (kept with the loaded index's map: one pass a version, not a search)."""
    hit = _PRESENT.get(id(kinds))
    if hit is None or hit[0] is not kinds:
        if len(_PRESENT) >= 8:
            _PRESENT.clear()
        hit = _PRESENT[id(kinds)] = (kinds, frozenset(kinds.values()))
    return hit[1]


def dense_by_kind(
    table, query_vector, code_vector, kinds: dict[str, str], candidates: int
) -> tuple[list[tuple[str, float]], dict[str, int]]:
    """The dense candidates when code chunks are compared with their own query vector
    (:meth:`situate.resources.models.llm.Embedder.code_query_vector`): each chunk with its cosine
    and its rank, a code chunk's in the top ``candidates`` by ``code_vector``, any other's in the
    top ``candidates`` by ``query_vector`` (as without a code vector, so prose ranks as before).
    A folder of one kind makes one search.

    Returns
    -------
    (list of (chunk id, cosine), {chunk id: rank from 1})
    """
    present = kinds_present(kinds)
    plain = dense_scored(table, query_vector, candidates) if present - {"code"} else []
    code = dense_scored(table, code_vector, candidates) if "code" in present else []
    ranks = {c: r for r, (c, _) in enumerate(plain, start=1) if kinds.get(c) != "code"}
    ranks |= {c: r for r, (c, _) in enumerate(code, start=1) if kinds.get(c) == "code"}
    kept = [(c, v) for c, v in plain if kinds.get(c) != "code"] + [(c, v) for c, v in code if kinds.get(c) == "code"]
    return kept, ranks


_ROWS: dict[int, tuple[list[str], dict[str, int]]] = {}


def _rows_by_id(ids: list[str]) -> dict[str, int]:
    """``{chunk id: row}`` of a loaded index's ids (kept with the loaded list)."""
    hit = _ROWS.get(id(ids))
    if hit is None or hit[0] is not ids:
        hit = (ids, {c: i for i, c in enumerate(ids)})
        if len(_ROWS) >= 8:  # a few index versions at a time (each folder's two indexes)
            _ROWS.clear()
        _ROWS[id(ids)] = hit
    return hit[1]


#: A hit whose :attr:`Hit.similarity` is below this is unlikely to answer its query (bge-small-en-v1.5,
#: the default embedder, and its query instruction): on the docs set's dev half, above the top hit of
#: every one of 50 nonsense queries (at most 0.673) and below the top hit of 86% of the 50 questions
#: (``benchmarks/score_scale.py``, report ``benchmarks/reports/score-scale-docs.md``, docs/quality.md).
WEAK_MATCH = 0.68


#: The table's columns of a chunk's place in its document (:class:`Hit`'s fields of the same names).
LOCATION = ("start_line", "end_line", "start_byte", "end_byte")


def rows_of(table, chunk_ids: list[str]) -> dict[str, dict]:
    """The rows of ``chunk_ids`` in ``table`` by id (a hit's columns; ``context`` where the table
    has it): the ids that are no longer there are missing."""
    have = set(table.schema.names)
    cols = ["chunk_id", "doc_id", "source", "chunk_index", "context", "blurb", "text", *LOCATION]
    cols = [c for c in cols if c in have]  # a table written before structural context or lines
    rows = table.search().where(_chunk_ids_in(chunk_ids)).select(cols).limit(len(chunk_ids)).to_list()
    return {r["chunk_id"]: r for r in rows}


def bm25_lists(store, table, query: str, candidates: int, fusion: str, warnings: list[str]) -> list:
    """Each BM25 index's ``(top ids, bm25_scores answer)`` for :func:`hybrid_search` (the
    structural one only for ``rrf``); one empty list without a readable index.  Problems go to
    ``warnings``."""
    ids = bm25_ids(store.bm25_dir)
    if ids is None:
        warnings.append(
            "no readable BM25 index: dense results only (run `situate ingest` again, or "
            "materialise bm25_index, to rebuild it)"
        )
        return [([], None)]
    if len(ids) != table.count_rows():
        warnings.append(f"BM25 index has {len(ids)} rows, the table {table.count_rows()}: materialise bm25_index")
    scored = bm25_scores(store.bm25_dir, query)
    if not any(tokenize([query]).ids):
        warnings.append("the query has no BM25 terms (only stopwords or punctuation): dense results only")
    out = [_top(scored, candidates)]
    if fusion != "rrf":
        return out
    if not (store.bm25_dir / STRUCTURAL).exists():
        warnings.append(
            "the BM25 index predates its structural part (BM25 without the blurb): two rankings "
            "only; run `situate ingest` again to rebuild it"
        )
        return out
    structural = bm25_scores(store.bm25_dir / STRUCTURAL, query)
    return out + [_top(structural, candidates)]


def _top(scored: tuple[list[str], np.ndarray] | None, k: int) -> tuple[list[str], tuple | None]:
    """``(top k ids, scored)`` of one index's :func:`bm25_scores` answer ([] for None)."""
    return ([] if scored is None else top_ids(*scored, k)), scored


def hits_of(table, fused: list[tuple[str, float]], k: int) -> list[Hit]:
    """The first ``k`` of ``fused`` (``(chunk id, score)``, best first) still in ``table``, as
    :class:`Hit`; rows are read ``2 k`` ids at a time, so ids a stale BM25 index still holds are
    passed over instead of leaving the list short."""
    hits: list[Hit] = []
    for start in range(0, len(fused) if k > 0 else 0, 2 * k):
        window = fused[start : start + 2 * k]
        rows = rows_of(table, [cid for cid, _ in window])
        for cid, score in window:
            r = rows.get(cid)
            if r is None:  # in the BM25 index but no longer in the table
                continue
            hit = Hit(len(hits) + 1, round(score, 6), cid, r["doc_id"], r["source"], int(r["chunk_index"]),
                      r["blurb"] or "", r["text"], r.get("context") or "",
                      **{c: r.get(c) for c in LOCATION})  # fmt: skip
            hits.append(hit)
            if len(hits) == k:
                return hits
    return hits


def hybrid_search(
    store,
    query_vector: np.ndarray,
    query: str,
    k: int = 10,
    candidates: int = CANDIDATES,
    fusion: str = "rrf",
    code_vector: np.ndarray | None = None,
) -> tuple[list[Hit], list[str]]:
    """Dense top-``candidates`` over the contextualised text, BM25 top-``candidates`` over the
    same and, when the index has one, BM25 top-``candidates`` over the structural context and
    chunk without the blurb (:data:`STRUCTURAL`), fused (``rrf`` or ``weighted``, :func:`fuse`);
    top ``k`` out.  ``rrf`` over an index that keeps each chunk's kind (code or prose) fuses each
    chunk by its kind's own fusion (:func:`situate.resources.store.fusion.fuse_by_kind`, over
    :func:`candidates_of`: every candidate's cosine and BM25 scores): code adds a small share of
    structural BM25 to the cosine, prose weighs the three rankings the same by RRF.

    The third ranking keeps a chunk whose blurb misleads BM25 in one list; measured with
    ``situate eval`` on both labelled corpora (docs/quality.md: ``contextual+structural-bm25``).
    ``weighted`` fuses the first two only (the cookbook's weights are for two rankings).

    Parameters
    ----------
    store : situate.resources.store.store.Store
    query_vector : float32[dim]
        The query's L2-normalised embedding (with the embedder's query prefix).
    query : str
        The query text, for BM25.
    k : int
        Results returned.
    code_vector : float32[dim], optional
        The query's vector for code chunks (the embedder's learnt code map,
        :meth:`situate.resources.models.llm.Embedder.code_query_vector`): code chunks' dense rank and
        cosine are with it (:func:`dense_by_kind`), in an index that keeps each chunk's kind.  A
        hit's :attr:`Hit.similarity` stays the plain query vector's cosine (:data:`WEAK_MATCH`'s scale).

    Returns
    -------
    (hits, warnings)
        ``warnings`` names problems such as a BM25 index out of step with the table.
    """
    warnings: list[str] = []
    candidates = max(candidates, k)  # k above the usual depth: look deeper
    table = store.table()
    if table is None:
        return [], ["the table is empty: run `situate ingest PATH` first"]
    kinds = bm25_kinds(store.bm25_dir) if fusion == "rrf" else None
    code_vector = code_vector if kinds is not None else None
    if code_vector is None:
        dense, dense_ranks = dense_scored(table, query_vector, candidates), None
    else:
        dense, dense_ranks = dense_by_kind(table, query_vector, code_vector, kinds, candidates)
    sparse = bm25_lists(store, table, query, candidates, fusion, warnings)
    if kinds is not None:
        cands = candidates_of(table, query_vector, dense, sparse, cosines=False, dense_ranks=dense_ranks)
        read_cosines_where_needed(table, query_vector, cands, kinds, keep=2 * k, code_vector=code_vector)
        fused = fuse_by_kind(cands, kinds)
    else:
        fused = fuse([[c for c, _ in dense]] + [top for top, _ in sparse], fusion)
    if not fused:
        return [], warnings
    if "context" not in table.schema.names:  # a table written before structural context
        warnings.append("the table predates structural context: run `situate ingest` again")
    hits = hits_of(table, fused, k)
    similar = cosines_of(table, query_vector, [h.chunk_id for h in hits])
    for h in hits:
        h.similarity = round(similar[h.chunk_id], 4) if h.chunk_id in similar else None
    return hits, warnings
