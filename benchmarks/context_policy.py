"""Which context each kind of document gets, chosen by cross-validation on the dev halves.

For each kind of document (code: the codebase set; prose: the docs set) the candidates are the
``structure`` mode (no LLM call) and the ``document`` mode (one LLM summary a document), each
scored by its own `situate eval --json` report over the same queries.  For each fold of a seeded
k-fold split repeated (the folds of `situate eval --configs fusion-cv`:
:data:`situate.evaluation.fusion_fit.FOLDS` x :data:`situate.evaluation.fusion_fit.REPEATS`),
the mode is chosen on the other folds, then scored on the fold left out:

- the LLM's mode is chosen only where it measurably helps on the training folds: its Pass@20
  gain over ``structure`` (failure@20, the figure the published results give) is positive and
  its Pass@5 gain is not negative; otherwise the cheaper mode;
- the out-of-fold Pass@5 and Pass@20 of that choice are compared with today's default
  (``document`` everywhere), with the spread (sd) over the folds of the per-fold difference.

A kind's default is the mode chosen on most folds.  The report gives, per kind, that share, the
out-of-fold figures of the policy, of ``document`` and of ``structure``, and the cost in LLM
calls of each mode.

    python -m benchmarks.context_policy \\
        --code benchmarks/reports/llm-context-ab/codebase-structure.json \\
               benchmarks/reports/llm-context-ab/codebase-document.json \\
        --prose benchmarks/reports/llm-context-ab/docs-structure.json \\
                benchmarks/reports/llm-context-ab/docs-document.json \\
        --out benchmarks/reports/context-policy
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.context_ab import per_query_pass
from situate.evaluation.fusion_fit import FOLDS, REPEATS

CONFIG = "contextual"  # the pipeline's own search (situate eval's default configuration)


def pass_arrays(report: dict, qids: list[str]) -> dict[int, np.ndarray]:
    """Pass@5 and Pass@20 of each query of ``qids`` (0..1) in one `situate eval --json` report."""
    ranks = report["golden_ranks"][CONFIG]
    return {k: np.array([per_query_pass(ranks, k)[q] for q in qids]) for k in (5, 20)}


def choose(structure: dict[int, np.ndarray], document: dict[int, np.ndarray], idx: np.ndarray) -> str:
    """The mode chosen on the queries ``idx``: ``document`` only where it measurably helps."""
    g20 = float((document[20][idx] - structure[20][idx]).mean())
    g5 = float((document[5][idx] - structure[5][idx]).mean())
    return "document" if g20 > 0 and g5 >= 0 else "structure"


def cross_validate(structure: dict, document: dict, folds: int = FOLDS, repeats: int = REPEATS, seed: int = 0) -> dict:
    """Out-of-fold figures of the choice (percent), and the share of folds choosing each mode."""
    n = len(structure[5])
    rng = np.random.default_rng(seed)
    chosen, rows = [], []
    for _ in range(repeats):
        order = rng.permutation(n)
        for part in np.array_split(order, folds):
            train = np.setdiff1d(order, part)
            mode = choose(structure, document, train)
            pick = document if mode == "document" else structure
            chosen.append(mode)
            rows.append(
                [float(pick[k][part].mean()) for k in (5, 20)] + [float(document[k][part].mean()) for k in (5, 20)]
            )
    rows_a = np.array(rows) * 100
    out = {
        "document_share": round(chosen.count("document") / len(chosen), 3),
        "choice": max(("structure", "document"), key=chosen.count),
    }
    for i, k in enumerate((5, 20)):
        diff = rows_a[:, i] - rows_a[:, 2 + i]
        out[f"policy@{k}"] = round(float(rows_a[:, i].mean()), 2)
        out[f"today@{k}"] = round(float(rows_a[:, 2 + i].mean()), 2)
        out[f"diff@{k}"] = round(float(diff.mean()), 2)
        out[f"diff_std@{k}"] = round(float(diff.std()), 2)
    for mode, arrays in (("structure", structure), ("document", document)):
        for k in (5, 20):
            out[f"{mode}@{k}"] = round(100 * float(arrays[k].mean()), 2)
    return out


def kind_row(kind: str, structure_path: str, document_path: str) -> dict:
    """One kind's figures from its two reports."""
    s, d = (json.loads(Path(p).read_text()) for p in (structure_path, document_path))
    qids = sorted(set(s["golden_ranks"][CONFIG]) & set(d["golden_ranks"][CONFIG]))
    row = cross_validate(pass_arrays(s, qids), pass_arrays(d, qids))
    row.update(
        kind=kind,
        queries=len(qids),
        reports=[structure_path, document_path],
        # a cold ingest's LLM calls: none in structure mode, one a document in document mode (the
        # reports' own ingests read the committed blurb files, with no call)
        llm_calls={"structure": 0, "document": d["ingest"]["documents"]},
    )
    return row


def markdown(rows: list[dict]) -> str:
    head = (
        "| kind | queries | chosen (share of folds for document) | structure Pass@5 / @20 | document Pass@5 / @20 "
        "| policy out of fold @5 / @20 | against today's (document) @5 / @20 (fold sd) "
        "| LLM calls of a cold ingest, structure / document |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['kind']} | {r['queries']} | {r['choice']} ({r['document_share']:.0%}) "
        f"| {r['structure@5']} / {r['structure@20']} | {r['document@5']} / {r['document@20']} "
        f"| {r['policy@5']} / {r['policy@20']} "
        f"| {r['diff@5']:+.2f} ({r['diff_std@5']}) / {r['diff@20']:+.2f} ({r['diff_std@20']}) "
        f"| {r['llm_calls']['structure']} / {r['llm_calls']['document']} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--code", nargs=2, metavar=("STRUCTURE.json", "DOCUMENT.json"), required=True)
    ap.add_argument("--prose", nargs=2, metavar=("STRUCTURE.json", "DOCUMENT.json"), required=True)
    ap.add_argument("--out", required=True, help="report path without extension (.json and .md are written)")
    args = ap.parse_args(argv)
    rows = [kind_row("code", *args.code), kind_row("prose", *args.prose)]
    Path(args.out + ".json").write_text(json.dumps(rows, indent=1) + "\n")
    md = markdown(rows)
    Path(args.out + ".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
