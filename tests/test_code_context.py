"""Structural context on real source files: installed packages' own Python and C++ files, and the
cookbook corpus's Rust and Java files (eval/codebase)."""

import importlib.util
import json
from pathlib import Path

from conftest import SHARED_EVAL

from situate.contextual.code_context import (
    chunk_contexts,
    definitions,
    detect_language,
    document_contexts,
    leading_comment,
    parser,
    structural_context,
)

SITE = Path(importlib.util.find_spec("pyarrow").origin).parent


def _span(text: str, needle: str, length: int = 200) -> tuple[int, int]:
    start = text.index(needle)
    return start, min(len(text), start + length)


def test_grammars_installed():
    for lang in ("python", "rust", "java", "c", "cpp", "go", "javascript", "typescript"):
        assert parser(lang) is not None, lang


def test_python_method_inside_class():
    path = Path(importlib.util.find_spec("dotenv.main").origin)
    text = path.read_text()
    start, end = _span(text, "        if self._dict is not None:")  # inside DotEnv.dict
    ctx = structural_context(text, start, end, name=path.name)
    lines = ctx.splitlines()
    assert lines[0] == "main.py"
    assert "class DotEnv > def dict" in lines
    # a chunk holding whole functions lists their names
    start = text.index("def find_dotenv(")
    ctx = structural_context(text, start, start + 3000, language="python")
    assert "find_dotenv" in ctx.splitlines()[-1] and ctx.splitlines()[-1].startswith("defines: ")


def test_cpp_namespaces_and_methods():
    path = SITE / "src" / "arrow" / "python" / "ipc.cc"
    text = path.read_text()
    assert detect_language(text) == "cpp"  # no name: told by parsing
    start, end = _span(text, "  PyAcquireGIL lock;")
    ctx = structural_context(text, start, end, name=path.name)
    assert "namespace arrow > namespace py > function PyRecordBatchReader::ReadNext" in ctx.splitlines()
    # the Apache licence block at the top is skipped
    assert "Licensed" not in ctx


def test_c_header_functions():
    path = Path(importlib.util.find_spec("numpy").origin).parent / "_core" / "include" / "numpy" / "npy_math.h"
    text = path.read_text()
    start = text.index("static inline float __npy_inff(void)")
    ctx = structural_context(text, start, start + 400, name=path.name)
    assert "__npy_inff" in ctx and "__npy_nanf" in ctx


def _corpus_doc(prefix: str) -> dict:
    docs = json.loads((SHARED_EVAL / "codebase_chunks.json").read_text())
    return next(d for d in docs if d["content"].startswith(prefix))


def test_rust_impl_and_doc_comment():
    doc = _corpus_doc("//! Executor for differential fuzzing.")
    text = doc["content"]
    assert detect_language(text) == "rust"
    start = text.index("fn run_target")
    body = text.index("{", start) + 1
    ctx = structural_context(text, body, body + 100)
    assert ctx.startswith("Executor for differential fuzzing.")
    enclosing = [x for x in ctx.splitlines() if x.startswith("impl ")][0]
    assert enclosing.endswith("> fn run_target") and "for DiffExecutor" in enclosing


def test_java_class_method():
    doc = _corpus_doc("package com.password4j;")
    text = doc["content"]
    assert detect_language(text) == "java"
    defs, in_bytes = definitions(text, "java")
    assert in_bytes and any(d.kind == "class" for d in defs)
    method = next(d for d in defs if d.kind == "method")
    cls = next(d for d in defs if d.kind == "class" and d.start < method.start < d.end)
    mid = len(text.encode()[: method.start].decode()) + 5
    ctx = structural_context(text, mid, mid + 50, language="java")
    assert f"class {cls.name} > method {method.name}" in ctx


def test_patterns_without_a_grammar():
    text = "module Greeter\n  def hello(name)\n    puts name\n  end\nend\n"
    contexts = chunk_contexts(text, [(text.index("puts"), len(text))], language="ruby")
    assert contexts == ["module Greeter > def hello"]


def test_leading_comment_skips_licence_and_imports():
    text = (
        "# Copyright 2020 Someone. Licensed under MIT.\n\nimport os\n\n"
        "# Helpers that parse dotenv files\n# and expand variables.\n\ndef f():\n    pass\n"
    )
    assert leading_comment(text) == "Helpers that parse dotenv files and expand variables."
    assert leading_comment("#[derive(Debug)]\nstruct A;\n") == ""


def test_prose_gets_title_and_headings():
    doc = {"format": "markdown", "text": "# T\n\n## A\n\nx", "title": "T", "source": "t.md"}
    assert document_contexts(doc, [(0, 1)], [["T", "A"]]) == ["T > A"]


def test_one_parse_for_many_chunks_matches_single():
    path = Path(importlib.util.find_spec("dotenv.main").origin)
    text = path.read_text()
    spans = [(i, min(len(text), i + 700)) for i in range(0, len(text), 700)]
    many = chunk_contexts(text, spans, name="main.py")
    assert len(many) == len(spans)
    assert many[3] == structural_context(text, *spans[3], name="main.py")


REPO = Path(__file__).resolve().parents[1]


def _context_at(path: Path, needle: str, length: int = 80) -> list[str]:
    text = path.read_text()
    start = text.index(needle)
    return structural_context(text, start, min(len(text), start + length), name=path.name).splitlines()


def test_known_language_without_grammar_is_not_guessed():
    """A Ruby file parses as TypeScript with a stray definition: its ending sends it to the line
    patterns, which name the definitions it is inside."""
    text = (
        "module Greeter\n  class Loud < Base\n    def hello(name)\n      x = 1\n      puts name\n    end\n  end\nend\n"
    )
    assert detect_language(text) == "typescript"  # what parsing alone would say
    assert detect_language(text, "greeter.rb") is None
    ctx = chunk_contexts(text, [(text.index("puts"), len(text))], name="greeter.rb")
    assert ctx == ["greeter.rb\nmodule Greeter > class Loud > def hello"]


def test_config_files_carry_their_section_path():
    # this repository's own files: a TOML table, a YAML block mapping, make rules
    assert _context_at(REPO / "pyproject.toml", "testpaths")[-1] == "table tool.pytest.ini_options"
    yaml = _context_at(REPO / "deploy" / "k8s" / "dagster.yaml", "key: dagster/job_name")
    assert yaml[0] == "dagster.yaml" and yaml[1].startswith("situate on Kubernetes:")  # its comment
    assert yaml[2:] == ["concurrency > runs > tag_concurrency_limits", "defines: pools"]
    make = _context_at(REPO / "Makefile", "chromium and chromium-driver from Debian")
    assert make[0] == "Makefile" and make[-1] == "target browser"
    # a shell function by its name, a bare word line ("fi", "done") opening nothing
    sh = "#!/bin/sh\nset -e\nbuild() {\n  if x; then\n    y\n  fi\n  echo built\n}\n"
    assert chunk_contexts(sh, [(sh.index("echo built"), len(sh))], name="run.sh") == ["run.sh\nfunction build"]


def test_a_corpus_entrys_language_is_told_once_and_the_memory_is_bounded(monkeypatch):
    from situate.contextual import code_context as cc

    calls = []
    monkeypatch.setattr(cc, "_detect", lambda data: calls.append(data) or "python")
    monkeypatch.setattr(cc, "_detected_cache", {})
    monkeypatch.setattr(cc, "DETECTED", 2)
    texts = ["def a(): pass\n", "def b(): pass\n", "def c(): pass\n"]
    assert [cc.detect_language(t) for t in texts + texts[2:]] == ["python"] * 4
    assert len(calls) == 3 and len(cc._detected_cache) == 2  # the third text again: remembered
    assert cc.detect_language(texts[0]) == "python" and len(calls) == 4  # the oldest was let go
    assert cc.detect_language("x = 1\n", "setup.py") == "python" and len(calls) == 4  # by its name


def test_a_page_of_prose_with_code_in_it_is_not_told_as_code():
    """The labelled sets' entries have no file name: their language is the grammar that parses
    them best.  Every docs-set page is prose (13 had parsed as Java or C with a stray definition and
    hundreds of errors); the codebase set's entries stay code."""
    root = Path(__file__).resolve().parent.parent / "eval"
    docs = json.loads((root / "docs" / "docs_chunks.json").read_text())
    assert [d["doc_id"] for d in docs if detect_language(d["content"]) is not None] == []
    code = json.loads((root / "codebase" / "codebase_chunks.json").read_text())
    assert sum(detect_language(d["content"]) is not None for d in code) == 89
