"""``situate serve``: the index as a long-running HTTP service and a small search page.

The service loads the embedder, the BM25 index and (when asked for) the reranker once, in its own
process, and answers each search in milliseconds instead of the seconds a ``situate search``
command spends on start-up.  A new table version or BM25 index written by an ingest is picked up
by the next request (the table is opened fresh per search; the BM25 index is reloaded when its
``ids.json`` changes), with no restart.

Endpoints
---------
``GET /search?q=…&k=10&rerank=0``, ``POST /search`` (``{"query": …, "k": …, "rerank": …}``)
    A JSON list of hits, the objects ``situate search --json`` prints; warnings in
    ``X-Situate-Warning`` headers.  Over several collections, one whose data folder cannot be read
    now is left out, named in ``X-Situate-Missing-Collections``, and the others are searched.
``GET /health``
    Table rows and version, BM25 index rows and version, the models.
``GET /``
    The search page.  ``GET /openapi.json``: the OpenAPI schema; ``GET /docs``: it as a page
    (served here, no CDN).

Bad input gets a 4xx answer with a ``detail`` message, never a traceback: a query that is empty
or longer than :data:`MAX_QUERY_CHARS`, ``k`` outside 1..:data:`MAX_SERVICE_K`, malformed JSON
(422); no table yet (404); a data folder whose vectors are not the embedder's width (503).

Other origins and floods: a request whose ``Host`` is not one the service answers for
(loopback names and addresses, plus ``SITUATE_ALLOWED_HOSTS``; any host when a bearer token is
required and no list is given) gets 400, so a web page whose name is rebound to 127.0.0.1 (DNS
rebinding) reads nothing; a browser request from another site (an ``Origin`` that is not the
service's own, ``Sec-Fetch-Site: cross-site`` or ``same-site``) gets 403; a body over
:data:`MAX_BODY_BYTES` gets 413 before more of it is read; a search that would wait behind
:data:`MAX_WAITING` others, or longer than :data:`MAX_WAIT_S`, gets 503 with ``Retry-After``.
Without a bearer token every caller is anonymous, so ``/health``, error details (4xx, 503 and
500 alike) and ``X-Situate-Warning`` headers name the data folder by its last path component and
every other absolute path (a model file, the models folder, a file of a library's error) by its
last component, never where it is (:func:`redact`).  A caller with the token reads them
whole.

Examples
--------
>>> from fastapi.testclient import TestClient             # doctest: +SKIP
>>> client = TestClient(create_app(home="docs-home"))      # doctest: +SKIP
>>> client.get("/search", params={"q": "rotate the keys", "k": 3}).json()[0]["source"]  # doctest: +SKIP
'ops/keys.md'
"""

from __future__ import annotations

import functools
import hmac
import html
import ipaddress
import re
import sys
import tempfile
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware

from situate.contextual.snippets import hit_json
from situate.pipelines.operations import MAX_QUERY_CHARS  # noqa: E402  (longest query, characters)
from situate.resources.settings import data_folder, env

#: Most hits one request may ask for (a page of results, not the table: ``situate search -k``
#: takes up to 1,000,000 for a dump).
MAX_SERVICE_K = 1000
#: Deepest rerank one request may ask for (the cross-encoder costs 0.06-0.08 s a candidate on 2
#: CPU cores, docs/performance.md).
MAX_SERVICE_RERANK = 200
#: Environment variable of the bearer token; required when the service binds a non-loopback address.
TOKEN_ENV = "SITUATE_API_TOKEN"
#: Environment variable of the other ``Host`` names the service answers for (comma-separated;
#: ``*.example.com`` patterns as Starlette's ``TrustedHostMiddleware`` takes them).
HOSTS_ENV = "SITUATE_ALLOWED_HOSTS"
#: ``Host`` names a service always answers for: the loopback names and addresses.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
#: Largest request body, in bytes: ``POST /search`` carries a query of at most
#: :data:`MAX_QUERY_CHARS` characters (48 KB if every one were a JSON ``\uXXXX`` escape) and two
#: numbers.  A longer body is refused (413) before more of it is read.
MAX_BODY_BYTES = 64 * 1024
#: Searches that may wait for the one in progress (one llama.cpp embedder, one search at a time;
#: a rerank holds it for seconds): one more is answered 503 with ``Retry-After``.
MAX_WAITING = 8
#: Seconds a search waits for its turn before a 503.
MAX_WAIT_S = 30.0

#: Response header of a search over several collections that left some out, their data folders
#: unreadable now (missing, not situate's, a store down): their names, comma-separated.  The
#: others are searched; ``/health`` lists them under ``"missing"``.
MISSING_HEADER = "X-Situate-Missing-Collections"


#: One path component as it appears unquoted in a message: no whitespace, no quote, and none of
#: the characters that end a path in prose (``:`` ``;`` ``,`` brackets).
_SEGMENT = r"[^\s/'\"`:;,()<>\[\]{}|]+"
#: Where a path (or a known folder in it) ends: a separator, a character that ends a path in
#: prose, or a full stop that ends a sentence (``/data/notes`` is not the start of ``/data/notes-old``).
_END = r"""(?=$|[/\s'"`:;,()<>\[\]{}|]|\.(?:$|\s))"""
#: An absolute path inside quotes (it may hold spaces there): ``'/srv/a b/x.gguf'``.
_QUOTED_PATH = re.compile(r"""(['"`])((?:file://)?~?/[^'"`\n]*[^/'"`\n])\1""")


@functools.lru_cache(maxsize=8)
def _path_pattern(roots: tuple[str, ...]) -> re.Pattern:
    """Unquoted absolute paths: ``/a/b``, ``~/a/b``, ``file:///a/b``, or one of ``roots`` (which may
    hold spaces) and what follows it; never the path of another URL (``https://host/a``,
    ``s3://bucket/a``: the ``/`` follows ``:`` or ``/``) nor a ratio (``tokens/s``: it follows a
    word character)."""
    known = "|".join(re.escape(r) for r in sorted(roots, key=len, reverse=True))
    rooted = rf"(?:{known}){_END}(?:/{_SEGMENT})*|" if known else ""
    # ":" may come right before a path ("error:/srv/x"): a URL's path never matches there, as
    # "//" follows its ":" and a component is never empty
    return re.compile(rf"(?<![\w.~/-])(?:file://)?(?:{rooted}~?(?:/{_SEGMENT})+)/?")


@functools.lru_cache(maxsize=8)
def _slashless_pattern(roots: tuple[str, ...], shown: str) -> re.Pattern:
    """Absolute paths as Lance and its object store print them, without the leading ``/``
    (``srv/data/notes/lancedb/chunks.lance/_versions/1.manifest``): one of ``roots`` without its
    ``/`` and what follows it, or any relative path holding a ``*.lance`` table folder; never what
    starts with ``shown`` (the data folder's name, already put in place of its path)."""
    known = "|".join(re.escape(r.lstrip("/")) for r in sorted(roots, key=len, reverse=True) if r.startswith("/"))
    rooted = rf"(?:{known}){_END}(?:/{_SEGMENT})*|" if known else ""
    return re.compile(
        rf"(?<![\w.~/:-])(?!{re.escape(shown)}/)(?:{rooted}(?:{_SEGMENT}/)+{_SEGMENT}\.lance(?:/{_SEGMENT})*)/?"
    )


def _from_table(path: str) -> str:
    """A slash-less path named from its ``*.lance`` table folder on, else by its last component."""
    m = re.search(rf"(?:^|/)({_SEGMENT}\.lance(?:/.*)?)$", path.rstrip("/"))
    return m.group(1) if m else _name_of(path)


def _known_roots() -> tuple[str, ...]:
    """Absolute folders a message may name, as whole prefixes (a user's home folder such as
    ``/Users/Alice Smith`` holds a space the unquoted pattern would stop at): the models folder,
    the user's home, the working folder, the temporary folder and this Python's prefix."""
    from situate.resources.models.registry import models_dir

    roots = set()
    for where in (models_dir, Path.home, Path.cwd, tempfile.gettempdir, lambda: sys.prefix):
        try:
            r = str(where()).rstrip("/")
        except (OSError, RuntimeError, KeyError):  # no home folder, a working folder since removed
            continue
        if len(Path(r).parts) > 1:  # never "/" alone: every "/" in prose would match
            roots.add(r)
    return tuple(sorted(roots))


def _name_of(path: str) -> str:
    """The last component of a matched path; a sentence's full stop after it is kept."""
    body = path.rstrip("/").rstrip(".")
    return (body.rsplit("/", 1)[-1] or body) + path.rstrip("/")[len(body) :]


def redact(text: str, home: str, shown: str) -> str:
    """``text`` as an anonymous caller reads it: the data folder ``home`` as ``shown`` (its name),
    and every other absolute path as its last component.

    Parameters
    ----------
    text : str
        A message the service is about to return (an error's ``detail``, a warning).
    home : str
        The data folder, an absolute path or an object store URI (:func:`normalize_home`).
    shown : str
        What stands for ``home`` (its last component).

    Returns
    -------
    str
        ``text`` with no absolute path left: what lies under the data folder keeps its place in it
        (``team-notes/lancedb/chunks.lance``), anything else is named by its file or folder name
        (``embedder file model.onnx not found``).  URLs other than ``file://`` are kept.

    Examples
    --------
    >>> redact("embedder file /home/alice/.cache/situate/models/bge/model.onnx not found",
    ...        "/data/notes", "notes")
    'embedder file model.onnx not found'
    >>> redact("no table in /data/notes yet: run `situate ingest PATH --home /data/notes`",
    ...        "/data/notes", "notes")
    'no table in notes yet: run `situate ingest PATH --home notes`'
    >>> redact("LanceError(IO): Not found: srv/other/lancedb/chunks.lance/_versions/3.manifest",
    ...        "/data/notes", "notes")
    'LanceError(IO): Not found: chunks.lance/_versions/3.manifest'
    >>> redact("cannot open:/srv/models/x.gguf", "/data/notes", "notes")
    'cannot open:x.gguf'
    """
    text = _name_home(text, home, shown)
    text = _QUOTED_PATH.sub(lambda m: m.group(1) + _name_of(m.group(2)) + m.group(1), text)
    text = _path_pattern(_known_roots()).sub(lambda m: _name_of(m.group(0)), text)
    return _slashless_pattern(_known_roots(), shown).sub(lambda m: _from_table(m.group(0)), text)


def _name_home(text: str, home: str, shown: str) -> str:
    """``text`` with data folder ``home`` read as ``shown``, where a name or a separator follows
    it (not ``/data/notes-old``), and as Lance prints it, without its leading ``/``
    (``srv/data/notes/lancedb/chunks.lance/...``)."""
    text = re.sub(re.escape(home) + _END, lambda _: shown, text)
    if home.startswith("/") and len(Path(home).parts) > 2:
        text = re.sub(r"(?<![\w.~/:-])" + re.escape(home.lstrip("/")) + _END, lambda _: shown, text)
    return text


class SearchRequest(BaseModel):
    """The body of ``POST /search``."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for, in words.")
    k: int = Field(10, ge=1, le=MAX_SERVICE_K, description="Hits returned.")
    rerank: int | None = Field(
        None,
        ge=0,
        le=MAX_SERVICE_RERANK,
        description="Candidates the cross-encoder reranks (0: off; default SITUATE_RERANK_DEPTH, else 0).",
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _SameOrigin:
    """ASGI middleware: 403 for a browser request another site made (its ``Origin`` is not this
    request's own scheme-less ``Host``, or ``null``; or ``Sec-Fetch-Site`` says ``cross-site`` or
    ``same-site``).  Requests with neither header (curl, applications) pass."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            h = Headers(scope=scope)
            origin, site = h.get("origin"), (h.get("sec-fetch-site") or "").lower()
            foreign = site in ("cross-site", "same-site") or (
                origin is not None
                and (origin == "null" or urlsplit(origin).netloc.lower() != h.get("host", "").lower())
            )
            if foreign:
                await JSONResponse(
                    {
                        "detail": "cross-site request refused: the service answers its own page "
                        "and clients that are not browsers"
                    },
                    status_code=403,
                )(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, from ``Content-Length`` before any
    of it is read, or as soon as a body without one (chunked) passes the limit."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = (
            f"request body over {self.limit:,} bytes: a search needs a query of at most {MAX_QUERY_CHARS:,} characters"
        )
        length = Headers(scope=scope).get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await JSONResponse({"detail": message}, status_code=413)(scope, receive, send)
            return
        seen = 0

        async def bounded():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(status_code=413, detail=message)
            return msg

        await self.app(scope, bounded, send)


def allowed_hosts(token: str | None, extra: list[str] | None = None) -> list[str]:
    """``Host`` names the service answers for: :data:`LOOPBACK_HOSTS` and ``extra`` (default
    ``SITUATE_ALLOWED_HOSTS``); with a bearer token and no list, any (the token is the guard:
    a page rebound to this address cannot send it)."""
    if extra is None:
        extra = [h.strip().lower() for h in env(HOSTS_ENV).split(",") if h.strip()]
    if token and not extra:
        return ["*"]
    return [*LOOPBACK_HOSTS, *extra]


def create_app(
    home: str | None = None,
    token: str | None = None,
    hosts: list[str] | None = None,
    collections: dict[str, str] | None = None,
) -> FastAPI:
    """The FastAPI application of ``situate serve`` over data folder ``home``, or over several
    collections.

    Parameters
    ----------
    home : str, optional
        The data folder (default ``$SITUATE_HOME``, else ``./.situate``).
    token : str, optional
        When given, every request must carry ``Authorization: Bearer <token>`` (401 otherwise).
    hosts : list of str, optional
        ``Host`` names answered besides the loopback ones (default ``SITUATE_ALLOWED_HOSTS``);
        others get 400 (:func:`allowed_hosts`).
    collections : dict, optional
        Collection name → data folder: every search covers them all, fused by RRF, each hit
        naming its collection (:func:`situate.pipelines.operations.search_collections`); ``home``
        is then unused.  A caller without the token reads each data folder as its collection's name.
    """
    from situate.resources.store.objects import is_uri, normalize_home

    home = normalize_home(data_folder(home))
    # anonymous callers see the data folder's name, not where it is
    shown = (
        home
        if token
        else (urlsplit(home).path.rstrip("/").rsplit("/", 1)[-1] if is_uri(home) else Path(home).name)
        or "the data folder"
    )
    searcher = _Searcher(home, shown, token, _collections(collections))
    app = FastAPI(
        title="situate",
        version=_version(),
        description="Hybrid search (dense + BM25 over the contextualised text and BM25 without the blurb, each kind of "
        "chunk fused its own way, optional rerank) over "
        "contextualised chunks.",
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(_BodyLimit)
    app.add_middleware(_SameOrigin)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(token, hosts), www_redirect=False)
    _add_guards(app, token, searcher.public)
    _add_routes(app, searcher)
    return app


def _collections(collections: dict[str, str] | None) -> dict[str, str]:
    """The collections' data folders, normalised (:func:`normalize_home`).

    Raises
    ------
    situate.resources.errors.QueryError
        A name that is not a collection name.
    """
    from situate.assets.collection import NAME_PATTERN
    from situate.pipelines.operations import QueryError
    from situate.resources.store.objects import normalize_home

    bad = [n for n in collections or {} if not NAME_PATTERN.fullmatch(n)]
    if bad:
        raise QueryError(f"collection name {bad[0]!r}: use lower-case letters, digits and _")
    return {name: normalize_home(home) for name, home in (collections or {}).items()}


class _Searcher:
    """The service's searches of one data folder: one at a time (one llama.cpp embedder; the
    reranker's seconds), at most :data:`MAX_WAITING` waiting, each for at most :data:`MAX_WAIT_S`
    seconds; what a caller without the token reads of a message is redacted (:func:`redact`)."""

    def __init__(self, home: str, shown: str, token: str | None, collections: dict[str, str] | None = None):
        self.home, self.shown, self.token = home, shown, token
        self.collections = collections or {}
        self.turn = threading.Lock()
        self.waiting_lock, self.waiting = threading.Lock(), 0

    def public(self, text: str) -> str:
        """What a caller reads of a message: whole with a token, else :func:`redact` (each
        collection's data folder read as its name)."""
        if self.token:
            return text
        # every collection's data folder by its name first (the longest first: one may lie inside
        # another), then the rest of the redaction once, which names any other path by its last part
        for name, home in sorted(self.collections.items(), key=lambda item: -len(item[1])):
            text = _name_home(text, home, name)
        return redact(text, self.home, self.shown)

    def answer(self, query: str, k: int, rerank: int | None) -> JSONResponse:
        """The hits of ``query`` as JSON (warnings in ``X-Situate-Warning-N`` headers), or 422 for
        an empty or refused query, 404 for a missing data folder or table, 503 when busy."""
        if not query.strip():
            return JSONResponse({"detail": "empty query: give the words to search for"}, status_code=422)
        with self.waiting_lock:
            if self.waiting >= MAX_WAITING:
                return _busy(f"{self.waiting} searches are waiting for the one in progress")
            self.waiting += 1
        try:
            got = self.turn.acquire(timeout=MAX_WAIT_S)
        finally:
            with self.waiting_lock:
                self.waiting -= 1
        if not got:
            return _busy(f"no turn within {MAX_WAIT_S:g} s")
        try:
            return self._search(query, k, rerank)
        finally:
            self.turn.release()

    def _search(self, query: str, k: int, rerank: int | None) -> JSONResponse:
        from situate.pipelines.operations import QueryError, search, search_collections
        from situate.pipelines.preflight import StartupError

        missing: list[str] = []
        try:
            if self.collections:
                hits, warnings = search_collections(query, self.collections, k, rerank, missing)
                warnings += [f"{n}: its data folder cannot be read now: not searched" for n in missing]
            else:
                hits, warnings = search(query, k, self.home, rerank)
        except QueryError as e:
            return JSONResponse({"detail": self.public(str(e))}, status_code=422)
        except StartupError as e:
            return JSONResponse({"detail": self.public(str(e))}, status_code=404 if "does not exist" in str(e) else 503)
        if not self.collections and any(w.startswith("the table in") and "is empty" in w for w in warnings):
            detail = self.public(f"no table in {self.home} yet: run `situate ingest PATH --home {self.home}`")
            return JSONResponse({"detail": detail}, status_code=404)
        headers = {
            f"X-Situate-Warning-{i}": self.public(w).encode("ascii", "backslashreplace").decode()
            for i, w in enumerate(warnings, start=1)
        }
        if missing:  # the collections not searched, by name (names are [a-z0-9_])
            headers[MISSING_HEADER] = ",".join(missing)
        return JSONResponse([hit_json(h, query) for h in hits], headers=headers)


def _busy(why: str) -> JSONResponse:
    return JSONResponse({"detail": f"busy: {why}; try again shortly"}, status_code=503, headers={"Retry-After": "1"})


def _add_guards(app: FastAPI, token: str | None, public) -> None:
    """The bearer token check (401), and errors as one-line JSON messages (422, 500), never a traceback."""

    @app.middleware("http")
    async def bearer_token(request: Request, call_next):
        if token:
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
                return JSONResponse(
                    {"detail": "missing or wrong bearer token (Authorization: Bearer …)"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        msgs = [
            f"malformed JSON body: {e.get('ctx', {}).get('error', e.get('msg'))}"
            if e.get("type") == "json_invalid"
            else f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'body'}: {e.get('msg')}"
            for e in exc.errors()
        ]
        return JSONResponse({"detail": "; ".join(msgs) or "invalid request"}, status_code=422)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):  # a message, never a traceback
        return JSONResponse(
            {"detail": public(f"internal error: {type(exc).__name__}: {exc}".splitlines()[0])}, status_code=500
        )


def _add_routes(app: FastAPI, searcher: _Searcher) -> None:
    """``/search`` (GET and POST), ``/health``, the search page ``/`` and the API page ``/docs``."""

    @app.get("/search", summary="Search (query string)")
    def search_get(
        q: str = Query(..., min_length=1, max_length=MAX_QUERY_CHARS, description="the query"),
        k: int = Query(10, ge=1, le=MAX_SERVICE_K),
        rerank: int | None = Query(None, ge=0, le=MAX_SERVICE_RERANK),
    ):
        return searcher.answer(q, k, rerank)

    @app.post("/search", summary="Search (JSON body)")
    def search_post(body: SearchRequest):
        return searcher.answer(body.query, body.k, body.rerank)

    @app.get("/health", summary="Table, index and models")
    def health():
        if searcher.collections:
            report = {n: {**health_report(h), "home": searcher.public(h)} for n, h in searcher.collections.items()}
            ok = all(r["status"] == "ok" for r in report.values())
            missing = [n for n, r in report.items() if r["status"] == "no data folder"]
            return {"status": "ok" if ok else "degraded", "collections": report, "missing": missing}
        return {**health_report(searcher.home), "home": searcher.shown}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page():
        return HTMLResponse(SEARCH_PAGE)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs():
        return HTMLResponse(_docs_page(app.openapi()))


def health_report(home: str) -> dict:
    """``GET /health``: ``{"status", "home", "table_rows", "table_version", "bm25_rows",
    "bm25_version", "embed_model", "llm_model"}`` (status ``"empty"`` before the first ingest)."""
    from situate.pipelines.operations import is_data_folder
    from situate.resources.store.objects import is_uri
    from situate.resources.store.retrieval import bm25_ids, bm25_version
    from situate.resources.store.store import Store

    # reading never creates a data folder: a folder without situate's mark is not opened (opening
    # it would create lancedb/ there, which would then pass for a data folder)
    if not is_uri(home) and not (Path(home).is_dir() and is_data_folder(Path(home))):
        return {"status": "no data folder", "home": home}
    store = Store(home=home)
    table = store.table()
    ids = bm25_ids(store.bm25_dir)
    out = {
        "status": "ok" if table is not None and table.count_rows() else "empty",
        "home": home,
        "table_rows": table.count_rows() if table is not None else 0,
        "table_version": table.version if table is not None else None,
        "bm25_rows": len(ids) if ids is not None else 0,
        "bm25_version": bm25_version(store),
    }
    if table is not None and out["table_rows"]:
        row = table.search().select(["embed_model", "llm_model"]).limit(1).to_list()[0]
        out.update(embed_model=row["embed_model"], llm_model=row["llm_model"])
    return out


def _version() -> str:
    try:
        return version("situate")
    except PackageNotFoundError:
        return "0"


def _docs_page(spec: dict) -> str:
    rows = []
    for path, ops in spec.get("paths", {}).items():
        for method, op in ops.items():
            params = ", ".join(f"{p['name']}" for p in op.get("parameters", []))
            rows.append(
                f"<tr><td><code>{method.upper()} {html.escape(path)}</code></td>"
                f"<td>{html.escape(op.get('summary', ''))}</td><td>{html.escape(params)}</td></tr>"
            )
    return (
        "<!doctype html><meta charset=utf-8><title>situate API</title>"
        "<style>body{font:15px system-ui;margin:2em}td{padding:.3em 1em;border-bottom:1px solid #ddd}</style>"
        f"<h1>situate API {html.escape(spec.get('info', {}).get('version', ''))}</h1>"
        "<p>The machine-readable schema: <a href=/openapi.json>/openapi.json</a>.</p>"
        "<table><tr><th>endpoint</th><th>what</th><th>parameters</th></tr>" + "".join(rows) + "</table>"
    )


#: The search page: a box and the hits, each with its location (``path:start-end``), chunk index,
#: the structural context and the blurb set apart from the lines that matched; the query is kept
#: in the page's address (``/?q=…&k=…`` searches when opened).  Text is inserted with ``textContent`` only
#: (a document's text is never read as HTML), and the page loads nothing from elsewhere.
SEARCH_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>situate search</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:15px/1.45 system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
 form{display:flex;gap:.5em} input[type=search]{flex:1;font-size:1.1em;padding:.4em}
 button{font-size:1em;padding:.4em 1em} .hit{border-top:1px solid #ddd;padding:.8em 0}
 .source{font-weight:600} .meta{color:#666;font-size:.9em}
 .blurb{background:#f3f6fb;border-left:3px solid #5b7db1;padding:.3em .6em;margin:.4em 0}
 .context{color:#555;font-family:ui-monospace,monospace;font-size:.85em;white-space:pre-wrap;margin:.3em 0}
 .text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:.9em}
 #status{color:#666;margin:.6em 0}
</style></head>
<body>
<h1>situate</h1>
<form id="form"><input type="search" id="q" name="q" placeholder="Ask the documents…" autofocus>
<select id="k"><option>5</option><option selected>10</option><option>20</option></select>
<button type="submit" id="go">Search</button></form>
<div id="status"></div><div id="results"></div>
<script>
const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text; return e; };
document.getElementById("form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = document.getElementById("q").value, k = document.getElementById("k").value;
  const status = document.getElementById("status"), out = document.getElementById("results");
  out.replaceChildren(); status.textContent = "searching…";
  history.replaceState(null, "", "?" + new URLSearchParams({q, k}));  // the search can be linked
  const t0 = performance.now();
  try {
    const r = await fetch("search?" + new URLSearchParams({q, k}));
    const body = await r.json();
    if (!r.ok) { status.textContent = body.detail || ("error " + r.status); return; }
    status.textContent = body.length + " hits in " + Math.round(performance.now() - t0) + " ms";
    for (const h of body) {
      const d = el("div", "hit");
      d.append(el("div", "source", h.rank + ". " + h.location),
               el("div", "meta", "chunk " + h.chunk_index + " · score " + h.score.toFixed(4)));
      if (h.context) d.append(el("div", "context", h.context));
      if (h.blurb) d.append(el("div", "blurb", h.blurb));
      const num = m => (m.line === null ? "" : String(m.line)).padStart(5);
      const lines = h.matched.map(m => num(m) + " | " + m.text).join("\\n");
      d.append(el("pre", "text", lines || (h.text.length > 700 ? h.text.slice(0, 700) + "…" : h.text)));
      out.append(d);
    }
  } catch (e) { status.textContent = "the service did not answer: " + e; }
});
const asked = new URLSearchParams(location.search);  // a linked search (/?q=…&k=…) runs on load
if (asked.get("q")) {
  document.getElementById("q").value = asked.get("q");
  if (["5", "10", "20"].includes(asked.get("k"))) document.getElementById("k").value = asked.get("k");
  document.getElementById("form").requestSubmit();
}
</script></body></html>
"""
