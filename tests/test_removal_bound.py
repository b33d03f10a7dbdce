"""No mass deletion from an empty or unmounted docs folder (issue 24): the rule on FAKE counts,
then real ingests (structure mode: embeddings, no LLM) of four real documents whose folder is
emptied: `situate ingest` removes nothing and exits 2 with one line, a sensor tick removes nothing,
warns and asks for an index run, the table check fails while the hold lasts, and the explicit flag
goes on."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from pathlib import Path

import dagster as dg
import pytest
from conftest import needs_models, small_settings


def test_the_rule_holds_most_or_all_and_lets_small_removals_through():
    from situate.pipelines.sync import removal_held

    assert removal_held(0, 10, 0) == ""  # nothing to remove
    assert removal_held(1, 1, 0) != ""  # every document gone, even one
    assert removal_held(2, 4, 2) == ""  # half, and under 3
    assert removal_held(3, 5, 2) != ""  # 3 of 5
    assert removal_held(5, 10, 5) == ""  # exactly half goes through
    assert "6 of 10 documents" in removal_held(6, 10, 4)


def test_plan_sync_holds_and_names_the_documents():
    from situate.pipelines.sync import plan_sync

    registered = ["a.md", "b.md", "c.md", "d.md"]
    plan = plan_sync([], registered, {}, "fp")
    assert plan.removed == [] and plan.held_keys == registered and "no document now" in plan.held
    plan = plan_sync([], registered, {}, "fp", allow_mass_removal=True)
    assert plan.removed == registered and plan.held == ""


def _docs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(Path(importlib.util.find_spec("dotenv.main").origin).read_text()[:2000])
    for dist in ("bm25s", "tiktoken", "lancedb"):
        (folder / f"{dist}-README.md").write_text(importlib.metadata.metadata(dist).get_payload()[:1500])


@needs_models
@pytest.mark.models
def test_an_emptied_docs_folder_removes_nothing_until_allowed(tmp_path, capsys):
    from situate.contextual import table_checks
    from situate.pipelines.automation import documents_sensor
    from situate.pipelines.cli import main
    from situate.pipelines.definitions import build_definitions
    from situate.pipelines.settings import resources_from_env, restored_env
    from situate.resources.store.store import Store

    docs, home = tmp_path / "mount", tmp_path / "home"
    _docs(docs)
    settings = small_settings(docs, home, context="structure")
    with restored_env(tuple(settings) + ("SITUATE_ALLOW_MASS_REMOVAL",)):
        os.environ.update(settings)
        os.environ.pop("SITUATE_ALLOW_MASS_REMOVAL", None)
        assert main(["ingest", str(docs), "--home", str(home)]) == 0
        store = Store(home=str(home))
        rows = store.count_rows()
        assert rows > 0 and len(store.document_states()) == 4
        # one short line a progress step; none of Dagster's log lines
        err = capsys.readouterr().err.splitlines()
        assert err and all(line.startswith("situate: ") and len(line) <= 120 for line in err), err
        assert f"situate: embeddings: 4/4 documents, {rows} chunks (0 from the cache), " in "\n".join(err)
        assert f"situate: bm25_index: {rows} rows from table version " in "\n".join(err)

        # the share is unmounted: an empty mount point
        shutil.rmtree(docs)
        docs.mkdir()
        assert main(["ingest", str(docs), "--home", str(home)]) == 2
        out = capsys.readouterr().out
        held = [line for line in out.splitlines() if "nothing removed" in line]
        assert held and "the docs folder holds no document now" in held[0] and "--allow-removal" in held[0]
        assert store.count_rows() == rows and len(store.document_states()) == 4
        assert table_checks.no_removal_held(store)[0] is False

        # the sensor's tick: no delete request, a warning, an index run (its check fails in the UI)
        instance = dg.DagsterInstance.get()
        registered = list(instance.get_dynamic_partitions("documents"))
        ctx = dg.build_sensor_context(
            instance=instance, definitions=build_definitions(plain=True), resources=resources_from_env(plain=True)
        )
        result = documents_sensor(ctx)
        assert not [r for r in result.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
        assert [r.job_name for r in result.run_requests] == ["bm25"]
        assert store.count_rows() == rows and list(instance.get_dynamic_partitions("documents")) == registered
        passed, md = table_checks.no_removal_held(store)
        assert not passed and md["documents"] == 4 and "no document now" in md["held"]

        # the share comes back: nothing to hold, the check passes again, nothing re-embedded
        _docs(docs)
        assert main(["ingest", str(docs), "--home", str(home)]) == 0
        assert table_checks.no_removal_held(store)[0] is True and store.count_rows() == rows

        # a real clean-up, said so
        shutil.rmtree(docs)
        docs.mkdir()
        (docs / "kept.md").write_text("# Kept\n\nThe one document left after the clean-up.\n")
        assert main(["ingest", str(docs), "--home", str(home)]) == 2
        capsys.readouterr()
        assert main(["ingest", str(docs), "--home", str(home), "--allow-removal", "--verbose"]) == 0
        assert set(store.document_states()) == {"kept.md"}
        # --verbose: Dagster's console log (kept.md was ingested by the held run: this one removes
        # and indexes), the index's vector line that the short lines leave out included
        err = capsys.readouterr().err.splitlines()
        rows = store.count_rows()
        assert any(
            " - dagster - INFO - bm25 - " in line and f"bm25_index: {rows} rows from table" in line for line in err
        )
        assert any(" - dagster - INFO - bm25 - " in line and "bm25_index: vector index " in line for line in err)
        assert not [line for line in err if line.startswith("situate: ")]


@needs_models
@pytest.mark.models
def test_a_document_that_used_its_attempts_is_named_everywhere_and_an_edit_starts_again(tmp_path, capsys):
    """Documents never silently stuck (issue 24): three failed runs of one document's work (recorded
    on the real instance as a killed worker leaves them: status FAILURE, the run's work tag), then
    a real sensor tick: no run asked for, a warning naming the document, the table check failing;
    an edit is new work and is asked for again."""
    from dagster._core.test_utils import create_run_for_test

    from situate.contextual import table_checks
    from situate.pipelines.automation import MAX_RUN_ATTEMPTS, RUN_BASE, documents_sensor, plan_for, run_key
    from situate.pipelines.cli import main
    from situate.pipelines.definitions import build_definitions
    from situate.pipelines.settings import resources_from_env, restored_env
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    _docs(docs)
    settings = small_settings(docs, home, context="structure")
    with restored_env(tuple(settings)):
        os.environ.update(settings)
        assert main(["ingest", str(docs), "--home", str(home)]) == 0
        store = Store(home=str(home))
        (docs / "main.py").write_text((docs / "main.py").read_text() + "\n# edited\n")
        instance = dg.DagsterInstance.get()
        res = resources_from_env(plain=True)
        plan, fp = plan_for(instance, res["docs"], store, res["llm"], res["embedder"], res["chunking"])
        assert plan.stale == ["main.py"]
        base = run_key(["main.py"], plan, fp)
        for _ in range(MAX_RUN_ATTEMPTS):
            create_run_for_test(
                instance,
                job_name="ingest",
                status=dg.DagsterRunStatus.FAILURE,
                tags={RUN_BASE: base, "dagster/partition": "main.py"},
            )
        ctx = dg.build_sensor_context(
            instance=instance, definitions=build_definitions(plain=True), resources=resources_from_env(plain=True)
        )
        result = documents_sensor(ctx)
        assert [r.job_name for r in result.run_requests] == ["bm25"]  # no ingest run: it used its attempts
        passed, md = table_checks.documents_not_stuck(store)
        assert not passed and md["documents"] == "main.py" and md["last_error"].startswith("3 failed runs; last run ")
        # `situate ingest` tries it itself; it works now, so it is no longer stuck
        capsys.readouterr()
        assert main(["ingest", str(docs), "--home", str(home)]) == 0
        assert table_checks.documents_not_stuck(store)[0] is True
        # a new edit is new work: the sensor asks for it again
        (docs / "main.py").write_text((docs / "main.py").read_text() + "\n# edited again\n")
        result = documents_sensor(
            dg.build_sensor_context(
                instance=instance, definitions=build_definitions(plain=True), resources=resources_from_env(plain=True)
            )
        )
        asked = [r for r in result.run_requests if r.job_name == "ingest"]
        assert len(asked) == 1 and asked[0].tags[RUN_BASE] != base and asked[0].partition_key == "main.py"
