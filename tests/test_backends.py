"""What runs the blurb model is one object behind one interface
(``situate.resources.models.backends``): chosen once from the settings, and :class:`BlurbLLM`
delegates to it instead of asking ``api`` or ``server_url`` in each method.  The identities and
backend strings are the ones stored rows and caches already hold.

Fast: no model runs; the server and API clients are fakes (named so) holding what a checked
client learnt."""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
import threading

import dagster as dg
import pytest

from situate.resources.models import backends
from situate.resources.models.anthropic_api import ApiInfo
from situate.resources.models.llm import BlurbLLM
from situate.resources.models.server import Completion, ServerInfo


class FakeServerClient:
    """A checked ``ServerClient`` as far as the server backend reads it: ``info`` and ``complete``
    (which records the slot asked for and answers 3 tokens, 7 reused)."""

    def __init__(self, dialect: str = "llama-server", n_ctx: int | None = 8192):
        self.info = ServerInfo("http://h:8080", "served-model", dialect, n_ctx, served_as="fp-1")
        self.slots = []

    def complete(self, text, sent, max_tokens, stop, repeat_penalty, seed, grammar="", slot=None):
        self.slots.append(slot)
        return Completion("an answer", sent, 3, 7, 0.5)


class FakeMessagesClient:
    """A checked ``MessagesClient`` as far as the Anthropic backend's strings read it: ``info``."""

    info = ApiInfo("https://api.anthropic.com", "claude-model-20250101")


class FakeVocab:
    """A GGUF vocabulary as far as the server backend reads it: one token a byte, BOS 0."""

    def token_bos(self):
        return 0

    def detokenize(self, tokens, special=True):
        return b"x" * len(tokens)

    def tokenize(self, text, add_bos=True, special=True):
        return list(range(len(text) + int(add_bos)))


def test_each_backend_implements_the_whole_interface():
    for cls in (backends.InProcessBackend, backends.ServerBackend, backends.AnthropicBackend):
        assert issubclass(cls, backends.LlmBackend) and not cls.__abstractmethods__, cls


def test_the_backend_is_chosen_once_from_the_settings():
    local = BlurbLLM(model_path="/models/Foo-1.gguf")
    served = BlurbLLM(model_path="x.gguf", server_url="http://h:8080")
    api = BlurbLLM(model_path="x.gguf", api="anthropic", server_url="http://gateway:9000")
    assert isinstance(local.backend_object(), backends.InProcessBackend) and not local.remote
    assert isinstance(served.backend_object(), backends.ServerBackend) and served.remote
    assert isinstance(api.backend_object(), backends.AnthropicBackend) and api.remote
    # one object a process for settings equal field for field; another for other settings
    assert BlurbLLM(model_path="/models/Foo-1.gguf").backend_object() is local.backend_object()
    assert BlurbLLM(model_path="/models/Foo-1.gguf", max_tokens=7).backend_object() is not local.backend_object()
    # an unresolved dg.EnvVar is not the text of its name
    env = BlurbLLM(model_path="x.gguf", server_url=dg.EnvVar("SITUATE_LLM_URL"))
    assert env.backend_object() is not BlurbLLM(model_path="x.gguf", server_url="SITUATE_LLM_URL").backend_object()


def test_blurb_llm_asks_no_api_or_server_url_itself():
    """Every method of BlurbLLM delegates: none reads ``self.api`` or ``self.server_url``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(BlurbLLM)))
    read = sorted(
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in ("api", "server_url", "api_batch")
    )
    assert read == []


def test_in_process_strings_and_model_id():
    llm = BlurbLLM(model_path="/models/Foo-1.gguf")
    assert (llm.resolved_model_id(), llm.backend_kind(), llm.backend()) == ("Foo-1", "in-process", "in-process")
    assert BlurbLLM(model_path="/models/Foo-1.gguf", model_id="foo").resolved_model_id() == "foo"
    assert llm.batch_round() is None


def test_server_identity_strings_and_slot(monkeypatch):
    fake = FakeServerClient(dialect="llama-cpp-python", n_ctx=None)
    monkeypatch.setattr(BlurbLLM, "server", lambda self: fake)
    monkeypatch.setattr(BlurbLLM, "load", lambda self, vocab_only=False: FakeVocab())
    llm = BlurbLLM(model_path="x.gguf", server_url="http://user:pw@h:8080/v1", server_key="k")
    assert llm.identity() == hashlib.sha256(b"openai-compatible|served-model|fp-1").hexdigest()
    assert llm.resolved_model_id() == "served-model"
    assert llm.backend_kind() == "openai-compatible http://h:8080"
    assert llm.backend() == (
        "openai-compatible http://h:8080 (llama-cpp-python; context not reported; prompt tokens reused: not reported)"
    )
    fake.info = ServerInfo("http://h:8080", "served-model", "llama-server", 4096)
    assert llm.backend().endswith(
        "(llama-server; context 4096 tokens; prompt tokens reused: reported where the server counts them)"
    )
    with pytest.raises(ValueError, match="SITUATE_BATCH applies to the in-process model"):
        llm.batcher()
    # a document worker's thread asks for its own llama-server slot; another thread for none
    worker = threading.Thread(target=lambda: llm.generate([0, 5, 5]), name="situate-blurbs_3")
    worker.start()
    worker.join()
    g = llm.generate([0, 5, 5])
    assert fake.slots == [3, None]
    assert (g.prompt_tokens, g.reused, g.evaluated, g.reuse_reported) == (3, 3, 0, True)


def test_anthropic_identity_and_strings(monkeypatch):
    monkeypatch.setattr(BlurbLLM, "api_client", lambda self: FakeMessagesClient())
    llm = BlurbLLM(model_path="unused.gguf", api="anthropic", served_model="claude-alias")
    assert llm.identity() == hashlib.sha256(b"anthropic|claude-model-20250101").hexdigest()
    assert llm.resolved_model_id() == "claude-model-20250101"
    assert llm.backend_kind() == "anthropic-messages https://api.anthropic.com"
    assert llm.model_copy(update={"api_batch": True}).backend_kind() == "anthropic-batches https://api.anthropic.com"
    assert llm.backend() == (
        "anthropic-messages https://api.anthropic.com (claude-model-20250101; the document block marked "
        "cache_control; windows fitted in UTF-8 bytes; prompt tokens reused: reported)"
    )
    assert llm.tokenizer().encode("é") == list("é".encode())
    with pytest.raises(ValueError, match="needs a llama.cpp model"):
        llm.generate_lines([1], [])


def test_a_batch_round_needs_anthropic():
    from situate.resources.models.server import ServerError

    with pytest.raises(ServerError, match="needs SITUATE_LLM_API=anthropic"):
        BlurbLLM(model_path="x.gguf", api_batch=True).batch_round()
