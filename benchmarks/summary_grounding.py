"""How many summaries and blurbs shown to a reader name a library, function or file their document
does not contain, call it what it is not, or restate the prompt: counted on the committed blurb
files (``benchmarks/blurbs/``) over the labelled corpora's documents, before and after
:func:`situate.contextual.summary_grounding.ground_summary`.

*Before* is what a reader saw before this grounding: the file's raw answer cleaned, with the
sentences naming code the document lacks dropped.  *After* is what an ingest shows now
(:func:`situate.contextual.contextualize.record_from_raw`: a blurb's sentences naming a library the
document never uses or restating a prompt dropped too; a document summary's sentences calling the
document what it is not as well).  The counting is
:func:`situate.contextual.summary_grounding.summary_problems` on each sentence.  No model is loaded.

Usage::

    python benchmarks/summary_grounding.py [--out benchmarks/reports/summary-grounding.md] \
        [--home "LABEL=DATA_FOLDER" ...]

The report's httpx row: encode/httpx at ae1b9f66, its ``docs/*.md`` and ``httpx/*.py`` (46 files,
23 + 23) in a folder, ``situate ingest FOLDER --home H`` with the default settings (2026-12-06, 4
min 5 s on 2 cores), then ``--home "httpx-docs-and-source (46 files, a default ingest)=H"``.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPORA = {
    "codebase": ROOT / "eval" / "codebase" / "codebase_chunks.json",
    "docs": ROOT / "eval" / "docs" / "docs_chunks.json",
}
#: Modes whose text is a reader's context: the structure mode has no model text, and the questions
#: prompt's lines are indexed for BM25, never shown.
SHOWN = ("document", "chunk:anthropic-2024-primed-about", "chunk:by-reference", "chunk:by-reference-window")


def load_corpus(path: Path) -> dict[str, dict]:
    """``doc_id`` → ``{"text", "chunks": {index: text}, "language"}`` of a cookbook-form corpus."""
    from situate.contextual.summary_grounding import summary_language

    out = {}
    for d in json.loads(path.read_text()):
        chunks = {c["original_index"]: c["content"] for c in d["chunks"]}
        language = summary_language({"format": "corpus", "text": d["content"]})
        out[d["doc_id"]] = {"text": d["content"], "chunks": chunks, "language": language}
    return out


def _before(raw: str, chunk: str, document: str, by_reference: bool) -> str:
    """What a reader saw before this grounding: the answer cleaned, and its sentences naming code
    the document lacks dropped (:func:`situate.contextual.cleaning.ground_blurb`) and no more."""
    from situate.contextual.cleaning import clean_blurb, ground_blurb
    from situate.contextual.contextualize import MARK_RE

    cleaned = clean_blurb(MARK_RE.sub("", raw) if by_reference else raw, chunk)
    return ground_blurb(cleaned.text, document)[0] if cleaned.text else ""


def shown_texts(path: Path, docs: dict[str, dict]) -> list[tuple[str, str, str, str, str]]:
    """``(doc_id, mode, before, after, language)`` for each text a reader sees: one a document
    in document mode (every chunk shows the same summary), one a chunk otherwise.  *After* is what
    an ingest shows now: :func:`situate.contextual.contextualize.record_from_raw`, and for a
    summary :func:`situate.contextual.document_blurbs.grounded_summary` too."""
    from situate.contextual.contextualize import record_from_raw
    from situate.contextual.document_blurbs import grounded_summary

    seen, out = set(), []
    for line in gzip.open(path, "rt"):
        d = json.loads(line)
        if d["mode"] not in SHOWN:
            continue
        doc = docs[d["doc_id"]]
        if d["mode"] == "document":
            if d["doc_id"] in seen:
                continue
            seen.add(d["doc_id"])
            chunk = ""
        else:
            chunk = doc["chunks"][int(d["chunk_id"].rsplit(":", 2)[-2])]
        by_ref = d["mode"].startswith("chunk:by-reference")
        rec = record_from_raw(d["raw"], chunk, doc["text"], by_reference=by_ref)
        if d["mode"] == "document":
            rec = grounded_summary(rec, doc["text"], doc["language"])
        before = _before(d["raw"], chunk, doc["text"], by_ref)
        out.append((d["doc_id"], d["mode"], before, rec.blurb, doc["language"]))
    return out


def _tally(out: dict, name: str, before: str, after: str, document: str, judged: str | None) -> None:
    """Add one shown text (``before`` and ``after`` the grounding, of ``document``; ``judged``:
    the language its kind is judged by, None for a chunk's blurb) to ``out``'s counts, with the
    text as an example or as emptied."""
    from situate.contextual.cleaning import _sentences
    from situate.contextual.summary_grounding import summary_problems

    c = out["counts"]
    faults = [p for s in _sentences(before) if before for p in summary_problems(s, document, judged)]
    left = [p for s in _sentences(after) if after for p in summary_problems(s, document, judged)]
    c["texts"] += 1
    c["empty before"] += not before
    c["flagged before"] += bool(faults)
    for tag in {p.split(":", 1)[0] for p in faults}:
        c[f"{tag} before"] += 1
    c["flagged after"] += bool(left)
    c["emptied"] += bool(before) and not after
    if bool(before) and not after:
        out["emptied"].append((name, before[:200]))
    if faults and len(out["examples"]) < 6:
        out["examples"].append((name, faults[0], before[:160]))


def _counted() -> dict:
    return {"counts": collections.Counter(), "examples": [], "emptied": []}


def count(path: Path, docs: dict[str, dict]) -> dict:
    """Before and after counts of one blurb file, with a few dropped sentences as examples."""
    out = _counted()
    for doc_id, mode, before, after, language in shown_texts(path, docs):
        judged = language if mode == "document" else None  # a chunk's blurb: no language judged
        _tally(out, doc_id, before, after, docs[doc_id]["text"], judged)
    return out | {"counts": dict(out["counts"])}


def count_home(home: Path) -> dict:
    """:func:`count` for the texts an ingest showed, read from a data folder's stage files
    (``stages/<document>/document.json`` and ``blurbs.json``: each model-written text, its raw
    answer and its document), one text a document in document mode and one a chunk otherwise."""
    from situate.contextual.summary_grounding import summary_language

    out = _counted()
    for folder in sorted(p for p in (home / "stages").iterdir() if (p / "blurbs.json").exists()):
        doc = json.loads((folder / "document.json").read_text())
        language, seen = summary_language(doc), set()
        for b in json.loads((folder / "blurbs.json").read_text())["blurbs"]:
            if not b.get("raw") or (b["mode"] == "document" and "document" in seen):
                continue
            seen.add(b["mode"])
            before = _before(b["raw"], "", doc["text"], False)
            judged = language if b["mode"] == "document" else None
            _tally(out, doc["source"], before, b["blurb"], doc["text"], judged)
    return out | {"counts": dict(out["counts"])}


def report(results: dict[str, dict]) -> str:
    per_chunk = collections.Counter()
    for name, r in results.items():
        if not name.endswith("-document") and name.startswith(("codebase-", "docs-")):
            per_chunk.update({k: r["counts"].get(k, 0) for k in ("texts", "flagged before", "flagged after")})
    cols = ["texts", "flagged before", "restated before", "ungrounded before", "wrong-kind before"]
    cols += ["flagged after", "emptied", "empty before"]
    lines = [
        "# Summaries and blurbs that name what their document lacks, or restate the prompt",
        "",
        "Generated by `python benchmarks/summary_grounding.py` from the committed blurb files and",
        "the labelled corpora (no model loaded). A text is *flagged* when one of its sentences",
        "restates a prompt, names a library the document never uses as one or code it does not",
        "contain (*ungrounded*), or (a document summary) calls the document a script or module of",
        "another language (*wrong-kind*). *Before*: the file's answers cleaned, with sentences",
        "naming code the document lacks dropped (an ingest before this grounding); *after*: as an",
        "ingest reads them now (per-chunk blurbs: library and prompt checks too; summaries: their",
        "language as well). *Emptied*: texts the grounding left empty, whose chunks then fall back",
        "to their structural context alone.",
        "",
        "| file | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(str(r["counts"].get(k, 0)) for k in cols) + " |")
    lines += ["", "Examples (document, first fault, the text before):", ""]
    for name, r in results.items():
        for doc_id, fault, text in r["examples"][:3]:
            lines.append(f"- {name} {doc_id}: *{fault}* — {text!r}")
    lines += ["", "Texts the grounding left empty (their chunks get the structural context alone):", ""]
    for name, r in results.items():
        lines += [f"- {name} {doc_id}: {text!r}" for doc_id, text in r["emptied"]]
    lines += [
        "",
        "Over the per-chunk files, "
        f"{per_chunk['flagged before']:,} of {per_chunk['texts']:,} blurbs were flagged before and "
        f"{per_chunk['flagged after']:,} after.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "reports" / "summary-grounding.md"))
    p.add_argument(
        "--home",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also count the texts an ingest into data folder DIR showed (its stage files), as row LABEL",
    )
    args = p.parse_args(argv)
    corpora = {name: load_corpus(path) for name, path in CORPORA.items()}
    results = {}
    for path in sorted((ROOT / "benchmarks" / "blurbs").glob("*.jsonl.gz")):
        corpus = path.name.split("-", 1)[0]
        first = json.loads(gzip.open(path, "rt").readline())
        if corpus in corpora and first["mode"] in SHOWN:
            results[path.name.removesuffix(".jsonl.gz")] = count(path, corpora[corpus])
    for item in args.home:
        label, _, folder = item.partition("=")
        results[label] = count_home(Path(folder))
    text = report(results)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
