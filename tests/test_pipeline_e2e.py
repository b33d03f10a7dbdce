"""End to end with the real small models on a few small real documents.

The documents are real text not written for this project: the start of installed packages' own
files (bm25s's README from its wheel metadata, python-dotenv's ``main.py``, numpy's ``ma/README.rst``).
Settings are small (``n_ctx`` 768, 120-token chunks, 24-token blurbs) so a document needs more than
one window and the suite stays quick on 2 cores.
"""

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from conftest import REPO, needs_models, small_settings

from situate.assets.partitions import encode_key

pytestmark = [needs_models, pytest.mark.models]

#: The keys of one hit in ``situate search --json`` and the service's answers (the documented schema).
HIT_KEYS = {
    "rank",
    "score",
    "chunk_id",
    "doc_id",
    "source",
    "chunk_index",
    "blurb",
    "text",
    "context",
    "rerank_score",
    "first_stage_rank",
    "rerank_rank",
    "location",
    "start_line",
    "end_line",
    "start_byte",
    "end_byte",
    "similarity",
    "matched",
}


def _head(text: str, n: int) -> str:
    cut = text[:n]
    return cut[: cut.rfind("\n") + 1] if "\n" in cut else cut


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    docs = tmp_path_factory.mktemp("docs")
    home = tmp_path_factory.mktemp("home")
    (docs / "bm25s-README.md").write_text(_head(importlib.metadata.metadata("bm25s").get_payload(), 2400))
    (docs / "dotenv").mkdir()
    main_py = Path(importlib.util.find_spec("dotenv.main").origin).read_text()
    (docs / "dotenv" / "main.py").write_text(_head(main_py, 1800))
    numpy_ma = Path(importlib.util.find_spec("numpy").origin).parent / "ma" / "README.rst"
    (docs / "numpy-ma-README.rst").write_text(_head(numpy_ma.read_text(), 1500))
    (docs / "broken.txt").write_bytes(b"\x00\x01binary")
    settings = small_settings(docs, home)
    from situate.pipelines.cli import ingest
    from situate.pipelines.settings import restored_env

    with restored_env(tuple(settings)):
        os.environ.update(settings)
        first = ingest(str(docs), str(home), echo=lambda *_: None)
        yield {"docs": docs, "home": home, "first": first, "settings": settings}


def _store(env):
    from situate.resources.store.store import Store

    return Store(home=str(env["home"]))


def test_documents_land_and_the_bad_one_is_named(env):
    s = env["first"]
    assert s.documents == 4 and s.ingested == 3
    assert list(s.failed) == ["broken.txt"]
    assert "binary content (NUL byte at offset 0)" in s.failed["broken.txt"]
    store = _store(env)
    table = store.columns(
        [
            "chunk_id",
            "doc_id",
            "source",
            "chunk_index",
            "text",
            "blurb",
            "blurb_status",
            "prompt_version",
            "llm_model",
            "llm_backend",
            "embed_model",
        ]
    ).to_pylist()
    assert len(table) == s.chunks == s.table_rows > 3
    assert {r["source"] for r in table} == {"bm25s-README.md", "dotenv/main.py", "numpy-ma-README.rst"}
    assert len({r["chunk_id"] for r in table}) == len(table)
    for r in table:  # every chunk has a blurb from the model or a logged fallback
        assert (r["blurb_status"] == "model" and r["blurb"]) or (
            r["blurb_status"].startswith("fallback:") and not r["blurb"]
        )
    assert s.blurbs_from_model + s.blurb_fallbacks == s.chunks
    assert table[0]["llm_model"] == "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M"
    assert {r["llm_backend"] for r in table} == {"in-process"}
    assert table[0]["embed_model"] == "bge-small-en-v1.5.int8"


def test_prefix_is_reused_within_a_document(env):
    per_doc = env["first"].per_document
    multi = {k: v for k, v in per_doc.items() if v["chunks"] >= 3}
    assert multi, per_doc
    for v in multi.values():
        # each window's document prefix is evaluated once, then served from the KV cache
        assert v["prompt_tokens_reused"] > v["prompt_tokens"] * 0.3, v


def test_long_document_gets_several_windows_and_every_chunk_a_prompt(env):
    store = _store(env)
    key = encode_key("bm25s-README.md")
    plan = store.read_stage(key, "preambles")
    chunks = store.read_stage(key, "chunks")["chunks"]
    assert len(plan["windows"]) >= 2
    assert sorted(i for w in plan["windows"] for i in w["chunks"]) == list(range(len(chunks)))
    for w in plan["windows"]:
        assert w["n_tokens"] <= plan["budget"]
        for i in w["chunks"]:
            assert w["start"] <= chunks[i]["start"] and chunks[i]["end"] <= w["end"]
    blurbs = store.read_stage(key, "blurbs")["blurbs"]
    assert all(b["prompt_tokens"] + 24 <= 768 for b in blurbs)


def test_bm25_ids_equal_the_table(env):
    from situate.contextual.table_checks import ids_match

    ok, figures = ids_match(_store(env))
    assert ok, figures


def test_asset_checks_pass_after_a_real_ingest(env):
    instance = dg.DagsterInstance.get()
    key = dg.AssetKey("bm25_index")
    names = ["ids_match_table", "rows_match_chunks", "unique_chunk_ids", "vectors_sound", "fallback_share"]
    checks = [dg.AssetCheckKey(key, n) for n in names]
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(checks)
    for ck in checks:
        rec = latest.get(ck)
        assert rec is not None and rec.event is not None, ck.name
        evaluation = rec.event.dagster_event.event_specific_data
        if ck.name != "fallback_share":  # the tiny test settings (24-token blurbs) may fall back a lot
            assert evaluation.passed, (ck.name, evaluation.metadata)
    from situate.contextual import table_checks

    ok, md = table_checks.vectors_sound(_store(env), dim=384)
    assert ok and md["rows"] == _store(env).count_rows() > 0


def test_run_metadata_names_the_bad_document(env):
    instance = dg.DagsterInstance.get()
    key = encode_key("broken.txt")
    ev = instance.get_latest_materialization_event(dg.AssetKey("raw_documents"))
    assert ev is not None
    md = ev.asset_materialization.metadata
    assert md["documents_failed"].value == 1
    assert "broken.txt: binary content" in md["problems"].value
    checks = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey("raw_documents"), "documents_readable"), limit=1
    )
    assert checks and checks[0].status.value == "FAILED"
    assert key in instance.get_dynamic_partitions("documents")


def test_search_finds_the_right_document(env):
    from situate.pipelines.cli import search

    hits, warnings = search("How do I parse a .env file into a dictionary of variables?", 5, str(env["home"]))
    assert warnings == [] and len(hits) == 5
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert hits[0].source == "dotenv/main.py"
    hits, _ = search("masked arrays in numpy", 3, str(env["home"]))
    assert hits[0].source == "numpy-ma-README.rst"


def test_the_public_api_searches_and_warns(env):
    import situate

    hits = situate.search("How do I parse a .env file into a dictionary of variables?", k=3, home=str(env["home"]))
    assert [h.rank for h in hits] == [1, 2, 3] and hits[0].source == "dotenv/main.py"
    assert hits[0].blurb and hits[0].to_json()["source"] == "dotenv/main.py"
    rows = _store(env).count_rows()
    with pytest.warns(situate.SearchWarning, match=f"more than the {rows} rows"):
        assert len(situate.search("dotenv", k=rows + 1, home=str(env["home"]))) == rows
    with pytest.raises(situate.QueryError, match="empty query"):
        situate.search("  ", home=str(env["home"]))


def test_search_cli_json(env):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "situate.pipelines.cli",
            "search",
            "BM25 sparse index",
            "-k",
            "2",
            "--json",
            "--home",
            str(env["home"]),
        ],
        capture_output=True,
        text=True,
        env=os.environ | env["settings"],
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)
    assert len(hits) == 2
    assert set(hits[0]) == HIT_KEYS
    assert hits[0]["location"] == f"{hits[0]['source']}:{hits[0]['start_line']}-{hits[0]['end_line']}" or (
        hits[0]["start_line"] == hits[0]["end_line"] and hits[0]["location"].endswith(f":{hits[0]['start_line']}")
    )
    assert 0 < hits[0]["similarity"] <= 1 and hits[0]["matched"][0]["line"] >= hits[0]["start_line"]
    assert hits[0]["rerank_score"] is hits[0]["first_stage_rank"] is hits[0]["rerank_rank"] is None  # no rerank
    assert hits[0]["context"]  # a prose document's chunks carry its title (and headings) as context


def test_search_reranks_with_rerank_30_and_not_by_default(env, monkeypatch):
    """--rerank 30 fuses the real cross-encoder's order with the first stage's; the default (no
    rerank), --rerank 0 and a missing reranker (with a warning) keep the first stage's order."""
    from situate.pipelines.cli import search

    query = "How do I parse a .env file into a dictionary of variables?"
    plain, w0 = search(query, 8, str(env["home"]), rerank=0)
    default, _ = search(query, 8, str(env["home"]))
    assert [h.chunk_id for h in default] == [h.chunk_id for h in plain]
    reranked, w1 = search(query, 8, str(env["home"]), rerank=30)
    assert w0 == [] and w1 == []
    assert all(h.rerank_score is None for h in plain)
    assert all(isinstance(h.rerank_score, float) for h in reranked)
    assert reranked[0].source == "dotenv/main.py"
    # reordered by the fused ranks: scores fall, and each is 1/(60+a) + 1/(60+b) for ranks a, b ≤ 30
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)
    assert all(2 / (60 + 30) - 1e-6 <= h.score <= 2 / 61 + 1e-6 for h in reranked)  # scores are rounded to 6 places
    # each hit says which two ranks made its score (the JSON's first_stage_rank and rerank_rank)
    for ranks in ([h.first_stage_rank for h in reranked], [h.rerank_rank for h in reranked]):
        assert len(set(ranks)) == len(ranks) and all(1 <= r <= 30 for r in ranks)
    assert all(h.score == round(1 / (60 + h.first_stage_rank) + 1 / (60 + h.rerank_rank), 6) for h in reranked)
    logits = {h.rerank_rank: h.rerank_score for h in reranked}
    assert [logits[r] for r in sorted(logits)] == sorted(logits.values(), reverse=True)
    monkeypatch.setenv("SITUATE_RERANK_MODEL", str(env["home"] / "no-such-reranker.onnx"))
    missing, w2 = search(query, 8, str(env["home"]), rerank=30)
    assert [h.chunk_id for h in missing] == [h.chunk_id for h in plain]
    assert len(w2) == 1 and "no reranker at" in w2[0] and "first-stage order kept" in w2[0]


@pytest.mark.parametrize(
    "args,setting,message",
    [
        (["--rerank", "-1"], None, "--rerank must be 0 (off) or more"),
        ([], "abc", "SITUATE_RERANK_DEPTH='abc' is not a whole number"),
    ],
)
def test_bad_rerank_depth_gets_one_line(env, capsys, monkeypatch, args, setting, message):
    from situate.pipelines.cli import main

    if setting is not None:
        monkeypatch.setenv("SITUATE_RERANK_DEPTH", setting)
    assert main(["search", "dotenv", "--home", str(env["home"])] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("situate: error:")


def test_long_query_and_large_k_are_answered_with_warnings(env):
    from situate.pipelines.cli import search

    rows = _store(env).count_rows()
    hits, warnings = search("load the dotenv file " * 1500, k=rows + 50, home=str(env["home"]))
    assert len(hits) == rows
    assert any("longer than the embedder's 512 tokens" in w for w in warnings)  # bge-small-en-v1.5's context
    assert any(f"more than the {rows} rows" in w for w in warnings)
    assert "dotenv" in hits[0].source


def test_second_ingest_does_no_model_work(env):
    from situate.pipelines.cli import ingest
    from situate.resources.models.llm import CALLS

    before = _store(env).count_rows()
    CALLS.clear()
    again = ingest(str(env["docs"]), str(env["home"]), echo=lambda *_: None)
    assert again.ingested == 0 and again.unchanged == 3 and again.prompt_tokens_evaluated == 0
    assert CALLS["llm_generate"] == 0 and CALLS["embed_texts"] == 0  # counted at the models
    assert _store(env).count_rows() == before


def test_dagster_cli_validates_and_materialises_one_partition(env):
    e = os.environ | env["settings"]
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        capture_output=True,
        text=True,
        env=e,
        cwd=REPO,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    key = encode_key("numpy-ma-README.rst")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "asset",
            "materialize",
            "-m",
            "situate.pipelines.definitions",
            "--select",
            "raw_documents,chunks,fitted_preambles,blurbs,embeddings",
            "--partition",
            key,
        ],
        capture_output=True,
        text=True,
        env=e,
        cwd=REPO,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "RUN_SUCCESS" in out.stderr + out.stdout
    ev = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("embeddings"))
    assert ev.dagster_event.partition == key
    assert ev.asset_materialization.metadata["rows"].value >= 1
    # several documents in one run: a partition range (the model-free stages keep it quick)
    keys = dg.DagsterInstance.get().get_dynamic_partitions("documents")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "asset",
            "materialize",
            "-m",
            "situate.pipelines.definitions",
            "--select",
            "raw_documents,chunks",
            "--partition-range",
            f"{keys[0]}...{keys[-1]}",
        ],
        capture_output=True,
        text=True,
        env=e,
        cwd=REPO,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    ev = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("chunks"))
    run = dg.DagsterInstance.get().get_run_by_id(ev.run_id)
    assert run.tags["dagster/asset_partition_range_start"] == keys[0]
    assert ev.asset_materialization.metadata["documents_ok"].value == len(keys) - 1  # broken.txt is skipped


def test_sensor_removes_a_deleted_document(env):
    from situate.contextual.table_checks import ids_match
    from situate.pipelines.automation import documents_sensor
    from situate.pipelines.definitions import build_definitions

    store = _store(env)
    gone = encode_key("numpy-ma-README.rst")
    assert store.document_states().get(gone)
    (env["docs"] / "numpy-ma-README.rst").unlink()
    from situate.pipelines.settings import resources_from_env

    defs = build_definitions(plain=True)
    instance = dg.DagsterInstance.get()
    ctx = dg.build_sensor_context(instance=instance, definitions=defs, resources=resources_from_env(plain=True))
    result = documents_sensor(ctx)
    deletes = [r for r in result.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    assert deletes and deletes[0].partition_keys == [gone]
    assert gone not in store.document_states()
    ok, figures = ids_match(store)
    assert ok and figures["table_rows"] == store.count_rows()
    from situate.resources.store.retrieval import bm25_ids

    assert not any(i.startswith(gone + ":") for i in bm25_ids(store.bm25_dir))


def test_embedder_cuts_long_text_on_purpose_and_normalises(env):
    import numpy as np

    from situate.pipelines.settings import resources_from_env

    embedder = resources_from_env(plain=True)["embedder"]
    long_text = " ".join(f"token{i}" for i in range(3000))  # far over the default's 512 tokens
    vecs, n_cut = embedder.embed_documents([long_text, "a short sentence"])
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32 and n_cut == 1
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def test_a_copy_under_another_name_costs_no_model_call(env):
    """Same bytes under a new name (with a space, a comma and non-ASCII letters): a new document,
    new rows, and every blurb and vector comes from the content-keyed caches."""
    import shutil

    from situate.pipelines.cli import ingest
    from situate.resources.models.llm import CALLS

    src = env["docs"] / "bm25s-README.md"
    copy = env["docs"] / "copy of bm25s, réadme.md"
    shutil.copy(src, copy)
    before = _store(env).document_states()[encode_key("bm25s-README.md")]["rows"]
    CALLS.clear()
    try:
        out = ingest(str(env["docs"]), str(env["home"]), echo=lambda *_: None)
        assert out.ingested == 1 and set(out.failed) <= {encode_key("broken.txt")}
        assert CALLS["llm_generate"] == 0 and CALLS["embed_texts"] == 0
        assert _store(env).document_states()[encode_key(copy.name)]["rows"] == before
    finally:
        copy.unlink()
        ingest(str(env["docs"]), str(env["home"]), echo=lambda *_: None)
    assert encode_key(copy.name) not in _store(env).document_states()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(env, port: int, *extra: str, token: str | None = None) -> subprocess.Popen:
    """``situate serve`` as a real process on a loopback port, ready when /health answers."""
    import time
    import urllib.request

    child_env = os.environ | env["settings"] | ({"SITUATE_API_TOKEN": token} if token else {})
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "situate.pipelines.cli",
            "serve",
            "--port",
            str(port),
            "--home",
            str(env["home"]),
            *extra,
        ],
        cwd=REPO,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/health", headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    for _ in range(240):  # start-up: imports, then uvicorn binds
        if child.poll() is not None:
            raise AssertionError(f"situate serve exited {child.returncode}: {child.stdout.read()}")
        try:
            urllib.request.urlopen(req, timeout=5).read()
            return child
        except OSError:
            time.sleep(0.5)
    child.kill()
    raise AssertionError("situate serve did not answer /health")


def _http(method: str, url: str, body: bytes | None = None, headers: dict | None = None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        url, data=body, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), dict(e.headers)


def test_the_service_answers_over_http_refuses_bad_input_and_sees_a_new_ingest(env):
    """`situate serve` as a process: the JSON of `situate search --json`, /health, the page, 4xx
    with a message for each bad input (and it keeps serving), and a document ingested while it
    runs in its next answer."""
    from situate.pipelines.cli import ingest

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    child = _serve(env, port)
    try:
        code, health, _ = _http("GET", f"{base}/health")
        rows = _store(env).count_rows()
        assert code == 200 and health["status"] == "ok" and health["table_rows"] == health["bm25_rows"] == rows
        query = "How do I parse a .env file into a dictionary of variables?"
        code, hits, _ = _http("GET", f"{base}/search?q={query.replace(' ', '+')}&k=3")
        assert code == 200 and [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["source"] == "dotenv/main.py"
        assert set(hits[0]) == HIT_KEYS
        code, posted, _ = _http("POST", f"{base}/search", json.dumps({"query": query, "k": 3}).encode())
        assert code == 200 and [h["chunk_id"] for h in posted] == [h["chunk_id"] for h in hits]
        code, _, headers = _http("GET", f"{base}/search?q=dotenv&k={rows + 5}")
        assert code == 200 and any(
            "more than the" in v for k, v in headers.items() if k.lower().startswith("x-situate-warning")
        )
        bad = [
            ("GET", "/search?q=&k=3", None, "q: String should have at least 1 character"),
            ("GET", "/search?q=x&k=0", None, "k: Input should be greater than or equal to 1"),
            ("GET", f"/search?q=x&k={10**9}", None, "k: Input should be less than or equal to 1000"),
            ("GET", "/search?q=x&rerank=-1", None, "rerank: Input should be greater than or equal to 0"),
            ("POST", "/search", b"{not json", "malformed JSON body"),
            ("POST", "/search", json.dumps({"query": "a" * 8001}).encode(), "at most 8000 characters"),
            ("POST", "/search", json.dumps({"query": "   "}).encode(), "empty query"),
        ]
        for method, path, body, message in bad:
            code, answer, _ = _http(method, base + path, body)
            assert code == 422 and message in answer["detail"], (path, code, answer)
        with __import__("urllib.request").request.urlopen(f"{base}/", timeout=30) as r:
            page = r.read().decode()
        assert r.status == 200 and 'id="q"' in page and "textContent" in page and "innerHTML" not in page
        code, spec, _ = _http("GET", f"{base}/openapi.json")
        assert code == 200 and {"/search", "/health"} <= set(spec["paths"])
        # a document ingested while the service runs is in its next answer, with no restart
        (env["docs"] / "sourdough.md").write_text(
            "# Sourdough starter\n\nFeed the sourdough starter with equal weights of rye flour and water "
            "every twelve hours, and keep it at about 24 degrees.\n"
        )
        summary = ingest(str(env["docs"]), str(env["home"]), echo=lambda *_: None)
        assert summary.ingested >= 1 and "sourdough.md" not in summary.failed
        code, hits, _ = _http("GET", f"{base}/search?q=how+often+do+I+feed+the+sourdough+starter&k=3")
        assert code == 200 and hits[0]["source"] == "sourdough.md"
        code, health, _ = _http("GET", f"{base}/health")
        assert health["table_rows"] == _store(env).count_rows() > rows
    finally:
        child.terminate()
        child.wait(60)


def test_the_service_refuses_other_hosts_other_sites_and_big_bodies(env):
    """Issue 24: DNS rebinding (a forged ``Host``), a cross-site browser request, a 64 MB body
    announced and a chunked one, each against `situate serve` as a process; /health names the data
    folder without its path."""
    import http.client

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    child = _serve(env, port)
    try:
        # a page on evil.example whose name now resolves to 127.0.0.1 sends its own Host
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/search?q=dotenv", headers={"Host": f"evil.example:{port}"})
        r = conn.getresponse()
        assert r.status == 400 and r.read() == b"Invalid host header"  # Starlette's TrustedHostMiddleware
        conn.close()
        code, hits, _ = _http("GET", f"{base}/search?q=dotenv&k=2", headers={"Host": f"localhost:{port}"})
        assert code == 200 and len(hits) == 2
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Origin": f"http://127.0.0.1:{port + 1}"},
        ):
            code, answer, _ = _http("GET", f"{base}/search?q=dotenv", headers=headers)
            assert code == 403 and "cross-site" in answer["detail"], headers
        # the service's own page (same origin) is answered
        code, hits, _ = _http(
            "GET", f"{base}/search?q=dotenv&k=1", headers={"Origin": base, "Sec-Fetch-Site": "same-origin"}
        )
        assert code == 200 and len(hits) == 1
        # 64 MB announced, 1 KB sent: answered 413 without waiting for the rest
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.putrequest("POST", "/search")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(64 * 2**20))
        conn.endheaders()
        conn.send(b"{" + b" " * 1023)
        r = conn.getresponse()
        assert r.status == 413 and "request body over 65,536 bytes" in json.loads(r.read())["detail"]
        conn.close()
        # a chunked body with no length: refused once it passes the limit
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = (json.dumps({"query": "x"})[:-1] + " " * 200_000 + "}").encode()
        conn.request(
            "POST",
            "/search",
            body=iter([body[i : i + 8192] for i in range(0, len(body), 8192)]),
            headers={"Content-Type": "application/json"},
            encode_chunked=True,
        )
        r = conn.getresponse()
        assert r.status == 413, r.read()
        conn.close()
        code, health, _ = _http("GET", f"{base}/health")
        assert code == 200 and health["home"] == Path(env["home"]).name and str(env["home"]) not in json.dumps(health)
    finally:
        child.terminate()
        child.wait(60)


def test_the_service_wants_a_token_off_loopback_and_checks_it(env):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "situate.pipelines.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(_free_port()),
            "--home",
            str(env["home"]),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={k: v for k, v in (os.environ | env["settings"]).items() if k != "SITUATE_API_TOKEN"},
        timeout=300,
    )
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "situate: error: --host 0.0.0.0 is not a loopback address: set SITUATE_API_TOKEN (clients send it as a "
        "bearer token) or bind 127.0.0.1"
    ]
    port = _free_port()
    child = _serve(env, port, token="s3cret-token")
    try:
        code, answer, headers = _http("GET", f"http://127.0.0.1:{port}/search?q=dotenv")
        assert code == 401 and "bearer token" in answer["detail"]
        code, _, _ = _http("GET", f"http://127.0.0.1:{port}/search?q=dotenv", headers={"Authorization": "Bearer wrong"})
        assert code == 401
        code, hits, _ = _http(
            "GET", f"http://127.0.0.1:{port}/search?q=dotenv&k=2", headers={"Authorization": "Bearer s3cret-token"}
        )
        assert code == 200 and len(hits) == 2
    finally:
        child.terminate()
        child.wait(60)


def test_an_mcp_client_lists_the_search_tool_and_gets_hits(env):
    """The `mcp` package's own stdio client against `situate mcp` as a process."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "situate.pipelines.cli", "mcp", "--home", str(env["home"])],
        env={k: v for k, v in (os.environ | env["settings"]).items()},
        cwd=str(REPO),
    )

    async def session_run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                info = await session.initialize()
                tools = await session.list_tools()
                result = await session.call_tool(
                    "search", {"query": "How do I parse a .env file into a dictionary of variables?", "k": 3}
                )
                bad = await session.call_tool("search", {"query": "   ", "k": 3})
                return info, tools, result, bad

    info, tools, result, bad = anyio.run(session_run)
    assert info.server_info.version == importlib.metadata.version("situate")
    (tool,) = [t for t in tools.tools if t.name == "search"]
    assert set(tool.input_schema["properties"]) == {"query", "k"}
    assert not result.is_error
    hits = result.structured_content["result"]
    assert [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["source"] == "dotenv/main.py"
    assert hits[0]["location"].startswith("dotenv/main.py:") and hits[0]["matched"]
    assert bad.is_error and "empty query" in bad.content[0].text


def test_concurrent_mcp_tool_calls_through_the_client_each_get_their_own_hits(env):
    """Issue 24: the MCP server runs tool calls in parallel threads; with one llama.cpp embedder
    behind them, eight searches at once through the `mcp` client (four questions, twice each)
    get exactly what each gets alone, and an oversized query is refused."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "situate.pipelines.cli", "mcp", "--home", str(env["home"])],
        env={k: v for k, v in (os.environ | env["settings"]).items()},
        cwd=str(REPO),
    )
    questions = [
        "How do I parse a .env file into a dictionary of variables?",
        "BM25 scoring of documents",
        "masked arrays in numpy",
        "find the .env file by walking up the directories",
    ]

    async def session_run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                alone = [await session.call_tool("search", {"query": q, "k": 3}) for q in questions]
                together = [None] * (2 * len(questions))

                async def one(i):
                    together[i] = await session.call_tool("search", {"query": questions[i % len(questions)], "k": 3})

                async with anyio.create_task_group() as tg:
                    for i in range(len(together)):
                        tg.start_soon(one, i)
                big = await session.call_tool("search", {"query": "x" * 8001, "k": 3})
                return alone, together, big

    alone, together, big = anyio.run(session_run)
    ids = [[h["chunk_id"] for h in r.structured_content["result"]] for r in alone]
    assert all(len(i) == 3 for i in ids)
    for n, r in enumerate(together):
        assert not r.is_error and [h["chunk_id"] for h in r.structured_content["result"]] == ids[n % len(questions)]
    assert big.is_error and "at most 8,000 characters" in big.content[0].text


def test_the_search_page_in_a_real_browser(env):
    """Headless Chromium (Debian's chromium and chromium-driver, installed by `make test`) loads
    the page of `situate serve`, a query is typed, and the hits' sources, blurbs and contexts are
    read back from the page."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver_path, browser = shutil.which("chromedriver"), shutil.which("chromium")
    if not (driver_path and browser):
        if os.environ.get("CI"):
            raise AssertionError("chromium and chromium-driver are missing: `make test` installs them")
        pytest.skip("chromium and chromium-driver not installed (make test installs them)")
    port = _free_port()
    child = _serve(env, port)
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        box = driver.find_element(By.ID, "q")
        box.send_keys("How do I parse a .env file into a dictionary of variables?")
        driver.find_element(By.ID, "go").click()
        WebDriverWait(driver, 120).until(ec.presence_of_element_located((By.CSS_SELECTOR, "#results .hit")))
        sources = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results .hit .source")]
        assert len(sources) == 10 and re.fullmatch(r"1\. dotenv/main\.py:\d+(-\d+)?", sources[0]), sources[0]
        first = driver.find_elements(By.CSS_SELECTOR, "#results .hit")[0]
        assert first.find_element(By.CSS_SELECTOR, ".context").text.startswith("main.py")  # set apart from the text
        shown = first.find_element(By.CSS_SELECTOR, ".text").text  # the matched lines, numbered
        assert re.match(r" *\d+ \| ", shown) and "\n" in shown, shown
        assert "hits in" in driver.find_element(By.ID, "status").text
        assert "q=How+do+I+parse" in driver.current_url  # the search can be linked ...
        driver.get(f"http://127.0.0.1:{port}/?q=dotenv+values&k=5")  # ... and a link searches
        WebDriverWait(driver, 120).until(ec.text_to_be_present_in_element((By.ID, "status"), "5 hits in"))
        assert driver.find_element(By.ID, "q").get_attribute("value") == "dotenv values"
        driver.find_element(By.ID, "q").clear()
        driver.find_element(By.ID, "go").click()  # an empty query: the service's message on the page
        WebDriverWait(driver, 60).until(ec.text_to_be_present_in_element((By.ID, "status"), "at least 1 character"))
    finally:
        driver.quit()
        child.terminate()
        child.wait(60)


def test_the_langchain_and_llamaindex_retrievers_return_the_right_file_first(env):
    """The real libraries' base classes (langchain-core, llama-index-core), through their own
    public calls (`invoke`, `retrieve`)."""
    from langchain_core.documents import Document
    from llama_index.core.schema import NodeWithScore

    from situate.integrations.langchain import SituateRetriever as LangChainRetriever
    from situate.integrations.llamaindex import SituateRetriever as LlamaIndexRetriever

    query = "How do I parse a .env file into a dictionary of variables?"
    docs = LangChainRetriever(home=str(env["home"]), k=3).invoke(query)
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    assert docs[0].metadata["source"] == "dotenv/main.py" and docs[0].page_content
    assert {"blurb", "context", "chunk_index", "score"} <= set(docs[0].metadata)
    nodes = LlamaIndexRetriever(home=str(env["home"]), k=3).retrieve(query)
    assert len(nodes) == 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    assert nodes[0].node.metadata["source"] == "dotenv/main.py" and nodes[0].score > nodes[-1].score
    assert [n.node.node_id for n in nodes] == [d.id for d in docs]
