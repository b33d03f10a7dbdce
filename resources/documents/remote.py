"""A docs source on object storage: the documents under an ``s3://``, ``gs://`` or ``az://``
prefix, read through the same object-store layer as the data folder
(:class:`situate.resources.store.objects.ObjectFolder`, credentials from the environment).

A document's version is the ETag its listing gives (``etag:<ETag>``), so the sensor notices a new,
changed or removed object by listing the prefix, with no download; the document is downloaded when
its ``raw_documents`` step reads it.  The local folder's rules hold: hidden files and tool folders
are skipped, as are files of no known format; an object over
:data:`situate.resources.documents.reading.MAX_FILE_BYTES` is listed and fails alone, named, when
read; an emptied prefix is a mass removal the sync holds (:func:`situate.pipelines.sync.removal_held`).
A corpus file (the cookbook's JSON form) is read as one document here, not as its documents.

Examples
--------
>>> from situate.resources.documents.remote import version_of
>>> version_of({"path": "guide.md", "size": 120, "e_tag": '"9b2cf535f27731c974343645a3985328"'})
'etag:9b2cf535f27731c974343645a3985328'
"""

from __future__ import annotations

from pathlib import PurePosixPath

from situate.resources.documents.keys import PartitionKeyError, check_key, encode_key
from situate.resources.documents.reading import MAX_FILE_BYTES, SKIP_DIRS, SourceRef, format_of
from situate.resources.errors import DocumentError
from situate.resources.store.objects import ObjectChanged, ObjectFolder, ObjectTooLarge


def version_of(meta: dict) -> str:
    """A listed object's version: ``etag:<ETag>`` (quotes removed), else ``size:<bytes>`` where the
    store gives no ETag."""
    etag = str(meta.get("e_tag") or "").strip('"')
    return f"etag:{etag}" if etag else f"size:{meta['size']}"


def _is_document(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    if not parts or parts[-1].startswith("."):
        return False
    if any(p.startswith(".") or p in SKIP_DIRS for p in parts[:-1]):
        return False
    return format_of(PurePosixPath(rel)) is not None


def discover_objects(uri: str, skipped: list[str] | None = None) -> list[SourceRef]:
    """Every document under the prefix ``uri``, sorted by source (its path under the prefix).

    An object whose key the object store client cannot address (``notes/../x.md``, ``a//b.md``, a
    control character: :func:`situate.resources.store.objects.odd_key`) is left out, and named in
    ``skipped`` when given (one line each, control characters escaped); the others are listed.

    Raises
    ------
    situate.resources.errors.StoreUnavailable
        The store cannot be listed (unreachable, refused credentials, missing bucket).
    """
    folder = ObjectFolder(uri)
    odd: list[tuple[str, str]] = []
    refs = [
        SourceRef(encode_key(m["path"]), m["path"], folder.child(m["path"]), version_of(m))
        for m in folder.list_objects(odd=odd)
        if _is_document(m["path"])
    ]
    if skipped is not None:
        skipped += [
            f"object {rel!r} under {folder.uri} skipped: its key has {why}, which the object "
            "store client cannot read (rename it)"
            for rel, why in odd
        ]
    return refs


def resolve_object(uri: str, key: str) -> SourceRef:
    """The document behind partition key ``key`` under the prefix ``uri``, as the store has it now.

    Raises
    ------
    DocumentError
        The key is malformed, names no document of a known format, or its object is gone.
    situate.resources.errors.StoreUnavailable
        The store cannot be reached.
    """
    try:
        source = check_key(key)
    except PartitionKeyError as e:
        raise DocumentError(key, str(e)) from None
    if not _is_document(source):
        raise DocumentError(source, "not a document situate reads (hidden, a tool folder, or an unknown format)")
    folder = ObjectFolder(uri)
    meta = folder.head(source)
    if meta is None:
        raise DocumentError(source, f"no object under {folder.uri}")
    return SourceRef(encode_key(source), source, folder.child(source), version_of({"size": meta["size"], **meta}))


def read_object(ref: SourceRef) -> bytes:
    """The bytes of the object behind ``ref`` (``ref.path`` its URI), at most
    :data:`~situate.resources.documents.reading.MAX_FILE_BYTES`.

    The bytes are those of the version ``ref`` records (``etag:<ETag>``): the GET asks for it
    (``If-Match``) and its answer's ETag is checked, so the version recorded is the one read.

    Raises
    ------
    DocumentError
        The object is gone, larger than the bound (its HEAD's size, and the GET's body, read in
        pieces and dropped past the bound, whatever the HEAD said), or no longer the version
        ``ref`` records (replaced since it was listed: the next sync reads the new one).
    situate.resources.errors.StoreUnavailable
        The store cannot be reached.
    """
    prefix = ref.path[: -len(ref.source)].rstrip("/")
    folder = ObjectFolder(prefix)
    meta = folder.head(ref.source)
    if meta is None:
        raise DocumentError(ref.source, f"no object under {folder.uri}")
    if meta["size"] > MAX_FILE_BYTES:
        raise DocumentError(ref.source, f"too large ({meta['size']:,} bytes > {MAX_FILE_BYTES:,})")
    want = ref.sha256[len("etag:") :] if ref.sha256.startswith("etag:") else ""
    if want and meta["e_tag"].strip('"') != want:
        raise DocumentError(ref.source, f"changed since it was listed (ETag {meta['e_tag'].strip(chr(34))[:80]})")
    try:
        data = folder.get_bounded(ref.source, MAX_FILE_BYTES, meta["e_tag"] if want else "")
    except ObjectTooLarge as e:
        raise DocumentError(ref.source, f"too large: {e} (the bound, MAX_FILE_BYTES, is {MAX_FILE_BYTES:,})") from None
    except ObjectChanged as e:
        raise DocumentError(ref.source, f"changed while it was read ({e}): the next sync reads it again") from None
    if data is None:
        raise DocumentError(ref.source, f"no object under {folder.uri}")
    return data
