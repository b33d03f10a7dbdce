"""What ``situate`` prints: control characters escaped, hits laid out for a person or as JSON."""

from __future__ import annotations

import json
import re

#: Characters never written raw to a terminal: C0 and C1 controls but newline and tab (ESC starts
#: terminal escape sequences: hidden text, clipboard writes by OSC 52), and the Unicode bidi
#: overrides and isolates that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with every terminal control character written as ``\\uXXXX`` (also valid inside a
    JSON string), so a document's text or file name cannot drive the terminal.

    Examples
    --------
    >>> escape_controls("a\x1b[8mhidden")
    'a\\u001b[8mhidden'
    """
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class EscapingStream:
    """A text stream that escapes control characters (:func:`escape_controls`) in everything the
    ``situate`` command prints: hits, blurbs, file names in failure lines, Dagster's log lines."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(escape_controls(text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def print_hits(hits, as_json: bool, query: str = "") -> None:
    """Search hits on standard output: as JSON (each hit whole, with ``location`` and ``matched``:
    :func:`situate.contextual.snippets.hit_json`), or a few lines each: ``rank. path:start-end``
    with the similarity and the fused score (:func:`_scores`), the enclosing definitions or
    heading path, the model's context where it wrote one, and the chunk's lines that best match
    ``query``, numbered, with their own line breaks and indentation
    (:func:`situate.contextual.snippets.matched_lines`)."""
    from situate.contextual.snippets import hit_json, matched_lines

    if as_json:
        print(json.dumps([hit_json(h, query) for h in hits], ensure_ascii=False, indent=2))
        return
    for h in hits:
        where = f"[{h.collection}] " if h.collection else ""
        print(f"{h.rank:>2}. {where}{h.location}  ({_scores(h)})")
        inside = _inside(h.context, h.source)
        if inside:
            print(f"    in: {inside}")
        if h.blurb:
            print(f"    context: {h.blurb[:200]}")
        for n, line in matched_lines(h.text, query, h.start_line or 1):
            print(f"    {n:>5} | {line}" if h.start_line else f"    | {line}")


def _scores(hit) -> str:
    """``similarity 0.823, fused 1.0000``; ``weak match`` below
    :data:`situate.resources.store.retrieval.WEAK_MATCH`; the fused score alone where the
    similarity is unknown; a reranked hit adds the two ranks its fused score comes from
    (``cross-encoder #2 (logit 6.24), first stage #9``)."""
    from situate.resources.store.retrieval import WEAK_MATCH

    reranked = ""
    if hit.rerank_rank is not None:
        reranked = (
            f"; cross-encoder #{hit.rerank_rank} (logit {hit.rerank_score:.2f}), first stage #{hit.first_stage_rank}"
        )
    if hit.similarity is None:
        return f"fused {hit.score:.4f}{reranked}"
    weak = ": weak match" if hit.similarity < WEAK_MATCH else ""
    return f"similarity {hit.similarity:.3f}{weak}, fused {hit.score:.4f}{reranked}"


def _inside(context: str, source: str) -> str:
    """Where a hit sits, on one line of at most 200 characters: a prose chunk's title and heading
    path as they are; of a code chunk's structural context (its file's name, leading comment,
    enclosing definitions, ``defines: …``: :func:`situate.contextual.code_context.chunk_contexts`)
    the definitions alone (``class Group > def group; defines: command``)."""
    lines = [x.strip() for x in context.split("\n") if x.strip()]
    if len(lines) > 1:
        name = source.replace("\\", "/").rsplit("/", 1)[-1]
        lines = [x for x in lines[1:] if x.startswith("defines: ") or _is_label_path(x)] if lines[0] == name else lines
    text = "; ".join(lines)
    return text if len(text) <= 200 else text[:199] + "…"


def _is_label_path(line: str) -> bool:
    """A line of definition labels joined by ``" > "`` (``class Group > def group``), not prose."""
    return all(1 <= len(part.split()) <= 4 for part in line.split(" > "))
