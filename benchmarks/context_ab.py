"""Paired comparison of two `situate eval --json` reports of one query set: a change to what is
indexed (structural context, headings) judged per query, with the spread of its gain across folds.

Each configuration present in both reports gets Pass@5 and Pass@20 before and after, the gain, the
standard deviation of the gain over the folds of a seeded k-fold split repeated (the same folds as
`situate eval --configs fusion-cv`, :data:`situate.evaluation.fusion_fit.FOLDS` x :data:`REPEATS`), the queries
whose Pass@20 rose or fell, and Pass@20 over the queries with two or more golden chunks (the
multi-chunk answers).  A change "wins" when its gain at Pass@5 or Pass@20 exceeds the fold spread
with no loss at either (:func:`situate.evaluation.fusion_fit.wins`' rule).

    python -m benchmarks.context_ab BEFORE.json AFTER.json --out benchmarks/reports/NAME
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from situate.evaluation.fusion_fit import FOLDS, REPEATS

KS = (5, 20)


def per_query_pass(ranks: dict[str, list], k: int) -> dict[str, float]:
    """Pass@k of each query from its golden chunks' ranks (1-based; None: not retrieved)."""
    return {q: sum(1 for r in rs if r is not None and r <= k) / len(rs) for q, rs in ranks.items() if rs}


def fold_std(gain: np.ndarray, folds: int = FOLDS, repeats: int = REPEATS, seed: int = 0) -> float:
    """Standard deviation of the mean gain over the folds of ``repeats`` seeded shuffles."""
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(repeats):
        order = rng.permutation(len(gain))
        means += [float(gain[part].mean()) for part in np.array_split(order, folds)]
    return float(np.std(means))


def compare(before: dict, after: dict) -> dict:
    """Per configuration in both reports: the figures above (percent)."""
    out = {}
    for config, ranks_b in before["golden_ranks"].items():
        ranks_a = after["golden_ranks"].get(config)
        if ranks_a is None:
            continue
        qids = sorted(set(ranks_b) & set(ranks_a))
        multi = [q for q in qids if len(ranks_b[q]) >= 2]
        row = {"queries": len(qids), "multi_chunk_queries": len(multi)}
        for k in KS:
            pb, pa = per_query_pass(ranks_b, k), per_query_pass(ranks_a, k)
            gain = np.array([pa[q] - pb[q] for q in qids])
            row[f"before@{k}"] = round(100 * np.mean([pb[q] for q in qids]), 2)
            row[f"after@{k}"] = round(100 * np.mean([pa[q] for q in qids]), 2)
            row[f"gain@{k}"] = round(100 * float(gain.mean()), 2)
            row[f"gain_std@{k}"] = round(100 * fold_std(gain), 2)
            row[f"better@{k}"] = int((gain > 0).sum())
            row[f"worse@{k}"] = int((gain < 0).sum())
            if multi:
                row[f"multi_before@{k}"] = round(100 * np.mean([pb[q] for q in multi]), 2)
                row[f"multi_after@{k}"] = round(100 * np.mean([pa[q] for q in multi]), 2)
        row["wins"] = all(row[f"gain@{k}"] >= 0 for k in KS) and any(
            row[f"gain@{k}"] > row[f"gain_std@{k}"] for k in KS
        )
        out[config] = row
    return out


def markdown(rows: dict, title: str) -> str:
    lines = [
        f"### {title}",
        "",
        "| configuration | Pass@5 before → after (gain, fold sd) | Pass@20 before → after (gain, fold sd) | "
        "queries better / worse @20 | multi-chunk Pass@20 before → after | wins |",
        "|---|---|---|---|---|---|",
    ]
    for config, r in rows.items():
        lines.append(
            f"| {config} | {r['before@5']:.2f} → {r['after@5']:.2f} ({r['gain@5']:+.2f}, {r['gain_std@5']:.2f}) | "
            f"{r['before@20']:.2f} → {r['after@20']:.2f} ({r['gain@20']:+.2f}, {r['gain_std@20']:.2f}) | "
            f"{r['better@20']} / {r['worse@20']} | "
            f"{r.get('multi_before@20', float('nan')):.2f} → {r.get('multi_after@20', float('nan')):.2f} "
            f"({r['multi_chunk_queries']} queries) | {'yes' if r['wins'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="BEFORE.json AFTER.json [BEFORE.json AFTER.json ...]")
    ap.add_argument("--title", action="append", default=[], help="a heading per pair")
    ap.add_argument("--out", required=True, help="write OUT.json and OUT.md")
    args = ap.parse_args(argv)
    if len(args.pairs) % 2:
        ap.error("give the reports in pairs: BEFORE AFTER")
    report, md = {}, []
    for i in range(0, len(args.pairs), 2):
        b, a = (json.loads(Path(p).read_text()) for p in args.pairs[i : i + 2])
        title = args.title[i // 2] if i // 2 < len(args.title) else f"{args.pairs[i]} → {args.pairs[i + 1]}"
        rows = compare(b, a)
        report[title] = {"before": args.pairs[i], "after": args.pairs[i + 1], "configs": rows}
        md.append(markdown(rows, title))
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    Path(args.out + ".md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
