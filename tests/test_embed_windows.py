"""Chunks in pieces that fit the embedder (situate/contextual/embed_windows.py): pieces cover the chunk, fit
the budget, end at line breaks, and the chunk is scored by its best piece."""

import re

import numpy as np

from situate.contextual.embed_windows import max_sim_rankings, piece_texts, pieces
from situate.resources.store.retrieval import contextualized_text


def _word_spans(text):
    return [m.span() for m in re.finditer(r"\S+", text)]


def test_pieces_cover_the_chunk_within_the_budget():
    chunk = "\n".join(" ".join(f"w{i}_{j}" for j in range(6)) for i in range(30))  # 30 lines of 6 words
    out = pieces("", chunk, _word_spans, budget=20)
    assert "".join(out) == chunk
    assert len(out) > 1
    assert all(len(_word_spans(p)) <= 20 for p in out)
    # each piece but the last ends at a line break (one lies in every piece's last quarter here)
    assert all(p.endswith("\n") for p in out[:-1])


def test_a_chunk_that_fits_is_one_piece():
    assert pieces("", "a b c", _word_spans, budget=3) == ["a b c"]


def test_a_line_longer_than_the_budget_is_cut_at_a_token():
    chunk = " ".join(f"t{i}" for i in range(50))  # no line break at all
    out = pieces("", chunk, _word_spans, budget=16)
    assert "".join(out) == chunk
    assert [len(_word_spans(p)) for p in out] == [16, 16, 16, 2]


def test_each_piece_carries_the_context_and_blurb():
    rows = [
        {"text": "\n".join(f"line {i} alpha beta" for i in range(40)), "context": "File: a.py", "blurb": "About x."},
        {"text": "short one", "context": "", "blurb": ""},
    ]
    texts, owner = piece_texts(rows, contextualized_text, _word_spans, window=100)
    assert owner[-1] == 1 and texts[-1] == "short one"
    first = [t for t, o in zip(texts, owner) if o == 0]
    assert len(first) > 1
    assert all(t.startswith("File: a.py\nAbout x.\n\n") for t in first)
    assert all(len(_word_spans(t)) <= 100 for t in first)
    assert "".join(t.split("\n\n", 1)[1] for t in first) == rows[0]["text"]


def test_a_chunk_is_scored_by_its_best_piece():
    # chunk "a" has two pieces, the second matching the query; chunk "b" one middling piece
    q = np.array([[1.0, 0.0]], np.float32)
    pv = np.array([[0.0, 1.0], [1.0, 0.0], [0.6, 0.8]], np.float32)
    assert max_sim_rankings(q, pv, [0, 0, 1], ["a", "b"]) == [["a", "b"]]
    # with only its first piece, "a" would rank below "b"
    assert max_sim_rankings(q, pv[[0, 2]], [0, 1], ["a", "b"]) == [["b", "a"]]
