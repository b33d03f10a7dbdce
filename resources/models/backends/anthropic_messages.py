"""The blurb model through Anthropic's Messages API (:mod:`situate.resources.models.anthropic_api`):
prompts in :class:`~situate.resources.models.anthropic_api.ChatTokenizer` tokens (UTF-8 bytes),
sent as a system line, a cached document block, the chunk's block and the answer's start."""

from __future__ import annotations

from situate.resources.models.anthropic_api import ChatTokenizer, MessagesClient, identity
from situate.resources.models.backends.base import LlmBackend
from situate.resources.models.llm import _CACHE, CALLS, Generation, count_api_usage
from situate.resources.models.server import ServerError


def messages_client(settings) -> MessagesClient:
    """The process-wide :class:`~situate.resources.models.anthropic_api.MessagesClient` for these
    settings, checked (:meth:`~situate.resources.models.anthropic_api.MessagesClient.check`) on
    first use; kept in ``_CACHE`` under ``("server", "anthropic", …)``, which
    :func:`~situate.resources.models.llm.forget_servers` drops.

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
        ``served_model`` (the Claude model), ``server_key``, ``server_url`` (an optional gateway),
        ``server_retries``, ``server_timeout`` (seconds).

    Raises
    ------
    situate.resources.models.server.ServerError
        As the client and its check (no model or key, a wrong key, an unknown model, an
        unreachable endpoint).
    """
    s = settings
    key = ("server", "anthropic", s.server_url, s.served_model, hash(s.server_key), s.server_retries, s.server_timeout)
    client = _CACHE.get(key)
    if client is None:
        client = MessagesClient(
            s.served_model, s.server_key, s.server_url, retries=s.server_retries, timeout=s.server_timeout
        )
        client.check()
        _CACHE[key] = client
    return client


class AnthropicBackend(LlmBackend):
    """Anthropic's Messages API runs the model (``api="anthropic"``); its client is reached through
    the settings (:meth:`situate.resources.models.llm.BlurbLLM.api_client`, checked once a process).
    ``model_path`` is not read.

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
        ``served_model``, ``server_key``, ``server_url`` and the ``server_*`` and ``batch_*`` fields.
    """

    remote = True

    def model_id(self) -> str:
        """The model id the API gives for ``served_model`` (a dated snapshot for an alias).

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`messages_client`.
        """
        return self.settings.api_client().info.model

    def identity(self) -> str:
        """sha256 hex of ``anthropic|<model id>`` (:func:`situate.resources.models.anthropic_api.identity`).

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`messages_client`.
        """
        return identity(self.settings.api_client().info.model)

    def kind(self) -> str:
        """``anthropic-messages <scheme://host[:port]>``, or ``anthropic-batches <…>`` with ``api_batch``.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`messages_client`.
        """
        return f"anthropic-{'batches' if self.settings.api_batch else 'messages'} {self.settings.api_client().info.url}"

    def describe(self) -> str:
        """``anthropic-messages <scheme://host[:port]> (<model id>; the document block marked
        cache_control; windows fitted in UTF-8 bytes; prompt tokens reused: reported)``.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`messages_client`.
        """
        info = self.settings.api_client().info
        return (
            f"anthropic-messages {info.url} ({info.model}; the document block marked cache_control; "
            f"windows fitted in UTF-8 bytes; prompt tokens reused: {self.reuse()})"
        )

    def reuse(self) -> str:
        """``reported``: the API counts its cache reads (``cache_read_input_tokens``)."""
        return "reported"

    def tokenizer(self) -> ChatTokenizer:
        """:class:`~situate.resources.models.anthropic_api.ChatTokenizer`: UTF-8 bytes, a bound on
        the model's tokens."""
        return ChatTokenizer()

    def generate(
        self, tokens: list[int], stop: list[str] | None = None, max_tokens: int | None = None, grammar: str = ""
    ) -> Generation:
        """``tokens`` (a :class:`~situate.resources.models.anthropic_api.ChatTokenizer` prompt) as
        one Messages request; its usage added to :data:`situate.resources.models.llm.API_USAGE`.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :meth:`situate.resources.models.anthropic_api.MessagesClient.complete`, or a grammar
            was asked for (the API has none).
        """
        if grammar:
            raise ServerError(
                "a prompt with a grammar (SITUATE_PROMPT) needs a llama.cpp model: Anthropic's API has no grammars"
            )
        system, blocks, answer = ChatTokenizer().split(tokens)
        CALLS["llm_generate"] += 1
        c = self.settings.api_client().complete(
            system, blocks, answer, max_tokens or self.settings.max_tokens, stop or []
        )
        reused = c.cached_tokens or 0
        count_api_usage(c.prompt_tokens - reused, c.written, reused, c.generated)
        return Generation(
            c.text, c.prompt_tokens, c.prompt_tokens - reused, reused, c.generated, c.seconds, written=c.written
        )

    def generate_lines(
        self,
        tokens: list[int],
        starts: list[str],
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        grammar: str = "",
    ) -> Generation:
        """Refused: a one-generation prompt continues the model's own tokens line by line.

        Raises
        ------
        ValueError
            Always.
        """
        raise ValueError(
            "a one-generation prompt (SITUATE_PROMPT=by-reference-window) continues the model's "
            "own tokens line by line: it needs a llama.cpp model, not Anthropic's API"
        )

    def batch_round(self):
        """A new :class:`situate.resources.models.message_batches.MessageBatchRound` for one run
        (half the price, ``poll_s``/``wait_s`` from ``batch_poll_s``/``batch_wait_s``, seconds), or
        None when ``api_batch`` is off.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :func:`messages_client`.
        """
        if not self.settings.api_batch:
            return None
        from situate.resources.models.message_batches import MessageBatchRound

        s = self.settings
        return MessageBatchRound(s.api_client(), poll_s=s.batch_poll_s, wait_s=s.batch_wait_s)
