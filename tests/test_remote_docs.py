"""A docs source on object storage against a loopback S3 STUB (:mod:`tests.s3_stub`; a real store
cannot be made to hold these keys or to lie about a size): objects whose keys obstore cannot
parse are skipped and named while the others are listed; a GET is read up to the bound whatever
the HEAD said, and only as the version the HEAD gave.  The listing (s3fs) against a real S3 server
(SeaweedFS) is in ``tests/test_object_store.py``."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager

import pytest
from s3_stub import s3_stub

from situate.resources.documents import remote
from situate.resources.errors import DocumentError, StoreUnavailable
from situate.resources.store.objects import ObjectFolder

GOOD = {
    "docs/keys.md": {"body": "# Keys\n\nRotate the signing keys nightly.\n", "etag": "aaa"},
    "docs/billing.md": {"body": "# Billing\n\nInvoices are sent monthly.\n", "etag": "bbb"},
}


def test_objects_whose_keys_the_client_cannot_read_are_skipped_and_named(monkeypatch):
    odd = {k: {"body": "# Odd\n", "etag": "ccc"} for k in ("docs/notes/../evil.md", "docs//empty.md", "docs/a\x01b.md")}
    # pages of two keys: the odd ones fall on several pages, each page goes on past them
    with s3_stub({**GOOD, **odd, "docs/zeta.md": {"body": "# Z\n", "etag": "z"}}, monkeypatch, page=2) as log:
        skipped: list[str] = []
        refs = remote.discover_objects("s3://bucket/docs", skipped)
    assert [r.source for r in refs] == ["billing.md", "keys.md", "zeta.md"]
    assert [r.sha256 for r in refs] == ["etag:bbb", "etag:aaa", "etag:z"]
    assert sum("list-type=2" in line for line in log) == 3  # 6 objects, 2 a page
    assert len(skipped) == 3 and all("under s3://bucket/docs skipped" in s for s in skipped)
    text = "\n".join(skipped)
    assert "'notes/../evil.md'" in text and "a '..' path segment" in text
    assert "'/empty.md'" in text and "an empty path segment" in text
    assert "'a\\x01b.md'" in text and "a control character" in text and "\x01" not in text
    # the stub is gone now: the listing (s3fs) names the endpoint, in one line, after one try
    with pytest.raises(
        StoreUnavailable, match=r"^cannot reach the object store at http://127\.0\.0\.1:\d+ for s3://bucket/docs/ "
    ):
        ObjectFolder("s3://bucket/docs", retries=0).list_objects()


def test_a_get_longer_than_its_head_is_refused_at_the_bound(monkeypatch):
    monkeypatch.setattr(remote, "MAX_FILE_BYTES", 100_000)
    big = {"body": "# Big\n", "etag": "ddd", "head_size": 10, "get_bytes": 4 * 2**20}
    with s3_stub({**GOOD, "docs/big.md": big}, monkeypatch):
        ref = remote.resolve_object("s3://bucket/docs", "big.md")
        with pytest.raises(DocumentError, match=r"big.md: too large: its GET carries over 100,000 bytes"):
            remote.read_object(ref)
        assert remote.read_object(remote.resolve_object("s3://bucket/docs", "keys.md")).startswith(b"# Keys")


def test_an_object_whose_get_is_another_version_is_refused(monkeypatch):
    swapped = {"body": "# New text\n", "etag": "v1", "get_etag": "v2"}
    with s3_stub({**GOOD, "docs/swapped.md": swapped}, monkeypatch) as log:
        ref = remote.resolve_object("s3://bucket/docs", "swapped.md")
        assert ref.sha256 == "etag:v1"
        with pytest.raises(DocumentError, match=r"swapped.md: changed while it was read \(its ETag is v2 now"):
            remote.read_object(ref)
        # listed as v1, replaced (v3) before the read: refused before any GET
        swapped["etag"] = "v3"
        gets = sum(line.startswith("GET /bucket/docs/swapped.md") for line in log)
        with pytest.raises(DocumentError, match=r"changed since it was listed \(ETag v3\)"):
            remote.read_object(ref)
        assert sum(line.startswith("GET /bucket/docs/swapped.md") for line in log) == gets


def test_a_store_error_naming_a_key_keeps_it_on_one_line_and_the_examples_hold():
    import doctest

    from situate.resources.store import objects

    said = objects._reason(ValueError('Error parsing Path "docs/a\x01b\x1bc.md": x\nDebug'), "s3://bucket/docs", None)
    assert "a\\x01b\\x1bc.md" in said and "\x01" not in said and "Debug" not in said
    for m in (objects, remote):
        assert doctest.testmod(m).failed == 0, m.__name__


def test_a_docs_listing_is_bounded_in_page_bytes_and_objects(monkeypatch):
    """A page over ``MAX_LIST_PAGE_BYTES`` is refused before it is parsed, a listing past
    ``MAX_LISTED`` objects is stopped (both lowered here), each named with the prefix."""
    from situate.resources.store import objects

    monkeypatch.setattr(objects, "MAX_LIST_PAGE_BYTES", 300)
    with s3_stub(GOOD, monkeypatch) as log:
        with pytest.raises(StoreUnavailable, match=r"answered a listing page of s3://bucket/docs/ over 300 bytes"):
            ObjectFolder("s3://bucket/docs").list_objects()
        assert len(log) == 1  # refused, not retried
    monkeypatch.setattr(objects, "MAX_LIST_PAGE_BYTES", 16 * 2**20)
    monkeypatch.setattr(objects, "MAX_LISTED", 3)
    with s3_stub({f"docs/{i}.md": {"body": "x"} for i in range(7)}, monkeypatch, page=2) as log:
        with pytest.raises(StoreUnavailable, match=r"the listing of s3://bucket/docs/ goes on past 3 objects"):
            ObjectFolder("s3://bucket/docs").list_objects()
        assert len(log) == 2  # the third page is never asked for


#: A ListObjectsV2 page of one object, as the FAKE endpoint below answers it.
PAGE = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>bucket</Name><Prefix>docs/</Prefix><KeyCount>1</KeyCount><IsTruncated>false</IsTruncated>"
    b"<Contents><Key>docs/a.md</Key><ETag>&quot;e1&quot;</ETag><Size>12</Size></Contents></ListBucketResult>"
)


def _answer_listing(conn, mode: str, seen: dict) -> None:
    """Answer one ListObjectsV2 request on ``conn`` as ``mode`` says (:func:`hostile_listing`)."""
    import time

    big = 64 * 2**20
    if mode == "trickle":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n" % len(PAGE))
        pieces = [PAGE[i : i + 1] for i in range(len(PAGE))]
    elif mode == "length":
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n" % big)
        pieces = [b" " * 2**16] * (big // 2**16)
    else:  # chunked: no length said
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n")
        pieces = [b"10000\r\n" + b" " * 2**16 + b"\r\n"] * (big // 2**16) + [b"0\r\n\r\n"]
    for piece in pieces:
        if mode == "trickle":
            time.sleep(0.05)
        conn.sendall(piece)
        seen["sent"] += len(piece)


@contextmanager
def hostile_listing(mode: str, monkeypatch):
    """A FAKE S3 endpoint on 127.0.0.1 (a raw socket, as tests/s3_stub.py cannot misbehave) whose
    every ListObjectsV2 answer is hostile: ``trickle`` (a page's length said, then its body a byte
    every 0.05 s: every read gets data within any read timeout), ``length`` (a 64 MiB page said
    and sent as fast as it is read), ``chunked`` (the same, its length not said).  Yields
    ``{"requests": listing requests seen, "sent": body bytes the socket took}``."""
    seen = {"requests": 0, "sent": 0}
    server = socket.create_server(("127.0.0.1", 0))

    def handle(conn):
        with conn:
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536) or b"\r\n\r\n"
                seen["requests"] += "list-type=2" in head.split(b"\r\n", 1)[0].decode("latin-1")
                _answer_listing(conn, mode, seen)
            except OSError:  # the client hung up
                pass

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    for k, v in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    try:
        yield seen
    finally:
        server.close()


def test_a_trickled_listing_ends_at_the_request_timeout_and_the_next_listing_works(monkeypatch):
    """botocore's read_timeout bounds each read only: an endpoint sending a page a byte every
    0.05 s was read to its end (17 s here, for ever with a longer page).  The whole request (its
    retries included) now ends at the folder's timeout, as obstore's does, named; the process
    lists a healthy endpoint afterwards."""
    import time

    with hostile_listing("trickle", monkeypatch) as seen:
        t0 = time.monotonic()
        with pytest.raises(
            StoreUnavailable,
            match=r"at http://127\.0\.0\.1:\d+ did not answer a listing page of s3://bucket/docs/ within 1 s",
        ):
            ObjectFolder("s3://bucket/docs", timeout_s=1).list_objects()
        took = time.monotonic() - t0
    assert 1 <= took < 4, took
    assert seen["requests"] == 1 and seen["sent"] < len(PAGE) // 2
    with s3_stub(GOOD, monkeypatch):  # the endpoint healthy again: the next tick lists
        assert [m["path"] for m in ObjectFolder("s3://bucket/docs", timeout_s=1).list_objects()] == [
            "billing.md",
            "keys.md",
        ]


@pytest.mark.parametrize("mode", ["length", "chunked"])
def test_an_oversized_listing_page_is_refused_before_it_is_held(monkeypatch, mode):
    """A 64 MiB page, its length said or not, against a bound lowered to 1 MiB: refused by its
    Content-Length before any of it is read, or as soon as what arrived passes the bound (it was
    read whole first, 64 MiB, then refused); not retried."""
    from situate.resources.store import objects

    monkeypatch.setattr(objects, "MAX_LIST_PAGE_BYTES", 2**20)
    with hostile_listing(mode, monkeypatch) as seen:
        with pytest.raises(StoreUnavailable, match=r"a listing page of s3://bucket/docs/ over 1,048,576 bytes"):
            ObjectFolder("s3://bucket/docs").list_objects()
    assert seen["requests"] == 1
    assert seen["sent"] < 16 * 2**20, seen  # what the sockets' buffers took, at most; not the 64 MiB
