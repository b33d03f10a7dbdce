"""The blurb model behind an OpenAI-compatible server (llama-server, ``llama_cpp.server``, vLLM):
prompts built with the served model's GGUF vocabulary on this machine, sent as text through
:class:`situate.resources.models.server.ServerClient`.  llama-server's slots (``id_slot``) are
handled here and nowhere else."""

from __future__ import annotations

import hashlib
import urllib.parse

from situate.resources.models.backends.base import LlmBackend, line_sequence
from situate.resources.models.llm import _CACHE, CALLS, Generation, LlmTokenizer, model_lock
from situate.resources.models.server import ServerClient, check_served_context, worker_slot


def server_client(settings) -> ServerClient:
    """The process-wide :class:`~situate.resources.models.server.ServerClient` for ``server_url``,
    checked (:meth:`~situate.resources.models.server.ServerClient.check`) on first use against
    the local GGUF's vocabulary; kept in ``_CACHE`` under ``("server", url, …)``, which
    :func:`~situate.resources.models.llm.forget_servers` drops.

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
        ``server_url``, ``served_model``, ``server_key``, ``server_retries``, ``server_timeout``
        (seconds), ``n_ctx`` (tokens) and ``model_path`` (the served model's GGUF).

    Raises
    ------
    situate.resources.models.server.ServerError
        As ``check``; or the server's context is smaller than ``n_ctx`` (a
        :class:`~situate.resources.models.server.ContextExceeded` naming both).
    """
    s = settings
    key = ("server", s.server_url, s.served_model, hash(s.server_key), s.server_retries, s.server_timeout)
    client = _CACHE.get(key)
    if client is None:
        client = ServerClient(
            s.server_url, s.served_model, s.server_key, retries=s.server_retries, timeout=s.server_timeout
        )
        vocab = s.load(vocab_only=True)
        info = client.check(lambda t: vocab.tokenize(t.encode("utf-8"), add_bos=True, special=True))
        check_served_context(info, s.n_ctx)
        _CACHE[key] = client
    return client


class ServerBackend(LlmBackend):
    """An OpenAI-compatible ``/v1/completions`` server runs the model.  Its client is reached
    through the settings (:meth:`situate.resources.models.llm.BlurbLLM.server`, checked once a
    process), its tokens are the local GGUF's vocabulary (checked against the server's).

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
        ``server_url`` and the ``server_*`` fields, ``model_path`` (the served model's GGUF).
    """

    remote = True

    def model_id(self) -> str:
        """``served_model``, else the model the server lists first.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`server_client`.
        """
        return self.settings.served_model or self.settings.server().info.model

    def identity(self) -> str:
        """sha256 hex of ``openai-compatible|<served model>|<what it says served it>`` (the model
        file llama-cpp-python's server names, a ``system_fingerprint``), so a server's blurbs are
        never taken for the local file's, nor one served model's for another's under the same name.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`server_client`.
        """
        info = self.settings.server().info
        return hashlib.sha256(f"openai-compatible|{info.model}|{info.served_as}".encode()).hexdigest()

    def _origin(self) -> urllib.parse.SplitResult:
        return urllib.parse.urlsplit(self.settings.server_url)

    def kind(self) -> str:
        """``openai-compatible <scheme://host[:port]>``."""
        p = self._origin()
        return f"openai-compatible {p.scheme}://{p.hostname}{':' + str(p.port) if p.port else ''}"

    def describe(self) -> str:
        """``openai-compatible <scheme://host:port> (<dialect>; context <n> tokens | context not
        reported; prompt tokens reused: <reuse>)``.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`server_client`.
        """
        p = self._origin()
        info = self.settings.server().info
        ctx = f"context {info.n_ctx} tokens" if info.n_ctx else "context not reported"
        return f"openai-compatible {p.scheme}://{p.hostname}:{p.port or ''} ({info.dialect}; {ctx}; prompt tokens reused: {self.reuse()})"  # noqa: E501

    def reuse(self) -> str:
        """``not reported`` by llama-cpp-python's server, else ``reported where the server counts them``.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`server_client`.
        """
        dialect = self.settings.server().info.dialect
        return "not reported" if dialect == "llama-cpp-python" else "reported where the server counts them"

    def tokenizer(self) -> LlmTokenizer:
        """The served model's GGUF tokenizer (vocabulary only), which never lets document text spell
        a control token (the prompt is sent as text).

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            As :meth:`situate.resources.models.llm.BlurbLLM.load`.
        """
        return LlmTokenizer(self.settings.load(vocab_only=True), defuse=True)

    def generate(
        self, tokens: list[int], stop: list[str] | None = None, max_tokens: int | None = None, grammar: str = ""
    ) -> Generation:
        """The prompt as text (control tokens spelled as the chat template has them; a leading BOS
        is the server's to add), on the slot of this document worker (llama-server's ``id_slot``,
        :func:`~situate.resources.models.server.worker_slot`), so each document's prefix stays in
        one slot's cache.

        Raises
        ------
        situate.resources.models.server.ServerError
            The server failed after its retries, or cut the prompt.
        """
        s = self.settings
        vocab = s.load(vocab_only=True)
        bos = vocab.token_bos()
        body = tokens[1:] if tokens and bos >= 0 and tokens[0] == bos else tokens
        text = vocab.detokenize(body, special=True).decode("utf-8", "replace")
        # what the server reads: the whole text tokenized at once (a piece boundary may merge),
        # counted with the same vocabulary, so a cut prompt is told exactly
        sent = len(vocab.tokenize(text.encode("utf-8"), add_bos=True, special=True))
        CALLS["llm_generate"] += 1
        c = s.server().complete(
            text, sent, max_tokens or s.max_tokens, stop or [], s.repeat_penalty, s.seed, grammar, slot=worker_slot()
        )
        reused = min(c.cached_tokens or 0, len(tokens))
        return Generation(
            c.text,
            len(tokens),
            len(tokens) - reused,
            reused,
            c.generated,
            c.seconds,
            reuse_reported=c.cached_tokens is not None,
        )

    def generate_lines(
        self,
        tokens: list[int],
        starts: list[str],
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        grammar: str = "",
    ) -> Generation:
        """Each line a request (:func:`~situate.resources.models.backends.base.line_sequence`),
        encoded with the vocabulary, whose lock is held throughout.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :meth:`generate`.
        """
        vocab = self.settings.load(vocab_only=True)  # a server: the tokenizer only
        with model_lock(vocab):
            return line_sequence(self, vocab, tokens, starts, stop, max_tokens, grammar, served=True)
