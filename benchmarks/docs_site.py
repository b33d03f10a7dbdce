"""A real docs site with its source, ingested cold: today's default against the reading it replaced,
in one run, with the estimate made before each ingest.

The case of issue 61: httpx's documentation and source (encode/httpx at ae1b9f66: its
``docs/**/*.md`` and ``httpx/**/*.py``, 46 files, 23 of them prose pages), copied into a fresh
folder, then for each setting, one after the other on the same machine:

1. ``situate ingest DIR --estimate`` (the wall time predicted before the ingest: rates measured at
   start-up, :func:`situate.pipelines.estimate.predict_wall`);
2. ``situate ingest DIR`` into a fresh data folder (cold: no cache, no blurb file), timed.

Settings compared (``--settings``): ``default`` (the settings as shipped) and ``head-2048`` (the
summary of a prose page from its first 2,048 tokens within 80 generated tokens, the default
before issue 61: ``SITUATE_DOCUMENT_TOKENS=2048 SITUATE_SUMMARY_TOKENS=80``).  Each row: wall seconds, LLM
seconds and calls, prompt tokens a page, the estimate and its error, and the wall time a prose page
against ``head-2048`` in the same run.

Usage::

    git clone https://github.com/encode/httpx /tmp/httpx && git -C /tmp/httpx checkout ae1b9f66
    python -m benchmarks.docs_site /tmp/httpx --out benchmarks/reports/docs-site-httpx   # about 8 min

Writes ``OUT.json`` and ``OUT.md``, with the CPU's flags (speeds differ between AVX2, AVX-512 and
AMX machines).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.bounds import fraction
from benchmarks.working_copy import SITUATE, cpu_flags

#: What is copied from the checkout: httpx's docs pages and its package's source (46 files at
#: ae1b9f66, the set issue 61 measured).
PATTERNS = ("docs/**/*.md", "httpx/**/*.py")
#: name -> the settings of its runs (on top of a clean environment: no SITUATE_* variable).
SETTINGS = {
    "default": {},
    "head-2048": {"SITUATE_DOCUMENT_TOKENS": "2048", "SITUATE_SUMMARY_TOKENS": "80"},
}


def copy_files(repo: Path, dest: Path) -> list[str]:
    """Copy the files of :data:`PATTERNS` from ``repo`` to ``dest`` (same relative paths)."""
    paths = sorted({p for pat in PATTERNS for p in repo.glob(pat) if p.is_file()})
    for p in paths:
        out = dest / p.relative_to(repo)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, out)
    return [str(p.relative_to(repo)) for p in paths]


def _situate(args: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    done = subprocess.run([str(SITUATE), *args], capture_output=True, text=True, env=env)
    return done, time.perf_counter() - t0


def run_one(name: str, docs: Path) -> dict:
    """The estimate, then a cold ingest of ``docs`` with setting ``name``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SITUATE_")} | SETTINGS[name]
    home = Path(tempfile.mkdtemp(prefix=f"situate-docs-site-{name}-"))
    est_json = home.parent / f"{home.name}-estimate.json"
    est, est_wall = _situate(["ingest", str(docs), "--home", str(home), "--estimate", "--json", str(est_json)], env)
    predicted = json.loads(est_json.read_text()) if est_json.exists() else {}
    done, wall = _situate(["ingest", str(docs), "--home", str(home), "--json", str(home / "summary.json")], env)
    s = json.loads((home / "summary.json").read_text()) if (home / "summary.json").exists() else {}
    calls = s.get("model_calls") or 0
    row = {
        "settings": name,
        "environment": SETTINGS[name],
        "exit_status": done.returncode,
        "wall_seconds": round(wall, 1),
        "documents": s.get("documents"),
        "chunks": s.get("chunks"),
        "llm_calls": calls,
        "llm_seconds": round(s.get("llm_seconds", 0.0), 1),
        "prompt_tokens_a_call": round(s.get("prompt_tokens_evaluated", 0) / calls) if calls else 0,
        "generated_tokens_a_call": round(s.get("generated_tokens", 0) / calls, 1) if calls else 0,
        "estimate_seconds": predicted.get("wall_seconds"),
        "estimate_took_seconds": round(est_wall, 1),
        "estimate_rates": predicted.get("rates", {}),
        "estimate_error": (round(predicted["wall_seconds"] / wall - 1, 3) if predicted.get("wall_seconds") else None),
        "estimate_stderr_tail": est.stderr[-600:] if est.returncode else "",
        "stderr_tail": done.stderr[-600:] if done.returncode else "",
    }
    rates = row["estimate_rates"]
    if rates.get("embed_tokens_per_s"):
        row["embedder_against_bound"] = fraction("bge-small-en-v1.5", rates["embed_tokens_per_s"], 512)
    if rates.get("prefill_tokens_per_s"):
        context = row["prompt_tokens_a_call"] or 256
        row["llm_prefill_against_bound"] = fraction("qwen2.5-coder-0.5b", rates["prefill_tokens_per_s"], context)
    shutil.rmtree(home, ignore_errors=True)
    return row


def markdown(r: dict) -> str:
    """The report as a page."""
    base = next((x for x in r["rows"] if x["settings"] == "head-2048"), None)
    out = [
        f"# A docs site and its source, cold: {r['name']} ({r['files']} files, {r['prose_pages']} prose pages)",
        "",
        f"CPU: {r['cpu']}; {r['cores']} cores. Command: `python -m benchmarks.docs_site {r['repository']}`.",
        "",
        "| settings | exit | wall s | LLM calls | LLM s | prompt tokens a call | generated a call | "
        "estimate s | estimate error | wall against head-2048 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r["rows"]:
        ratio = f"{x['wall_seconds'] / base['wall_seconds']:.2f}x" if base else "–"
        err = f"{x['estimate_error']:+.0%}" if x["estimate_error"] is not None else "–"
        out.append(
            f"| {x['settings']} | {x['exit_status']} | {x['wall_seconds']} | {x['llm_calls']} | {x['llm_seconds']} | "
            f"{x['prompt_tokens_a_call']:,} | {x['generated_tokens_a_call']} | {x['estimate_seconds']} | "
            f"{err} | {ratio} |"
        )
    out += [
        "",
        "Rates the estimate measured at start-up, and each model against its bound on these cores",
        "(`benchmarks/bounds.py`: 2 operations a weight a token plus attention, at the cores' 8-bit",
        "multiply-adds a cycle and clock; the LLM's at the run's prompt tokens a call):",
        "",
    ]
    for x in r["rows"]:
        parts = [f"{x['settings']}: {json.dumps(x['estimate_rates'])}"]
        for key, label in (("embedder_against_bound", "embedder"), ("llm_prefill_against_bound", "LLM prefill")):
            if key in x:
                b = x[key]
                got, most = b["measured_tokens_per_s"], b["bound_tokens_per_s"]
                parts.append(f"{label} {got:,} of {most:,} tokens/s ({b['fraction']:.1%})")
        out.append("- " + "; ".join(parts))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("repo", type=Path, help="a checkout of encode/httpx (or a project of the same layout)")
    p.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names of SETTINGS, run in order")
    p.add_argument("--out", type=Path, help="report path without extension")
    args = p.parse_args(argv)
    repo = args.repo.resolve()
    docs = Path(tempfile.mkdtemp(prefix="situate-docs-site-")) / repo.name
    files = copy_files(repo, docs)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    report = {
        "name": f"{repo.name} at {commit[:8]}",
        "repository": str(repo),
        "commit": commit,
        "cpu": cpu_flags(),
        "cores": os.cpu_count(),
        "files": len(files),
        "prose_pages": sum(f.endswith(".md") for f in files),
        "rows": [run_one(name, docs) for name in args.settings.split(",")],
    }
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0 if all(x["exit_status"] == 0 for x in report["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
