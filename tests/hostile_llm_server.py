"""A HOSTILE OpenAI-compatible model server on 127.0.0.1, for tests: raw sockets, so every byte
of its answers is the test's (a trickle of headers, a body quoting the request's key, values of
the wrong type).  It is no model: it answers what its ``mode`` says.

Start-up requests are answered as a well server would: ``/v1/models`` lists ``models``
(``hostile-model``),
``/extras/tokenize`` answers ``tokens`` (give it the local GGUF's tokens of situate's ``PROBE`` for
a client's check to pass), the one-token completion (prompt ``"a"``) and the embeddings probe
(input ``["a"]``, 8-wide vectors).  Every other completion or embeddings request gets ``mode``:

completions: ``ok``, ``ok_cached`` (usage reports 7 cached prompt tokens), ``echo400`` (HTTP 400
quoting the Authorization header), ``echo400_escaped`` (the same, JSON-escaped with ``\\/``),
``echo200`` (200 without choices, quoting it), ``huge_text`` (a 2 MiB text), ``long_text`` (a
text of ``long_chars`` characters), ``json_amp`` (2 MiB of nested empty lists), ``neg_tokens``,
``inf_tokens`` (``prompt_tokens: 1e999``), ``text_obj`` (a JSON object as the text),
``slow_headers`` (a header line every 0.3 s until the client leaves), ``slow_body`` (a body byte
every 0.3 s).
embeddings: ``ok``, ``width_flip`` (every second request's vectors are 4 wide), ``bools``,
``nan``, ``bigfloat`` (1e300, beyond float32), ``echo400``.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time

MODEL = "hostile-model"
#: a stand-in for a GGUF's tokens of situate's probe text (the test's ``local_tokens`` answers the same)
TOKENS = [1, 2, 3, 4]


def _vec(text: str, width: int) -> list:
    h = hashlib.sha256(text.encode()).digest()
    return [(h[i % 32] - 128) / 128.0 + 0.01 for i in range(width)]


class HostileServer:
    """The server, serving from a daemon thread until :meth:`stop`; ``mode`` may be changed at
    any time; ``requests`` lists ``(method, path, mode)`` of each request."""

    def __init__(self, tokens: list[int] | None = None, mode: str = "ok"):
        self.tokens, self.mode, self.long_chars, self.models = tokens or TOKENS, mode, 0, [MODEL]
        self.requests: list[tuple[str, str, str]] = []
        self._embeddings = 0
        self._stopped = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(32)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _read(self, conn) -> tuple[str, str, dict, dict]:
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                raise ConnectionError
            data += part
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        while len(rest) < int(headers.get("content-length") or 0):
            rest += conn.recv(65536)
        return method, path, headers, json.loads(rest) if rest else {}

    def _handle(self, conn) -> None:
        try:
            conn.settimeout(30)
            method, path, headers, body = self._read(conn)
            self.requests.append((method, path, self.mode))
            auth = headers.get("authorization", "")
            if path == "/v1/models":
                return _send(conn, 200, {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})
            if path == "/extras/tokenize":
                return _send(conn, 200, {"tokens": self.tokens})
            if path == "/v1/embeddings":
                return self._embed(conn, body, auth)
            if path == "/v1/completions":
                return self._complete(conn, body, auth)
            _send(conn, 404, {"error": "not found"})
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            conn.close()

    def _embed(self, conn, body: dict, auth: str) -> None:
        inputs, m = body.get("input") or [], self.mode
        rows = [{"object": "embedding", "index": i, "embedding": _vec(t, 8)} for i, t in enumerate(inputs)]
        if inputs != ["a"]:  # not the start-up probe
            self._embeddings += 1
            if m == "echo400":
                return _send(conn, 400, f'{{"error": "bad request; you sent Authorization: {auth}"}}')
            for r in rows:
                v = r["embedding"]
                if m == "width_flip" and self._embeddings % 2 == 0:
                    r["embedding"] = v[:4]
                elif m == "bools":
                    r["embedding"] = [True, False] * 4
                elif m in ("nan", "bigfloat"):
                    v[0] = float("nan") if m == "nan" else 1e300
        _send(conn, 200, json.dumps({"object": "list", "model": MODEL, "data": rows}, allow_nan=True))

    def _complete(self, conn, body: dict, auth: str) -> None:
        m = "ok" if body.get("prompt") == "a" else self.mode
        ok = {
            "id": "c",
            "object": "text_completion",
            "model": MODEL,
            "choices": [{"index": 0, "text": " the part of the guide on key rotation.", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10**6, "completion_tokens": 9, "total_tokens": 10**6 + 9},
        }
        choice, usage = ok["choices"][0], ok["usage"]
        if m == "echo400":
            return _send(conn, 400, f'{{"error": "bad request; you sent Authorization: {auth}"}}')
        if m == "echo400_escaped":
            return _send(conn, 400, json.dumps({"error": f"you sent {auth}"}).replace("/", "\\/"))
        if m == "echo200":
            return _send(conn, 200, f'{{"error": "you sent {auth}"}}')
        if m in ("slow_headers", "slow_body"):
            return self._trickle(conn, m, json.dumps(ok).encode())
        if m == "json_amp":
            pad = b"[]," * (2 * 2**20 // 3)
            head = b'{"choices": [{"text": "x"}], "usage": {"prompt_tokens": 1}, "pad": ['
            return _send(conn, 200, head + pad + b"[]]}")
        if m == "ok_cached":
            usage["prompt_tokens_details"] = {"cached_tokens": 7}
        elif m in ("huge_text", "long_text"):
            choice["text"] = " key rotation" + "x" * ((2 * 2**20) if m == "huge_text" else self.long_chars - 13)
        elif m == "neg_tokens":
            usage["completion_tokens"], usage["prompt_tokens_details"] = -123456789, {"cached_tokens": -99999}
        elif m == "text_obj":
            choice["text"] = {"evil": ["rotate", "keys"]}
        elif m == "inf_tokens":
            return _send(conn, 200, json.dumps(ok).replace('"prompt_tokens": 1000000', '"prompt_tokens": 1e999'))
        _send(conn, 200, ok)

    def _trickle(self, conn, m: str, body: bytes) -> None:
        """Headers a line at a time (forever, until the client leaves or the server stops), or
        at once with the body a byte at a time."""
        if m == "slow_headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for i in range(10**6):
                if self._stopped.wait(0.3):
                    return
                conn.sendall(b"X-Slow-%d: y\r\n" % i)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        for b in body:
            if self._stopped.wait(0.3):
                return
            conn.sendall(bytes([b]))


def _send(conn, status: int, body) -> None:
    data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
    conn.sendall(
        b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        % (status, len(data))
        + data
    )


def started(mode: str = "ok", tokens: list[int] | None = None) -> HostileServer:
    """A :class:`HostileServer` in ``mode``, serving (stop it with :meth:`HostileServer.stop`)."""
    server = HostileServer(tokens, mode)
    time.sleep(0.05)
    return server
