"""Many small documents, ingested cold: does a document's cost grow with the documents before it?

Two measurements, each a real `situate ingest` of one-function documents with
``SITUATE_CONTEXT=structure`` (no LLM: what is left is the cost around the embedder) from an empty
data folder:

- **CoSQA**: its 6,267 functions (``eval/cosqa/cosqa_chunks.json``) in one run, as
  `situate eval` ingests them: wall time, when the first progress line came, seconds per stage,
  and the ``embeddings`` stage against the embedder's own seconds (the sum over documents of the
  time inside ``Embedder.embed``, from the stage's per-document entries).
- **10,000 documents** in runs of 1,000 (``SITUATE_DOCS_PER_RUN``): CoSQA's functions and, for the
  rest, the same functions each under a comment line naming its copy (distinct texts, so nothing
  comes from the embedding cache); seconds a document of each run and the process's peak memory
  after it.  The first and the last thousand should cost the same, and the memory stay flat.

    python -m benchmarks.ingest_scale --out benchmarks/reports/ingest-scale
    python -m benchmarks.ingest_scale --only cosqa --out /tmp/cosqa-ingest

With ``--only``, the other measurement's run already in the report at ``--out`` is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.stdlib import SITUATE, embedder_seconds, run_measured

ROOT = Path(__file__).resolve().parent.parent
COSQA = ROOT / "eval" / "cosqa" / "cosqa_chunks.json"


def ten_thousand(corpus: list[dict], n: int = 10_000) -> list[dict]:
    """``n`` distinct one-chunk documents: the corpus's, then copies under a comment line."""
    out = [dict(d) for d in corpus[:n]]
    i = 0
    while len(out) < n:
        d = corpus[i % len(corpus)]
        text = f"# copy {len(out)} of {d['doc_id']}\n{d['content']}"
        doc_id = f"{d['doc_id']}-copy{len(out)}"
        out.append(
            {
                "doc_id": doc_id,
                "original_uuid": doc_id,
                "content": text,
                "chunks": [{"chunk_id": f"{doc_id}_chunk_0", "original_index": 0, "content": text}],
            }
        )
        i += 1
    return out


def ingest(corpus: Path, work: Path, name: str, extra: dict) -> dict:
    """One cold ingest of ``corpus``; its summary, wall time, peak memory and log facts."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    home = work / f"home-{slug}"
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "SITUATE_CONTEXT": "structure", **extra}
    for var in ("SITUATE_HOME", "DAGSTER_HOME", "SITUATE_DOCS"):
        env.pop(var, None)
    out, log = work / f"{slug}.json", work / f"{slug}.log"
    rc, wall, peak = run_measured([*SITUATE, "ingest", str(corpus), "--home", str(home), "--json", str(out)], env, log)
    summary = json.loads(out.read_text()) if out.exists() else {}
    summary.pop("per_document", None)
    return {
        "name": name,
        "exit_status": rc,
        "wall_seconds": round(wall, 1),
        "peak_memory_mb": round(peak),
        "first_progress_seconds": first_progress(log, wall),
        "embedder_seconds": embedder_seconds(home),
        "summary": summary,
    }


def first_progress(log: Path, wall: float) -> float | None:
    """Seconds from the command's start to its first progress line (a stage's ``N/M documents``),
    from the log's timestamps and its last line's (the command's end, ``wall`` after its start)."""
    stamps = []
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \+0000 - dagster - INFO - .* documents", line)
        if m:
            stamps.append(time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")))
    if not stamps:
        return None
    end = time.mktime(time.gmtime(log.stat().st_mtime))
    return round(stamps[0] - (end - wall), 1)


def markdown(report: dict) -> str:
    lines = [f"{report['cpus']} cores, {report['date']}; every ingest cold, `SITUATE_CONTEXT=structure`.", ""]
    for r in report["runs"]:
        s = r["summary"]
        stages = s.get("stages", {})
        emb = stages.get("embeddings", {}).get("seconds", 0.0)
        lines += [
            f"### {r['name']}",
            "",
            f"- {s.get('documents', 0):,} documents, {s.get('chunks', 0):,} chunks: {r['wall_seconds'] / 60:.1f} min "
            f"cold, peak memory {r['peak_memory_mb']:,} MB; first progress line after {r['first_progress_seconds']} s",
            "- seconds per stage: "
            + "; ".join(f"{k} {v['seconds']:.0f} (situate's own {v['work_seconds']:.0f})" for k, v in stages.items()),
            f"- `embeddings` {emb:.0f} s against the embedder's own {r['embedder_seconds']:.0f} s: "
            f"{emb / max(r['embedder_seconds'], 1e-9):.2f}x",
        ]
        runs = s.get("runs", [])
        if len(runs) > 1:
            lines += ["", "| run | documents | seconds | seconds a document | peak MB after |", "|---|---|---|---|---|"]
            lines += [
                f"| {i} | {x['documents']} | {x['seconds']:.1f} | {x['seconds'] / x['documents']:.4f} "
                f"| {x['peak_mb']} |"
                for i, x in enumerate(runs, 1)
            ]
            first, last = runs[0], runs[-1]
            lines.append(
                f"\nFirst thousand {first['seconds'] / first['documents']:.4f} s a document, last "
                f"{last['seconds'] / last['documents']:.4f} s ({last['seconds'] / first['seconds']:.2f}x); "
                f"peak memory {first['peak_mb']} MB after the first run, {last['peak_mb']} MB after the last."
            )
        lines.append("")
    return "\n".join(lines)


def kept_runs(path: Path, only: str | None) -> list[dict]:
    """With ``--only``, the other measurement's run from the report already at ``path`` (so a
    report re-made one measurement at a time holds both); none without ``--only``."""
    if not only or not path.is_file():
        return []
    other = "10,000" if only == "cosqa" else "CoSQA"
    return [r for r in json.loads(path.read_text()).get("runs", []) if r["name"].startswith(other)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="report path without extension (.json and .md)")
    ap.add_argument("--only", choices=("cosqa", "10k"), help="one measurement")
    ap.add_argument("--work", help="working folder (default a new temporary one)")
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="situate-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = json.loads(COSQA.read_text())
    report = {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "python": sys.version.split()[0], "runs": []}
    kept = kept_runs(Path(args.out + ".json"), args.only)
    if args.only in (None, "cosqa"):
        report["runs"].append(ingest(COSQA, work, "CoSQA, 6,267 functions, one run", {}))
        print(markdown(report), flush=True)
    if args.only in (None, "10k"):
        big = work / "ten-thousand.json"
        big.write_text(json.dumps(ten_thousand(corpus)))
        report["runs"].append(ingest(big, work, "10,000 functions in runs of 1,000", {"SITUATE_DOCS_PER_RUN": "1000"}))
    report["runs"] = sorted(kept + report["runs"], key=lambda r: not r["name"].startswith("CoSQA"))
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    Path(args.out + ".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
