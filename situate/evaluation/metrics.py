"""Retrieval evaluation: datasets, the cookbook's metric, and ranking for each configuration.

Plain functions (no Dagster), used by ``situate eval`` and the ``retrieval_eval`` asset.

The metric is the one Anthropic's contextual-embeddings cookbook reports (eval/README.md):
Pass@k of a query = golden chunks found in the top k / golden chunks, averaged over queries, in
percent; failure@20 = 100 − Pass@20 (the blog's "retrieval failure rate").  MRR@10 is the mean of
1 / rank of the first golden chunk within the top 10 (0 when none).  It is a few lines of code and
the reference the figures are compared with; a metric library would compute the same over the
same ranks.

Examples
--------
>>> pass_at_k([("d", 3), ("d", 1)], [("d", 1), ("d", 2)], k=2)
0.5
>>> mrr_at_k([("d", 3), ("d", 1)], [("d", 1)], k=10)
0.5
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: The configurations of ``situate eval``, in the order they are reported.
#: ``blurb`` is the published recipe with the local model's blurb alone (no structural context),
#: dense + BM25; ``contextual`` is what ``situate search`` does (no rerank by default).
CONFIGS = ("chunk", "chunk+bm25", "heuristic", "contextual-dense", "blurb", "contextual", "contextual+rerank")
#: Also available by name: ``document-context``, one LLM summary per document + chunk (a second
#: pass of the LLM over every document: left out of the default run for its cost);
#: ``blurb-ungrounded``, ``blurb`` before grounding; ``ensemble``, contextual dense + contextual BM25 + dense over
#: the chunk alone, fused; ``contextual+rerank-replace``, the cross-encoder's order alone (the
#: cookbook's rerank) instead of fused with the first stage's; ``contextual+rerank-blurb``, the
#: cross-encoder reading the LLM blurb as well as the structural context and the chunk;
#: ``contextual+structural-bm25``, ``contextual``'s two rankings and a third, BM25 over the
#: structural context and the chunk without the blurb (so a misleading blurb cannot push a chunk
#: out of every list), fused by RRF, computed in memory (equal to ``contextual``, which runs
#: ``situate search`` on the pipeline's own index, since search fuses these three rankings);
#: ``contextual-2-rankings``, ``contextual``'s first two rankings only (the search default before
#: the third ranking was measured on both corpora); ``fusion-cv``, a weighted RRF over up to seven
#: rankings chosen by cross-validation over the queries (:mod:`situate.evaluation.fusion_fit`).
EXTRA_CONFIGS = (
    "document-context",
    "blurb-ungrounded",
    "contextual-ungrounded",
    "ensemble",
    "contextual+rerank-replace",
    "contextual+rerank-blurb",
    "contextual+structural-bm25",
    "contextual-2-rankings",
    "fusion-cv",
)
#: Cut-offs reported (the cookbook's k = 5, 10, 20).
KS = (5, 10, 20)
#: Candidates each retriever passes to fusion and the deepest rank recorded (cookbook: 150).
DEPTH = 150

Key = tuple[str, int]  # (doc_id, chunk_index)


@dataclasses.dataclass
class Query:
    """One evaluation query: ``golden`` lists (doc_id, chunk_index) pairs."""

    query_id: str
    query: str
    golden: list[Key]


def load_queries(path: str | Path) -> list[Query]:
    """Queries in the cookbook's JSON-lines form
    ``{"query_id", "query", "golden": [[doc_id, chunk_index], ...]}``.

    Raises
    ------
    ValueError
        A line is not JSON or lacks ``query``/``golden`` (the message names the file and line).
    """
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            golden = [(str(g[0]), int(g[1])) for g in d["golden"]]
            out.append(Query(str(d.get("query_id", n)), d["query"], list(dict.fromkeys(golden))))
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise ValueError(f"{path}:{n}: not a query line ({e})") from e
    return out


def load_beir(folder: str | Path, qrels: str | Path | None = None) -> tuple[list[dict], list[Query]]:
    """A BEIR dataset (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``) at document level.

    Each BEIR document becomes one corpus entry with a single chunk (title, blank line, text), so
    golden keys are ``(doc id, 0)``; queries without a relevant document are left out.

    Returns
    -------
    (corpus, queries)
        ``corpus`` in the cookbook's form (``{"doc_id", "content", "chunks": [...]}``).

    Raises
    ------
    FileNotFoundError
        A BEIR file is missing.
    """
    folder = Path(folder)
    qrels_path = (
        Path(qrels)
        if qrels
        else next(
            (
                p
                for p in (folder / "qrels" / "test.tsv", folder / "qrels" / "dev.tsv", folder / "qrels.tsv")
                if p.exists()
            ),
            folder / "qrels" / "test.tsv",
        )
    )
    corpus = []
    for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            text = "\n\n".join(x for x in (d.get("title", ""), d.get("text", "")) if x)
            corpus.append(
                {
                    "doc_id": str(d["_id"]),
                    "content": text,
                    "chunks": [{"chunk_id": f"{d['_id']}_0", "original_index": 0, "content": text}],
                }
            )
    rel: dict[str, list[Key]] = {}
    with open(qrels_path, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 3:
                continue
            try:
                grade = float(row[2])
            except ValueError:  # a header line
                continue
            if grade > 0 and (row[1], 0) not in rel.get(row[0], []):
                rel.setdefault(row[0], []).append((row[1], 0))
    queries = []
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            if str(d["_id"]) in rel:
                queries.append(Query(str(d["_id"]), d["text"], rel[str(d["_id"])]))
    return corpus, queries


def pass_at_k(ranked: Sequence[Key], golden: Sequence[Key], k: int) -> float:
    """Share of ``golden`` found in ``ranked[:k]`` (0..1; the cookbook's Pass@k of one query)."""
    if not golden:
        raise ValueError("a query without golden chunks")
    top = set(ranked[:k])
    return sum(g in top for g in set(golden)) / len(set(golden))


def mrr_at_k(ranked: Sequence[Key], golden: Sequence[Key], k: int = 10) -> float:
    """1 / rank of the first golden chunk in ``ranked[:k]`` (ranks from 1), 0 when none."""
    gold = set(golden)
    for rank, key in enumerate(ranked[:k], start=1):
        if key in gold:
            return 1.0 / rank
    return 0.0


def golden_ranks(ranked: Sequence[Key], golden: Sequence[Key]) -> list[int | None]:
    """Rank (from 1) of each golden chunk in ``ranked``, None when absent."""
    pos = {key: i for i, key in reversed(list(enumerate(ranked, start=1)))}
    return [pos.get(g) for g in golden]


def score(rankings: Sequence[Sequence[Key]], queries: Sequence[Query]) -> dict:
    """The cookbook's figures over all queries, in percent (``mrr@10`` as a fraction): each query's
    distinct golden chunks ranked in ``rankings`` (:func:`golden_ranks`), scored by
    :func:`score_ranks`.

    Returns
    -------
    dict
        ``{"pass@5", "pass@10", "pass@20", "failure@20", "mrr@10"}``.

    Raises
    ------
    ValueError
        Not one ranking a query, no queries, or a query without golden chunks.
    """
    if len(rankings) != len(queries):
        raise ValueError(f"{len(rankings)} rankings for {len(queries)} queries")
    return score_ranks([golden_ranks(r, list(dict.fromkeys(q.golden))) for r, q in zip(rankings, queries)])


def dense_rankings(
    query_vectors: np.ndarray, doc_vectors: np.ndarray, ids: Sequence[str], depth: int = DEPTH
) -> list[list[str]]:
    """Exact cosine top-``depth`` ids per query.

    Parameters
    ----------
    query_vectors : float32[n_queries, dim]
    doc_vectors : float32[n_chunks, dim]
        Both L2-normalised (the embedder's output).
    ids : sequence of str
        ``n_chunks`` ids, row order of ``doc_vectors``.
    """
    sims = np.asarray(query_vectors, np.float32) @ np.asarray(doc_vectors, np.float32).T
    depth = min(depth, sims.shape[1])
    top = np.argsort(-sims, axis=1, kind="stable")[:, :depth]
    return [[ids[j] for j in row] for row in top]


def bm25_rankings(
    texts: Sequence[str], ids: Sequence[str], queries: Sequence[str], depth: int = DEPTH, identifiers: bool = False
) -> list[list[str]]:
    """BM25 top-``depth`` ids per query over ``texts`` (bm25s, in memory, the same tokenizer as
    the pipeline's index: :func:`situate.resources.store.retrieval.tokenize`, with ``identifiers``
    split into words there when set); only ids with a score > 0."""
    import bm25s

    from situate.resources.store.retrieval import tokenize

    retriever = bm25s.BM25()
    retriever.index(tokenize(list(texts), identifiers), show_progress=False)
    out = []
    for q in queries:
        tokens = tokenize([q], identifiers)
        if not tokens.vocab or not any(tokens.ids):
            out.append([])
            continue
        docs, scores = retriever.retrieve(tokens, k=min(depth, len(ids)), show_progress=False)
        out.append([ids[int(i)] for i, s in zip(docs[0], scores[0]) if s > 0])
    return out


def markdown_table(results: dict, n_queries: int) -> str:
    """The figures of :func:`score` per configuration as a Markdown table."""
    lines = [
        "| configuration | Pass@5 | Pass@10 | Pass@20 | failure@20 | MRR@10 | seconds | model calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['pass@5']:.2f} | {r['pass@10']:.2f} | {r['pass@20']:.2f} | "
            f"{r['failure@20']:.2f} | {r['mrr@10']:.4f} | {r.get('seconds', 0):.1f} | "
            f"{r.get('model_calls', 0)} |"
        )
    lines.append(f"\n{n_queries} queries; Pass@k in percent (the cookbook's definition).")
    return "\n".join(lines)


def bar_chart(results: dict, ks: Sequence[int] = KS, width: int = 40) -> str:
    """A text chart of Pass@k for each configuration and each ``k`` (a Markdown code block; the
    axis starts 5 points below the lowest value so differences show)."""
    vals = [r[f"pass@{k}"] for r in results.values() for k in ks]
    lo = max(0.0, min(vals, default=0) - 5)
    hi = max(vals, default=100)
    rows = []
    for n, r in results.items():
        for k in ks:
            v = r[f"pass@{k}"]
            bar = "█" * max(1, round(width * (v - lo) / max(1e-9, hi - lo)))
            rows.append(f"{n if k == ks[0] else '':<28} @{k:<3} {bar} {v:.2f}")
    return f"```\nPass@k (axis from {lo:.0f})\n" + "\n".join(rows) + "\n```"


#: A query written as a question: a question word or auxiliary first, or a question mark last
#: (the cookbook sets' queries all are; CoSQA's are mostly web keyword searches, "python check file
#: is readonly"); written for situate.
_QUESTION = re.compile(
    r"^\s*(?:how|what|why|when|where|which|who|whom|whose|is|are|can|does|do|did|should|could|would|will|explain|describe)\b"
    r"|\?\s*$",
    re.I,
)


def query_shape(query: str) -> str:
    """``"question"`` or ``"keywords"``: the shape of a query, for figures per shape.

    Examples
    --------
    >>> query_shape("How does the hasher reset its state?"), query_shape("python check file is readonly")
    ('question', 'keywords')
    """
    return "question" if _QUESTION.search(query) else "keywords"


# --- re-chunked corpora: a retrieved chunk scored by the labelled text it covers ---------------

#: A retrieved chunk covers a labelled chunk of the same document when their overlap is at least
#: this share of the shorter of the two (so a smaller chunk inside a long labelled one counts,
#: as does a larger chunk holding a short labelled one, and a chunk that only grazes the
#: labelled one's edge does not).  Written for situate: the usual "more than half"
#: rule of span-overlap matching.
COVER_SHARE = 0.5

Span = tuple[str, int, int]  # (doc_id, start, end), offsets in one unit (UTF-8 bytes here)


def covers(retrieved: Span, labelled: Span, share: float = COVER_SHARE) -> bool:
    """Whether ``retrieved`` covers ``labelled``: same document, and an overlap of at least
    ``share`` of the shorter span's length (empty spans cover nothing).

    Examples
    --------
    >>> covers(("d", 0, 100), ("d", 40, 60))      # holds the whole labelled chunk
    True
    >>> covers(("d", 50, 70), ("d", 0, 1000))     # a smaller chunk inside a long one
    True
    >>> covers(("d", 90, 200), ("d", 0, 100))     # grazes its end: 10 of the shorter 100
    False
    >>> covers(("e", 0, 100), ("d", 0, 100))
    False
    """
    if retrieved[0] != labelled[0]:
        return False
    shorter = min(retrieved[2] - retrieved[1], labelled[2] - labelled[1])
    overlap = min(retrieved[2], labelled[2]) - max(retrieved[1], labelled[1])
    return shorter > 0 and overlap >= share * shorter


def covering_ranks(ranked: Sequence[Span], golden: Sequence[Span]) -> list[int | None]:
    """Rank (from 1) of the first retrieved chunk that covers each golden span, None when none
    does: :func:`golden_ranks` for chunks that are not the labelled ones.

    Examples
    --------
    >>> covering_ranks([("d", 0, 50), ("d", 50, 120)], [("d", 60, 100), ("d", 0, 10), ("e", 0, 5)])
    [2, 1, None]
    """
    return [next((i for i, r in enumerate(ranked, start=1) if covers(r, g)), None) for g in golden]


def score_ranks(ranks: Sequence[Sequence[int | None]]) -> dict:
    """:func:`score`'s figures from each query's golden ranks (:func:`golden_ranks` or
    :func:`covering_ranks`): Pass@k is the share of a query's golden chunks ranked within k, and
    MRR@10 the reciprocal of its best golden rank within 10.

    Raises
    ------
    ValueError
        No queries, or a query without golden chunks.

    Examples
    --------
    >>> score_ranks([[1, None], [7]])["pass@5"], score_ranks([[1, None], [7]])["mrr@10"]
    (25.0, 0.5714)
    """
    if not ranks:
        raise ValueError("no queries to score")
    if any(not r for r in ranks):
        raise ValueError("a query without golden chunks")
    n = len(ranks)
    out = {
        f"pass@{k}": round(100 * sum(sum(x is not None and x <= k for x in r) / len(r) for r in ranks) / n, 2)
        for k in KS
    }
    out["failure@20"] = round(100 - out["pass@20"], 2)
    best = [min((x for x in r if x is not None), default=None) for r in ranks]
    out["mrr@10"] = round(sum(1 / b for b in best if b is not None and b <= 10) / n, 4)
    return out
