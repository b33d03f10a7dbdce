"""Three ingest runs in parallel through the Dagster daemon (QueuedRunCoordinator, the default
run launcher: a process per run) over disjoint documents, on a data folder on a real
S3-compatible server (SeaweedFS), with the real default models; then a run worker killed with
``kill -9`` mid-run, resumed by the next sync without writing a blurb twice.

The documents are real text not written for this project (the start of installed packages' own
files); the settings are the end-to-end tests' small ones.
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import time
import uuid

import pytest
from conftest import REPO, needs_models, small_settings

pytestmark = [needs_models, pytest.mark.models]

PACKAGES = ["bm25s", "tiktoken", "jinja2", "lancedb", "pypdf", "numpy"]


def _text(package: str, n: int = 700) -> str:
    body = importlib.metadata.metadata(package).get_payload() or importlib.metadata.metadata(package)["Summary"]
    body = body.strip() or str(importlib.metadata.metadata(package)["Summary"])
    cut = body[:n]
    return cut[: cut.rfind("\n") + 1] if "\n" in cut else cut


def _wait(predicate, timeout: float, what: str, step: float = 2.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _range_keys(instance, run) -> list[str]:
    """The documents of an ingest run (its partition range, in the registered order)."""
    from situate.assets.partitions import PARTITIONS

    order = instance.get_dynamic_partitions(PARTITIONS)
    first, last = run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]
    return order[order.index(first) : order.index(last) + 1]


def _made_by_model(message: str | None) -> bool:
    """A ``blurbs`` progress line of a blurb the model generated (not one from the cache)."""
    return bool(message) and message.startswith("blurbs ") and "prompt tokens evaluated" in message


def store_keys(store) -> list[str]:
    return sorted({r["document_key"] for r in store.columns(["document_key"]).to_pylist()})


def test_three_parallel_runs_and_a_killed_worker(s3_server, tmp_path):
    import dagster as dg

    docs = tmp_path / "docs"
    docs.mkdir()
    for p in PACKAGES:
        (docs / f"{p}.md").write_text(f"# {p}\n\n" + _text(p))
    dagster_home = tmp_path / "dagster"
    dagster_home.mkdir()
    from benchmarks.scale_out import DAGSTER_YAML

    # one machine, several run workers: at most 3 runs at once, each holding a slot of the pool
    (dagster_home / "dagster.yaml").write_text(DAGSTER_YAML.format(runs=3))
    uri = f"s3://{s3_server['bucket']}/parallel-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        **small_settings(docs, tmp_path / "unused"),
        **s3_server["env"],
        "SITUATE_HOME": uri,
        "SITUATE_DOCS": str(docs),
        "DAGSTER_HOME": str(dagster_home),
        "SITUATE_DOCS_PER_RUN": "2",
        "SITUATE_CACHE": str(tmp_path / "cache"),
        "SITUATE_LEASE_STALE_S": "12",  # renewed every 2 s (a sixth), so a live worker keeps it
        "SITUATE_SYNC_INTERVAL_S": "5",  # the sensor looks every 5 s (60 by default; Dagster's least)
        "PYTHONPATH": str(REPO),
    }
    from situate.pipelines.preflight import check_data_folder

    os.environ.update(s3_server["env"])
    check_data_folder(uri)  # the marker, as `situate ingest` writes it
    from benchmarks.scale_out import dagster_daemon

    with dagster_daemon(dagster_home, env, tmp_path / "daemon.log") as instance:

        def ingest_runs():
            return instance.get_runs(filters=dg.RunsFilter(job_name="ingest"))

        # the sensor registers the 6 documents and asks for 3 runs of 2; the daemon starts them
        _wait(lambda: len(ingest_runs()) >= 3, 240, "the sensor's 3 ingest runs")
        runs = ingest_runs()
        assert len(runs) == 3
        ranges = sorted(
            (r.tags.get("dagster/asset_partition_range_start"), r.tags.get("dagster/asset_partition_range_end"))
            for r in runs
        )
        assert all(a and b and a != b for a, b in ranges), ranges  # 3 disjoint ranges of 2

        def started_together():
            rs = [r for r in ingest_runs() if r.status == dg.DagsterRunStatus.STARTED and r.tags.get("situate/pid")]
            return rs if len(rs) >= 2 else None

        overlapping = _wait(started_together, 300, "two runs working at the same time", step=0.5)
        assert len({r.tags["situate/pid"] for r in overlapping}) == len(overlapping)  # separate workers

        # kill one worker as soon as it has logged a blurb made by the model
        victim = overlapping[0]

        def victim_made_a_blurb():
            return any(_made_by_model(e.user_message) for e in instance.all_logs(victim.run_id))

        _wait(victim_made_a_blurb, 300, "the victim's first blurb", step=0.5)
        os.kill(int(victim.tags["situate/pid"]), signal.SIGKILL)

        def others_done():
            rs = {r.run_id: r.status for r in ingest_runs()}
            return all(
                s == dg.DagsterRunStatus.SUCCESS
                for rid, s in rs.items()
                if rid != victim.run_id and rid in {r.run_id for r in runs}
            )

        _wait(others_done, 600, "the two other runs to succeed")

        # the next sync (the sensor, every 5 s here) marks the dead run failed and asks for its documents
        # again; the new run waits out the dead worker's lease (12 s here) and takes the blurbs the
        # dead one finished from the cache
        def resumed():
            rs = ingest_runs()
            return [
                r for r in rs if r.run_id not in {x.run_id for x in runs} and r.status == dg.DagsterRunStatus.SUCCESS
            ]

        _wait(resumed, 600, "the killed run's documents to be ingested again")
        assert instance.get_run_by_id(victim.run_id).status == dg.DagsterRunStatus.FAILURE

        from situate.resources.store.retrieval import bm25_ids
        from situate.resources.store.store import Store

        store = Store(home=uri)

        def complete():
            rows = store.columns(["chunk_id", "source"]).to_pylist() if store.table() is not None else []
            ids = sorted(r["chunk_id"] for r in rows)
            if {r["source"] for r in rows} != {f"{p}.md" for p in PACKAGES}:
                return None
            return rows if sorted(bm25_ids(store.bm25_dir) or []) == ids else None

        rows = _wait(complete, 300, "every row and the BM25 index")
        ids = [r["chunk_id"] for r in rows]
        assert len(ids) == len(set(ids))  # no duplicate chunk_id
        # each blurb was generated once: the blurbs the killed worker logged as made by the model
        # are exactly the ones its documents' resumed run took from the cache
        made_by_victim = sum(1 for e in instance.all_logs(victim.run_id) if _made_by_model(e.user_message))
        victim_keys = _range_keys(instance, victim)
        records = {k: store.read_stage(k, "blurbs")["blurbs"] for k in store_keys(store)}
        from_cache = sum(1 for k in victim_keys for b in records[k] if b["cached"])
        assert made_by_victim >= 1 and from_cache == made_by_victim
        assert sum(len(v) for v in records.values()) == len(ids)
        assert sum(1 for k in records if k not in victim_keys for b in records[k] if b["cached"]) == 0
