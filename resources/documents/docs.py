"""The docs folder: where the documents are, and the chunking settings applied to them."""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

import dagster as dg

from situate.resources.documents.files import TooLarge, read_under
from situate.resources.documents.keys import PartitionKeyError, check_key, encode_key
from situate.resources.documents.listing import ListingRules, cached_listing
from situate.resources.documents.reading import (
    DUPLICATE_MARK,
    MAX_FILE_BYTES,
    DocumentError,
    SourceRef,
    corpus_entry_sha,
    corpus_index,
    discover,
)
from situate.resources.documents.remote import discover_objects, resolve_object
from situate.resources.store.objects import is_uri

#: Default largest chunk of prose and of source code, and the overlap of consecutive chunks, in
#: tiktoken ``cl100k_base`` tokens: chosen by cross-validation on the docs and codebase dev halves
#: re-chunked at 200, 300, 400 and 800 (``benchmarks/chunk_sizes.py``, report
#: ``benchmarks/reports/chunk-sizes.md``; docs/quality.md, "Chunks that fit the embedder"), where
#: 800 (the Contextual Retrieval blog's appendix) left 78-82% of chunks longer than the embedder's
#: 512-token window.  The overlap is a tenth of the code size (0 to 40 measured alike).
CHUNK_TOKENS = 300
CODE_CHUNK_TOKENS = 200
OVERLAP_TOKENS = 20


class DocsFolder(dg.ConfigurableResource):
    """The documents to ingest: a folder, one file (such as a cookbook-form corpus file), or a
    prefix on object storage (``s3://bucket/docs``: :mod:`situate.resources.documents.remote`).

    Attributes
    ----------
    path : str
        Folder, file or object-store URI (``SITUATE_DOCS``).
    include, exclude : str
        gitignore-syntax globs, separated by commas or new lines, that widen or narrow what git
        lists (``SITUATE_INCLUDE``, ``SITUATE_EXCLUDE``;
        :class:`situate.resources.documents.listing.ListingRules`).
    generated : str
        ``index`` or ``skip``: files ``.gitattributes`` marks generated or vendored
        (``SITUATE_GENERATED``).
    """

    path: str
    include: str = ""
    exclude: str = ""
    generated: str = "index"

    @property
    def rules(self) -> ListingRules:
        """The listing rules of these settings.

        Raises
        ------
        ValueError
            ``generated`` is not ``index`` or ``skip``.
        """
        return ListingRules(globs_of(self.include), globs_of(self.exclude), self.generated)

    @property
    def remote(self) -> bool:
        """Whether the documents are on object storage."""
        return is_uri(self.path)

    def exists(self) -> bool:
        """Whether the folder or file exists; a prefix on object storage always does (an empty one
        lists no document, which the sync holds as a mass removal)."""
        return self.remote or self.root.exists()

    def where(self) -> str:
        """The docs source as a person reads it: the absolute path, or the URI."""
        return self.path.rstrip("/") if self.remote else str(self.root)

    @property
    def root(self) -> Path:
        """The folder or file, absolute."""
        return Path(self.path).expanduser().resolve()

    @property
    def base(self) -> Path:
        """The folder sources are relative to."""
        return self.root.parent if self.root.is_file() else self.root

    def discover(self, skipped: list[str] | None = None, passed_over: dict[str, str] | None = None) -> list[SourceRef]:
        """Every document now present (see :func:`situate.resources.documents.reading.discover`,
        :func:`situate.resources.documents.remote.discover_objects`); an object of a docs source on
        object storage that cannot be read by its key is named in ``skipped`` when given, and a
        file of a folder that is not read is named in ``passed_over`` (path → why)."""
        if self.remote:
            return discover_objects(self.path, skipped)
        return discover(self.root, passed_over, self.rules)

    def resolve(self, key: str) -> SourceRef:
        """The document behind a partition key, read from disk now.

        Raises
        ------
        DocumentError
            The key is malformed or not canonical (:func:`situate.resources.documents.keys.check_key`), its path
            resolves outside the docs folder, or its file (or corpus entry) no longer exists.
        """
        if self.remote:
            return resolve_object(self.path, key)
        try:
            source = check_key(key)
        except PartitionKeyError as e:
            raise DocumentError(key, str(e)) from None
        # ``corpus.json#doc_id`` names a corpus entry; a "#" in a file's own name is part of it
        file_part, doc_id = source, ""
        if "#" in source and not (self.base / source).is_file():
            cuts = [i for i, ch in enumerate(source) if ch == "#"]
            at = next((i for i in cuts if (self.base / source[:i]).is_file()), cuts[0])
            file_part, doc_id = source[:at], source[at + 1 :]
        path = self.base / file_part
        try:
            inside = path.resolve().is_relative_to(self.base)
        except OSError:
            inside = False
        if not inside:  # a symbolic link out of the docs folder, or a key past it
            raise DocumentError(source, f"resolves outside the docs folder {self.base}")
        if not path.is_file():
            if "\ufffd" in file_part:
                raise DocumentError(source, "its file name is not valid UTF-8: rename the file")
            raise DocumentError(source, f"file not found under {self.base}")
        if doc_id and DUPLICATE_MARK in "#" + doc_id:  # named by discovery; it fails when loaded
            return SourceRef(encode_key(source), source, str(path), "duplicate", doc_id)
        parts = PurePosixPath(file_part).parts
        hidden = any(p.startswith(".") for p in parts) and not (self.root.is_file() and path == self.root)
        if hidden and file_part not in cached_listing(self.base, self.rules).files:
            raise DocumentError(
                source, "a hidden file the docs folder's listing does not hold (ignored or not tracked)"
            )
        if doc_id:
            st = path.stat()
            try:
                entry = corpus_index(str(path), st.st_size, st.st_mtime_ns, len(parts)).get(doc_id)
            except OSError as e:
                raise DocumentError(source, f"cannot read ({e.strerror or e})") from None
            if entry is None:
                raise DocumentError(source, f"no document {doc_id!r} in {file_part}")
            return SourceRef(encode_key(source), source, str(path), corpus_entry_sha(entry), doc_id)

        try:  # no link followed, even one swapped in since the check above
            data = read_under(self.base, parts, limit=MAX_FILE_BYTES)
        except TooLarge as e:
            raise DocumentError(source, str(e)) from None
        except OSError as e:
            raise DocumentError(source, f"cannot read ({e.strerror or e})") from None
        generated = None if self.root.is_file() else cached_listing(self.base, self.rules).generated.get(source)
        sha = hashlib.sha256(data).hexdigest()
        return SourceRef(encode_key(source), source, str(path), sha, generated=generated)


def globs_of(text: str) -> tuple[str, ...]:
    """The globs of an include or exclude setting: separated by commas or new lines, blanks
    stripped, empty ones dropped.

    >>> globs_of("htmlcov/, *.min.js\\n docs/_build/")
    ('htmlcov/', '*.min.js', 'docs/_build/')
    """
    return tuple(g.strip() for g in text.replace("\n", ",").split(",") if g.strip())


class Chunking(dg.ConfigurableResource):
    """Chunk size and overlap, in tiktoken ``cl100k_base`` tokens.

    Attributes
    ----------
    chunk_tokens : int
        Largest chunk of prose and any text that is not source code (default
        :data:`CHUNK_TOKENS`, 300).
    code_chunk_tokens : int
        Largest chunk of source code (default :data:`CODE_CHUNK_TOKENS`, 200).
    overlap_tokens : int
        Tokens shared by consecutive chunks (default :data:`OVERLAP_TOKENS`, 20).
    """

    chunk_tokens: int = CHUNK_TOKENS
    code_chunk_tokens: int = CODE_CHUNK_TOKENS
    overlap_tokens: int = OVERLAP_TOKENS

    def size_for(self, code: bool) -> int:
        """The largest chunk of a document, cl100k_base tokens: ``code_chunk_tokens`` for source
        code, else ``chunk_tokens``."""
        return self.code_chunk_tokens if code else self.chunk_tokens
