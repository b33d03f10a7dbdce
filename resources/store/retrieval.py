"""BM25 index (bm25s) and hybrid search: dense top-150 + BM25 top-150, fused by RRF with each kind of
chunk's own weights (code or prose, :data:`FUSION_BY_KIND`).

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

CANDIDATES = 150
RRF_K = 60


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


#: The fusion of each kind of chunk (:func:`situate.contextual.policy.kind_of`): RRF weights of
#: (dense, BM25, structural BM25) and the RRF constant k, chosen by 5-fold cross-validation (10
#: shuffles) pooled over the dev halves of each kind's labelled sets, each set weighing the same
#: (``python -m benchmarks.fusion_pooled … --kinds``, report benchmarks/reports/fusion-cv-kinds.md;
#: docs/quality.md, "One fusion for each kind of chunk").  Code (the codebase set's 124 questions
#: and CoSQA's 500 web searches): dense×2 + structural BM25×1, k = 10, chosen in 96% of the folds;
#: out of fold CoSQA Pass@5 / Pass@20 +14.74 / +14.16 (fold sd 3.38 / 3.38), the codebase set
#: +0.75 / −1.09 (sd 4.56 / 2.95).  Prose (the docs set): no re-weighting won, so equal weights,
#: k = 60 (Cormack et al. 2009).
FUSION_BY_KIND: dict[str, tuple[tuple[float, ...], int]] = {
    "prose": ((1.0, 1.0, 1.0), RRF_K),
    "code": ((2.0, 0.0, 1.0), 10),
}


def rrf_by_kind(
    rankings: Sequence[Sequence[str]],
    kinds: dict[str, str],
    fusion: dict[str, tuple[tuple[float, ...], int]] = FUSION_BY_KIND,
) -> list[tuple[str, float]]:
    """Weighted RRF with each chunk's own kind's weights and k (``fusion``; a chunk of no known
    kind is prose), put on one scale for every kind: a chunk's fused score ``s`` (weights ``w``,
    constant ``k``) is read as the rank ``r`` it would have had in every one of its kind's rankings
    (``s = Σw / (k + r)``), and chunks are ordered by that rank, scored ``(RRF_K + 1) / (RRF_K + r)``
    (1 for a chunk first everywhere).  So a code chunk ranked 10th in its rankings and a prose chunk
    ranked 10th in its own score the same, whatever their kinds' k (dividing by each kind's best
    score instead favoured the larger k: prose, at k = 60, pushed code, at k = 10, down a mixed
    folder), and a folder of one kind keeps the order its fusion gives.

    Parameters
    ----------
    rankings : sequence of sequences of str
        Ids, best first (dense, BM25, structural BM25: the order of ``fusion``'s weights; fewer
        rankings use the first weights).
    kinds : dict of str to str
        ``chunk id → kind`` (``code``, ``prose``).

    Examples
    --------
    >>> rrf_by_kind([["a", "b"], ["b", "a"]], {"a": "code"}, {"code": ((1.0, 0.0), 10), "prose": ((1.0, 1.0), 60)})
    [('a', 1.0), ('b', 0.9919354838709679)]
    """
    scores: dict[str, float] = {}
    for i, ranking in enumerate(rankings):
        for rank, item in enumerate(ranking, start=1):
            w, k = fusion.get(kinds.get(item, "prose"), fusion["prose"])
            scores[item] = scores.get(item, 0.0) + w[i] / (k + rank)
    for item, score in scores.items():
        w, k = fusion.get(kinds.get(item, "prose"), fusion["prose"])
        as_rank = sum(w[: len(rankings)]) / score - k  # the rank in every ranking that scores the same
        scores[item] = (RRF_K + 1) / (RRF_K + as_rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


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
    (:func:`rrf_by_kind`).

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


def _loaded(index_dir: Path):
    """``(ids, retriever or None, kinds or None)`` of a saved index (:func:`_read_kinds`), loaded
    once per version of ``ids.json`` (the index is swapped in whole by :func:`build_bm25`,
    ``ids.json`` with it); None without an index."""
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
            ids = json.loads(p.read_text())
            has_terms = (version / "params.index.json").exists()
            retriever = bm25s.BM25.load(str(version)) if ids and has_terms else None
            kinds = _read_kinds(version / "kinds.json", ids)
        except (OSError, ValueError, KeyError):  # a file of the index deleted or damaged by hand:
            return None  # as if there were none; the next ingest sees the mismatch and rebuilds it
        hit = (stamp, ids, retriever, kinds)
        _LOADED[str(index_dir)] = hit
    return hit[1], hit[2], hit[3]


def _read_kinds(path: Path, ids: list[str]) -> dict[str, str] | None:
    """``chunk id → kind`` from a version's ``kinds.json`` (None without one: an index written
    before kinds were kept, or one whose kinds are not a list of strings, one per id)."""
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


def bm25_search(index_dir: Path, query: str, k: int = CANDIDATES) -> list[str]:
    """Ids of the top ``k`` rows for ``query`` by BM25, best first ([] without an index).

    The index is loaded once per process and version (a search service pays the load once)."""
    loaded = _loaded(index_dir)
    if loaded is None or not loaded[0] or loaded[1] is None:
        return []
    ids, retriever, _ = loaded
    tokens = tokenize([query])
    if not tokens.vocab or not any(tokens.ids):
        return []
    docs, scores = retriever.retrieve(tokens, k=min(k, len(ids)), show_progress=False)
    return [ids[int(i)] for i, s in zip(docs[0], scores[0]) if s > 0]


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
    #: The collection the hit comes from, in a search of several (:func:`situate.pipelines.operations.
    #: search_collections`); ``""`` in a search of one data folder.
    collection: str = ""

    def to_json(self) -> dict:
        """The hit as JSON; ``collection`` only in a search of several collections."""
        out = dataclasses.asdict(self)
        if not self.collection:
            del out["collection"]
        return out


def dense_search(table, query_vector, candidates: int) -> list[str]:
    """The ids of the ``candidates`` rows of the LanceDB ``table`` nearest ``query_vector`` (shape
    ``(dim,)``) by cosine distance, nearest first; through the vector index when the table has one
    (probing :data:`situate.resources.store.store.NPROBES` partitions)."""
    from situate.resources.store.store import NPROBES, vector_index_name

    q = (
        table.search(np.asarray(query_vector, dtype=np.float32), vector_column_name="vector")
        .distance_type("cosine")
        .limit(candidates)
        .select(["chunk_id", "_distance"])
    )
    if vector_index_name(table) is not None:  # approximate: probe enough partitions for recall
        q = q.nprobes(NPROBES)
    return [r["chunk_id"] for r in q.to_list()]


def rows_of(table, chunk_ids: list[str]) -> dict[str, dict]:
    """The rows of ``chunk_ids`` in ``table`` by id (a hit's columns; ``context`` where the table
    has it): the ids that are no longer there are missing."""
    in_list = ", ".join("'" + c.replace("'", "''") + "'" for c in chunk_ids)
    cols = ["chunk_id", "doc_id", "source", "chunk_index", "context", "blurb", "text"]
    if "context" not in table.schema.names:  # a table written before structural context
        cols.remove("context")
    rows = table.search().where(f"chunk_id IN ({in_list})").select(cols).limit(len(chunk_ids)).to_list()
    return {r["chunk_id"]: r for r in rows}


def hybrid_search(
    store, query_vector: np.ndarray, query: str, k: int = 10, candidates: int = CANDIDATES, fusion: str = "rrf"
) -> tuple[list[Hit], list[str]]:
    """Dense top-``candidates`` over the contextualised text, BM25 top-``candidates`` over the
    same and, when the index has one, BM25 top-``candidates`` over the structural context and
    chunk without the blurb (:data:`STRUCTURAL`), fused (``rrf`` or ``weighted``, :func:`fuse`);
    top ``k`` out.  ``rrf`` over an index that keeps each chunk's kind (code or prose) fuses each
    chunk by its kind's weights (:func:`rrf_by_kind`, :data:`FUSION_BY_KIND`): code leans on the
    dense ranking, prose weighs the three the same.

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
    dense_ids = dense_search(table, query_vector, candidates)
    ids = bm25_ids(store.bm25_dir)
    if ids is None:
        warnings.append(
            "no readable BM25 index: dense results only (run `situate ingest` again, or "
            "materialise bm25_index, to rebuild it)"
        )
        sparse_ids = []
    else:
        if len(ids) != table.count_rows():
            warnings.append(f"BM25 index has {len(ids)} rows, the table {table.count_rows()}: materialise bm25_index")
        sparse_ids = bm25_search(store.bm25_dir, query, candidates)
        if not any(tokenize([query]).ids):
            warnings.append("the query has no BM25 terms (only stopwords or punctuation): dense results only")
    lists = [dense_ids, sparse_ids]
    if ids is not None and fusion == "rrf":
        if (store.bm25_dir / STRUCTURAL).exists():
            lists.append(bm25_search(store.bm25_dir / STRUCTURAL, query, candidates))
        else:
            warnings.append(
                "the BM25 index predates its structural part (BM25 without the blurb): two rankings "
                "only; run `situate ingest` again to rebuild it"
            )
    kinds = bm25_kinds(store.bm25_dir) if ids is not None and fusion == "rrf" else None
    fused = (rrf_by_kind(lists, kinds) if kinds is not None else fuse(lists, fusion))[: 2 * k]  # spare ids
    if not fused:
        return [], warnings
    if "context" not in table.schema.names:  # a table written before structural context
        warnings.append("the table predates structural context: run `situate ingest` again")
    rows = rows_of(table, [cid for cid, _ in fused])
    hits = []
    for cid, score in fused:
        r = rows.get(cid)
        if r is None:  # in the BM25 index but no longer in the table
            continue
        hits.append(
            Hit(
                len(hits) + 1,
                round(score, 6),
                cid,
                r["doc_id"],
                r["source"],
                int(r["chunk_index"]),
                r["blurb"] or "",
                r["text"],
                r.get("context") or "",
            )
        )
        if len(hits) == k:
            break
    return hits, warnings
