"""Keeping the ``documents`` partitions and the table in step with the docs folder.

One planning function serves the sensor, the schedule and ``situate ingest``: which documents are
new, which changed (their rows carry another sha256 or settings fingerprint), which are gone.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

from situate.assets.partitions import PARTITIONS  # noqa: F401  (re-exported for the wiring)
from situate.resources.documents.reading import SourceRef

#: Keys are added to the instance in batches of at most this many (one unbatched SQL ``IN (...)``
#: on SQLite otherwise: shared/DAGSTER.md).
ADD_BATCH = 1000
#: A sync removes nothing when it would remove more than this share of the registered documents
#: (and at least :data:`MIN_HELD_REMOVAL` of them), or every one: an unmounted network share or
#: a folder emptied by mistake reads as "every document removed", and the rows, stage files and
#: index of each would go.  Half: a real clean-up rarely deletes most of a folder in
#: one go, and a mount that is half there is broken too.
MAX_REMOVED_SHARE = 0.5
#: Removing fewer documents than this is never held (a 4-document folder loses 2), unless it is
#: every document.
MIN_HELD_REMOVAL = 3
#: The setting that lets a held removal go on (``1``); ``situate ingest --allow-removal`` sets it
#: for one run.
ALLOW_REMOVAL_ENV = "SITUATE_ALLOW_MASS_REMOVAL"


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
        Registered keys that are not valid document keys (:func:`situate.resources.documents.keys.check_key`:
        added by hand, e.g. ``../x`` in the UI): reported, never deleted through, never run.
    held : str
        Why removals were held (:func:`removal_held`; ``removed`` is then empty and ``held_keys``
        names them), else empty.
    held_keys : list of str
        The documents a held removal would have removed.
    skipped : list of str
        Objects of a docs source on object storage left out because their keys cannot be read
        (:func:`situate.resources.documents.remote.discover_objects`), one line each.
    passed_over : dict of str to str
        Files of a docs folder that are not documents, path (a folder ends with ``/``) → why
        (ignored, hidden, empty, unknown format: :func:`situate.resources.documents.reading.discover`).
    """

    refs: dict[str, SourceRef]
    added: list[str]
    removed: list[str]
    stale: list[str]
    fresh: list[str]
    known_bad: dict[str, str]
    invalid: dict[str, str] = dataclasses.field(default_factory=dict)
    held: str = ""
    held_keys: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    passed_over: dict[str, str] = dataclasses.field(default_factory=dict)


def removal_held(n_removed: int, n_registered: int, n_present: int) -> str:
    """Why a sync that would remove ``n_removed`` of ``n_registered`` documents (``n_present``
    found in the docs folder now) removes nothing, in one line; empty when it may go on.

    Examples
    --------
    >>> removal_held(40, 40, 0)[:38]
    'the docs folder holds no document now'
    >>> removal_held(2, 4, 2)
    ''
    """
    if n_removed == 0:
        return ""
    if n_present == 0:
        why = "the docs folder holds no document now"
    elif n_removed > MAX_REMOVED_SHARE * n_registered and n_removed >= MIN_HELD_REMOVAL:
        why = f"{n_removed} of {n_registered} documents are gone from the docs folder"
    else:
        return ""
    return (
        f"{why} (an unmounted share or an emptied folder?): nothing removed; to remove "
        f"{n_removed} documents' rows, run `situate ingest PATH --allow-removal` or set "
        f"{ALLOW_REMOVAL_ENV}=1"
    )


def plan_sync(
    refs: Iterable[SourceRef],
    registered: Sequence[str],
    states: dict[str, dict],
    fingerprint: str,
    bad_inputs: dict[str, tuple[str, str]] | None = None,
    allow_mass_removal: bool = False,
) -> SyncPlan:
    """Compare the documents present with the registered partitions and the table.

    Parameters
    ----------
    refs : iterable of SourceRef
        From :func:`situate.resources.documents.reading.discover`.
    registered : sequence of str
        Partition keys on the instance, in insertion order.
    states : dict
        :meth:`situate.resources.store.store.Store.document_states`.
    fingerprint : str
        Current settings fingerprint (:func:`situate.contextual.indexing.fingerprint`).
    bad_inputs : dict of key → (sha256, reason), optional
        Documents whose last read failed as bad input.
    allow_mass_removal : bool
        Remove documents even when :func:`removal_held` would hold them.

    Returns
    -------
    SyncPlan
    """
    from situate.resources.documents.keys import PartitionKeyError, check_key

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
    held = "" if allow_mass_removal else removal_held(len(removed), len(registered) - len(invalid), len(refs))
    held_keys = removed if held else []
    return SyncPlan(refs, added, [] if held else removed, stale, fresh, known_bad, invalid, held, held_keys)


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
        keys = order[pos[first] : pos[last] + 1]
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
