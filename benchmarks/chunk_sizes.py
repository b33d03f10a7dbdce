"""Chunk size per kind, measured: the labelled corpora's documents re-chunked at several sizes
within the embedder's window, scored on the dev halves by the labelled text each hit covers,
and the size chosen by cross-validation over the queries.

Each size is a `situate eval --rechunk` of the corpus (its own data folder, default settings but
``SITUATE_CHUNK_TOKENS`` / ``SITUATE_CODE_CHUNK_TOKENS`` and an overlap of a tenth of the size):
the documents are cut by situate's chunker instead of the corpus's own chunks, and a labelled
chunk counts as found by the first hit that covers it
(:func:`situate.evaluation.metrics.covers`: an overlap of half the shorter span).  The docs set is
prose and the codebase set code, so each corpus measures one kind's size.

Two readings of "found within k":

- **by hits** (the issue's method): within the first k chunks retrieved.  Larger chunks cover more
  labelled text each, so this favours them.
- **at today's reading budget**: within the first ``round(k x today's mean chunk tokens / this
  size's mean chunk tokens)`` chunks, i.e. about as many tokens of hits as today's top k: the same
  amount of text in front of the reader or the answering LLM.

A size is chosen by cross-validation (5 folds x 10 seeded shuffles of the queries): on each
training part the size with the best mean of Pass@5 and Pass@20 at today's budget, scored on the
held-out part; the report gives how often each size is chosen and the held-out mean against
today's size on the same folds.  The share of chunks whose embedded text is cut to the
embedder's window comes from the ingest's own warning.

    python -m benchmarks.chunk_sizes run --out benchmarks/reports/chunk-sizes
    python -m benchmarks.chunk_sizes report --out benchmarks/reports/chunk-sizes   # from the saved evals
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.context_ab import fold_std, per_query_pass
from benchmarks.working_copy import cpu_flags

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "contextual"
#: Sizes compared, cl100k_base tokens; 800 is the default before this measurement.
SIZES = (200, 300, 400, 800)
TODAY = 800
CORPORA = ("docs", "codebase")
#: Cross-validation's folds and seeded shuffles (those of ``fusion-cv``).
FOLDS, REPEATS = 5, 10
_CUT = re.compile(r"embeddings: (\d+) of (\d+) chunks' indexed text cut")


def settings(size: int, overlap: int | None = None) -> dict[str, str]:
    """The environment of one size's eval (both kinds at ``size``; overlap a tenth of it unless
    given)."""
    return {
        "SITUATE_CHUNK_TOKENS": str(size),
        "SITUATE_CODE_CHUNK_TOKENS": str(size),
        "SITUATE_OVERLAP_TOKENS": str(size // 10 if overlap is None else overlap),
    }


def parse_size(text: str) -> tuple[int, int | None]:
    """``300`` → ``(300, None)`` (overlap a tenth); ``300o20`` → ``(300, 20)``."""
    size, _, overlap = text.partition("o")
    return int(size), int(overlap) if overlap else None


def run_evals(out: Path, corpora: list[str], sizes: list[str]) -> None:
    """A cold `situate eval --rechunk` per corpus and size (``300``, or ``300o20`` for an overlap
    of 20): ``out``/CORPUS-SIZE.json and .log."""
    out.mkdir(parents=True, exist_ok=True)
    for corpus in corpora:
        for text in sizes:
            size, overlap = parse_size(text)
            name = f"{corpus}-{text}"
            home = Path(f"/tmp/chunk-sizes-{name}")
            subprocess.run(["rm", "-rf", str(home)], check=True)
            cmd = [str(ROOT / ".venv/bin/situate"), "eval", "--corpus", corpus, "--configs", CONFIG, "--rechunk"]
            cmd += ["--home", str(home), "--json", str(out / f"{name}.json")]
            env = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")} | settings(size, overlap)
            print(f"chunk_sizes: {name}", file=sys.stderr)
            with open(out / f"{name}.log", "w") as log:
                subprocess.run(cmd, env=env, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            stats = table_stats(home)
            (out / f"{name}.stats.json").write_text(json.dumps(stats | cut_share(out / f"{name}.log")) + "\n")


def table_stats(home: Path) -> dict:
    """Rows of the eval's table and their mean length in cl100k_base tokens."""
    import lancedb

    from situate.contextual.tokens import count_cl100k
    from situate.resources.models.registry import use_offline_tiktoken

    use_offline_tiktoken()
    db = lancedb.connect(str(home / "lancedb"))
    texts = db.open_table(db.list_tables().tables[0]).to_arrow().column("text").to_pylist()
    return {"rows": len(texts), "mean_tokens": round(sum(map(count_cl100k, texts)) / max(1, len(texts)), 1)}


def cut_share(log: Path) -> dict:
    """The ingest's count of chunks cut to the embedder's window (0 when it printed none)."""
    m = _CUT.search(log.read_text())
    return {"cut": int(m.group(1)) if m else 0}


def per_query(report: dict, stats: dict, today_tokens: float) -> dict[str, dict[str, float]]:
    """``{"hits@5", "hits@20", "budget@5", "budget@20"}`` → query → found share."""
    ranks = report["golden_ranks"][CONFIG]
    out = {}
    for k in (5, 20):
        out[f"hits@{k}"] = per_query_pass(ranks, k)
        out[f"budget@{k}"] = per_query_pass(ranks, max(1, round(k * today_tokens / stats["mean_tokens"])))
    return out


def cross_validate(scores: dict[int, np.ndarray], today: int, seed: int = 0) -> dict:
    """Choose the size with the best training mean on each fold; score it on the held-out part
    (ties go to the larger size: fewer rows).

    ``scores``: size → per-query score (same query order).  Returns how often each size was
    chosen, the held-out mean of the chosen sizes and of ``today`` over the same parts, and the
    spread of their difference over the parts.
    """
    rng = np.random.default_rng(seed)
    n = len(next(iter(scores.values())))
    chosen, held, base = [], [], []
    for _ in range(REPEATS):
        order = rng.permutation(n)
        parts = np.array_split(order, FOLDS)
        for i, test in enumerate(parts):
            train = np.concatenate([p for j, p in enumerate(parts) if j != i])
            best = max(scores, key=lambda s: (float(scores[s][train].mean()), s == today, parse_size(s)[0]))
            chosen.append(best)
            held.append(float(scores[best][test].mean()))
            base.append(float(scores[today][test].mean()))
    diff = np.array(held) - np.array(base)
    return {
        "chosen": {s: chosen.count(s) for s in scores},
        "held_out": round(100 * float(np.mean(held)), 2),
        "today": round(100 * float(np.mean(base)), 2),
        "diff": round(100 * float(diff.mean()), 2),
        "fold_sd": round(100 * float(diff.std()), 2),
    }


def corpus_result(out: Path, corpus: str) -> dict | None:
    """One corpus's rows (one a size) and the cross-validated choice, from the saved evals."""
    found = [p.name[len(corpus) + 1 : -len(".json")] for p in out.glob(f"{corpus}-*.json")]
    found = [t for t in found if "." not in t]  # not the .stats.json files
    names = {s: f"{corpus}-{s}" for s in sorted(found, key=lambda t: (parse_size(t)[0], t))}
    if str(TODAY) not in names:
        return None
    reports = {s: json.loads((out / f"{n}.json").read_text()) for s, n in names.items()}
    stats = {s: json.loads((out / f"{n}.stats.json").read_text()) for s, n in names.items()}
    today = str(TODAY)
    today_tokens = stats[today]["mean_tokens"]
    pq = {s: per_query(reports[s], stats[s], today_tokens) for s in names}
    qids = sorted(pq[today]["hits@5"])
    rows = []
    for s in names:
        size, overlap = parse_size(s)
        overlap = size // 10 if overlap is None else overlap
        row = {
            "size": s,
            "overlap": overlap,
            **stats[s],
            "cut_share": round(100 * stats[s]["cut"] / max(1, stats[s]["rows"]), 1),
        }
        for m in ("hits@5", "hits@20", "budget@5", "budget@20"):
            mine = np.array([pq[s][m][q] for q in qids])
            theirs = np.array([pq[today][m][q] for q in qids])
            row[m] = round(100 * float(mine.mean()), 2)
            row[f"diff_{m}"] = round(100 * float((mine - theirs).mean()), 2)
            row[f"sd_{m}"] = round(100 * fold_std(mine - theirs), 2)
        row["seconds"] = reports[s]["ingest"]["seconds"]
        rows.append(row)
    cv = {}
    grid = [s for s in names if parse_size(s)[1] is None]  # the sizes at an overlap of a tenth
    for basis in ("budget", "hits"):
        score = {s: np.array([(pq[s][f"{basis}@5"][q] + pq[s][f"{basis}@20"][q]) / 2 for q in qids]) for s in grid}
        cv[basis] = cross_validate(score, today)
    return {"corpus": corpus, "queries": len(qids), "rows": rows, "cv": cv}


def report(out: Path) -> dict:
    """Every saved eval, per corpus; writes ``out``.json and ``out``.md."""
    result = {"cpu": cpu_flags(), "corpora": [r for c in CORPORA if (r := corpus_result(out, c))]}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    return result


def markdown(result: dict) -> str:
    """The comparison as one table a corpus, and the cross-validated choice."""
    lines = [f"CPU: {result['cpu']}.", ""]
    for c in result["corpora"]:
        lines += [
            f"### {c['corpus']} dev half ({c['queries']} queries), re-chunked",
            "",
            "| size | overlap | chunks | mean tokens | cut to the window | by hits @5 / @20 (vs 800, fold sd) "
            "| at today's budget @5 / @20 (vs 800, fold sd) | ingest s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in c["rows"]:
            lines.append(
                f"| {parse_size(r['size'])[0]} | {r['overlap']} | {r['rows']} | {r['mean_tokens']} | "
                f"{r['cut_share']}% | "
                f"{r['hits@5']} / {r['hits@20']} ({r['diff_hits@5']:+.2f} {r['sd_hits@5']}, "
                f"{r['diff_hits@20']:+.2f} {r['sd_hits@20']}) | {r['budget@5']} / {r['budget@20']} "
                f"({r['diff_budget@5']:+.2f} {r['sd_budget@5']}, {r['diff_budget@20']:+.2f} {r['sd_budget@20']}) "
                f"| {r['seconds']} |"
            )
        for basis, cv in c["cv"].items():
            lines.append(
                f"\nChosen by cross-validation ({basis}, mean of @5 and @20): {cv['chosen']} of "
                f"{FOLDS * REPEATS} folds; held-out {cv['held_out']} against 800's {cv['today']} "
                f"({cv['diff']:+.2f}, fold sd {cv['fold_sd']})."
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["run", "report"])
    ap.add_argument("--out", required=True, help="report path without extension; the evals go in OUT/")
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.action == "run":
        run_evals(out, args.corpora.split(","), args.sizes.split(","))
    print(markdown(report(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
