"""One fusion fitted over several labelled sets at once, from their ranking files
(`situate eval --configs fusion-cv --cv-save-rankings FILE`), with no model loaded: each set of
rankings added to today's three is cross-validated with folds drawn inside every set, each set
weighing the same in the choice (:mod:`situate.evaluation.pooled_fit`).

    python -m benchmarks.fusion_pooled codebase=benchmarks/rankings/codebase.json.gz \
        docs=benchmarks/rankings/docs.json.gz --cv-rankings ";bm25-identifiers" \
        --out benchmarks/reports/fusion-cv-pooled

Writes OUT.json (every fit's figures) and OUT.md (the table).  A ranking named in ``--cv-rankings``
must be in every file.  With ``--kinds codebase=code,cosqa=code,docs=prose`` the sets of each kind
of chunk are also fitted apart (one fusion for code, one for prose: per-kind fusion), each kind's
table after the one of every set together.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from situate.evaluation.fusion_fit import K_GRID, WEIGHT_GRID
from situate.evaluation.pooled_fit import pooled_fit_report, pooled_markdown
from situate.evaluation.ranking_files import read_rankings

#: Today's search: dense, BM25 and structural BM25, weight 1 each, RRF k = 60
#: (:data:`situate.pipelines.evaluate.TODAY`).
TODAY = ("dense", "bm25", "structure-bm25")


def fit_sets(
    files: dict[str, dict],
    sets: list[list[str]],
    folds: int,
    repeats: int,
    weights: tuple[float, ...] = WEIGHT_GRID,
    ks: tuple[int, ...] = K_GRID,
) -> dict[str, dict]:
    """``{label of the rankings added: pooled_fit_report}`` for each set of ranking names, over
    the grid of ``weights`` (each ranking's) and RRF ``ks``.

    Raises
    ------
    ValueError
        A ranking name missing from some file (the message names the file's label).
    """
    fits = {}
    for names in sets:
        chosen = list(TODAY) + [n for n in names if n not in TODAY]
        for label, f in files.items():
            missing = [n for n in chosen if n not in f["rankings"]]
            if missing:
                raise ValueError(f"{label}: no ranking {', '.join(missing)} (it has {', '.join(f['rankings'])})")
        pooled = {lb: ({n: f["rankings"][n] for n in chosen}, f["golden"]) for lb, f in files.items()}
        label = " + ".join(chosen[len(TODAY) :]) or "none (today's three re-weighted)"
        t0 = time.perf_counter()
        fits[label] = pooled_fit_report(
            pooled, dict.fromkeys(TODAY, 1), folds=folds, repeats=repeats, weights=weights, ks_rrf=ks
        )
        fits[label]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"fusion_pooled: {label}: {fits[label]['space']} fusions, {fits[label]['seconds']} s", file=sys.stderr)
    return fits


def query_shapes(files: dict[str, dict], spec: str) -> dict[str, list[str]]:
    """``{label: [shape of each query]}`` (:func:`situate.evaluation.metrics.query_shape`) from
    ``"codebase=eval/codebase/queries_dev.jsonl,..."``: each file's queries looked up by id.

    Raises
    ------
    ValueError
        An item without ``=``, a label that is not a file's, or a query id not in its file.
    """
    from situate.evaluation.metrics import load_queries, query_shape

    out = {}
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        label, sep, path = item.partition("=")
        if not sep or label not in files:
            raise ValueError(f"--shapes {item!r}: give LABEL=QUERIES for a file's label ({', '.join(files)})")
        text = {q.query_id: q.query for q in load_queries(path)}
        missing = [q for q in files[label]["query_ids"] if q not in text]
        if missing:
            raise ValueError(f"--shapes {label}: {len(missing)} query ids not in {path} (first {missing[0]!r})")
        out[label] = [query_shape(text[q]) for q in files[label]["query_ids"]]
    return out


def shapes_markdown(fits: dict[str, dict], shapes: dict[str, list[str]]) -> str:
    """Each fit's out-of-fold Pass@5 / Pass@20 against the baseline's on each set's queries of
    each shape (question, keywords): the figures of :func:`fit_sets` on a subset of the queries."""
    lines = [
        "| rankings added | set, shape (queries) | Pass@5 out of fold (baseline) | Pass@20 out of fold (baseline) |",
        "|---|---|---|---|",
    ]
    for label, cv in fits.items():
        for name, kinds in shapes.items():
            pq = cv["per_query"].get(name)
            if pq is None:
                continue
            for shape in ("question", "keywords"):
                idx = [i for i, k in enumerate(kinds) if k == shape]
                if not idx:
                    continue
                oof = 100 * np.array(pq["oof"])[idx].mean(0)
                base = 100 * np.array(pq["baseline"])[idx].mean(0)
                cells = f"{oof[0]:.2f} ({base[0]:.2f}) | {oof[-1]:.2f} ({base[-1]:.2f})"
                lines.append(f"| {label} | {name}, {shape} ({len(idx)}) | {cells} |")
    return "\n".join(lines)


def parse_kinds(text: str, labels: list[str]) -> dict[str, list[str]]:
    """``"codebase=code,docs=prose"`` → ``{"code": ["codebase"], "prose": ["docs"]}``, kinds in
    their first order.

    Raises
    ------
    ValueError
        An item without ``=``, a label that is not a file's, or a file with no kind.
    """
    kinds: dict[str, list[str]] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        label, sep, kind = item.partition("=")
        if not sep or label not in labels:
            raise ValueError(f"--kinds {item!r}: give LABEL=KIND for a file's label ({', '.join(labels)})")
        kinds.setdefault(kind, []).append(label)
    missing = [lb for lb in labels if not any(lb in v for v in kinds.values())]
    if missing:
        raise ValueError(f"--kinds gives no kind to {', '.join(missing)}")
    return kinds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", metavar="LABEL=FILE", help="a set's label and its ranking file")
    ap.add_argument(
        "--cv-rankings", default="", help="sets of rankings to add to today's three: ',' within, ';' between"
    )
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument(
        "--weights",
        default="0,1,2",
        help="each ranking's weights tried, joined by ',' (default 0,1,2: the grid of fusion_fit)",
    )
    ap.add_argument("--k-grid", default="60,10", help="RRF constants tried, joined by ',' (default 60,10)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument(
        "--kinds", default="", help="each file's kind of chunk, LABEL=KIND joined by ',': fit each kind apart too"
    )
    ap.add_argument(
        "--shapes", default="", help="LABEL=QUERIES joined by ',': figures per query shape (question, keywords) too"
    )
    ap.add_argument("--out", required=True, help="write OUT.json and OUT.md")
    args = ap.parse_args(argv)
    files = {}
    for item in args.files:
        label, sep, path = item.partition("=")
        if not sep or not label:
            ap.error(f"{item!r}: give each file as LABEL=FILE")
        files[label] = read_rankings(path) | {"path": path}
    sets = [[x.strip() for x in part.split(",") if x.strip()] for part in args.cv_rankings.split(";")]
    grid = (tuple(float(x) for x in args.weights.split(",")), tuple(int(x) for x in args.k_grid.split(",")))
    fits = fit_sets(files, sets, args.folds, args.repeats, *grid)
    report = {"files": {lb: f["path"] for lb, f in files.items()}, "fits": fits}
    md = pooled_markdown(fits)
    if args.kinds:
        try:
            kinds = parse_kinds(args.kinds, list(files))
        except ValueError as e:
            ap.error(str(e))
        report["kinds"] = {}
        for kind, labels in kinds.items():
            report["kinds"][kind] = fit_sets({lb: files[lb] for lb in labels}, sets, args.folds, args.repeats, *grid)
            md += f"\n\n**{kind}** ({', '.join(labels)}), fitted apart:\n\n" + pooled_markdown(report["kinds"][kind])
    if args.shapes:
        try:
            shapes = query_shapes(files, args.shapes)
        except ValueError as e:
            ap.error(str(e))
        md += "\n\nBy query shape (every set together):\n\n" + shapes_markdown(fits, shapes)
        for kind, kind_fits in report.get("kinds", {}).items():
            md += f"\n\nBy query shape ({kind}, fitted apart):\n\n" + shapes_markdown(kind_fits, shapes)
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    Path(args.out + ".md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
