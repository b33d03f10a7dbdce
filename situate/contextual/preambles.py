"""Fitting the document text a blurb prompt carries into the LLM's context window.

The prompt for one chunk is, in tokens of the loaded LLM's own tokenizer::

    head  +  document block  +  chunk block  +  tail   (+ max_tokens generated)  <=  n_ctx

``head``/``tail`` are the chat template's text around the user message (the "prompt
scaffolding"), the document block is ``<document>\\n{window}\\n</document>\\n`` and the chunk block is
the rest of Anthropic's published prompt around the chunk.  Each part is tokenized on its own and the
token lists are concatenated, so the count is exact by construction and the document part, the
prefix, is token-identical for every chunk of a window: llama.cpp reuses its KV cache.

When the whole document does not fit, it is cut into consecutive windows, each starting at the first
chunk not yet placed and running as far as the budget allows, on a cut that is both a token boundary
of the document's tokenization and a UTF-8 character boundary.  Every chunk lands in a window that
contains it whole, unless the chunk alone is larger than the budget (a tiny ``n_ctx``): it then gets
a window that starts where it starts and is cut to the budget, and the chunk itself is cut in the
prompt.  Nothing here raises for length.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Sequence

Count = Callable[[str], int]


@dataclasses.dataclass
class Window:
    """A stretch of the document shared as prompt prefix by the chunks inside it.

    Attributes
    ----------
    start, end : int
        Character offsets in the document text.
    n_tokens : int
        Exact LLM tokens of the document block holding ``text[start:end]``.
    chunks : list of int
        Positions (in the document's chunk list) of the chunks that use this window.
    contains_chunks : bool
        False only when a chunk is larger than the window budget.
    """

    start: int
    end: int
    n_tokens: int
    chunks: list[int]
    contains_chunks: bool = True


@dataclasses.dataclass
class FitPlan:
    """The fitted preambles of one document.

    Attributes
    ----------
    n_ctx, max_tokens : int
        The LLM context and the blurb's generation bound, in LLM tokens.
    scaffolding_tokens : int
        Chat-template tokens around the user message (head + tail).
    chunk_allowance : int
        LLM tokens reserved for the largest chunk block.
    budget : int
        LLM tokens left for the document block: ``n_ctx - max_tokens - chunk_allowance -
        scaffolding_tokens``.
    document_tokens : int
        LLM tokens of the whole document's block.
    windows : list of Window
    chunk_prompt_ends : list of int
        For each chunk, the character offset (within the chunk) where its prompt copy ends: the
        chunk's length unless it had to be cut to ``chunk_allowance``.
    reason : str
        Empty, or why no prompt fits at all (then ``windows`` is empty).
    """

    n_ctx: int
    max_tokens: int
    scaffolding_tokens: int
    chunk_allowance: int
    budget: int
    document_tokens: int
    windows: list[Window]
    chunk_prompt_ends: list[int]
    reason: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> FitPlan:
        d = dict(d)
        d["windows"] = [Window(**w) for w in d["windows"]]
        return cls(**d)


def _largest_fitting_end(text: str, start: int, cuts: Sequence[int], fits: Callable[[int, int], bool]) -> int:
    """Largest cut ``e > start`` in ``cuts`` with ``fits(start, e)``, or ``start`` if none."""
    lo = bisect.bisect_right(cuts, start)
    hi = len(cuts) - 1
    best = start
    while lo <= hi:  # token counts grow with the text, so bisect, then verify
        mid = (lo + hi) // 2
        if fits(start, cuts[mid]):
            best, lo = cuts[mid], mid + 1
        else:
            hi = mid - 1
    return best


def cut_to_tokens(text: str, limit: int, count: Count, cuts: Sequence[int] | None = None) -> int:
    """Largest character offset ``e`` (on a cut) with ``count(text[:e]) <= limit``; 0 if none."""
    cuts = cuts if cuts is not None else range(1, len(text) + 1)
    return _largest_fitting_end(text, 0, list(cuts), lambda a, b: count(text[a:b]) <= limit)


def fit_windows(
    text: str,
    spans: Sequence[tuple[int, int]],
    count_block: Count,
    budget: int,
    cuts: Sequence[int] | None = None,
    count_window: Callable[[int, int], int] | None = None,
) -> list[Window]:
    """Windows of ``text`` whose document block (``count_block(window)``) is ``<= budget`` tokens.

    Parameters
    ----------
    text : str
        The document.
    spans : sequence of (start, end)
        The chunks' character spans, in document order (overlaps allowed).
    count_block : callable
        ``window text -> LLM tokens of its document block``, exact.
    budget : int
        LLM tokens allowed for a document block.
    cuts : sequence of int, optional
        Allowed window ends, sorted: character offsets that are token boundaries of the document's
        own tokenization and character boundaries.  Default: every character offset.
    count_window : callable, optional
        ``(start, end) -> LLM tokens of the document block for text[start:end]``, exact; used
        instead of ``count_block`` when the block depends on more than the window's text (the
        chunk marks of a by-reference prompt).  Must grow with ``end``.

    Returns
    -------
    list of Window
        One window when the whole document fits; else consecutive windows.  Each chunk is in
        exactly one window's ``chunks``.
    """
    count = count_window or (lambda a, b: count_block(text[a:b]))
    full = count(0, len(text))
    if full <= budget:
        return [Window(0, len(text), full, list(range(len(spans))))]
    cut_list = sorted(set(cuts if cuts is not None else range(1, len(text) + 1)) | {len(text)})
    starts = [0] + cut_list

    def fits(a: int, b: int) -> bool:
        return count(a, b) <= budget

    windows: list[Window] = []
    i = 0
    while i < len(spans):
        a = starts[bisect.bisect_right(starts, spans[i][0]) - 1]  # a token boundary at or before
        e = _largest_fitting_end(text, a, cut_list, fits)
        members = []
        j = i
        while j < len(spans) and spans[j][1] <= e and spans[j][0] >= a:
            members.append(j)
            j += 1
        contains = bool(members)
        if not members:  # the chunk alone exceeds the budget: give it the window that starts with it
            members, j = [i], i + 1
        windows.append(Window(a, e, count(a, e), members, contains))
        i = j
    return windows


def token_cuts(text: str, pieces: Sequence[bytes]) -> list[int] | None:
    """Character offsets where a token ends and a character ends too.

    ``pieces`` are the byte strings of ``text``'s tokens in order.  Returns ``None`` when they do not
    join to ``text``'s UTF-8 bytes (a tokenizer that normalises, e.g. adds a leading space): then
    every character offset is a cut and counting alone keeps the budget exact.
    """
    data = text.encode("utf-8")
    if b"".join(pieces) != data:
        return None
    # character offset of each byte offset that starts a character
    char_at: dict[int, int] = {}
    byte = 0
    for n, ch in enumerate(text):
        char_at[byte] = n
        byte += len(ch.encode("utf-8"))
    char_at[byte] = len(text)
    out, pos = [], 0
    for p in pieces:
        pos += len(p)
        if pos in char_at:  # not inside a multi-byte character
            out.append(char_at[pos])
    return sorted(set(out))


def plan(
    text: str,
    chunk_spans: Sequence[tuple[int, int]],
    *,
    n_ctx: int,
    max_tokens: int,
    scaffolding_tokens: int,
    count_block: Count,
    count_chunk_block: Count,
    cuts: Sequence[int] | None = None,
    count_window: Callable[[int, int], int] | None = None,
) -> FitPlan:
    """Fit one document's prompts into ``n_ctx`` (see the module docstring).

    Parameters
    ----------
    text, chunk_spans
        The document and its chunks' character spans.
    n_ctx : int
        LLM context size, tokens.
    max_tokens : int
        Tokens reserved for the generated blurb.
    scaffolding_tokens : int
        Tokens of the chat template's head and tail.
    count_block, count_chunk_block : callable
        Exact LLM token counts of the document block for a window, and of the chunk block for a
        chunk's text.
    cuts, count_window : optional
        As :func:`fit_windows`.

    Returns
    -------
    FitPlan
        Never raises for length: when even an empty prompt does not fit, ``windows`` is empty and
        ``reason`` says why.
    """
    available = n_ctx - max_tokens - scaffolding_tokens
    whole = (lambda: count_window(0, len(text))) if count_window else (lambda: count_block(text))
    chunks = [text[a:b] for a, b in chunk_spans]
    sizes = [count_chunk_block(c) for c in chunks]
    empty_doc = count_block("")
    allowance = max(sizes, default=0)
    ends = [len(c) for c in chunks]
    if available - empty_doc - count_chunk_block("") <= 0:
        return FitPlan(
            n_ctx,
            max_tokens,
            scaffolding_tokens,
            0,
            0,
            whole(),
            [],
            ends,
            reason=(
                f"n_ctx {n_ctx} (SITUATE_N_CTX) leaves no room for a prompt: {max_tokens} tokens "
                f"reserved for the blurb, {scaffolding_tokens} for the chat template"
            ),
        )
    if allowance > (available - empty_doc) // 2:
        # Chunks too large for this context: cut each chunk's prompt copy to half the room.
        allowance = max(count_chunk_block(""), (available - empty_doc) // 2)
        wrap = count_chunk_block("")
        for n, c in enumerate(chunks):
            if sizes[n] > allowance:
                ends[n] = cut_to_tokens(c, allowance - wrap, lambda s: count_chunk_block(s) - wrap)
    budget = available - allowance
    windows = fit_windows(text, chunk_spans, count_block, budget, cuts, count_window)
    return FitPlan(
        n_ctx,
        max_tokens,
        scaffolding_tokens,
        allowance,
        budget,
        windows[0].n_tokens if len(windows) == 1 and windows[0].end == len(text) else whole(),
        windows,
        ends,
    )
