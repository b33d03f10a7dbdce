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
from situate.resources.store.objects import ObjectFolder


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


def discover_objects(uri: str) -> list[SourceRef]:
    """Every document under the prefix ``uri``, sorted by source (its path under the prefix).

    Raises
    ------
    situate.resources.errors.StoreUnavailable
        The store cannot be listed (unreachable, refused credentials, missing bucket).
    """
    folder = ObjectFolder(uri)
    return [
        SourceRef(encode_key(m["path"]), m["path"], folder.child(m["path"]), version_of(m))
        for m in folder.list_objects()
        if _is_document(m["path"])
    ]


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

    Raises
    ------
    DocumentError
        The object is gone, or larger than the bound (checked before it is downloaded).
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
    data = folder.get(ref.source)
    if data is None:
        raise DocumentError(ref.source, f"no object under {folder.uri}")
    return data
