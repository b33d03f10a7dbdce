"""Blurb files: a corpus's blurbs as compressed JSON lines, so a Quality table is re-run with no
LLM call.

``situate eval --save-blurbs FILE`` writes one line per chunk after an evaluation; ``situate eval
--blurbs FILE`` (``SITUATE_BLURBS_FILE`` for any ingest) takes each chunk's blurb from the file
when the file has one for the chunk's text in the same version of its document, made by the same
model file in the same mode, and lets the model make the rest.  What the model wrote (``raw``) is kept, and cleaning and grounding
run again on it, exactly as on a blurb-cache hit.

Line format (one JSON object a line, gzip)::

    {"chunk_id", "doc_id", "text_sha256", "doc_sha256", "mode", "model_sha256", "raw", "blurb", "status"}

``mode`` is ``chunk:<prompt name>``, ``document`` or ``structure``; ``model_sha256`` the LLM
file's sha256 (empty for ``structure``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

FIELDS = ("chunk_id", "doc_id", "text_sha256", "doc_sha256", "mode", "model_sha256", "raw", "blurb", "status")


def write(path: str | Path, lines: list[dict]) -> int:
    """Write ``lines`` (dicts with :data:`FIELDS`) to ``path`` as gzip JSON lines, sorted by chunk
    id with a fixed gzip time, so the same blurbs give the same bytes.  Returns the line count."""
    lines = sorted(lines, key=lambda d: (d["chunk_id"], d["mode"]))
    data = "".join(json.dumps({k: d.get(k, "") for k in FIELDS}, ensure_ascii=False, sort_keys=True) + "\n"
                   for d in lines).encode("utf-8")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
        z.write(data)
    return len(lines)


def read(path: str | Path) -> dict[tuple[str, str, str, str], dict]:
    """``{(mode, model sha256, document sha256, text sha256): line}`` of a blurb file: a chunk's
    blurb is found by its own document's version and its text (the same text in two documents,
    a licence header say, has a blurb for each).

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        A line is not JSON or lacks a field (the message names the file and line).
    """
    out: dict[tuple[str, str, str, str], dict] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.setdefault((d["mode"], d["model_sha256"], d["doc_sha256"], d["text_sha256"]), d)
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}, line {n}: not a blurb line ({type(e).__name__}: {e})") from None
    return out


def stage_lines(stage: dict, doc_id: str, model_sha256: str) -> list[dict]:
    """The lines of one document's ``blurbs`` stage (records written by :mod:`assets.blurbs`)."""
    out = []
    for r in stage.get("blurbs", []):
        if not r.get("text_sha256"):
            continue
        mode = r.get("mode", "")
        out.append({"chunk_id": r["chunk_id"], "doc_id": doc_id, "text_sha256": r["text_sha256"],
                    "doc_sha256": r.get("doc_sha256", ""), "mode": mode,
                    "model_sha256": "" if mode == "structure" else model_sha256,
                    "raw": r.get("raw", ""), "blurb": r.get("blurb", ""), "status": r.get("status", "")})
    return out
