"""Late chunking (Günther et al. 2024, "Late Chunking: Contextual Chunk Embeddings Using
Long-Context Embedding Models", arXiv 2409.04701): embed the document whole, token by token, and
pool each chunk's own token span, so a chunk's vector carries what the document around it says,
with no LLM call.

A document longer than the embedder's window is read in overlapping windows (the paper's "long
late chunking" reads macro chunks; here windows overlap by :data:`OVERLAP`): each token's vector is
taken from the window whose middle it is closest to.  A chunk's vector is the mean of its tokens' vectors,
L2-normalised; a query's is the mean of
all its tokens' vectors (nomic-embed-text-v1.5's own mean pooling).

Plain functions: the tokenizer and the per-token model come in as functions
(:class:`situate.resources.models.token_embedder.TokenEmbedder` gives both for a GGUF embedder).

Examples
--------
>>> import numpy as np
>>> tok = lambda s: [len(w) for w in s.split()]             # a token a word, its id its length
>>> vecs = lambda ids: np.eye(8, dtype=np.float32)[ids]      # a one-hot vector a token
>>> v = chunk_vectors(["ab c", " defg"], tok, vecs, window=10, head=[], tail=[])
>>> v.shape, bool(v[1, 4] > 0.99)
((2, 8), True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

#: Share of a window read again by the next one: a quarter, so a token near a window's edge is
#: taken from the next window with at least an eighth of a window of context on each side, for
#: 1.33x the tokens of one pass (half overlap would cost 2x; 2 cores read about 300 tokens a second
#: of nomic-embed-text-v1.5).  Written for situate.
OVERLAP = 0.25


def windows(n: int, size: int, overlap: float = OVERLAP) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of token positions ``0..n`` read together: ``size`` tokens each,
    each starting ``size * (1 - overlap)`` after the previous (the last one ends at ``n``);
    ``[(0, n)]`` when it fits.

    Raises
    ------
    ValueError
        ``size`` under 2, or ``overlap`` outside ``[0, 1)``.
    """
    if size < 2:
        raise ValueError(f"a late-chunking window of {size} tokens is too small")
    if not 0 <= overlap < 1:
        raise ValueError(f"a late-chunking overlap of {overlap} is outside [0, 1)")
    if n <= size:
        return [(0, n)]
    step = max(1, int(size * (1 - overlap)))
    starts = list(range(0, n - size, step)) + [n - size]
    return [(s, s + size) for s in starts]


def owner_window(n: int, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """For each position ``0..n-1`` the index of the window in ``spans`` whose middle is nearest,
    among the windows holding it."""
    best = np.full(n, -1, np.int64)
    dist = np.full(n, np.inf)
    pos = np.arange(n)
    for w, (s, e) in enumerate(spans):
        d = np.abs(pos[s:e] - (s + e - 1) / 2)
        better = d < dist[s:e]
        best[s:e][better] = w
        dist[s:e][better] = d[better]
    return best


def chunk_vectors(
    chunks: Sequence[str],
    tokenize: Callable[[str], list[int]],
    token_vectors: Callable[[list[int]], np.ndarray],
    window: int,
    head: list[int],
    tail: list[int],
) -> np.ndarray:
    """Late-chunked vectors of one document's chunks.

    Parameters
    ----------
    chunks : list of str
        The document's chunks, in order (their concatenation is the document).
    tokenize : callable
        ``tokenize(text)``: token ids, no special tokens.  Each chunk is tokenized on its own and
        the ids are put end to end, so every chunk's span is exact.
    token_vectors : callable
        ``token_vectors(ids)``: ``float32[len(ids), dim]``, one vector per token of one sequence.
    window : int
        Most tokens the model reads at once, ``head`` and ``tail`` included.
    head, tail : list of int
        Ids put before and after every window (the classifier/BOS token and the document prefix
        such as ``search_document: ``; the separator/EOS token).

    Returns
    -------
    float32[len(chunks), dim]
        L2-normalised; a chunk with no token (empty text) gets the mean of its document's tokens.

    Raises
    ------
    ValueError
        ``window`` leaves fewer than 2 tokens for the document after ``head`` and ``tail``.
    """
    ids_each = [tokenize(c) for c in chunks]
    ids = [t for x in ids_each for t in x]
    bounds = np.cumsum([0] + [len(x) for x in ids_each])
    size = window - len(head) - len(tail)
    spans = windows(len(ids), size)
    owner = owner_window(len(ids), spans)
    per_token = None
    for w, (s, e) in enumerate(spans):
        out = np.asarray(token_vectors(head + ids[s:e] + tail), np.float32)[len(head) : len(head) + e - s]
        if per_token is None:
            per_token = np.zeros((len(ids), out.shape[1]), np.float32)
        mine = owner[s:e] == w
        per_token[s:e][mine] = out[mine]
    if per_token is None:  # a document with no token at all
        per_token = np.asarray(token_vectors(head + tail), np.float32)[:0]
    doc_mean = per_token.mean(0) if len(per_token) else None
    vecs = []
    for i in range(len(chunks)):
        part = per_token[bounds[i] : bounds[i + 1]]
        v = part.mean(0) if len(part) else doc_mean
        vecs.append(v)
    return normalised(np.stack(vecs))


def normalised(v: np.ndarray) -> np.ndarray:
    """Rows L2-normalised (a zero row stays zero)."""
    v = np.asarray(v, np.float32)
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(n > 0, n, 1)
