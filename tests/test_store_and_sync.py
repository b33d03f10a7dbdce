import numpy as np
import pytest
from conftest import needs_models

from situate.contextual.indexing import build_rows
from situate.pipelines.sync import contiguous_ranges, plan_sync
from situate.resources.documents.reading import SourceRef
from situate.resources.store.retrieval import bm25_ids, rebuild_bm25_from_table
from situate.resources.store.store import Store

DOC = {"doc_id": "d", "source": "d.md", "title": "D", "sha256": "s1"}


def rows(key, texts, blurbs=None, sha="s1", fp="fp"):
    """Rows with FAKE 4-d vectors."""
    chunks = [
        {"chunk_id": f"{key}:{i}:{abs(hash(t)) % 10**12:012d}", "index": i, "text": t, "heading_path": ["H"]}
        for i, t in enumerate(texts)
    ]
    bl = [
        {"chunk_id": c["chunk_id"], "blurb": (blurbs or [""] * len(texts))[i], "status": "model"}
        for i, c in enumerate(chunks)
    ]
    vec = np.ones((len(texts), 4), np.float32) / 2
    return build_rows(key, DOC | {"sha256": sha}, chunks, bl, vec, "llm", "emb", fp)


def test_replacing_a_document_leaves_no_duplicates_or_stale_rows(tmp_path):
    store = Store(home=str(tmp_path))
    assert store.replace_document("a", rows("a", ["one", "two", "three"])) == 3
    store.replace_document("b", rows("b", ["other"]))
    store.replace_document("a", rows("a", ["one", "two changed"]))
    store.replace_document("a", rows("a", ["one", "two changed"]))  # same again: idempotent
    t = store.table()
    got = sorted(
        t.search().select(["chunk_id", "text", "document_key"]).limit(None).to_arrow().column("text").to_pylist()
    )
    assert got == ["one", "other", "two changed"]
    assert t.count_rows() == 3
    assert store.document_states()["a"]["rows"] == 2


def test_delete_documents_removes_rows_and_stages(tmp_path):
    store = Store(home=str(tmp_path))
    store.replace_document("a", rows("a", ["x", "y"]))
    store.replace_document("it's", rows("it's", ["quoted key"]))
    store.write_stage("a", "document", {"text": "x"})
    store.delete_documents(["a", "it's"])
    assert store.count_rows() == 0 and not store.stage_path("a", "document").exists()


def test_bm25_ids_follow_the_table(tmp_path):
    store = Store(home=str(tmp_path))
    store.replace_document("a", rows("a", ["alpha", "beta"]))
    store.replace_document("b", rows("b", ["gamma"]))
    rebuild_bm25_from_table(store)
    assert sorted(bm25_ids(store.bm25_dir)) == sorted(store.columns(["chunk_id"]).column("chunk_id").to_pylist())
    store.delete_documents(["a"])
    rebuild_bm25_from_table(store)
    assert len(bm25_ids(store.bm25_dir)) == 1


def test_rows_reject_duplicates_and_mismatches(tmp_path):
    store = Store(home=str(tmp_path))
    dup = rows("a", ["x", "x"])
    dup = dup.set_column(0, "chunk_id", [["a:0:same", "a:0:same"]])
    with pytest.raises(ValueError, match="duplicate"):
        store.replace_document("a", dup)
    with pytest.raises(ValueError, match="other documents"):
        store.replace_document("b", rows("a", ["x"]))


def ref(key, sha):
    return SourceRef(key, key, "/x/" + key, sha)


def test_plan_sync_classifies_documents():
    refs = [ref("new", "n"), ref("same", "s"), ref("changed", "c2"), ref("oldfp", "o"), ref("bad", "b")]
    states = {
        "same": {"rows": 2, "doc_sha256": {"s"}, "fingerprint": {"fp"}},
        "changed": {"rows": 1, "doc_sha256": {"c1"}, "fingerprint": {"fp"}},
        "oldfp": {"rows": 1, "doc_sha256": {"o"}, "fingerprint": {"fp0"}},
        "gone": {"rows": 3, "doc_sha256": {"g"}, "fingerprint": {"fp"}},
    }
    plan = plan_sync(
        refs,
        ["same", "changed", "oldfp", "gone", "bad"],
        states,
        "fp",
        bad_inputs={"bad": ("b", "bad: empty (0 bytes)")},
    )
    assert plan.added == ["new"]
    assert plan.removed == ["gone"]
    assert sorted(plan.stale) == ["changed", "new", "oldfp"]
    assert plan.fresh == ["same"]
    assert plan.known_bad == {"bad": "bad: empty (0 bytes)"}
    # a bad document that changed is tried again
    plan = plan_sync([ref("bad", "b2")], ["bad"], {}, "fp", bad_inputs={"bad": ("b", "r")})
    assert plan.stale == ["bad"]


def test_contiguous_ranges():
    order = list("abcdefg")
    assert contiguous_ranges(order, "abdfg") == [("a", "b"), ("d", "d"), ("f", "g")]
    assert contiguous_ranges(order, []) == []
    assert contiguous_ranges(order, order) == [("a", "g")]


def _widen(table, dim):
    """The same rows with FAKE ``dim``-wide vectors."""
    import pyarrow as pa

    from situate.resources.store.store import table_schema

    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(table.num_rows * dim, np.float32)), dim)
    return pa.Table.from_arrays([*table.columns[:-1], vec], schema=table_schema(dim))


def _widths(store):
    got = store.columns(["document_key", "vector"]).to_pylist()
    return sorted((r["document_key"], len(r["vector"])) for r in got)


def test_a_width_change_keeps_every_row_until_every_document_has_new_ones(tmp_path):
    store = Store(home=str(tmp_path))
    for key, texts in (("a", ["x", "y"]), ("b", ["z"]), ("c", ["w"])):
        store.replace_document(key, rows(key, texts))
    v0 = store.table().version
    store.replace_document("a", _widen(rows("a", ["x", "y"]), 8))
    # the table still serves every document at the old width; the new rows wait
    assert _widths(store) == [("a", 4), ("a", 4), ("b", 4), ("c", 4)]
    assert store.migration() == {"table_dim": 4, "next_dim": 8, "documents_done": 1, "documents_waiting": 2}
    store.delete_documents(["c"])  # a document deleted meanwhile is not waited for
    assert store.migration()["documents_waiting"] == 1
    store.replace_document("b", _widen(rows("b", ["z"]), 8))  # the last one: one commit swaps
    assert _widths(store) == [("a", 8), ("a", 8), ("b", 8)]
    assert store.migration() is None
    versions = [v["version"] for v in store.table().list_versions()]
    assert versions == list(range(1, versions[-1] + 1)) and versions[0] <= v0  # the same table throughout
    store.replace_document("a", _widen(rows("a", ["x changed"]), 8))  # and writes go on as before
    assert _widths(store) == [("a", 8), ("b", 8)]


def test_a_table_of_an_older_schema_is_migrated_in_place(tmp_path):
    import lancedb

    old = rows("b", ["kept row"]).drop_columns(["fingerprint", "prompt_version"])
    lancedb.connect(str(tmp_path / "lancedb")).create_table("chunks", data=old)
    store = Store(home=str(tmp_path))
    store.replace_document("a", rows("a", ["new row"]))
    got = {r["text"]: r for r in store.columns(["text", "fingerprint", "prompt_version"]).to_pylist()}
    assert set(got) == {"kept row", "new row"}
    assert got["kept row"]["fingerprint"] is None and got["new row"]["fingerprint"] == "fp"
    assert store.migration() is None


@needs_models
def test_a_search_at_another_width_gets_one_line(tmp_path, capsys, monkeypatch):
    from situate.pipelines import cli
    from situate.pipelines.preflight import StartupError

    store = Store(home=str(tmp_path))
    store.replace_document("a", rows("a", ["x"]))  # FAKE 4-d vectors: the embedder writes 384
    monkeypatch.setenv("SITUATE_HOME", str(tmp_path))
    with pytest.raises(StartupError, match=r"holds 4-wide vectors and the embedder .* writes 384-wide"):
        cli.search("x", k=3, home=str(tmp_path))


def test_long_keys_get_short_stage_folders(tmp_path):
    store = Store(home=str(tmp_path))
    key = "a" * 400
    store.write_stage(key, "document", {"x": 1})
    assert store.read_stage(key, "document") == {"x": 1}
    assert len(store.stage_dir(key).name) <= 200


def test_documents_of_active_runs_are_in_flight():
    import uuid

    import dagster as dg

    from situate.pipelines.automation import RANGE_END, RANGE_START, in_flight_keys

    order = ["a", "b", "c", "d", "e"]
    with dg.instance_for_test() as instance:

        def run(status, tags, job="ingest"):
            instance.add_run(dg.DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=status, tags=tags))

        run(dg.DagsterRunStatus.STARTED, {RANGE_START: "b", RANGE_END: "c"})
        run(dg.DagsterRunStatus.NOT_STARTED, {"dagster/partition": "e"})
        run(dg.DagsterRunStatus.SUCCESS, {"dagster/partition": "a"})  # finished: not in flight
        run(dg.DagsterRunStatus.STARTED, {"dagster/partition": "d"}, job="bm25")
        assert in_flight_keys(instance, order) == {"b", "c", "e"}


def test_vector_index_from_the_row_threshold_and_search_still_exact_enough(tmp_path):
    """Synthetic 32-d rows (FAKE vectors around 12 centres): below the threshold no index; above
    it an IVF_FLAT index, updated on the next call; the indexed search finds each row's own
    vector first, and the BM25 index loads again after it is rebuilt."""
    import pyarrow as pa

    from situate.resources.store.retrieval import bm25_search, build_bm25, hybrid_search
    from situate.resources.store.store import TABLE, table_schema

    rng = np.random.default_rng(0)
    n, dim = 600, 32
    centres = rng.standard_normal((12, dim)).astype(np.float32)
    vecs = centres[rng.integers(0, 12, n)] + 0.3 * rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = Store(home=str(tmp_path))
    schema = table_schema(dim)
    ids = [f"r{i:04d}" for i in range(n)]
    texts = [f"row {i} word{i % 50}" for i in range(n)]
    cols = {f.name: pa.array([""] * n, f.type) if f.type == pa.string() else pa.nulls(n, f.type) for f in schema}
    cols.update(
        chunk_id=pa.array(ids),
        document_key=pa.array(["k"] * n),
        text=pa.array(texts),
        chunk_index=pa.array(range(n), pa.int32()),
        vector=pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), dim),
    )
    store.connect().create_table(TABLE, data=pa.table({f.name: cols[f.name] for f in schema}, schema=schema))
    build_bm25(ids, texts, store.bm25_dir, structural_texts=texts)
    assert store.ensure_vector_index(min_rows=n + 1)["vector_index"] == "none" and store.vector_index() is None
    assert store.ensure_vector_index(min_rows=n)["vector_index"] == "built" and store.vector_index()
    assert store.ensure_vector_index(min_rows=n)["vector_index"] == "updated"
    for i in (3, 250, 599):
        hits, warnings = hybrid_search(store, vecs[i], f"row {i}", k=5)
        assert hits[0].chunk_id == ids[i] and not warnings
    build_bm25(ids[:10], texts[:10], store.bm25_dir)  # a rebuilt index is seen by the next search
    assert bm25_search(store.bm25_dir, "word7", 50) == ["r0007"]


def _ingested(tmp_path):
    """A store with two documents as the pipeline leaves them: rows (FAKE vectors, made unit
    length) and chunks stage files; plus a bad document whose chunks stage records an error."""
    store = Store(home=str(tmp_path))
    for key, texts in {"a": ["one", "two", "three"], "b": ["other"]}.items():
        r = rows(key, texts)
        store.replace_document(key, r)
        store.write_stage(key, "chunks", {"chunks": [{"chunk_id": c} for c in r.column("chunk_id").to_pylist()]})
    store.write_stage("bad", "chunks", {"error": "binary file", "upstream": True})
    rebuild_bm25_from_table(store)
    return store


def test_table_checks_pass_on_a_sound_table_and_fail_when_tampered(tmp_path):
    from situate.contextual import table_checks as tc

    store = _ingested(tmp_path)
    keys = ["a", "b", "bad"]
    assert tc.rows_match_chunks(store, keys)[0] and tc.unique_chunk_ids(store)[0]
    assert tc.vectors_sound(store, dim=4)[0] and tc.fallback_share(store, 0.5)[0]
    assert not tc.vectors_sound(store, dim=768)[0]  # another embedder's width
    table = store.table()
    # a lost row, a duplicated row, a vector that is not unit length
    table.delete("chunk_id = '" + table.search().where("document_key = 'a'").limit(1).to_list()[0]["chunk_id"] + "'")
    dup = table.search().where("document_key = 'b'").limit(None).to_arrow()
    table.add(dup)
    table.update(where="document_key = 'b'", values={"vector": [3.0, 0.0, 0.0, 0.0]})
    ok, md = tc.rows_match_chunks(store, keys)
    assert not ok and md["documents_wrong"] == 2 and "a: 2 rows, 3 chunks" in md["wrong (rows, chunks)"]
    ok, md = tc.unique_chunk_ids(store)
    assert not ok and md["duplicated_ids"] == 1
    ok, md = tc.vectors_sound(store)
    assert not ok and md["rows_not_unit_or_not_finite"] == 2 and md["norm_max"] == 3.0
    # rows of a document that is no longer registered
    assert not tc.rows_match_chunks(store, ["a", "bad"])[0]
    # blurbs that fell back: 2 of the 4 rows left
    table.update(where="document_key = 'a'", values={"blurb_status": "fallback:empty"})
    ok, md = tc.fallback_share(store, 0.3)
    assert not ok and md["share"] == 0.5 and md["reasons"] == "empty: 2"
    assert tc.fallback_share(store, 0.5)[0]


def test_asset_checks_run_with_bm25_index_and_fail_on_a_tampered_table(tmp_path):
    import dagster as dg

    from situate.assets.bm25_index import bm25_index
    from situate.pipelines.sync import PARTITIONS

    store = _ingested(tmp_path / "home")
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions(PARTITIONS, ["a", "b", "bad"])
        res = dg.materialize([bm25_index], resources={"store": store}, instance=instance)
        checks = {c.check_name: c.passed for c in res.get_asset_check_evaluations()}
        assert checks == {
            "ids_match_table": True,
            "rows_match_chunks": True,
            "unique_chunk_ids": True,
            "vectors_sound": True,
            "fallback_share": True,
            "no_removal_held": True,
            "documents_not_stuck": True,
        }
        store.table().delete("document_key = 'b'")
        res = dg.materialize(
            [bm25_index],
            resources={"store": store},
            instance=instance,
            run_config={"ops": {"bm25_index": {"config": {"max_fallback_share": 0.0}}}},
        )
        checks = {c.check_name: c.passed for c in res.get_asset_check_evaluations()}
        assert checks["rows_match_chunks"] is False and checks["ids_match_table"] is True
        assert checks["fallback_share"] is True  # every FAKE row is status "model"


def test_documents_per_run_cut_ranges_and_set_the_backfill_policy(monkeypatch):
    from situate.pipelines.automation import run_requests
    from situate.pipelines.sync import SyncPlan, run_ranges

    order = [f"d{i}" for i in range(7)]
    stale = ["d0", "d1", "d2", "d3", "d5", "d6"]
    assert run_ranges(order, stale, 0) == [("d0", "d3"), ("d5", "d6")]
    assert run_ranges(order, stale, 3) == [("d0", "d2"), ("d3", "d3"), ("d5", "d6")]
    refs = {k: SourceRef(k, k, f"/x/{k}", "sha") for k in order}
    plan = SyncPlan(refs=refs, added=[], removed=[], stale=stale, fresh=[], known_bad={}, invalid={})
    reqs = run_requests(plan, order, "fp", per_run=2)
    spans = [
        (
            r.tags.get("dagster/asset_partition_range_start", r.partition_key),
            r.tags.get("dagster/asset_partition_range_end", r.partition_key),
        )
        for r in reqs
    ]
    assert spans == [("d0", "d1"), ("d2", "d3"), ("d5", "d6")]
    assert len({r.run_key for r in reqs}) == 3  # disjoint documents, distinct runs
    from dagster import AssetKey

    from situate.assets.partitions import backfill_policy
    from situate.pipelines.definitions import build_definitions

    policy = backfill_policy(2)
    assert policy.max_partitions_per_run == 2 and policy.policy_type.value == "MULTI_RUN"
    assert backfill_policy(0).policy_type.value == "SINGLE_RUN"
    # the code location sets every per-document asset's policy from the settings when it is built
    monkeypatch.setenv("SITUATE_DOCS_PER_RUN", "2")
    graph = build_definitions(plain=True).resolve_asset_graph()
    policies = {k.to_user_string(): graph.get(k).backfill_policy for k in graph.get_all_asset_keys()}
    assert policies["blurbs"].max_partitions_per_run == 2 and policies["chunks"].policy_type.value == "MULTI_RUN"
    monkeypatch.delenv("SITUATE_DOCS_PER_RUN")
    graph = build_definitions(plain=True).resolve_asset_graph()
    assert graph.get(AssetKey("blurbs")).backfill_policy.policy_type.value == "SINGLE_RUN"


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_writers_of_one_document_take_turns(tmp_path, where, request):
    """A second run reaching a document another run is writing waits for it (queued, not run at
    once); other documents are not held.  In a local folder (a file lock) and on a real
    S3-compatible server (a lease object, which holds across machines)."""
    import threading
    import uuid

    if where == "s3":
        s3 = request.getfixturevalue("s3_server")
        store = Store(home=f"s3://{s3['bucket']}/turns-{uuid.uuid4().hex[:8]}")
    else:
        store = Store(home=str(tmp_path))
    held, release, order, waited = threading.Event(), threading.Event(), [], []

    def first():
        with store.document_lock("a"):
            order.append("first in")
            held.set()
            release.wait(60)
            order.append("first out")

    t1 = threading.Thread(target=first)
    t1.start()
    assert held.wait(60)
    assert store.document_busy("a") and not store.document_busy("b")
    with store.document_lock("b"):  # another document: no wait
        pass

    def second():
        with store.document_lock("a", on_wait=lambda: waited.append("a") or release.set()):
            order.append("second in")

    t2 = threading.Thread(target=second)
    t2.start()
    t2.join(60)
    t1.join(60)
    assert order == ["first in", "first out", "second in"] and waited == ["a"]
    assert not store.document_busy("a")


def test_a_range_whose_run_died_is_asked_for_again_a_bounded_number_of_times():
    """Dagster skips a run key it has seen: a range whose run failed as a whole (its worker killed)
    gets a new key per failure, up to MAX_RUN_ATTEMPTS runs, then keeps the last one (no relaunch
    every minute of a run that keeps dying)."""
    from situate.pipelines.automation import MAX_RUN_ATTEMPTS, RUN_BASE, run_requests
    from situate.pipelines.sync import SyncPlan

    order = ["d0", "d1", "d2", "d3"]
    refs = {k: SourceRef(k, k, f"/x/{k}", "sha") for k in order}
    plan = SyncPlan(refs=refs, added=[], removed=[], stale=order, fresh=[], known_bad={}, invalid={})

    def requests(failures, stuck=None):
        return run_requests(plan, order, "fp", per_run=2, failures=failures, stuck=stuck)

    first = requests({})
    base = first[0].tags[RUN_BASE]
    assert first[0].run_key == base and {r.tags[RUN_BASE] for r in first} == {base, first[1].run_key}
    after_one = requests({base: (1, "run-1")})
    assert after_one[0].run_key == base + "-retry1" and after_one[1].run_key == first[1].run_key
    seen = {r[0].run_key for n in range(MAX_RUN_ATTEMPTS) if (r := requests({base: (n, "run-x")}))}
    assert len(seen) == MAX_RUN_ATTEMPTS
    # used its attempts: not asked for; its documents named with the last run
    stuck: dict = {}
    gave_up = requests({base: (MAX_RUN_ATTEMPTS, "run-9")}, stuck)
    assert [r.run_key for r in gave_up] == [first[1].run_key] and stuck == {"d0": (3, "run-9"), "d1": (3, "run-9")}
    # an edit of d1 is other work: its attempts start again
    plan.refs["d1"] = SourceRef("d1", "d1", "/x/d1", "sha-edited")
    again = requests({base: (MAX_RUN_ATTEMPTS, "run-9")})
    assert len(again) == 2 and again[0].tags[RUN_BASE] != base and again[0].run_key == again[0].tags[RUN_BASE]


def test_a_killed_automation_run_of_the_index_is_reaped():
    """Dagster's automation launches bm25_index as job "__ASSET_JOB"; a run whose worker was killed
    stayed STARTED and blocked eager() for good (issue 24).  A real process that exited stands for
    the killed worker; the run is on a real (temporary) instance."""
    import socket
    import subprocess
    import sys

    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from situate.pipelines.automation import reap_dead_runs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with dg.instance_for_test() as instance:
        run = create_run_for_test(
            instance,
            job_name="__ASSET_JOB",
            status=dg.DagsterRunStatus.STARTED,
            tags={"situate/host": socket.gethostname(), "situate/pid": str(gone.pid), "situate/pid_start": "0"},
        )
        assert reap_dead_runs(instance) == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
