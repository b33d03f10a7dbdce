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
it (the blurbs of its finished chunks are in the blurb cache).  The key is never in a message.
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


def worker_slot() -> int | None:
    """The index of the document worker this thread is (``situate-<stage>_<i>``, the threads of
    :func:`situate.assets.per_document.for_each_document`), or None on another thread."""
    m = re.fullmatch(r"situate-\w+_(\d+)", threading.current_thread().name)
    return int(m.group(1)) if m else None


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
        Seconds a request may take (connect and read).
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
        self.info: ServerInfo | None = None
        self._props_slots: int | None = None

    def _hide(self, text: str) -> str:
        """``text`` without the key, whatever put it there (a library's error quoting a header)."""
        return text.replace(self._key, "***") if self._key else text

    # -- transport ---------------------------------------------------------------------------------
    def _send(self, method: str, path: str, body: dict | None):
        """One HTTP exchange with retries; returns ``(status, parsed JSON or None, text)``.  A
        request may take at most ``timeout`` seconds in all (a server trickling bytes is cut off
        there too), and no message carries the key."""
        import httpx

        where = f"model server {self.url}"
        for attempt in range(self.retries + 1):
            t0 = time.monotonic()
            try:
                with self._http.stream(method, self.url + path, json=body) as r:
                    buf = bytearray()
                    for part in r.iter_bytes():
                        buf += part
                        if len(buf) > MAX_ANSWER_BYTES:
                            raise ServerError(
                                f"{where} {path}: an answer over {MAX_ANSWER_BYTES:,} bytes "
                                f"(MAX_ANSWER_BYTES); not an answer situate asked for ({self.settings}_URL)"
                            )
                        if time.monotonic() - t0 > self.timeout:
                            raise httpx.ReadTimeout("the whole answer took too long")
                text = bytes(buf).decode("utf-8", "replace")
                if r.status_code == 429 or r.status_code >= 500:
                    why = f"HTTP {r.status_code}: {text[:160]}"
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
                why = f"dropped the connection ({type(e).__name__}: {e})"
            if attempt < self.retries:
                time.sleep(self.backoff * 2**attempt)
        raise ServerError(self._hide(f"{where} {path}: {why} (after {self.retries + 1} tries)"))

    def _json(self, method: str, path: str, body: dict | None = None) -> dict:
        """The JSON object a request answers.

        Raises
        ------
        ServerError
            A refused key (401, 403), another 4xx, or an answer that is not a JSON object.
        """
        status, data, text = self._send(method, path, body)
        self._raise_for(path, status, data, text)
        return data

    def _raise_for(self, path: str, status: int, data, text: str) -> None:
        """Raise the :class:`ServerError` of an answer that is an error or not a JSON object."""
        if status in (401, 403):
            raise ServerError(f"model server {self.url} refused the key: HTTP {status} ({self.settings}_API_KEY)")
        if status >= 400:
            raise ServerError(f"model server {self.url} {path}: HTTP {status}: {text[:200]}")
        if not isinstance(data, dict):
            raise ServerError(
                f"model server {self.url} {path}: answered {text[:80]!r}, not an "
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
            raise ServerError(
                f"model server {self.url} serves {', '.join(ids[:8])}, not {model!r} ({self.settings}_SERVED_MODEL)"
            )
        self.model = model
        dialect, tokens = self._tokenize_probe()
        if tokens != local_tokens(PROBE):
            raise ServerError(
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
            width = (
                len(rows[0].get("embedding") or [])
                if isinstance(rows, list) and rows and isinstance(rows[0], dict)
                else 0
            )
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
        status, data, text = self._send("POST", "/v1/completions", body)
        seconds = time.perf_counter() - t0
        if status == 400 and ("context_length_exceeded" in text or "context length" in text):
            m = re.search(r"maximum context length is (\d+)", text)
            raise ContextExceeded(self._context_message(n_prompt + max_tokens, int(m.group(1)) if m else None))
        self._raise_for("/v1/completions", status, data, text)
        try:
            choice = data["choices"][0]
            usage = data.get("usage") or {}
            out = Completion(
                str(choice["text"]),
                int(usage["prompt_tokens"]),
                int(usage.get("completion_tokens", 0)),
                _cached(data),
                seconds,
            )
            finish = choice.get("finish_reason")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise ServerError(
                f"model server {self.url}: a completion without choices[0].text or usage.prompt_tokens "
                f"(so whether it read the whole prompt cannot be told: {text[:80]!r}); "
                f"not an OpenAI-compatible server ({self.settings}_URL)"
            ) from None
        if out.prompt_tokens < n_prompt:
            raise ContextExceeded(self._context_message(n_prompt + max_tokens, None, read=out.prompt_tokens))
        if finish == "length" and out.generated < max_tokens:
            raise ContextExceeded(self._context_message(n_prompt + max_tokens, None, room=out.generated))
        return out

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
    """``/v1/embeddings`` of ``inputs``: one vector each, in order.

    Raises
    ------
    ServerError
        As :meth:`ServerClient._json`; an answer without one numeric vector per input, or vectors
        of different widths.
    """
    data = client._json("POST", "/v1/embeddings", {"model": client.model, "input": inputs})
    rows = data.get("data")
    try:
        got = sorted(rows, key=lambda r: r["index"]) if all("index" in r for r in rows) else list(rows)
        vecs = [r["embedding"] for r in got]
        ok = (
            len(vecs) == len(inputs)
            and all(isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v) for v in vecs)
            and len({len(v) for v in vecs}) == 1
        )
    except (TypeError, KeyError, AttributeError):
        ok = False
    if not ok:
        raise ServerError(
            f"model server {client.url} /v1/embeddings: not one vector of numbers for each of the "
            f"{len(inputs)} inputs ({client.settings}_URL)"
        )
    return vecs


def _cached(data: dict) -> int | None:
    """Prompt tokens the server says it reused from its cache, where it says so: OpenAI's
    ``usage.prompt_tokens_details.cached_tokens`` (vLLM, llama-server), llama-server's
    ``timings.cache_n``; ``None`` where it does not (llama-cpp-python's server)."""
    details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
    if isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    n = (data.get("timings") or {}).get("cache_n")
    return n if isinstance(n, int) else None
