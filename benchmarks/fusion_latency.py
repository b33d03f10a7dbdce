"""What the score fusion for code costs a search: :func:`situate.resources.store.retrieval.hybrid_search`
over a data folder ``situate eval`` (or ``situate ingest``) made, each query timed under today's
fusions (code by score: every candidate's cosine read, from its vector when dense did not return it)
and under the rank fusion code had before (dense×2 + structural BM25, k = 10), the two interleaved
query by query so that both see the same load; and today's fusion with the code query map
(``SITUATE_CODE_ADAPTER``, :mod:`situate.resources.models.code_adapter`: the map applied and code
chunks compared with the mapped vector) against it without::

    python -m benchmarks.fusion_latency --home /tmp/ev-cosqa --queries eval/cosqa/queries_dev.jsonl \
        --out benchmarks/reports/fusion-latency

Query vectors come from the folder's embedding cache (no model call after ``situate eval``).
Writes OUT.json and OUT.md: milliseconds per search (p50, p95) under each, and their ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from situate.resources.store import fusion

#: Code's fusion before the score fusion (docs/quality.md, "One fusion for each kind of chunk").
RANK_FUSION = {**fusion.FUSION_BY_KIND, "code": fusion.KindFusion("rrf", (2.0, 0.0, 1.0), 10)}


def time_searches(home: str, queries: str, n: int) -> dict[str, list[float]]:
    """Seconds of each of the first ``n`` queries' searches under ``today`` and ``rank``."""
    from situate.evaluation.metrics import load_queries
    from situate.pipelines.settings import embedder_from_env
    from situate.resources.settings import read_settings
    from situate.resources.store import retrieval
    from situate.resources.store.cache import embed_with_cache, embedding_cache_for
    from situate.resources.store.store import Store

    store = Store(home=home)
    qs = load_queries(queries)[:n]
    embedder = embedder_from_env(read_settings())
    qv, _, _ = embed_with_cache(
        embedder, [q.query for q in qs], embedding_cache_for(store, embedder, query=True), query=True
    )
    retrieval.hybrid_search(store, qv[0], qs[0].query)  # load the BM25 index once
    out: dict[str, list[float]] = {"today": [], "rank": [], "code_map": []}
    today = dict(fusion.FUSION_BY_KIND)
    for q, v in zip(qs, qv):
        for name, table in (("today", today), ("rank", RANK_FUSION), ("code_map", today)):
            fusion.FUSION_BY_KIND.clear()
            fusion.FUSION_BY_KIND.update(table)
            t0 = time.perf_counter()
            code = embedder.code_query_vector(v) if name == "code_map" else None
            retrieval.hybrid_search(store, v, q.query, code_vector=code)
            out[name].append(time.perf_counter() - t0)
    fusion.FUSION_BY_KIND.clear()
    fusion.FUSION_BY_KIND.update(today)
    return out


def report(times: dict[str, list[float]], home: str, rows: int) -> dict:
    """p50 and p95 in milliseconds of each, and today's over the rank fusion's."""
    ms = {
        k: {"p50": round(1000 * float(np.percentile(v, 50)), 1), "p95": round(1000 * float(np.percentile(v, 95)), 1)}
        for k, v in times.items()
    }
    ratio = {p: round(ms["today"][p] / ms["rank"][p], 2) for p in ("p50", "p95")}
    mapped = {p: round(ms["code_map"][p] / ms["today"][p], 2) for p in ("p50", "p95")}
    return {
        "home": home,
        "rows": rows,
        "queries": len(times["today"]),
        "ms": ms,
        "today_over_rank": ratio,
        "code_map_over_plain": mapped,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", required=True, help="a data folder situate eval or ingest made")
    ap.add_argument("--queries", required=True, help="queries file (JSON lines with query and golden)")
    ap.add_argument("-n", type=int, default=200, help="queries timed (default 200)")
    ap.add_argument("--out", required=True, help="write OUT.json and OUT.md")
    args = ap.parse_args(argv)
    from situate.resources.store.store import Store

    rep = report(time_searches(args.home, args.queries, args.n), args.home, Store(home=args.home).count_rows())
    md = (
        f"hybrid_search over {rep['rows']:,} rows, {rep['queries']} queries, interleaved (ms per search):\n\n"
        "| fusion for code | p50 | p95 |\n|---|---|---|\n"
        f"| score, plain query vector (today) | {rep['ms']['today']['p50']} | {rep['ms']['today']['p95']} |\n"
        f"| score, code query map (SITUATE_CODE_ADAPTER=1) | {rep['ms']['code_map']['p50']} "
        f"| {rep['ms']['code_map']['p95']} |\n"
        f"| rank (dense×2 + structural BM25, k = 10) | {rep['ms']['rank']['p50']} | {rep['ms']['rank']['p95']} |\n\n"
        f"score / rank: p50 {rep['today_over_rank']['p50']}×, p95 {rep['today_over_rank']['p95']}×; "
        f"code map / plain: p50 {rep['code_map_over_plain']['p50']}×, p95 {rep['code_map_over_plain']['p95']}×\n"
    )
    Path(args.out + ".json").write_text(json.dumps(rep, indent=1) + "\n")
    Path(args.out + ".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
