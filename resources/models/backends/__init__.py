"""What runs the blurb model, one object a backend behind one interface (:class:`LlmBackend`):
llama-cpp-python in this process (:mod:`~situate.resources.models.backends.in_process`), an
OpenAI-compatible server (:mod:`~situate.resources.models.backends.openai_compatible`) or
Anthropic's Messages API (:mod:`~situate.resources.models.backends.anthropic_messages`).

:func:`llm_backend` chooses one from the settings, once a process for each set of settings;
:class:`situate.resources.models.llm.BlurbLLM` keeps the settings and delegates to it.
"""

from __future__ import annotations

from situate.resources.models.backends.anthropic_messages import AnthropicBackend, messages_client
from situate.resources.models.backends.base import LlmBackend
from situate.resources.models.backends.in_process import InProcessBackend
from situate.resources.models.backends.openai_compatible import ServerBackend, server_client
from situate.resources.models.llm import _CACHE

__all__ = [
    "AnthropicBackend",
    "InProcessBackend",
    "LlmBackend",
    "ServerBackend",
    "backend_class",
    "llm_backend",
    "messages_client",
    "server_client",
]


def backend_class(settings) -> type[LlmBackend]:
    """Which backend the settings ask for: Anthropic's API with ``api="anthropic"``, else a server
    with a ``server_url``, else the model in this process.

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
    """
    if settings.api == "anthropic":
        return AnthropicBackend
    if settings.server_url:
        return ServerBackend
    return InProcessBackend


def _settings_key(settings) -> tuple:
    """Every field of ``settings`` with its type (an unresolved ``dg.EnvVar`` is not its value),
    the key hashed (``server_key`` is never kept in a cache key)."""
    return tuple(
        (name, type(value).__name__, hash(value) if name == "server_key" else value)
        for name in type(settings).model_fields
        for value in [getattr(settings, name)]
    )


def llm_backend(settings) -> LlmBackend:
    """The process-wide backend for ``settings`` (:func:`backend_class`), made on first use and
    kept in ``_CACHE`` under ``("llm-backend", <every field>)``: settings equal field for field
    share one.  Making one reads nothing and connects nowhere; a server or an API is checked at
    its first use (:func:`server_client`, :func:`messages_client`).

    Parameters
    ----------
    settings : situate.resources.models.llm.BlurbLLM
    """
    key = ("llm-backend", *_settings_key(settings))
    backend = _CACHE.get(key)
    if backend is None:
        backend = _CACHE.setdefault(key, backend_class(settings)(settings))
    return backend
