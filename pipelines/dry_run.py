"""``situate ingest --dry-run``: what an ingest would read, and what it would ask of the LLM, before it.

The folder is listed exactly as an ingest lists it (:meth:`situate.resources.documents.docs.DocsFolder.discover`:
what git tracks or does not ignore, less ``.situateignore`` and the exclude globs, plus the include
globs); no model is loaded, nothing is written, and no document is read beyond what the listing
reads (a corpus file's entries are parsed to tell code from prose).  The documents are counted by
top folder (the first component of the path; files at the top as ``./``) and kind:

* ``prose`` (Markdown, RST, HTML, PDF, text) and ``code`` (a code file, or a corpus entry that
  parses as code: :func:`situate.contextual.policy.kind_of`) get their kind's context mode
  (``SITUATE_CONTEXT``, ``SITUATE_CODE_CONTEXT``): ``document`` is one LLM call a document,
  ``chunk`` a call per chunk (the chunks are not counted here: ``--estimate`` counts them),
  ``structure`` none;
* ``other``: lock files, minified files and files ``.gitattributes`` marks generated or vendored
  (:func:`situate.contextual.skipping.document_no_model_reason`), indexed with no LLM call.

Every file left out is named with its reason (ignored, hidden, empty, unknown format, too large,
...), at most :data:`SHOWN_PATHS` a reason; an ignored folder is named once, with the files and
bytes under it (``htmlcov/ (59 files, 9.4 MB)``).

Examples
--------
>>> top_folder("docs/guide/keys.md"), top_folder("README.md"), top_folder("data/corpus.json#doc_1")
('docs/', './', 'data/')
>>> skipped_lines({"a.png": "unknown format (.png)", "b.png": "unknown format (.png)", "c": "binary"}, {})
['skipped 2 files, unknown format (.png 2): a.png, b.png', 'skipped 1 file, binary: c']
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path, PurePosixPath

#: The kinds a document is counted as, in the table's order.
KINDS = ("prose", "code", "other")
#: Paths named at most for one reason of being skipped (the ``--json`` output lists every one).
SHOWN_PATHS = 10
#: Files counted at most under one skipped folder (a virtualenv holds tens of thousands).
MAX_COUNTED_FILES = 20_000
#: Entries of one corpus file whose kind is found by parsing them (about 5 ms an entry: every
#: grammar parses it); the others take the kind most of these have, and are counted as guessed.
PARSED_ENTRIES = 16
#: What each context mode costs, for a person.
MODE_COST = {
    "document": "one LLM call a document",
    "chunk": "an LLM call a chunk",
    "structure": "no LLM call",
    "extract": "no LLM call (the lead sentences)",
}
#: The reason of a discovered document that will fail when read, by its ``sha256`` placeholder
#: (:func:`situate.resources.documents.reading.discover`).
FAILING_SHAS = {
    "size:": "too large (over 64 MiB)",
    "bad-name": "file name not valid UTF-8",
    "unreadable:": "unreadable",
}


@dataclasses.dataclass
class FolderCount:
    """The documents of one top folder.

    Attributes
    ----------
    prose, code, other : int
        Documents of each kind (:data:`KINDS`).
    bytes : int
        Their files' size, bytes (a corpus file counted once).
    llm_calls : int
        LLM calls of a cold ingest from documents in ``document`` mode (one each).
    per_chunk : int
        Documents in ``chunk`` mode: an LLM call for each of their chunks.
    """

    prose: int = 0
    code: int = 0
    other: int = 0
    bytes: int = 0
    llm_calls: int = 0
    per_chunk: int = 0

    @classmethod
    def total(cls, counts) -> FolderCount:
        """The sum of ``counts`` (FolderCount objects), field by field."""
        counts = list(counts)
        return cls(**{f.name: sum(getattr(c, f.name) for c in counts) for f in dataclasses.fields(cls)})

    @property
    def documents(self) -> int:
        return self.prose + self.code + self.other

    def calls_text(self) -> str:
        """The LLM calls as a table cell: ``12``, or ``12 + a call per chunk of 30``."""
        if not self.per_chunk:
            return f"{self.llm_calls:,}"
        return f"{self.llm_calls:,} + a call per chunk of {self.per_chunk:,}"


@dataclasses.dataclass
class DryRun:
    """What ``situate ingest PATH`` would read and ask of the LLM (:func:`dry_run`).

    Attributes
    ----------
    docs : str
        The docs folder, file or object-store URI.
    modes : dict of str to str
        ``prose`` and ``code`` → the context mode of that kind under the settings.
    folders : dict of str to FolderCount
        Top folder (``docs/``, ``./``) → its documents.
    skipped : dict of str to str
        Path (a folder ends with ``/``) → why it is not read.
    skipped_folders : dict of str to list of int
        A skipped folder → ``[files, bytes]`` under it (files counted up to
        :data:`MAX_COUNTED_FILES`).
    documents, llm_calls, per_chunk : int
        Totals of ``folders``.
    guessed : int
        Corpus entries whose kind was not parsed but taken from their file's first
        :data:`PARSED_ENTRIES` (``--estimate`` parses every one).
    listed : str
        How a folder's files were listed (:attr:`situate.resources.documents.listing.Listing.how`:
        ``git working tree``, ...); ``""`` for one file or an object-store prefix.
    """

    docs: str
    modes: dict
    folders: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)
    skipped_folders: dict = dataclasses.field(default_factory=dict)
    documents: int = 0
    llm_calls: int = 0
    per_chunk: int = 0
    guessed: int = 0
    listed: str = ""

    def lines(self) -> list[str]:
        """What ``situate ingest --dry-run`` prints: the totals, the table by folder, the skipped
        files by reason, and how to get timings."""
        return [
            self.total_line(),
            *([f"listed as a {self.listed}: {LISTED.get(self.listed, '')}".rstrip(": ")] if self.listed else []),
            *folder_table(self.folders),
            *skipped_lines(self.skipped, self.skipped_folders),
            "LLM seconds by folder and the wall time: `situate ingest PATH --estimate` (reads and "
            "chunks every document, times the local models on a sample; nothing written)",
        ]

    def total_line(self) -> str:
        total = FolderCount.total(self.folders.values())
        policy = "; ".join(f"{k}: {m}, {MODE_COST.get(m, m)}" for k, m in self.modes.items())
        calls = f"{self.llm_calls:,}" + (
            f" + a call per chunk of {self.per_chunk:,} documents" if self.per_chunk else ""
        )
        return (
            f"{_n(self.documents, 'document')} in {_n(len(self.folders), 'top folder')}, {_mb(total.bytes)} (prose "
            f"{total.prose:,}, code {total.code:,}, other {total.other:,}: lock, minified and "
            f"generated files, no LLM call); LLM calls of a cold ingest: {calls} ({policy})"
            + (
                f"; the kind of {self.guessed:,} corpus entries is that of most of their file's first "
                f"{PARSED_ENTRIES} (--estimate parses every one)"
                if self.guessed
                else ""
            )
        )


#: What each way of listing a folder reads, for the dry run's ``listed as …`` line.
LISTED = {
    "git working tree": "the files git tracks and the untracked ones it does not ignore",
    "folder, .gitignore files read by git": "every file but those its .gitignore files ignore",
}


def dry_run(res: dict) -> DryRun:
    """Count what ingesting ``res["docs"]`` would read and ask of ``res["llm"]``; nothing loaded
    or written (:mod:`situate.pipelines.dry_run`).

    Parameters
    ----------
    res : dict
        :func:`situate.pipelines.settings.resources_from_env` (``docs``, ``llm``).

    Returns
    -------
    DryRun

    Raises
    ------
    FileNotFoundError
        The docs folder does not exist.
    situate.resources.documents.listing.ListingError
        ``git`` failed on the folder.
    """
    from situate.resources.documents.listing import cached_listing

    docs, llm = res["docs"], res["llm"]
    out = DryRun(docs=docs.where(), modes={"prose": llm.context, "code": llm.code_context})
    passed_over: dict[str, str] = {}
    refs = docs.discover(passed_over=passed_over)
    seen_files: set[str] = set()
    corpus_kinds = CorpusKinds()
    for ref in refs:
        failing = failing_reason(ref)
        if failing:
            passed_over[ref.source] = failing
            continue
        count = out.folders.setdefault(top_folder(ref.source), FolderCount())
        _add(count, ref, corpus_kinds.of(ref, docs.remote), out.modes, seen_files)
    out.guessed = corpus_kinds.guessed
    out.folders = dict(sorted(out.folders.items(), key=lambda kv: _order(kv[1], kv[0])))
    out.skipped = dict(sorted(passed_over.items()))
    read = frozenset(r.source for r in refs)  # an include glob may take files back from an ignored folder
    out.skipped_folders = {} if docs.remote else folder_sizes(docs.base, out.skipped, read)
    if not docs.remote and docs.root.is_dir():
        out.listed = cached_listing(docs.root, docs.rules).how
    total = FolderCount.total(out.folders.values())
    out.documents, out.llm_calls, out.per_chunk = total.documents, total.llm_calls, total.per_chunk
    return out


def _add(count: FolderCount, ref, kind: str, modes: dict, seen_files: set) -> None:
    """Add document ``ref`` of ``kind`` to its folder's ``count``."""
    setattr(count, kind, getattr(count, kind) + 1)
    mode = modes.get(kind, "structure")
    count.llm_calls += mode == "document"
    count.per_chunk += mode == "chunk"
    if ref.path not in seen_files:  # a corpus file's size once, not once an entry
        seen_files.add(ref.path)
        count.bytes += _size(ref.path)


def _order(count: FolderCount, name: str) -> tuple:
    """The table's order: the folders that cost the most LLM calls first, then the largest."""
    return (-count.llm_calls, -count.per_chunk, -count.documents, name)


def top_folder(source: str) -> str:
    """The top folder of a document's source path (``docs/``), ``./`` for a file at the top."""
    parts = PurePosixPath(source.split("#", 1)[0]).parts
    return parts[0] + "/" if len(parts) > 1 else "./"


def failing_reason(ref) -> str | None:
    """Why a discovered document will fail when read (too large, an unreadable file, a name that
    is not UTF-8, a corpus entry whose ``doc_id`` came before), or None."""
    if ref.sha256 == "duplicate":
        return "duplicate doc_id in its corpus file"
    return next((why for head, why in FAILING_SHAS.items() if ref.sha256.startswith(head)), None)


def kind_of_ref(ref, remote: bool = False) -> str:
    """``prose``, ``code`` or ``other`` (:data:`KINDS`) for a discovered document, reading at
    most a file's first bytes (a name without an extension) or its corpus entry."""
    from situate.contextual.policy import kind_of
    from situate.contextual.skipping import document_no_model_reason

    if document_no_model_reason(ref.source, ref.generated):
        return "other"
    return kind_of(_format_and_text(ref, remote))


class CorpusKinds:
    """:func:`kind_of_ref`, but of a corpus file's entries past its first :data:`PARSED_ENTRIES`
    the kind most of those had, with no parse (counted in :attr:`guessed`)."""

    def __init__(self):
        self.by_file: dict[str, dict[str, int]] = {}
        self.guessed = 0

    def of(self, ref, remote: bool = False) -> str:
        """The kind of document ``ref`` (:data:`KINDS`)."""
        if ref.corpus_doc_id is None:
            return kind_of_ref(ref, remote)
        kinds = self.by_file.setdefault(ref.path, {})
        if sum(kinds.values()) < PARSED_ENTRIES:
            kind = kind_of_ref(ref, remote)
            kinds[kind] = kinds.get(kind, 0) + 1
            return kind
        self.guessed += 1
        return max(kinds, key=kinds.get)


def _format_and_text(ref, remote: bool) -> dict:
    """``{"format", "text"}`` of a document as far as its kind needs: a corpus entry's text, a
    file's format from its name or, without an extension, its first bytes."""
    from situate.resources.documents.reading import SNIFF_BYTES, corpus_index, format_of, format_of_content

    if ref.corpus_doc_id is not None:
        st = os.stat(ref.path)
        n_parts = len(PurePosixPath(ref.source.split("#", 1)[0]).parts)
        entry = corpus_index(ref.path, st.st_size, st.st_mtime_ns, n_parts).get(ref.corpus_doc_id) or {}
        return {"format": "corpus", "text": str(entry.get("content", ""))}
    name = PurePosixPath(ref.source)
    fmt = format_of(name)
    if fmt is None and not remote:
        try:
            with open(ref.path, "rb") as f:
                fmt = format_of_content(name, f.read(SNIFF_BYTES))
        except OSError:
            fmt = None
    return {"format": fmt or "text", "text": ""}


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):  # an object on object storage: no local file
        return 0


def folder_sizes(base: Path, skipped: dict[str, str], read: frozenset[str] = frozenset()) -> dict[str, list[int]]:
    """``[files, bytes]`` under each skipped folder (a path ending with ``/``), walking no link
    and at most :data:`MAX_COUNTED_FILES` files a folder; files in ``read`` (paths under ``base``
    that are read all the same: an include glob took them back) are not counted."""
    return {path: _walk_size(base / path, base, read) for path in skipped if path.endswith("/")}


def _walk_size(folder: Path, base: Path, read: frozenset[str]) -> list[int]:
    files = size = 0
    for here, _dirs, names in os.walk(folder):
        for name in names:
            full = os.path.join(here, name)
            if read and Path(full).relative_to(base).as_posix() in read:
                continue
            try:
                st = os.lstat(full)
            except OSError:
                continue
            files, size = files + 1, size + st.st_size
            if files >= MAX_COUNTED_FILES:
                return [files, size]
    return [files, size]


def folder_table(folders: dict[str, FolderCount]) -> list[str]:
    """The documents by top folder and kind, with their LLM calls, as aligned lines (header
    first, the total last)."""
    total = FolderCount.total(folders.values())
    rows = [("folder", "documents", *KINDS, "size", "LLM calls")]
    for name, c in [*folders.items(), ("total", total)]:
        rows.append((name, f"{c.documents:,}", *(f"{getattr(c, k):,}" for k in KINDS), _mb(c.bytes), c.calls_text()))
    width = max(len(r[0]) for r in rows)
    cols = [max(len(r[i]) for r in rows) for i in range(1, 6)]
    return [
        f"{r[0]:<{width}}  " + "  ".join(f"{v:>{w}}" for v, w in zip(r[1:6], cols, strict=True)) + f"  {r[6]}"
        for r in rows
    ]


def _n(n: int, noun: str) -> str:
    """``1 document``, ``2 documents``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _mb(n: int) -> str:
    """A size for a person: ``9.4 MB``, ``120 KB``, ``5 bytes``."""
    if n >= 1_000_000:
        return f"{n / 1e6:,.1f} MB"
    return f"{n / 1e3:,.0f} KB" if n >= 1_000 else f"{n:,} bytes"


def _group(reason: str) -> str:
    """The group a reason is listed under: ``unknown format (.png)`` under ``unknown format``,
    ``empty (0 bytes)`` and ``empty (5 bytes, whitespace only)`` under ``empty``."""
    head = reason.split(" (", 1)[0]
    return head if head in ("unknown format", "empty") else reason


def skipped_lines(skipped: dict[str, str], sizes: dict[str, list[int]]) -> list[str]:
    """The files left out, one line a reason, the most files first: how many, and at most
    :data:`SHOWN_PATHS` of their paths, the largest first (a folder with its files and bytes:
    ``htmlcov/ (59 files, 9.4 MB)``; a path inside a folder already named is not named again);
    ``unknown format`` gives its extensions' counts."""
    groups: dict[str, list[str]] = {}
    for path in _outermost(skipped):
        groups.setdefault(_group(skipped[path]), []).append(path)
    out = []
    for group, paths in sorted(groups.items(), key=lambda kv: (-_files(kv[1], sizes), kv[0])):
        files = _files(paths, sizes)
        plus = "+" if any(sizes.get(p, [0])[0] >= MAX_COUNTED_FILES for p in paths) else ""
        head = f"skipped {files:,}{plus} file{'' if files == 1 else 's'}, {group}"
        if group == "unknown format":
            head += f" ({_extensions(paths, skipped)})"
        ordered = sorted(paths, key=lambda p: (-sizes.get(p, [1])[0], p))
        shown = [_named(p, sizes) for p in ordered[:SHOWN_PATHS]]
        more = len(paths) - SHOWN_PATHS
        out.append(f"{head}: {', '.join(shown)}" + (f" and {more:,} more" if more > 0 else ""))
    return out


def _outermost(skipped: dict[str, str]) -> list[str]:
    """The paths of ``skipped`` that lie in no skipped folder (git names both ``.cache/`` and a
    ``.cache/.gitignore`` inside it)."""
    folders = {p for p in skipped if p.endswith("/")}
    return [p for p in skipped if not any(f in folders for f in _parents(p))]


def _parents(path: str) -> list[str]:
    """The folders above ``path``, each ending with ``/``: ``a/b/c`` → ``a/``, ``a/b/``."""
    parts = path.rstrip("/").split("/")
    return ["/".join(parts[:i]) + "/" for i in range(1, len(parts))]


def _files(paths: list[str], sizes: dict[str, list[int]]) -> int:
    """Files named by ``paths``: a folder's counted files, 1 for a file."""
    return sum(sizes[p][0] if p in sizes else 1 for p in paths)


def _named(path: str, sizes: dict[str, list[int]]) -> str:
    if path not in sizes:
        return path
    files, size = sizes[path]
    plus = "+" if files >= MAX_COUNTED_FILES else ""
    return f"{path} ({files:,}{plus} file{'' if files == 1 else 's'}, {_mb(size)})"


def _extensions(paths: list[str], skipped: dict[str, str]) -> str:
    """``.png 80, .svg 30``: the unknown formats' extensions, most first (at most 8)."""
    counts: dict[str, int] = {}
    for p in paths:
        ext = skipped[p].split(" (", 1)[1].rstrip(")")
        counts[ext] = counts.get(ext, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{e} {n:,}" for e, n in top[:8]) + (f", {len(top) - 8} more" if len(top) > 8 else "")
