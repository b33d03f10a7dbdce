"""Locks that hold across machines: a lease object that changes hands only by conditional puts.

A data folder on object storage is shared by workers on many machines, where ``fcntl`` locks
mean nothing.  :func:`object_lease` takes ``locks/<name>.lease``:

* **Taking it.** A put-if-absent (``If-None-Match: *``) creates it; an existing one that is
  released (its holder wrote a release mark) or stale is taken with a put conditional on the
  version that was read (``If-Match: <ETag>``), so of two waiters exactly one gets it, and never
  by a delete (an unconditional delete let two waiters both in: the second one's delete landed
  after the first one's create).
* **Staleness by the store's versions, not by clocks.** A holder renews every :data:`RENEW_S`
  seconds, and each renewal is a new version (a new ETag).  A waiter takes the lease over when it
  has seen the *same* version for :data:`STALE_S` seconds of its own monotonic clock; no clock of
  another machine is read (a waiter whose clock ran 91 s ahead took every live lease before).
* **Fencing.** Each renewal is a put conditional on the holder's last version: when it is refused
  the lease was taken over, and the holder's :class:`Lease` is lost.  A holder that could not
  renew for half of :data:`STALE_S` (a slow store, a paused process) counts itself lost too, before
  any waiter may take the lease over.  Every commit made under a lease (a stage file, a LanceDB
  write, a BM25 publish) first calls :meth:`Lease.check`, which raises :class:`LeaseLost`: a
  paused holder that wakes up after being taken over stops before writing.
* **Releasing it.** The renewal thread is stopped and joined, then the release mark is written
  conditionally on the holder's version: a renewal still in flight cannot re-create a released
  lease (it is conditional too), and a waiter takes a released lease at once.

The store client used for leases retries for at most :data:`LEASE_RETRY_S` seconds, well under
``STALE_S / 2``.

Constants
---------
* ``RENEW_S = 15``, ``STALE_S = 90``: five renewals may fail before the holder stops itself (45 s)
  and a waiter needs 90 s of the same version before it takes over.  A worker killed mid-run
  holds its documents for 90 s after a waiter first looks.
* ``POLL_S = 2``: a waiter's poll interval (one GET each).

``SITUATE_LEASE_STALE_S`` overrides ``STALE_S`` (seconds; keep it several times ``RENEW_S``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

from situate.resources.errors import LeaseLost  # noqa: F401  (importable from here as before)
from situate.resources.settings import read_settings

RENEW_S = 15.0
STALE_S = 90.0
POLL_S = 2.0
#: Longest a lease's store request retries, in seconds (one retry of at most 10 s each way).
LEASE_RETRY_S = 20.0

_HELD = threading.local()


def _body(owner: str) -> bytes:
    return json.dumps(
        {"owner": owner, "host": socket.gethostname(), "pid": os.getpid(), "renewed_at": time.time()}
    ).encode()


RELEASED = json.dumps({"owner": None, "released": True}).encode()


def stale_after_s() -> float:
    """Seconds of one unchanged version after which a waiter takes a lease for its dead holder's:
    ``SITUATE_LEASE_STALE_S`` or :data:`STALE_S`."""
    return read_settings().lease_stale_s


def _parse(raw: bytes) -> dict:
    try:
        state = json.loads(raw)
        if not isinstance(state, dict):
            raise ValueError
    except ValueError:  # a damaged lease: nobody can renew it; taken over as released
        return {"owner": None, "released": True}
    return state


def lease_state(folder, rel: str, now: float | None = None) -> dict | None:
    """The lease's JSON with ``"stale"`` added (advisory: the holder's last renewal time as the
    holder's clock wrote it, for reports such as :func:`lease_busy`; never used to take a lease
    over), or None when nobody holds it (absent or released)."""
    raw = folder.get(rel)
    if raw is None:
        return None
    state = _parse(raw)
    if state.get("released"):
        return None
    try:
        renewed = float(state["renewed_at"])
    except (KeyError, TypeError, ValueError):
        return {**state, "stale": True}
    state["stale"] = (now or time.time()) - renewed > stale_after_s()
    return state


class Lease:
    """A held lease: its owner id and the version (ETag) its holder last wrote.

    Attributes
    ----------
    owner : str
        Random hex id of this holder.
    rel : str
        The lease object's path in its folder.
    """

    def __init__(self, folder, rel: str, owner: str, etag: str, stale_s: float):
        self.folder, self.rel, self.owner, self.etag = folder, rel, owner, etag
        self.stale_s = stale_s
        self.renewed = time.monotonic()
        self.lost = threading.Event()
        self.reason = ""
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless this holder still holds the lease: not taken over, and
        renewed within the last half of the stale time.  Call before every commit."""
        if not self.lost.is_set() and time.monotonic() - self.renewed > self.stale_s / 2:
            self.reason = f"not renewed for {time.monotonic() - self.renewed:.0f} s (over half of {self.stale_s:.0f} s)"
            self.lost.set()
        if self.lost.is_set():
            raise LeaseLost(f"lease {self.rel} lost: {self.reason}; stopped before writing")

    def renew(self) -> None:
        """One renewal: a new version, conditional on the last one (lost when refused)."""
        with self._lock:
            if self.lost.is_set():
                return
            new = self.folder.replace_if(self.rel, _body(self.owner), self.etag)
            if new is None:
                self.reason = "taken over by another worker (its version changed)"
                self.lost.set()
                return
            self.etag, self.renewed = new, time.monotonic()

    def release(self) -> None:
        """Write the release mark, conditional on this holder's version."""
        with self._lock:
            if not self.lost.is_set():
                self.folder.replace_if(self.rel, RELEASED, self.etag)
            self.lost.set()
            self.reason = "released"


def current_lease(rel_suffix: str = "") -> Lease | None:
    """The innermost lease this thread holds (whose path ends with ``rel_suffix``), if any."""
    for lease in reversed(getattr(_HELD, "stack", [])):
        if lease.rel.endswith(rel_suffix):
            return lease
    return None


def check_held(rel_suffix: str = "") -> None:
    """:meth:`Lease.check` of the lease this thread holds for ``rel_suffix``; nothing when it
    holds none (a local data folder: ``fcntl`` locks need no fencing)."""
    lease = current_lease(rel_suffix)
    if lease is not None:
        lease.check()


def _lease_folder(folder):
    """The folder's store with a retry time under half the stale time (:data:`LEASE_RETRY_S`)."""
    from situate.resources.store.objects import ObjectFolder

    if isinstance(folder, ObjectFolder):
        return ObjectFolder(folder.uri, retries=1, timeout_s=LEASE_RETRY_S / 2)
    return folder


@contextlib.contextmanager
def object_lease(
    folder, rel: str, on_wait: Callable[[], None] | None = None, poll_s: float = POLL_S, renew_s: float | None = None
) -> Iterator[str]:
    """Hold the lease ``rel`` of ``folder`` (:class:`situate.resources.store.objects.ObjectFolder`) for the block.

    Yields the owner id (a random hex string); :func:`check_held` in the block raises
    :class:`LeaseLost` once the lease is lost.  ``on_wait`` is called once when another live holder
    has it, before waiting.

    Raises
    ------
    situate.resources.store.objects.StoreUnavailable
        The store failed while taking the lease.
    """
    folder = _lease_folder(folder)
    owner = uuid.uuid4().hex
    stale_s = stale_after_s()
    renew_s = renew_s if renew_s is not None else min(RENEW_S, stale_s / 6)
    told = False
    seen, seen_since = None, 0.0
    while True:
        etag = folder.create_versioned(rel, _body(owner))
        if etag is not None:
            break
        got = folder.get_versioned(rel)
        if got is None:
            continue  # gone meanwhile: try to create it again at once
        raw, version = got
        if version != seen:
            seen, seen_since = version, time.monotonic()
        if _parse(raw).get("released") or time.monotonic() - seen_since > stale_s:
            etag = folder.replace_if(rel, _body(owner), version)
            if etag is not None:
                break
            continue  # another waiter took it first: look again
        if not told and on_wait is not None:
            on_wait()
            told = True
        time.sleep(poll_s)
    lease = Lease(folder, rel, owner, etag, stale_s)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(renew_s) and not lease.lost.is_set():
            with contextlib.suppress(Exception):  # a failed request: the next tick tries again
                lease.renew()

    thread = threading.Thread(target=renew, name=f"lease {rel}", daemon=True)
    thread.start()
    stack = _HELD.__dict__.setdefault("stack", [])
    stack.append(lease)
    try:
        yield owner
    finally:
        stack.remove(lease)
        stop.set()
        thread.join(timeout=LEASE_RETRY_S + 5)
        with contextlib.suppress(Exception):
            lease.release()


def lease_busy(folder, rel: str) -> bool:
    """Whether a holder has the lease now and renewed it recently by its own clock (advisory:
    for reports and scheduling, never for mutual exclusion)."""
    state = lease_state(folder, rel)
    return state is not None and not state["stale"]
