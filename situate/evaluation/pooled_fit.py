"""One fusion for several labelled sets: a default has to serve code and prose alike, so it is
chosen by cross-validation over their queries together.

:func:`situate.evaluation.fusion_fit.cross_validate` fits a fusion inside one set.  Each set then
chooses its own (on the codebase set dense + structural BM25, on the docs set dense + contextual
BM25), and neither gain clears its fold spread.  Here the sets' queries are pooled:

- each fold takes a fifth of every set (:func:`stratified_folds`), so every fold holds code and
  prose;
- the fusion chosen on the other folds is the best by the mean over the sets of each set's mean
  objective (:func:`situate.evaluation.fusion_fit.objective`), so a set of 50 queries counts as
  much as one of 124;
- it is scored on the fold left out, per set, against the baseline on the same queries.

The verdict (:func:`pooled_wins`) is :func:`situate.evaluation.fusion_fit.wins`' rule on the mean
of the sets' per-fold gains, and no set may lose at Pass@5 or Pass@20 by more than the spread of
its own per-fold gain (a loss inside a set's fold spread is not told from noise).

Examples
--------
>>> good = {"a": [[("d", 0)]] * 6, "b": [[("d", 1)]] * 6}
>>> golden = [[("d", 0)]] * 6
>>> fit = pooled_fit_report({"x": (good, golden), "y": (good, golden)}, {"b": 1}, folds=2, repeats=1)
>>> fit["sets"]["x"]["pass@5"], fit["sets"]["x"]["baseline@5"]
(100.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from situate.evaluation.fusion_fit import (
    FOLDS,
    K_GRID,
    KS,
    REPEATS,
    WEIGHT_GRID,
    Key,
    baseline_fusion,
    fusion_space,
    objective,
    per_query_pass,
    prepare,
    wins,
)


def stratified_folds(groups: np.ndarray, folds: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Query indices cut into ``folds`` folds, each set (``groups``: int[n_queries], the set of
    each query) shuffled by ``rng`` and cut apart, fold ``i`` the union of every set's ``i``-th part."""
    parts: list[list[np.ndarray]] = [[] for _ in range(folds)]
    for g in np.unique(groups):
        members = rng.permutation(np.flatnonzero(groups == g))
        for i, part in enumerate(np.array_split(members, folds)):
            parts[i].append(part)
    return [np.sort(np.concatenate(p)) for p in parts]


def cross_validate_pooled(
    per_query: np.ndarray,
    groups: np.ndarray,
    folds: int = FOLDS,
    repeats: int = REPEATS,
    seed: int = 0,
    ks: Sequence[int] = KS,
) -> dict:
    """Out-of-fold Pass@k of "choose the fusion best on the other folds, every set weighing the
    same", per set; fusion 0 of ``per_query`` is the baseline (kept on a tie).

    Parameters
    ----------
    per_query : float64[n_fusions, n_queries, len(ks)]
        :func:`situate.evaluation.fusion_fit.per_query_pass` of every set, queries concatenated.
    groups : int[n_queries]
        The set of each query (0, 1, ...).

    Returns
    -------
    dict
        ``{"sets": {g: {"queries", "pass@k" (out of fold, percent), "gain@k", "gain_std@k"
        (mean and spread of the per-fold gain over the baseline, points), "baseline@k"}},
        "macro": the same figures as the mean over the sets, "chosen": {fusion index: times},
        "in_sample": {"fusion": index, g: {"pass@k"}}, "folds", "repeats", "per_query": {"oof",
        "baseline"}}`` (``per_query``: each query's out-of-fold Pass@k, the mean over the shuffles,
        and the baseline's: float64[n_queries, len(ks)], for figures on a subset of the queries).

    Raises
    ------
    ValueError
        A set with fewer queries than folds, fewer than 2 folds, or ``groups`` of another length.
    """
    labels = np.unique(groups)
    sizes = {int(g): int((groups == g).sum()) for g in labels}
    if len(groups) != per_query.shape[1] or folds < 2 or min(sizes.values(), default=0) < folds:
        raise ValueError(f"sets of {sizes} queries cannot be cut into {folds} folds (at least 2, at most one a query)")
    obj = objective(per_query, ks) / np.array([sizes[int(g)] for g in groups])  # each set weighs the same
    rng = np.random.default_rng(seed)
    oof = np.zeros((repeats,) + per_query.shape[1:])
    gains: dict[int, list] = {int(g): [] for g in labels}
    chosen: dict[int, int] = {}
    for r in range(repeats):
        for test in stratified_folds(groups, folds, rng):
            train = np.setdiff1d(np.arange(len(groups)), test)
            best = int(np.argmax(obj[:, train].sum(1)))  # first best: the baseline on a tie
            chosen[best] = chosen.get(best, 0) + 1
            oof[r, test] = per_query[best, test]
            for g in gains:
                t = test[groups[test] == g]
                gains[g].append(100 * (per_query[best, t] - per_query[0, t]).mean(0))
    out = {"folds": folds, "repeats": repeats, "chosen": dict(sorted(chosen.items(), key=lambda kv: -kv[1]))}
    out["per_query"] = {"oof": oof.mean(0), "baseline": per_query[0]}  # float64[n_queries, len(ks)] each
    out["sets"] = {g: _set_figures(per_query, oof, groups == g, np.array(gains[g]), ks) for g in gains}
    out["macro"] = _macro(out["sets"], np.mean([gains[g] for g in gains], axis=0), ks)
    in_best = int(np.argmax(obj.sum(1)))
    out["in_sample"] = {"fusion": in_best}
    for g in gains:
        members = groups == g
        out["in_sample"][g] = {f"pass@{k}": _pct(per_query[in_best, members, j]) for j, k in enumerate(ks)}
    return out


def _pct(x: np.ndarray) -> float:
    return round(float(100 * x.mean()), 2)


def _set_figures(per_query, oof, members, gains, ks) -> dict:
    """One set's out-of-fold figures (see :func:`cross_validate_pooled`)."""
    out: dict = {"queries": int(members.sum())}
    for j, k in enumerate(ks):
        out[f"pass@{k}"] = _pct(oof[:, members, j])
        out[f"gain@{k}"] = round(float(gains[:, j].mean()), 2)
        out[f"gain_std@{k}"] = round(float(gains[:, j].std()), 2)
        out[f"baseline@{k}"] = _pct(per_query[0, members, j])
    return out


def _macro(sets: dict, gains: np.ndarray, ks) -> dict:
    """The sets' figures averaged, the per-fold gain averaged over the sets before its spread."""
    out: dict = {}
    for j, k in enumerate(ks):
        for name in ("pass", "baseline"):
            out[f"{name}@{k}"] = round(float(np.mean([s[f"{name}@{k}"] for s in sets.values()])), 2)
        out[f"gain@{k}"] = round(float(gains[:, j].mean()), 2)
        out[f"gain_std@{k}"] = round(float(gains[:, j].std()), 2)
    return out


def pooled_wins(cv: dict, ks: Sequence[int] = (5, 20)) -> bool:
    """:func:`situate.evaluation.fusion_fit.wins` on the mean over the sets, and no set's gain
    below minus its spread (``gain_std``) at any ``k`` of ``ks``."""
    return wins(cv["macro"], ks) and all(s[f"gain@{k}"] >= -s[f"gain_std@{k}"] for s in cv["sets"].values() for k in ks)


def pooled_fit_report(
    sets: Mapping[str, tuple[Mapping[str, Sequence[Sequence[Key]]], Sequence[Sequence[Key]]]],
    baseline: Mapping[str, float],
    folds: int = FOLDS,
    repeats: int = REPEATS,
    seed: int = 0,
    weights: Sequence[float] = WEIGHT_GRID,
    ks_rrf: Sequence[int] = K_GRID,
) -> dict:
    """Cross-validate one fusion over several sets (:func:`cross_validate_pooled`) and describe it.

    Parameters
    ----------
    sets : mapping of str to (rankings, golden)
        ``{label: (rankings, golden)}`` as :func:`situate.evaluation.fusion_fit.prepare` takes
        them; every set has the same ranking names.
    baseline : mapping of str to float
        The baseline's weights by ranking name, RRF ``k = 60``.

    Returns
    -------
    dict
        :func:`cross_validate_pooled`'s figures with the sets by label and the fusions described
        (``per_query`` by set label, as lists), plus ``"rankings"``, ``"space"``, ``"baseline"``,
        ``"wins"`` (:func:`pooled_wins`).

    Raises
    ------
    ValueError
        No set, sets with different ranking names, a baseline ranking not among them; see also
        :func:`situate.evaluation.fusion_fit.prepare`.
    """
    labels = list(sets)
    if not labels:
        raise ValueError("no set of rankings to pool")
    names = list(sets[labels[0]][0])
    for label in labels:
        if sorted(sets[label][0]) != sorted(names):
            raise ValueError(f"set {label!r} has rankings {sorted(sets[label][0])}, the first set {sorted(names)}")
    base = baseline_fusion(names, baseline)
    space = fusion_space(len(names), weights, ks_rrf, first=base)
    blocks = [per_query_pass(space, prepare({n: sets[lb][0][n] for n in names}, sets[lb][1])) for lb in labels]
    groups = np.concatenate([np.full(b.shape[1], i) for i, b in enumerate(blocks)])
    cv = cross_validate_pooled(np.concatenate(blocks, axis=1), groups, folds, repeats, seed)
    cv["sets"] = {labels[g]: v for g, v in cv["sets"].items()}
    pq = cv.pop("per_query")
    cv["per_query"] = {
        labels[g]: {k: np.round(v[groups == g], 4).tolist() for k, v in pq.items()} for g in range(len(labels))
    }
    best = cv["in_sample"].pop("fusion")
    cv["in_sample"] = {"fusion": space[best].describe(names), **{labels[g]: v for g, v in cv["in_sample"].items()}}
    cv["chosen"] = {space[i].describe(names): n for i, n in cv["chosen"].items()}
    cv.update(rankings=names, space=len(space), baseline=base.describe(names), wins=pooled_wins(cv))
    return cv


def pooled_markdown(fits: Mapping[str, dict]) -> str:
    """One row per set of rankings (:func:`pooled_fit_report` each): each labelled set's and the
    mean's out-of-fold Pass@5 / Pass@20 with the per-fold gain and its spread, and the verdict."""
    first = next(iter(fits.values()))
    labels = list(first["sets"])
    cols = [*labels, "mean of the sets"]
    lines = [
        "| rankings added to today's three | fusions | "
        + " | ".join(f"{c}: Pass@5 (gain, sd) | {c}: Pass@20 (gain, sd)" for c in cols)
        + " | wins | chosen most (share of folds) |",
        "|---" * (3 + 2 * len(cols)) + "|",
    ]
    for label, cv in fits.items():
        cells = []
        for s in [cv["sets"][lb] for lb in labels] + [cv["macro"]]:
            cells += [f"{s[f'pass@{k}']:.2f} ({s[f'gain@{k}']:+.2f}, {s[f'gain_std@{k}']:.2f})" for k in (5, 20)]
        top, n = next(iter(cv["chosen"].items()))
        share = 100 * n / sum(cv["chosen"].values())
        lines.append(
            f"| {label} | {cv['space']} | " + " | ".join(cells) + f" | {'yes' if cv['wins'] else 'no'} | "
            f"{top} ({share:.0f}%) |"
        )
    base = " · ".join(
        f"{lb} Pass@5 {first['sets'][lb]['baseline@5']:.2f}, Pass@20 {first['sets'][lb]['baseline@20']:.2f} "
        f"({first['sets'][lb]['queries']} queries)"
        for lb in labels
    )
    lines.append(f"\nBaseline ({first['baseline']}): {base}; {first['folds']} folds × {first['repeats']} shuffles.")
    return "\n".join(lines)
