"""Shared-prefix batching: the batched path gives the sequential path's greedy output, token for
token, with the real blurb model on real text; and ``contextualize`` sends only uncached chunks
to a batch, in order (with a FAKE batch generator)."""

import importlib.util
from pathlib import Path

import pytest
from conftest import needs_models
from test_preambles import FRAME, builder, doc_and_spans  # noqa: F401  (FAKE tokenizer helpers)


def _real_document() -> tuple[str, list[str]]:
    """The first 3,600 characters of python-dotenv's main.py, in 4 chunks cut at line ends."""
    text = Path(importlib.util.find_spec("dotenv.main").origin).read_text()[:3600]
    text = text[: text.rfind("\n") + 1]
    cuts, size = [0], len(text) // 4
    for k in range(1, 4):
        cuts.append(text.rfind("\n", 0, k * size) + 1)
    cuts.append(len(text))
    return text, [text[a:b] for a, b in zip(cuts, cuts[1:])]


@needs_models
@pytest.mark.models
def test_batched_greedy_output_equals_sequential_token_for_token():
    from situate.contextual.document_blurbs import STOP
    from situate.contextual.fitting import prompt_builder
    from situate.pipelines.settings import resources_from_env

    llm = resources_from_env(plain=True)["llm"].model_copy(update={"batch": 3})
    b = prompt_builder(llm)
    text, chunks = _real_document()
    spans = [(text.index(c), text.index(c) + len(c)) for c in chunks]
    prefix = b.window_prefix(text, spans, 0, len(text))  # the default prompt's, by reference or not
    suffixes = [b.suffix(c, i) for i, c in enumerate(chunks)]
    L = llm.load()
    L.reset()
    sequential = [llm.generate(prefix + s, stop=STOP) for s in suffixes]
    batcher = llm.batcher(STOP)
    assert llm.batcher(STOP) is batcher  # one per process and settings
    batched = batcher.generate(prefix, suffixes)  # a batch of 3, then a batch of 1
    assert [g.text for g in batched] == [g.text for g in sequential]
    assert [g.generated for g in batched] == [g.generated for g in sequential]
    assert any(g.generated > 5 for g in batched)  # real blurbs, not empty answers
    # the prefix is evaluated once: by the first prompt, then reused by the second batch
    assert batched[0].evaluated == len(prefix) + len(suffixes[0])
    assert [g.evaluated for g in batched[1:]] == [len(s) for s in suffixes[1:]]
    assert all(g.prompt_tokens == len(prefix) + len(s) for g, s in zip(batched, suffixes))
    # another document afterwards: its prefix replaces the old one
    other = b.window_prefix(chunks[2] + chunks[1], [(0, len(chunks[2]))], 0, len(chunks[2] + chunks[1]))
    again = batcher.generate(other, suffixes[:1])
    L.reset()
    assert again[0].text == llm.generate(other + suffixes[0], stop=STOP).text


class FakeBatch:
    """FAKE ``generate_batch``: records the suffixes it gets and answers one blurb per suffix."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, prefix, suffixes):
        from situate.resources.models.llm import Generation

        self.calls.append(len(suffixes))
        return [
            Generation(
                f"This part lists the wörd items, number {n}.", len(prefix) + len(s), len(s), len(prefix), 9, 0.5
            )
            for n, s in enumerate(suffixes)
        ]


def test_contextualize_batches_only_uncached_chunks_in_order(fake_tokenizer, tmp_path):
    from situate.contextual.contextualize import contextualize
    from situate.contextual.fitting import fit_document
    from situate.resources.store.cache import BlurbCache, digest

    text, spans = doc_and_spans(5)
    b = builder(fake_tokenizer)
    plan = fit_document(text, spans, b, n_ctx=8192, max_tokens=32)
    chunks = [text[a:z] for a, z in spans]
    cache = BlurbCache(tmp_path / "blurbs")
    key = lambda w, c: digest("fake", w, c)  # noqa: E731
    # chunk 1 and 3 already cached (say, from a run that stopped half-way)
    for i in (1, 3):
        cache.put(
            key(text, chunks[i][: plan.chunk_prompt_ends[i]]),
            {"raw": "This part lists the wörd items, cached.", "prompt_tokens": 1, "generated": 1},
        )

    def sequential(tokens):
        raise AssertionError("the sequential path is not used when a batch generator is given")

    batch = FakeBatch()
    recs = contextualize(text, chunks, plan, b, sequential, cache=cache, cache_key=key, generate_batch=batch)
    assert batch.calls == [3]
    assert [r.cached for r in recs] == [False, True, False, True, False]
    assert [r.blurb for r in recs if not r.cached] == [f"This part lists the wörd items, number {n}." for n in range(3)]
    # the batch's outputs were cached: a second pass makes no call
    recs2 = contextualize(text, chunks, plan, b, sequential, cache=cache, cache_key=key, generate_batch=batch)
    assert batch.calls == [3] and all(r.cached for r in recs2)
