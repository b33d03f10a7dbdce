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


def written_by_model(rec: dict, blurb_file: str = "") -> bool:
    """A usable blurb worth keeping: status ``model``, a non-empty raw text and blurb, written by
    this machine's model or taken from the blurb file set now (``blurb_file``, its sha256).  A
    ``fallback:`` or ``skipped:`` record is not: the setting or bound that made it may have been
    fixed since.  Nor is a blurb taken from a blurb file (``from_file``) that is no longer set:
    the file is untrusted input a run chose to read, and once it is removed or replaced its
    blurbs must not live on."""
    source = rec.get("from_file") or ""
    return (
        rec.get("status") == "model"
        and (not source or source == blurb_file)
        and isinstance(rec.get("raw"), str)
        and bool(rec["raw"].strip())
        and isinstance(rec.get("blurb"), str)
        and bool(rec["blurb"])
    )


def recheck(rec: dict, chunk: str, document: str, by_reference: bool) -> bool:
    """Whether a kept record still passes against the new ``document``: its raw text, cleaned
    and grounded again exactly as a new answer (:func:`situate.contextual.contextualize.record_from_raw`),
    gives the same usable blurb.  False when the edit removed a name the blurb uses (grounding
    now drops a sentence), or when the blurb no longer passes cleaning for this chunk."""
    from situate.contextual.contextualize import record_from_raw

    again = record_from_raw(rec["raw"], chunk, document, by_reference)
    return again.status == "model" and again.blurb == rec["blurb"]


def version_chunks(previous: dict) -> dict[str, list[str]]:
    """The chunk texts (``text_sha256``, in order) of each document version the previous stage's
    records were written against: its own version from its records, older ones from its
    ``versions`` (written by :func:`kept_blurbs`'s caller for the blurbs it kept)."""
    out = {
        v: list(t)
        for v, t in (previous.get("versions") or {}).items()
        if isinstance(t, list) and all(isinstance(x, str) for x in t)
    }
    own = [r.get("text_sha256", "") for r in previous.get("blurbs", []) if isinstance(r, dict)]
    if previous.get("doc_sha256"):
        out[previous["doc_sha256"]] = own
    return out


def kept_blurbs(
    previous: dict | None,
    chunks: list[dict],
    doc_sha256: str,
    settings: str,
    bound: float = MAX_CHANGED_SHARE,
    blurb_file: str = "",
) -> tuple[dict[int, dict], dict]:
    """The blurbs of the previous version that chunks of the new version keep.

    The share changed is measured against the version each blurb was *written* against, not only
    the last one: a blurb kept through several small edits is dropped once the document has moved
    more than ``bound`` away from the text its model read (five edits of 10% each leave nothing of
    it kept).

    Parameters
    ----------
    previous : dict or None
        The document's last ``blurbs`` stage: ``doc_sha256``, ``settings`` (what made the blurbs:
        model file, prompt, mode, ``n_ctx``, the chunk limit; :func:`situate.contextual.document_blurbs.settings_id`),
        ``blurbs`` (each with ``text_sha256``, ``blurb``, ``raw``, ``status``, ``doc_sha256``) and
        ``versions`` (``{doc_sha256: [text_sha256, ...]}`` of older versions its kept records were
        written against; :func:`version_chunks`).  Only records with status ``model`` and a raw
        text are candidates (:func:`written_by_model`); a record whose version's chunks are not
        known is not kept.
    chunks : list of dict
        The new version's chunks, each with ``text_sha256`` and ``n_tokens`` (cl100k_base).
    doc_sha256 : str
        The new version's sha256.
    settings : str
        What makes blurbs now; blurbs made otherwise are never kept.
    bound : float
        :data:`MAX_CHANGED_SHARE`.
    blurb_file : str
        sha256 of the blurb file set for this run, or ``""``: blurbs taken from another file, or
        from one no longer set, are not kept (:func:`written_by_model`).

    Returns
    -------
    (kept, info)
        ``kept`` maps a new chunk's index to the previous record it keeps (a chunk text that
        appears twice is matched in order); empty when nothing is kept.  ``info`` has
        ``changed_share`` (share of the new version's tokens in chunks without an earlier
        blurb, 0-1), ``changed_chunks``, ``why`` (``""``, ``"first version"``, ``"unchanged"``,
        ``"settings changed"`` or ``"changed more than the bound"``), ``drifted`` (blurbs not
        kept because the document moved more than ``bound`` from their own version) and
        ``versions`` (the chunk texts of each older version a kept record was written against:
        write them into the new stage).
    """
    info = {"changed_share": 1.0, "changed_chunks": len(chunks), "why": "", "drifted": 0, "versions": {}}
    if not previous or not isinstance(previous.get("blurbs"), list):
        return {}, info | {"why": "first version"}
    if previous.get("settings") != settings:
        return {}, info | {"why": "settings changed"}
    total = sum(c["n_tokens"] for c in chunks) or 1
    known = version_chunks(previous)
    drift = {}  # share of the new version's tokens in chunks its own version did not have
    for v, texts in known.items():
        have = set(texts)
        drift[v] = sum(c["n_tokens"] for c in chunks if c["text_sha256"] not in have) / total
    pool: dict[str, collections.deque] = collections.defaultdict(collections.deque)
    drifted = 0
    for rec in previous["blurbs"]:
        if isinstance(rec, dict) and rec.get("text_sha256") and written_by_model(rec, blurb_file):
            own = rec.get("doc_sha256") or previous.get("doc_sha256")
            if own != doc_sha256 and drift.get(own, 1.0) > bound:
                drifted += 1
                continue
            pool[rec["text_sha256"]].append(rec)
    kept: dict[int, dict] = {}
    for i, c in enumerate(chunks):
        if pool.get(c["text_sha256"]):
            kept[i] = pool[c["text_sha256"]].popleft()
    changed = sum(c["n_tokens"] for i, c in enumerate(chunks) if i not in kept)
    versions = {v: known[v] for v in {r.get("doc_sha256") for r in kept.values()} if v in known and v != doc_sha256}
    info = {
        "changed_share": round(changed / total, 4),
        "changed_chunks": len(chunks) - len(kept),
        "why": "",
        "drifted": drifted,
        "versions": versions,
    }
    if previous.get("doc_sha256") == doc_sha256:
        return kept, info | {"why": "unchanged"}
    last = previous.get("doc_sha256")
    if drift.get(last, 1.0) > bound:  # changed more than the bound since the last version
        have = set(known.get(last, ()))
        return {}, {
            "changed_share": round(drift.get(last, 1.0), 4),
            "changed_chunks": sum(c["text_sha256"] not in have for c in chunks),
            "why": "changed more than the bound",
            "drifted": 0,
            "versions": {},
        }
    return kept, info
