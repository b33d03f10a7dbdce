"""Locks that hold across machines: a lease object created by a conditional put.

A data folder on object storage is shared by workers on many machines, where ``fcntl`` locks
mean nothing.  :func:`object_lease` takes ``locks/<name>.lease`` with a put-if-absent
(``If-None-Match: *``), renews it every :data:`RENEW_S` seconds from a background thread while
the block runs, and deletes it at the end.  A waiter polls every :data:`POLL_S` seconds; a lease
not renewed for :data:`STALE_S` seconds belongs to a worker that died (``kill -9``, a lost node)
and is taken over: deleted, then created again by a conditional put, so of two waiters that both
see it stale exactly one gets it.

Constants
---------
* ``RENEW_S = 15``, ``STALE_S = 90``: six renewals may fail (a slow store, a paused process)
  before a live holder is taken for dead; machines' clocks must agree to well within 90 s (NTP).
  A worker killed mid-run holds its documents for at most 90 s.
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

RENEW_S = 15.0
STALE_S = 90.0
POLL_S = 2.0


def _body(owner: str) -> bytes:
    return json.dumps({"owner": owner, "host": socket.gethostname(), "pid": os.getpid(),
                       "renewed_at": time.time()}).encode()


def stale_after_s() -> float:
    """Seconds without renewal after which a lease is taken for its dead holder's:
    ``SITUATE_LEASE_STALE_S`` or :data:`STALE_S`."""
    raw = os.environ.get("SITUATE_LEASE_STALE_S", "")
    try:
        return max(float(raw), 1.0) if raw else STALE_S
    except ValueError:
        return STALE_S


def lease_state(folder, rel: str, now: float | None = None) -> dict | None:
    """The lease's JSON with ``"stale"`` added, or None when nobody holds it."""
    raw = folder.get(rel)
    if raw is None:
        return None
    try:
        state = json.loads(raw)
        renewed = float(state["renewed_at"])
    except (ValueError, KeyError, TypeError):  # a damaged lease: treat as abandoned
        return {"owner": None, "stale": True}
    state["stale"] = (now or time.time()) - renewed > stale_after_s()
    return state


@contextlib.contextmanager
def object_lease(folder, rel: str, on_wait: Callable[[], None] | None = None,
                 poll_s: float = POLL_S, renew_s: float | None = None) -> Iterator[str]:
    """Hold the lease ``rel`` of ``folder`` (:class:`resources.store.objects.ObjectFolder`) for the block.

    Yields the owner id (a random hex string).  ``on_wait`` is called once when another live
    holder has it, before waiting.

    Raises
    ------
    resources.store.objects.StoreUnavailable
        The store failed while taking the lease.
    """
    owner = uuid.uuid4().hex
    renew_s = renew_s if renew_s is not None else min(RENEW_S, stale_after_s() / 4)
    told = False
    while True:
        if folder.create(rel, _body(owner)):
            break
        state = lease_state(folder, rel)
        if state is None:
            continue  # released meanwhile: try again at once
        if state["stale"]:
            folder.delete(rel)  # its holder died; two waiters may delete, one create wins
            continue
        if not told and on_wait is not None:
            on_wait()
            told = True
        time.sleep(poll_s)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(renew_s):
            with contextlib.suppress(Exception):  # a failed renewal is retried at the next tick
                state = lease_state(folder, rel)
                if state is None or state.get("owner") != owner:
                    return  # taken over (we were presumed dead): stop renewing
                folder.put(rel, _body(owner))

    thread = threading.Thread(target=renew, name=f"lease {rel}", daemon=True)
    thread.start()
    try:
        yield owner
    finally:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(Exception):
            state = lease_state(folder, rel)
            if state is not None and state.get("owner") == owner:
                folder.delete(rel)


def lease_busy(folder, rel: str) -> bool:
    """Whether a live holder has the lease now."""
    state = lease_state(folder, rel)
    return state is not None and not state["stale"]
