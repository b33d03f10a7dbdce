"""Late chunking's pooling (situate/contextual/late_chunking.py): each chunk pools exactly its own tokens,
each token is read in the window where it is most central, and the special tokens and document
prefix go around every window.  The per-token model is a fake (one-hot vectors), named as such:
what is tested is the bookkeeping; the real model runs in tests/test_fusion_cv_e2e.py."""

import numpy as np
import pytest

from situate.contextual.late_chunking import chunk_vectors, owner_window, windows


def test_windows_cover_every_position_with_the_overlap():
    assert windows(5, 8) == [(0, 5)]
    spans = windows(100, 20, overlap=0.25)
    assert spans[0] == (0, 20) and spans[-1] == (80, 100)
    assert all(e - s == 20 for s, e in spans)
    assert all(b[0] - a[0] <= 15 for a, b in zip(spans, spans[1:]))  # a quarter read again
    with pytest.raises(ValueError, match="too small"):
        windows(10, 1)
    with pytest.raises(ValueError, match="outside"):
        windows(10, 4, overlap=1.0)


def test_each_position_is_read_where_it_is_most_central():
    spans = [(0, 10), (5, 15)]
    owner = owner_window(15, spans)
    # middles 4.5 and 9.5: 0..6 nearer the first, 7 as near to both (kept by the first), 8.. the second
    assert owner.tolist() == [0] * 8 + [1] * 7


def test_a_chunk_pools_only_its_own_tokens_read_with_the_head_and_tail():
    calls = []

    def fake_token_vectors(ids):  # FAKE model: a one-hot vector per token id
        calls.append(list(ids))
        return np.eye(50, dtype=np.float32)[ids]

    def tokenize(text):  # a token a word: its id is the word's number
        return [int(w) for w in text.split()]

    chunks = [" ".join(str(i) for i in range(10, 20)), " " + " ".join(str(i) for i in range(20, 40))]
    v = chunk_vectors(chunks, tokenize, fake_token_vectors, window=14, head=[1, 2], tail=[3])
    assert v.shape == (2, 50)
    assert np.allclose(np.linalg.norm(v, axis=1), 1)
    assert np.count_nonzero(v[0]) == 10 and set(np.flatnonzero(v[0])) == set(range(10, 20))
    assert set(np.flatnonzero(v[1])) == set(range(20, 40))
    assert all(c[:2] == [1, 2] and c[-1] == 3 and len(c) <= 14 for c in calls)
    assert len(calls) > 1  # 30 tokens in 11-token windows
