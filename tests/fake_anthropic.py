"""FAKE Anthropic Messages API: a local stand-in for a paid API this machine cannot reach.

It answers the three requests situate makes (``GET /v1/models/{id}``, ``POST /v1/messages``,
the key as ``Authorization: Bearer`` or ``x-api-key``) in the API's documented shapes, records every request
body, simulates
prompt caching (a block marked ``cache_control`` seen before is reported as read from the cache,
in ``cache_read_input_tokens``), and can be told to fail the next requests with 429 or 529 (with
``retry-after-ms``), to cut the connection, or to refuse a prompt as too long.  Its "model" writes
a sentence made of the chunk's first words: it is a fake, not a model.
"""

from __future__ import annotations

import http.server
import json
import re
import threading

KEY = "sk-ant-FAKE-key-0123456789"
#: The alias the tests ask for and the dated id the fake answers with (as the API does).
ALIAS, MODEL_ID = "claude-fake", "claude-fake-20261201"


def _words(text: str, n: int = 6) -> str:
    return " ".join(re.findall(r"[A-Za-z][A-Za-z_]+", text)[:n])


class FakeAnthropic:
    """FAKE: a ``ThreadingHTTPServer`` on 127.0.0.1 in a thread; ``url``, ``requests`` (bodies of
    ``POST /v1/messages``), ``fail`` (statuses to answer the next messages requests with, in
    order: 429, 529, or 0 to drop the connection), ``max_prompt_bytes``."""

    def __init__(self):
        self.requests: list[dict] = []
        self.usages: list[dict] = []  # the usage of each answer sent
        self.headers: list[dict] = []
        self.fail: list[int] = []
        self.max_prompt_bytes = 10**9
        # Message Batches: id -> {"requests", "results", "looks"}; ``batch_fail`` makes the first
        # requests of the next batch ``errored`` or ``expired``; a batch ends on its
        # ``batch_looks``-th retrieve
        self.batches: dict[str, dict] = {}
        self.batch_fail: list[str] = []
        self.batch_looks = 2
        # seconds each messages request takes, and (start, end, first block) of each, for
        # checking what was in flight at once
        self.delay = 0.0
        # hostile answers: the next messages requests get these (status, body bytes, content type),
        # None for a normal answer
        self.override: list[tuple[int, bytes, str]] = []
        # batch results replaced by position in the next batch (a dict: the result object)
        self.batch_override: dict[int, dict] = {}
        self.spans: list[tuple[float, float, str]] = []
        self.cached: set[str] = set()
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status: int, obj: dict, headers: dict | None = None):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("request-id", "req_fake")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, kind: str, message: str, headers: dict | None = None):
                self._send(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

            def _authorised(self) -> bool:
                # the SDK (2.16) sends the key as a bearer token; older ones as x-api-key
                if KEY not in (
                    self.headers.get("x-api-key"),
                    self.headers.get("authorization", "").removeprefix("Bearer "),
                ):
                    self._error(401, "authentication_error", "invalid x-api-key")
                    return False
                return True

            def do_GET(self):
                if not self._authorised():
                    return
                b = re.fullmatch(r"/v1/messages/batches/([^/?]+)(/results)?(?:\?.*)?", self.path)
                if b:
                    batch = fake.batches.get(b.group(1))
                    if batch is None:
                        return self._error(404, "not_found_error", b.group(1))
                    if b.group(2):
                        # a result given as bytes is served as that line, as it is (not JSON, say)
                        data = b"".join(
                            (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in batch["results"]
                        )
                        self.send_response(200)
                        self.send_header("content-type", "application/binary")
                        self.send_header("content-length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    batch["looks"] += 1
                    return self._send(200, fake.batch_json(b.group(1)))
                m = re.fullmatch(r"/v1/models/([^/?]+)", self.path)
                if not m or m.group(1) not in (ALIAS, MODEL_ID):
                    return self._error(404, "not_found_error", f"model: {m.group(1) if m else self.path}")
                self._send(
                    200,
                    {
                        "type": "model",
                        "id": MODEL_ID,
                        "display_name": "Claude Fake",
                        "created_at": "2026-12-01T00:00:00Z",
                    },
                )

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
                if self.path.split("?")[0] == "/v1/messages/batches":
                    if not self._authorised():
                        return
                    return self._send(200, fake.batch_json(fake.new_batch(body["requests"])))
                if self.path.split("?")[0] != "/v1/messages":
                    return self._error(404, "not_found_error", self.path)
                if not self._authorised():
                    return
                with fake.lock:
                    fake.requests.append(body)
                    fake.headers.append(dict(self.headers))
                    status = fake.fail.pop(0) if fake.fail else 200
                hostile = fake.override.pop(0) if fake.override and status == 200 else None
                if hostile is not None:  # None in the list: that request is answered normally
                    code, raw, ctype = hostile
                    self.send_response(code)
                    self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if status == 0:  # a dropped connection
                    self.connection.shutdown(2)
                    return
                if status == 429:
                    return self._error(429, "rate_limit_error", "rate limited", {"retry-after-ms": "5"})
                if status == 529:
                    return self._error(529, "overloaded_error", "Overloaded", {"retry-after-ms": "5"})
                if body.get("model") not in (ALIAS, MODEL_ID):
                    return self._error(404, "not_found_error", f"model: {body.get('model')}")
                size = fake.prompt_bytes(body)
                if size > fake.max_prompt_bytes:
                    return self._error(
                        400,
                        "invalid_request_error",
                        f"prompt is too long: {size} tokens > {fake.max_prompt_bytes} maximum",
                    )
                import time

                t0 = time.monotonic()
                time.sleep(fake.delay)
                answer = fake.answer(body)
                with fake.lock:
                    fake.usages.append(answer["usage"])
                    content = body["messages"][0]["content"]
                    fake.spans.append(
                        (t0, time.monotonic(), content[0]["text"] if isinstance(content, list) else content)
                    )
                self._send(200, answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def prompt_bytes(body: dict) -> int:
        user = body["messages"][0]["content"]
        blocks = [user] if isinstance(user, str) else [b["text"] for b in user]
        return sum(len(b.encode()) for b in blocks) + len(body.get("system", "").encode())

    def answer(self, body: dict) -> dict:
        """The Messages API answer to ``body``: usage with simulated caching (4 bytes a token)."""
        user = body["messages"][0]["content"]
        blocks = [user] if isinstance(user, str) else [b["text"] for b in user]
        read = written = 0
        plain = len(body.get("system", "").encode()) // 4
        for b in user if not isinstance(user, str) else [{"text": user}]:
            n = len(b["text"].encode()) // 4
            if b.get("cache_control"):
                with self.lock:
                    hit = b["text"] in self.cached
                    self.cached.add(b["text"])
                read, written = (read + n, written) if hit else (read, written + n)
            else:
                plain += n
        last = blocks[-1]
        m = re.search(r"<chunk>\n(.*?)(?:\n</chunk>|$)", last, re.S)
        topic = _words(m.group(1) if m else blocks[0].removeprefix("<document>"))
        started = body["messages"][1]["content"] if len(body["messages"]) > 1 else ""
        text = f"{'' if started else 'This chunk is about'} the part of the guide on {topic}."
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": MODEL_ID,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": plain,
                "output_tokens": len(text) // 4,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
            },
        }

    def new_batch(self, requests: list[dict]) -> str:
        """Answer a batch's requests now (they are read when it ends)."""
        bid = f"msgbatch_fake{len(self.batches)}"
        results = []
        for n, r in enumerate(requests):
            fail = self.batch_fail[n] if n < len(self.batch_fail) else ""
            if n in self.batch_override:
                msg = self.answer(r["params"])
                self.usages.append(msg["usage"])
                result = self.batch_override[n] | (
                    {"message": {**msg, **self.batch_override[n]["message"]}}
                    if "message" in self.batch_override[n]
                    else {}
                )
            elif fail == "errored":
                result = {
                    "type": "errored",
                    "error": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                }
            elif fail == "expired":
                result = {"type": "expired"}
            else:
                msg = self.answer(r["params"])
                self.usages.append(msg["usage"])
                result = {"type": "succeeded", "message": msg}
            results.append({"custom_id": r["custom_id"], "result": result})
        self.batch_fail = []
        self.batch_override = {}
        self.batches[bid] = {"requests": requests, "results": results, "looks": 0}
        return bid

    def batch_json(self, bid: str) -> dict:
        b = self.batches[bid]
        ended = b["looks"] >= self.batch_looks
        kinds = [(r.get("result") or {}).get("type") for r in b["results"] if isinstance(r, dict)]
        return {
            "id": bid,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {
                "processing": 0 if ended else len(kinds),
                "succeeded": kinds.count("succeeded"),
                "errored": kinds.count("errored"),
                "canceled": 0,
                "expired": kinds.count("expired"),
            },
            "created_at": "2026-12-03T00:00:00Z",
            "expires_at": "2026-12-04T00:00:00Z",
            "ended_at": "2026-12-03T00:01:00Z" if ended else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{bid}/results" if ended else None,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
