"""The Anthropic client's bounds and the Message Batches ledger, against the FAKE API.

:class:`fake_anthropic.FakeAnthropic` stands in for the paid API (this machine cannot reach it);
a raw-socket server on 127.0.0.1 plays a hostile endpoint.  No model is loaded and no ingest runs:
the client (:class:`MessagesClient`, the real ``anthropic`` SDK) and the round
(:class:`MessageBatchRound`, with :class:`BatchLedger` over a dict) are driven directly.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import socket
import threading
import time

import pytest
from fake_anthropic import ALIAS, KEY, FakeAnthropic

from situate.resources.models import anthropic_api
from situate.resources.models.anthropic_api import AnswerRefused, MessagesClient
from situate.resources.models.llm import API_USAGE, api_usage_since
from situate.resources.models.message_batches import LEDGER, BatchLedger, MessageBatchRound
from situate.resources.models.server import ServerError


@pytest.fixture
def fake():
    f = FakeAnthropic()
    f.batch_looks = 1  # ended on the first look
    yield f
    f.close()


class DictStore:
    """``store.read_file`` / ``write_file`` over a dict (the ledger's only needs)."""

    def __init__(self, files: dict | None = None):
        self.files = dict(files or {})

    def read_file(self, rel: str):
        return self.files.get(rel)

    def write_file(self, rel: str, data: bytes) -> None:
        self.files[rel] = data


def _ledger(store: DictStore) -> dict:
    return json.loads(store.files[LEDGER]) if LEDGER in store.files else {}


def _client(url: str, timeout: float = 5, retries: int = 0) -> MessagesClient:
    return MessagesClient(ALIAS, KEY, url, retries=retries, timeout=timeout)


def _round(client: MessagesClient, texts: list[str]) -> tuple[MessageBatchRound, list[str]]:
    """A round with one request a text gathered (as the first pass would), and their custom ids."""
    r = MessageBatchRound(client, poll_s=0.01, wait_s=20)
    cids = []
    for t in texts:
        params = client.params("", [f"<document>\n{t}\n</document>", f"<chunk>\n{t}\n</chunk>"], "", 24, [])
        cid = hashlib.sha256(json.dumps([params, []], sort_keys=True).encode()).hexdigest()
        r.requests[cid] = (params, [])
        cids.append(cid)
    return r, cids


def _submit(r: MessageBatchRound, store: DictStore) -> dict:
    return r.submit_and_wait(sleep=lambda s: None, ledger=BatchLedger(store))


TEXTS = ["The signing service rotates its keys nightly.", "Invoices are sent monthly by billing."]


# --- the model check -------------------------------------------------------------------------


def test_a_model_id_that_holds_the_key_is_replaced_by_the_name_asked(fake, monkeypatch):
    """A gateway at SITUATE_LLM_URL answering the model check with an id that quotes the key it was
    sent: the id would be every row's llm_model, so the check records the name asked instead and
    says why, without quoting the key (the OpenAI-compatible client, with no name asked, refuses
    such a listed name)."""
    import fake_anthropic

    monkeypatch.setattr(fake_anthropic, "MODEL_ID", f"claude-fake-{KEY}")
    client = _client(fake.url)
    info = client.check()
    assert info.model == "claude-fake" and KEY not in repr(info)
    assert "answered the model check with a model id that holds ANTHROPIC_API_KEY" in info.warning, info.warning
    monkeypatch.setattr(fake_anthropic, "MODEL_ID", "claude-fake-20261201")  # the gateway mended
    assert client.check() == type(info)(info.url, "claude-fake-20261201")


def test_a_key_in_a_model_name_is_found_as_is_or_escaped():
    from situate.resources.models.server import hide_key, served_name

    key = 'sk/"ant é'
    for name in (f"m-{key}", r"m-sk/\"ant \u00e9", r'm-sk\/"ant é', "m-sk/%22ant%20%C3%A9"):  # as is, JSON, \/, URL
        with pytest.raises(ServerError, match="whose name holds K: not taken as the served model's name \\(N\\)"):
            served_name(name, key, "x lists a model", "K", "N")
    assert served_name("claude-haiku-4-5", key, "x", "K", "N") == "claude-haiku-4-5"
    assert served_name("anything", "", "x", "K", "N") == "anything"  # no key: nothing to find
    assert hide_key(f"a {key} b", key, "<K>") == "a <K> b"


# --- the ledger ------------------------------------------------------------------------------


def test_a_ledger_nested_past_the_parser_is_ignored():
    for raw in (b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000):
        assert BatchLedger(DictStore({LEDGER: raw})).read() == {}
    ok = json.dumps({"msgbatch_1": ["a" * 64]}).encode()
    assert BatchLedger(DictStore({LEDGER: ok})).read() == {"msgbatch_1": ["a" * 64]}


def test_a_batch_the_api_no_longer_knows_is_forgotten_and_its_requests_sent_again(fake):
    client = _client(fake.url)
    r, cids = _round(client, TEXTS)
    store = DictStore({LEDGER: json.dumps({"msgbatch_gone": cids, "msgbatch_other": ["b" * 64]}).encode()})
    logs: list[str] = []
    s = r.submit_and_wait(log=logs.append, sleep=lambda s: None, ledger=BatchLedger(store))
    assert set(r.answers) == set(cids) and not r.failures, r.failures
    (batch,) = fake.batches.values()  # sent again, in this run
    assert {q["custom_id"] for q in batch["requests"]} == set(cids)
    assert _ledger(store) == {"msgbatch_other": ["b" * 64]}  # a batch of other requests is kept
    assert "404" in s["forgotten"]["msgbatch_gone"] and s["batches"] == ["msgbatch_fake0"]
    assert any("msgbatch_gone forgotten" in line and "unknown to" in line for line in logs), logs
    # the next run has nothing to resume and nothing to send
    r2, _ = _round(client, [])
    assert _submit(r2, store)["forgotten"] == {} and len(fake.batches) == 1


def test_a_result_line_whose_custom_id_is_not_a_string_is_skipped_alone(fake):
    client = _client(fake.url)
    r, cids = _round(client, TEXTS)
    orig = fake.new_batch

    def hostile(requests):
        bid = orig(requests)
        results = fake.batches[bid]["results"]
        results.insert(0, {"custom_id": ["not", "a", "string"], "result": {"type": "expired"}})
        results.insert(1, {"custom_id": {"x": 1}, "result": None})
        results.insert(2, {"result": {"type": "succeeded"}})
        results.insert(3, "a JSON string, not an object")
        results.insert(4, {"custom_id": cids[0], "result": {"type": "succeeded", "message": 5}})
        return bid

    fake.new_batch = hostile
    store = DictStore()
    s = _submit(r, store)
    assert set(r.failures) == {cids[0]} and "not a Messages API answer" in r.failures[cids[0]], r.failures
    assert set(r.answers) == {cids[1]} and not s["error"], s
    assert _ledger(store) == {} and s["forgotten"] == {}


def test_results_that_are_not_json_lines_forget_the_batch_and_keep_what_was_read(fake):
    client = _client(fake.url)
    r, cids = _round(client, TEXTS)
    orig = fake.new_batch

    def not_json(requests):
        bid = orig(requests)
        fake.batches[bid]["results"].insert(1, b"{oops")
        return bid

    fake.new_batch = not_json
    store = DictStore({LEDGER: b"[" * 100_000 + b"]" * 100_000})  # a ledger nested too deep: ignored
    s = _submit(r, store)
    first = fake.batches["msgbatch_fake0"]["results"][0]["custom_id"]
    assert set(r.answers) == {first}, (r.answers, r.failures)
    (why,) = r.failures.values()
    assert "not JSON lines" in why and "forgotten, the next run sends this request again" in why, why
    assert "msgbatch_fake0" in s["forgotten"] and _ledger(store) == {}


def test_results_on_another_origin_are_refused_and_the_key_never_sent(fake):
    seen: list[tuple] = []
    other = _Collector(seen)
    try:
        orig = fake.batch_json

        def moved(bid):
            d = orig(bid)
            if d["results_url"]:
                d["results_url"] = f"http://localhost:{other.port}/v1/messages/batches/{bid}/results"
            return d

        fake.batch_json = moved
        client = _client(fake.url)
        r, cids = _round(client, TEXTS)
        store = DictStore()
        s = _submit(r, store)
        assert not r.answers and set(r.failures) == set(cids)
        why = next(iter(r.failures.values()))
        assert "another origin than SITUATE_LLM_URL" in why and "not sent" in why, why
        assert "msgbatch_fake0" in s["forgotten"] and _ledger(store) == {}
        # the check the round makes first aside, the HTTP client refuses the other origin itself
        # (a batch that changes its results_url between two looks, a redirect elsewhere)
        with pytest.raises(AnswerRefused, match="another origin"):
            client.client.messages.batches.results("msgbatch_fake0")
        assert seen == [] and other.hits == 0
    finally:
        other.close()


def test_a_resumed_batchs_billed_answers_are_counted_used_or_not(fake):
    client = _client(fake.url)
    r1, cids = _round(client, TEXTS)
    fake.batch_looks = 10**6  # run 1 stops waiting with its batch in progress
    r1.wait_s = 0
    store = DictStore()
    _submit(r1, store)
    assert set(_ledger(store)["msgbatch_fake0"]) == set(cids) and not r1.answers
    fake.batch_looks = 0
    start = dict(API_USAGE)
    r2, cids2 = _round(client, [TEXTS[0], "Invoices are sent weekly by billing."])  # one document edited
    assert cids2[0] == cids[0] and cids2[1] not in cids
    s = _submit(r2, store)
    assert set(r2.answers) == set(cids2) and not r2.failures
    assert len(fake.batches) == 2 and s["batches"] == ["msgbatch_fake0", "msgbatch_fake1"]
    used = api_usage_since(start)
    billed = fake.usages  # every answer the FAKE billed: both of batch 0, the one of batch 1
    assert used["batch_requests"] == len(billed) == 3
    assert used["batch_generated"] == sum(u["output_tokens"] for u in billed)
    assert used.get("batch_reused", 0) == sum(u["cache_read_input_tokens"] for u in billed)
    assert used["batch_evaluated"] == sum(u["input_tokens"] + u["cache_creation_input_tokens"] for u in billed)


def test_a_passing_failure_keeps_the_batch_for_the_next_run_which_counts_it_once(fake):
    client = _client(fake.url)
    r, cids = _round(client, TEXTS)
    orig = fake.new_batch

    def unreadable_once(requests):
        bid = orig(requests)
        fake.batches[bid]["kept"] = fake.batches[bid]["results"]
        fake.batches[bid]["results"] = [object()]  # the FAKE's handler dies: the connection drops
        return bid

    fake.new_batch = unreadable_once
    store = DictStore()
    start = dict(API_USAGE)
    s = _submit(r, store)
    assert s["error"] and not r.answers and set(_ledger(store)) == {"msgbatch_fake0"}
    why = r.failures[cids[0]]
    assert "not collected" in why and "the next run collects its answers" in why, why
    assert api_usage_since(start) == {}  # nothing read to its end: counted by the run that does
    batch = fake.batches["msgbatch_fake0"]
    batch["results"] = batch["kept"]
    r2, _ = _round(client, TEXTS)
    s2 = _submit(r2, store)
    assert set(r2.answers) == set(cids) and not s2["error"] and _ledger(store) == {}
    assert len(fake.batches) == 1 and api_usage_since(start)["batch_requests"] == 2


def test_a_result_line_over_its_bound_forgets_the_batch(fake, monkeypatch):
    monkeypatch.setattr(anthropic_api, "MAX_RESULT_LINE_BYTES", 32 * 1024)
    client = _client(fake.url)
    r, cids = _round(client, TEXTS)
    orig = fake.new_batch

    def long_line(requests):
        bid = orig(requests)
        fake.batches[bid]["results"][1]["result"]["message"]["padding"] = "x" * 100_000
        return bid

    fake.new_batch = long_line
    store = DictStore()
    s = _submit(r, store)
    assert len(r.answers) == 1 and "MAX_RESULT_LINE_BYTES" in s["forgotten"]["msgbatch_fake0"], s
    assert _ledger(store) == {}


# --- a hostile endpoint: time and size ---------------------------------------------------------


class _Raw:
    """A raw-socket HTTP server on 127.0.0.1: ``answer(conn, request head)`` writes what it likes."""

    def __init__(self, answer):
        self.answer, self.heads, self.hits = answer, [], 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                part = c.recv(65536)
                if not part:
                    return
                data += part
            head, _, rest = data.partition(b"\r\n\r\n")
            n = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
            while len(rest) < n:
                rest += c.recv(65536)
            self.hits += 1
            self.heads.append(head.decode("latin-1"))
            self.answer(c, head.decode("latin-1"), self)
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stop.set()
        self.sock.close()


class _Collector(_Raw):
    def __init__(self, seen):
        super().__init__(lambda c, head, srv: seen.append(head))


MESSAGE = {
    "id": "m",
    "type": "message",
    "role": "assistant",
    "model": "claude-fake-1",
    "stop_reason": "end_turn",
    "content": [{"type": "text", "text": "This chunk is about keys."}],
    "usage": {"input_tokens": 10, "output_tokens": 5},
}


def _complete(client: MessagesClient):
    return client.complete("", ["<document>doc</document>", "<chunk>c</chunk>"], "This chunk is about", 24, [])


def _timed(client) -> tuple[float, str]:
    t0 = time.monotonic()
    try:
        r = _complete(client)
        out = f"returned {r.text!r}"
    except ServerError as e:
        out = f"{type(e).__name__}: {e}"
    return time.monotonic() - t0, out


def test_a_trickled_answer_is_cut_at_the_timeout_headers_or_body():
    def body(c, head, srv):
        b = json.dumps(MESSAGE).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(b))
        for ch in b:
            if srv.stop.is_set():
                return
            time.sleep(0.3)
            c.sendall(bytes([ch]))

    def headers(c, head, srv):
        c.sendall(b"HTTP/1.1 200 OK\r\n")
        for n in range(200):
            if srv.stop.is_set():
                return
            time.sleep(0.3)
            c.sendall(b"x-slow-%d: 1\r\n" % n)

    for answer in (body, headers):
        srv = _Raw(answer)
        try:
            took, out = _timed(_client(srv.url, timeout=1.5))
            assert 1.4 < took < 3.0, (answer.__name__, took, out)
            assert "took longer than SITUATE_LLM_TIMEOUT" in out, out
        finally:
            srv.close()
    # a prompt's upload adds its time at MIN_UPLOAD_RATE: a normal answer is not cut
    srv = _Raw(lambda c, head, s: c.sendall(_http(json.dumps(MESSAGE).encode())))
    try:
        took, out = _timed(_client(srv.url, timeout=1.5))
        assert out.startswith("returned") and took < 1.5, out
    finally:
        srv.close()


def _http(body: bytes, extra: bytes = b"", length: bool = True) -> bytes:
    size = b"content-length: %d\r\n" % len(body) if length else b"connection: close\r\n"
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + size + extra + b"\r\n" + body


def test_an_answer_over_its_bound_is_refused_as_it_arrives(monkeypatch):
    monkeypatch.setattr(anthropic_api, "MAX_RESPONSE_BYTES", 256 * 1024)
    big = json.dumps({**MESSAGE, "content": [{"type": "text", "text": "x" * 4_000_000}]}).encode()

    def declared(c, head, srv):
        c.sendall(_http(big))

    def undeclared(c, head, srv):  # no content-length: the body runs to the connection's end
        c.sendall(_http(b"", length=False))
        for i in range(0, len(big), 65536):
            c.sendall(big[i : i + 65536])

    for answer in (declared, undeclared):
        srv = _Raw(answer)
        try:
            took, out = _timed(_client(srv.url))
            assert out.startswith("AnswerRefused") and "MAX_RESPONSE_BYTES" in out and "262,144" in out, out
            assert srv.url.split("//")[1] in out and took < 2, (took, out)
        finally:
            srv.close()


def test_compressed_answers_are_not_asked_for_and_refused():
    packed = gzip.compress(json.dumps(MESSAGE).encode())
    srv = _Raw(lambda c, head, s: c.sendall(_http(packed, b"content-encoding: gzip\r\n")))
    try:
        took, out = _timed(_client(srv.url))
        assert "content coding 'gzip'" in out, out
        assert "accept-encoding: identity" in srv.heads[0].lower()
    finally:
        srv.close()


def test_a_redirect_to_another_origin_is_refused_before_it_is_asked():
    seen: list = []
    other = _Collector(seen)
    srv = _Raw(
        lambda c, head, s: c.sendall(
            b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://localhost:%d/v1/messages\r\n"
            b"content-length: 0\r\n\r\n" % other.port
        )
    )
    try:
        took, out = _timed(_client(srv.url))
        assert "another origin than SITUATE_LLM_URL" in out and "localhost" in out, out
        assert seen == [] and other.hits == 0
    finally:
        srv.close()
        other.close()
