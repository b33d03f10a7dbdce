"""A fusion fitted honestly: weighted reciprocal rank fusion chosen by k-fold cross-validation
inside the queries one has.

A fusion is a weight per ranking and the RRF constant ``k``::

    score(chunk) = Σ_i w_i / (k + rank_i(chunk))      ranks from 1; absent from ranking i: 0

Equal weights 1 over the pipeline's three rankings with ``k = 60`` is today's search of prose
(:func:`situate.resources.store.retrieval.rrf`; Cormack, Clarke & Büttcher, SIGIR 2009; code
fuses scores: :data:`situate.resources.store.fusion.FUSION_BY_KIND`).  A weight of 0 drops a
ranking.

Choosing weights on the queries they are scored on flatters them: on the labelled corpora a
choice made on the dev half by a point or less did not carry over to the held-back half.  So
:func:`cross_validate` splits the queries into folds, picks the fusion that scores best on all
folds but one, scores it on the fold left out, and repeats for every fold and for several
shuffles.  What it reports is the out-of-fold figure (each query scored by a fusion fitted
without it), the spread of the per-fold figures, and the per-fold gain over a baseline fusion,
so a fusion is adopted only where its gain exceeds that spread.

Plain functions over ranked keys and golden keys (no Dagster, no store); ``situate eval
--configs fusion-cv`` feeds it the rankings it computes.

Examples
--------
>>> rankings = {"a": [[("d", 0), ("d", 1)]], "b": [[("d", 1), ("d", 0)]]}
>>> prepared = prepare(rankings, [[("d", 1)]])
>>> space = [Fusion((1.0, 0.0), 60), Fusion((0.0, 1.0), 60)]
>>> per_query_pass(space, prepared)[:, 0, 0].tolist()   # Pass@5 of query 0 under each fusion
[1.0, 1.0]
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

import numpy as np

#: Cut-offs of Pass@k (the cookbook's k = 5, 10, 20; :data:`situate.evaluation.metrics.KS`).
KS = (5, 10, 20)
#: Weights tried for each ranking: off, as today, doubled.  Three levels keep the space small
#: enough (3^6 = 729 fusions for six rankings) that cross-validation can tell a real gain from
#: one found by searching; written for situate.
WEIGHT_GRID = (0.0, 1.0, 2.0)
#: RRF constants tried: 60 (Cormack et al. 2009, today's) and 10 (rewards the top of each list
#: more); written for situate.
K_GRID = (60, 10)
#: Folds and shuffles of :func:`cross_validate`: 5 folds (about 25 of the codebase set's 124 dev
#: queries, 10 of the docs set's 50, a fold), repeated over 10 seeded shuffles so the figure does
#: not hang on one split.
FOLDS = 5
REPEATS = 10

Key = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class Fusion:
    """Weighted RRF: one weight per ranking (in the order of the names it was fitted over), and
    the RRF constant ``k`` (ranks count from 1)."""

    weights: tuple[float, ...]
    k: int

    def describe(self, names: Sequence[str]) -> str:
        """``"dense×1 + bm25×2 (k=60)"``: the rankings it uses, with their weights."""
        used = [f"{n}×{w:g}" for n, w in zip(names, self.weights) if w]
        return f"{' + '.join(used) or 'nothing'} (k={self.k})"


@dataclasses.dataclass
class PreparedQuery:
    """One query's rankings as arrays: ``ranks`` int32[n_rankings, n_candidates] (1-based rank of
    each candidate in each ranking, 0 where absent; candidates in first-seen order, the order
    :func:`situate.resources.store.retrieval.rrf` breaks ties by), ``golden`` int[n_found] (candidate
    index of each golden chunk found in some ranking), ``n_golden`` (all golden chunks)."""

    ranks: np.ndarray
    golden: np.ndarray
    n_golden: int


def prepare(rankings: Mapping[str, Sequence[Sequence[Key]]], golden: Sequence[Sequence[Key]]) -> list[PreparedQuery]:
    """Arrays for :func:`per_query_pass`.

    Parameters
    ----------
    rankings : mapping of str to list of lists of keys
        ``{ranking name: [ranked keys of query q, best first]}``; every ranking has one list per
        query.
    golden : list of lists of keys
        Each query's golden chunks.

    Raises
    ------
    ValueError
        A ranking with another number of queries than ``golden``, or no rankings.
    """
    names = list(rankings)
    if not names:
        raise ValueError("no rankings to fuse")
    for n in names:
        if len(rankings[n]) != len(golden):
            raise ValueError(f"ranking {n!r} has {len(rankings[n])} queries, the golden list {len(golden)}")
    out = []
    for q, gold in enumerate(golden):
        index: dict[Key, int] = {}
        for n in names:
            for key in rankings[n][q]:
                index.setdefault(key, len(index))
        ranks = np.zeros((len(names), max(len(index), 1)), np.int32)
        for r, n in enumerate(names):
            for pos, key in enumerate(rankings[n][q], start=1):
                j = index[key]
                if ranks[r, j] == 0:  # a repeated id keeps its best rank
                    ranks[r, j] = pos
        found = np.array(sorted({index[g] for g in gold if g in index}), np.int64)
        out.append(PreparedQuery(ranks, found, len(set(gold))))
    return out


def fusion_space(
    n_rankings: int, weights: Sequence[float] = WEIGHT_GRID, ks: Sequence[int] = K_GRID, first: Fusion | None = None
) -> list[Fusion]:
    """Every fusion of the grid (all weights 0 left out), ``first`` (the baseline) at index 0 so
    that a tie in :func:`cross_validate`'s choice keeps it."""
    space = [
        Fusion(tuple(float(x) for x in w), int(k))
        for k in ks
        for w in itertools.product(weights, repeat=n_rankings)
        if any(w)
    ]
    if first is not None:
        space = [first] + [f for f in space if f != first]
    return space


def per_query_pass(space: Sequence[Fusion], prepared: Sequence[PreparedQuery], ks: Sequence[int] = KS) -> np.ndarray:
    """Pass@k of every query under every fusion.

    Returns
    -------
    float64[len(space), n_queries, len(ks)]
        Fraction (0..1) of each query's golden chunks in the fused top k; a query with no golden
        chunk scores 0.
    """
    out = np.zeros((len(space), len(prepared), len(ks)))
    by_k: dict[int, list[int]] = {}
    for i, f in enumerate(space):
        by_k.setdefault(f.k, []).append(i)
    for k, all_idx in by_k.items():
        for start in range(0, len(all_idx), FUSION_BLOCK):
            idx = all_idx[start : start + FUSION_BLOCK]
            w = np.array([space[i].weights for i in idx], np.float64)  # (c, R)
            for qi, q in enumerate(prepared):
                if q.golden.size and q.n_golden:
                    out[idx, qi] = _query_pass(w, q, k, ks)
    return out


#: Fusions scored together by :func:`per_query_pass`: bounds its arrays to about
#: ``FUSION_BLOCK × candidates × golden chunks`` entries (8,192 × 1,800 × 8 bytes ≈ 118 MB for a
#: query's scores with 12 rankings of 150), whatever the size of the grid.
FUSION_BLOCK = 8192


def _query_pass(w: np.ndarray, q: PreparedQuery, k: int, ks: Sequence[int]) -> np.ndarray:
    """Pass@k (float64[c, len(ks)]) of one query under the ``c`` fusions of weights ``w`` (c, R), RRF ``k``."""
    inv = np.where(q.ranks > 0, 1.0 / (k + q.ranks), 0.0)  # (R, N)
    s = w @ inv  # (c, N)
    g = s[:, q.golden]  # (c, n_found)
    higher = (s[:, None, :] > g[:, :, None]).sum(-1)
    order = np.arange(s.shape[1])
    ties = ((s[:, None, :] == g[:, :, None]) & (order[None, None, :] < q.golden[None, :, None])).sum(-1)
    rank = higher + ties  # 0-based position in the fused list
    scored = g > 0  # a chunk no used ranking returned is not in the fused list
    return np.stack([((rank < cut) & scored).sum(1) / q.n_golden for cut in ks], axis=1)


def objective(per_query: np.ndarray, ks: Sequence[int] = KS) -> np.ndarray:
    """The figure a fusion is chosen by: the mean of Pass@5 and Pass@20 (the issue's two
    targets), float64[n_fusions, n_queries]."""
    return (per_query[:, :, list(ks).index(5)] + per_query[:, :, list(ks).index(20)]) / 2


def cross_validate(
    space: Sequence[Fusion],
    per_query: np.ndarray,
    folds: int = FOLDS,
    repeats: int = REPEATS,
    seed: int = 0,
    ks: Sequence[int] = KS,
) -> dict:
    """Out-of-fold Pass@k of "choose the fusion that scores best on the other folds".

    ``space[0]`` is the baseline: each fold's gain is measured against it on the same queries,
    and a tie in the choice keeps it.

    Parameters
    ----------
    space : list of Fusion
    per_query : float64[len(space), n_queries, len(ks)]
        :func:`per_query_pass`.
    folds, repeats, seed : int
        ``repeats`` shuffles (``numpy.random.default_rng(seed)``) of the queries, each cut into
        ``folds`` folds.

    Returns
    -------
    dict
        ``{"pass@k": out-of-fold mean over queries (percent, averaged over the shuffles),
        "fold_std@k": standard deviation of the per-fold figure (points), "gain@k": mean
        per-fold gain over the baseline (points), "gain_std@k": its standard deviation across
        folds, "baseline@k", "chosen": {fusion index: times chosen}, "in_sample": the fusion
        best on all queries and its (flattering) figure, "folds", "repeats"}``.

    Raises
    ------
    ValueError
        Fewer queries than folds, or fewer than 2 folds.
    """
    n_q = per_query.shape[1]
    if folds < 2 or n_q < folds:
        raise ValueError(f"{n_q} queries cannot be cut into {folds} folds (at least 2, at most one a query)")
    obj = objective(per_query, ks)
    rng = np.random.default_rng(seed)
    fold_scores, fold_gains, chosen = [], [], {}
    oof = np.zeros((repeats, n_q, len(ks)))
    for r in range(repeats):
        perm = rng.permutation(n_q)
        for test in np.array_split(perm, folds):
            train = np.setdiff1d(perm, test)
            best = int(np.argmax(obj[:, train].mean(1)))  # first best: the baseline on a tie
            chosen[best] = chosen.get(best, 0) + 1
            oof[r, test] = per_query[best, test]
            fold_scores.append(100 * per_query[best, test].mean(0))
            fold_gains.append(100 * (per_query[best, test] - per_query[0, test]).mean(0))
    fold_scores, fold_gains = np.array(fold_scores), np.array(fold_gains)
    in_best = int(np.argmax(obj.mean(1)))
    out: dict = {
        "folds": folds,
        "repeats": repeats,
        "queries": n_q,
        "chosen": dict(sorted(chosen.items(), key=lambda kv: -kv[1])),
        "in_sample": {"fusion": in_best},
    }
    for j, k in enumerate(ks):
        out[f"pass@{k}"] = round(float(100 * oof[:, :, j].mean()), 2)
        out[f"fold_std@{k}"] = round(float(fold_scores[:, j].std()), 2)
        out[f"gain@{k}"] = round(float(fold_gains[:, j].mean()), 2)
        out[f"gain_std@{k}"] = round(float(fold_gains[:, j].std()), 2)
        out[f"baseline@{k}"] = round(float(100 * per_query[0, :, j].mean()), 2)
        out["in_sample"][f"pass@{k}"] = round(float(100 * per_query[in_best, :, j].mean()), 2)
    return out


def wins(cv: dict, ks: Sequence[int] = (5, 20)) -> bool:
    """Whether the fitted fusion beats the baseline by more than the spread of its per-fold gain
    at every ``k`` of ``ks`` where it moves, and loses at none (the issue's rule: "choose only
    what wins by more than [the variance across folds]")."""
    gains = [cv[f"gain@{k}"] for k in ks]
    return any(g > cv[f"gain_std@{k}"] for g, k in zip(gains, ks)) and all(g >= 0 for g in gains)


def baseline_fusion(names: Sequence[str], baseline: Mapping[str, float]) -> Fusion:
    """The baseline as a :class:`Fusion` over ``names``: its weights by name (a name it leaves out
    weighs 0), RRF ``k = 60``.

    Raises
    ------
    ValueError
        A baseline weight for a ranking not in ``names``.
    """
    for n in baseline:
        if n not in names:
            raise ValueError(f"baseline ranking {n!r} is not among the rankings: {', '.join(names)}")
    return Fusion(tuple(float(baseline.get(n, 0.0)) for n in names), 60)


def fit_report(
    rankings: Mapping[str, Sequence[Sequence[Key]]],
    golden: Sequence[Sequence[Key]],
    baseline: Mapping[str, float],
    folds: int = FOLDS,
    repeats: int = REPEATS,
    seed: int = 0,
    weights: Sequence[float] = WEIGHT_GRID,
    ks_rrf: Sequence[int] = K_GRID,
) -> dict:
    """Cross-validate the fusion of ``rankings`` against ``baseline`` and describe the result.

    Parameters
    ----------
    rankings : mapping of str to list of lists of keys
        Named rankings, one list per query (:func:`prepare`).
    golden : list of lists of keys
    baseline : mapping of str to float
        The baseline's weights by ranking name (names it leaves out weigh 0), RRF ``k = 60``:
        ``{"dense": 1, "bm25": 1, "structure-bm25": 1}`` is today's search of prose.

    Returns
    -------
    dict
        :func:`cross_validate`'s figures plus ``"rankings"`` (the names), ``"space"`` (fusions
        tried), ``"baseline"`` and ``"in_sample"`` described, ``"chosen"`` as
        ``{description: times}``, ``"alone"`` (each ranking alone: Pass@k over all queries),
        ``"wins"`` (:func:`wins`), ``"equal"`` (every ranking weight 1, k = 60: the fusion one
        would pick without fitting, its Pass@k and gain over all queries, and how many queries it
        improves and worsens by the mean of Pass@5 and Pass@20) and, where some query has several
        golden chunks,
        ``"multi_chunk"``: Pass@20 over those queries (the share of their chunks found) for the
        baseline and each ranking alone.

    Raises
    ------
    ValueError
        A baseline weight for a ranking not in ``rankings``; see also :func:`prepare`.
    """
    names = list(rankings)
    base = baseline_fusion(names, baseline)
    space = fusion_space(len(names), weights, ks_rrf, first=base)
    prepared = prepare(rankings, golden)
    pq = per_query_pass(space, prepared)
    cv = cross_validate(space, pq, folds, repeats, seed)
    alone = per_query_pass(
        [Fusion(tuple(float(i == r) for i in range(len(names))), 60) for r in range(len(names))], prepared
    )
    cv["rankings"] = names
    cv["space"] = len(space)
    cv["baseline"] = base.describe(names)
    cv["in_sample"]["fusion"] = space[cv["in_sample"]["fusion"]].describe(names)
    cv["chosen"] = {space[i].describe(names): n for i, n in cv["chosen"].items()}
    cv["alone"] = {
        n: {f"pass@{k}": round(float(100 * alone[r, :, j].mean()), 2) for j, k in enumerate(KS)}
        for r, n in enumerate(names)
    }
    cv["wins"] = wins(cv)
    # the one fusion chosen before looking: every ranking of the set, weight 1, k = 60 (today's rule
    # extended); fitted on nothing, so its figure over all queries is not flattering
    equal = Fusion(tuple(1.0 for _ in names), 60)
    eq = pq[space.index(equal)] if equal in space else per_query_pass([equal], prepared)[0]
    d = objective(eq[None])[0] - objective(pq[:1])[0]
    cv["equal"] = {
        "fusion": equal.describe(names),
        "improved": int((d > 0).sum()),
        "worsened": int((d < 0).sum()),
        **{f"pass@{k}": round(float(100 * eq[:, j].mean()), 2) for j, k in enumerate(KS)},
        **{f"gain@{k}": round(float(100 * (eq[:, j] - pq[0, :, j]).mean()), 2) for j, k in enumerate(KS)},
    }
    multi = np.array([len(set(g)) > 1 for g in golden])
    if multi.any():  # answers spread over several chunks: the share of them found
        cv["multi_chunk"] = {
            "queries": int(multi.sum()),
            "baseline@20": round(float(100 * pq[0, multi, 2].mean()), 2),
            **{f"{n} alone@20": round(float(100 * alone[r, multi, 2].mean()), 2) for r, n in enumerate(names)},
        }
    return cv


def markdown(cv: dict) -> str:
    """:func:`fit_report`'s figures as Markdown: the cross-validated fusion against the baseline,
    each ranking alone, and the fusions the folds chose."""
    ks = [k for k in KS if f"pass@{k}" in cv]
    head = "| | " + " | ".join(f"Pass@{k}" for k in ks) + " |"
    title = (
        f"Fusion fitted by {cv['folds']}-fold cross-validation, {cv['repeats']} shuffles, over "
        f"{cv['queries']} queries and {cv['space']} fusions of {', '.join(cv['rankings'])}:"
    )
    lines = [
        title,
        "",
        head,
        "|---" * (len(ks) + 1) + "|",
        f"| baseline: {cv['baseline']} | " + " | ".join(f"{cv[f'baseline@{k}']:.2f}" for k in ks) + " |",
        "| fitted, out of fold | "
        + " | ".join(f"{cv[f'pass@{k}']:.2f} (fold sd {cv[f'fold_std@{k}']:.2f})" for k in ks)
        + " |",
        "| gain over the baseline, per fold | "
        + " | ".join(f"{cv[f'gain@{k}']:+.2f} (sd {cv[f'gain_std@{k}']:.2f})" for k in ks)
        + " |",
        f"| in sample (flattering): {cv['in_sample']['fusion']} | "
        + " | ".join(f"{cv['in_sample'][f'pass@{k}']:.2f}" for k in ks)
        + " |",
    ]
    for n, r in cv["alone"].items():
        lines.append(f"| {n} alone | " + " | ".join(f"{r[f'pass@{k}']:.2f}" for k in ks) + " |")
    total = sum(cv["chosen"].values())
    top = list(cv["chosen"].items())[:5]
    verdict = (
        "Wins by more than the spread of its per-fold gain at Pass@5 or Pass@20, and loses at neither: "
        f"{'yes' if cv['wins'] else 'no'}."
    )
    if "multi_chunk" in cv:
        m = cv["multi_chunk"]
        lines += [
            "",
            f"Queries whose answer spans several chunks ({m['queries']}): Pass@20 "
            + ", ".join(f"{k.removesuffix('@20')} {v:.2f}" for k, v in m.items() if k != "queries")
            + ".",
        ]
    lines += ["", "Chosen by the folds: " + "; ".join(f"{d} {100 * n / total:.0f}%" for d, n in top) + ".", verdict]
    return "\n".join(lines)


def sets_markdown(sets: dict) -> str:
    """One row per set of rankings fitted apart (:func:`fit_report` each): the out-of-fold
    figures, the per-fold gain over the baseline and its spread, the in-sample figure and the
    verdict of :func:`wins`."""
    lines = [
        "| rankings added to today's three | fusions | Pass@5 out of fold (gain, sd) | "
        "Pass@20 out of fold (gain, sd) | in sample Pass@5 / @20 | wins | all weight 1, k=60: Pass@5 / @20 "
        "(queries better / worse) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, cv in sets.items():
        e = cv["equal"]
        lines.append(
            f"| {label} | {cv['space']} | {cv['pass@5']:.2f} ({cv['gain@5']:+.2f}, {cv['gain_std@5']:.2f}) | "
            f"{cv['pass@20']:.2f} ({cv['gain@20']:+.2f}, {cv['gain_std@20']:.2f}) | "
            f"{cv['in_sample']['pass@5']:.2f} / {cv['in_sample']['pass@20']:.2f} | "
            f"{'yes' if cv['wins'] else 'no'} | {e['pass@5']:.2f} / {e['pass@20']:.2f} "
            f"({e['improved']} / {e['worsened']}) |"
        )
    first = next(iter(sets.values()))
    lines.append(
        "\nBaseline (equal weights, k = 60: today's search of prose): "
        f"Pass@5 {first['baseline@5']:.2f}, Pass@20 {first['baseline@20']:.2f}; "
        f"{first['folds']} folds × {first['repeats']} shuffles, {first['queries']} queries."
    )
    return "\n".join(lines)
