"""Blurb files: a corpus's blurbs as compressed JSON lines, so a Quality table is re-run with no
LLM call.

``situate eval --save-blurbs FILE`` writes one line per chunk after an evaluation; ``situate eval
--blurbs FILE`` (``SITUATE_BLURBS_FILE`` for any ingest) takes each chunk's blurb from the file
when the file has one for the chunk's text in the same version of its document, made by the same
model file in the same mode, and lets the model make the rest.  What the model wrote (``raw``) is
kept, and cleaning and grounding run again on it, exactly as on a blurb-cache hit or a new answer.

Line format (one JSON object a line, gzip)::

    {"chunk_id", "doc_id", "text_sha256", "doc_sha256", "mode", "model_sha256", "raw", "blurb", "status"}

``mode`` is ``chunk:<prompt name>``, ``document`` or ``structure``; ``model_sha256`` the LLM
file's sha256 (empty for ``structure``).

A blurb file is untrusted input: it may come from another machine, a pull request or an attacker.
:func:`read` bounds it (:data:`MAX_FILE_BYTES` compressed, :data:`MAX_DECOMPRESSED_BYTES`
decompressed, :data:`MAX_LINE_BYTES` a line), streams it line by line, and keeps only the ``raw``
text of the lines it is asked for, so its memory is bounded by the lines a run uses, never by the
file.  A file that is not gzip, not UTF-8, truncated or over a bound is refused with one
:class:`BlurbFileError` naming the file and the line; a line that is not a blurb line (not JSON,
a missing or non-string field, a malformed sha256 or mode, an empty ``raw`` where a model should
have written one, text over :data:`MAX_RAW_CHARS`) is rejected alone, counted and named
(:attr:`BlurbFile.rejected`), and its chunk is made by the model.  The text kept is then cleaned and
grounded like any model answer, instruction-like sentences included
(:func:`situate.contextual.cleaning.clean_blurb`, problem tag ``instruction``).
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import zlib
from pathlib import Path

from situate.resources.errors import BlurbFileError  # noqa: F401  (importable from here as before)

FIELDS = ("chunk_id", "doc_id", "text_sha256", "doc_sha256", "mode", "model_sha256", "raw", "blurb", "status")

#: Largest blurb file read, compressed: 64 MiB.  The committed files hold 737 chunks in 80 KB
#: (``benchmarks/blurbs/``, about 110 bytes a chunk), so 64 MiB is about 600,000 chunks.
MAX_FILE_BYTES = 64 * 2**20
#: Largest decompressed size read: 256 MiB.  The committed files are about 1.1 KB a chunk
#: decompressed, so this holds about 240,000 chunks; a gzip bomb stops here, not in memory.
MAX_DECOMPRESSED_BYTES = 256 * 2**20
#: Longest line: 256 KiB.  A line is ``raw`` (at most :data:`MAX_RAW_CHARS`, up to 4 UTF-8 bytes
#: a character) plus the cleaned blurb and eight short fields.
MAX_LINE_BYTES = 256 * 2**10
#: Longest ``raw``, ``blurb``, ``status``, ``chunk_id`` or ``doc_id``: 32,000 characters.  The
#: longest raw in the committed files is 521 characters (80 generated tokens); 32,000 leaves room
#: for a reasoning model's thinking at ``SITUATE_MAX_TOKENS`` 8,192 (about 4 characters a token).
MAX_RAW_CHARS = 32_000
#: Rejected lines named in :attr:`BlurbFile.rejections` (the count covers them all).
MAX_NAMED_REJECTIONS = 20

_SHA256 = re.compile(r"[0-9a-f]{64}")
_MODE = re.compile(r"document|structure|chunk:[a-z0-9][a-z0-9-]{0,63}")


@dataclasses.dataclass
class BlurbFile:
    """What :func:`read` took from a blurb file.

    Attributes
    ----------
    path : str
    raws : dict
        ``{(mode, model sha256, document sha256, text sha256): (start, end)}``: where in
        :attr:`text` the model's answer for a chunk is, found by its own document's version and
        its text (the same text in two documents, a licence header say, has a line for each);
        the first line wins.
    text : bytearray
        Every kept raw answer, UTF-8, one after another: one buffer, so a line's memory is its
        size in the file whatever its characters (a Python ``str`` holding one character outside
        the BMP takes 4 bytes for every character) and the read leaves no holes in the heap.
    lines : int
        Non-blank lines read.
    rejected : int
        Lines rejected (not a blurb line); their chunks are made by the model.
    rejections : list of str
        The first :data:`MAX_NAMED_REJECTIONS` rejections, each ``"line N: reason"``.
    sha256 : str
        sha256 hex of the file as read (its compressed bytes): what a blurb taken from it records
        as its source (:attr:`situate.contextual.contextualize.BlurbRecord.from_file`).
    """

    path: str
    raws: dict[tuple[str, str, str, str], tuple[int, int]] = dataclasses.field(default_factory=dict)
    text: bytearray = dataclasses.field(default_factory=bytearray, repr=False)
    lines: int = 0
    rejected: int = 0
    rejections: list[str] = dataclasses.field(default_factory=list)
    sha256: str = ""

    def get(self, mode: str, model_sha256: str, doc_sha256: str, text_sha256: str) -> str | None:
        """The raw text for a chunk, or ``None``."""
        at = self.raws.get((mode, model_sha256, doc_sha256, text_sha256))
        return None if at is None else self.text[at[0] : at[1]].decode("utf-8")

    def __len__(self) -> int:
        return len(self.raws)

    def summary(self) -> dict:
        """Figures for a run's metadata: lines read, used, rejected and the first reasons."""
        return {
            "blurb_file_lines": self.lines,
            "blurb_file_lines_kept": len(self.raws),
            "blurb_file_lines_rejected": self.rejected,
            "blurb_file_rejections": "; ".join(self.rejections) or "none",
        }


def write(path: str | Path, lines: list[dict]) -> int:
    """Write ``lines`` (dicts with :data:`FIELDS`) to ``path`` as gzip JSON lines, sorted by chunk
    id with a fixed gzip time, so the same blurbs give the same bytes.  The file is written under a
    temporary name in the same folder and renamed into place, so a reader never sees half a file
    and an interrupted write leaves the old one.  Returns the line count."""
    lines = sorted(lines, key=lambda d: (d["chunk_id"], d["mode"]))
    data = "".join(
        json.dumps({k: d.get(k, "") for k in FIELDS}, ensure_ascii=False, sort_keys=True) + "\n" for d in lines
    ).encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
                z.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(lines)


def check_line(d: object) -> str:
    """Why ``d`` (a parsed JSON line) is not a blurb line, or ``""`` when it is one.

    A blurb line is an object whose :data:`FIELDS` are all strings of at most
    :data:`MAX_RAW_CHARS` characters; ``text_sha256`` and ``doc_sha256`` are sha256 hex (64
    lowercase hex digits); ``mode`` is ``document``, ``structure`` or ``chunk:<prompt name>``;
    outside ``structure`` mode, ``model_sha256`` is sha256 hex and ``raw`` is not empty (a line
    with nothing the model wrote is not a blurb: its chunk goes to the model).
    """
    if not isinstance(d, dict):
        return f"a JSON {type(d).__name__}, not an object"
    missing = [k for k in FIELDS if k not in d]
    if missing:
        return "missing field(s) " + ", ".join(missing)
    for k in FIELDS:
        if not isinstance(d[k], str):
            return f"{k} is a JSON {type(d[k]).__name__ if d[k] is not None else 'null'}, not a string"
        if len(d[k]) > MAX_RAW_CHARS:
            return f"{k} is {len(d[k]):,} characters, over {MAX_RAW_CHARS:,}"
        try:
            d[k].encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800) from a JSON escape
            return f"{k} is not valid Unicode (a lone surrogate)"
    if not _MODE.fullmatch(d["mode"]):
        return f"mode {d['mode'][:40]!r} is not document, structure or chunk:<prompt>"
    for k in ("text_sha256", "doc_sha256") + (("model_sha256",) if d["mode"] != "structure" else ()):
        if not _SHA256.fullmatch(d[k]):
            return f"{k} {d[k][:70]!r} is not a sha256 (64 lowercase hex digits)"
    if d["mode"] != "structure" and not d["raw"].strip():
        return "raw is empty: no model answer to use"
    return ""


def _lines(path: str, z) -> collections.abc.Iterator[tuple[int, bytes | None]]:
    """``(line number, bytes)`` of a gzip stream, within the bounds; ``bytes`` is ``None`` for a
    line over :data:`MAX_LINE_BYTES` (read past, not kept)."""
    total, n = 0, 0
    while True:
        n += 1
        try:
            line = z.readline(MAX_LINE_BYTES + 1)
            long = len(line) > MAX_LINE_BYTES and not line.endswith(b"\n")
            while long:  # read past the rest of the line, keeping none of it
                more = z.readline(MAX_LINE_BYTES)
                total += len(more)
                if total > MAX_DECOMPRESSED_BYTES or not more or more.endswith(b"\n"):
                    break
        except EOFError:
            raise BlurbFileError(f"blurb file {path}, line {n}: truncated (the gzip stream ends early)") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise BlurbFileError(f"blurb file {path}, line {n}: not a readable gzip file ({e})") from None
        if not line:
            return
        total += len(line)
        if total > MAX_DECOMPRESSED_BYTES:
            raise BlurbFileError(
                f"blurb file {path}, line {n}: over {MAX_DECOMPRESSED_BYTES:,} bytes "
                "decompressed (MAX_DECOMPRESSED_BYTES); not read further"
            )
        yield n, (None if long else line)


def _open_regular(path: str | Path):
    """``path`` opened for reading if it is a regular file within :data:`MAX_FILE_BYTES`.  It is
    opened without blocking and checked on the open file, so a FIFO or a device never hangs the
    run and a file swapped after the check is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise BlurbFileError(f"blurb file {path}: no such file") from None
    except OSError as e:
        raise BlurbFileError(f"blurb file {path}: cannot be opened ({e.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "a device"
        )
        raise BlurbFileError(f"blurb file {path}: {what}, not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise BlurbFileError(f"blurb file {path}: {st.st_size:,} bytes, over {MAX_FILE_BYTES:,} (MAX_FILE_BYTES)")
    return os.fdopen(fd, "rb")


def read(path: str | Path, mode: str | None = None, model_sha256: str | None = None) -> BlurbFile:
    """Read a blurb file within its bounds, keeping the raw text of the lines a run can use.

    Parameters
    ----------
    path : str or Path
    mode : str, optional
        Keep only lines of this mode (``document``, ``chunk:<prompt>``); ``None`` keeps all.
    model_sha256 : str, optional
        Keep only lines of this LLM file; ``None`` keeps all.  Every line is checked either way;
        what is kept is the ``raw`` text only, UTF-8 in one buffer (:attr:`BlurbFile.text`):
        at most :data:`MAX_DECOMPRESSED_BYTES` of text, plus about 250 bytes of key and dict
        entry a kept line (a line is at least 300 bytes: three sha256 and the field names), so a
        read's memory stays within :data:`MAX_DECOMPRESSED_BYTES` plus its lines' keys, whatever
        their characters (``benchmarks/blurb_file_bounds.py`` measures it).

    Returns
    -------
    BlurbFile

    Raises
    ------
    BlurbFileError
        No such file, or not a regular file (a directory, FIFO, socket or device); over
        :data:`MAX_FILE_BYTES` compressed or :data:`MAX_DECOMPRESSED_BYTES`
        decompressed; not gzip, truncated, or a line not UTF-8 (the message names the file and
        the line).
    """
    out = BlurbFile(str(path))

    def reject(n: int, why: str) -> None:
        out.rejected += 1
        if len(out.rejections) < MAX_NAMED_REJECTIONS:
            out.rejections.append(f"line {n}: {why}")

    with _open_regular(path) as f, gzip.GzipFile(fileobj=f, mode="rb") as z:
        for n, line in _lines(str(path), z):
            if line is None:
                reject(n, f"over {MAX_LINE_BYTES:,} bytes")
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise BlurbFileError(f"blurb file {path}, line {n}: not UTF-8 (byte {e.start} of the line)") from None
            if not text.strip():
                continue
            out.lines += 1
            try:
                d = json.loads(text)
            except (ValueError, RecursionError) as e:  # RecursionError: nesting within the line bound
                reject(n, f"not JSON ({type(e).__name__}: {str(e)[:80]})")
                continue
            why = check_line(d)
            if why:
                reject(n, why)
                continue
            if mode in (None, d["mode"]) and model_sha256 in (None, d["model_sha256"]):
                # the mode, model and document are shared by many lines: one copy each
                key = (
                    sys.intern(d["mode"]),
                    sys.intern(d["model_sha256"]),
                    sys.intern(d["doc_sha256"]),
                    d["text_sha256"],
                )
                if key not in out.raws:
                    start = len(out.text)
                    out.text += d["raw"].encode("utf-8")
                    out.raws[key] = (start, len(out.text))
        f.seek(0)
        h = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
        out.sha256 = h.hexdigest()
    return out


def stage_lines(stage: dict, doc_id: str, model_sha256: str) -> list[dict]:
    """The lines of one document's ``blurbs`` stage (records written by :mod:`situate.contextual.document_blurbs`).

    Only what a model wrote is exported: outside ``structure`` mode a record with no raw text (a
    fallback no model made, such as ``fallback:n_ctx``) is left out, so loading the file sends that
    chunk to the model instead of repeating the fallback.  A blurb the run took from a blurb file
    keeps that provenance: its line's status is ``file``, not ``model``.  Every line carries the
    stage's document version (``doc_sha256``): a blurb kept across an edit was checked again
    against that version (:mod:`situate.contextual.document_blurbs`), and is found again under it.
    """
    out = []
    version = stage.get("doc_sha256", "")
    for r in stage.get("blurbs", []):
        mode = r.get("mode", "")
        if not r.get("text_sha256") or (mode != "structure" and not r.get("raw")):
            continue
        out.append(
            {
                "chunk_id": r["chunk_id"],
                "doc_id": doc_id,
                "text_sha256": r["text_sha256"],
                "doc_sha256": version or r.get("doc_sha256", ""),
                "mode": mode,
                "model_sha256": "" if mode == "structure" else model_sha256,
                "raw": r.get("raw", ""),
                "blurb": r.get("blurb", ""),
                "status": "file" if r.get("from_file") and r.get("status") == "model" else r.get("status", ""),
            }
        )
    return out
