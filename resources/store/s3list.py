"""Listing an S3 prefix with every key as the store gives it (ListObjectsV2, signed with AWS
Signature Version 4), for a docs source on object storage.

S3 accepts any UTF-8 key (``docs/notes/../evil.md``, ``docs//empty.md``, a control character),
while obstore (the Rust ``object_store`` crate) parses each key of a listing page into its
``Path`` and fails the whole listing on one it cannot parse.  Here each key is kept as text, so
the caller can skip an odd one by name and go on with the others
(:func:`situate.resources.store.objects.odd_key`).  The keys are asked for URL-encoded
(``encoding-type=url``), so a control character never reaches the XML parser.

Used where the S3 credentials are given as keys (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``); otherwise obstore lists (its credential chain).

>>> canonical_query({"prefix": "docs/a b", "list-type": "2"})
'list-type=2&prefix=docs%2Fa%20b'
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import time
import xml.etree.ElementTree as ET
from urllib.parse import quote, unquote_plus, urlsplit

from situate.resources.errors import StoreUnavailable

#: Bytes one listing page may take: 1,000 keys (S3's page) of up to 1,024 bytes each, URL-encoded
#: (3 bytes a byte at worst) and wrapped in XML, stay well under it.
MAX_PAGE_BYTES = 16 * 2**20
#: Pages one listing may take (1,000 keys each on S3: ten million objects): a store that keeps
#: answering "truncated" is stopped, named.
MAX_PAGES = 10_000
#: SHA-256 of an empty body (the payload hash of a GET), as SigV4 defines it.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def canonical_query(params: dict[str, str]) -> str:
    """The query string as SigV4 signs it (and as it is sent): sorted, RFC 3986 encoded."""
    enc = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in enc)


def sign_v4(url: str, region: str, key_id: str, secret: str, token: str | None, now: _dt.datetime) -> dict[str, str]:
    """The headers of a signed S3 ``GET url`` (AWS Signature Version 4, empty body).

    Parameters
    ----------
    url : str
        The request's URL, its query already in :func:`canonical_query` form.
    region, key_id, secret, token : str
        The region, access key id, secret access key and session token (None for none).
    now : datetime
        The request's time (UTC).
    """
    u = urlsplit(url)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": u.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": stamp}
    if token:
        headers["x-amz-security-token"] = token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            "GET",
            quote(u.path or "/", safe="/-_.~"),
            u.query,
            "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(headers)),
            signed,
            EMPTY_SHA256,
        ]
    )
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = ("AWS4" + secret).encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    auth = f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return {**{k: v for k, v in headers.items() if k != "host"}, "authorization": auth}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_page(body: bytes) -> tuple[list[dict], str | None]:
    """A ListObjectsV2 answer's objects (``{"key", "size", "e_tag"}``, keys decoded) and its next
    continuation token (None on the last page).

    Raises
    ------
    ValueError
        Not a ListObjectsV2 answer (not XML, no ``ListBucketResult``, a size that is not a number).
    """
    root = ET.fromstring(body)
    if _local(root.tag) != "ListBucketResult":
        raise ValueError(f"not a ListObjectsV2 answer (<{_local(root.tag)[:40]}>)")
    fields = {_local(e.tag): (e.text or "") for e in root}
    encoded = fields.get("EncodingType", "").lower() == "url"
    out = []
    for item in root:
        if _local(item.tag) != "Contents":
            continue
        f = {_local(e.tag): (e.text or "") for e in item}
        key = unquote_plus(f.get("Key", "")) if encoded else f.get("Key", "")
        out.append({"key": key, "size": int(f.get("Size", "0")), "e_tag": f.get("ETag", "")})
    truncated = fields.get("IsTruncated", "false").strip().lower() == "true"
    return out, (fields.get("NextContinuationToken") or None) if truncated else None


def _error(status: int, body: bytes, where: str) -> str:
    text = body[:2000].decode("utf-8", "replace")
    code = text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""
    if code == "NoSuchBucket":
        return f"the bucket of {where} does not exist (create it first)"
    if status in (401, 403):
        return (
            f"the object store refused the credentials for {where} (HTTP {status} {code}; check "
            "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
        )
    return f"the object store failed for {where}: HTTP {status} {code[:60]}".rstrip()


class S3Lister:
    """ListObjectsV2 over one bucket, path-style (``<endpoint>/<bucket>``), signed with the keys of
    ``config`` (:func:`situate.resources.store.objects.store_config`).

    Parameters
    ----------
    bucket : str
        The bucket.
    config : dict
        ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``, ``aws_region``,
        ``aws_endpoint`` (default ``https://s3.<region>.amazonaws.com``).
    retries : int
        Retries of a page that failed to arrive or got a 5xx/429, with exponential back-off.
    timeout_s : float
        Seconds one page may take to arrive (connect, each read).
    """

    def __init__(self, bucket: str, config: dict[str, str], retries: int = 5, timeout_s: float = 30):
        self.bucket, self.config, self.retries, self.timeout_s = bucket, config, retries, timeout_s
        self.region = config.get("aws_region") or "us-east-1"
        self.endpoint = (config.get("aws_endpoint") or f"https://s3.{self.region}.amazonaws.com").rstrip("/")

    def _page(self, client, params: dict[str, str], where: str) -> bytes:
        import httpx  # imported when used (the command line starts faster)

        url = f"{self.endpoint}/{quote(self.bucket, safe='')}?{canonical_query(params)}"
        for attempt in range(self.retries + 1):
            c = self.config
            headers = sign_v4(
                url,
                self.region,
                c["aws_access_key_id"],
                c["aws_secret_access_key"],
                c.get("aws_session_token"),
                _dt.datetime.now(_dt.UTC),
            )
            try:
                with client.stream("GET", url, headers=headers) as r:
                    body = bytearray()
                    for chunk in r.iter_bytes():
                        body += chunk
                        if len(body) > MAX_PAGE_BYTES:
                            raise StoreUnavailable(
                                f"the object store answered a listing page of {where} over {MAX_PAGE_BYTES:,} bytes"
                            )
                    status = r.status_code
            except httpx.TransportError as e:
                if attempt < self.retries:
                    time.sleep(min(0.2 * 2**attempt, 5))
                    continue
                raise StoreUnavailable(
                    f"cannot reach the object store at {self.endpoint} for {where} ({type(e).__name__}; "
                    "is AWS_ENDPOINT_URL right and the server running?)"
                ) from None
            if status == 200:
                return bytes(body)
            if (status >= 500 or status == 429) and attempt < self.retries:
                time.sleep(min(0.2 * 2**attempt, 5))
                continue
            raise StoreUnavailable(_error(status, bytes(body), where))
        raise AssertionError("unreachable")

    def list(self, prefix: str) -> list[dict]:
        """Every object whose key starts with ``prefix``: ``{"key", "size", "e_tag"}``, the keys as
        the store has them.

        Raises
        ------
        StoreUnavailable
            Unreachable, refused credentials, a missing bucket, or an answer that is not a listing.
        """
        where = f"s3://{self.bucket}/{prefix}"
        out: list[dict] = []
        token: str | None = None
        import httpx

        with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client:
            for _ in range(MAX_PAGES):
                params = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
                if token:
                    params["continuation-token"] = token
                body = self._page(client, params, where)
                try:
                    items, nxt = parse_page(body)
                except (ET.ParseError, ValueError) as e:
                    raise StoreUnavailable(f"the object store's listing of {where} is not one: {e}"[:300]) from None
                out.extend(items)
                if nxt is None:
                    return out
                if nxt == token:
                    raise StoreUnavailable(f"the object store's listing of {where} repeats its continuation token")
                token = nxt
        raise StoreUnavailable(f"the listing of {where} goes on past {MAX_PAGES:,} pages")
