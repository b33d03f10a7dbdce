"""How much of a prose page the context needs: today's summary of 2,048 tokens against shorter
readings and against no LLM at all, on the docs set's dev half, cold, in one run.

Each reading is a cold `situate eval` of the docs set (its own data folder, no blurb file, no
cache: every LLM call is made), one after the other on the same machine, so its LLM seconds and
wall seconds a page are comparable with today's:

- ``document-2048`` (today's default): one LLM summary a page, from its first 2,048 tokens;
- ``document-512``, ``document-256``: the same summary from the first 512 / 256 tokens
  (``SITUATE_DOCUMENT_TOKENS``);
- ``outline-*``: the summary from the page's title and heading outline, then its beginning
  (``SITUATE_SUMMARY_READING=outline``), within 256 / 192 tokens;
- ``document-N-M``: the summary from the first N tokens, generated within M tokens
  (``SITUATE_SUMMARY_TOKENS``; issue 61's bounded readings);
- ``extract``: the page's lead sentences as its context, no LLM call
  (:mod:`situate.contextual.lead`);
- ``structure``: the title and heading path alone, no LLM call.

Each is then compared with today's per query, Pass@5 and Pass@20 of ``contextual`` (what
``situate search`` does), with the spread of the difference over the folds of the ``fusion-cv``
split (5 folds x 10 seeded shuffles, :func:`benchmarks.context_ab.fold_std`).  A reading holds
when it is not lower than today's by more than that spread at either cut-off.

    python -m benchmarks.prose_reading run --out benchmarks/reports/prose-reading
    python -m benchmarks.prose_reading run --out benchmarks/reports/prose-reading-outline \
        --readings outline-256,outline-192-short,document-2048,document-256-32,document-192-32,\
document-128-32,document-192-24
    python -m benchmarks.prose_reading report --out benchmarks/reports/prose-reading   # from the saved evals
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.context_ab import fold_std, per_query_pass
from benchmarks.working_copy import cpu_flags

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "contextual"
#: The readings compared: name → the settings of its eval (prose only; the docs set has no code).
READINGS = {
    "document-2048": {"SITUATE_CONTEXT": "document", "SITUATE_DOCUMENT_TOKENS": "2048"},
    "document-512": {"SITUATE_CONTEXT": "document", "SITUATE_DOCUMENT_TOKENS": "512"},
    "document-256": {"SITUATE_CONTEXT": "document", "SITUATE_DOCUMENT_TOKENS": "256"},
    "outline-256": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "256",
        "SITUATE_SUMMARY_READING": "outline",
    },
    "outline-192-short": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "192",
        "SITUATE_SUMMARY_READING": "outline",
        "SITUATE_SUMMARY_TOKENS": "48",
    },
    "outline-256-32": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "256",
        "SITUATE_SUMMARY_READING": "outline",
        "SITUATE_SUMMARY_TOKENS": "32",
    },
    "outline-192-32": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "192",
        "SITUATE_SUMMARY_READING": "outline",
        "SITUATE_SUMMARY_TOKENS": "32",
    },
    "document-256-32": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "256",
        "SITUATE_SUMMARY_TOKENS": "32",
    },
    "document-192-32": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "192",
        "SITUATE_SUMMARY_TOKENS": "32",
    },
    "document-128-32": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "128",
        "SITUATE_SUMMARY_TOKENS": "32",
    },
    "document-192-24": {
        "SITUATE_CONTEXT": "document",
        "SITUATE_DOCUMENT_TOKENS": "192",
        "SITUATE_SUMMARY_TOKENS": "24",
    },
    "extract": {"SITUATE_CONTEXT": "extract"},
    "structure": {"SITUATE_CONTEXT": "structure"},
}
BASELINE = "document-2048"


def run_evals(out: Path, names: list[str]) -> None:
    """A cold `situate eval` of the docs dev half for each reading, its report in ``out``/NAME.json."""
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        home = Path(f"/tmp/prose-reading-{name}")
        subprocess.run(["rm", "-rf", str(home)], check=True)
        cmd = [str(ROOT / ".venv/bin/situate"), "eval", "--corpus", "docs", "--configs", CONFIG]
        cmd += ["--home", str(home), "--json", str(out / f"{name}.json")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")} | READINGS[name]
        print(f"prose_reading: {name}: {' '.join(f'{k}={v}' for k, v in READINGS[name].items())}", file=sys.stderr)
        subprocess.run(cmd, env=env, check=True, cwd=ROOT)


def row(name: str, report: dict, base: dict, qids: list[str]) -> dict:
    """One reading's figures against the baseline's, per query and per page."""
    out: dict = {"reading": name, "settings": READINGS.get(name, {})}
    for k in (5, 20):
        mine = np.array([per_query_pass(report["golden_ranks"][CONFIG], k)[q] for q in qids])
        theirs = np.array([per_query_pass(base["golden_ranks"][CONFIG], k)[q] for q in qids])
        out[f"pass@{k}"] = round(100 * float(mine.mean()), 2)
        out[f"diff@{k}"] = round(100 * float((mine - theirs).mean()), 2)
        out[f"fold_sd@{k}"] = round(100 * fold_std(mine - theirs), 2)
    ingest = report["ingest"]
    pages = max(1, ingest["documents"])
    out.update(
        llm_calls=ingest["llm_calls"],
        prompt_tokens_a_page=round(ingest["prompt_tokens_evaluated"] / pages),
        llm_seconds_a_page=round(ingest["llm_seconds"] / pages, 2),
        wall_seconds_a_page=round(ingest["seconds"] / pages, 2),
        holds=all(out[f"diff@{k}"] >= -out[f"fold_sd@{k}"] for k in (5, 20)),
    )
    return out


def report(out: Path) -> list[dict]:
    """Every saved reading against the baseline; writes ``out``.json and ``out``.md."""
    reports = {n: json.loads((out / f"{n}.json").read_text()) for n in READINGS if (out / f"{n}.json").exists()}
    base = reports[BASELINE]
    qids = sorted(base["golden_ranks"][CONFIG])
    rows = [row(n, r, base, qids) for n, r in reports.items()]
    for r in rows:
        r["wall_ratio"] = round(r["wall_seconds_a_page"] / rows[0]["wall_seconds_a_page"], 3)
    result = {"cpu": cpu_flags(), "queries": len(qids), "rows": rows}
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    return rows


def markdown(result: dict) -> str:
    """The comparison as a table."""
    lines = [
        f"Docs set, dev half ({result['queries']} queries), cold, one run; CPU: {result['cpu']}.",
        "",
        "| reading | Pass@5 | Pass@20 | against today's @5 / @20 (fold sd) | holds | LLM calls | prompt tokens a page "
        "| LLM s a page | wall s a page | wall a page against today's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['reading']} | {r['pass@5']} | {r['pass@20']} | {r['diff@5']:+.2f} ({r['fold_sd@5']}) / "
            f"{r['diff@20']:+.2f} ({r['fold_sd@20']}) | {'yes' if r['holds'] else 'no'} | {r['llm_calls']} | "
            f"{r['prompt_tokens_a_page']:,} | {r['llm_seconds_a_page']} | {r['wall_seconds_a_page']} | "
            f"{r['wall_ratio']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["run", "report"])
    ap.add_argument("--out", required=True, help="report path without extension; the evals go in OUT/")
    ap.add_argument("--readings", default=",".join(READINGS), help="comma-separated names (run)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.action == "run":
        run_evals(out, args.readings.split(","))
    print(markdown({"cpu": cpu_flags(), "queries": 0, "rows": report(out)}).split("\n", 2)[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
