"""Reading source documents: discovery in a docs folder, format detection, text extraction.

Plain functions, no Dagster: the ``raw_documents`` asset calls them, tests call them directly.

Formats: plain text, Markdown, reStructuredText, HTML (text, not tags: BeautifulSoup), PDF (text
layer: pypdf), source code, and a pre-chunked corpus file in the form of the Contextual Retrieval
cookbook's ``codebase_chunks.json`` (a JSON list of ``{"doc_id", "content", "chunks": [{"content",
"original_index"}]}``), whose documents keep their given chunks (``"chunks": null``: none given,
situate chunks the content as it does a file; ``situate eval --rechunk`` writes such a file).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import html
import io
import json
import re
from pathlib import Path, PurePosixPath

from charset_normalizer import from_bytes

from situate.resources.documents.files import TooLarge, read_under, split_under
from situate.resources.documents.keys import PartitionKeyError, check_key, encode_key
from situate.resources.documents.listing import TOOL_DIRS, ListingRules, fresh_listing
from situate.resources.errors import DocumentError  # noqa: F401  (importable from here as before)
from situate.resources.store.objects import is_uri

#: Largest file read, in bytes.  Bigger files get a named error instead of exhausting memory.
MAX_FILE_BYTES = 64 * 1024 * 1024

TEXT_EXT = {".txt", ".text"}
MARKDOWN_EXT = {".md", ".markdown", ".mdx"}
RST_EXT = {".rst"}
HTML_EXT = {".html", ".htm", ".xhtml"}
PDF_EXT = {".pdf"}
CODE_EXT = {
    ".py",
    ".pyi",
    ".rs",
    ".go",
    ".java",
    ".kt",
    ".scala",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".cxx",
    ".hpp",
    ".hh",
    ".cs",
    ".js",
    ".jsx",
    ".mjs",
    ".ts",
    ".tsx",
    ".rb",
    ".php",
    ".swift",
    ".m",
    ".sh",
    ".bash",
    ".zsh",
    ".sql",
    ".r",
    ".jl",
    ".lua",
    ".pl",
    ".hs",
    ".ml",
    ".ex",
    ".exs",
    ".toml",
    ".yaml",
    ".yml",
    ".ini",
    ".cfg",
    ".json",
    ".xml",
    ".css",
    ".scss",
    ".proto",
}
#: Code files known by their whole name (no extension, or not a code extension).
CODE_NAMES = {
    "Makefile",
    "GNUmakefile",
    "Dockerfile",
    "Containerfile",
    "CMakeLists.txt",
    "Justfile",
    "Vagrantfile",
    "Gemfile",
    "Rakefile",
    "Procfile",
    "Brewfile",
    "Jenkinsfile",
    "Snakefile",
    "Earthfile",
    "Tiltfile",
}
#: Tool folders never read (:data:`situate.resources.documents.listing.TOOL_DIRS`; a docs prefix on
#: object storage skips them too).
SKIP_DIRS = TOOL_DIRS
#: Bytes of a file without an extension read to tell text from binary (git's own heuristic: a NUL
#: byte in the first 8,000 bytes; 8 KiB here).
SNIFF_BYTES = 8192


@dataclasses.dataclass(frozen=True)
class SourceRef:
    """One discovered document (not yet read).

    Attributes
    ----------
    key : str
        Partition key, ``encode_key(source)``.
    source : str
        POSIX path relative to the docs root; for a corpus file's document ``path#doc_id``.
    path : str
        Absolute path of the file on disk.
    sha256 : str
        Hex sha256 of the file's bytes (for a corpus document: of its JSON entry).
    corpus_doc_id : str or None
        The document's ``doc_id`` inside a corpus file.
    generated : str or None
        ``linguist-generated`` or ``linguist-vendored`` where ``.gitattributes`` marks the file so
        (:func:`situate.resources.documents.listing.linguist_marks`): indexed with no LLM call.
    """

    key: str
    source: str
    path: str
    sha256: str
    corpus_doc_id: str | None = None
    generated: str | None = None


@dataclasses.dataclass
class Document:
    """A document's text and metadata, as the ``raw_documents`` asset stores it.

    Attributes
    ----------
    doc_id : str
        The corpus's ``doc_id``, else ``source``.
    source, key, sha256 : str
        As :class:`SourceRef`.
    title : str
        From the document itself (first heading, ``<title>``, PDF metadata), else the file name.
    format : str
        ``text | markdown | rst | html | pdf | code | corpus``.
    size_bytes : int
        Size of the source bytes.
    text : str
        Extracted text (Unicode, ``\\n`` line ends).
    headings : list of [offset, level, title]
        Section headings, ``offset`` in characters of ``text``; for heading paths.
    given_chunks : list of [original_index, text] or None
        A corpus document's own chunks, each an exact substring of ``text``.
    notes : list of str
        What reading had to do (an encoding detected, invalid bytes replaced); logged as
        warnings and shown in the run's metadata.
    generated : str or None
        As :attr:`SourceRef.generated`: its chunks get their structural context, no LLM call.
    """

    doc_id: str
    source: str
    key: str
    sha256: str
    title: str
    format: str
    size_bytes: int
    text: str
    headings: list = dataclasses.field(default_factory=list)
    given_chunks: list | None = None
    notes: list = dataclasses.field(default_factory=list)
    generated: str | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Document:
        return cls(**d)


def format_of(path: Path | PurePosixPath) -> str | None:
    """The format for a file name, or ``None`` when the name alone does not tell (no extension) or
    it is not a document this project reads (:func:`format_of_content` reads a file without an
    extension)."""
    ext = path.suffix.lower()
    if path.name in CODE_NAMES or path.name.startswith("Dockerfile.") or ext == ".dockerfile":
        return "code"
    for fmt, exts in (
        ("text", TEXT_EXT),
        ("markdown", MARKDOWN_EXT),
        ("rst", RST_EXT),
        ("html", HTML_EXT),
        ("pdf", PDF_EXT),
        ("code", CODE_EXT),
    ):
        if ext in exts:
            return fmt
    return None


def format_of_content(path: Path | PurePosixPath, head: bytes) -> str | None:
    """The format of a file from its name, or, for a name with no extension that is not hidden
    (``README``, ``LICENSE``, ``CHANGELOG``, a script), from its first bytes ``head``: ``code``
    after a ``#!`` line, ``text`` otherwise, None when binary (a NUL byte in the first
    :data:`SNIFF_BYTES`, as git decides).

    >>> format_of_content(PurePosixPath("examples/README"), b"An example.")
    'text'
    >>> format_of_content(PurePosixPath("bin/tool"), b"#!/usr/bin/env python3")
    'code'
    >>> format_of_content(PurePosixPath("bin/a.out"), b"\\x7fELF\\x00") is None
    True
    """
    known = format_of(path)
    if known is not None or path.suffix or path.name.startswith("."):
        return known
    if b"\0" in head[:SNIFF_BYTES]:
        return None
    return "code" if head.startswith(b"#!") else "text"


def is_private_key(head: bytes) -> bool:
    """Whether a file's bytes open with a PEM private key (``-----BEGIN … PRIVATE KEY-----``: SSH,
    TLS, PGP keys), which is never read whatever its name.

    >>> is_private_key(b"-----BEGIN OPENSSH PRIVATE KEY-----\\nb3Bl")
    True
    >>> is_private_key(b"# Keys\\n\\n-----BEGIN RSA PRIVATE KEY----- is how a key starts")
    False
    """
    first = head.lstrip()[:200].split(b"\n", 1)[0]
    return first.startswith(b"-----BEGIN ") and b"PRIVATE KEY" in first


def unread_reason(path: Path | PurePosixPath, head: bytes | None) -> str:
    """Why a listed file is not read as a document: ``binary`` or ``unknown format (.ext)``."""
    if head is not None and not path.suffix and not path.name.startswith("."):
        return "binary"
    return f"unknown format ({path.suffix.lower() or path.name})"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_corpus(data: bytes) -> list[dict] | None:
    """The documents of a cookbook-form corpus file, or ``None`` if ``data`` is not one."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting too deep
        return None
    if (
        isinstance(obj, list)
        and obj
        and all(isinstance(d, dict) for d in obj)
        and all({"doc_id", "content", "chunks"} <= d.keys() for d in obj)
    ):
        return obj
    return None


#: Suffix of the source of a corpus document whose ``doc_id`` appeared before in the same file:
#: ``corpus.json#doc_1#duplicate-2`` fails with its reason, the first ``doc_1`` is indexed.
DUPLICATE_MARK = "#duplicate-"


@functools.lru_cache(maxsize=4)
def corpus_index(path: str, size: int, mtime_ns: int, n_parts: int = 1) -> dict[str, dict]:
    """A corpus file's documents by ``doc_id``, parsed once per file version (its size and
    mtime), not once per document: a run over n documents of one corpus parsed it n times before.
    A ``doc_id`` given twice keeps its first document (discovery names the duplicate).  The file
    is read following no link in its last ``n_parts`` path components (:func:`read_under`)."""
    corpus = read_corpus(read_under(*split_under(path, n_parts), limit=MAX_FILE_BYTES)) or []
    index: dict[str, dict] = {}
    for d in corpus:
        index.setdefault(str(d["doc_id"]), d)
    return index


def corpus_entry_sha(entry: dict) -> str:
    """sha256 of a corpus document's canonical JSON (content and chunks)."""
    return _sha256(json.dumps(entry, sort_keys=True, ensure_ascii=False).encode())


def discover(
    root: str | Path, passed_over: dict[str, str] | None = None, rules: ListingRules | None = None
) -> list[SourceRef]:
    """Every document under ``root`` (a folder, or a single file such as a corpus file).

    A folder's files are those :func:`situate.resources.documents.listing.list_project` gives now (what
    git tracks or does not ignore, narrowed or widened by ``rules``); of those, a file of no known
    format, a binary file without an extension and an empty or whitespace-only file are not
    documents.  A JSON file in the cookbook's corpus form stands for its documents.  Sorted by
    source.

    Parameters
    ----------
    root : str or Path
        The docs folder or file.
    passed_over : dict, optional
        Filled with path (a folder ends with ``/``) → why it is not read (ignored, hidden, empty,
        unknown format ...), when given.
    rules : ListingRules, optional
        Include and exclude globs, generated files (default: none).

    Raises
    ------
    FileNotFoundError
        ``root`` does not exist.
    situate.resources.documents.listing.ListingError
        ``git`` failed on the folder.
    """
    root = Path(root).expanduser().resolve()
    if not root.exists():
        raise FileNotFoundError(f"docs path {root} does not exist")
    passed_over = passed_over if passed_over is not None else {}
    if root.is_file():
        files, base, marks = [root], root.parent, {}
    else:
        listing = fresh_listing(root, rules)
        passed_over.update(listing.skipped)
        base, marks = root, listing.generated
        files = [root / f for f in listing.files]
    refs: list[SourceRef] = []
    for p in files:
        refs.extend(_refs_of(p, base, passed_over, marks))
    return sorted(refs, key=lambda r: r.source)


def _refs_of(p: Path, base: Path, passed_over: dict[str, str], marks: dict[str, str]) -> list[SourceRef]:
    """The document(s) of the file ``p`` (none when it is not one: named in ``passed_over``)."""
    source = str(PurePosixPath(*p.relative_to(base).parts))
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:  # a file name that is not UTF-8: listed (named) under a readable name
        source = source.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if format_of(p):
            return [SourceRef(encode_key(source), source, str(p), "bad-name")]
        passed_over[source] = "file name is not UTF-8 (rename it to have it read)"
        return []
    try:
        check_key(encode_key(source))
    except PartitionKeyError:  # a newline, a tab or a backslash in a name: no key can name it
        passed_over[source] = "file name has a control character or a backslash (rename it to have it read)"
        return []
    try:
        size = p.stat().st_size
        data = read_under(base, p.relative_to(base).parts, MAX_FILE_BYTES) if size <= MAX_FILE_BYTES else None
    except TooLarge as e:
        size, data = e.size, None
    except FileNotFoundError:
        return []  # gone since the folder was listed: the next sync sees it removed
    except OSError as e:  # unreadable: listed, so that loading it names the reason
        return [SourceRef(encode_key(source), source, str(p), f"unreadable:{e.errno}")] if format_of(p) else []
    if data is not None and format_of_content(p, data) is None or data is None and format_of(p) is None:
        passed_over[source] = unread_reason(p, data)
        return []
    if data is not None and not data.strip():
        passed_over[source] = f"empty ({len(data)} bytes{', whitespace only' if data else ''})"
        return []
    if data is not None and is_private_key(data):
        passed_over[source] = "may hold secrets (a private key)"
        return []
    corpus = read_corpus(data) if data is not None and p.suffix.lower() == ".json" else None
    if corpus is None:
        sha = _sha256(data) if data is not None else f"size:{size}"
        return [SourceRef(encode_key(source), source, str(p), sha, generated=marks.get(source))]
    refs, seen = [], {}
    for entry in corpus:
        doc_id = str(entry["doc_id"])
        seen[doc_id] = seen.get(doc_id, 0) + 1
        src = f"{source}#{doc_id}"
        if seen[doc_id] > 1:  # named, so that the run says so; the first one is indexed
            src += f"{DUPLICATE_MARK}{seen[doc_id]}"
        refs.append(SourceRef(encode_key(src), src, str(p), corpus_entry_sha(entry), src.split("#", 1)[1]))
    return refs


def _decode_text(source: str, data: bytes, notes: list[str] | None = None) -> str:
    """Bytes of a text document → Unicode with ``\\n`` line ends.

    UTF-8 (with or without BOM) and UTF-16 with a BOM decode as they are.  Otherwise the text is
    never refused for its encoding, and ``notes`` says what was done:

    * some valid UTF-8 multi-byte characters among invalid bytes (mixed encodings, a stray
      Latin-1 byte): UTF-8 with each invalid byte replaced by U+FFFD;
    * no valid multi-byte character at all (a legacy 8-bit file): the encoding that
      charset-normalizer detects (cp1252 when it finds none, or among equally good candidates).

    Raises
    ------
    DocumentError
        Empty or whitespace only; binary (a NUL byte in the first 8 KiB).
    """
    notes = notes if notes is not None else []
    if not data.strip():
        raise DocumentError(source, f"empty ({len(data)} bytes{', whitespace only' if data else ''})")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        notes.append("decoded as UTF-16 (byte order mark)")
        return data.decode("utf-16", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    nul = data.find(b"\x00", 0, 8192)
    if nul >= 0:
        raise DocumentError(source, f"binary content (NUL byte at offset {nul})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        where = f"byte {data[e.start]:#04x} at offset {e.start}"
        replaced = data.decode("utf-8", errors="replace")
        bad = replaced.count("\ufffd")
        valid_multibyte = sum(1 for ch in replaced if ord(ch) > 127 and ch != "\ufffd")
        if valid_multibyte:
            text = replaced
            notes.append(f"not valid UTF-8 ({where}); mixed encodings: {bad} invalid byte(s) replaced by U+FFFD")
        else:
            matches = from_bytes(data)
            best = matches.best()
            encoding = best.encoding if best is not None else "cp1252"
            # short texts often tie (cp1250, cp1252, cp1257 decode them equally well): among
            # equals, take cp1252, the most common legacy 8-bit encoding
            if best is not None and any(
                m.encoding == "cp1252" and m.chaos == best.chaos and m.coherence == best.coherence for m in matches
            ):
                encoding = "cp1252"
            text = data.decode(encoding, errors="replace")
            notes.append(f"not valid UTF-8 ({where}); decoded as {encoding} (detected by charset-normalizer)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


#: ``#`` to ``######``, blanks, then the title (its closing ``#``s and blanks are stripped in
#: Python: a lazy group before ``[ \t#]*$`` was quadratic on a long line of blanks).
_MD_HEADING = re.compile(r"^(#{1,6})[ \t]+(\S.*)$")
#: Longest line read as a heading, in characters: a longer one is text.
MAX_HEADING_CHARS = 1000
_FENCE = re.compile(r"^(```|~~~)")


def markdown_headings(text: str) -> list[list]:
    """ATX headings (``# Title``) outside fenced code, as ``[offset, level, title]``."""
    out, offset, fenced = [], 0, False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced and len(line) <= MAX_HEADING_CHARS and (m := _MD_HEADING.match(line.rstrip("\r\n"))):
            title = m.group(2).rstrip(" \t#").strip() or m.group(2).strip()
            out.append([offset, len(m.group(1)), title])
        offset += len(line)
    return out


_RST_ADORN = re.compile(r"^([=\-~^\"'`#*+<>:._])\1{2,}\s*$")


def rst_headings(text: str) -> list[list]:
    """reStructuredText section titles (underlined, optionally overlined), ``[offset, level, title]``.

    Levels follow the order in which adornment styles first appear, as docutils assigns them.
    """
    lines = text.splitlines(keepends=True)
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line)
    styles: list[tuple[str, bool]] = []
    out = []
    i = 0
    while i < len(lines) - 1:
        title, under = lines[i].rstrip("\n"), lines[i + 1].rstrip("\n")
        m = _RST_ADORN.match(under)
        if title.strip() and not _RST_ADORN.match(title) and m and len(under.strip()) >= len(title.strip()):
            over = i > 0 and lines[i - 1].rstrip("\n") == under
            style = (m.group(1), over)
            if style not in styles:
                styles.append(style)
            start = offsets[i - 1] if over else offsets[i]
            out.append([start, styles.index(style) + 1, title.strip()])
            i += 2
            continue
        i += 1
    return out


_HTML_BLOCKS = [
    "p",
    "div",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "tr",
    "section",
    "article",
    "pre",
    "blockquote",
    "table",
    "ul",
    "ol",
    "dt",
    "dd",
    "header",
    "footer",
    "main",
    "nav",
    "aside",
    "figure",
    "figcaption",
    "hr",
]


#: Deepest element nesting given to BeautifulSoup.  Its html.parser tree builder is quadratic in
#: nesting depth (measured here: 20,000 nested ``<div>`` in 220 KB took 22 s, 2,000 took 0.46 s);
#: real pages nest a few dozen deep.  Deeper HTML is read as text with its tags stripped.
MAX_HTML_DEPTH = 256

#: Elements without an end tag or whose end tag may be left out (HTML Living Standard, "optional
#: tags"): not counted as nesting by :func:`html_depth`.
_HTML_UNNESTED = frozenset(
    "area base br col embed hr img input link meta source track wbr param keygen "
    "p li dt dd tr td th thead tbody tfoot option optgroup rt rp colgroup caption".split()
)
_HTML_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)[^<>]*?(/?)>")


def html_depth(raw: str) -> int:
    """Deepest nesting of the elements in ``raw``, counted in one linear pass over its tags
    (start tags minus end tags; void elements, self-closed tags and elements whose end tag is
    optional are not counted): an upper bound on the tree's depth for well-formed pages."""
    depth = deepest = 0
    for m in _HTML_TAG.finditer(raw):
        if m.group(2).lower() in _HTML_UNNESTED or m.group(3):
            continue
        depth = max(0, depth - 1) if m.group(1) else depth + 1
        deepest = max(deepest, depth)
    return deepest


def html_to_text(source: str, data: bytes, notes: list[str] | None = None) -> tuple[str, str | None, list[list]]:
    """HTML → (text, ``<title>``, headings) with BeautifulSoup; scripts and styles dropped.

    HTML nested deeper than :data:`MAX_HTML_DEPTH` (:func:`html_depth`) is read as text with its
    tags stripped and no headings, with a note saying so (bounded work on any input).
    """
    from bs4 import BeautifulSoup

    raw = _decode_text(source, data, notes)
    depth = html_depth(raw)
    if depth > MAX_HTML_DEPTH:
        if notes is not None:
            notes.append(
                f"HTML nested {depth:,} deep (over {MAX_HTML_DEPTH}): read as text with its tags stripped, no headings"
            )
        text = html.unescape(_HTML_TAG.sub(" ", raw))
        text = re.sub(r"[ \t\r\f\v]+", " ", text)
        return re.sub(r"\n\s*\n\s*", "\n\n", text).strip(), None, []
    soup = BeautifulSoup(raw, "html.parser")
    for tag in soup(["script", "style", "noscript", "template"]):
        tag.decompose()
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    if soup.title:
        soup.title.decompose()
    marks = []
    for n, h in enumerate(soup.find_all(["h1", "h2", "h3", "h4", "h5", "h6"])):
        marks.append((int(h.name[1]), h.get_text(" ", strip=True)))
        h.insert_before(f"\n\x00{n}\x00")
    for tag in soup.find_all(_HTML_BLOCKS):
        tag.insert_after("\n")
    for br in soup.find_all("br"):
        br.replace_with("\n")
    body = soup.get_text("")
    body = re.sub(r"[ \t\r\f\v]+", " ", body)
    body = re.sub(r" ?\n ?", "\n", body)
    body = re.sub(r"\n{3,}", "\n\n", body).strip("\n ")
    text, headings, pos = [], [], 0
    for piece in re.split(r"(\x00\d+\x00)", body):
        if piece.startswith("\x00"):
            level, htitle = marks[int(piece.strip("\x00"))]
            headings.append([pos, level, htitle])
        else:
            text.append(piece)
            pos += len(piece)
    return "".join(text), title, headings


#: Most characters a PDF may extract to, per byte of the file, above :data:`PDF_BASE_CHARS`.
#: Text streams compress about 3-5× with Flate, so a real PDF's text is a few characters per byte
#: at most; pages that all draw one shared content stream extract its text once per page (a
#: 20 KB file to tens of millions of characters, hours of blurbs).
MAX_PDF_CHARS_PER_BYTE = 10
#: Characters any PDF may extract to, whatever its size.
PDF_BASE_CHARS = 50_000


def _contents_id(page) -> tuple | None:
    """The indirect object(s) of a page's content stream, or None when it is inline."""
    ref = page.raw_get("/Contents") if "/Contents" in page else None
    if ref is None:
        return None
    items = ref if isinstance(ref, list) else [ref]
    ids = tuple((getattr(r, "idnum", None), getattr(r, "generation", None)) for r in items)
    return None if any(i[0] is None for i in ids) else ids


def pdf_to_text(source: str, data: bytes, notes: list[str] | None = None) -> tuple[str, str | None]:
    """PDF → (text of its text layer, metadata title) with pypdf.

    A page that draws the same content stream as an earlier page is extracted once (noted).

    Raises
    ------
    DocumentError
        The file does not parse, is encrypted, has no text layer (a scan), or extracts to more
        than ``PDF_BASE_CHARS + MAX_PDF_CHARS_PER_BYTE × its size in bytes`` characters.
    """
    import pypdf

    limit = PDF_BASE_CHARS + MAX_PDF_CHARS_PER_BYTE * len(data)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise DocumentError(source, "encrypted PDF")
        pages, seen, repeated, total = [], set(), 0, 0
        for page in reader.pages:
            cid = _contents_id(page)
            if cid is not None and cid in seen:
                repeated += 1
                continue
            if cid is not None:
                seen.add(cid)
            text = (page.extract_text() or "").strip()
            total += len(text)
            if total > limit:
                raise DocumentError(
                    source,
                    f"PDF extracts to over {limit:,} characters ({PDF_BASE_CHARS:,} + "
                    f"{MAX_PDF_CHARS_PER_BYTE} per byte of its {len(data):,} bytes) "
                    f"by page {len(pages) + repeated + 1}",
                )
            pages.append(text)
        if repeated and notes is not None:
            notes.append(f"{repeated} PDF pages repeat an earlier page's content stream: read once")
        title = (reader.metadata or {}).get("/Title") if reader.metadata else None
    except DocumentError:
        raise
    except Exception as e:  # pypdf raises many types for damaged files
        raise DocumentError(source, f"unreadable PDF ({type(e).__name__}: {e})") from None
    text = "\n\n".join(p for p in pages if p)
    if not text.strip():
        raise DocumentError(source, f"PDF has no text layer ({len(pages)} pages, no text: a scan?)")
    return text, (str(title).strip() or None) if title else None


def heading_title(headings: list[list]) -> str | None:
    """The document's title among its headings (``[offset, level, title]``): the first, when it is
    the one heading of the top level (``# Guide`` over ``## Install``, ``## Use``); None when the
    top level holds several (a changelog's ``## Version 8.5.0``, ``## Version 8.4.2``: sections,
    not a title, so no section is taken for the title of the others) or there is none."""
    if not headings:
        return None
    top = min(h[1] for h in headings)
    return headings[0][2] if headings[0][1] == top and sum(h[1] == top for h in headings) == 1 else None


def _first_line_title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        line = line.strip().strip("#=*-_ ").strip()
        if line:
            return line[:120]
    return fallback


def load(ref: SourceRef) -> Document:
    """Read one discovered document.

    Raises
    ------
    DocumentError
        The file is missing, unreadable, too large, empty, binary, or an unreadable PDF; or the corpus
        entry is gone or its chunks are not substrings of its content.
    """
    if is_uri(ref.path):  # a docs source on object storage (situate.resources.documents.remote)
        from situate.resources.documents.remote import read_object

        return _document(ref, read_object(ref), ref.sha256)
    path = Path(ref.path)
    n_parts = len(PurePosixPath(ref.source).parts)  # "a/b.json#doc" has the parts of "a/b.json"
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise DocumentError(ref.source, f"too large ({size:,} bytes > {MAX_FILE_BYTES:,})")
        if ref.corpus_doc_id is not None:  # the corpus is parsed once per run, not once per document
            st = path.stat()
            return _load_corpus_doc(
                ref, corpus_index(str(path), st.st_size, st.st_mtime_ns, n_parts).get(ref.corpus_doc_id)
            )
        # no link followed, even one swapped in since the folder was listed
        data = read_under(*split_under(path, n_parts), limit=MAX_FILE_BYTES)
    except TooLarge as e:
        raise DocumentError(ref.source, str(e)) from None
    except OSError as e:
        raise DocumentError(ref.source, f"cannot read ({e.strerror or e})") from None
    return _document(ref, data, _sha256(data))


def _document(ref: SourceRef, data: bytes, sha: str) -> Document:
    """The document in the bytes ``data`` of ``ref``, whose version is ``sha`` (the bytes' sha256;
    for an object, its ETag as the listing gave it)."""
    path = PurePosixPath(ref.path)
    name = path.name
    fmt = format_of_content(path, data[:SNIFF_BYTES]) or "text"
    headings: list = []
    notes: list[str] = []
    if fmt == "pdf":
        text, title = pdf_to_text(ref.source, data, notes)
    elif fmt == "html":
        text, title, headings = html_to_text(ref.source, data, notes)
    else:
        text = _decode_text(ref.source, data, notes)
        title = None
        if fmt == "markdown":
            headings = markdown_headings(text)
        elif fmt == "rst":
            headings = rst_headings(text)
        title = heading_title(headings) or (name if headings else None)
    if not text.strip():
        raise DocumentError(ref.source, "no text after extraction")
    if fmt == "code":
        title = title or name
    title = title or _first_line_title(text, name)
    if sha != ref.sha256:  # written to since the folder was listed: the rows say what was read
        notes.append("changed since the folder was listed: indexed as read now")
    return Document(
        doc_id=ref.source,
        source=ref.source,
        key=ref.key,
        sha256=sha,
        title=title,
        format=fmt,
        size_bytes=len(data),
        text=text,
        headings=headings,
        notes=notes,
        generated=ref.generated,
    )


def _load_corpus_doc(ref: SourceRef, entry: dict | None) -> Document:
    if DUPLICATE_MARK in ref.source:
        doc_id, _, n = ref.corpus_doc_id.rpartition(DUPLICATE_MARK)
        raise DocumentError(
            ref.source,
            f"doc_id {doc_id!r} appears again (occurrence {n}) in the corpus file: "
            "only its first document is indexed; give each document its own doc_id",
        )
    if entry is None:
        raise DocumentError(ref.source, "document no longer in the corpus file")
    text = entry["content"]
    if not isinstance(text, str) or not text.strip():
        raise DocumentError(ref.source, "empty content")
    if entry["chunks"] is None:  # no labelled chunks: chunked like a file (situate eval --rechunk)
        return _corpus_document(ref, entry, text, None)
    chunks = sorted(entry["chunks"], key=lambda c: c.get("original_index", 0))
    given = []
    for i, c in enumerate(chunks):
        if c["content"] not in text:
            raise DocumentError(ref.source, f"chunk {c.get('original_index', i)} is not a substring of the content")
        given.append([int(c.get("original_index", i)), c["content"]])
    if not given:
        raise DocumentError(ref.source, "corpus entry has no chunks")
    return _corpus_document(ref, entry, text, given)


def _corpus_document(ref: SourceRef, entry: dict, text: str, given: list | None) -> Document:
    raw = json.dumps(entry, ensure_ascii=False).encode()
    return Document(
        doc_id=ref.corpus_doc_id,
        source=ref.source,
        key=ref.key,
        sha256=ref.sha256,
        title=_first_line_title(text, ref.corpus_doc_id),
        format="corpus",
        size_bytes=len(raw),
        text=text,
        given_chunks=given,
    )
