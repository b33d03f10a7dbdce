"""A document summary is the context of every chunk of its document: sentences that restate the
prompt, name a library the document never uses, or call it what it is not are dropped, on real
text (httpx's ``_client.py``, a package's Markdown README, the labelled corpora's committed
summaries)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from situate.contextual.contextualize import BlurbRecord
from situate.contextual.document_blurbs import grounded_summary
from situate.contextual.summary_grounding import ground_summary, summary_language, summary_problems

ROOT = Path(__file__).resolve().parent.parent


def _httpx_client() -> str:
    return (Path(importlib.util.find_spec("httpx").origin).parent / "_client.py").read_text()


def test_a_library_the_code_never_imports_is_dropped_and_one_it_imports_kept():
    doc = _httpx_client()
    assert "requests" in doc and "import requests" not in doc  # the word, not the library
    summary = (
        "This document defines the `Client` class for making HTTP requests using the `requests` library. "
        "It uses the `typing` module for its annotations."
    )
    language = summary_language({"format": "code", "source": "httpx/_client.py", "text": doc})
    assert language == "python"
    text, tags = ground_summary(summary, doc, language)
    assert text == "It uses the `typing` module for its annotations." and tags == ["ungrounded"]


def test_a_markdown_page_called_a_python_script_loses_that_sentence():
    readme = importlib.metadata.metadata("bm25s").get_payload()
    assert "import bm25s" in readme  # a page with Python in it, still a page
    summary = "This document is a Python script that indexes a corpus. It describes BM25 search with bm25s."
    text, tags = ground_summary(summary, readme, summary_language({"format": "markdown", "text": readme}))
    assert text == "It describes BM25 search with bm25s." and tags == ["wrong-kind"]
    # the same claim of a Python file stands; of a Rust file it does not
    assert summary_problems("This document is a Python script.", readme, "python") == []
    assert summary_problems("This document is a Python script.", readme, "rust") == ["wrong-kind: is a Python script"]


def test_the_prompt_restated_is_dropped_and_a_summary_clause_cut():
    doc = "Examples of API errors when using the Amazon Bedrock API, and the prompts that cause them."
    summary = (  # docs-qwen2.5-coder-0.5b-document, page_32 and doc_15 (committed blurb files)
        "This document contains examples of API errors when using the Amazon Bedrock API. "
        "Also includes a summary of what this document is and what it contains, of its chunks. "
        "It includes the prompts that cause them, as well as a summary of its functionality."
    )
    text, tags = ground_summary(summary, doc, "prose")
    assert text == (
        "This document contains examples of API errors when using the Amazon Bedrock API. "
        "It includes the prompts that cause them."
    )
    assert tags == ["restated"]


def test_a_summary_left_empty_falls_back_to_the_structural_context():
    raw = "This document provides a concise summary of what the document is and what it contains."
    rec = BlurbRecord(raw, "model", raw, [], 100, 100, 0, 20, 1.0, 0)
    out = grounded_summary(rec, "# Tool use\n\nHow tool use works with Claude.", "prose")
    assert (out.blurb, out.status, out.problems) == ("", "fallback:restated", ["restated"])
    kept = BlurbRecord("This document explains tool use.", "model", "", [], 0, 0, 0, 0, 0.0, 0)
    assert grounded_summary(kept, "# Tool use\n\nHow tool use works.", "prose") is kept


def test_no_committed_summary_is_flagged_after_grounding_and_few_are_emptied():
    sys.path.insert(0, str(ROOT))
    from benchmarks.summary_grounding import CORPORA, count, load_corpus

    docs = load_corpus(CORPORA["docs"])
    r = count(ROOT / "benchmarks" / "blurbs" / "docs-qwen2.5-coder-0.5b-document.jsonl.gz", docs)["counts"]
    assert r["texts"] == 45 and r["flagged before"] >= 5  # prompt wording in the summaries shown today
    assert r.get("flagged after", 0) == 0
    assert r.get("emptied", 0) <= 2  # "a concise summary of what the document is" and little else


def test_a_chunks_blurb_gets_the_library_and_prompt_checks_too():
    from situate.contextual.cleaning import clean_blurb

    doc = _httpx_client()
    chunk = doc[doc.index("class Client(") :][:1500]
    raw = (
        "This chunk defines the `Client` class for sending requests using the `requests` library. "
        "It is the synchronous client, which sends each request through a transport. "
        "Its purpose is not explicitly stated in the given text."
    )
    out = clean_blurb(raw, chunk, document=doc)
    assert out.text == "It is the synchronous client, which sends each request through a transport."
    assert "ungrounded" in out.problems and "restated" in out.problems
    assert clean_blurb(raw, chunk).text.startswith("This chunk defines the `Client` class")  # no document: kept


def test_no_committed_per_chunk_blurb_is_flagged_now():
    sys.path.insert(0, str(ROOT))
    from benchmarks.summary_grounding import CORPORA, count, load_corpus

    docs = load_corpus(CORPORA["codebase"])
    name = "codebase-qwen2.5-coder-0.5b-anthropic-2024-primed-about.jsonl.gz"
    r = count(ROOT / "benchmarks" / "blurbs" / name, docs)["counts"]
    assert r["texts"] == 737 and r["flagged before"] == 1  # doc_61: "the `pty` crate" of a file without one
    assert r.get("flagged after", 0) == 0
