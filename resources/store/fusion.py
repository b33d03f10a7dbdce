"""One fusion for each kind of chunk: how a query's dense, BM25 and structural BM25 candidates
become one list when code and prose chunks weigh them differently.

Two methods:

* ``rrf``: ``Σ w_i / (k + rank_i)`` over the rankings a chunk is in (Cormack, Clarke & Büttcher,
  SIGIR 2009), ranks from 1 within each retriever's top :data:`situate.resources.store.retrieval.
  CANDIDATES`.
* ``score``: ``w_0 · cosine + Σ_{i ≥ 1} w_i · s_i / max s_i``, a convex-style fusion of scores
  (Bruch, Gai & Ingber, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023): the
  query-document cosine as it is, and each BM25 score divided by the query's best BM25 score in
  that index.  Where the dense scores are spread out (the embedder is sure), a BM25 match cannot
  overturn them; where they are close, BM25 decides.  Rank fusion forgets how sure each side was.

A chunk is placed at the position its own kind's fusion gives it among all the candidates
(:func:`fuse_by_kind`), so a folder of one kind is ordered by that kind's fusion, and in a folder
of both a code chunk that code's fusion puts 3rd and a prose chunk that prose's fusion puts 3rd
stand side by side.

Examples
--------
Two code chunks: ``a`` nearer the query (cosine 0.9 against 0.8), ``b`` with twice its BM25 score.

>>> ranks, scores = np.array([[1, 2], [2, 1], [2, 1]], float), np.array([[0.9, 0.8], [1.0, 2.0], [1.0, 2.0]])
>>> [i for i, _ in fuse_by_kind(Candidates(["a", "b"], ranks, scores), {"a": "code", "b": "code"})]
['a', 'b']
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: The RRF constant of Cormack et al. (2009), and the scale every fused list is reported on.
RRF_K = 60


@dataclasses.dataclass(frozen=True)
class KindFusion:
    """How one kind of chunk's three rankings (dense, BM25, structural BM25) are fused.

    Attributes
    ----------
    method : str
        ``"rrf"`` or ``"score"`` (the module's docstring).
    weights : tuple of 3 floats
        The weight of dense, BM25 and structural BM25.
    k : int
        The RRF constant (``rrf`` only).
    """

    method: str
    weights: tuple[float, float, float]
    k: int = RRF_K

    def describe(self) -> str:
        """The fusion in a line, as the docs write it (``cosine + 0.05 × structural BM25 / its best``)."""
        names = ("dense", "BM25", "structural BM25")
        if self.method == "score":
            parts = [f"{w:g} × {n} / its best" for w, n in zip(self.weights[1:], names[1:]) if w]
            return " + ".join([("" if self.weights[0] == 1 else f"{self.weights[0]:g} × ") + "cosine", *parts])
        parts = [n + ("" if w == 1 else f"×{w:g}") for w, n in zip(self.weights, names) if w]
        return f"{' + '.join(parts)}, k = {self.k}"


#: The fusion of each kind of chunk (:func:`situate.contextual.policy.kind_of`), chosen by 5-fold
#: cross-validation (10 shuffles) pooled over the dev halves of each kind's labelled sets, each set
#: weighing the same (``python -m benchmarks.fusion_scores``, report
#: benchmarks/reports/fusion-cv-scores.md; docs/quality.md, "One fusion for each kind of chunk").
#: Code (the codebase set's 124 questions and CoSQA's 500 web searches): cosine + 0.05 × structural
#: BM25 / its best; prose (the docs set): no fusion beat equal weights, k = 60.
FUSION_BY_KIND: dict[str, KindFusion] = {
    "prose": KindFusion("rrf", (1.0, 1.0, 1.0), RRF_K),
    "code": KindFusion("score", (1.0, 0.0, 0.05)),
}


@dataclasses.dataclass
class Candidates:
    """A query's candidates: every chunk in some retriever's top list, with its rank and score in
    each retriever.

    Attributes
    ----------
    ids : list of str
        Chunk ids, ``n`` of them.
    ranks : float64[3, n]
        Rank from 1 in dense, BM25 and structural BM25; ``inf`` outside that retriever's top list.
    scores : float64[3, n]
        The cosine similarity of query and chunk (-1..1), then each BM25 score (≥ 0; 0 where the
        chunk has none of the query's terms, or there is no such index).
    """

    ids: list[str]
    ranks: np.ndarray
    scores: np.ndarray


def kind_scores(fusion: KindFusion, ranks: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Every candidate's score under ``fusion`` (higher is better), float64[n].

    ``ranks`` and ``scores`` as :class:`Candidates` has them (``[3, n]``); fewer rows use the first
    weights.  Raises ``ValueError`` for a method other than ``rrf`` or ``score``.

    Examples
    --------
    >>> kind_scores(KindFusion("rrf", (1, 1, 1), 60), np.array([[1.0], [np.inf], [2.0]]), np.zeros((3, 1)))
    array([0.03252247])
    """
    w = np.asarray(fusion.weights[: len(ranks)], dtype=np.float64)[:, None]
    if fusion.method == "rrf":
        return (w / (fusion.k + ranks)).sum(0)
    if fusion.method == "score":
        best = np.maximum(scores[1:].max(axis=1, initial=0.0), 1e-12)[:, None]
        return w[0, 0] * scores[0] + (w[1:] * scores[1:] / best).sum(0)
    raise ValueError(f"unknown fusion method {fusion.method!r}: rrf or score")


def kind_positions(
    candidates: Candidates, kinds: dict[str, str], fusion: dict[str, KindFusion] = FUSION_BY_KIND
) -> np.ndarray:
    """Each candidate's position (from 1, float64[n]) under its own kind's fusion among all the
    candidates; a chunk of no known kind, or of a kind ``fusion`` lacks, is prose."""
    n = len(candidates.ids)
    prose = fusion.get("prose", FUSION_BY_KIND["prose"])
    own = [fusion.get(kinds.get(i, "prose"), prose) for i in candidates.ids]
    position = np.zeros(n)
    for f in set(own):
        order = np.argsort(-kind_scores(f, candidates.ranks, candidates.scores), kind="stable")
        at = np.empty(n)
        at[order] = np.arange(1, n + 1)
        mine = np.array([g == f for g in own])
        position[mine] = at[mine]
    return position


def fuse_by_kind(
    candidates: Candidates, kinds: dict[str, str], fusion: dict[str, KindFusion] = FUSION_BY_KIND
) -> list[tuple[str, float]]:
    """The candidates, each placed at the position (from 1) its own kind's fusion gives it among
    them all (:func:`kind_positions`); equal positions (a code and a prose chunk): the candidate
    order (dense's first).  Scored by the place in that order, ``(RRF_K + 1) / (RRF_K + place)``
    (1 for the first): no two candidates share a score.

    Returns
    -------
    list of (id, score)
        Best first.
    """
    position = kind_positions(candidates, kinds, fusion)
    order = sorted(range(len(position)), key=lambda i: (position[i], i))
    return [(candidates.ids[i], (RRF_K + 1) / (RRF_K + float(place))) for place, i in enumerate(order, start=1)]
