import re

import pytest

from situate.contextual.chunking import chunk_id, chunk_text, heading_path_at, locate, make_chunks
from situate.contextual.tokens import count_cl100k
from situate.resources.documents.reading import markdown_headings


def words(text: str) -> int:
    """FAKE counter: whitespace-separated words."""
    return len(text.split())


PARAS = "\n\n".join(" ".join(f"p{p}w{w}" for w in range(30)) for p in range(10))


def test_spans_are_bounded_trimmed_and_cover_everything():
    spans = chunk_text(PARAS, words, chunk_tokens=70, overlap_tokens=0)
    assert all(words(PARAS[a:b]) <= 70 for a, b in spans)
    assert all(not PARAS[a].isspace() and not PARAS[b - 1].isspace() for a, b in spans)
    covered = set()
    for a, b in spans:
        covered.update(range(a, b))
    assert all(i in covered for i, ch in enumerate(PARAS) if not ch.isspace())
    # 30-word paragraphs, 70-word chunks: two whole paragraphs each, cut at blank lines
    assert len(spans) == 5
    assert all(PARAS[a:b].count("\n\n") == 1 for a, b in spans)


def test_overlap_repeats_the_last_paragraph():
    spans = chunk_text(PARAS, words, chunk_tokens=70, overlap_tokens=35)
    assert len(spans) == 9
    first, second = PARAS[spans[0][0] : spans[0][1]], PARAS[spans[1][0] : spans[1][1]]
    assert first.split("\n\n")[-1] == second.split("\n\n")[0]


def test_long_line_without_breaks_is_still_cut():
    text = " ".join(f"w{i}" for i in range(500))
    spans = chunk_text(text, words, chunk_tokens=64, overlap_tokens=0)
    assert all(words(text[a:b]) <= 64 for a, b in spans)
    assert " ".join(text[a:b] for a, b in spans).split() == text.split()


def test_unbreakable_token_run_is_cut_by_characters():
    text = "x" * 5000
    spans = chunk_text(text, count_cl100k, chunk_tokens=100, overlap_tokens=0)
    assert "".join(text[a:b] for a, b in spans) == text
    assert all(count_cl100k(text[a:b]) <= 100 for a, b in spans)


def test_real_tokenizer_bounds_on_real_text():
    import inspect

    import bm25s.tokenization as mod

    text = inspect.getsource(mod)
    spans = chunk_text(text, count_cl100k, 200, 20)
    sizes = [count_cl100k(text[a:b]) for a, b in spans]
    assert max(sizes) <= 200 and len(spans) >= len(text) // 2000
    # code is cut at line ends
    assert all(b == len(text.rstrip()) or text[b] == "\n" for a, b in spans)


def test_bad_settings_raise():
    with pytest.raises(ValueError):
        chunk_text("a", words, 0, 0)
    with pytest.raises(ValueError):
        chunk_text("a", words, 10, 10)


def test_heading_paths_follow_levels():
    md = "# Guide\nintro\n## Install\nsteps\n### From source\nmake\n## Use\nrun\n"
    hs = markdown_headings(md)
    assert [h[1:] for h in hs] == [[1, "Guide"], [2, "Install"], [3, "From source"], [2, "Use"]]
    assert heading_path_at(hs, md.index("make")) == ["Guide", "Install", "From source"]
    assert heading_path_at(hs, md.index("run")) == ["Guide", "Use"]
    assert heading_path_at(hs, 0) == ["Guide"]


def test_headings_inside_code_fences_are_ignored():
    md = "# Title\n```\n# not a heading\n```\ntext\n"
    assert [h[2] for h in markdown_headings(md)] == ["Title"]


def test_chunk_ids_are_stable_and_content_addressed():
    a = make_chunks("doc.md", PARAS, [], words, 70, 0)
    b = make_chunks("doc.md", PARAS, [], words, 70, 0)
    assert [c.chunk_id for c in a] == [c.chunk_id for c in b]
    assert a[0].chunk_id == chunk_id("doc.md", 0, a[0].text)
    assert re.fullmatch(r"doc\.md:0:[0-9a-f]{12}", a[0].chunk_id)
    changed = make_chunks("doc.md", PARAS.replace("p0w0", "CHANGED"), [], words, 70, 0)
    assert changed[0].chunk_id != a[0].chunk_id and changed[1].chunk_id == a[1].chunk_id


def test_given_chunks_are_kept_with_their_indices():
    text = "alpha beta\n\ngamma delta\n\nalpha beta"
    given = [[0, "alpha beta"], [1, "gamma delta"], [2, "alpha beta"]]
    out = make_chunks("c", text, [], words, given=given)
    assert [(c.index, c.start, c.end) for c in out] == [(0, 0, 10), (1, 12, 23), (2, 25, 35)]
    with pytest.raises(ValueError):
        locate(text, ["missing"])


def test_longest_fitting_prefix_is_exact_with_few_counts(fake_tokenizer):
    """With a FAKE monotone counter (UTF-8 bytes) the cut is exactly the largest fitting prefix,
    found in a handful of counts, for any limit and any mix of 1- to 4-byte characters."""
    import random

    from situate.contextual.chunking import _longest_fitting

    rng = random.Random(5)
    alphabet = "aé東🚀"
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3000)))
        limit = rng.randint(1, 900)
        calls = []

        def count(s):
            calls.append(1)  # noqa: B023 (called within this iteration)
            return fake_tokenizer.count(s)

        hi = _longest_fitting(text, 0, len(text), count, limit)
        if count(text[:1]) > limit:
            assert hi == 1
            continue
        assert count(text[:hi]) <= limit
        assert hi == len(text) or count(text[: hi + 1]) > limit
        assert len(calls) <= 30


def test_each_kind_is_cut_at_its_own_size():
    """Source code at SITUATE_CODE_CHUNK_TOKENS, prose at SITUATE_CHUNK_TOKENS, on real files:
    this package's own chunking module and its README."""
    from pathlib import Path

    from situate.contextual.chunking import document_chunks
    from situate.resources.documents.docs import Chunking

    root = Path(__file__).resolve().parent.parent
    code = {"text": (root / "situate/contextual/chunking.py").read_text(), "format": "code", "headings": []}
    prose = {"text": (root / "README.md").read_text(), "format": "markdown", "headings": []}
    chunking = Chunking(chunk_tokens=400, code_chunk_tokens=150, overlap_tokens=10)
    code_sizes = [c.n_tokens for c in document_chunks("k", code, chunking, count_cl100k)]
    prose_sizes = [c.n_tokens for c in document_chunks("k", prose, chunking, count_cl100k)]
    assert max(code_sizes) <= 150 < max(prose_sizes) <= 400
    assert sum(code_sizes) >= count_cl100k(code["text"])  # nothing left out (overlap adds)
