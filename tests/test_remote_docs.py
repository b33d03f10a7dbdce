"""A docs source on object storage against a loopback S3 STUB (:mod:`tests.s3_stub`; a real store
cannot be made to hold these keys or to lie about a size): objects whose keys obstore cannot
parse are skipped and named while the others are listed; a GET is read up to the bound whatever
the HEAD said, and only as the version the HEAD gave.  The listing (s3fs) against a real S3 server
(SeaweedFS) is in ``tests/test_object_store.py``."""

from __future__ import annotations

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
