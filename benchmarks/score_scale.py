"""What a hit's similarity says: its distribution for real questions and for nonsense, and ties.

A hit's ``similarity`` (:attr:`situate.resources.store.retrieval.Hit.similarity`) is the cosine of
the query's and the chunk's embedding vectors, the scale ``situate search`` prints.  This measures,
on an ingested labelled corpus (the docs set's data folder, made by ``situate eval`` or
``situate ingest`` of its corpus file):

- the top hit's similarity for each dev-half question, and whether that hit is a labelled answer;
- the top hit's similarity for nonsense queries (seeded strings of letters, two to four words of
  five to ten letters: what a user's typo or a query about something absent looks like to the
  embedder);
- ties: queries whose hits share a similarity, and whose hits share the fused score.

It states the threshold :data:`situate.resources.store.retrieval.WEAK_MATCH` against both
distributions: the share of real top hits above it and of nonsense top hits below it.

    python -m benchmarks.score_scale --home /tmp/prose-reading-document-192-24 \\
        --queries ../shared/eval/docs/queries_dev.jsonl --out benchmarks/reports/score-scale-docs

Writes ``OUT.json`` and ``OUT.md`` (with the CPU's flags).
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

import numpy as np

from benchmarks.working_copy import cpu_flags

#: Nonsense queries measured (seeded: the same list every run).
NONSENSE = 50


def nonsense_queries(n: int = NONSENSE, seed: int = 0) -> list[str]:
    """``n`` seeded queries of two to four made-up words (five to ten lower-case letters each)."""
    rng = random.Random(seed)
    words = lambda: " ".join(  # noqa: E731
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 10))) for _ in range(rng.randint(2, 4))
    )
    return [words() for _ in range(n)]


def top_hits(home: str, queries: list[str], k: int = 10) -> list[list]:
    """Each query's hits (:func:`situate.pipelines.operations.search`, no rerank)."""
    from situate.pipelines.operations import search

    return [search(q, k, home, rerank=0)[0] for q in queries]


def summary(values: list[float]) -> dict:
    """Min, 5th, 25th, 50th, 75th, 95th percentile and max, to 3 places."""
    a = np.asarray(values, dtype=float)
    qs = np.percentile(a, [0, 5, 25, 50, 75, 95, 100])
    return dict(zip(("min", "p5", "p25", "p50", "p75", "p95", "max"), (round(float(x), 3) for x in qs), strict=True))


def ties(hit_lists: list[list], field: str) -> int:
    """Queries whose hits share a value of ``field`` (rounded as shown: 3 places for the
    similarity, 4 for the fused score)."""
    places = 3 if field == "similarity" else 4
    return sum(len({round(getattr(h, field), places) for h in hits}) < len(hits) for hits in hit_lists if len(hits) > 1)


def run(home: str, queries_file: Path) -> dict:
    """The figures above for the data folder ``home`` and the labelled questions of ``queries_file``."""
    from situate.resources.store.retrieval import WEAK_MATCH

    rows = [json.loads(x) for x in queries_file.read_text().splitlines() if x.strip()]
    real = top_hits(home, [r["query"] for r in rows])
    junk = top_hits(home, nonsense_queries())
    real_top = [h[0].similarity for h in real if h]
    junk_top = [h[0].similarity for h in junk if h]
    answered = []
    for r, hits in zip(rows, real, strict=True):
        golden = {str(g[0]) for g in r.get("golden", [])}  # [[doc_id, chunk index], ...]
        answered.append(bool(hits) and hits[0].source.rsplit("#", 1)[-1] in golden)
    return {
        "home": home,
        "queries_file": str(queries_file),
        "cpu": cpu_flags(),
        "weak_match": WEAK_MATCH,
        "real_top_similarity": summary(real_top),
        "nonsense_top_similarity": summary(junk_top),
        "real_top_at_or_above": round(float(np.mean([s >= WEAK_MATCH for s in real_top])), 3),
        "nonsense_top_below": round(float(np.mean([s < WEAK_MATCH for s in junk_top])), 3),
        "real_top_answering_at_or_above": round(
            float(np.mean([s >= WEAK_MATCH for s, a in zip(real_top, answered, strict=True) if a] or [0])), 3
        ),
        "queries": len(real_top),
        "nonsense": len(junk_top),
        "ties_similarity": ties(real + junk, "similarity"),
        "ties_fused": ties(real + junk, "score"),
        "nonsense_examples": nonsense_queries()[:3],
        "real_top": [round(x, 4) for x in real_top],
        "real_top_answering": answered,
        "nonsense_top": [round(x, 4) for x in junk_top],
    }


def markdown(r: dict) -> str:
    """The report as a page."""
    lines = [
        f"# The similarity scale: real questions against nonsense ({r['queries']} and {r['nonsense']} queries)",
        "",
        f"Data folder `{r['home']}`, questions `{r['queries_file']}`; CPU: {r['cpu']}.",
        "",
        "| top hit's similarity | min | p5 | p25 | p50 | p75 | p95 | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, key in (("real questions", "real_top_similarity"), ("nonsense", "nonsense_top_similarity")):
        s = r[key]
        lines.append(
            f"| {name} | " + " | ".join(str(s[c]) for c in ("min", "p5", "p25", "p50", "p75", "p95", "max")) + " |"
        )
    lines += [
        "",
        f"WEAK_MATCH = {r['weak_match']}: real top hits at or above it {r['real_top_at_or_above']:.0%} "
        f"(those that are a labelled answer: {r['real_top_answering_at_or_above']:.0%}); nonsense top hits "
        f"below it {r['nonsense_top_below']:.0%}. Queries whose hits tie as shown: similarity "
        f"{r['ties_similarity']}, fused score {r['ties_fused']}. Nonsense such as: "
        + ", ".join(f"`{q}`" for q in r["nonsense_examples"])
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", required=True, help="a data folder holding an ingested labelled corpus")
    p.add_argument("--queries", type=Path, required=True, help="its questions (queries_dev.jsonl)")
    p.add_argument("--out", type=Path, help="report path without extension")
    args = p.parse_args(argv)
    report = run(args.home, args.queries)
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
