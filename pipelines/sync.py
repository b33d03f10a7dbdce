"""Keeping the ``documents`` partitions and the table in step with the docs folder.

One planning function serves the sensor, the schedule and ``situate ingest``: which documents are
new, which changed (their rows carry another sha256 or settings fingerprint), which are gone.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

from assets.partitions import PARTITIONS  # noqa: F401  (re-exported for the wiring)
from resources.documents.reading import SourceRef

#: Keys are added to the instance in batches of at most this many (one unbatched SQL ``IN (...)``
#: on SQLite otherwise: shared/DAGSTER.md).
ADD_BATCH = 1000


@dataclasses.dataclass
class SyncPlan:
    """What a sync will do.

    Attributes
    ----------
    refs : dict of key → SourceRef
        Every document present now.
    added : list of str
        Keys to register (present, not yet partitions).
    removed : list of str
        Keys to delete with their rows (partitions whose document is gone).
    stale : list of str
        Keys to materialise: new, changed, or never completed with the current settings.
    fresh : list of str
        Keys whose rows are current.
    known_bad : dict of key → reason
        Unchanged documents that failed as bad input last time (not retried until they change).
    invalid : dict of key → reason
        Registered keys that are not valid document keys (:func:`resources.documents.keys.check_key`:
        added by hand, e.g. ``../x`` in the UI): reported, never deleted through, never run.
    """

    refs: dict[str, SourceRef]
    added: list[str]
    removed: list[str]
    stale: list[str]
    fresh: list[str]
    known_bad: dict[str, str]
    invalid: dict[str, str] = dataclasses.field(default_factory=dict)


def plan_sync(refs: Iterable[SourceRef], registered: Sequence[str], states: dict[str, dict],
              fingerprint: str, bad_inputs: dict[str, tuple[str, str]] | None = None) -> SyncPlan:
    """Compare the documents present with the registered partitions and the table.

    Parameters
    ----------
    refs : iterable of SourceRef
        From :func:`resources.documents.reading.discover`.
    registered : sequence of str
        Partition keys on the instance, in insertion order.
    states : dict
        :meth:`resources.store.store.Store.document_states`.
    fingerprint : str
        Current settings fingerprint (:func:`assets.embeddings.fingerprint`).
    bad_inputs : dict of key → (sha256, reason), optional
        Documents whose last read failed as bad input.

    Returns
    -------
    SyncPlan
    """
    from resources.documents.keys import PartitionKeyError, check_key

    refs = {r.key: r for r in refs}
    bad_inputs = bad_inputs or {}
    reg = set(registered)
    invalid: dict[str, str] = {}
    for k in registered:
        if k not in refs:
            try:
                check_key(k)
            except PartitionKeyError as e:
                invalid[k] = str(e)
    added = [k for k in refs if k not in reg]
    removed = [k for k in registered if k not in refs and k not in invalid]
    stale, fresh, known_bad = [], [], {}
    for key, ref in refs.items():
        st = states.get(key)
        if st and st["doc_sha256"] == {ref.sha256} and st["fingerprint"] == {fingerprint}:
            fresh.append(key)
        elif key in bad_inputs and bad_inputs[key][0] == ref.sha256:
            known_bad[key] = bad_inputs[key][1]
        else:
            stale.append(key)
    return SyncPlan(refs, added, removed, stale, fresh, known_bad, invalid)


def contiguous_ranges(order: Sequence[str], wanted: Iterable[str]) -> list[tuple[str, str]]:
    """Group ``wanted`` keys into maximal runs of consecutive keys of ``order`` (the instance's
    partition order), as ``(first, last)``: one Dagster run per range loads the models once.

    Examples
    --------
    >>> contiguous_ranges(["a", "b", "c", "d"], ["a", "b", "d"])
    [('a', 'b'), ('d', 'd')]
    """
    wanted = set(wanted)
    out: list[tuple[str, str]] = []
    start = prev = None
    for key in order:
        if key in wanted:
            if start is None:
                start = key
            prev = key
        elif start is not None:
            out.append((start, prev))
            start = None
    if start is not None:
        out.append((start, prev))
    return out


def run_ranges(order: Sequence[str], wanted: Iterable[str], per_run: int = 0) -> list[tuple[str, str]]:
    """:func:`contiguous_ranges`, each cut into ranges of at most ``per_run`` documents (0: no
    limit), so that runs over disjoint documents can go in parallel, each loading its model once.

    Examples
    --------
    >>> run_ranges(["a", "b", "c", "d", "e"], ["a", "b", "c", "e"], per_run=2)
    [('a', 'b'), ('c', 'c'), ('e', 'e')]
    """
    pos = {k: i for i, k in enumerate(order)}
    out: list[tuple[str, str]] = []
    for first, last in contiguous_ranges(order, wanted):
        keys = order[pos[first]: pos[last] + 1]
        step = per_run if per_run > 0 else len(keys)
        out.extend((keys[i], keys[min(i + step, len(keys)) - 1]) for i in range(0, len(keys), step))
    return out


def run_key(keys: Iterable[str], plan: SyncPlan, fingerprint: str) -> str:
    """Run key for a request: the documents' keys and content hashes and the settings, so the
    same work is never requested twice but a change is."""
    h = hashlib.sha256(fingerprint.encode())
    for k in keys:
        h.update(f"{k}={plan.refs[k].sha256};".encode())
    return h.hexdigest()[:24]


def bad_inputs_from_store(store, keys: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Documents whose ``document`` stage recorded a bad-input error: key → (sha256, reason)."""
    out = {}
    for k in keys:
        d = store.read_stage_if_any(k, "document")
        if isinstance(d, dict) and d.get("bad_input") and d.get("sha256"):
            out[k] = (d["sha256"], d["error"])
    return out
