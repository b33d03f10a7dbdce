"""The HTTP transport situate's Anthropic client sends through (httpx2, the SDK's own client):
each request to ``SITUATE_LLM_URL``'s origin only, under a wall-clock deadline at the socket
(headers and body), each answer bounded in bytes.  Imported on first use, with the SDK (see
:func:`situate.resources.models.anthropic_api._bounded_classes`)."""

from __future__ import annotations

import time

import httpcore2
import httpx2

from situate.resources.models import anthropic_api as api


class DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every wait ends by the current request's deadline."""

    def __init__(self, inner):
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, api._left(timeout, "read"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        while view:
            self.inner.write(view[: api._WRITE_SLICE], api._left(timeout, "write"))
            view = view[api._WRITE_SLICE :]

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, api._left(timeout, "connect")))

    def get_extra_info(self, info: str):
        return self.inner.get_extra_info(info)


class DeadlineBackend(httpcore2.NetworkBackend):
    """The default sync backend, its connections :class:`DeadlineStream`."""

    def __init__(self, inner):
        self.inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return DeadlineStream(
            self.inner.connect_tcp(host, port, api._left(timeout, "connect"), local_address, socket_options)
        )

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return DeadlineStream(self.inner.connect_unix_socket(path, api._left(timeout, "connect"), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class BoundedBody(httpx2.SyncByteStream):
    """An answer's body: read under its request's deadline, at most ``MAX_RESPONSE_BYTES`` in all
    (``per_line``: ``MAX_RESULT_LINE_BYTES`` a line; both of
    :mod:`situate.resources.models.anthropic_api`)."""

    def __init__(self, inner, end: float, per_line: bool, where: str):
        self.inner, self.end, self.per_line, self.where = inner, end, per_line, where

    def _too_large(self):
        what, bound = (
            ("a line of a batch's results", "MAX_RESULT_LINE_BYTES")
            if self.per_line
            else ("an answer", "MAX_RESPONSE_BYTES")
        )
        return api._refused()(
            f"{self.where} sent {what} over {getattr(api, bound):,} bytes ({bound}): "
            "not an answer situate asked for (SITUATE_LLM_URL)"
        )

    def __iter__(self):
        it = iter(self.inner)
        size = 0
        while True:
            before, api._DEADLINE.at = getattr(api._DEADLINE, "at", None), self.end
            try:
                chunk = next(it, None)
            finally:
                api._DEADLINE.at = before
            if chunk is None:
                return
            if time.monotonic() > self.end:
                raise httpx2.ReadTimeout("the answer took longer than SITUATE_LLM_TIMEOUT in all")
            if self.per_line:
                first, last = chunk.find(b"\n"), chunk.rfind(b"\n")
                if size + (len(chunk) if first < 0 else first) > api.MAX_RESULT_LINE_BYTES:
                    raise self._too_large()
                size = size + len(chunk) if first < 0 else len(chunk) - last - 1
            else:
                size += len(chunk)
                if size > api.MAX_RESPONSE_BYTES:
                    raise self._too_large()
            yield chunk

    def close(self) -> None:
        self.inner.close()


class BoundedTransport(httpx2.BaseTransport):
    """Sends only to ``origin``; each request under a deadline (``anthropic_api._left``), each
    answer bounded (:class:`BoundedBody`)."""

    def __init__(self, inner, origin: tuple, where: str, timeout: float):
        self.inner, self.origin, self.where, self.timeout = inner, origin, where, timeout

    def handle_request(self, request):
        url = request.url
        if api._origin(url.scheme, url.host, url.port) != self.origin:
            other = f"{url.scheme}://{url.host}{':' + str(url.port) if url.port else ''}"
            raise api._refused()(
                f"{self.where} sent situate to {other}, another origin than SITUATE_LLM_URL's: "
                "refused, nothing sent there (ANTHROPIC_API_KEY included)"
            )
        try:
            size = max(int(request.headers.get("content-length") or 0), 0)
        except ValueError:
            size = 0
        end = time.monotonic() + self.timeout + size / api.MIN_UPLOAD_RATE
        request.headers["Accept-Encoding"] = "identity"
        before, api._DEADLINE.at = getattr(api._DEADLINE, "at", None), end
        try:
            r = self.inner.handle_request(request)
        finally:
            api._DEADLINE.at = before
        body = BoundedBody(r.stream, end, bool(api._RESULTS_PATH.search(url.path)), self.where)
        try:
            declared = int(r.headers.get("content-length") or 0)
        except ValueError:
            declared = 0
        coding = [c.strip().lower() for c in r.headers.get_list("content-encoding", split_commas=True)]
        if any(c not in ("", "identity") for c in coding):
            r.stream.close()
            raise api._refused()(
                f"{self.where} answered with content coding {', '.join(coding)[:40]!r}, which situate "
                "did not ask for (it reads answers uncompressed, to bound their size): SITUATE_LLM_URL"
            )
        if declared > api.MAX_RESPONSE_BYTES and not body.per_line:
            r.stream.close()
            raise body._too_large()
        return httpx2.Response(status_code=r.status_code, headers=r.headers, stream=body, extensions=r.extensions)

    def close(self) -> None:
        self.inner.close()
