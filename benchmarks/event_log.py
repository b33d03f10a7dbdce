"""Dagster's SQLite event log against situate's (``situate.resources.store.event_log``).

One run of a two-asset job over ``--partitions`` dynamic partitions (a single-run backfill, as
``situate ingest`` runs a range of documents), on a new instance folder each time, alternating
Dagster's own ``SqliteEventLogStorage`` and situate's ``SqliteEventLog`` ``--pairs`` times in one
process: seconds of the run and milliseconds a materialization event.  The assets do nothing, so
what is timed is Dagster's work around them, most of it the event log.

    python -m benchmarks.event_log --out benchmarks/reports/event-log
"""

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parent.parent
PARTS = dg.DynamicPartitionsDefinition(name="docs")
OURS = "event_log_storage:\n  module: situate.resources.store.event_log\n  class: SqliteEventLog\n"


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run())
def first(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"documents": len(context.partition_keys)})


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run(), deps=[first])
def second(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"documents": len(context.partition_keys)})


DEFS = dg.Definitions(assets=[first, second], jobs=[dg.define_asset_job("both", selection=[first, second])])


def one_run(storage: str, n: int) -> float:
    """Seconds of one run over ``n`` partitions on a new instance with ``storage`` (``dagster``
    or ``situate``)."""
    home = Path(tempfile.mkdtemp(prefix="situate-eventlog-"))
    try:
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + (OURS if storage == "situate" else ""))
        os.environ["DAGSTER_HOME"] = str(home)
        os.environ["DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"] = "true"  # as situate sets it
        with dg.DagsterInstance.get() as instance:
            keys = [f"doc-{i:05d}" for i in range(n)]
            instance.add_dynamic_partitions("docs", keys)
            tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
            t0 = time.perf_counter()
            assert DEFS.resolve_job_def("both").execute_in_process(instance=instance, tags=tags).success
            return time.perf_counter() - t0
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="report path without extension (.json and .md)")
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args(argv)
    seconds: dict[str, list[float]] = {"dagster": [], "situate": []}
    for _ in range(args.pairs):
        for storage in seconds:
            seconds[storage].append(round(one_run(storage, args.partitions), 2))
    med = {k: statistics.median(v) for k, v in seconds.items()}
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "partitions": args.partitions,
        "materializations": 2 * args.partitions,
        "seconds": seconds,
        "median_seconds": med,
        "ms_a_materialization": {k: round(1000 * v / (2 * args.partitions), 2) for k, v in med.items()},
        "situate_over_dagster": round(med["situate"] / med["dagster"], 3),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    ms = report["ms_a_materialization"]
    out.with_suffix(".md").write_text(
        f"{report['cpus']} cores, {report['date']}: one run of two assets over {args.partitions:,} partitions "
        f"({report['materializations']:,} materialization events), {args.pairs} runs each, alternating.\n\n"
        "| event log storage | run seconds | median | ms a materialization |\n|---|---|---|---|\n"
        f"| Dagster's SqliteEventLogStorage | {', '.join(map(str, seconds['dagster']))} | {med['dagster']:.2f} "
        f"| {ms['dagster']} |\n"
        f"| situate's SqliteEventLog | {', '.join(map(str, seconds['situate']))} | {med['situate']:.2f} "
        f"| {ms['situate']} |\n\nsituate's over Dagster's: {report['situate_over_dagster']:.2f}x "
        "(the median runs, in one process).\n"
    )
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
