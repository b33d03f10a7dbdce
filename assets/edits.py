"""Edits that re-situate only what changed: which blurbs of a document's last version are kept.

The blurb cache key holds the whole document window, so without this a one-line edit to a
30-chunk file would cost 30 LLM calls.  When a document changed little, a chunk whose text is
unchanged keeps its blurb (and the row records which document version it was written against);
new and changed chunks are situated against the new version; a larger change re-situates all.

The bound (:data:`MAX_CHANGED_SHARE`): a blurb says what the document is and where the chunk sits
in it.  While at most a fifth of the document's tokens are new, at least four of every five tokens
the kept blurb was written against are still there, in the same order, and the document's subject
and outline are what they were; an edit of that size is a fix, an added paragraph or function, a
reworded section.  A rewrite of more than a fifth can move a chunk's place in the document, so it
re-situates every chunk.  The share is counted in cl100k_base tokens of the new version's chunks
(the chunks stage's ``n_tokens``), so it does not depend on the LLM.

Only what a model wrote is kept (status ``model`` with its raw text): a ``fallback:`` or
``skipped:`` record was decided by a setting or a cleaning step (``n_ctx`` too small, a document
over ``SITUATE_MAX_BLURB_CHUNKS``), so once that setting is fixed the next ingest situates those
chunks.  A kept blurb must then pass the same cleaning and grounding as a new one against the
new version of the document (:func:`recheck`): a blurb that names something the edit removed is
not kept, and the model writes that chunk again.

Examples
--------
>>> old = {"doc_sha256": "v1", "settings": "s", "blurbs": [
...     {"text_sha256": "a", "blurb": "A.", "raw": "A.", "status": "model", "doc_sha256": "v1"},
...     {"text_sha256": "b", "blurb": "B.", "raw": "B.", "status": "model", "doc_sha256": "v1"}]}
>>> new_chunks = [{"text_sha256": "a", "n_tokens": 90}, {"text_sha256": "c", "n_tokens": 10}]
>>> kept, info = kept_blurbs(old, new_chunks, "v2", "s")
>>> sorted(kept), info["changed_share"]
([0], 0.1)
"""

from __future__ import annotations

import collections
import hashlib

#: Largest share of a document's tokens (cl100k_base, in new or changed chunks) for which the
#: unchanged chunks keep their blurbs; see the module docstring for why a fifth.
MAX_CHANGED_SHARE = 0.2


def text_sha256(text: str) -> str:
    """sha256 hex of a chunk's text (UTF-8): how a chunk is recognised across versions."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def written_by_model(rec: dict) -> bool:
    """A usable blurb that a model wrote (status ``model``, a non-empty raw text and blurb): the
    only records worth keeping.  A ``fallback:`` or ``skipped:`` record is not: the setting or
    bound that made it may have been fixed since."""
    return (rec.get("status") == "model" and isinstance(rec.get("raw"), str) and bool(rec["raw"].strip())
            and isinstance(rec.get("blurb"), str) and bool(rec["blurb"]))


def recheck(rec: dict, chunk: str, document: str, by_reference: bool) -> bool:
    """Whether a kept record still passes against the new ``document``: its raw text, cleaned
    and grounded again exactly as a new answer (:func:`assets.contextualize.record_from_raw`),
    gives the same usable blurb.  False when the edit removed a name the blurb uses (grounding
    now drops a sentence), or when the blurb no longer passes cleaning for this chunk."""
    from assets.contextualize import record_from_raw

    again = record_from_raw(rec["raw"], chunk, document, by_reference)
    return again.status == "model" and again.blurb == rec["blurb"]


def kept_blurbs(previous: dict | None, chunks: list[dict], doc_sha256: str, settings: str,
                bound: float = MAX_CHANGED_SHARE) -> tuple[dict[int, dict], dict]:
    """The blurbs of the previous version that chunks of the new version keep.

    Parameters
    ----------
    previous : dict or None
        The document's last ``blurbs`` stage: ``doc_sha256``, ``settings`` (what made the blurbs:
        model file, prompt, mode, ``n_ctx``, the chunk limit; :func:`assets.blurbs.settings_id`) and
        ``blurbs`` (each with ``text_sha256``, ``blurb``, ``raw``, ``status``, ``doc_sha256``).
        Only records with status ``model`` and a raw text are candidates (:func:`written_by_model`).
    chunks : list of dict
        The new version's chunks, each with ``text_sha256`` and ``n_tokens`` (cl100k_base).
    doc_sha256 : str
        The new version's sha256.
    settings : str
        What makes blurbs now; blurbs made otherwise are never kept.
    bound : float
        :data:`MAX_CHANGED_SHARE`.

    Returns
    -------
    (kept, info)
        ``kept`` maps a new chunk's index to the previous record it keeps (a chunk text that
        appears twice is matched in order); empty when nothing is kept.  ``info`` has
        ``changed_share`` (share of the new version's tokens in chunks without an earlier
        blurb, 0-1), ``changed_chunks`` and ``why`` (``""``, ``"first version"``, ``"unchanged"``,
        ``"settings changed"`` or ``"changed more than the bound"``).
    """
    info = {"changed_share": 1.0, "changed_chunks": len(chunks), "why": ""}
    if not previous or not isinstance(previous.get("blurbs"), list):
        return {}, info | {"why": "first version"}
    if previous.get("settings") != settings:
        return {}, info | {"why": "settings changed"}
    pool: dict[str, collections.deque] = collections.defaultdict(collections.deque)
    for rec in previous["blurbs"]:
        if isinstance(rec, dict) and rec.get("text_sha256") and written_by_model(rec):
            pool[rec["text_sha256"]].append(rec)
    kept: dict[int, dict] = {}
    for i, c in enumerate(chunks):
        if pool.get(c["text_sha256"]):
            kept[i] = pool[c["text_sha256"]].popleft()
    total = sum(c["n_tokens"] for c in chunks) or 1
    changed = sum(c["n_tokens"] for i, c in enumerate(chunks) if i not in kept)
    info = {"changed_share": round(changed / total, 4), "changed_chunks": len(chunks) - len(kept), "why": ""}
    if previous.get("doc_sha256") == doc_sha256:
        return kept, info | {"why": "unchanged"}
    if changed / total > bound:
        return {}, info | {"why": "changed more than the bound"}
    return kept, info
