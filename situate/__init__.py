"""situate: Contextual Retrieval on your own documents, offline.

The public Python API for applications: ingest a folder into a data folder, then search it.  Both
run in the calling process (no server, no API key): the first search loads the embedder and the
BM25 index, later searches reuse them.

Examples
--------
>>> import situate
>>> summary = situate.ingest("~/notes", home="~/.situate-notes")     # doctest: +SKIP
>>> summary.failed                                                   # doctest: +SKIP
{}
>>> hits = situate.search("how do I rotate the keys?", k=5, home="~/.situate-notes")  # doctest: +SKIP
>>> hits[0].source, hits[0].blurb                                    # doctest: +SKIP
('ops/keys.md', 'This chunk is about rotating the signing keys every 90 days ...')
"""

from __future__ import annotations

import warnings as _warnings
from collections.abc import Callable

from situate.pipelines.operations import MAX_K, IngestSummary, QueryError
from situate.pipelines.operations import ingest as _ingest
from situate.pipelines.operations import search as _search
from situate.pipelines.operations import search_collections as _search_collections
from situate.pipelines.preflight import StartupError
from situate.resources.errors import SituateError
from situate.resources.store.retrieval import Hit

__all__ = [
    "MAX_K",
    "Hit",
    "IngestSummary",
    "QueryError",
    "SearchWarning",
    "SituateError",
    "StartupError",
    "ingest",
    "search",
]


class SearchWarning(UserWarning):
    """What a search answered despite: an empty table, a query cut for the embedder, a query of
    stopwords only, ``k`` above the row count, a reranker not installed."""


def search(
    query: str,
    k: int = 10,
    rerank: int | None = None,
    home: str | None = None,
    collections: dict[str, str] | None = None,
) -> list[Hit]:
    """Hybrid search of an ingested data folder: dense (LanceDB) and BM25 over the contextualised
    text (structural context, blurb, chunk) and BM25 over the structural context and chunk without
    the blurb, fused by reciprocal rank fusion, optionally reranked.

    Parameters
    ----------
    query : str
        What to look for, in words.
    k : int
        Hits returned, 1 to 1,000,000 (default 10).
    rerank : int, optional
        Candidates the local cross-encoder reranks (its order fused with the first stage's by
        RRF); 0 turns it off.  Default: ``SITUATE_RERANK_DEPTH``, else 0 (measured on both labelled
        corpora, docs/quality.md).  About 0.06-0.08 s a candidate on 2 CPU cores.
    home : str, optional
        The data folder given to :func:`ingest`; default ``$SITUATE_HOME``, else ``./.situate``.
    collections : dict, optional
        Collection name → data folder: search each (``home`` is then unused) and fuse their hits
        by reciprocal rank fusion, each hit's ``collection`` naming where it comes from.

    Returns
    -------
    list of Hit
        At most ``k``, best first: ``rank``, ``score``, ``chunk_id``, ``doc_id``, ``source`` (path
        relative to the docs folder), ``chunk_index``, ``blurb`` (the LLM's situating context),
        ``context`` (the structural context: file, headings, enclosing definitions), ``text`` (the
        chunk) and ``rerank_score`` (None without rerank).  ``Hit.to_json()`` is the object
        ``situate search --json`` prints.

    Warns
    -----
    SearchWarning
        For each thing the search answered despite (see :class:`SearchWarning`).

    Raises
    ------
    QueryError
        The query is empty, ``k`` is outside 1..1,000,000, or ``rerank`` is negative.
    StartupError
        The data folder does not exist, or its vectors are of another width than the embedder's.

    Examples
    --------
    >>> import situate
    >>> [h.source for h in situate.search("parse a .env file", k=3, home="demo-home")]  # doctest: +SKIP
    ['dotenv-main.py', 'dotenv-main.py', 'tiktoken-README.md']
    """
    if collections is not None:
        hits, notes = _search_collections(query, collections, k, rerank)
    else:
        hits, notes = _search(query, k, home, rerank)
    for note in notes:
        _warnings.warn(note, SearchWarning, stacklevel=2)
    return hits


def ingest(
    path: str,
    home: str | None = None,
    replace: bool = False,
    progress: Callable[[str], None] | None = print,
    allow_removal: bool = False,
    verbose: bool = False,
) -> IngestSummary:
    """Ingest a folder (or one file, such as a corpus JSON) into a data folder: new and changed
    documents go through the whole chain (chunks, fitted preambles, blurbs, embeddings, BM25
    index) as Dagster runs in this process; unchanged ones cost nothing; removed ones lose their
    rows.

    Parameters
    ----------
    path : str
        The docs folder or file.
    home : str, optional
        The data folder; default ``$SITUATE_HOME``, else ``./.situate``.  A non-empty folder that
        is not a situate data folder is refused.
    replace : bool
        The data folder holds another docs folder's documents: replace them (without it, refused).
    progress : callable or None
        Receives the ingest's own lines (the plan, each run, failures; default ``print``); None
        for silence.  The runs write one short line a stage's progress step, warning and error
        to standard error (:mod:`situate.pipelines.progress_log`).
    allow_removal : bool
        Remove the rows of documents gone from the folder even when more than half of them (at
        least 3) or all are gone; otherwise such a removal is held and
        ``IngestSummary.removal_held`` says why (an unmounted share?).
    verbose : bool
        The runs write Dagster's console log (every INFO line, each document's own) instead of
        the short lines.

    Returns
    -------
    IngestSummary
        Documents, chunks, LLM calls and cache hits, usable blurbs and fallbacks, prompt tokens
        evaluated / reused, seconds, and ``failed``: source to reason for every document that
        could not be read (the others are ingested).

    Raises
    ------
    StartupError
        A setting, the data folder, the docs folder or a model file is not usable (one line).

    Examples
    --------
    >>> import situate
    >>> s = situate.ingest("docs/", home="docs-home")   # doctest: +SKIP
    >>> s.documents, s.chunks, s.failed                  # doctest: +SKIP
    (3, 9, {})
    """
    return _ingest(
        path,
        home,
        echo=progress or (lambda _line: None),
        replace=replace,
        allow_removal=allow_removal,
        verbose=verbose,
    )
