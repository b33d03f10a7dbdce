"""Leases that cannot have two holders (issue 24), against a real S3-compatible server
(SeaweedFS) with real processes: waiters racing for a dead holder's lease, a waiter whose clock
runs 91 s ahead, a holder paused past the stale time (fenced: it writes nothing after), a
renewal in flight at release, and the BM25 pointer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from conftest import REPO


def _uri(s3_server, name: str) -> str:
    return f"s3://{s3_server['bucket']}/{name}-{uuid.uuid4().hex[:8]}"


def _child(code: str, s3_server, *args: str, **env) -> subprocess.Popen:
    prelude = f"import sys, time, json, os\nsys.path.insert(0, {str(REPO)!r})\n"
    return subprocess.Popen(
        [sys.executable, "-c", prelude + code, *args],
        env={**os.environ, **s3_server["env"], **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


HOLD = """
from situate.resources.store.objects import ObjectFolder
from situate.resources.store.leases import object_lease
f = ObjectFolder(sys.argv[1])
with object_lease(f, "locks/doc.lease", poll_s=0.05, renew_s=0.3):
    with open(sys.argv[2], "a") as out:
        out.write("in %s %f\\n" % (sys.argv[3], time.time())); out.flush()
        time.sleep(float(sys.argv[4]))
        out.write("out %s %f\\n" % (sys.argv[3], time.time())); out.flush()
"""


def _spans(log) -> list[tuple[str, float, float]]:
    lines = [x.split() for x in log.read_text().splitlines()]
    ins = {who: float(t) for verb, who, t in lines if verb == "in"}
    outs = {who: float(t) for verb, who, t in lines if verb == "out"}
    return sorted((who, ins[who], outs[who]) for who in ins)


def _no_overlap(spans) -> bool:
    spans = sorted(spans, key=lambda s: s[1])
    return all(a[2] <= b[1] for a, b in zip(spans, spans[1:]))


def test_waiters_racing_for_a_dead_holders_lease_never_overlap(s3_server, tmp_path):
    from situate.resources.store.objects import ObjectFolder

    uri = _uri(s3_server, "race")
    folder = ObjectFolder(uri)
    folder.put("locks/doc.lease", json.dumps({"owner": "dead", "renewed_at": 0}).encode())
    log = tmp_path / "log.txt"
    procs = [_child(HOLD, s3_server, uri, str(log), f"w{i}", "0.8", SITUATE_LEASE_STALE_S="1.5") for i in range(4)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stdout.read()
    spans = _spans(log)
    assert len(spans) == 4 and _no_overlap(spans), spans


def test_a_waiter_whose_clock_runs_ahead_does_not_take_a_live_lease(s3_server, tmp_path):
    uri = _uri(s3_server, "skew")
    log = tmp_path / "log.txt"
    holder = _child(HOLD, s3_server, uri, str(log), "holder", "6", SITUATE_LEASE_STALE_S="3")
    deadline = time.time() + 60
    while not (log.exists() and "in holder" in log.read_text()):
        assert time.time() < deadline and holder.poll() is None
        time.sleep(0.05)
    # the waiter's wall clock runs 91 s ahead (a machine without NTP)
    skewed = "_real = time.time\ntime.time = lambda: _real() + 91\n" + HOLD
    waiter = _child(skewed, s3_server, uri, str(log), "waiter", "0.1", SITUATE_LEASE_STALE_S="3")
    assert holder.wait(timeout=120) == 0 and waiter.wait(timeout=120) == 0, waiter.stdout.read()
    (h, w) = sorted(_spans(log), key=lambda s: s[0])  # holder, waiter
    assert w[1] - 91 >= h[2] - 0.05, (h, w)  # the waiter got in only after the holder was out


PAUSED = """
from situate.resources.store.objects import ObjectFolder
from situate.resources.store.leases import LeaseLost, check_held, object_lease
f = ObjectFolder(sys.argv[1])
try:
    with object_lease(f, "locks/doc.lease", poll_s=0.05, renew_s=0.3):
        print("held", flush=True)
        for i in range(100):
            time.sleep(0.1)
            check_held("/doc.lease")       # before every commit
            f.put("commits/holder-%03d" % i, b"x")
except LeaseLost as e:
    print("lost:", e, flush=True)
    sys.exit(3)
"""


def test_a_paused_holder_is_fenced_and_writes_nothing_after_the_takeover(s3_server):
    from situate.resources.store.leases import object_lease
    from situate.resources.store.objects import ObjectFolder

    uri = _uri(s3_server, "paused")
    folder = ObjectFolder(uri)
    holder = _child(PAUSED, s3_server, uri, SITUATE_LEASE_STALE_S="2")
    assert holder.stdout.readline().strip() == "held"
    time.sleep(0.5)
    os.kill(holder.pid, signal.SIGSTOP)  # a GC pause, a laptop lid, a stalled VM
    try:
        os.environ["SITUATE_LEASE_STALE_S"] = "2"
        with object_lease(folder, "locks/doc.lease", poll_s=0.05, renew_s=0.3):
            taken_at = time.time()
            before = set(folder.list("commits"))
            os.kill(holder.pid, signal.SIGCONT)  # it wakes up inside its block
            assert holder.wait(timeout=60) == 3
            after = set(folder.list("commits"))
    finally:
        os.environ.pop("SITUATE_LEASE_STALE_S", None)
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
    out = holder.stdout.read()
    assert "lost: lease locks/doc.lease lost" in out, out
    assert after == before, sorted(after - before)  # not one commit after it was taken over
    assert taken_at > 0


def test_a_renewal_in_flight_at_release_cannot_bring_the_lease_back(s3_server):
    from situate.resources.store.leases import current_lease, lease_busy, object_lease
    from situate.resources.store.objects import ObjectFolder

    folder = ObjectFolder(_uri(s3_server, "inflight"))
    with object_lease(folder, "locks/doc.lease", poll_s=0.05):
        lease = current_lease()
        version = lease.etag  # what a renewal that started now would be conditional on
    # the renewal lands after the release: refused (If-Match on a version that is gone)
    assert folder.replace_if("locks/doc.lease", b'{"owner": "late renewal"}', version) is None
    assert json.loads(folder.get("locks/doc.lease")) == {"owner": None, "released": True}
    assert not lease_busy(folder, "locks/doc.lease")


def test_the_bm25_pointer_must_name_a_version_and_its_version_is_never_deleted(s3_server, tmp_path, monkeypatch):
    from situate.resources.store import retrieval
    from situate.resources.store.objects import ObjectFolder
    from situate.resources.store.store import BM25_POINTER, Store, forget_bm25_pointer

    monkeypatch.setenv("SITUATE_CACHE", str(tmp_path / "cache"))
    uri = _uri(s3_server, "bm25")
    store = Store(home=uri)
    folder = ObjectFolder(uri)
    ids = [f"a.md:{i}" for i in range(3)]
    texts = ["alpha beta", "gamma delta", "epsilon zeta"]
    monkeypatch.setattr(retrieval, "BM25_KEEP_S", 0.0)  # delete every old version at once
    for _ in range(3):
        retrieval.publish_bm25(store, ids, texts, texts)
    current = folder.get(BM25_POINTER).decode()
    names = {rel.split("/")[1] for rel in folder.list("bm25") if rel.count("/") >= 2}
    assert current in names and len(names) <= 2  # the pointer's and the previous one
    assert (store.bm25_dir / "ids.json").exists() or any(store.bm25_dir.iterdir())
    # a pointer that is not a version id never becomes a local path
    folder.put(BM25_POINTER, b"../../../etc")
    forget_bm25_pointer(uri)
    with pytest.raises(ValueError, match="not a BM25 version id"):
        _ = store.bm25_dir
    assert not (tmp_path / "etc").exists()
