"""The blurb model through Anthropic's Messages API (``SITUATE_LLM_API=anthropic``).

The prompts are the ones the in-process model gets, built by the same
:class:`situate.contextual.contextualize.PromptBuilder` over a stand-in tokenizer (:class:`ChatTokenizer`)
whose "tokens" are the UTF-8 bytes of the text plus three markers: where the system line ends,
where the document prefix ends (the cache breakpoint) and where the user turn ends.  A request
then has the system line as ``system``, the document prefix as the first text block of the user
turn marked with ``cache_control`` (the published recipe's placement: Anthropic's contextual
retrieval cookbook), the chunk's part as the second block, and a started answer (a primed
prompt) as the assistant turn's beginning.

Counting.  Claude's tokenizer is not published and the token-counting endpoint is a request a
count, so windows are fitted in UTF-8 bytes: a byte-level BPE token stands for at least one byte,
so ``SITUATE_N_CTX`` bytes is never more than ``SITUATE_N_CTX`` of the model's tokens and a
fitted prompt is never cut.  The cost: a window holds about a quarter of what the model could
read (English runs about 4 bytes a token); set ``SITUATE_N_CTX`` up to 131,072 (its bound; Claude
reads 200,000 tokens).  The tokens the API reports having read are what the telemetry shows.

Retries are the official SDK's (``anthropic``: 408, 409, 429, 5xx and 529 overloaded, refused
and dropped connections; ``retry-after`` honoured), ``SITUATE_LLM_RETRIES`` times.

Bounds.  The SDK sends through an HTTP client of situate's (:func:`bounded_http_client`): each
try of a request may take ``SITUATE_LLM_TIMEOUT`` seconds in all (connecting, sending, the
headers and the body: a server trickling bytes is cut off there, not per read), plus one second
per :data:`MIN_UPLOAD_RATE` bytes it sends; an answer may hold :data:`MAX_RESPONSE_BYTES` (a
batch's results: :data:`MAX_RESULT_LINE_BYTES` a line), uncompressed (it asks for no content
coding and refuses one: a compressed answer's size says nothing of what it decodes to); and
nothing is sent anywhere but ``SITUATE_LLM_URL``'s origin (the key included: a batch's
``results_url`` or a redirect elsewhere is refused before it is asked).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import socket
import threading
import time
import urllib.parse
import urllib.request

from situate.resources.errors import AnswerRefused
from situate.resources.models.server import (
    Completion,
    ContextExceeded,
    ServerError,
    check_url,
    hide_key,
    served_name,
    socket_time_left,
)

#: The public endpoint (``SITUATE_LLM_URL`` overrides it: a gateway, or the tests' fake).
DEFAULT_BASE_URL = "https://api.anthropic.com"

#: Marker "tokens" of :class:`ChatTokenizer` (above the 256 byte values).
SYSTEM_END, CACHE_BREAK, TURN_END = 256, 257, 258
#: How the chat frame spells them (only :meth:`ChatTokenizer.encode_template` reads these: text
#: from a document goes through :meth:`ChatTokenizer.encode`, which never does).
_MARKS = {"\x00situate:system-end\x00": SYSTEM_END, "\x00situate:turn-end\x00": TURN_END}

#: Longest answer text taken from the API, in characters (a blurb is at most a few hundred).
MAX_ANSWER_CHARS = 64 * 1024
#: Largest token count taken from an answer's usage: 10 million is 50 times Claude's context
#: (200,000 tokens); a larger or negative count is not a count of this request.
MAX_USAGE_TOKENS = 10_000_000
#: Largest HTTP answer read from the API, in bytes: a message, a batch, a model (a blurb's answer
#: is a few hundred).
MAX_RESPONSE_BYTES = 16 * 2**20
#: Longest line of a batch's results, in bytes (the results are read a line at a time, in any
#: number of lines): a line is one answer, whose text situate keeps to :data:`MAX_ANSWER_CHARS`,
#: 384 KiB at 6 bytes a character escaped, plus its envelope.  The SDK's line reader copies a line
#: for each 64 bytes it reads: a 1 MiB line costs it about 3 s of CPU.
MAX_RESULT_LINE_BYTES = 2**20
#: The slowest upload a request is given time for, in bytes a second: a request's deadline is
#: ``SITUATE_LLM_TIMEOUT`` plus its body at this rate (a 200 MB batch: about 26 minutes more; a
#: blurb request of 131,072 bytes: one second).
MIN_UPLOAD_RATE = 128 * 1024
#: Bytes written to a socket at a time, each under what is left of the request's deadline.
_WRITE_SLICE = 64 * 1024
#: The path of a batch's results (JSON lines: bounded a line, not in all).
_RESULTS_PATH = re.compile(r"/messages/batches/[^/]+/results$")


@functools.cache
def _refused() -> type:
    import anthropic

    return type("AnswerRefused", (AnswerRefused, anthropic.AnthropicError), {})


def _origin(scheme: str, host: str | None, port: int | None) -> tuple[str, str, int]:
    scheme = (scheme or "").lower()
    return scheme, (host or "").lower().strip("[]"), port or {"http": 80, "https": 443}.get(scheme, 0)


def url_origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, the port filled in for http and https."""
    p = urllib.parse.urlsplit(url)
    return _origin(p.scheme, p.hostname, p.port)


#: Per thread: the monotonic time the request being sent or read must end by (None: no bound
#: beyond each read's own timeout).
_DEADLINE = threading.local()


def _left(timeout: float | None, kind: str) -> float | None:
    """The socket timeout of one connect, read or write: ``timeout`` bounded by what the current
    request has left.

    Raises
    ------
    httpcore2.TimeoutException
        The request's deadline has passed (``kind``'s class: the HTTP client names it a timeout).
    """
    import httpcore2

    return socket_time_left(
        getattr(_DEADLINE, "at", None),
        timeout,
        kind,
        httpcore2,
        "the request took longer than SITUATE_LLM_TIMEOUT in all",
    )


@functools.cache
def _bounded_classes() -> tuple[type, type]:
    """``(network backend, transport)`` classes of :mod:`situate.resources.models.anthropic_http`
    (imported on first use: httpx2 and httpcore2 load with the SDK, never at import)."""
    from situate.resources.models import anthropic_http

    return anthropic_http.DeadlineBackend, anthropic_http.BoundedTransport


def bounded_http_client(url: str, timeout: float):
    """The HTTP client the SDK sends through (``http_client=``): only to ``url``'s origin, each
    request within ``timeout`` seconds in all (plus its upload at :data:`MIN_UPLOAD_RATE`), each
    answer within :data:`MAX_RESPONSE_BYTES`; the SDK's connection limits and TCP keep-alive, the
    environment's proxy for ``url`` (``HTTPS_PROXY``, ``NO_PROXY``) as the SDK's own client has.
    """
    import anthropic
    import httpx2

    backend_cls, transport_cls = _bounded_classes()
    opts = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)]
    for name, value in (("TCP_KEEPINTVL", 60), ("TCP_KEEPCNT", 5), ("TCP_KEEPIDLE", 60)):
        if hasattr(socket, name):
            opts.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    p = urllib.parse.urlsplit(url)
    proxy = None if urllib.request.proxy_bypass(p.hostname or "") else urllib.request.getproxies().get(p.scheme)
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
    inner = httpx2.HTTPTransport(limits=limits, socket_options=opts, proxy=proxy or None)
    pool = getattr(inner, "_pool", None)  # httpx2 2.17 keeps its httpcore2 pool there
    if pool is None or not hasattr(pool, "_network_backend"):
        raise ServerError("the installed httpx2 has no connection pool situate can bound (anthropic==2.16.0 expected)")
    pool._network_backend = backend_cls(pool._network_backend)
    transport = transport_cls(inner, url_origin(url), _safe_url(url), float(timeout))
    return anthropic.DefaultHttpxClient(transport=transport, timeout=timeout)


class ChatTokenizer:
    """UTF-8 bytes as tokens, for prompts sent to a chat API as text.

    ``encode`` never adds or parses anything, so a document's text stays text; a count is an upper
    bound on any byte-level tokenizer's count of the same text (each of its tokens is at least one
    byte).  The chat frame's markers (:meth:`frame`) are tokens 256-258.

    Examples
    --------
    >>> tok = ChatTokenizer()
    >>> tok.encode("né")
    [110, 195, 169]
    >>> tok.split(tok.encode_template(tok.frame("Be brief.")[0], False) + tok.encode("doc")
    ...           + tok.cache_breakpoint() + tok.encode("chunk") + [TURN_END] + tok.encode("This"))
    ('Be brief.', ['doc', 'chunk'], 'This')
    """

    llm = None  # no GGUF behind it

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text``, one token each."""
        return list(text.encode("utf-8"))

    def count(self, text: str) -> int:
        """UTF-8 bytes of ``text`` (an upper bound on the model's tokens)."""
        return len(text.encode("utf-8"))

    def encode_template(self, text: str, bos: bool = False) -> list[int]:
        """Tokens of chat-frame text: its markers as tokens 256-258, the rest as bytes; ``bos`` is
        ignored (the API frames the conversation)."""
        out: list[int] = []
        while text:
            at = {m: text.find(m) for m in _MARKS if m in text}
            if not at:
                out += self.encode(text)
                break
            mark = min(at, key=at.get)
            out += self.encode(text[: at[mark]]) + [_MARKS[mark]]
            text = text[at[mark] + len(mark) :]
        return out

    def pieces(self, tokens: list[int]) -> list[bytes]:
        """Each token's bytes (a marker: none)."""
        return [bytes([t]) if t < 256 else b"" for t in tokens]

    def cache_breakpoint(self) -> list[int]:
        """The token a prompt builder puts where the document prefix ends."""
        return [CACHE_BREAK]

    def frame(self, system: str = "") -> tuple[str, str]:
        """The chat frame's text ``(head, tail)``: the system line (if any) then its end marker;
        after the user message, the turn's end marker."""
        end = next(m for m, t in _MARKS.items() if t == TURN_END)
        head = f"{system}{next(m for m, t in _MARKS.items() if t == SYSTEM_END)}" if system else ""
        return head, end

    def chat_template(self) -> None:
        return None

    def eos_text(self) -> str:
        return ""

    def split(self, tokens: list[int]) -> tuple[str, list[str], str]:
        """``(system, user blocks, started answer)`` of a prompt built with this tokenizer: the user
        turn is cut at each cache breakpoint into blocks.

        Raises
        ------
        ValueError
            The prompt has no end of the user turn (it was not built with :meth:`frame`).
        """
        if TURN_END not in tokens:
            raise ValueError("a prompt for a chat API has no end of the user turn")
        end = tokens.index(TURN_END)
        user, answer = tokens[:end], tokens[end + 1 :]
        system = ""
        if SYSTEM_END in user:
            cut = user.index(SYSTEM_END)
            system, user = bytes(user[:cut]).decode("utf-8"), user[cut + 1 :]
        blocks, cur = [], []
        for t in user:
            if t == CACHE_BREAK:
                blocks.append(cur)
                cur = []
            elif t < 256:
                cur.append(t)
        blocks.append(cur)
        text = [bytes(b).decode("utf-8") for b in blocks]
        return system, [b for b in text if b], bytes(t for t in answer if t < 256).decode("utf-8")


@dataclasses.dataclass
class ApiInfo:
    """What a checked API serves: ``url`` (scheme, host and port only) and ``model`` (the model id
    the API gives for the name asked, e.g. a dated snapshot for an alias); ``warning``: why the
    name asked is recorded instead (an answered id that holds the key), else empty."""

    url: str
    model: str
    warning: str = ""


def _safe_url(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    return f"{p.scheme}://{p.hostname}{':' + str(p.port) if p.port else ''}"


class MessagesClient:
    """A blurb model behind Anthropic's Messages API, through the official ``anthropic`` SDK.

    Parameters
    ----------
    model : str
        The model name (``SITUATE_LLM_SERVED_MODEL``, e.g. ``claude-haiku-4-5``); required.
    key : str
        The API key (``ANTHROPIC_API_KEY``, read as a ``dg.EnvVar``); never logged, never in an
        error or metadata.
    base_url : str
        ``SITUATE_LLM_URL``; empty: :data:`DEFAULT_BASE_URL`.
    retries : int
        The SDK's retries of a request (``SITUATE_LLM_RETRIES``).
    timeout : float
        Seconds one request may take (``SITUATE_LLM_TIMEOUT``).

    Raises
    ------
    situate.resources.models.server.ServerError
        No model or no key given, or a URL with credentials in it.
    """

    def __init__(self, model: str, key: str, base_url: str = "", retries: int = 4, timeout: float = 300.0):
        if not model:
            raise ServerError(
                "SITUATE_LLM_API=anthropic needs SITUATE_LLM_SERVED_MODEL (a Claude model name, e.g. claude-haiku-4-5)"
            )
        if not key:
            raise ServerError(
                "SITUATE_LLM_API=anthropic needs ANTHROPIC_API_KEY (the key is read from the "
                "environment, never from a file or the command line)"
            )
        if any(c in key for c in "\r\n\x00") or len(key) > 512:
            raise ServerError("ANTHROPIC_API_KEY is not a key (a line break, a NUL or over 512 characters)")
        import anthropic

        try:
            self.url = check_url(base_url, "SITUATE_LLM") if base_url else DEFAULT_BASE_URL
        except ServerError as e:  # the key of this API is ANTHROPIC_API_KEY
            raise ServerError(str(e).replace("SITUATE_LLM_API_KEY", "ANTHROPIC_API_KEY")) from None
        self.model = model
        self._key = key
        self.client = anthropic.Anthropic(
            api_key=key,
            base_url=self.url,
            max_retries=retries,
            timeout=timeout,
            http_client=bounded_http_client(self.url, timeout),
        )
        self.info: ApiInfo | None = None

    def _hide(self, text: str) -> str:
        """``text`` without the key, as is or JSON- or URL-escaped
        (:func:`~situate.resources.models.server.hide_key`)."""
        return hide_key(text, self._key, "<ANTHROPIC_API_KEY>")

    def _error(self, e: Exception, what: str) -> ServerError:
        """A :class:`ServerError` naming the setting to fix for an SDK error."""
        import anthropic

        where = _safe_url(self.url)
        if isinstance(e, ServerError):  # refused by the HTTP client (AnswerRefused): named already
            return e
        if isinstance(e, anthropic.AuthenticationError):
            return ServerError(f"{where} refused ANTHROPIC_API_KEY (401): set a valid key")
        if isinstance(e, anthropic.PermissionDeniedError):
            return ServerError(f"{where}: ANTHROPIC_API_KEY may not use {self.model} (403)")
        if isinstance(e, anthropic.NotFoundError):
            return ServerError(
                f"{where} serves no model {self.model!r} (404): set SITUATE_LLM_SERVED_MODEL to a model the key can use"
            )
        if isinstance(e, anthropic.APITimeoutError):
            return ServerError(f"{what} at {where} took longer than SITUATE_LLM_TIMEOUT, after its retries")
        if isinstance(e, anthropic.APIConnectionError):
            return ServerError(
                f"cannot reach {where} (SITUATE_LLM_URL) after SITUATE_LLM_RETRIES retries: "
                f"{type(e.__cause__ or e).__name__}"
            )
        if isinstance(e, anthropic.APIStatusError):
            body = self._hide(str(getattr(e, "message", "") or ""))[:300]
            if e.status_code == 400 and "prompt is too long" in body:
                return ContextExceeded(f"{what}: {where} says the prompt is too long ({body}): lower SITUATE_N_CTX")
            return ServerError(f"{what} at {where} failed with HTTP {e.status_code} after its retries: {body}")
        if isinstance(e, anthropic.APIResponseValidationError):
            return ServerError(f"{where} answered {what} with something that is not a Messages API answer")
        return ServerError(f"{what} at {where}: {type(e).__name__}: {self._hide(str(e))[:300]}")

    def check(self) -> ApiInfo:
        """Ask the API for the model (``GET /v1/models/{model}``): the key is accepted and the
        model is served.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :meth:`_error`: a wrong key, an unknown model, an unreachable endpoint, an answer
            that is not the API's.

        Notes
        -----
        An answered id that holds ``ANTHROPIC_API_KEY`` (a gateway at ``SITUATE_LLM_URL`` quoting
        the key it was sent) is not taken: the id is written into every row, the stage files and
        the run's metadata (:func:`~situate.resources.models.server.served_name`).  The name asked
        (``SITUATE_LLM_SERVED_MODEL``) is recorded instead, and ``ApiInfo.warning`` says so
        without quoting the key.
        """
        import anthropic

        try:
            m = self.client.models.retrieve(self.model)
        except anthropic.AnthropicError as e:
            raise self._error(e, "the model check") from None
        except (ValueError, TypeError, AttributeError):  # not JSON, or not the API's shapes
            raise ServerError(
                f"{_safe_url(self.url)} answered the model check with something that is not the "
                "Messages API's (SITUATE_LLM_URL)"
            ) from None
        model = getattr(m, "id", "")
        if not isinstance(model, str) or not model or len(model) > 200:
            raise ServerError(f"{_safe_url(self.url)} answered the model check without a model id")
        what = f"{_safe_url(self.url)} answered the model check with a model"
        try:
            self.info = ApiInfo(_safe_url(self.url), served_name(model, self._key, what, "ANTHROPIC_API_KEY", "X"))
        except ServerError:
            why = f"{what} id that holds ANTHROPIC_API_KEY: recorded as {self.model!r} (SITUATE_LLM_SERVED_MODEL)"
            self.info = ApiInfo(_safe_url(self.url), self.model, warning=why)
        return self.info

    def complete(self, system: str, blocks: list[str], answer: str, max_tokens: int, stop: list[str]) -> Completion:
        """One blurb: ``blocks`` as the user turn's text blocks, the first (the document prefix,
        when there are two or more) marked ``cache_control: ephemeral``; ``answer`` as the
        assistant turn's beginning.  The SDK (2.16) sets no sampling temperature (the current
        models fix it), so two requests may answer differently: the blurb cache keeps the first.

        Parameters
        ----------
        system : str
            The system line; empty for none.
        blocks : list of str
            The user turn's text: the document prefix, then the chunk's part.
        answer : str
            The answer's start (a primed prompt); the completion continues it.
        max_tokens : int
            Bound on generated tokens.
        stop : list of str
            Stop strings; whitespace-only ones (which the API refuses) are applied here.

        Returns
        -------
        situate.resources.models.server.Completion
            ``text`` up to the first stop string; ``prompt_tokens`` = input + cache-written +
            cache-read tokens, ``cached_tokens`` = cache-read, as the API reports them.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :meth:`_error`, after the SDK's retries; or the answer has no text block.
        """
        import anthropic

        t0 = time.perf_counter()
        try:
            msg = self.client.messages.create(**self.params(system, blocks, answer, max_tokens, stop))
        except anthropic.AnthropicError as e:
            raise self._error(e, "a blurb request") from None
        except (ValueError, TypeError, AttributeError):
            raise ServerError(
                f"{_safe_url(self.url)} answered a blurb request with something that is not a "
                "Messages API answer (SITUATE_LLM_URL)"
            ) from None
        return self.completion_of(msg, stop, time.perf_counter() - t0)

    def params(self, system: str, blocks: list[str], answer: str, max_tokens: int, stop: list[str]) -> dict:
        """The Messages API request body of :meth:`complete` (also a Message Batches request's
        ``params``)."""
        content = [{"type": "text", "text": b} for b in blocks]
        if len(content) > 1:
            content[0]["cache_control"] = {"type": "ephemeral"}
        messages = [{"role": "user", "content": content}]
        if answer:
            messages.append({"role": "assistant", "content": answer.rstrip()})
        out = {"model": self.model, "max_tokens": max_tokens, "messages": messages}
        if system:
            out["system"] = system
        api_stops = [s for s in stop if s.strip()]
        if api_stops:
            out["stop_sequences"] = api_stops
        return out

    def completion_of(self, msg, stop: list[str], seconds: float) -> Completion:
        """A :class:`~situate.resources.models.server.Completion` of an API ``Message``: its text (bounded
        to :data:`MAX_ANSWER_CHARS`) up to the first of ``stop``, and its usage.

        Raises
        ------
        situate.resources.models.server.ServerError
            The message has no text block (and did not stop for a refusal or its bound), or is
            not a message, or its usage is not token counts (whole numbers from 0 to
            :data:`MAX_USAGE_TOKENS`).
        """
        try:
            return self._completion_of(msg, stop, seconds)
        except (ValueError, TypeError, AttributeError):
            raise ServerError(
                f"{_safe_url(self.url)} answered a blurb request with something that is not a "
                "Messages API answer (SITUATE_LLM_URL)"
            ) from None

    def _completion_of(self, msg, stop: list[str], seconds: float) -> Completion:
        parts = [getattr(b, "text", "") for b in (msg.content or []) if getattr(b, "type", "") == "text"]
        if not parts and msg.stop_reason not in ("refusal", "max_tokens"):
            raise ServerError(
                f"{_safe_url(self.url)} answered a blurb request with no text (stop_reason {msg.stop_reason!r})"
            )
        text = "".join(p for p in parts if isinstance(p, str))[:MAX_ANSWER_CHARS]
        cut = min((text.find(s) for s in stop if s and s in text), default=-1)
        if cut >= 0:
            text = text[:cut]
        prompt, generated, read, written = self._usage_of(msg)
        return Completion(text, prompt, generated, read, seconds, written)

    def usage_of(self, msg) -> tuple[int, int, int, int]:
        """What an API ``Message`` was billed: ``(prompt, generated, cache-read, cache-written)``
        tokens, ``prompt`` = input + cache-written + cache-read (as :meth:`completion_of` counts).

        Raises
        ------
        situate.resources.models.server.ServerError
            The usage is not token counts, or ``msg`` is not a message.
        """
        try:
            return self._usage_of(msg)
        except (ValueError, TypeError, AttributeError):
            raise ServerError(
                f"{_safe_url(self.url)} answered a blurb request with something that is not a "
                "Messages API answer (SITUATE_LLM_URL)"
            ) from None

    def _usage_of(self, msg) -> tuple[int, int, int, int]:
        u = msg.usage
        read = self._tokens(getattr(u, "cache_read_input_tokens", 0), "cache_read_input_tokens")
        written = self._tokens(getattr(u, "cache_creation_input_tokens", 0), "cache_creation_input_tokens")
        prompt = self._tokens(u.input_tokens, "input_tokens") + read + written
        return prompt, self._tokens(u.output_tokens, "output_tokens"), read, written

    def same_origin(self, url) -> bool:
        """Whether ``url`` (a batch's ``results_url``) is on ``SITUATE_LLM_URL``'s origin (a URL
        without scheme and host is: the SDK reads it against the base URL)."""
        if not isinstance(url, str):
            return False
        p = urllib.parse.urlsplit(url)
        if not p.scheme and not p.netloc:
            return True
        try:
            return url_origin(url) == url_origin(self.url)
        except ValueError:  # a port that is not a number
            return False

    def _tokens(self, value, name: str) -> int:
        """A usage count: None is 0; otherwise a whole number from 0 to :data:`MAX_USAGE_TOKENS`.

        Raises
        ------
        situate.resources.models.server.ServerError
            Anything else, naming the field.
        """
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_USAGE_TOKENS:
            raise ServerError(
                f"{_safe_url(self.url)} answered usage.{name} = {str(value)[:40]!r}, not a token "
                "count (SITUATE_LLM_URL)"
            )
        return value


def identity(model: str) -> str:
    """sha256 hex of what writes the blurbs through the API: ``anthropic|<model id>``."""
    return hashlib.sha256(f"anthropic|{model}".encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Price:
    """USD per million tokens of a model: ``input`` (plain input) and ``output``; a cache write
    costs :data:`CACHE_WRITE` × input, a cache read :data:`CACHE_READ` × input, and a request
    through the Message Batches API :data:`BATCH` of all of it."""

    input: float
    output: float
    source: str


#: Anthropic's published rates, USD per million tokens (anthropic.com/pricing, as read in 2025-11;
#: they change: ``SITUATE_LLM_PRICE_INPUT`` / ``SITUATE_LLM_PRICE_OUTPUT`` set today's).  Keyed by
#: the model id's beginning (a dated snapshot id starts with its model's name).
PRICES = {
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-haiku": (0.25, 1.25),
}
PRICES_READ = "anthropic.com/pricing, read 2025-11"
#: Cache write (5-minute entries) and cache read, as multiples of the input rate; batch discount
#: (same source as :data:`PRICES`).
CACHE_WRITE, CACHE_READ, BATCH = 1.25, 0.1, 0.5


def price_of(model: str, input_rate: float | None = None, output_rate: float | None = None) -> Price | None:
    """The rates for ``model``: the given ones (settings) where set, else :data:`PRICES` by the
    longest matching name; None when neither knows it."""
    known = max((k for k in PRICES if model.startswith(k)), key=len, default=None)
    if input_rate is not None and output_rate is not None:
        return Price(input_rate, output_rate, "SITUATE_LLM_PRICE_INPUT/OUTPUT")
    if known is None:
        return None
    i, o = PRICES[known]
    return Price(
        input_rate if input_rate is not None else i,
        output_rate if output_rate is not None else o,
        PRICES_READ if input_rate is None and output_rate is None else f"{PRICES_READ}, partly set",
    )


def usage_cost_usd(price: Price, usage: dict) -> float:
    """USD of :data:`situate.resources.models.llm.API_USAGE`-shaped ``usage`` (live requests at full price,
    ``batch_`` ones at :data:`BATCH`)."""
    return sum(
        cost_usd(
            price,
            usage.get(f"{p}evaluated", 0),
            usage.get(f"{p}written", 0),
            usage.get(f"{p}reused", 0),
            usage.get(f"{p}generated", 0),
            batch=bool(p),
        )
        for p in ("", "batch_")
    )


def cost_usd(price: Price, evaluated: int, written: int, reused: int, generated: int, batch: bool = False) -> float:
    """USD of requests that read ``evaluated`` prompt tokens (of which ``written`` went into the
    cache), read ``reused`` from the cache and generated ``generated`` tokens.

    Examples
    --------
    >>> round(cost_usd(Price(1.0, 5.0, ""), evaluated=2_000_000, written=1_000_000, reused=10_000_000,
    ...                generated=100_000), 4)
    3.75
    """
    plain = max(evaluated - written, 0)
    usd = (
        plain * price.input
        + written * price.input * CACHE_WRITE
        + reused * price.input * CACHE_READ
        + generated * price.output
    ) / 1e6
    return usd * (BATCH if batch else 1.0)
