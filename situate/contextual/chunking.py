"""Token-sized chunking at paragraph and line boundaries, with heading paths and stable ids.

Sizes are counted in tiktoken ``cl100k_base`` tokens.  The defaults (prose 300, source code 200,
overlap 20: :data:`situate.resources.documents.docs.CHUNK_TOKENS`) were chosen by cross-validation
on the labelled corpora re-chunked at several sizes (``benchmarks/chunk_sizes.py``), so a chunk
and its context fit the embedder's 512-token window; Anthropic's Contextual Retrieval blog chunks
"usually no more than a few hundred tokens".
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable

from situate.resources.documents.docs import (  # noqa: F401  (the Chunking resource's defaults)
    CHUNK_TOKENS,
    CODE_CHUNK_TOKENS,
    OVERLAP_TOKENS,
)

Counter = Callable[[str], int]


@dataclasses.dataclass
class Chunk:
    """One chunk of a document.

    Attributes
    ----------
    chunk_id : str
        ``{document key}:{index}:{first 12 hex of sha256(text)}``: stable while the text is.
    index : int
        Position in the document (a corpus chunk keeps its ``original_index``).
    start, end : int
        Character offsets in the document's text; ``text == document.text[start:end]``.
    text : str
        The chunk as it appears in the document.
    n_tokens : int
        Length in cl100k_base tokens.
    heading_path : list of str
        Titles of the sections the chunk starts in, outermost first.
    context : str
        Structural context (:mod:`situate.contextual.code_context`): for code the file's leading comment,
        enclosing definitions and names defined; for prose the title and heading path.
    """

    chunk_id: str
    index: int
    start: int
    end: int
    text: str
    n_tokens: int
    heading_path: list[str]
    context: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def chunk_id(document_key: str, index: int, text: str) -> str:
    """Stable chunk id: document key, index and a content hash (12 hex digits of sha256)."""
    return f"{document_key}:{index}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def heading_path_at(headings: list[list], offset: int) -> list[str]:
    """Titles of the headings enclosing character ``offset``, outermost first.

    ``headings`` is ``[[offset, level, title], ...]`` sorted by offset.
    """
    stack: list[tuple[int, str]] = []
    for h_off, level, title in headings:
        if h_off > offset:
            break
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
    return [t for _, t in stack]


def _longest_fitting(text: str, lo: int, end: int, count: Counter, limit: int) -> int:
    """The largest ``hi`` in ``(lo, end]`` with ``count(text[lo:hi]) <= limit``; at least one
    character even if that one character is over ``limit``.

    Doubles a probe until it no longer fits, then narrows the bracket, guessing by linear
    interpolation of the counts (token counts grow almost linearly with length) and widening the
    guess's side step by step, with a plain halving as the fallback: about 5 counts a cut instead
    of hundreds, so a 5 MB line without spaces is cut in seconds.
    """
    good, c_good = lo, 0
    bad = c_bad = None
    probe = min(end, lo + max(2, limit))
    while bad is None:
        c = count(text[lo:probe])
        if c <= limit:
            good, c_good = probe, c
            if probe == end:
                return end
            probe = min(end, lo + 2 * (probe - lo))
        else:
            bad, c_bad = probe, c
    step, probe_fit = 1, False
    while bad - good > 1:
        guess = (
            good + int((bad - good) * (limit + 1 - c_good) / (c_bad - c_good)) if c_bad > c_good else (good + bad) // 2
        )
        for probe in (guess, None):  # the interpolated guess, then a step beyond it on its side
            if probe is None:
                probe = good + step if probe_fit else bad - step
            probe = min(bad - 1, max(good + 1, probe))
            if bad - good <= 1:
                break
            c = count(text[lo:probe])
            probe_fit = c <= limit
            if probe_fit:
                good, c_good = probe, c
            else:
                bad, c_bad = probe, c
        step *= 2
    return max(good, lo + 1)


def _units(text: str, count: Counter, limit: int) -> list[tuple[int, int]]:
    """Spans that never exceed ``limit`` tokens: paragraphs, else lines, else token-sized slices."""
    spans: list[tuple[int, int]] = []

    def split(start: int, end: int, level: int) -> None:
        piece = text[start:end]
        if count(piece) <= limit:
            spans.append((start, end))
            return
        pattern = [r"\n[ \t]*\n", r"\n", r"(?<=[.!?;,])\s+|\s+"][level] if level < 3 else None
        if pattern is None:  # no separator left: cut by characters to the limit
            lo = start
            while lo < end:
                hi = _longest_fitting(text, lo, end, count, limit)
                spans.append((lo, hi))
                lo = hi
            return
        cuts = [m.end() for m in re.finditer(pattern, piece)]
        bounds = [0, *[c for c in cuts if 0 < c < len(piece)], len(piece)]
        if len(bounds) == 2:
            split(start, end, level + 1)
            return
        for a, b in zip(bounds, bounds[1:]):
            if b > a:
                split(start + a, start + b, level + 1)

    split(0, len(text), 0)
    return spans


def chunk_text(
    text: str, count: Counter, chunk_tokens: int = CHUNK_TOKENS, overlap_tokens: int = OVERLAP_TOKENS
) -> list[tuple[int, int]]:
    """Cut ``text`` into spans of at most ``chunk_tokens`` tokens, at paragraph or line boundaries.

    Units (paragraphs; lines of a long paragraph; sentences or words of a long line) are packed
    greedily; the next span starts with the previous span's last units up to ``overlap_tokens``.

    Parameters
    ----------
    text : str
    count : callable
        ``str -> int``, tokens of the chunking tokenizer (cl100k_base in the pipeline).
    chunk_tokens : int
        Largest chunk, in tokens; ≥ 1.
    overlap_tokens : int
        Tokens repeated from the end of one chunk at the start of the next; ``0 ≤ overlap < chunk``.

    Returns
    -------
    list of (start, end)
        Character spans with surrounding whitespace trimmed, in order, covering every non-space
        character; each ``count(text[start:end]) <= chunk_tokens``.

    Raises
    ------
    ValueError
        ``chunk_tokens < 1`` or ``overlap_tokens`` outside ``[0, chunk_tokens)``.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be ≥ 1, got {chunk_tokens}")
    if not 0 <= overlap_tokens < chunk_tokens:
        raise ValueError(f"overlap_tokens must be in [0, {chunk_tokens}), got {overlap_tokens}")
    units = [(a, b) for a, b in _units(text, count, chunk_tokens) if text[a:b].strip()]
    sizes = [count(text[a:b]) for a, b in units]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(units):
        j, total = i, 0
        while j < len(units) and (j == i or total + sizes[j] <= chunk_tokens):
            total += sizes[j]
            j += 1
        # The sum of unit counts can differ from the joint count by a token at each seam.
        while j - i > 1 and count(text[units[i][0] : units[j - 1][1]]) > chunk_tokens:
            j -= 1
        spans.append(_trim(text, units[i][0], units[j - 1][1]))
        if j >= len(units):
            break
        k, back = j, 0
        while k - 1 > i and back + sizes[k - 1] <= overlap_tokens:
            k -= 1
            back += sizes[k]
        i = k
    return spans


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def locate(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Character spans of ``pieces`` in ``text``, searched in order (a corpus's given chunks).

    Raises
    ------
    ValueError
        A piece is not a substring of ``text``.
    """
    spans, pos = [], 0
    for n, piece in enumerate(pieces):
        at = text.find(piece, pos)
        if at < 0:
            at = text.find(piece)
        if at < 0:
            raise ValueError(f"piece {n} is not a substring of the document")
        spans.append((at, at + len(piece)))
        pos = at + len(piece)
    return spans


def make_chunks(
    document_key: str,
    text: str,
    headings: list[list],
    count: Counter,
    chunk_tokens: int = CHUNK_TOKENS,
    overlap_tokens: int = OVERLAP_TOKENS,
    given: list[list] | None = None,
) -> list[Chunk]:
    """Chunks of one document, with ids, token counts and heading paths.

    ``given`` (a corpus document's ``[[original_index, text], ...]``) is kept as it is: no
    re-chunking, so retrieval is judged on the corpus's own chunks.
    """
    if given is not None:
        spans = locate(text, [t for _, t in given])
        indices = [i for i, _ in given]
    else:
        spans = chunk_text(text, count, chunk_tokens, overlap_tokens)
        indices = list(range(len(spans)))
    out = []
    for index, (a, b) in zip(indices, spans):
        piece = text[a:b]
        out.append(
            Chunk(chunk_id(document_key, index, piece), index, a, b, piece, count(piece), heading_path_at(headings, a))
        )
    return out


def document_chunks(key: str, doc: dict, chunking, count: Counter) -> list[Chunk]:
    """A loaded document's chunks (``situate.resources.documents.reading.Document`` as JSON), at
    its kind's size: ``chunking.code_chunk_tokens`` for source code
    (:func:`situate.contextual.code_context.is_source`), else ``chunking.chunk_tokens``; a corpus
    entry's given chunks are kept (:func:`make_chunks`).

    Parameters
    ----------
    key : str
        The document's partition key.
    doc : dict
        Needs ``text``, ``format``, ``headings``; ``given_chunks`` optional.
    chunking : situate.resources.documents.docs.Chunking
    count : callable
        Tokens of a text (cl100k_base).

    Raises
    ------
    ValueError
        As :func:`chunk_text` (a size or overlap out of range).
    """
    from situate.contextual.code_context import is_source

    size = chunking.size_for(is_source(doc))
    return make_chunks(key, doc["text"], doc["headings"], count, size, chunking.overlap_tokens, doc.get("given_chunks"))
