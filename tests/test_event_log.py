"""situate's SQLite event log storage (``situate.resources.store.event_log``) on a real Dagster
instance: every materialization of a run over many partitions is recorded and read back as with
Dagster's own storage, the engines kept stay bounded, and an instance folder situate wrote before
gets the storage while one a user edited is left alone."""

import sys

import dagster as dg
import pytest
from conftest import REPO

sys.path.insert(0, str(REPO))
# the benchmark's two-asset job over dynamic partitions (benchmarks/event_log.py)
from benchmarks.event_log import DEFS  # noqa: E402


@pytest.fixture
def instance(tmp_path, monkeypatch):
    from situate.pipelines.settings import DAGSTER_YAML

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text(DAGSTER_YAML)
    with dg.DagsterInstance.get() as inst:
        yield inst


def _run(instance, keys: list[str]) -> dg.ExecuteInProcessResult:
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    return DEFS.resolve_job_def("both").execute_in_process(instance=instance, tags=tags)


def test_a_run_over_many_partitions_is_recorded_and_read_back(instance, monkeypatch):
    from situate.resources.store import event_log

    storage = instance.event_log_storage
    assert type(storage) is event_log.SqliteEventLog
    assert storage._base_dir == str(instance.root_directory) + "/history/runs"  # Dagster's own place
    keys = [f"doc-{i:03d}" for i in range(60)]
    instance.add_dynamic_partitions("docs", keys)
    monkeypatch.setattr(event_log, "ENGINES", 2)
    runs = [_run(instance, keys[:30]), _run(instance, keys[30:]), _run(instance, keys[:3])]
    assert all(r.success for r in runs)
    for asset in ("first", "second"):
        assert instance.get_materialized_partitions(dg.AssetKey(asset)) == set(keys)
        records = instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records
        assert len(records) == 63 and {r.partition_key for r in records} == set(keys)
    # the run's own events, from its own database (a shard the storage reads with a kept engine)
    logs = instance.all_logs(runs[0].run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    assert len(logs) == 60
    assert len(storage._engines) <= 2 and "asset_event_tags" in storage._tables


def test_an_instance_folder_situate_wrote_before_gets_the_storage(tmp_path, monkeypatch):
    from situate.pipelines.settings import DAGSTER_YAML, DAGSTER_YAML_BEFORE, ensure_dagster_home

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    (ours / "dagster.yaml").write_text(DAGSTER_YAML_BEFORE)
    edited = DAGSTER_YAML_BEFORE.replace("max_concurrent_runs: 1", "max_concurrent_runs: 2")
    (theirs / "dagster.yaml").write_text(edited)
    for folder in (ours, theirs):
        monkeypatch.setenv("DAGSTER_HOME", str(folder))
        ensure_dagster_home()
    assert (ours / "dagster.yaml").read_text() == DAGSTER_YAML
    assert (theirs / "dagster.yaml").read_text() == edited
