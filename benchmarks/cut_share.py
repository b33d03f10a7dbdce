"""How many chunks' indexed text is longer than the embedder's window, by kind, on a real folder:
httpx's docs and source (the 46 files of :mod:`benchmarks.docs_site`), ingested cold with the
default settings and with the chunk sizes of before (800 cl100k_base tokens for both
kinds), one after the other.

Each row of the table is counted in the embedder's own tokenizer (bge-small-en-v1.5's WordPiece,
with its two special tokens), as the embedder reads it: the structural context, the blurb and the
chunk (:func:`situate.resources.store.retrieval.contextualized_text`); a row is cut when that is
over the embedder's window (512).  The ingest's own count (its ``cut to the embedder's``
warning) is given beside it.

Usage::

    git clone https://github.com/encode/httpx /tmp/httpx && git -C /tmp/httpx checkout ae1b9f66
    python -m benchmarks.cut_share /tmp/httpx --out benchmarks/reports/cut-share-httpx   # about 3 min
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.docs_site import copy_files
from benchmarks.working_copy import SITUATE, cpu_flags

#: name -> settings on top of a clean environment (no SITUATE_* variable).
SETTINGS = {
    "default": {},
    "800-both": {"SITUATE_CHUNK_TOKENS": "800", "SITUATE_CODE_CHUNK_TOKENS": "800", "SITUATE_OVERLAP_TOKENS": "80"},
}
_CUT = re.compile(r"(\d+) of (\d+) chunks' indexed text cut")


def counted(home: Path) -> dict:
    """Rows by kind, and those whose embedded text is over the embedder's window."""
    import lancedb

    from situate.pipelines.estimate import embed_token_counter
    from situate.pipelines.settings import resources_from_env
    from situate.resources.store.retrieval import contextualized_text

    embedder = resources_from_env(plain=True)["embedder"]
    count = embed_token_counter(embedder)
    db = lancedb.connect(str(home / "lancedb"))
    rows = db.open_table(db.list_tables().tables[0]).to_arrow().to_pylist()
    texts = [contextualized_text(r["blurb"] or "", r["text"], r["context"] or "") for r in rows]
    out: dict = {"window": embedder.n_ctx}
    for r, n in zip(rows, count(texts)):
        kind = out.setdefault(r.get("kind") or "prose", {"rows": 0, "cut": 0})
        kind["rows"] += 1
        kind["cut"] += n > embedder.n_ctx
    return out


def run_one(name: str, docs: Path) -> dict:
    """A cold ingest of ``docs`` with setting ``name``, and its rows counted."""
    home = Path(tempfile.mkdtemp(prefix=f"cut-share-{name}-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")} | SETTINGS[name]
    env["DAGSTER_HOME"] = str(home / "dagster")
    t0 = time.perf_counter()
    done = subprocess.run(
        [SITUATE, "ingest", str(docs), "--home", str(home)], env=env, capture_output=True, text=True, check=True
    )
    seconds = round(time.perf_counter() - t0, 1)
    m = _CUT.search(done.stdout + done.stderr)
    return {
        "settings": name,
        "wall_seconds": seconds,
        "ingest_cut": [int(m.group(1)), int(m.group(2))] if m else [0, None],
        **counted(home),
    }


def markdown(result: dict) -> str:
    lines = [
        f"{result['files']} files of {result['repo']}, cold, one run after the other; CPU: {result['cpu']}.",
        "",
        "| settings | prose rows cut | code rows cut | all rows cut | the ingest's count | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        kinds = {k: r.get(k, {"rows": 0, "cut": 0}) for k in ("prose", "code")}
        rows, cut = sum(v["rows"] for v in kinds.values()), sum(v["cut"] for v in kinds.values())
        cells = [f"{v['cut']} of {v['rows']} ({100 * v['cut'] / max(1, v['rows']):.0f}%)" for v in kinds.values()]
        lines.append(
            f"| {r['settings']} | {cells[0]} | {cells[1]} | {cut} of {rows} ({100 * cut / max(1, rows):.1f}%) | "
            f"{r['ingest_cut'][0]} | {r['wall_seconds']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a checkout of encode/httpx (ae1b9f66)")
    ap.add_argument("--out", required=True, help="report path without extension")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    args = ap.parse_args(argv)
    docs = Path(tempfile.mkdtemp(prefix="cut-share-docs-"))
    files = copy_files(args.repo, docs)
    rows = [run_one(name, docs) for name in args.settings.split(",")]
    head = subprocess.run(["git", "-C", str(args.repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    result = {"repo": f"encode/httpx {head.stdout.strip()}", "files": len(files), "cpu": cpu_flags(), "rows": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
