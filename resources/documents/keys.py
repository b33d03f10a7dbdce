"""Partition keys of documents: the reversible path <-> key encoding, and the check every key that
comes back from the Dagster instance must pass before it names a file.

Dagster partition keys must not contain ``...`` or control characters, and commas and ``|`` break
selection and backfills in the UI (shared/DAGSTER.md), so a key uses only ``[A-Za-z0-9._-]``.
The encoding is deterministic and reversible, so a key maps back to its source without any state:

* ``A-Z a-z 0-9 -`` stand for themselves; ``.`` too, unless it follows a ``.`` (no ``..``/``...``)
  or is the first or last character (so ``first...last`` of ``--partition-range`` splits one way);
* ``_`` is the escape character: ``__`` is ``_``, ``_.`` is ``/``, ``_HH`` is one UTF-8 byte in hex.

Dagster does not validate dynamic partition keys (the UI's "Add partition" takes ``../x``), so
:func:`check_key` accepts a key only when it is exactly what :func:`encode_key` makes of a relative
path with no ``..``, ``.`` or empty part.

Examples
--------
>>> encode_key("docs/getting_started.md")
'docs_.getting__started.md'
>>> decode_key("docs_.getting__started.md")
'docs/getting_started.md'
>>> encode_key("codebase_chunks.json#doc_70")
'codebase__chunks.json_23doc__70'
>>> check_key("docs_.getting__started.md")
'docs/getting_started.md'
"""

from __future__ import annotations

import re

from situate.resources.documents.listing import is_secret_name
from situate.resources.errors import PartitionKeyError  # noqa: F401  (importable from here as before)

_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
KEY_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")


def encode_key(source: str) -> str:
    """Encode a document's source (a relative path, or ``file#doc_id``) as a partition key.

    Parameters
    ----------
    source : str
        Non-empty; any Unicode.

    Returns
    -------
    str
        Matches ``[A-Za-z0-9._-]+``, never contains ``..`` and neither starts nor ends with ``.``.

    Raises
    ------
    PartitionKeyError
        ``source`` is empty.
    """
    if not source:
        raise PartitionKeyError("empty source path")
    out: list[str] = []
    last = len(source) - 1
    for i, ch in enumerate(source):
        if ch in _PLAIN:
            out.append(ch)
        elif ch == ".":
            # never "..", and never a "." at either end: a range "a....b" would be ambiguous
            out.append("_2E" if i in (0, last) or (out and out[-1].endswith(".")) else ".")
        elif ch == "_":
            out.append("__")
        elif ch == "/":
            out.append("_.")
        else:
            out.extend(f"_{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def decode_key(key: str) -> str:
    """Inverse of :func:`encode_key`.

    Raises
    ------
    PartitionKeyError
        ``key`` has characters outside ``[A-Za-z0-9._-]``, a malformed escape, or bytes that are
        not UTF-8.
    """
    if not KEY_PATTERN.match(key):
        raise PartitionKeyError(f"partition key {key!r} has characters outside [A-Za-z0-9._-]")
    raw = bytearray()
    i = 0
    while i < len(key):
        ch = key[i]
        if ch != "_":
            raw += ch.encode()
            i += 1
            continue
        nxt = key[i + 1 : i + 2]
        if nxt == "_":
            raw += b"_"
            i += 2
        elif nxt == ".":
            raw += b"/"
            i += 2
        else:
            pair = key[i + 1 : i + 3]
            if len(pair) != 2 or not all(c in "0123456789ABCDEF" for c in pair):
                raise PartitionKeyError(f"partition key {key!r}: bad escape at {i}")
            raw.append(int(pair, 16))
            i += 3
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PartitionKeyError(f"partition key {key!r} decodes to invalid UTF-8") from e


def check_key(key: str) -> str:
    """The source path behind a partition key that came from outside (the instance, the UI).

    Returns
    -------
    str
        The relative source (``docs/a.md`` or ``corpus.json#doc_1``).

    Raises
    ------
    PartitionKeyError
        Not exactly :func:`encode_key` of its decoding (another spelling of the same path), or the
        path is absolute, has a ``..``, ``.`` or empty part, a backslash, or a control character,
        or names a file inside ``.git`` or one that may hold secrets (``.env``:
        :func:`situate.resources.documents.listing.is_secret_name`), which discovery never lists
        either.  (A hidden path such as ``.github/workflows/ci.yml`` passes here; the docs folder
        admits it only where its listing does: :meth:`situate.resources.documents.docs.DocsFolder.resolve`.)
    """
    if not isinstance(key, str) or not key:
        raise PartitionKeyError("empty partition key")
    source = decode_key(key)
    if encode_key(source) != key:
        raise PartitionKeyError(f"partition key {key!r} is not in the canonical form of {source!r}")
    file_part = source.rsplit("#", 1)[0] if "#" in source else source
    parts = source.split("/") + file_part.split("/")
    if (
        file_part.startswith("/")
        or "\\" in file_part
        or any(p in ("", ".", "..") for p in parts)
        or any(ord(c) < 32 or ord(c) == 127 for c in source)
    ):
        raise PartitionKeyError(f"partition key {key!r} names {source!r}, not a relative path inside the docs folder")
    names = file_part.split("/")
    if ".git" in names or any(is_secret_name(p) for p in names):
        raise PartitionKeyError(
            f"partition key {key!r} names {file_part!r}, inside .git or a file that may hold secrets, "
            "which discovery never lists: it is never read"
        )
    return source
