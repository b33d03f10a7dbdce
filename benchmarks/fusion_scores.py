"""Rank fusion or score fusion, per kind of chunk, chosen by pooled cross-validation over the
labelled sets' dev queries (:mod:`situate.evaluation.score_fit`).

Two steps.  ``save`` writes one set's candidate file from a data folder ``situate eval`` made
(the queries embedded through its cache, then exactly what search fuses for each query)::

    python -m benchmarks.fusion_scores save --home /tmp/ev-cosqa --queries eval/cosqa/queries_dev.jsonl \
        --out benchmarks/rankings/cosqa-candidates.npz

``fit`` reads the committed candidate files (seconds, no model) and fits each kind's sets apart,
against two baselines: equal weights with k = 60 (the search before per-kind fusion) and each
kind's fusion before this fit (code: dense×2 + structural BM25, k = 10)::

    python -m benchmarks.fusion_scores fit codebase=benchmarks/rankings/codebase-candidates.npz \
        cosqa=benchmarks/rankings/cosqa-candidates.npz docs=benchmarks/rankings/docs-candidates.npz \
        --kinds codebase=code,cosqa=code,docs=prose --out benchmarks/reports/fusion-cv-scores

Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.fusion_pooled import parse_kinds, query_shapes, shapes_markdown
from situate.evaluation.pooled_fit import cross_validate_pooled, pooled_wins
from situate.evaluation.score_fit import (
    candidate_query_ids,
    per_query_pass,
    read_candidates,
    score_space,
    write_candidates,
)
from situate.resources.store.fusion import KindFusion

#: The search before per-kind fusion (every kind), and code's fusion before this fit.
EQUAL = KindFusion("rrf", (1.0, 1.0, 1.0), 60)
CODE_RRF = KindFusion("rrf", (2.0, 0.0, 1.0), 10)
#: Each ranking alone, for "does fusion add to its best single ranking".
SINGLE = {
    "dense": KindFusion("rrf", (1.0, 0.0, 0.0), 60),
    "BM25": KindFusion("rrf", (0.0, 1.0, 0.0), 60),
    "structural BM25": KindFusion("rrf", (0.0, 0.0, 1.0), 60),
}


def space(baseline: KindFusion) -> list[KindFusion]:
    """``baseline`` first, then the RRF grid (weights 0, 1, 2 of each ranking, k = 60 or 10: the
    grid of :mod:`situate.evaluation.fusion_fit`) and :func:`situate.evaluation.score_fit.score_space`."""
    grid = [
        KindFusion("rrf", tuple(float(x) for x in w), k)
        for k in (60, 10)
        for w in itertools.product((0.0, 1.0, 2.0), repeat=3)
        if any(w)
    ]
    return [baseline] + [f for f in grid + score_space() if f != baseline]


def save(home: str, queries: str, out: str) -> None:
    """Write the candidate file of data folder ``home`` for the queries of file ``queries``."""
    from situate.evaluation.metrics import load_queries
    from situate.pipelines.settings import embedder_from_env
    from situate.resources.settings import read_settings
    from situate.resources.store.cache import embed_with_cache, embedding_cache_for
    from situate.resources.store.retrieval import CANDIDATES, bm25_lists, candidates_of, dense_scored
    from situate.resources.store.store import Store

    store = Store(home=home)
    table = store.table()
    qs = load_queries(queries)
    embedder = embedder_from_env(read_settings())
    qv, _, _ = embed_with_cache(
        embedder, [q.query for q in qs], embedding_cache_for(store, embedder, query=True), query=True
    )
    rows = table.search().select(["chunk_id", "doc_id", "chunk_index"]).limit(table.count_rows()).to_list()
    keys = {r["chunk_id"]: (r["doc_id"], int(r["chunk_index"])) for r in rows}
    cands = []
    for q, v in zip(qs, qv):
        dense = dense_scored(table, v, CANDIDATES)
        cands.append(candidates_of(table, v, dense, bm25_lists(store, table, q.query, CANDIDATES, "rrf", [])))
    write_candidates(out, [q.query_id for q in qs], [q.golden for q in qs], cands, keys)


def fit_kind(sets: dict[str, list], baseline: KindFusion) -> dict:
    """The pooled cross-validation of :func:`space` over ``sets`` (label → read_candidates), each
    set weighing the same, with each set's in-sample figures of the single rankings and of the
    fusion chosen most."""
    fusions = space(baseline)
    blocks = {lb: per_query_pass(fusions, qs) for lb, qs in sets.items()}
    groups = np.concatenate([np.full(b.shape[1], i) for i, b in enumerate(blocks.values())])
    cv = cross_validate_pooled(np.concatenate(list(blocks.values()), axis=1), groups)
    labels = list(sets)
    pq = cv.pop("per_query")
    cv["per_query"] = {
        labels[g]: {k: np.round(v[groups == g], 4).tolist() for k, v in pq.items()} for g in range(len(labels))
    }
    cv["sets"] = {labels[g]: v for g, v in cv["sets"].items()}
    top = next(iter(cv["chosen"]))
    cv["chosen"] = {fusions[i].describe(): n for i, n in cv["chosen"].items()}
    cv["in_sample"] = {}
    for lb, qs in sets.items():
        named = {**SINGLE, "baseline": baseline, "chosen most": fusions[top]}
        pq = per_query_pass(list(named.values()), qs)
        cv["in_sample"][lb] = {n: [round(100 * float(x), 2) for x in pq[i].mean(0)] for i, n in enumerate(named)}
    cv.update(
        baseline=baseline.describe(), space=len(fusions), wins=pooled_wins(cv), chosen_most=fusions[top].describe()
    )
    return cv


def markdown(fits: dict[str, dict]) -> str:
    """One table per kind and baseline: each set's out-of-fold Pass@5/10/20 (gain, sd), the
    verdict and the fusion chosen most; then each set's in-sample figures."""
    lines = []
    for title, cv in fits.items():
        share = 100 * next(iter(cv["chosen"].values())) / sum(cv["chosen"].values())
        lines += [
            f"**{title}**: baseline {cv['baseline']}; {cv['space']} fusions; wins: {'yes' if cv['wins'] else 'no'}"
            f"; chosen most: {cv['chosen_most']} ({share:.0f}% of folds)",
            "",
            "| set (queries) | Pass@5 (gain, sd) | Pass@10 (gain, sd) | Pass@20 (gain, sd) |",
            "|---|---|---|---|",
        ]
        for lb, s in [*cv["sets"].items(), ("mean of the sets", cv["macro"])]:
            cells = [f"{s[f'pass@{k}']:.2f} ({s[f'gain@{k}']:+.2f}, {s[f'gain_std@{k}']:.2f})" for k in (5, 10, 20)]
            lines.append(f"| {lb} ({s.get('queries', '')}) | " + " | ".join(cells) + " |")
        lines += ["", "In sample (Pass@5 / @10 / @20):", ""]
        for lb, figs in cv["in_sample"].items():
            lines.append(f"- {lb}: " + "; ".join(f"{n} {' / '.join(f'{x:.2f}' for x in v)}" for n, v in figs.items()))
        lines.append("")
    return "\n".join(lines)


def fit(files: dict[str, str], kinds: dict[str, list[str]]) -> dict[str, dict]:
    """Each kind's fits against :data:`EQUAL` and, for code, :data:`CODE_RRF`."""
    sets = {lb: read_candidates(p) for lb, p in files.items()}
    out = {}
    for kind, labels in kinds.items():
        for base in [EQUAL] + ([CODE_RRF] if kind == "code" else []):
            t = f"{kind} ({', '.join(labels)}) against {base.describe()}"
            out[t] = fit_kind({lb: sets[lb] for lb in labels}, base)
            print(f"fusion_scores: {t}: {out[t]['space']} fusions", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    s = sub.add_parser("save", help="write a candidate file from a data folder situate eval made")
    s.add_argument("--home", required=True)
    s.add_argument("--queries", required=True)
    s.add_argument("--out", required=True)
    f = sub.add_parser("fit", help="fit each kind's fusion from candidate files")
    f.add_argument("files", nargs="+", metavar="LABEL=FILE")
    f.add_argument("--kinds", required=True, help="LABEL=KIND joined by ',' (code or prose)")
    f.add_argument("--out", required=True, help="write OUT.json and OUT.md")
    f.add_argument("--shapes", default="", help="LABEL=QUERIES joined by ',': figures per query shape too")
    args = ap.parse_args(argv)
    if args.step == "save":
        save(args.home, args.queries, args.out)
        return 0
    if any("=" not in item or item.startswith("=") for item in args.files):
        ap.error("give each candidate file as LABEL=FILE")
    files = dict(item.split("=", 1) for item in args.files)
    try:
        kinds = parse_kinds(args.kinds, list(files))
    except ValueError as e:
        ap.error(str(e))
    if set(kinds) - {"code", "prose"}:
        ap.error(f"--kinds: a kind is code or prose, not {', '.join(sorted(set(kinds) - {'code', 'prose'}))}")
    fits = fit(files, kinds)
    md = markdown(fits)
    if args.shapes:
        ids = {lb: {"query_ids": candidate_query_ids(p)} for lb, p in files.items()}
        shapes = query_shapes(ids, args.shapes)
        md += "\nBy query shape (out of fold; the baseline in brackets):\n\n" + shapes_markdown(fits, shapes)
    Path(args.out + ".json").write_text(json.dumps(fits, indent=1) + "\n")
    Path(args.out + ".md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
