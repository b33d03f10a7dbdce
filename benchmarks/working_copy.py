"""A real project's working copy after a day's work, ingested cold with the default settings.

The case of issue 60: a checkout of a project no one here wrote (pallets/click), with a virtualenv,
a coverage run's HTML report and a built wheel inside, all of which its ``.gitignore`` lists.
``--prepare`` makes that state in a clean checkout (a ``.venv`` with the project, pytest and
coverage installed from the package index; ``coverage run -m pytest``; ``coverage html``; ``pip
wheel`` into ``dist/``).  The run then times ``situate ingest`` of the checkout (a fresh data
folder), reads its exit status and summary, and checks every indexed source against ``git status
--ignored``: no indexed file may be one git calls ignored.

Usage::

    git clone https://github.com/pallets/click /tmp/click      # or any git working copy
    python -m benchmarks.working_copy --prepare /tmp/click
    python -m benchmarks.working_copy /tmp/click --out benchmarks/reports/working-copy-click

Writes ``OUT.json`` and ``OUT.md``, with the CPU's flags (speeds differ between AVX2, AVX-512 and
AMX machines).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITUATE = ROOT / ".venv" / "bin" / "situate"


def cpu_flags() -> str:
    """The vector extensions this CPU reports (``/proc/cpuinfo``), and its model name."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    wanted = [f for f in ("avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8") if f in flags]
    return f"{model}; {' '.join(wanted) or 'no AVX2'}"


def prepare(repo: Path) -> None:
    """A day's work in ``repo``: a virtualenv, a coverage report and a built wheel (each ignored by
    the project's own ``.gitignore``)."""
    py = repo / ".venv" / "bin" / "python"
    steps = [
        [sys.executable, "-m", "venv", ".venv"],
        [str(py), "-m", "pip", "install", "-q", "-e", ".", "pytest", "coverage"],
        [str(py), "-m", "coverage", "run", "-m", "pytest", "-q", "tests"],
        [str(py), "-m", "coverage", "html"],
        [str(py), "-m", "pip", "wheel", "-q", "--no-deps", "-w", "dist", "."],
    ]
    for cmd in steps:
        subprocess.run(cmd, cwd=repo, check=cmd[2:4] != ["coverage", "run"])


def ignored_by_git(repo: Path) -> list[str]:
    """Paths ``git status --ignored`` calls ignored (a folder ends with ``/``)."""
    out = subprocess.run(
        ["git", "status", "--ignored", "--porcelain", "-z"], cwd=repo, capture_output=True, check=True
    ).stdout.decode("utf-8", "surrogateescape")
    return [e[3:] for e in out.split("\0") if e.startswith("!! ")]


def indexed_sources(home: Path) -> list[str]:
    """The sources of the table's rows in data folder ``home``."""
    from situate.resources.store.store import Store

    return sorted({r["source"] for r in Store(home=str(home)).columns(["source"]).to_pylist()})


def run(repo: Path) -> dict:
    """Ingest ``repo`` cold into a fresh data folder; the figures and the check against git."""
    home = Path(tempfile.mkdtemp(prefix="situate-working-copy-"))
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(SITUATE), "ingest", str(repo), "--home", str(home), "--json", str(home / "summary.json")],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    summary = json.loads((home / "summary.json").read_text()) if (home / "summary.json").exists() else {}
    ignored = ignored_by_git(repo)
    sources = indexed_sources(home)
    wrongly = [s for s in sources if any(s == p or (p.endswith("/") and s.startswith(p)) for p in ignored)]
    lines = [x for x in done.stdout.splitlines() if x.startswith("situate: ")]
    return {
        "repository": str(repo),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip(),
        "cpu": cpu_flags(),
        "exit_status": done.returncode,
        "wall_seconds": round(wall, 1),
        "documents": summary.get("documents"),
        "failed": summary.get("failed", {}),
        "skipped": summary.get("skipped", {}),
        "llm_calls": summary.get("model_calls"),
        "llm_seconds": round(summary.get("llm_seconds", 0.0), 1),
        "chunks": summary.get("chunks"),
        "indexed_sources": len(sources),
        "ignored_by_git": ignored,
        "indexed_but_ignored": wrongly,
        "summary_lines": lines[-12:],
    }


def markdown(r: dict) -> str:
    """The report as a page."""
    out = [
        f"# A working copy ingested cold: {Path(r['repository']).name} at {r['commit'][:12]}",
        "",
        f"CPU: {r['cpu']}. Command: `python -m benchmarks.working_copy {r['repository']}` (default settings).",
        "",
        "| exit status | wall time | documents | indexed sources | LLM calls | LLM seconds | chunks |",
        "|---|---|---|---|---|---|---|",
        f"| {r['exit_status']} | {r['wall_seconds']} s | {r['documents']} | {r['indexed_sources']} | "
        f"{r['llm_calls']} | {r['llm_seconds']} | {r['chunks']} |",
        "",
        f"`git status --ignored` lists {len(r['ignored_by_git'])} paths ({', '.join(r['ignored_by_git'][:8])}); "
        f"indexed files among them: {len(r['indexed_but_ignored'])}.",
        "",
        "The summary's last lines:",
        "",
        "```text",
        *r["summary_lines"],
        "```",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("repo", type=Path)
    p.add_argument("--prepare", action="store_true", help="make the day's work in REPO (venv, coverage, wheel)")
    p.add_argument("--out", type=Path, help="report path without extension")
    args = p.parse_args(argv)
    if args.prepare:
        prepare(args.repo.resolve())
        return 0
    report = run(args.repo.resolve())
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0 if report["exit_status"] == 0 and not report["indexed_but_ignored"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
