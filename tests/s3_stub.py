"""A STUB of an S3-compatible endpoint on 127.0.0.1 (not a real store: a real one is SeaweedFS, the
``s3_server`` fixture), for what SeaweedFS cannot be made to do: keys that obstore cannot parse
(``docs/notes/../evil.md``, ``docs//x.md``, a control character; S3 accepts them), a GET that
answers more bytes than its HEAD said, an object whose GET is another version than its HEAD.

It answers ListObjectsV2 (``encoding-type=url`` honoured, pages of ``page`` keys with continuation
tokens), HEAD and GET, and ignores ``If-Match`` and signatures (as a store that ignores them).
Each object: ``{"body": str, "etag": str, "head_size": int (what HEAD and the listing say),
"get_bytes": int (GET answers that many bytes instead), "get_etag": str (GET's ETag)}``.
"""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from contextlib import contextmanager
from xml.sax.saxutils import escape


def _handler(objects: dict, page: int, log: list):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            log.append(f"{self.command} {self.path}")

        def _key(self) -> str:
            parts = urllib.parse.urlsplit(self.path).path.lstrip("/").split("/", 1)
            return urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""

        def _send(self, status: int, body: bytes = b"", **headers) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k.replace("_", "-"), v)
            self.send_header("Content-Length", str(headers.pop("length", len(body))))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _list(self, q: dict) -> None:
            prefix = q.get("prefix", [""])[0]
            enc = q.get("encoding-type", [""])[0] == "url"
            keys = sorted(k for k in objects if k.startswith(prefix))
            start = int(q.get("continuation-token", ["0"])[0])
            chunk, more = keys[start : start + page], start + page < len(keys)
            items = "".join(
                f"<Contents><Key>{urllib.parse.quote(k) if enc else escape(k)}</Key>"
                f"<ETag>&quot;{escape(objects[k].get('etag', 'e'))}&quot;</ETag>"
                f"<Size>{objects[k].get('head_size', len(objects[k].get('body', '').encode()))}</Size></Contents>"
                for k in chunk
            )
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>'
                '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name>'
                + ("<EncodingType>url</EncodingType>" if enc else "")
                + f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"
                + (f"<NextContinuationToken>{start + page}</NextContinuationToken>" if more else "")
                + items
                + "</ListBucketResult>"
            ).encode()
            self._send(200, body, Content_Type="application/xml")

        def do_GET(self):
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if "list-type" in q:
                return self._list(q)
            o = objects.get(self._key())
            if o is None:
                return self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
            etag = f'"{o.get("get_etag", o.get("etag", "e"))}"'
            if "get_bytes" not in o:
                return self._send(200, o["body"].encode(), ETag=etag)
            n = o["get_bytes"]
            self.send_response(200)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            try:
                for i in range(0, n, 1 << 16):
                    self.wfile.write(b"x" * min(1 << 16, n - i))
            except (BrokenPipeError, ConnectionResetError):
                pass

        def do_HEAD(self):
            o = objects.get(self._key())
            if o is None:
                return self._send(404)
            size = o.get("head_size", len(o.get("body", "").encode()))
            self.send_response(200)
            self.send_header("ETag", f'"{o.get("etag", "e")}"')
            self.send_header("Last-Modified", "Tue, 01 Dec 2026 00:00:00 GMT")
            self.send_header("Content-Length", str(size))
            self.end_headers()

    return H


@contextmanager
def s3_stub(objects: dict, monkeypatch, page: int = 1000):
    """Serve ``objects`` (key → object, bucket ``bucket``) on a free loopback port, with the client
    variables set through ``monkeypatch``; yields the request log (a list of ``"METHOD path"``)."""
    log: list[str] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(objects, page, log))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "stub",
        "AWS_SECRET_ACCESS_KEY": "stub",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_address[1]}",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    try:
        yield log
    finally:
        server.shutdown()
        server.server_close()
