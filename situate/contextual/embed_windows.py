"""Chunks that fit the embedder: a chunk longer than the embedder's window is
embedded in pieces, each with the chunk's structural context and blurb, and the chunk is scored
by its best piece (max-sim over its vectors).

The text embedded is the structural context + blurb + chunk, while the default embedder
(bge-small-en-v1.5) reads 512 WordPiece tokens: the docs set's labelled chunks average 3,700
characters (about 900 tokens), so the end of most of them never reached a vector.  situate's own
chunks are now sized to fit (prose 300, code 200 cl100k tokens: :mod:`situate.contextual.chunking`);
pieces are for chunks given by a corpus or set larger, and keep the chunk as the unit of retrieval.

Plain functions (no Dagster); the tokenizer comes in as a function, so any embedder's fits.

Examples
--------
>>> spans = lambda s: [(i, i + 1) for i in range(len(s))]   # one token a character
>>> pieces("ctx", "abcdefgh", spans, budget=3)
['abc', 'def', 'gh']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Fewest chunk tokens a piece carries: where the context and blurb leave less than this of the
#: embedder's window, pieces still carry this many and the embedder cuts the piece's end (the
#: blurb is 480 characters at most, about 120 tokens, so with a 512-token window this does not
#: happen).  Written for situate.
MIN_PIECE_TOKENS = 64
#: A piece ends at the last line break in its final quarter, when there is one, so a line of code
#: or prose is not split between two pieces.  Written for situate.
LINE_BREAK_SLACK = 0.25


def pieces(head: str, chunk: str, spans: Callable[[str], Sequence[tuple[int, int]]], budget: int) -> list[str]:
    """``chunk`` cut into consecutive pieces of at most ``budget`` tokens each (``head`` is not
    part of them; the caller puts it before each).

    Parameters
    ----------
    head : str
        The structural context and blurb that go before each piece (only for the docstring's
        symmetry with :func:`piece_texts`; not counted here).
    chunk : str
    spans : callable
        ``spans(text)`` gives each token's ``(start, end)`` character offsets in ``text`` (the
        embedder's tokenizer without special tokens), in order.
    budget : int
        Most tokens of ``chunk`` in one piece (at least 1).

    Returns
    -------
    list of str
        Pieces whose concatenation is ``chunk``; ``[chunk]`` when it fits.
    """
    offs = list(spans(chunk))
    budget = max(1, int(budget))
    if len(offs) <= budget:
        return [chunk]
    out, start, t = [], 0, 0
    while t + budget < len(offs):
        end_tok = t + budget
        cut = offs[end_tok][0]  # the start of the first token not in this piece
        nl = chunk.rfind("\n", offs[t][0], cut)
        floor = offs[t + int(budget * (1 - LINE_BREAK_SLACK))][0]
        if nl >= floor:
            cut = nl + 1
        out.append(chunk[start:cut])
        start = cut
        while t < len(offs) and offs[t][0] < cut:
            t += 1
    out.append(chunk[start:])
    return [p for p in out if p]


def piece_texts(
    rows: Sequence[dict],
    compose: Callable[[str, str, str], str],
    spans: Callable[[str], Sequence[tuple[int, int]]],
    window: int,
) -> tuple[list[str], list[int]]:
    """The texts to embed for ``rows``: each chunk's pieces, each composed with its context and
    blurb.

    Parameters
    ----------
    rows : list of dict
        ``{"text", "context", "blurb"}`` each.
    compose : callable
        ``compose(blurb, piece, context)``: the text embedded
        (:func:`situate.resources.store.retrieval.contextualized_text`).
    spans : callable
        As :func:`pieces`.
    window : int
        The embedder's tokens for the text, its prefix and special tokens left out.

    Returns
    -------
    (texts, owner)
        ``texts[i]`` belongs to ``rows[owner[i]]``; every row has at least one.
    """
    texts, owner = [], []
    for n, r in enumerate(rows):
        head_tokens = len(spans(compose(r.get("blurb") or "", "", r.get("context") or "")))
        budget = max(MIN_PIECE_TOKENS, window - head_tokens)
        for p in pieces(compose(r.get("blurb") or "", "", r.get("context") or ""), r["text"], spans, budget):
            texts.append(compose(r.get("blurb") or "", p, r.get("context") or ""))
            owner.append(n)
    return texts, owner


def max_sim_rankings(
    query_vectors: np.ndarray, piece_vectors: np.ndarray, owner: Sequence[int], ids: Sequence[str], depth: int = 150
) -> list[list[str]]:
    """Top-``depth`` chunk ids per query, each chunk scored by its best piece.

    Parameters
    ----------
    query_vectors : float32[n_queries, dim]
    piece_vectors : float32[n_pieces, dim]
        L2-normalised, in the order of :func:`piece_texts`.
    owner : sequence of int
        ``n_pieces`` row indexes into ``ids``.
    ids : sequence of str
        The chunks' ids.
    """
    sims = np.asarray(query_vectors, np.float32) @ np.asarray(piece_vectors, np.float32).T
    owner = np.asarray(owner)
    best = np.full((sims.shape[0], len(ids)), -np.inf, np.float32)
    np.maximum.at(best.T, owner, sims.T)
    depth = min(depth, len(ids))
    top = np.argsort(-best, axis=1, kind="stable")[:, :depth]
    return [[ids[j] for j in row] for row in top]
