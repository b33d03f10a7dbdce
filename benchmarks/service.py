"""The search service's latency and throughput: ``situate serve`` as a real process, asked over HTTP.

Two data folders: one of real rows (``--home``: an ingested folder, e.g. the codebase set's 737
rows after ``situate eval``) and one of 100,000 synthetic rows with real shapes, as wide as the
configured embedder's vectors (:func:`benchmarks.search_scale.build_store`, with the IVF_FLAT
index the bm25_index asset builds from 10,000 rows).  For each: p50/p95 of ``GET /search`` first-stage (no
rerank) and reranked
(``rerank=30``), one client; then requests/s of first-stage search with 4 concurrent clients.
Queries are the codebase set's developer queries.

    python benchmarks/service.py --home /path/to/ingested --work /tmp/svc --json OUT.json --markdown OUT.md
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
QUERIES = REPO / "eval" / "codebase" / "queries_dev.jsonl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(home: Path) -> tuple[subprocess.Popen, str]:
    """Start ``situate serve`` over ``home``; returns the process and its base URL once /health answers."""
    port = _free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "situate.pipelines.cli", "serve", "--port", str(port), "--home", str(home)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ | {"SITUATE_VECTOR_INDEX_MIN_ROWS": "10000"},
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(base + "/health", timeout=5).read()
            return child, base
        except OSError:
            time.sleep(0.5)
    child.kill()
    raise RuntimeError("situate serve did not start")


def ask(base: str, q: str, k: int = 10, rerank: int = 0) -> float:
    """Seconds one ``GET /search`` takes, end to end."""
    url = f"{base}/search?" + urllib.parse.urlencode({"q": q, "k": k, "rerank": rerank})
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as r:
        r.read()
        assert r.status == 200
    return time.perf_counter() - t0


def latency(base: str, queries: list[str], rerank: int) -> dict:
    ask(base, queries[0], rerank=rerank)  # warm-up: models loaded, caches filled
    times = [ask(base, q, rerank=rerank) * 1000 for q in queries]
    return {
        "p50_ms": round(float(np.percentile(times, 50)), 1),
        "p95_ms": round(float(np.percentile(times, 95)), 1),
        "queries": len(times),
    }


def throughput(base: str, queries: list[str], clients: int = 4, per_client: int = 25) -> dict:
    done = []

    def client(i: int) -> None:
        for j in range(per_client):
            ask(base, queries[(i * per_client + j) % len(queries)])
            done.append(1)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    return {
        "clients": clients,
        "requests": len(done),
        "seconds": round(seconds, 2),
        "requests_per_s": round(len(done) / seconds, 2),
    }


def measure_home(
    home: Path, queries: list[str], n_latency: int, n_rerank: int, clients: int = 4, per_client: int = 25
) -> dict:
    """``situate serve`` over ``home``: first-stage latency over ``n_latency`` queries, reranked
    (30 candidates) over ``n_rerank``, and requests/s of ``clients`` concurrent clients asking
    ``per_client`` queries each.

    Raises
    ------
    RuntimeError
        The service did not start.
    urllib.error.HTTPError
        A search was not answered 200 (a data folder whose vectors are not the embedder's width
        gets 503).
    """
    child, base = serve(home)
    try:
        health = json.loads(urllib.request.urlopen(base + "/health", timeout=60).read())
        return {
            "rows": health["table_rows"],
            "first_stage": latency(base, queries[:n_latency], 0),
            "reranked_30": latency(base, queries[:n_rerank], 30),
            "concurrent": throughput(base, queries, clients, per_client),
        }
    finally:
        child.terminate()
        child.wait(60)


def synthetic_home(work: Path, n: int) -> Path:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from search_scale import build_store, synthetic_rows

    root = work / f"synthetic-{n}"
    if (root / "lancedb").exists():
        return root
    corpus = json.loads((REPO / "eval" / "codebase" / "codebase_chunks.json").read_text())
    texts = [c["content"] for d in corpus for c in d["chunks"]]
    vecs, rows = synthetic_rows(n, texts)
    store = build_store(root, vecs, rows)
    (root / ".situate-data").write_text("")
    store.ensure_vector_index(10_000)
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", required=True, help="an ingested data folder (real rows)")
    ap.add_argument("--work", default="/tmp/situate-service-bench", help="folder for the synthetic store (kept)")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--json", required=True)
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    queries = [json.loads(line)["query"] for line in QUERIES.read_text().splitlines() if line.strip()]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    report = {"real": measure_home(Path(args.home), queries, 50, 20)}
    report["synthetic"] = measure_home(synthetic_home(work, args.rows), queries, 50, 20)
    report["cpu_count"] = os.cpu_count()
    Path(args.json).write_text(json.dumps(report, indent=2))
    lines = [
        "# Search service: latency and throughput",
        "",
        f"`python benchmarks/service.py --home … --json …` on {os.cpu_count()} CPU cores: `situate serve` as a "
        "process, `GET /search` over loopback HTTP, k = 10, the codebase set's developer queries.",
        "",
        "| rows | first stage p50 / p95 (ms) | rerank 30 p50 / p95 (ms) | 4 clients: requests/s |",
        "|---|---|---|---|",
    ]
    for name in ("real", "synthetic"):
        r = report[name]
        lines.append(
            f"| {r['rows']:,} ({name}) | {r['first_stage']['p50_ms']} / {r['first_stage']['p95_ms']} | "
            f"{r['reranked_30']['p50_ms']} / {r['reranked_30']['p95_ms']} | "
            f"{r['concurrent']['requests_per_s']} |"
        )
    lines += [
        "",
        "One search at a time holds the query embedder (one model session): 4 clients share it, so "
        "requests/s is about 1000 / p50, not 4×.",
    ]
    md = "\n".join(lines) + "\n"
    if args.markdown:
        Path(args.markdown).write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
