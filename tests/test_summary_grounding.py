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
from situate.contextual.summary_grounding import absent_libraries, ground_summary, summary_language, summary_problems

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


#: The review's pages (review s6: grounding_false_drops.sh, grounding_prompt_leak.sh).
ROTATE = (
    "# Rotating keys\n\nThe signing service rotates its keys every night. Run this to rotate them by hand:\n\n"
    "```python\nimport signing\nsigning.rotate_keys(grace_period=3600)\n```\n\n"
    "The old key stays valid for the grace period.\n"
)
INSTALL = (
    "# Installing NumPy\n\nNumPy is the fundamental package for scientific computing in Python.\n"
    "Install it with pip:\n\n    pip install numpy\n\nor with conda:\n\n    conda install numpy\n"
)
SERVER = (
    "const express = require('express');\nconst app = express();\n\n"
    "app.get('/health', (req, res) => res.send('ok'));\napp.listen(3000);\n"
)


def _record(text: str) -> BlurbRecord:
    return BlurbRecord(text, "model", text, [], 100, 100, 0, 20, 1.0, 0)


def test_a_prose_page_with_a_code_example_keeps_its_summary_and_code_claims_are_still_dropped():
    # review s6, G2: the correct one-sentence summary was dropped as wrong-kind, the page left without one
    summary = (
        "This guide explains how to rotate the signing keys by hand and contains a Python code example "
        "that calls rotate_keys with a grace period."
    )
    assert ground_summary(summary, ROTATE, "prose") == (summary, [])
    rec = _record(summary)
    assert grounded_summary(rec, ROTATE, "prose") is rec  # status "model": every chunk keeps its context
    readme = importlib.metadata.metadata("bm25s").get_payload()
    for content in (
        "This document describes bm25s and contains a Python code example that indexes a corpus.",
        "It provides a Python script that rotates the keys.",
        "This page is a guide with a Python code snippet.",
        "It explains how to use bm25s as a Python module.",
    ):
        assert summary_problems(content, readme + ROTATE, "prose") == [], content
    for claim in (  # the page itself called code: what the rule is for
        "This document is a Python script that rotates keys.",
        "It is a Python module.",
        "This document is Python source code.",
        "This Python script rotates keys.",
        "The page serves as a Python program.",
        "This document is a Python file.",
    ):
        assert [p.split(":")[0] for p in summary_problems(claim, ROTATE, "prose")] == ["wrong-kind"], claim
    # of a code file another language's content is wrong too, and its own is not
    java = "public class Keys { void rotate() {} }"
    assert summary_problems("This file contains a Python script.", java, "java") == [
        "wrong-kind: contains a Python script"
    ]
    assert summary_problems("This file contains a Java class.", java, "java") == []


def test_a_library_the_document_loads_or_installs_is_grounded():
    # review s6, G3: both summaries were dropped as ungrounded
    express = "This file starts a web server with the Express framework that answers health checks on port 3000."
    assert ground_summary(express, SERVER, "javascript") == (express, [])
    numpy = "This guide explains how to install the NumPy package with pip or conda."
    assert ground_summary(numpy, INSTALL, "prose") == (numpy, [])
    uses = {  # document, its language, the library a sentence names
        "import express from 'express';\nexpress().listen(80);\n": ("javascript", "the Express framework"),
        "const { Router } = await import('express');\n": ("javascript", "the Express framework"),
        "export * from 'lodash';\n": ("typescript", "the `lodash` library"),
        "Install it:\n\n    npm install --save express\n": ("prose", "the `express` package"),
        'Then run `pip install -U "numpy>=2"`.\n': ("prose", "the `numpy` package"),
        "Add it with `cargo add serde_json`.\n": ("prose", "the `serde-json` crate"),
        "use crate::store::Table;\n\nfn main() {}\n": ("rust", "the `store` module"),
        'package main\n\nimport (\n\t"fmt"\n\t"github.com/gin-gonic/gin"\n)\n': ("go", "the Gin framework"),
    }
    for doc, (language, name) in uses.items():
        assert absent_libraries(f"It uses {name}.", doc, prose=language == "prose") == [], doc
    # a name the document never says, or says only as a word, is still absent
    plain = "# Arrays\n\nLists of numbers in plain Python. It sends requests to the server.\n"
    assert absent_libraries("It uses the NumPy package.", plain, prose=True) == ["NumPy"]
    assert absent_libraries("It uses the `requests` library.", plain, prose=True) == ["requests"]
    assert absent_libraries("It uses the `requests` library.", _httpx_client()) == ["requests"]


def test_the_prompt_restated_in_other_words_is_removed_without_leaving_a_fragment():
    from situate.contextual.cleaning import clean_blurb

    # review s6, G4: each of these was kept (the fourth as "This summary is.")
    doc = "# Refunds\n\nA refund is issued to the card that paid. Refunds over 500 EUR need a second approver.\n"
    first = "This document describes how refunds are approved."
    for second in (
        "It is useful for searching through the chunks of the document.",
        "I hope this summary helps with retrieving the chunks.",
        "The summary above is intended to help a search engine find the relevant chunks.",
        "This summary is for the purposes of improving search retrieval.",
    ):
        cleaned = clean_blurb(f"{first} {second}", "", document=doc)
        assert ground_summary(cleaned.text, doc, "prose")[0] == first, second
    assert clean_blurb("This summary is for the purposes of improving search retrieval.", "").text == ""
    # committed per-chunk blurbs (docs-qwen2.5-coder-0.5b-anthropic-2024-primed-about) whose cut left
    # "…, which is a crucial aspect of." and "…and its importance in.": the fragment is mended
    for raw, kept in {
        "This chunk is about how to reduce latency, which is a crucial aspect of improving search retrieval.": (
            "This chunk is about how to reduce latency."
        ),
        "This chunk is about the benefits of automated ticket routing and its importance in improving search "
        "retrieval.": "This chunk is about the benefits of automated ticket routing and its importance.",
    }.items():
        assert clean_blurb(raw, "").text == kept, raw
    # the default model's own summary of the review's page (greedy, qwen2.5-coder-0.5b): the clause goes
    page = (
        "# Guide 2\n\nThe signing service rotates its keys every night. Step 2 checks the audit log.\n\n"
        "## Revocation\n\nA leaked key is revoked at once; the audit log records who revoked key 2.\n"
    )
    raw = (
        "This document is about a signing service that rotates its keys every night and records audit logs. "
        "It contains information about who revoked key 2, which is useful for searching through the chunks "
        "of the document."
    )
    cleaned, kept = clean_blurb(raw, "", document=page), raw[: raw.index(", which")] + "."
    assert (cleaned.text, cleaned.problems) == (kept, ["restated"])
    assert ground_summary(raw, page, "prose") == (kept, ["restated"])
    # a page about chunking says the word: its summary keeps it
    rag = "# Chunking\n\nSplit each document into chunks of 800 tokens before you embed them for retrieval.\n"
    about = "This document explains how to split documents into chunks for retrieval."
    assert ground_summary(about, rag, "prose") == (about, [])


def test_a_plural_or_a_gloss_of_a_name_the_document_has_is_grounded():
    import json

    # committed summaries (codebase-qwen2.5-coder-1.5b-document: doc_73, doc_88) emptied for "UDFs" and
    # "(Nested Diagnostic Context)", read by hand as correct (benchmarks/reports/summary-grounding-rules.md)
    docs = {d["doc_id"]: d["content"] for d in json.loads((ROOT / "eval/codebase/codebase_chunks.json").read_text())}
    for doc_id, summary in {
        "doc_73": "This document defines an interface `EpochAware` that allows operators or user-defined "
        "functions (UDFs) to receive the current round of the element as a supplier.",
        "doc_88": "This document defines a pattern converter for the NDC (Nested Diagnostic Context) in Apache "
        "Log4cxx, which is used to include the current thread's context information in log messages.",
    }.items():
        assert ground_summary(summary, docs[doc_id], "java" if doc_id == "doc_73" else "cpp") == (summary, [])
    # a product the document never names is still dropped, with its acronym or without
    assert summary_problems("It runs on Amazon Web Services (AWS).", docs["doc_73"], "java") != []


def test_the_rules_benchmark_judges_before_and_after():
    import shutil
    import subprocess

    import pytest

    sys.path.insert(0, str(ROOT))
    from benchmarks.summary_grounding import BEFORE, judge, modules_at

    if not shutil.which("git") or subprocess.run(["git", "cat-file", "-e", BEFORE], cwd=ROOT).returncode:
        pytest.skip(f"no git history with {BEFORE}")
    summary = (  # review s6, G2: dropped at BEFORE, kept now
        "This guide explains how to rotate the signing keys by hand and contains a Python code example "
        "that calls rotate_keys with a grace period."
    )
    before, after = (
        judge(modules_at(BEFORE), summary, ROTATE, "prose"),
        judge(modules_at(None), summary, ROTATE, "prose"),
    )
    assert [s["rules"] for s in before["sentences"]] == [["wrong-kind"]] and before["stored"] == ""
    assert [s["rules"] for s in after["sentences"]] == [[]] and after["stored"] == summary
    assert "situate.contextual.summary_grounding" in sys.modules  # the working tree's, put back
    assert (
        sys.modules["situate.contextual.summary_grounding"] is modules_at(None)["situate.contextual.summary_grounding"]
    )
