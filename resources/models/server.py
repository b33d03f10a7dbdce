"""The blurb model behind an OpenAI-compatible server: llama-cpp-python's ``llama_cpp.server``,
llama.cpp's ``llama-server``, vLLM, SGLang, LM Studio.

situate builds each prompt token-exact with the served model's tokenizer, read from the same GGUF
on this machine (vocabulary only, :meth:`situate.resources.models.llm.BlurbLLM.tokenizer`); at start
:meth:`ServerClient.check` asks the server to tokenize a probe text and refuses a server whose
tokens differ, so the windows are fitted in the served model's own tokens.  A prompt is sent as
text to ``/v1/completions`` (llama-cpp-python's server takes no token ids); its tokens, chat
template markers included, are what the server reads again, because document text that spells a
control token is never sent as one (:func:`defuse_controls`).

The server's context is read where it is reported (``/props`` of llama-server,
``max_model_len`` of vLLM's ``/v1/models``; llama-cpp-python's server does not say).  A prompt
the server refused as too long, cut (it read fewer prompt tokens than were sent), or left too
little room to answer (it stopped at the length limit before ``max_tokens``: llama-cpp-python's
server lowers ``max_tokens`` to what its context leaves, silently) is a :class:`ContextExceeded`
naming the fix, never a shorter blurb stored as if it were whole.

Every request is retried on a refused or dropped connection, a timeout, HTTP 429 or 5xx, with
exponential backoff (``retries`` tries after the first, 1 s, 2 s, 4 s …); what still fails raises
:class:`ServerError` naming the setting to fix, so the document fails and the next run situates
it (the blurbs of its finished chunks are in the blurb cache).  The key is never in a message,
whatever the server quotes back (:meth:`ServerClient._hide`).

``timeout`` bounds each exchange in all, on the wall clock: connecting, sending, the answer's
headers and its body (every socket read and write is given only the time left,
:class:`_DeadlineBackend`), so a server that trickles its headers or its body is cut off there.
An answer is bounded before it is parsed by what was asked (a completion by what ``max_tokens``
tokens can spell, an embeddings answer by its vectors' width), and what it holds is checked:
token counts are whole numbers from 0 to :data:`MAX_USAGE_TOKENS`, a completion's text is text no
longer than ``max_tokens`` tokens can spell, a vector holds finite numbers as wide as the
server's vectors at start-up.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import urllib.parse

from situate.resources.errors import ContextExceeded, ServerError  # noqa: F401  (importable from here as before)

#: Longest answer read from a server: 16 MiB (a blurb is a few hundred bytes; a tokenize answer
#: of a 131,072-token document is about 1 MiB of JSON).
MAX_ANSWER_BYTES = 16 * 2**20
#: Largest token count taken from an answer's usage (as ``anthropic_api.MAX_USAGE_TOKENS``):
#: 10 million is 76 times the longest context situate serves (131,072 tokens); a larger or
#: negative count is not a count of one request.
MAX_USAGE_TOKENS = 10_000_000
#: Most characters one generated token can spell: the longest of Qwen2.5's 151,936 tokens is 32
#: characters (a run of spaces); 128 leaves room for vocabularies with longer runs.  A completion
#: text longer than ``max_tokens`` times this was not written under ``max_tokens``.
MAX_TOKEN_CHARS = 128
#: Most bytes one character of text takes in a JSON answer: 12 (a character beyond U+FFFF written
#: as two ``\uXXXX`` escapes).
JSON_CHAR_BYTES = 12
#: Most bytes one number of a vector takes in a JSON answer: 32 (``-1.2345678901234567e-308``,
#: 24 characters, with its separator and room to spare).
JSON_NUMBER_BYTES = 32
#: Bytes of an answer besides its text or vectors (ids, usage, timings, a server's extra fields):
#: 256 KiB, far over the 0.5 to 2 KB llama-server, llama_cpp.server and vLLM answer.
ANSWER_ENVELOPE_BYTES = 256 * 2**10
#: Largest absolute value of a vector's number: float32's largest (vectors are stored as float32).
FLOAT32_MAX = 3.4028234663852886e38
#: Control-token spellings of the chat templates situate meets (ChatML and Qwen, Llama 3, Phi,
#: Llama 2, Gemma, end-of-sequence marks): document text that spells one is sent with a zero-width
#: space after its first character, so a server that parses special tokens in text reads text.
_CONTROL = re.compile(r"<\|[A-Za-z0-9_]{1,40}\|>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>|</?s>")
#: The text :meth:`ServerClient.check` tokenizes on both sides: code, prose, non-ASCII and a
#: chat-template marker.
PROBE = 'def rotate_keys(grace_period=3600):\n    """Käse, 日本語 — naïve café."""\n<|im_start|>user\n'


def defuse_controls(text: str) -> str:
    """``text`` with every control-token spelling broken by a zero-width space (U+200B) after its
    first character, so a server that parses special tokens in prompt text reads it as text.

    >>> defuse_controls("a <|im_end|> b")
    'a <\\u200b|im_end|> b'
    """
    return _CONTROL.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], text)


def check_url(url: str, settings: str = "SITUATE_LLM") -> str:
    """``url`` without a trailing ``/`` and ``/v1``.

    Raises
    ------
    ServerError
        Not an ``http`` or ``https`` URL with a host; a user or password in it (it would be in
        every message and log: the key goes in ``<settings>_API_KEY``); a query or fragment.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError(f"{settings}_URL is not an http(s) URL with a host (for example http://127.0.0.1:8080)")
    if parts.username is not None or parts.password is not None:
        raise ServerError(
            f"{settings}_URL holds a user or password: put the server's key in {settings}_API_KEY "
            "(the URL is shown in messages and logs; the key never is)"
        )
    if parts.query or parts.fragment:
        raise ServerError(f"{settings}_URL has a query or fragment: give the server's base URL")
    return url.strip().rstrip("/").removesuffix("/v1")


def hide_key(text: str, key: str, mask: str = "***") -> str:
    """``text`` with ``key`` replaced by ``mask``, whatever put it there (a library's error quoting
    a header, a server quoting the request's ``Authorization`` header back), as is or JSON- or
    URL-escaped; ``text`` as is without a key."""
    if not key:
        return text
    forms = {key, json.dumps(key)[1:-1], key.replace("/", "\\/"), urllib.parse.quote(key)}
    for form in sorted(forms, key=len, reverse=True):  # the longest first: one may hold another
        text = text.replace(form, mask)
    return text


def served_name(name: str, key: str, what: str, key_setting: str, name_setting: str) -> str:
    """``name``, the model name a server or API answered, unless it holds ``key`` (:func:`hide_key`'s
    forms): the name is written into every row, the stage files and the run's metadata.

    Parameters
    ----------
    name : str
        The model name answered.
    key : str
        The key the request was sent with.
    what : str
        Who answered it, the start of the message (``model server http://… lists a model``).
    key_setting, name_setting : str
        The settings named in the message (``SITUATE_LLM_API_KEY``, ``SITUATE_LLM_SERVED_MODEL``).

    Raises
    ------
    ServerError
        ``name`` holds the key (the message does not quote it).
    """
    if hide_key(name, key) != name:
        raise ServerError(
            f"{what} whose name holds {key_setting}: not taken as the served model's name ({name_setting})"
        )
    return name


@dataclasses.dataclass
class ServerInfo:
    """What :meth:`ServerClient.check` learnt.

    Attributes
    ----------
    url : str
    model : str
        The model name requests carry (``SITUATE_LLM_SERVED_MODEL``, or the first the server lists).
    dialect : str
        ``llama-cpp-python`` (``/extras/tokenize``), ``llama-server`` (``/tokenize`` with
        ``content``) or ``vllm`` (``/tokenize`` with ``prompt``).
    served_as : str
        What the server says served a one-token request (:meth:`ServerClient._served_as`): part of
        the identity of what writes the blurbs or vectors.
    n_ctx : int or None
        The context the server serves, in its tokens; ``None`` where it does not say
        (llama-cpp-python's server): then a prompt too long for it is found on the document's
        first request (:class:`ContextExceeded`).
    """

    url: str
    model: str
    dialect: str
    n_ctx: int | None
    served_as: str = ""
    #: llama-server's parallel slots (``/props`` ``total_slots``); None elsewhere
    slots: int | None = None


@dataclasses.dataclass
class Completion:
    """One completion: its text and what the server reports (tokens of the served model)."""

    text: str
    prompt_tokens: int
    generated: int
    cached_tokens: int | None
    seconds: float
    #: prompt tokens written to the server's cache (Anthropic's ``cache_creation_input_tokens``)
    written: int = 0


def check_served_context(info: ServerInfo, n_ctx: int) -> None:
    """Refuse a server whose context (``info.n_ctx``, a slot's on llama-server: ``-c`` shared by
    its ``-np`` slots) is smaller than ``n_ctx`` (``SITUATE_N_CTX``), in the served model's tokens.

    Raises
    ------
    ContextExceeded
        Naming the server, what it serves, ``SITUATE_N_CTX`` and each server's option.
    """
    if info.n_ctx is None or info.n_ctx >= n_ctx:
        return
    slots = (
        f" a slot ({info.slots} slots share its -c: give it -c {n_ctx * info.slots} or fewer slots)"
        if info.slots and info.slots > 1
        else ""
    )
    raise ContextExceeded(
        f"model server {info.url} serves a context of {info.n_ctx} tokens{slots}, less than SITUATE_N_CTX="
        f"{n_ctx}: start it with a context of at least {n_ctx} (llama_cpp.server --n_ctx, "
        f"llama-server -c, vLLM --max-model-len) or set SITUATE_N_CTX={info.n_ctx}"
    )


def worker_slot() -> int | None:
    """The index of the document worker this thread is (``situate-<stage>_<i>``, the threads of
    :func:`situate.assets.per_document.for_each_document`), or None on another thread."""
    m = re.fullmatch(r"situate-\w+_(\d+)", threading.current_thread().name)
    return int(m.group(1)) if m else None


#: The wall-clock deadline (``time.monotonic()`` seconds) of the exchange this thread is in, set
#: by :meth:`ServerClient._send` around each try; unset, a socket read or write has httpx's own timeout.
_DEADLINE = threading.local()


def _time_left(timeout: float | None, what: str) -> float | None:
    """The seconds a socket operation may take: httpx's per-operation ``timeout``, no more than
    what is left of this thread's exchange (:data:`_DEADLINE`).

    Raises
    ------
    httpcore.ConnectTimeout, httpcore.ReadTimeout, httpcore.WriteTimeout
        (``what``: ``connect``, ``read``, ``write``) The exchange's deadline has passed; httpx
        raises it as its own timeout.
    """
    import httpcore

    return socket_time_left(
        getattr(_DEADLINE, "at", None), timeout, what, httpcore, "the exchange took longer than its timeout in all"
    )


def socket_time_left(end: float | None, timeout: float | None, what: str, core, message: str) -> float | None:
    """``timeout`` (seconds, ``None``: none) bounded by what is left before ``end`` (a
    ``time.monotonic()`` deadline, ``None``: none): the socket timeout of one connect, read or
    write of an exchange under a whole-request deadline.  Shared by the model-server client
    (httpcore) and the Anthropic client's transport (httpcore2): ``core`` is that module.

    Raises
    ------
    core.ConnectTimeout, core.ReadTimeout, core.WriteTimeout
        (``what``: ``connect``, ``read``, ``write``) The deadline has passed, with ``message``.
    """
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        error = {"connect": core.ConnectTimeout, "write": core.WriteTimeout}.get(what, core.ReadTimeout)
        raise error(message)
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An httpcore network stream whose every read and write waits no longer than what is left of
    the exchange's deadline (:func:`_time_left`): a server trickling its headers, a byte every
    second, runs out of time as a trickled body does."""

    def __init__(self, stream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _time_left(timeout, "read"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _time_left(timeout, "write"))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None, timeout: float | None = None):
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, _time_left(timeout, "connect")))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _DeadlineBackend:
    """An httpcore network backend whose connections are :class:`_DeadlineStream`."""

    def __init__(self, backend):
        self._backend = backend

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(
            self._backend.connect_tcp(host, port, _time_left(timeout, "connect"), local_address, socket_options)
        )

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._backend.connect_unix_socket(path, _time_left(timeout, "connect"), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bound_exchanges(http) -> bool:
    """Put :class:`_DeadlineBackend` under every connection pool of the httpx client ``http`` (its
    transport, and those of proxies it mounted from the environment); returns whether each took it.
    httpx gives no public hook for its network backend: the pools' ``_network_backend`` is set,
    before any connection is made (a pool hands its backend to each new connection)."""
    transports = [http._transport, *(t for t in getattr(http, "_mounts", {}).values() if t is not None)]
    bound = True
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            bound = False
            continue
        if not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)
    return bound


class ServerClient:
    """An OpenAI-compatible completions server, with retries (see the module docstring).

    Parameters
    ----------
    url : str
        Base URL (``SITUATE_LLM_URL``), with or without ``/v1``.
    model : str
        Served model name (``SITUATE_LLM_SERVED_MODEL``); empty: the first ``/v1/models`` lists.
    key : str
        Bearer key (``SITUATE_LLM_API_KEY``), never in a message.
    timeout : float
        Seconds one request may take in all, on the wall clock: connecting, sending, the answer's
        headers and body (each try of it).
    retries : int
        Tries after the first on a transient failure.
    backoff : float
        Seconds before the first retry, doubled for each next one.
    """

    def __init__(
        self,
        url: str,
        model: str = "",
        key: str = "",
        timeout: float = 300.0,
        retries: int = 4,
        backoff: float = 1.0,
        settings: str = "SITUATE_LLM",
    ):
        import httpx

        self.settings = settings
        self.url = check_url(url, settings)
        self.model, self.retries, self.backoff, self.timeout = model, retries, backoff, timeout
        if key and not re.fullmatch(r"[\x21-\x7e]+", key):
            raise ServerError(
                f"{settings}_API_KEY holds a space, a control character or a non-ASCII character: "
                "an HTTP header cannot carry it (the key is not shown)"
            )
        self._key = key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, follow_redirects=False)
        bound_exchanges(self._http)
        self.info: ServerInfo | None = None
        #: numbers in each vector the embeddings server answered at :meth:`check`; None before
        self.width: int | None = None
        self._props_slots: int | None = None

    def _hide(self, text: str) -> str:
        """``text`` without the key, whatever put it there (a library's error quoting a header, a
        server quoting the request's ``Authorization`` header back, as is or JSON- or URL-escaped:
        :func:`hide_key`)."""
        return hide_key(text, self._key)

    def _error(self, message: str, kind: type = ServerError) -> ServerError:
        """A :class:`ServerError` (or ``kind``) of ``message`` without the key (:meth:`_hide`)."""
        return kind(self._hide(message))

    def _quote(self, text: str, n: int) -> str:
        """The first ``n`` characters of a server's ``text``, the key hidden before the cut (so no
        part of it is left at the cut)."""
        return self._hide(text)[:n]

    def _count(self, value, name: str) -> int:
        """A token count of an answer: a whole number from 0 to :data:`MAX_USAGE_TOKENS`.

        Raises
        ------
        ServerError
            Anything else (a negative count, a float such as ``1e999``, a boolean, a text), naming
            the field and ``<settings>_URL``.
        """
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_USAGE_TOKENS:
            raise self._error(
                f"model server {self.url} answered {name} = {self._quote(repr(value), 40)}, not a token "
                f"count from 0 to {MAX_USAGE_TOKENS:,} ({self.settings}_URL)"
            )
        return value

    # -- transport ---------------------------------------------------------------------------------
    def _send(self, method: str, path: str, body: dict | None, limit: int = MAX_ANSWER_BYTES, bound: str = ""):
        """One HTTP exchange with retries; returns ``(status, parsed JSON or None, text)``.  A
        request may take at most ``timeout`` seconds in all, on the wall clock (a server trickling
        its headers or its body is cut off there), an answer at most ``limit`` bytes (``bound``
        says why that many; read before any JSON is parsed), and no message carries the key."""
        import httpx

        where = f"model server {self.url}"
        for attempt in range(self.retries + 1):
            t0 = time.monotonic()
            _DEADLINE.at = t0 + self.timeout
            try:
                with self._http.stream(method, self.url + path, json=body) as r:
                    buf = bytearray()
                    for part in r.iter_bytes():
                        buf += part
                        if len(buf) > limit:
                            raise ServerError(
                                f"{where} {path}: an answer over {limit:,} bytes "
                                f"({bound or 'MAX_ANSWER_BYTES'}); not an answer situate asked for "
                                f"({self.settings}_URL)"
                            )
                        if time.monotonic() - t0 > self.timeout:
                            raise httpx.ReadTimeout("the whole answer took too long")
                text = bytes(buf).decode("utf-8", "replace")
                if r.status_code == 429 or r.status_code >= 500:
                    why = f"HTTP {r.status_code}: {self._quote(text, 160)} ({self.settings}_URL)"
                else:
                    try:
                        return r.status_code, json.loads(text), text
                    except ValueError:
                        return r.status_code, None, text
            except httpx.ConnectError as e:
                why = f"refused the connection ({e}); is it running? ({self.settings}_URL)"
            except httpx.TimeoutException:
                why = f"did not answer within {self.timeout:g} s ({self.settings}_TIMEOUT)"
            except httpx.LocalProtocolError as e:  # a request that cannot be sent: no use retrying
                raise ServerError(self._hide(f"{where} {path}: the request cannot be sent ({e})")) from None
            except httpx.HTTPError as e:  # a dropped connection, a broken answer
                why = f"dropped the connection ({type(e).__name__}: {e}); did it stop? ({self.settings}_URL)"
            finally:
                _DEADLINE.at = None
            if attempt < self.retries:
                time.sleep(self.backoff * 2**attempt)
        raise ServerError(self._hide(f"{where} {path}: {why} (after {self.retries + 1} tries)"))

    def _json(
        self, method: str, path: str, body: dict | None = None, limit: int = MAX_ANSWER_BYTES, bound: str = ""
    ) -> dict:
        """The JSON object a request answers (at most ``limit`` bytes, :meth:`_send`).

        Raises
        ------
        ServerError
            A refused key (401, 403), another 4xx, or an answer that is not a JSON object.
        """
        status, data, text = self._send(method, path, body, limit, bound)
        self._raise_for(path, status, data, text)
        return data

    def _raise_for(self, path: str, status: int, data, text: str) -> None:
        """Raise the :class:`ServerError` of an answer that is an error or not a JSON object."""
        if status in (401, 403):
            raise ServerError(f"model server {self.url} refused the key: HTTP {status} ({self.settings}_API_KEY)")
        if status >= 400:
            raise self._error(f"model server {self.url} {path}: HTTP {status}: {self._quote(text, 200)}")
        if not isinstance(data, dict):
            raise self._error(
                f"model server {self.url} {path}: answered {self._quote(text, 80)!r}, not an "
                f"OpenAI-compatible JSON object ({self.settings}_URL)"
            )

    # -- start-up ----------------------------------------------------------------------------------
    def check(self, local_tokens, kind: str = "completions") -> ServerInfo:
        """Learn the served model, the tokenizer dialect and the context; check the tokenizer;
        ask for one token (or one embedding) to learn what the server says it served.

        Parameters
        ----------
        local_tokens : callable
            ``text -> list[int]``: the local GGUF's tokens of a text with special tokens parsed
            and BOS as the model adds it (what a server's tokenize endpoint answers).
        kind : str
            ``completions`` (a blurb model) or ``embeddings`` (an embedder).

        Raises
        ------
        ServerError
            Unreachable, a refused key, not OpenAI-compatible, the model not served
            (``SITUATE_LLM_SERVED_MODEL``), no tokenize endpoint, or a tokenizer that differs from
            the local GGUF's (``SITUATE_LLM_MODEL``).
        """
        if self.info is not None:
            return self.info
        listed = self._json("GET", "/v1/models")
        data = listed.get("data")
        models = (
            [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(data, list) else []
        )
        if not models:
            raise ServerError(f"model server {self.url}: /v1/models lists no model ({self.settings}_URL)")
        ids = [m["id"] for m in models]
        model = self.model or ids[0]
        if model not in ids:
            raise self._error(
                f"model server {self.url} serves {self._quote(', '.join(ids[:8]), 600)}, not {model!r} "
                f"({self.settings}_SERVED_MODEL)"
            )
        what = f"model server {self.url} lists a model"
        self.model = served_name(model, self._key, what, f"{self.settings}_API_KEY", f"{self.settings}_SERVED_MODEL")
        dialect, tokens = self._tokenize_probe()
        if tokens != local_tokens(PROBE):
            raise self._error(
                f"model server {self.url}: the served model {model!r} tokenizes text unlike the "
                f"local GGUF, so prompts cannot be fitted in its tokens: set {self.settings}_MODEL to "
                "the served model's GGUF (its vocabulary is read, not its weights)"
            )
        n_ctx = self._served_context(dialect, next(m for m in models if m["id"] == model))
        self._only_model = len(ids) == 1
        self.info = ServerInfo(self.url, model, dialect, n_ctx, self._served_as(kind), self._props_slots)
        return self.info

    def _served_as(self, kind: str) -> str:
        """What the server says served a one-token request: its ``model`` field (llama-cpp-python's
        server names the model file there), ``system_fingerprint`` where given, and for an embedder
        the vector width: so a server that serves another model under the same name is told apart."""
        if kind == "embeddings":
            data = self._json("POST", "/v1/embeddings", {"model": self.model, "input": ["a"]})
            rows = data.get("data")
            first = rows[0].get("embedding") if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None
            width = len(first) if isinstance(first, list) else 0
            self.width = width or None
        else:
            data = self._json(
                "POST", "/v1/completions", {"model": self.model, "prompt": "a", "max_tokens": 1, "temperature": 0.0}
            )
            width = 0
        if data.get("model") == self.model and self._only_model:
            # llama-cpp-python's server echoes the name asked for; asked for none, it names the
            # file it serves
            status, plain, _ = self._send(
                "POST",
                "/v1/completions" if kind != "embeddings" else "/v1/embeddings",
                {"prompt": "a", "max_tokens": 1, "temperature": 0.0} if kind != "embeddings" else {"input": ["a"]},
            )
            if status == 200 and isinstance(plain, dict) and isinstance(plain.get("model"), str):
                data = dict(data, model=f"{self.model}|{plain['model']}")
        parts = [data.get("model"), data.get("system_fingerprint"), width or None]
        return "|".join(str(x)[:300] for x in parts if isinstance(x, (str, int)) and not isinstance(x, bool))

    def _tokenize_probe(self) -> tuple[str, list[int]]:
        """The dialect that answered tokenize, and its tokens of :data:`PROBE`."""
        tries = [
            ("llama-cpp-python", "/extras/tokenize", {"input": PROBE, "model": self.model}),
            ("llama-server", "/tokenize", {"content": PROBE, "add_special": True, "parse_special": True}),
            ("vllm", "/tokenize", {"model": self.model, "prompt": PROBE, "add_special_tokens": True}),
        ]
        for dialect, path, body in tries:
            status, data, text = self._send("POST", path, body)
            if status in (401, 403):
                self._raise_for(path, status, data, text)
            tokens = data.get("tokens") if isinstance(data, dict) else None
            if status == 200 and isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
                return dialect, tokens
        raise ServerError(
            f"model server {self.url} has no tokenize endpoint (/extras/tokenize or /tokenize), "
            "so prompts cannot be fitted in the served model's tokens: use llama-server, "
            f"llama_cpp.server or vLLM ({self.settings}_URL)"
        )

    def _served_context(self, dialect: str, listed: dict) -> int | None:
        """The served context in tokens, where the server tells it."""
        n = listed.get("max_model_len")  # vLLM, SGLang
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
        if dialect == "llama-server":
            status, data, _ = self._send("GET", "/props", None)
            slots = data.get("total_slots") if isinstance(data, dict) else None
            self._props_slots = slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None
            settings = data.get("default_generation_settings") if isinstance(data, dict) else None
            n = settings.get("n_ctx") if isinstance(settings, dict) else None
            return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
        return None

    # -- completions -------------------------------------------------------------------------------
    def complete(
        self,
        prompt: str,
        n_prompt: int,
        max_tokens: int,
        stop: list[str],
        repeat_penalty: float,
        seed: int,
        grammar: str = "",
        slot: int | None = None,
    ) -> Completion:
        """Greedy completion of ``prompt``: ``n_prompt`` tokens as the server reads it (the whole
        text tokenized with the served model's vocabulary, which :meth:`check` compared).
        ``slot``: on llama-server, the slot to use (``id_slot``, modulo its ``total_slots``), so
        one document's requests find its prefix in that slot's cache; ignored elsewhere.

        Raises
        ------
        ContextExceeded
            The server refused the prompt as longer than its context, or read fewer prompt
            tokens than were sent (it cut the prompt).
        ServerError
            As :meth:`_json`, or an answer without a completion.
        """
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "top_k": 1,
            "repeat_penalty": repeat_penalty,
            "repetition_penalty": repeat_penalty,
            "stop": stop,
            "seed": seed,
        }
        if grammar:
            body["grammar"] = grammar
        if slot is not None and self.info is not None and self.info.dialect == "llama-server":
            body["id_slot"] = slot % (self.info.slots or 1)
        t0 = time.perf_counter()
        most = max(max_tokens, 1) * MAX_TOKEN_CHARS  # characters max_tokens tokens can spell
        status, data, text = self._send(
            "POST",
            "/v1/completions",
            body,
            min(MAX_ANSWER_BYTES, ANSWER_ENVELOPE_BYTES + most * JSON_CHAR_BYTES),
            f"what SITUATE_MAX_TOKENS={max_tokens} generated tokens can take",
        )
        seconds = time.perf_counter() - t0
        if status == 400 and ("context_length_exceeded" in text or "context length" in text):
            m = re.search(r"maximum context length is (\d+)", text)
            raise ContextExceeded(self._context_message(n_prompt + max_tokens, int(m.group(1)) if m else None))
        self._raise_for("/v1/completions", status, data, text)
        out, finish = self._completion(data, text, most, seconds)
        if out.prompt_tokens < n_prompt:
            raise ContextExceeded(self._context_message(n_prompt + max_tokens, None, read=out.prompt_tokens))
        if finish == "length" and out.generated < max_tokens:
            raise ContextExceeded(self._context_message(n_prompt + max_tokens, None, room=out.generated))
        return out

    def _completion(self, data: dict, text: str, most: int, seconds: float) -> tuple[Completion, object]:
        """The :class:`Completion` of a completions answer ``data`` (``text`` as received) and its
        ``finish_reason``; ``most``: the longest text the request's ``max_tokens`` can spell.

        Raises
        ------
        ServerError
            No ``choices[0].text`` or ``usage.prompt_tokens``; a text that is not text or is longer
            than ``most`` characters; a token count that is not a whole number from 0 to
            :data:`MAX_USAGE_TOKENS`: naming ``<settings>_URL``, never quoting the key.
        """
        try:
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            answer, prompt = choice["text"], usage["prompt_tokens"]
            finish = choice.get("finish_reason")
            if prompt is None:
                raise KeyError("prompt_tokens")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self._error(
                f"model server {self.url}: a completion without choices[0].text or usage.prompt_tokens "
                f"(so whether it read the whole prompt cannot be told: {self._quote(text, 80)!r}); "
                f"not an OpenAI-compatible server ({self.settings}_URL)"
            ) from None
        if not isinstance(answer, str):
            raise self._error(
                f"model server {self.url}: choices[0].text is a JSON {type(answer).__name__}, not text; "
                f"not an OpenAI-compatible server ({self.settings}_URL)"
            )
        if len(answer) > most:
            raise self._error(
                f"model server {self.url}: a completion of {len(answer):,} characters, more than the "
                f"{most:,} its max_tokens (SITUATE_MAX_TOKENS) lets a model write; not an answer to this "
                f"request ({self.settings}_URL)"
            )
        generated = usage.get("completion_tokens")
        out = Completion(
            answer,
            self._count(prompt, "usage.prompt_tokens"),
            0 if generated is None else self._count(generated, "usage.completion_tokens"),
            self._cached(data),
            seconds,
        )
        return out, finish

    def _cached(self, data: dict) -> int | None:
        """Prompt tokens the server says it reused from its cache, where it says so: OpenAI's
        ``usage.prompt_tokens_details.cached_tokens`` (vLLM, llama-server), llama-server's
        ``timings.cache_n``; ``None`` where it does not (llama-cpp-python's server).

        Raises
        ------
        ServerError
            A count given that is not a whole number from 0 to :data:`MAX_USAGE_TOKENS`.
        """
        usage = data.get("usage")
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        n = details.get("cached_tokens") if isinstance(details, dict) else None
        if n is not None:
            return self._count(n, "usage.prompt_tokens_details.cached_tokens")
        timings = data.get("timings")
        n = timings.get("cache_n") if isinstance(timings, dict) else None
        return None if n is None else self._count(n, "timings.cache_n")

    def _context_message(
        self, wanted: int, served: int | None, read: int | None = None, room: int | None = None
    ) -> str:
        what = (
            f"read only {read} of the prompt's tokens (it cut the prompt)"
            if read is not None
            else f"left room for {room} generated tokens of the {wanted} the prompt and its answer need"
            if room is not None
            else f"refused a prompt of {wanted} tokens with its answer" + (f": it serves {served}" if served else "")
        )
        return (
            f"model server {self.url} {what}; start the server with a context of at least SITUATE_N_CTX "
            "tokens (llama_cpp.server --n_ctx, llama-server -c, vLLM --max-model-len, Ollama num_ctx) or lower "
            "SITUATE_N_CTX to what it serves"
        )


def embeddings(client: ServerClient, inputs: list[str]) -> list[list[float]]:
    """``/v1/embeddings`` of ``inputs``: one vector each, in order.  Once the client is checked
    (:meth:`ServerClient.check`), the answer is read up to what its vectors can take at the width
    the server answered then, and each vector must have that width.

    Raises
    ------
    ServerError
        As :meth:`ServerClient._json`; an answer without one vector per input (each input's
        ``index`` once); a vector item that is not a finite number within float32's range (a
        boolean, NaN, infinity, a text); vectors of different widths, or of another width than the
        server answered at its check (its model changed under the same name): each naming
        ``<settings>_URL``, never quoting the key.
    """
    width = client.width
    limit, bound = MAX_ANSWER_BYTES, ""
    if width:
        limit = min(MAX_ANSWER_BYTES, ANSWER_ENVELOPE_BYTES + len(inputs) * width * JSON_NUMBER_BYTES)
        bound = f"what {len(inputs)} vectors of {width} numbers can take"
    data = client._json("POST", "/v1/embeddings", {"model": client.model, "input": inputs}, limit, bound)
    vecs = _vectors(data.get("data"), len(inputs))
    where = f"model server {client.url} /v1/embeddings"
    if vecs is None:
        raise client._error(
            f"{where}: not one vector of numbers for each of the {len(inputs)} inputs ({client.settings}_URL)"
        )
    bad = next((x for v in vecs for x in v if isinstance(x, bool) or not _finite32(x)), None)
    if bad is not None:
        raise client._error(
            f"{where}: a vector holds {client._quote(repr(bad), 40)}, not a finite number within float32's "
            f"range; not an embedding ({client.settings}_URL)"
        )
    widths = sorted({len(v) for v in vecs})
    if len(widths) > 1 or (width and widths[0] != width):
        raise client._error(
            f"{where}: answered vectors {'/'.join(map(str, widths))} numbers wide where its start-up "
            f"check answered {width or widths[0]}: the server's model changed under the same name, or "
            f"the server is unwell; nothing of this document is stored or cached; restart situate's "
            f"run once the server serves one model ({client.settings}_URL, {client.settings}_SERVED_MODEL)"
        )
    return vecs


def _vectors(rows, n: int) -> list[list] | None:
    """The ``embedding`` lists of an answer's ``data`` rows in input order (by ``index`` where
    every row has one, each of ``0 .. n-1`` once), or None where it is not ``n`` lists, none empty."""
    if not isinstance(rows, list) or len(rows) != n or not all(isinstance(r, dict) for r in rows):
        return None
    if all("index" in r for r in rows):
        if sorted((type(r["index"]) is int, r["index"]) for r in rows) != [(True, i) for i in range(n)]:
            return None
        rows = sorted(rows, key=lambda r: r["index"])
    vecs = [r.get("embedding") for r in rows]
    return vecs if all(isinstance(v, list) and v for v in vecs) else None


def _finite32(x) -> bool:
    """Whether ``x`` is an int or float within float32's finite range (NaN is not)."""
    return isinstance(x, (int, float)) and -FLOAT32_MAX <= x <= FLOAT32_MAX
