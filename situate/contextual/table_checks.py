"""Consistency checks of the output table, as plain functions (Dagster runs them as asset checks
of ``bm25_index``, the step that follows every ingest; tests call them directly).

Each function returns ``(passed, metadata)``; metadata names what is wrong (up to 20 examples).
"""

from __future__ import annotations

import collections
import json

import numpy as np

from situate.resources.settings import read_settings
from situate.resources.store.retrieval import bm25_ids
from situate.resources.store.store import Store

#: Largest share of rows whose blurb fell back to the chunk alone (``blurb_status`` other than
#: ``model``) before the check fails.  SmolLM2-135M with the published prompt falls back on 60%
#: of the codebase set's chunks (docs/quality.md), so the default leaves room for it and still
#: catches a broken model or prompt (every blurb falling back).  ``SITUATE_MAX_FALLBACK_SHARE``.
MAX_FALLBACK_SHARE = 0.9

#: Tolerance on the L2 norm of a stored vector (rows are L2-normalised float32).
NORM_TOLERANCE = 1e-3


def _examples(items) -> str:
    items = sorted(items)
    return ", ".join(map(str, items[:20])) + (f" … ({len(items)} in all)" if len(items) > 20 else "")


def rows_match_chunks(store, keys) -> tuple[bool, dict]:
    """Per document of ``keys`` (the registered partitions), rows in the table == chunks in its
    chunks stage file; no rows of any other document.

    A document whose chunks stage recorded an error (bad input) must have no row; one never
    chunked is not counted.  A registered key that is not a document key (added by hand in the
    UI, :func:`situate.resources.documents.keys.check_key`) is left alone and named, never read through.
    """
    from situate.resources.documents.keys import PartitionKeyError, check_key

    counts = collections.Counter(store.columns(["document_key"]).column("document_key").to_pylist())
    expected: dict[str, int] = {}
    left_alone = []
    for key in keys:
        try:
            check_key(key)
        except PartitionKeyError:
            left_alone.append(key)
            continue
        try:
            data = store.read_stage(key, "chunks")
        except FileNotFoundError:
            continue
        expected[key] = 0 if isinstance(data, dict) and data.get("error") else len(data["chunks"])
    keys = set(keys)
    orphans = sorted(k for k in counts if k not in keys)
    wrong = {k: (counts.get(k, 0), n) for k, n in expected.items() if counts.get(k, 0) != n}
    md = {"documents": len(expected), "documents_wrong": len(wrong), "unregistered_documents_with_rows": len(orphans)}
    if left_alone:
        md["invalid keys left alone"] = _examples(repr(k) for k in left_alone)
    if wrong:
        md["wrong (rows, chunks)"] = _examples(f"{k}: {r} rows, {n} chunks" for k, (r, n) in wrong.items())
    if orphans:
        md["rows of unregistered documents"] = _examples(orphans)
    return not wrong and not orphans, md


def unique_chunk_ids(store) -> tuple[bool, dict]:
    """No ``chunk_id`` appears twice in the table."""
    ids = store.columns(["chunk_id"]).column("chunk_id").to_pylist()
    dup = [k for k, n in collections.Counter(ids).items() if n > 1]
    md = {"rows": len(ids), "duplicated_ids": len(dup)}
    if dup:
        md["duplicates"] = _examples(dup)
    return not dup, md


def vectors_sound(store, dim: int | None = None) -> tuple[bool, dict]:
    """Every vector has the expected dimension, only finite values, and unit L2 norm
    (within :data:`NORM_TOLERANCE`)."""
    table = store.table()
    if table is None:
        return True, {"rows": 0}
    width = table.schema.field("vector").type.list_size
    data = table.search().select(["chunk_id", "vector"]).limit(None).to_arrow()
    vecs = (
        np.asarray(data.column("vector").combine_chunks().flatten(), np.float32).reshape(len(data), width)
        if len(data)
        else np.zeros((0, width), np.float32)
    )
    finite = np.isfinite(vecs).all(axis=1)
    norms = np.linalg.norm(np.where(np.isfinite(vecs), vecs, 0), axis=1)
    bad = ~finite | (np.abs(norms - 1) > NORM_TOLERANCE)
    ids = data.column("chunk_id").to_pylist()
    md = {
        "rows": len(ids),
        "dimension": width,
        "expected_dimension": dim if dim is not None else width,
        "rows_not_unit_or_not_finite": int(bad.sum()),
        "norm_min": round(float(norms.min()), 6) if len(ids) else 0.0,
        "norm_max": round(float(norms.max()), 6) if len(ids) else 0.0,
    }
    if bad.any():
        md["bad rows"] = _examples(i for i, b in zip(ids, bad) if b)
    return (dim is None or width == dim) and not bad.any(), md


def fallback_share(store, max_share: float = MAX_FALLBACK_SHARE) -> tuple[bool, dict]:
    """Share of rows whose blurb fell back to the chunk alone is at most ``max_share``; rows
    skipped on purpose (``skipped:large-document``) are left out of the share."""
    status = [s for s in store.columns(["blurb_status"]).column("blurb_status").to_pylist()]
    skipped = sum(s.startswith("skipped:") for s in status)
    status = [s for s in status if not s.startswith("skipped:")]
    fallbacks = sum(s != "model" for s in status)
    share = fallbacks / len(status) if status else 0.0
    reasons = collections.Counter(s.split(":", 1)[1] if ":" in s else s for s in status if s != "model")
    return share <= max_share, {
        "rows": len(status) + skipped,
        "skipped": skipped,
        "fallbacks": fallbacks,
        "share": round(share, 4),
        "max_share": max_share,
        "reasons": ", ".join(f"{k}: {v}" for k, v in reasons.most_common()) or "none",
    }


#: The data folder's record of a held removal (:func:`situate.pipelines.sync.removal_held`): JSON
#: ``{"reason", "documents", "keys"}`` written by the sync that held it, empty once a sync removes
#: nothing it would hold.
REMOVAL_HELD_FILE = "removal-held.json"


def record_removal_hold(store, reason: str, keys: list[str]) -> None:
    """Write (``reason`` non-empty) or clear the data folder's :data:`REMOVAL_HELD_FILE`."""
    if reason:
        store.write_file(
            REMOVAL_HELD_FILE, json.dumps({"reason": reason, "documents": len(keys), "keys": keys[:20]}).encode()
        )
    elif store.read_file(REMOVAL_HELD_FILE):
        store.write_file(REMOVAL_HELD_FILE, b"")


def no_removal_held(store) -> tuple[bool, dict]:
    """No sync is holding back a mass removal (an unmounted docs folder?): fails, with the reason
    and the documents, while one is."""
    raw = store.read_file(REMOVAL_HELD_FILE)
    if not raw:
        return True, {"held": "none"}
    held = json.loads(raw)
    return False, {"held": held["reason"], "documents": held["documents"], "examples": ", ".join(held["keys"][:5])}


#: The data folder's record of documents the sensor stopped asking for (their work failed
#: ``MAX_RUN_ATTEMPTS`` runs, :func:`situate.pipelines.automation.run_requests`): JSON key → reason.
STUCK_FILE = "stuck-documents.json"


def record_stuck(store, reasons: dict[str, str]) -> None:
    """Write (non-empty) or clear the data folder's :data:`STUCK_FILE`."""
    if reasons:
        store.write_file(STUCK_FILE, json.dumps(reasons, ensure_ascii=False).encode())
    elif store.read_file(STUCK_FILE):
        store.write_file(STUCK_FILE, b"")


def stuck_documents(store) -> dict[str, str]:
    """key → reason for each document in :data:`STUCK_FILE` (empty when none)."""
    raw = store.read_file(STUCK_FILE)
    return json.loads(raw) if raw else {}


def documents_not_stuck(store) -> tuple[bool, dict]:
    """No document has used its run attempts: fails, naming them and their last error, while any has."""
    stuck = stuck_documents(store)
    if not stuck:
        return True, {"stuck": 0}
    first = sorted(stuck)[:5]
    return False, {"stuck": len(stuck), "documents": ", ".join(first), "last_error": stuck[first[0]][:500]}


#: The asset checks of the ``bm25_index`` asset, by name, each with what it checks.
CHECKS = {
    "ids_match_table": "The BM25 index's row ids equal the table's chunk ids.",
    "rows_match_chunks": "Per document, rows in the table equal chunks in its chunks stage file; "
    "no rows of unregistered documents.",
    "unique_chunk_ids": "No chunk_id appears twice in the table.",
    "vectors_sound": "Every vector has the embedder's dimension, finite values and unit L2 norm.",
    "fallback_share": "The share of blurbs that fell back to the chunk alone is under the threshold "
    "(SITUATE_MAX_FALLBACK_SHARE, default 0.9).",
    "documents_not_stuck": "No document has used its run attempts (MAX_RUN_ATTEMPTS failed runs of the "
    "same version): the sensor stopped asking for it; fails naming it and its last error.",
    "no_removal_held": "No sync is holding back the removal of most (or all) documents: an unmounted or "
    "emptied docs folder removes nothing until SITUATE_ALLOW_MASS_REMOVAL=1 or "
    "`situate ingest --allow-removal`.",
}


def max_fallback_share() -> float:
    """``$SITUATE_MAX_FALLBACK_SHARE`` within its bound, else
    :data:`situate.contextual.MAX_FALLBACK_SHARE`.

    Raises
    ------
    situate.resources.errors.SettingError
        The value is not a number or is outside 0 to 1.
    """
    return read_settings().max_fallback_share


def ids_match(store: Store) -> tuple[bool, dict]:
    """Whether the saved BM25 index's ids equal the table's chunk ids, with the counts."""
    index_ids = bm25_ids(store.bm25_dir) or []
    table_ids = store.columns(["chunk_id"]).column("chunk_id").to_pylist()
    missing = sorted(set(table_ids) - set(index_ids))
    extra = sorted(set(index_ids) - set(table_ids))
    ok = not missing and not extra and len(index_ids) == len(table_ids)
    return ok, {
        "index_rows": len(index_ids),
        "table_rows": len(table_ids),
        "missing_from_index": len(missing),
        "stale_in_index": len(extra),
    }
