"""What a model server answers is untrusted: the client (``situate.resources.models.server``)
against a HOSTILE loopback server (``tests/hostile_llm_server.py``) that quotes the key back,
trickles its headers, answers megabytes or values of the wrong type, or changes its vectors'
width; and what the ingest summary says of prompt-token reuse a server does not report.

Fast: no model runs (the client is checked against the server's stand-in tokens)."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import ingest_with, needs_models
from hostile_llm_server import TOKENS, started

KEY = "sk-SECRET/8842-do-not-log"


@pytest.fixture
def hostile():
    server = started()
    yield server
    server.stop()


def _client(server, settings="SITUATE_LLM", **kw):
    from situate.resources.models.server import ServerClient

    model = kw.pop("model", "hostile-model")
    return ServerClient(server.url, model, kw.pop("key", KEY), retries=0, settings=settings, **kw)


def _complete(client, max_tokens: int = 8):
    return client.complete("a prompt about keys", 1, max_tokens, [], 1.0, 0)


def _refused(call) -> str:
    from situate.resources.models.server import ServerError

    with pytest.raises(ServerError) as e:
        call()
    return str(e.value)


def test_a_key_the_server_quotes_back_is_in_no_error(hostile):
    """A 400 quoting the request's Authorization header (as sent, and JSON-escaped), a 200 without
    choices quoting it, an embeddings 400 quoting it: the error names the server, never the key;
    a model listed under the key's name is not taken."""
    llm, embed = _client(hostile), _client(hostile, "SITUATE_EMBED")
    from situate.resources.models.server import embeddings

    for mode in ("echo400", "echo400_escaped", "echo200"):
        hostile.mode = mode
        why = _refused(lambda: _complete(llm))
        assert hostile.url in why and "***" in why, why
        assert "SECRET" not in why and "8842" not in why, why
    hostile.mode = "echo400"
    why = _refused(lambda: embeddings(embed, ["text"]))
    assert "HTTP 400" in why and "***" in why and "SECRET" not in why, why
    # a listing that names its model after the key: the name would be in every row, so refused
    hostile.models = [f"Bearer {KEY}"]
    why = _refused(lambda: _client(hostile, model="").check(lambda text: TOKENS))
    assert "lists a model whose name holds SITUATE_LLM_API_KEY" in why and "SECRET" not in why, why


def test_the_timeout_bounds_a_server_trickling_its_headers(hostile):
    """A header line every 0.3 s never trips a per-read timeout; SITUATE_LLM_TIMEOUT bounds the
    exchange in all, headers included (a trickled body as well)."""
    for mode in ("slow_headers", "slow_body"):
        hostile.mode = mode
        out: dict = {}

        def go(out=out):
            t0 = time.monotonic()
            try:
                _complete(_client(hostile, timeout=1))
            except Exception as e:  # noqa: BLE001 - the test reads it
                out["error"] = str(e)
            out["seconds"] = time.monotonic() - t0

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(15)
        assert not t.is_alive(), f"{mode}: still waiting after 15 s with a timeout of 1 s"
        assert "did not answer within 1 s (SITUATE_LLM_TIMEOUT)" in out["error"], out
        assert out["seconds"] < 3, out


def test_an_answer_over_what_max_tokens_can_spell_is_refused(hostile):
    """Asked for 8 tokens: a 2 MiB text, or 2 MiB of nested lists, is refused before it is parsed
    (by its size); a text a little over 8 tokens' worth is refused after; one within it is kept."""
    from situate.resources.models.server import MAX_TOKEN_CHARS

    client = _client(hostile)
    for mode in ("huge_text", "json_amp"):
        hostile.mode = mode
        why = _refused(lambda: _complete(client))
        assert "what SITUATE_MAX_TOKENS=8 generated tokens can take" in why and "(SITUATE_LLM_URL)" in why, why
    hostile.mode, hostile.long_chars = "long_text", 8 * MAX_TOKEN_CHARS + 1
    why = _refused(lambda: _complete(client))
    assert f"a completion of {8 * MAX_TOKEN_CHARS + 1:,} characters" in why and "SITUATE_MAX_TOKENS" in why, why
    hostile.long_chars = 8 * MAX_TOKEN_CHARS
    assert len(_complete(client).text) == 8 * MAX_TOKEN_CHARS


def test_an_embeddings_answer_of_another_width_than_the_checked_one_is_refused(hostile):
    """The server answered 8-wide vectors at its check; a later answer 4 wide (its model changed
    under the same name) is a ServerError naming SITUATE_EMBED_URL, not a change of embedder."""
    from situate.resources.models.server import embeddings

    client = _client(hostile, "SITUATE_EMBED")
    info = client.check(lambda text: TOKENS, kind="embeddings")
    assert client.width == 8 and info.served_as.endswith("|8")
    hostile.mode = "width_flip"
    assert [len(v) for v in embeddings(client, ["one", "two"])] == [8, 8]  # the first answer: 8 wide
    why = _refused(lambda: embeddings(client, ["three"]))
    assert "answered vectors 4 numbers wide where its start-up check answered 8" in why, why
    assert "(SITUATE_EMBED_URL, SITUATE_EMBED_SERVED_MODEL)" in why


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("neg_tokens", "usage.completion_tokens = -123456789, not a token count"),
        ("inf_tokens", "usage.prompt_tokens = inf, not a token count"),
        ("text_obj", "choices[0].text is a JSON dict, not text"),
    ],
)
def test_a_completion_of_the_wrong_types_is_named(hostile, mode, said):
    hostile.mode = mode
    why = _refused(lambda: _complete(_client(hostile)))
    assert said in why and "(SITUATE_LLM_URL)" in why, why


@pytest.mark.parametrize(("mode", "said"), [("bools", "True"), ("nan", "nan"), ("bigfloat", "1e+300")])
def test_a_vector_of_anything_but_finite_numbers_is_named(hostile, mode, said):
    from situate.resources.models.server import embeddings

    hostile.mode = mode
    why = _refused(lambda: embeddings(_client(hostile, "SITUATE_EMBED"), ["text"]))
    assert f"a vector holds {said}, not a finite number" in why and "(SITUATE_EMBED_URL)" in why, why


def test_reuse_a_server_does_not_report_is_said_so_never_zero():
    """A server that reports no cached prompt tokens (llama-cpp-python's): each record says its
    reuse was not reported, and the document's summary, the run's totals and the ingest summary
    say "not reported by this server"; one that reports them is summed as before."""
    from situate.contextual.contextualize import BlurbRecord
    from situate.contextual.document_blurbs import blurb_summary, blurb_totals
    from situate.pipelines.operations import IngestSummary

    def rec(reported: bool, reused: int = 0) -> BlurbRecord:
        return BlurbRecord("b", "model", "b", [], 100, 100 - reused, reused, 9, 0.1, 0, reuse_reported=reported)

    quiet = blurb_summary([rec(False), rec(False)])
    assert quiet["prompt_tokens_reused"] == quiet["reuse_ratio"] == "not reported by this server"
    assert quiet["model_calls_reuse_not_reported"] == 2
    assert blurb_totals({"a.md": quiet})["prompt_tokens_reused_total"] == "not reported by this server"
    s = IngestSummary()
    s.add_document("a.md", quiet)
    said = "prompt tokens sent: 200, reused from the KV cache: not reported by this server; generated: 18"
    assert said in s.lines(), s.lines()
    counted = blurb_summary([rec(True, 60), rec(True, 40)])
    assert counted["prompt_tokens_reused"] == 100 and counted["model_calls_reuse_not_reported"] == 0
    assert blurb_totals({"a.md": quiet, "b.md": counted})["prompt_tokens_reused_total"] == 100
    s.add_document("b.md", counted)
    assert any(
        "reused from the KV cache: 100 (not reported by the server for 2 of 4 calls)" in line for line in s.lines()
    )


def test_a_completion_says_whether_its_server_reported_reuse(hostile, monkeypatch):
    """The client's Completion: ``cached_tokens`` None where the server reports none, its count
    where it does; :meth:`BlurbLLM.generate` through the server carries it as ``reuse_reported``."""
    from situate.resources.models.llm import BlurbLLM

    client = _client(hostile)
    assert _complete(client).cached_tokens is None
    hostile.mode = "ok_cached"
    assert _complete(client).cached_tokens == 7
    llm = BlurbLLM(model_path="unused.gguf", server_url=hostile.url, served_model="hostile-model", server_retries=0)

    class Vocab:  # the local GGUF's vocabulary, as far as _server_generate reads it
        def token_bos(self):
            return 0

        def detokenize(self, tokens, special=True):
            return b"x" * len(tokens)

        def tokenize(self, text, add_bos=True, special=True):
            return list(range(len(text) + 1))

    monkeypatch.setattr(BlurbLLM, "load", lambda self, vocab_only=False: Vocab())
    monkeypatch.setattr(BlurbLLM, "server", lambda self: client)
    gen = llm.generate([0] + [5] * 30)
    assert gen.reuse_reported and gen.reused == 7
    hostile.mode = "ok"
    gen = llm.generate([0] + [5] * 30)
    assert not gen.reuse_reported and gen.reused == 0


@needs_models
def test_a_document_failed_by_a_bad_embeddings_answer_is_finished_by_the_next_run(tmp_path):
    """Ingest through the hostile embeddings server: its second answer is 4 wide where its check
    answered 8, so one document fails by name and no row of it is written; with the server well
    again, the next ingest finishes it and reports nothing failed (the earlier run's error does not
    stay behind)."""
    import llama_cpp

    from situate.resources.models import registry as models
    from situate.resources.models.server import PROBE

    gguf = str(models.path_of(models.LLM))
    tokens = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False).tokenize(
        PROBE.encode("utf-8"), add_bos=True, special=True
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "billing.md").write_text("# Refunds\n\nA refund is issued to the card that paid.\n")
    (docs / "keys.md").write_text("# Key rotation\n\nThe signing service rotates its keys every night.\n")
    server = started("width_flip", tokens)
    env = {
        "SITUATE_CONTEXT": "structure",
        "SITUATE_CODE_CONTEXT": "structure",
        "SITUATE_EMBED_URL": server.url,
        "SITUATE_EMBED_SERVED_MODEL": "hostile-model",
        "SITUATE_EMBED_MODEL": gguf,
        "SITUATE_LLM_RETRIES": "0",
        "SITUATE_DOCS_PER_RUN": "1",  # one embeddings request a document
    }
    try:
        first = ingest_with(docs, tmp_path / "home", **env)
        server.mode = "ok"
        again = ingest_with(docs, tmp_path / "home", **env)
    finally:
        server.stop()
    assert len(first.failed) == 1, first.failed
    ((bad, why),) = first.failed.items()
    assert "answered vectors 4 numbers wide where its start-up check answered 8" in why, why
    assert again.failed == {}, again.failed
    from situate.resources.store.store import Store

    rows = Store(home=str(tmp_path / "home")).columns(["source"]).to_pylist()
    assert sorted(r["source"] for r in rows) == ["billing.md", "keys.md"]
