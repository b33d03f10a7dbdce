"""Scaling out: search on an object store against local disk, and documents per hour with one
and two parallel ingest runs.

* ``search``: the product's hybrid search (:func:`situate.resources.store.retrieval.hybrid_search`, dense
  top-150 + BM25 top-150, RRF, top 10; no rerank) over the same 10,000 synthetic rows
  (:mod:`benchmarks.search_scale`: real-shaped vectors, texts cut from the cookbook corpus) in a
  local data folder and in ``s3://`` on SeaweedFS on this machine (:mod:`benchmarks.s3server`).
  Loopback S3 has no network latency: a real bucket adds its round trips (tens of ms each).
* ``docs_per_hour``: the same documents ingested through the Dagster daemon (QueuedRunCoordinator,
  a process per run, ``SITUATE_DOCS_PER_RUN`` documents a run) with ``max_concurrent_runs`` 1 and
  then 2, into fresh data folders on the S3 server, with the real default models; wall time from
  the first run's start to the last run's end.  On 2 cores two runs share the same cores, so the
  second gains little: the gain needs a core or a GPU per run.

Usage::

    python benchmarks/scale_out.py --json benchmarks/reports/scale_out.json [--rows 10000] [--docs 8]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.s3server import seaweedfs  # noqa: E402


def _texts() -> list[str]:
    corpus = REPO / "eval" / "codebase" / "codebase_chunks.json"
    return [d["content"] for d in json.loads(corpus.read_text())]


def search_section(rows: int, work: Path, s3: dict, n_queries: int = 60) -> dict:
    """Search p50 / p95 over ``rows`` synthetic rows (as wide as the configured embedder's
    vectors) on local disk and on ``s3``, ``n_queries`` queries a round, three rounds."""
    from benchmarks.search_scale import build_store, measure, synthetic_rows

    vecs, texts = synthetic_rows(rows, _texts())
    rng = np.random.default_rng(1)
    picks = rng.integers(0, rows, n_queries)
    queries = []
    for i in picks:
        q = vecs[i] + 0.3 * rng.standard_normal(vecs.shape[1]).astype(np.float32)
        queries.append((q / np.linalg.norm(q), " ".join(texts[i].split()[5:12])))
    out = {"rows": rows, "queries": len(queries)}
    stores = {}
    for name, home in (("local", work / "local"), ("s3", f"s3://{s3['bucket']}/bench-{uuid.uuid4().hex[:8]}")):
        t0 = time.perf_counter()
        stores[name] = build_store(home, vecs, texts)
        out[f"{name}_build_s"] = round(time.perf_counter() - t0, 1)
    local, remote = stores["local"], stores["s3"]
    # alternate the two stores three times; the median of each store's three p50s and p95s
    runs: dict[str, list[dict]] = {"local": [], "s3": []}
    for _ in range(3):
        for name, store in (("local", local), ("s3", remote)):
            runs[name].append(measure(store, queries))
    for name, rs in runs.items():
        out[name] = {
            "p50_ms": float(np.median([r["p50_ms"] for r in rs])),
            "p95_ms": float(np.median([r["p95_ms"] for r in rs])),
        }
    out["s3_over_local_p50"] = round(out["s3"]["p50_ms"] / out["local"]["p50_ms"], 2)
    out["s3_over_local_p95"] = round(out["s3"]["p95_ms"] / out["local"]["p95_ms"], 2)
    return out


#: A one-machine instance with several run workers: the queued coordinator starts at most
#: ``runs`` runs at once, each holding a slot of the ``llm`` pool (granularity ``run``).
DAGSTER_YAML = """\
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
concurrency:
  runs:
    max_concurrent_runs: {runs}
  pools:
    granularity: run
    default_limit: {runs}
telemetry:
  enabled: false
"""

PACKAGES = ["bm25s", "tiktoken", "jinja2", "lancedb", "pypdf", "numpy", "pyarrow", "fastapi"]


def _doc(package: str, n: int = 900) -> str:
    body = importlib.metadata.metadata(package).get_payload() or ""
    body = body.strip() or str(importlib.metadata.metadata(package)["Summary"])
    cut = body[:n]
    return f"# {package}\n\n" + (cut[: cut.rfind("\n") + 1] if "\n" in cut else cut)


def ingest_through_daemon(
    work: Path, s3: dict, parallel: int, n_docs: int, per_run: int, timeout_s: float = 3600
) -> dict:
    """Ingest ``n_docs`` documents through ``dagster-daemon`` with ``max_concurrent_runs =
    parallel``; returns the wall time and documents per hour."""
    import dagster as dg

    work.mkdir(parents=True, exist_ok=True)
    docs = work / "docs"
    docs.mkdir(exist_ok=True)
    for p in PACKAGES[:n_docs]:
        (docs / f"{p}.md").write_text(_doc(p))
    home = work / "dagster"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(DAGSTER_YAML.format(runs=parallel))
    uri = f"s3://{s3['bucket']}/docs-per-hour-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        **s3["env"],
        "SITUATE_HOME": uri,
        "SITUATE_DOCS": str(docs),
        "DAGSTER_HOME": str(home),
        "SITUATE_DOCS_PER_RUN": str(per_run),
        "SITUATE_CACHE": str(work / "cache"),
        "PYTHONPATH": str(REPO),
    }
    os.environ.update(s3["env"])
    from situate.pipelines.preflight import check_data_folder

    check_data_folder(uri)
    with dagster_daemon(home, env, work / "daemon.log") as instance:
        expected = -(-n_docs // per_run)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name="ingest"))
            if len(runs) >= expected and all(r.is_finished for r in runs):
                break
            time.sleep(2)
        else:
            raise RuntimeError(f"ingest runs did not finish within {timeout_s} s")
        stats = [instance.get_run_stats(r.run_id) for r in runs]
        start = min(s.start_time for s in stats)
        end = max(s.end_time for s in stats)
        statuses = sorted(r.status.value for r in runs)
        # how many ran at the same time at most
        spans = sorted((s.start_time, s.end_time) for s in stats)
        overlap = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
        calls = sum(blurb_model_calls(instance, r.run_id) for r in runs)
        if calls < n_docs:  # a document failed inside a successful run: the timing would mean nothing
            raise RuntimeError(f"{calls} blurbs made by the model for {n_docs} documents: see {home}")
        return {
            "parallel_runs": parallel,
            "documents": n_docs,
            "docs_per_run": per_run,
            "runs": len(runs),
            "llm_calls": calls,
            "statuses": statuses,
            "most_at_once": overlap,
            "wall_s": round(end - start, 1),
            "docs_per_hour": round(n_docs / (end - start) * 3600, 1),
        }


def blurb_model_calls(instance, run_id: str) -> int:
    """LLM calls the ``blurbs`` asset made in a run, from its materialisation's own metadata
    (``model_calls`` for a one-document run, else ``model_calls_total``): every context mode
    counts, the document mode's one summary a document included (it logs no line a blurb)."""
    import dagster as dg

    calls = 0
    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        mat = e.asset_materialization
        if mat is not None and mat.asset_key == dg.AssetKey("blurbs"):
            value = mat.metadata.get("model_calls_total", mat.metadata.get("model_calls"))
            calls += int(getattr(value, "value", value) or 0)
    return calls


@contextlib.contextmanager
def dagster_daemon(dagster_home: Path, env: dict, log_path: Path) -> Iterator:
    """Run ``dagster-daemon run`` on the repository's workspace with ``env`` (its own process
    group), yielding the instance at ``dagster_home`` (created first, so the daemon and this
    process never race to create its storage); the daemon is stopped at the end."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(dagster_home))
    log = open(log_path, "w")
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield instance
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()


def docs_per_hour_section(work: Path, s3: dict, n_docs: int, parallel: bool = True) -> dict:
    """Documents an hour through the daemon, one run at a time and (``parallel``) two at once."""
    per_run = max(1, n_docs // 2)
    one = ingest_through_daemon(work / "one", s3, 1, n_docs, per_run)
    if not parallel:  # a smoke run: parallel runs are tests/test_parallel_runs.py's
        return {"one_run_at_a_time": one, "cpu_count": os.cpu_count()}
    two = ingest_through_daemon(work / "two", s3, 2, n_docs, per_run)
    return {
        "one_run_at_a_time": one,
        "two_parallel_runs": two,
        "speed_up": round(two["docs_per_hour"] / one["docs_per_hour"], 2),
        "cpu_count": os.cpu_count(),
    }


def markdown(report: dict) -> str:
    lines = ["# Scaling out", "", f"`{report['command']}` on {report['cpu_count']} cores, {report['date']}.", ""]
    s = report.get("search")
    if s:
        lines += [
            f"## Search over {s['rows']:,} rows: object store (SeaweedFS on loopback) against local disk",
            "",
            "| data folder | p50 ms | p95 ms | build s |",
            "|---|---|---|---|",
            f"| local disk | {s['local']['p50_ms']} | {s['local']['p95_ms']} | {s['local_build_s']} |",
            f"| s3:// (SeaweedFS, loopback) | {s['s3']['p50_ms']} | {s['s3']['p95_ms']} | {s['s3_build_s']} |",
            "",
            f"S3 / local: p50 ×{s['s3_over_local_p50']}, p95 ×{s['s3_over_local_p95']} "
            f"({s['queries']} queries, median of 3 alternating rounds).",
            "",
        ]
    d = report.get("docs_per_hour")
    if d:
        lines += [
            "## Documents per hour through the Dagster daemon (data folder on S3)",
            "",
            "| max_concurrent_runs | runs | most at once | LLM calls | wall s | documents / hour |",
            "|---|---|---|---|---|---|",
        ]
        for key in ("one_run_at_a_time", "two_parallel_runs"):
            r = d.get(key)
            if r:
                lines.append(
                    f"| {r['parallel_runs']} | {r['runs']} × {r['docs_per_run']} docs | {r['most_at_once']} | "
                    f"{r.get('llm_calls', '')} | {r['wall_s']} | {r['docs_per_hour']} |"
                )
        if "speed_up" in d:
            lines += ["", f"Two parallel runs: ×{d['speed_up']} the documents per hour on {d['cpu_count']} cores.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--docs", type=int, default=8, help="documents for docs_per_hour (at most 8)")
    ap.add_argument("--only", default="search,docs_per_hour")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    report = {
        "command": "python benchmarks/scale_out.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpu_count": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    from situate.pipelines.operations import prepare_env

    with tempfile.TemporaryDirectory(prefix="situate-scale-") as tmp:
        work = Path(tmp)
        os.environ["SITUATE_CACHE"] = str(work / "cache")
        with seaweedfs(work / "s3") as s3:
            os.environ.update(s3["env"])
            prepare_env(str(work / "local"))
            if "search" in only:
                report["search"] = search_section(args.rows, work, s3)
                print(json.dumps(report["search"]), flush=True)
            if "docs_per_hour" in only:
                report["docs_per_hour"] = docs_per_hour_section(work, s3, min(args.docs, len(PACKAGES)))
                print(json.dumps(report["docs_per_hour"]), flush=True)
    if Path(args.json).exists():  # a run of one section keeps the other's figures
        earlier = json.loads(Path(args.json).read_text())
        report = {**{k: v for k, v in earlier.items() if k in ("search", "docs_per_hour")}, **report}
    Path(args.json).write_text(json.dumps(report, indent=2))
    Path(args.json).with_suffix(".md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
