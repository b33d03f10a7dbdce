"""Reading a file under a folder without following symbolic links, whatever changed since listing.

Discovery skips symbolic links, but a file (or one of its folders) can be swapped for a link
between the listing and the read.  :func:`read_under` opens each path component relative to its
parent's file descriptor with ``O_NOFOLLOW`` (``openat``), so a link anywhere under the folder
is refused at the moment of reading, not only when the folder was listed.

>>> import pathlib, tempfile
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "notes.md").write_text("# Notes")
7
>>> read_under(root, ["notes.md"])
b'# Notes'
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from situate.resources.errors import LinkRefused, TooLarge  # noqa: F401  (importable from here as before)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO swapped in must not block the open
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def read_under(root: str | Path, parts: Sequence[str], limit: int | None = None) -> bytes:
    """The bytes of the regular file ``root/parts[0]/…/parts[-1]``, following no link below ``root``.

    Parameters
    ----------
    root : str or Path
        The folder the file must lie in (itself may be reached through links: the user chose it).
    parts : sequence of str
        The file's path components below ``root``, at least one; none may be ``..`` or empty.
    limit : int, optional
        Largest size read, in bytes; a larger file raises :class:`TooLarge` before any byte is read.

    Returns
    -------
    bytes
        The file's content (read from the opened descriptor, so it is the file that was checked).

    Raises
    ------
    LinkRefused
        A component is a symbolic link, or the file is not a regular file.
    TooLarge
        The file is larger than ``limit`` bytes.
    OSError
        The file or a folder is missing or unreadable (``FileNotFoundError``, ``PermissionError``...).
    ValueError
        ``parts`` is empty or has a ``..``, ``.``, empty or ``/``-bearing component.
    """
    if not parts or any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
        raise ValueError(f"not a relative path below the folder: {list(parts)!r}")
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | _NOFOLLOW | _CLOEXEC | (_NONBLOCK if last else _DIRECTORY)
            try:
                nfd = os.open(part, flags, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.EMLINK) or (e.errno == errno.ENOTDIR and _is_link(part, fd)):
                    where = "/".join(parts[: i + 1])
                    raise LinkRefused(e.errno, f"{where} is a symbolic link: not followed") from None
                raise
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LinkRefused(errno.EINVAL, "not a regular file")
        if limit is not None and st.st_size > limit:
            raise TooLarge(st.st_size, limit)
        chunks, got = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
            got += len(b)
            if limit is not None and got > limit:  # grew while being read
                raise TooLarge(got, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def split_under(path: str | Path, n_parts: int) -> tuple[Path, list[str]]:
    """``path`` as (folder, its last ``n_parts`` components) for :func:`read_under`."""
    p = Path(path)
    return p.parents[n_parts - 1], list(p.parts[-n_parts:])
