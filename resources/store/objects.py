"""A data folder on object storage: ``SITUATE_HOME=s3://bucket/prefix`` (also ``gs://``, ``az://``).

Everything situate keeps in the data folder is written through :class:`ObjectFolder`: stage
files, the blurb cache, the BM25 index (a versioned prefix published by a pointer object), and
the per-document leases; the LanceDB tables go to the same prefix through LanceDB's own object
store support, with :meth:`ObjectFolder.storage_options`.  The object store client is obstore
(Python bindings of the Rust ``object_store`` crate, the one LanceDB itself uses); a docs prefix on
S3 is listed with s3fs (:meth:`ObjectFolder.list_objects`), which keeps each key as text.

Credentials and endpoint come from the usual environment variables, read once per folder:

* S3 and S3-compatible stores: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``, ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (default ``us-east-1``),
  ``AWS_ENDPOINT_URL`` (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT``) for a server other than AWS; an
  ``http://`` endpoint allows plain HTTP.  Without keys the client's credential chain applies
  (instance metadata, web identity).
* Google Cloud Storage: ``GOOGLE_SERVICE_ACCOUNT`` / ``GOOGLE_APPLICATION_CREDENTIALS``.
* Azure: ``AZURE_STORAGE_ACCOUNT_NAME``, ``AZURE_STORAGE_ACCOUNT_KEY`` (or a SAS / client secret).

Writes of one object are atomic on every object store (a reader sees the old object or the new
one).  :meth:`ObjectFolder.create` is a conditional put (``If-None-Match: *`` on S3), which the
leases of :mod:`situate.resources.store.leases` rely on; S3, GCS, Azure and SeaweedFS honour it.

>>> is_uri("s3://bucket/situate"), is_uri("/data/situate"), is_uri("C:/data")
(True, False, False)
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import obstore
import obstore.exceptions as ox
from obstore.store import from_url

from situate.resources.errors import (  # noqa: F401  (importable from here as before)
    DataFolderURIError,
    ListingPageTooLarge,
    ObjectChanged,
    ObjectTooLarge,
    StoreUnavailable,
)
from situate.resources.settings import env

#: URI schemes accepted as a data folder.
SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss", "azure")

#: Request timeout and retries of the object store client.  A store that does not answer within
#: ``TIMEOUT_S`` seconds (connect or request) is retried up to ``MAX_RETRIES`` times with
#: exponential back-off from ``BACKOFF_S``; the pre-flight probe (:meth:`ObjectFolder.check`)
#: uses one try, so an unreachable endpoint is named within seconds, before any work.
TIMEOUT_S = 30
CONNECT_TIMEOUT_S = 5
MAX_RETRIES = 5
BACKOFF_S = 0.2


def is_uri(home: str | os.PathLike | None) -> bool:
    """Whether ``home`` is an object store URI (``scheme://…`` with a scheme of :data:`SCHEMES`)."""
    if home is None:
        return False
    text = str(home)
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def normalize_home(home: str | os.PathLike) -> str:
    """A data folder as situate keeps it: an object store URI without a trailing ``/``, or an
    absolute local path.

    >>> normalize_home("s3://bucket/situate/")
    's3://bucket/situate'

    Raises
    ------
    DataFolderURIError
        A URI with ``#``, ``?`` or ``%`` in it: the URI layers (LanceDB, obstore, fsspec) read those
        differently (a fragment, a query, an escape), and every table of such a folder resolved to
        the same path.
    """
    if is_uri(home):
        bad = sorted({c for c in str(home).split("://", 1)[1] if c in "#?%"})
        if bad:
            raise DataFolderURIError(
                f"data folder URI {home!r} has {' '.join(repr(c) for c in bad)} in it, which "
                "the object store layers read as a fragment, query or escape: choose a prefix "
                "without them"
            )
        return str(home).rstrip("/")
    return str(Path(home).expanduser().resolve())


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return None


def store_config(uri: str) -> dict[str, str]:
    """Object store options for ``uri`` from the environment: the keys both obstore and LanceDB's
    ``storage_options`` accept (``aws_access_key_id``, ``aws_endpoint``, ``aws_region``…).
    Empty for a scheme without variables set."""
    scheme = uri.split("://", 1)[0].lower()
    cfg: dict[str, str] = {}
    if scheme == "s3":
        pairs = {
            "aws_access_key_id": ("AWS_ACCESS_KEY_ID",),
            "aws_secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
            "aws_session_token": ("AWS_SESSION_TOKEN",),
            "aws_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
            "aws_endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        }
        for key, names in pairs.items():
            v = _env(*names)
            if v:
                cfg[key] = v
        cfg.setdefault("aws_region", "us-east-1")
    elif scheme in ("gs", "gcs"):
        for key in ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_APPLICATION_CREDENTIALS"):
            v = os.environ.get(key)
            if v:
                cfg[key.lower()] = v
    else:
        for key in (
            "AZURE_STORAGE_ACCOUNT_NAME",
            "AZURE_STORAGE_ACCOUNT_KEY",
            "AZURE_STORAGE_SAS_KEY",
            "AZURE_CLIENT_ID",
            "AZURE_CLIENT_SECRET",
            "AZURE_TENANT_ID",
        ):
            v = os.environ.get(key)
            if v:
                cfg[key.lower()] = v
    return cfg


def _reason(error: BaseException, uri: str, endpoint: str | None) -> str:
    """One line naming what failed for a person."""
    where = f" at {endpoint}" if endpoint else ""
    text = str(error)
    if any(
        s in text
        for s in (
            "error sending request",
            "Connection refused",
            "dns error",
            "tcp connect",
            "kind: Connect",
            "kind: Timeout",
            "operation timed out",
        )
    ):
        return f"cannot reach the object store{where} for {uri} (is AWS_ENDPOINT_URL right and the server running?)"
    if "NoSuchBucket" in text:
        return f"the bucket of {uri} does not exist{where} (create it first)"
    if isinstance(error, ox.PermissionDeniedError) or any(
        s in text for s in ("403 Forbidden", "SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied")
    ):
        return (
            f"the object store{where} refused the credentials for {uri} (check AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY or the store's own variables)"
        )
    if isinstance(error, ox.UnauthenticatedError) or "401 Unauthorized" in text:
        return f"the object store{where} did not accept the credentials for {uri}"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"the object store{where} failed for {uri}: {printable(first[:200])}"


def printable(text: str) -> str:
    r"""``text`` with each character that is not printable (a control character, a line break)
    written as its Python escape (``\x01``), so that a name from a store stays one line and shows
    what is in it.

    >>> printable("docs/a\x01b.md")
    'docs/a\\x01b.md'
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def odd_key(key: str) -> str | None:
    r"""Why the object store client (obstore, the ``object_store`` crate) cannot address object key
    ``key``, or None when it can: an empty segment (``a//b``, a leading or trailing ``/``), a ``.``
    or ``..`` segment, or an ASCII control character (``object_store``'s ``Path::parse`` rules).
    S3 accepts all of these in a key.

    >>> odd_key("docs/a.md"), odd_key("docs//a.md"), odd_key("docs/x/../a.md"), odd_key("a\x07.md")
    (None, 'an empty path segment', "a '..' path segment", 'a control character')
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        return "a control character"
    for seg in key.split("/"):
        if seg == "":
            return "an empty path segment"
        if seg in (".", ".."):
            return f"a {seg!r} path segment"
    return None


#: Pages one listing of a docs prefix may take (S3 answers 1,000 keys a page: ten million objects),
#: and objects it may hold: a store that keeps answering "truncated" is stopped, named.
MAX_LIST_PAGES = 10_000
MAX_LISTED = MAX_LIST_PAGES * 1_000
#: Bytes one listing page may take: 1,000 keys (S3's page) of up to 1,024 bytes each, URL-encoded
#: (3 bytes a byte at worst) and wrapped in XML, stay well under it.  A page is refused by its
#: ``Content-Length`` before any of it is read, and otherwise read in pieces and refused as soon as
#: it passes the bound (:func:`_listing_session`): no more than this is held of it.
MAX_LIST_PAGE_BYTES = 16 * 2**20
#: Bytes of a listing answer read at a time.
_PIECE_BYTES = 2**16


def s3fs_options(config: dict[str, str], retries: int = MAX_RETRIES, timeout_s: float = TIMEOUT_S) -> dict:
    """The ``s3fs.S3FileSystem`` options for an S3 folder's :func:`store_config`: the same keys,
    region and endpoint obstore gets (path-style requests where an endpoint is given, as obstore
    makes them; ``http://`` there is plain HTTP), unsigned where ``aws_skip_signature`` is true;
    without keys botocore's credential chain applies (profile, web identity, instance metadata).

    >>> o = s3fs_options({"aws_region": "eu-west-1", "aws_endpoint": "http://127.0.0.1:9000"}, 2, 10)
    >>> o["client_kwargs"], o["key"], o["anon"]
    ({'region_name': 'eu-west-1', 'endpoint_url': 'http://127.0.0.1:9000'}, None, False)
    >>> o["config_kwargs"]["retries"], o["config_kwargs"]["s3"]
    ({'mode': 'standard', 'max_attempts': 3}, {'addressing_style': 'path'})
    """
    client = {"region_name": config.get("aws_region") or "us-east-1"}
    conf: dict = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": timeout_s,
        "retries": {"mode": "standard", "max_attempts": retries + 1},
    }
    if config.get("aws_endpoint"):
        client["endpoint_url"] = config["aws_endpoint"]
        conf["s3"] = {"addressing_style": "path"}
    return {
        "key": config.get("aws_access_key_id"),
        "secret": config.get("aws_secret_access_key"),
        "token": config.get("aws_session_token"),
        "anon": str(config.get("aws_skip_signature", "")).lower() == "true",
        "client_kwargs": client,
        "config_kwargs": conf,
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }


def _s3fs(config: dict[str, str], retries: int, timeout_s: float):
    """An s3fs filesystem for :func:`s3fs_options` that lists: every answer that is not a stream is
    bounded to :data:`MAX_LIST_PAGE_BYTES` as it arrives (:func:`_listing_session`)."""
    import s3fs  # imported when used (the command line starts faster)

    options = s3fs_options(config, retries, timeout_s)
    options["config_kwargs"]["http_session_cls"] = _listing_session()  # aiobotocore's AioConfig option
    fs = s3fs.S3FileSystem(**options)
    fs.retries = 1  # one try at s3fs's level: botocore retries (max_attempts above)
    return fs


@functools.cache
def _listing_session() -> type:
    """aiobotocore's aiohttp session (``AioConfig(http_session_cls=…)``) whose answers are read here,
    in pieces, by :func:`_page_body`, instead of whole by aiobotocore before any check; a streamed
    answer (a GET's body) is left to its reader as before."""
    from aiobotocore.httpsession import AIOHTTPSession

    class ListingSession(AIOHTTPSession):
        async def send(self, request):
            """aiobotocore's answer to ``request``, its body read by :func:`_page_body` unless streamed.

            Raises
            ------
            ListingPageTooLarge
                The body is over :data:`MAX_LIST_PAGE_BYTES`.
            botocore.exceptions.HTTPClientError
                As ``AIOHTTPSession.send`` and :func:`_page_body`: unreachable, cut off, timed out.
            """
            if request.stream_output:
                return await super().send(request)
            request.stream_output = True  # the headers only: the body is read below, bounded
            response = await super().send(request)
            response.raw = _ReadBody(await _page_body(response, request))
            return response

    return ListingSession


class _ReadBody:
    """An answer's body already read, where aiobotocore reads it from (``AioAWSResponse.raw``)."""

    def __init__(self, data: bytes):
        self.data = data

    async def read(self) -> bytes:
        return self.data


async def _page_body(response, request) -> bytes:
    """The body of ``response`` (aiobotocore's, its ``raw`` an aiohttp response not yet read), read
    in pieces of :data:`_PIECE_BYTES`.

    Raises
    ------
    ListingPageTooLarge
        Its ``Content-Length`` is over :data:`MAX_LIST_PAGE_BYTES` (nothing of it read), or what
        arrived passed it; the connection is closed either way.
    botocore.exceptions.ConnectionClosedError, botocore.exceptions.ReadTimeoutError
        The body was cut off, or a read timed out (as aiobotocore names them: botocore retries).
    """
    import asyncio

    import aiohttp
    from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

    raw, body = response.raw, bytearray()
    try:
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > MAX_LIST_PAGE_BYTES:
            raise ListingPageTooLarge
        async for piece in raw.content.iter_chunked(_PIECE_BYTES):
            body += piece
            if len(body) > MAX_LIST_PAGE_BYTES:
                raise ListingPageTooLarge
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as e:
        raw.close()
        raise ConnectionClosedError(error=e, request=request, endpoint_url=request.url) from None
    except asyncio.TimeoutError as e:  # aiohttp's read timeout (read_timeout)
        raw.close()
        raise ReadTimeoutError(endpoint_url=request.url, error=e) from None
    except BaseException:  # refused, or cancelled by the page's deadline: the connection is not reused
        raw.close()
        raise
    return bytes(body)


def _list_page(fs, timeout_s: float, **params) -> dict:
    """One ListObjectsV2 answer through s3fs's ``fs``, ended at ``timeout_s`` seconds on the wall
    clock whatever arrives meanwhile (botocore's ``read_timeout`` bounds each read only), its
    retries included: the whole request, as obstore applies its timeout.

    Raises
    ------
    fsspec.exceptions.FSTimeoutError
        The deadline passed (the request is cancelled and its connection closed).
    Exception
        What ``fs._call_s3`` raises (botocore's, aiohttp's and s3fs's errors).
    """
    from fsspec.asyn import sync

    return sync(fs.loop, fs._call_s3, "list_objects_v2", timeout=timeout_s, **params)


def _token(token: str | None) -> dict[str, str]:
    return {"ContinuationToken": token} if token else {}


def _s3fs_reason(error: BaseException, where: str, endpoint: str | None) -> str:
    """One line naming why an s3fs listing of ``where`` failed (s3fs turns S3's error codes into
    ``FileNotFoundError`` / ``PermissionError``; botocore's connection errors name the endpoint)."""
    import botocore.exceptions as be

    at = f" at {endpoint}" if endpoint else ""
    if isinstance(error, ListingPageTooLarge):
        return f"the object store{at} answered a listing page of {where} over {MAX_LIST_PAGE_BYTES:,} bytes"
    if isinstance(error, FileNotFoundError):
        return f"the bucket of {where} does not exist{at} (create it first)"
    if isinstance(error, PermissionError):
        return (
            f"the object store{at} refused the credentials for {where} (check AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the credential chain)"
        )
    if isinstance(error, be.NoCredentialsError | be.PartialCredentialsError | be.ProfileNotFound):
        return f"no S3 credentials for {where}: {printable(str(error)[:200])}"
    if isinstance(error, be.ConnectionError | be.ReadTimeoutError | TimeoutError):
        return f"cannot reach the object store{at} for {where} (is AWS_ENDPOINT_URL right and the server running?)"
    return _reason(error, where, endpoint)


class ObjectFolder:
    """A folder on an object store: ``uri`` is ``scheme://bucket[/prefix]``.

    Paths given to the methods are relative to the folder, ``/``-separated (``stages/a.md/chunks.json``).

    Parameters
    ----------
    uri : str
        ``s3://bucket/prefix`` and the like (:data:`SCHEMES`).
    retries : int
        Retries of a failed request (default :data:`MAX_RETRIES`).
    timeout_s : float
        Seconds one request may take (default :data:`TIMEOUT_S`); retries stop after
        ``timeout_s × retries``.  A listing page of :meth:`list_objects` on S3 (s3fs) takes at most
        ``timeout_s``, its retries included.

    Raises
    ------
    ValueError
        ``uri`` is not an object store URI.
    StoreUnavailable
        The client cannot be set up from the environment (a credentials file that does not parse).
    """

    def __init__(self, uri: str, retries: int = MAX_RETRIES, timeout_s: float = TIMEOUT_S):
        if not is_uri(uri):
            raise ValueError(f"{uri!r} is not an object store URI ({', '.join(s + '://' for s in SCHEMES)})")

        self.uri = uri.rstrip("/")
        self.config = store_config(self.uri)
        self.retries, self.timeout_s = retries, timeout_s
        retry = {
            "max_retries": retries,
            "backoff": {
                "init_backoff": _dt.timedelta(seconds=BACKOFF_S),
                "max_backoff": _dt.timedelta(seconds=5),
                "base": 2.0,
            },
            "retry_timeout": _dt.timedelta(seconds=timeout_s * max(retries, 1)),
        }
        client = {
            "timeout": _dt.timedelta(seconds=timeout_s),
            "connect_timeout": _dt.timedelta(seconds=CONNECT_TIMEOUT_S),
        }
        if self.allow_http:
            client["allow_http"] = True
        try:
            self.store = from_url(self.uri, config=self.config, client_options=client, retry_config=retry)
        except Exception as e:  # noqa: BLE001 - a credentials file that does not parse, a bad option
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise StoreUnavailable(f"cannot set up the object store client for {self.uri}: {first[:200]}") from None

    def __repr__(self) -> str:
        return f"ObjectFolder({self.uri!r})"

    @property
    def allow_http(self) -> bool:
        """Plain HTTP is allowed when the endpoint is an ``http://`` URL (a local test server)."""
        return (self.endpoint or "").startswith("http://")

    @property
    def endpoint(self) -> str | None:
        return self.config.get("aws_endpoint")

    def child(self, rel: str) -> str:
        """The URI of ``rel`` in this folder."""
        return f"{self.uri}/{rel.strip('/')}"

    def storage_options(self) -> dict[str, str]:
        """LanceDB ``storage_options`` for tables under this folder."""
        out = dict(self.config)
        if self.allow_http:
            out["allow_http"] = "true"
        return out

    # -- objects -------------------------------------------------------------------------------
    def get(self, rel: str) -> bytes | None:
        """The object's bytes, or None when it does not exist.

        Raises
        ------
        StoreUnavailable
            Any other failure (unreachable, refused credentials, missing bucket).
        """
        try:
            return bytes(obstore.get(self.store, rel).bytes())
        except ox.NotFoundError as e:
            if "NoSuchBucket" in str(e):
                raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None
            return None
        except FileNotFoundError as e:
            if "NoSuchBucket" in str(e):
                raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None
            return None
        except Exception as e:  # noqa: BLE001 - obstore raises its own hierarchy and OSError
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def get_bounded(self, rel: str, limit: int, e_tag: str = "") -> bytes | None:
        """The object's bytes, at most ``limit`` of them, as version ``e_tag`` (the ETag a
        :meth:`head` gave; ``""`` for any), or None when it does not exist.  The GET carries
        ``If-Match: e_tag``, and the ETag it answers is checked against ``e_tag`` too (a store
        that ignores the condition); its body is read in pieces and dropped past ``limit``.

        Raises
        ------
        ObjectTooLarge
            The body goes past ``limit`` bytes (whatever the HEAD or the listing said).
        ObjectChanged
            The object is another version than ``e_tag`` now (replaced since the HEAD).
        StoreUnavailable
            Any other failure (unreachable, refused credentials, missing bucket).
        """
        try:
            got = obstore.get(self.store, rel, options={"if_match": e_tag} if e_tag else None)
            now = got.meta.get("e_tag") or ""
            if e_tag and now and now.strip('"') != e_tag.strip('"'):
                raise ObjectChanged(f"its ETag is {now.strip(chr(34))[:80]} now, not {e_tag.strip(chr(34))[:80]}")
            data = bytearray()
            for chunk in got.stream(min_chunk_size=2**20):
                data += chunk
                if len(data) > limit:
                    raise ObjectTooLarge(f"its GET carries over {limit:,} bytes")
            return bytes(data)
        except (ObjectChanged, ObjectTooLarge):
            raise
        except ox.PreconditionError:
            raise ObjectChanged(f"it is no longer version {e_tag.strip(chr(34))[:80]}") from None
        except (ox.NotFoundError, FileNotFoundError) as e:
            if "NoSuchBucket" in str(e):
                raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None
            return None
        except Exception as e:  # noqa: BLE001 - obstore raises its own hierarchy and OSError
            if "412" in str(e) or "Precondition" in str(e):
                raise ObjectChanged(f"it is no longer version {e_tag.strip(chr(34))[:80]}") from None
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def put(self, rel: str, data: bytes) -> None:
        """Write the object (replacing it; one PUT, so readers see the old or the new bytes).

        Raises
        ------
        StoreUnavailable
        """
        try:
            obstore.put(self.store, rel, data)
        except Exception as e:  # noqa: BLE001
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def create(self, rel: str, data: bytes) -> bool:
        """Write the object only if it does not exist (a conditional put): True when written,
        False when it already existed.

        Raises
        ------
        StoreUnavailable
        """
        return self.create_versioned(rel, data) is not None

    def get_versioned(self, rel: str) -> tuple[bytes, str] | None:
        """The object's bytes and its ETag (the version a :meth:`replace_if` names), or None when
        it does not exist.

        Raises
        ------
        StoreUnavailable
        """
        try:
            got = obstore.get(self.store, rel)
            return bytes(got.bytes()), got.meta["e_tag"] or ""
        except (ox.NotFoundError, FileNotFoundError) as e:
            if "NoSuchBucket" in str(e):
                raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None
            return None
        except Exception as e:  # noqa: BLE001
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def create_versioned(self, rel: str, data: bytes) -> str | None:
        """:meth:`create` returning the new object's ETag, or None when it already existed."""
        try:
            return obstore.put(self.store, rel, data, mode="create")["e_tag"] or ""
        except (ox.AlreadyExistsError, ox.PreconditionError):
            return None
        except Exception as e:  # noqa: BLE001
            if "already exists" in str(e) or "412" in str(e):
                return None
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def replace_if(self, rel: str, data: bytes, etag: str) -> str | None:
        """Write the object only if it is still the version ``etag`` (``If-Match``): the new
        ETag, or None when it was changed or deleted meanwhile (412 / 404).  Never creates it.

        Raises
        ------
        StoreUnavailable
        """
        try:
            return obstore.put(self.store, rel, data, mode={"e_tag": etag})["e_tag"] or ""
        except (ox.PreconditionError, ox.NotFoundError, FileNotFoundError):
            return None
        except Exception as e:  # noqa: BLE001
            if "412" in str(e) or "Precondition" in str(e):
                return None
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def head(self, rel: str) -> dict | None:
        """``{"size", "last_modified", "e_tag"}`` of the object, or None when it does not exist."""
        try:
            meta = obstore.head(self.store, rel)
        except (ox.NotFoundError, FileNotFoundError):
            return None
        except Exception as e:  # noqa: BLE001
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None
        return {"size": meta["size"], "last_modified": meta["last_modified"], "e_tag": meta.get("e_tag") or ""}

    def delete(self, rel: str) -> None:
        """Delete the object (nothing when it does not exist)."""
        try:
            obstore.delete(self.store, rel)
        except (ox.NotFoundError, FileNotFoundError):
            pass
        except Exception as e:  # noqa: BLE001
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def list(self, prefix: str) -> list[str]:
        """Relative paths of the objects under ``prefix`` (a folder: ``prefix/…``)."""
        prefix = prefix.strip("/")
        try:
            out = []
            for batch in obstore.list(self.store, prefix=prefix + "/" if prefix else None):
                out.extend(m["path"] for m in batch)
            return out
        except Exception as e:  # noqa: BLE001
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    def list_objects(self, prefix: str = "", odd: list | None = None) -> list[dict]:
        """The objects under ``prefix`` (every object where it is empty), each
        ``{"path", "size", "e_tag"}`` (``path`` relative to this folder, ``size`` in bytes, the
        ETag the store gives, ``""`` where it gives none), sorted by path.

        An object whose key the client cannot address (:func:`odd_key`: S3 accepts
        ``docs/../x.md``, ``docs//x.md``, a control character) is left out, and named in ``odd``
        when given (``(key, reason)``, the key relative to this folder), so the others are listed.
        On S3 s3fs lists (each key read as text, whatever credential source botocore resolves),
        each page within ``timeout_s`` on the wall clock, its retries included, and read in pieces
        up to :data:`MAX_LIST_PAGE_BYTES`; on GCS and Azure obstore lists, and one such object fails
        the listing, named.

        Raises
        ------
        StoreUnavailable
            Unreachable, refused credentials, a missing bucket, a page not answered within
            ``timeout_s`` or over :data:`MAX_LIST_PAGE_BYTES`, a listing past its bounds.
        """
        prefix = prefix.strip("/")
        under = prefix + "/" if prefix else ""
        if self._lists_with_s3fs:
            bucket, _, base = self.uri.split("://", 1)[1].partition("/")
            out = []
            for m in self._s3fs_list(bucket, f"{base}/{under}" if base else under):
                rel = m["Key"][len(base) + 1 :] if base else m["Key"]
                why = odd_key(m["Key"]) or odd_key(rel)
                if why:
                    if odd is not None:
                        odd.append((rel, why))
                    continue
                out.append({"path": rel, "size": int(m.get("Size") or 0), "e_tag": m.get("ETag") or ""})
            return sorted(out, key=lambda m: m["path"])
        try:
            out = []
            for batch in obstore.list(self.store, prefix=under or None):
                out.extend({"path": m["path"], "size": m["size"], "e_tag": m.get("e_tag") or ""} for m in batch)
            return sorted(out, key=lambda m: m["path"])
        except Exception as e:  # noqa: BLE001
            raise StoreUnavailable(_reason(e, self.uri, self.endpoint)) from None

    @property
    def _lists_with_s3fs(self) -> bool:
        """Whether :meth:`list_objects` lists through s3fs, keys as text (every S3 folder)."""
        return self.uri.startswith("s3://")

    def _s3fs_list(self, bucket: str, prefix: str) -> list[dict]:
        """The ListObjectsV2 entries (``Key``, ``Size``, ``ETag``) of ``prefix`` in ``bucket``, through
        s3fs (botocore signs, resolves the credentials, asks for URL-encoded keys and decodes them):
        at most :data:`MAX_LIST_PAGES` pages of :data:`MAX_LIST_PAGE_BYTES` and :data:`MAX_LISTED`
        objects.

        Raises
        ------
        StoreUnavailable
            Unreachable, no or refused credentials, a missing bucket, a page not answered within
            ``timeout_s`` (:func:`_list_page`), a listing past the bounds.
        """
        from fsspec.exceptions import FSTimeoutError

        where = f"s3://{bucket}/{prefix}"
        out: list[dict] = []
        try:
            fs = _s3fs(self.config, self.retries, self.timeout_s)
            token = None
            for _ in range(MAX_LIST_PAGES):
                page = _list_page(fs, self.timeout_s, Bucket=bucket, Prefix=prefix, **_token(token))
                out.extend(page.get("Contents", []))
                if len(out) > MAX_LISTED:
                    raise StoreUnavailable(f"the listing of {where} goes on past {MAX_LISTED:,} objects")
                nxt = page.get("NextContinuationToken") if page.get("IsTruncated") else None
                if nxt is None:
                    return out
                if nxt == token:
                    raise StoreUnavailable(f"the object store's listing of {where} repeats its continuation token")
                token = nxt
        except StoreUnavailable:
            raise
        except FSTimeoutError:
            at = f" at {self.endpoint}" if self.endpoint else ""
            raise StoreUnavailable(
                f"the object store{at} did not answer a listing page of {where} within {self.timeout_s:g} s "
                "(the time one request may take, its retries included)"
            ) from None
        except Exception as e:  # noqa: BLE001 - botocore's, aiohttp's and s3fs's (OSError) errors
            raise StoreUnavailable(_s3fs_reason(e, where, self.endpoint)) from None
        raise StoreUnavailable(f"the listing of {where} goes on past {MAX_LIST_PAGES:,} pages")

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many."""
        paths = self.list(prefix)
        for p in paths:
            self.delete(p)
        return len(paths)

    def upload_dir(self, local: Path, prefix: str) -> int:
        """Copy every file under the local folder ``local`` to ``prefix/…``; returns the count."""
        n = 0
        for f in sorted(Path(local).rglob("*")):
            if f.is_file():
                self.put(f"{prefix.strip('/')}/{f.relative_to(local).as_posix()}", f.read_bytes())
                n += 1
        return n

    def download_dir(self, prefix: str, local: Path) -> int:
        """Copy every object under ``prefix`` into the local folder ``local`` (written to a
        temporary sibling, then renamed into place: a folder is complete or absent)."""
        local = Path(local)
        if local.is_dir():
            return sum(1 for f in local.rglob("*") if f.is_file())
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=local.parent, prefix=local.name + ".part-"))
        n = 0
        try:
            for rel in self.list(prefix):
                data = self.get(rel)
                if data is None:
                    continue
                target = tmp / rel[len(prefix.strip("/")) + 1 :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                n += 1
            os.replace(tmp, local)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not local.is_dir():
                raise
        return n

    def check(self) -> None:
        """Prove the folder can be written, read and deleted, with one try per request (fast):
        the pre-flight check of a run.

        Raises
        ------
        StoreUnavailable
            One line: unreachable endpoint, refused credentials, missing bucket, or another failure.
        """
        probe = ObjectFolder(self.uri, retries=0)
        name = f".write-probe-{uuid.uuid4().hex}"
        probe.put(name, b"probe")
        if probe.get(name) != b"probe":
            raise StoreUnavailable(f"the object store for {self.uri} did not return what was written")
        probe.delete(name)


def local_cache_root() -> Path:
    """Local folder for what an object-store data folder caches on this machine (the BM25 index
    downloaded for search, the Dagster instance by default): ``$SITUATE_CACHE`` or
    ``~/.cache/situate``."""
    return Path(env("SITUATE_CACHE") or Path.home() / ".cache" / "situate").expanduser().resolve()


def cache_dir_for(uri: str, what: str) -> Path:
    """``<local_cache_root>/<what>/<sha256(uri)[:16]>``: one folder per data folder URI."""
    return local_cache_root() / what / hashlib.sha256(uri.encode()).hexdigest()[:16]
