"""Issue 23 end to end with the real default models on small real files: chunks by reference,
the modes, and edits that re-situate only what changed.

The documents are real text not written for this project: python-dotenv's ``main.py`` (each
chunk a different function: loading, parsing, writing keys, finding the file) as installed with
the project.  The end-to-end tests' small settings (``n_ctx`` 768, 120-token chunks, 24-token
blurbs) keep this quick on 2 cores.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest
from conftest import every_kind, needs_models, small_settings

pytestmark = [needs_models, pytest.mark.models]

DOTENV = Path(importlib.util.find_spec("dotenv.main").origin)


def _ingest(docs, home, **env):
    from situate.pipelines.operations import ingest
    from situate.pipelines.settings import restored_env

    settings = every_kind(small_settings(docs, home), env)
    with restored_env(tuple(settings) + ("SITUATE_CONTEXT", "SITUATE_CODE_CONTEXT", "SITUATE_PROMPT")):
        os.environ.update(settings)
        return ingest(str(docs), str(home), echo=lambda *_: None)


def _rows(home):
    from situate.resources.store.store import Store

    cols = [
        "source",
        "chunk_index",
        "text",
        "blurb",
        "blurb_status",
        "context_mode",
        "llm_model",
        "blurb_doc_sha256",
        "doc_sha256",
    ]
    return sorted(Store(home=str(home)).columns(cols).to_pylist(), key=lambda r: (r["source"], r["chunk_index"]))


_STOP = set(
    "this chunk about that with from into which what used uses using file files function class method data".split()
)


def _stems(text: str) -> set[str]:
    """Content words of 4+ letters, cut to 5 letters (``rewriting`` and ``rewrite`` meet)."""
    return {w[:5] for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in _STOP}


@pytest.fixture(scope="module")
def by_reference(tmp_path_factory):
    docs, home = tmp_path_factory.mktemp("docs"), tmp_path_factory.mktemp("home")
    lines = DOTENV.read_text().splitlines(keepends=True)
    (docs / "main.py").write_text("".join(lines[:260]))
    summary = _ingest(docs, home, SITUATE_PROMPT="by-reference")
    return {"docs": docs, "home": home, "summary": summary}


def test_by_reference_gives_each_chunk_its_own_blurb(by_reference):
    rows = _rows(by_reference["home"])
    s = by_reference["summary"]
    assert len(rows) >= 8 and s.model_calls == len(rows) and s.failed == {}
    assert all(r["context_mode"] == "chunk:by-reference" for r in rows)
    blurbs = [r["blurb"] for r in rows if r["blurb_status"] == "model"]
    assert len(blurbs) >= 0.8 * len(rows) and len(set(blurbs)) == len(blurbs)  # no two chunks share one
    # a blurb shares more words with its own chunk than with the other chunks on average, for most
    # chunks (a blurb given to the wrong chunk would not)
    closer = 0
    for i, r in enumerate(rows):
        words = _stems(r["blurb"])
        others = [len(words & _stems(x["text"])) for j, x in enumerate(rows) if j != i]
        closer += len(words & _stems(r["text"])) > sum(others) / len(others)
    assert closer >= 2 / 3 * len(rows), (closer, len(rows))
    # the marks are in no column of the table
    assert not any("[chunk" in (r["blurb"] + r["text"]) for r in rows)
    # each chunk went through the model once, inside the document: its prompt suffix is short
    per_call = s.prompt_tokens_evaluated / s.model_calls
    assert per_call < 0.75 * sum(len(r["text"]) for r in rows) / len(rows), per_call


def test_a_one_line_edit_costs_only_the_changed_chunks(by_reference, tmp_path):
    docs, home = by_reference["docs"], by_reference["home"]
    before = _rows(home)
    text = (docs / "main.py").read_text()
    target = next(r for r in before[len(before) // 2 :] if "return" in r["text"])
    line = next(x for x in target["text"].splitlines() if "return" in x)
    (docs / "main.py").write_text(text.replace(line, line + "  # edited", 1))
    s = _ingest(docs, home, SITUATE_PROMPT="by-reference")
    after = _rows(home)
    changed = [r for r in after if r["text"] not in {b["text"] for b in before}]
    assert 1 <= len(changed) <= 2 and len(after) == len(before)
    assert s.model_calls == len(changed) and s.blurbs_kept == len(after) - len(changed)
    new_sha = after[0]["doc_sha256"]
    assert new_sha != before[0]["doc_sha256"]
    for r in after:  # each row names the document version its blurb was written against
        assert r["blurb_doc_sha256"] == (new_sha if r in changed else before[0]["doc_sha256"])


@pytest.fixture(scope="module")
def modes(tmp_path_factory):
    docs, home = tmp_path_factory.mktemp("docs"), tmp_path_factory.mktemp("home")
    lines = DOTENV.read_text().splitlines(keepends=True)
    (docs / "main.py").write_text("".join(lines[:120]))
    import json

    (docs / "package-lock.json").write_text(
        json.dumps(
            {
                "name": "web",
                "lockfileVersion": 3,
                "packages": {
                    f"node_modules/pkg-{i}": {"version": f"1.0.{i}", "integrity": f"sha512-{'ab' * 40}{i}"}
                    for i in range(30)
                },
            },
            indent=2,
        )
    )
    return docs, home


def test_each_mode_names_itself_and_a_mode_already_computed_costs_no_call(modes):
    docs, home = modes
    first = _ingest(docs, home, SITUATE_CONTEXT="document")
    rows = _rows(home)
    code = [r for r in rows if r["source"] == "main.py"]
    assert first.model_calls == 1  # one summary for main.py; the lock file gets none
    assert {r["context_mode"] for r in code} == {"document"} and len({r["blurb"] for r in code}) == 1
    assert code[0]["blurb"] and code[0]["llm_model"]
    lock = [r for r in rows if r["source"] == "package-lock.json"]
    assert lock and all(r["blurb_status"] == "skipped:lock-file" and r["llm_model"] == "" for r in lock)

    s = _ingest(docs, home, SITUATE_CONTEXT="structure")
    rows = _rows(home)
    assert s.model_calls == 0 and s.ingested == 2
    assert all(
        r["context_mode"] == "structure"
        and r["blurb"] == ""
        and r["llm_model"] == ""
        and r["blurb_status"] == "skipped:structure"
        for r in rows
    )

    s = _ingest(docs, home, SITUATE_CONTEXT="extract")  # the lead sentences: no LLM call
    lead = [r for r in _rows(home) if r["source"] == "main.py"]
    assert s.model_calls == 0 and {r["context_mode"] for r in lead} == {"extract"}
    assert {r["blurb_status"] for r in lead} == {"skipped:extract"} and {r["llm_model"] for r in lead} == {""}
    assert len({r["blurb"] for r in lead}) == 1 and lead[0]["blurb"]

    s = _ingest(docs, home, SITUATE_CONTEXT="document")  # computed before: from the cache
    assert s.model_calls == 0 and s.ingested == 2
    assert [r["blurb"] for r in _rows(home) if r["source"] == "main.py"] == [r["blurb"] for r in code]

    s = _ingest(docs, home, SITUATE_CONTEXT="chunk", SITUATE_PROMPT="by-reference")
    by_ref = [r for r in _rows(home) if r["source"] == "main.py"]
    assert s.model_calls == len(by_ref) and {r["context_mode"] for r in by_ref} == {"chunk:by-reference"}
    s = _ingest(docs, home, SITUATE_CONTEXT="document")
    assert s.model_calls == 0
    s = _ingest(docs, home, SITUATE_CONTEXT="chunk", SITUATE_PROMPT="by-reference")
    assert s.model_calls == 0 and [r["blurb"] for r in _rows(home) if r["source"] == "main.py"] == [
        r["blurb"] for r in by_ref
    ]


def test_search_works_in_each_mode(modes):
    import situate

    docs, home = modes
    for mode in ("structure", "document"):
        _ingest(docs, home, SITUATE_CONTEXT=mode)
        hits = situate.search("where is the .env file found?", k=3, home=str(home))
        assert hits and hits[0].source == "main.py"


def test_one_generation_with_the_real_model_and_a_garbled_answer(tmp_path):
    """A window's blurbs in one generation by the real model; then the same answer garbled (a
    line dropped, one repeated, one emptied): those chunks fall back to their own calls, whose
    blurbs are exactly what chunks by reference give them, and no chunk is left without one."""
    from situate.contextual.chunking import make_chunks
    from situate.contextual.contextualize import contextualize
    from situate.contextual.document_blurbs import stops
    from situate.contextual.fitting import fit_bound, fit_document, prompt_builder
    from situate.contextual.prompts import BY_REFERENCE, BY_REFERENCE_WINDOW
    from situate.contextual.tokens import count_cl100k
    from situate.pipelines.settings import resources_from_env

    text = "".join(DOTENV.read_text().splitlines(keepends=True)[:140])
    chunks = make_chunks("k", text, [], count_cl100k, 160, 0)
    spans, texts = [(c.start, c.end) for c in chunks], [c.text for c in chunks]
    assert len(texts) >= 5
    llm = resources_from_env(plain=True)["llm"]

    def generate(tokens):
        return llm.generate(tokens, stop=stops(False))

    def generate_window(tokens, starts, max_tokens):
        return llm.generate_lines(tokens, starts, stop=stops(False), max_tokens=max_tokens)

    window_b = prompt_builder(llm, BY_REFERENCE_WINDOW, source=True)
    single_b = prompt_builder(llm, BY_REFERENCE, source=True)
    plan = fit_document(text, spans, window_b, llm.n_ctx, fit_bound(llm, window_b))
    assert len(plan.windows) == 1
    one = contextualize(text, texts, plan, window_b, generate, spans=spans, generate_window=generate_window)
    assert all(r.status == "model" and "[chunk" not in r.blurb for r in one)
    served = [i for i, r in enumerate(one) if "one-generation" in r.problems]
    assert len(served) >= 2  # the one generation wrote usable lines, not only fallbacks
    single = contextualize(
        text, texts, fit_document(text, spans, single_b, llm.n_ctx, llm.max_tokens), single_b, generate, spans=spans
    )
    for i, r in enumerate(one):  # a fallback's blurb is the by-reference blurb of that chunk
        if "one-generation" not in r.problems:
            assert r.blurb == single[i].blurb

    a, b, c = served[0], served[1], len(texts) - 1

    def garbled(tokens, starts, max_tokens):
        g = generate_window(tokens, starts, max_tokens)
        lines = g.text.split("\n")
        out = []
        for line in lines:
            if line.startswith(f"[chunk {b + 1}]"):
                continue  # dropped
            out.append(line)
            if line.startswith(f"[chunk {c + 1}]"):
                out.append(line)  # repeated
        g.text = "\n".join(out)
        return g

    again = contextualize(text, texts, plan, window_b, generate, spans=spans, generate_window=garbled)
    assert len(again) == len(texts) and all(r.blurb for r in again)
    assert "one-generation-fallback:missing" in again[b].problems and again[b].blurb == single[b].blurb
    assert "one-generation-fallback:repeated" in again[c].problems and again[c].blurb == single[c].blurb
    if a != 0:  # the first line's start is in the prompt, so chunk 1 cannot be dropped by garbling
        assert again[a].blurb == one[a].blurb


def test_one_generation_lines_stop_where_the_context_ends():
    """A one-generation sequence near the end of ``n_ctx`` begins a line only while the line can
    fit: fewer lines than asked come back (their chunks get their own calls), and llama.cpp's
    "Requested tokens exceed context window" is never raised (the codebase set's doc 52 asked
    for 8,203 tokens of an 8,192 context before this bound)."""
    from situate.contextual.document_blurbs import stops
    from situate.pipelines.settings import resources_from_env

    base = resources_from_env(plain=True)["llm"]
    llm = type(base)(**(base.model_dump() | {"n_ctx": 512, "max_tokens": 24}))
    tok = llm.tokenizer()
    prompt = tok.encode("Summarise each function of this file in one line.\n\n" + DOTENV.read_text())
    starts = [f"\n[chunk {i}] This chunk is about" for i in range(2, 12)]
    start_tokens = len(tok.encode(starts[0]))
    # room for the first line and at most a few more, never for all eleven
    tokens = prompt[: 512 - 24 - 3 * (start_tokens + 24)]
    g = llm.generate_lines(tokens, starts, stop=stops(False), max_tokens=24)
    begun = g.text.count("[chunk ")
    assert 1 <= begun < len(starts)
    assert len(tokens) + len(tok.encode(g.text)) <= 512
    assert g.generated >= 1 and g.evaluated >= len(tokens)
    # no room for even the first line: nothing is evaluated, nothing raised
    full = prompt[: 512 - 23]
    empty = llm.generate_lines(full, starts, stop=stops(False), max_tokens=24)
    assert (empty.text, empty.evaluated, empty.generated) == ("", 0, 0)
