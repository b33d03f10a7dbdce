"""A real large repository: the Python standard library installed on this machine, ingested cold.

The files are a fixed list (``benchmarks/stdlib-files.txt``: every ``.py`` file of the standard
library of CPython 3.11 without its test suites, IDLE, lib2to3, tkinter, turtledemo, ensurepip,
venv and pydoc_data), copied into a docs folder, and each ingest starts from an empty data folder
(no blurb cache, no embedding cache, no Dagster instance: cold) with the default settings.
Reported: wall time, chunks, LLM calls, prompt tokens evaluated, per-stage seconds (the ingest's
own ``--json`` summary), peak memory (the ingest process's maximum resident set, ``wait4``), and
what ``situate ingest --estimate`` predicted beforehand.

Today's default before the per-kind policy (``SITUATE_CODE_CONTEXT=document``: an LLM summary for
every document) takes hours over these files, so it is measured on a sample (every
``--sample-every``-th file of the list) together with the new default on the same sample, in the
same run: the ratio of the two is the speed-up, and today's whole-library time is extrapolated by
the sample's share of the prompt tokens the estimate counts.

    python -m benchmarks.stdlib --out benchmarks/reports/stdlib          # the whole list and the sample
    python -m benchmarks.stdlib --sample-only --out /tmp/stdlib-sample    # the sample alone (minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "benchmarks" / "stdlib-files.txt"
SITUATE = [sys.executable, "-m", "situate.pipelines.cli"]


def stdlib_files(list_file: Path = FILES) -> tuple[Path, list[str], list[str]]:
    """``(stdlib root, files of the list found there, files missing)``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    names = [n.strip() for n in list_file.read_text().splitlines() if n.strip() and not n.startswith("#")]
    return root, [n for n in names if (root / n).is_file()], [n for n in names if not (root / n).is_file()]


def copy_files(root: Path, names: list[str], dest: Path) -> int:
    """Copy ``names`` (relative to ``root``) under ``dest``; returns the bytes copied."""
    total = 0
    for n in names:
        target = dest / n
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / n, target)
        total += target.stat().st_size
    return total


def run_measured(args: list[str], env: dict, log: Path) -> tuple[int, float, float]:
    """Run ``args``; returns ``(exit status, wall seconds, peak resident MB)`` (``wait4``'s
    ``ru_maxrss`` of the process and the children it waited for)."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - t0, usage.ru_maxrss / 1024


def ingest(docs: Path, work: Path, name: str, extra_env: dict | None = None) -> dict:
    """One cold ingest of ``docs`` (a fresh data folder) with its estimate first."""
    home = work / f"home-{name}"
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, **(extra_env or {})}
    for var in ("SITUATE_HOME", "DAGSTER_HOME", "SITUATE_DOCS"):
        env.pop(var, None)
    est_json, sum_json = work / f"{name}-estimate.json", work / f"{name}-summary.json"
    rc_e, est_s, _ = run_measured(
        [*SITUATE, "ingest", str(docs), "--estimate", "--json", str(est_json)], env, work / f"{name}-estimate.log"
    )
    rc, wall, peak_mb = run_measured(
        [*SITUATE, "ingest", str(docs), "--home", str(home), "--json", str(sum_json)], env, work / f"{name}.log"
    )
    summary = json.loads(sum_json.read_text()) if sum_json.exists() else {}
    est = json.loads(est_json.read_text()) if est_json.exists() else {}
    summary.pop("per_document", None)
    return {
        "name": name,
        "settings": extra_env or {},
        "exit_status": rc,
        "wall_seconds": round(wall, 1),
        "peak_memory_mb": round(peak_mb),
        "embedder_seconds": embedder_seconds(home),
        "estimate": {"exit_status": rc_e, "seconds": round(est_s, 1), **est},
        "summary": summary,
    }


def embedder_seconds(home: Path) -> float:
    """Seconds inside the embedder over the ingest: the ``embed_seconds`` of every document's
    entry in the ``embeddings`` stage's run files (``runs/<run id>/embeddings.json``)."""
    total = 0.0
    for f in home.glob("runs/*/embeddings.json"):
        total += sum(v.get("embed_seconds", 0.0) for v in json.loads(f.read_text())["ok"].values())
    return round(total, 1)


def row(r: dict) -> str:
    s, e = r["summary"], r["estimate"]
    stages = "; ".join(f"{k} {v['seconds']:.0f}" for k, v in s.get("stages", {}).items())
    predicted = e.get("wall_seconds")
    ratio = f"{r['wall_seconds'] / predicted:.2f}" if predicted else "n/a"
    return (
        f"| {r['name']} | {s.get('documents', 0)} | {s.get('chunks', 0):,} | {s.get('model_calls', 0)} "
        f"| {s.get('prompt_tokens_evaluated', 0):,} | {r['wall_seconds'] / 60:.1f} "
        f"| {(predicted or 0) / 60:.1f} "
        f"({ratio}) | {r['peak_memory_mb']:,} | {s.get('start_seconds', 0):.0f}; {stages} "
        f"| {r.get('embedder_seconds', 0):.0f} |"
    )


def markdown(report: dict) -> str:
    lines = [
        f"Python {report['python']} standard library, {report['files']} files ({report['bytes'] / 1e6:.1f} MB), "
        f"{report['cpus']} cores, {report['date']}; each ingest cold (empty data folder).",
        "",
        "| ingest | documents | chunks | LLM calls | prompt tokens evaluated | wall min | estimate min "
        "(measured / estimated) | peak MB | seconds: start; per stage | embedder's own seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r) for r in report["runs"]]
    for name, f in report.get("bounds", {}).items():
        lines.append(
            f"\n{name}: {f['measured_tokens_per_s']:,} tokens/s measured, {f['fraction']:.1%} of the bound of "
            f"{f['bound_tokens_per_s']:,} tokens/s on these cores ({f['what']}; `benchmarks/bounds.py`)."
        )
    if "today_extrapolated_minutes" in report:
        lines += [
            "",
            f"Today's default (an LLM summary for every document) against the new default on the same "
            f"{report['sample_files']} files: {report['sample_ratio']:.1f}x the wall time; extrapolated to the "
            f"whole list by the prompt tokens the estimate counts: {report['today_extrapolated_minutes']:.0f} min.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="report path without extension (.json and .md)")
    ap.add_argument("--sample-every", type=int, default=20, help="the sample: every Nth file of the list")
    ap.add_argument("--sample-only", action="store_true", help="measure the sample alone")
    ap.add_argument("--work", help="working folder (default a new temporary one)")
    args = ap.parse_args(argv)
    root, names, missing = stdlib_files()
    work = Path(args.work or tempfile.mkdtemp(prefix="situate-stdlib-"))
    full, sample = work / "stdlib", work / "stdlib-sample"
    for d in (full, sample):
        shutil.rmtree(d, ignore_errors=True)
    size = copy_files(root, names, full)
    picked = names[:: args.sample_every]
    copy_files(root, picked, sample)
    report = {
        "python": sys.version.split()[0],
        "files": len(names),
        "missing": missing,
        "bytes": size,
        "sample_files": len(picked),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "runs": [],
    }
    print(f"stdlib: {len(names)} files ({size / 1e6:.1f} MB), sample {len(picked)}; work {work}", flush=True)
    runs = []
    if not args.sample_only:
        runs.append(ingest(full, work, "whole list, default"))
        print(row(runs[-1]), flush=True)
    runs.append(ingest(sample, work, "sample, default"))
    print(row(runs[-1]), flush=True)
    runs.append(ingest(sample, work, "sample, today's default", {"SITUATE_CODE_CONTEXT": "document"}))
    print(row(runs[-1]), flush=True)
    report["runs"] = runs
    report["bounds"] = model_bounds(runs)
    new, today = runs[-2], runs[-1]
    report["sample_ratio"] = today["wall_seconds"] / max(new["wall_seconds"], 1e-9)
    if not args.sample_only:
        # today's default over the whole list: the new default's time plus the LLM's, scaled from
        # the sample by the prompt tokens each would send to the model
        share = (today["estimate"].get("prompt_written") or 0) / max(1, _today_tokens(work, full))
        llm_s = today["wall_seconds"] - new["wall_seconds"]
        report["today_extrapolated_minutes"] = (runs[0]["wall_seconds"] + llm_s / max(share, 1e-9)) / 60
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    Path(args.out + ".md").write_text(markdown(report))
    print(markdown(report))
    return 0


def model_bounds(runs: list[dict]) -> dict:
    """Each model's rate as the estimates measured it (the embedder on the folder's first chunks,
    the LLM's prefill on a prompt of a request's mean length), against its bound
    (:mod:`benchmarks.bounds`)."""
    from benchmarks.bounds import fraction

    out = {}
    for r in runs:
        rates, est = r["estimate"].get("rates", {}), r["estimate"]
        if rates.get("embed_tokens_per_s") and "embedder (bge-small-en-v1.5)" not in out:
            f = fraction("bge-small-en-v1.5", rates["embed_tokens_per_s"], 512)
            out["embedder (bge-small-en-v1.5)"] = f | {"what": "8-bit ops at a context of 512"}
        if rates.get("prefill_tokens_per_s"):
            n = max(16, min(2048, est["prompt_written"] // max(1, est["requests"])))
            f = fraction("qwen2.5-coder-0.5b", rates["prefill_tokens_per_s"], n)
            out["LLM prefill (qwen2.5-coder-0.5b)"] = f | {"what": f"8-bit ops at a context of {n}"}
    return out


def _today_tokens(work: Path, docs: Path) -> int:
    """Prompt tokens today's default would evaluate over ``docs`` (``--estimate`` with
    ``SITUATE_CODE_CONTEXT=document``)."""
    out = work / "today-whole-estimate.json"
    env = {**os.environ, "SITUATE_CODE_CONTEXT": "document"}
    run_measured(
        [*SITUATE, "ingest", str(docs), "--estimate", "--json", str(out)], env, work / "today-whole-estimate.log"
    )
    return json.loads(out.read_text()).get("prompt_written", 0) if out.exists() else 0


if __name__ == "__main__":
    raise SystemExit(main())
