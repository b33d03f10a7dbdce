"""The care a document summary gets beyond a blurb's cleaning: one summary is the context of every
chunk of its document, so a wrong sentence in it is wrong on each of them.

A summary's sentence is dropped when it

* restates the summary prompt (:data:`situate.contextual.prompts.DOCUMENT_SUMMARY`: "a summary of
  what this document is and what it contains", "The summary is concise", "not explicitly stated in
  the given text") or talks about the summary or the chunks instead of the document ("I hope this
  summary helps", "useful for searching through the chunks" of a page that never says "chunk"):
  tag ``restated``; a clause of it is cut instead when the rest stands alone, and a cut that leaves
  a fragment ("This summary is.") drops the sentence;
* names a library, package, module, crate or framework the document never uses as one ("making
  HTTP requests using the `requests` library" of httpx's ``_client.py``, which has the word
  *requests* but imports no such library); one it loads, imports, installs or (a prose page) names
  is used: tag ``ungrounded``;
* calls the document a script, program or module of a language it is not written in ("a Python
  script" of a Markdown page, or of a Java file; a page that "contains a Python code example" is
  not called one): tag ``wrong-kind``;
* names code the document does not contain (:func:`situate.contextual.cleaning.absent_names`, the
  per-chunk blurbs' grounding): tag ``ungrounded``.

What each rule drops on the committed summaries, and how many drops were right read by hand:
``benchmarks/reports/summary-grounding-rules.md`` (``benchmarks/summary_grounding.py --rules``).

A summary left empty falls back as a failed blurb does: its chunks are indexed with their
structural context alone.
"""

from __future__ import annotations

import re

from situate.contextual.cleaning import _PROMPT_WORDS, _sentences, absent_names, mended

#: Sentences (or their parts) that repeat the summary prompt or talk about the answer instead of
#: the document; from the committed document-mode blurb files (``benchmarks/blurbs/*-document``):
#: "It also includes a summary of what this document is and what it contains", "The summary is
#: concise and provides a clear overview", "The summary of this document is: ...", "which is not
#: explicitly stated in the given text"; and talk about the answer in other words, which the default
#: model writes too (review s6, G4): "This summary is for …", "The summary above is intended to
#: help …", "I hope this summary helps …".
SUMMARY_RESTATED = re.compile(
    r"\bwhat (?:this|the) document is(?: and what it contains)?\b"
    r"|\bthe summary (?:is|of this document|of the document|provided)\b"
    r"|\b(?:this|my|our) (?:short |succinct |concise |brief )*summary\b|\bsummary (?:above|below)\b"
    r"|\bhope (?:this|it|that)\b[^.]{0,30}\bhelps?\b"
    r"|\b(?:is |as )?a (?:short |succinct |concise |brief )*summary of (?:the|this) (?:document|text|content)\b"
    r"|\bof its chunks\b|\bsearch retrieval\b"
    r"|\bnot (?:explicitly )?(?:stated|mentioned) in the (?:given |provided )?(?:text|document)\b"
    r"|\bthe (?:given|provided) (?:text|document|prompt)\b",
    re.I,
)

#: A clause that only says the document summarises itself, cut from its sentence: "(It includes
#: parameters ...), as well as a summary of its functionality", "The document also provides a summary
#: of its functionality and usage" (nothing left: the sentence is dropped).
SUMMARY_CLAUSE = re.compile(
    r",?\s*(?:\b(?:as well as|and|also)\s+)*(?:(?:includes|provides|contains|gives|offers)\s+)?"
    r"(?:a|the) (?:short |succinct |concise |brief |comprehensive )*summary of (?:its|the document's|this document's)"
    r" \w+(?: and \w+)?",
    re.I,
)

#: A library (package, module, crate, framework, SDK) a sentence says the document uses or is
#: about, by name: "the `requests` library", "the Ciphey library", "library `x`".
LIBRARY_CLAIM = re.compile(
    r"(?:`([\w.:/-]+)`|\b([A-Za-z][\w.-]*[\w]))\s+(?:python |rust |java |c\+\+ |javascript )?"
    r"(?:library|libraries|package|module|crate|framework|sdk)\b"
    r"|\b(?:library|package|module|crate|framework)\s+`([\w.:/-]+)`",
    re.I,
)

#: Words before "library" that are not a library's name ("a logging library", "the standard
#: library", "this module").
_NOT_NAMES = frozenset(
    """a an the this that its their which what each one standard core logging testing utility helper
    third-party external internal custom simple small main base whole entire same new given python
    rust java javascript typescript go c c++ cpp kotlin ruby php scala swift ml http api client
    server test unit mock wrapper""".split()
)

#: Language names a summary gives a document, as :mod:`situate.contextual.code_context` names the
#: languages it detects (``EXTENSIONS``, ``DETECT_ORDER``).
LANGUAGES = {
    "python": "python",
    "rust": "rust",
    "java": "java",
    "go": "go",
    "golang": "go",
    "c": "c",
    "c++": "cpp",
    "cpp": "cpp",
    "javascript": "javascript",
    "typescript": "typescript",
}

_LANGUAGE = r"(?P<lang>python|rust|java|golang|go|c\+\+|cpp|c|javascript|typescript)"

#: "is a Python script", "a simple Rust program", "a C++ library", anywhere in a sentence: the
#: language a sentence says the document, or a part of it, is written in, and what it says it is.
#: Judged of a code document only (a Java file does not "contain a Python script"); of a prose page
#: "contains a Python code example" says what is in it (review s6, G2).
KIND_CLAIM = re.compile(
    r"\b(?:is|as|provides|contains) (?:a|an) (?:simple |small |short |basic )?"
    + _LANGUAGE
    + r" (?P<what>script|program|module|file|source file|library|class|implementation|code|application|test)",
    re.I,
)

#: A sentence that says what the document itself is: "This document is a Python script", "It is
#: a Python module", "The file serves as a Python program", "This document is Python source code",
#: "This Python script ..." (its first words).  Of a prose page each of these is wrong: what the
#: rule was written for (a Markdown README with Python in it called "a Python script");
#: "a Python code example", snippet, sample or block is content a page may be (review s6, G2).
SELF_KIND_CLAIM = re.compile(
    r"^\W*(?:(?:(?:this|the) (?:document|file|page|text|guide|readme|content)|it)"
    r"\s+(?:is|serves as|acts as)\s+(?:a |an )?|this\s+)"
    r"(?:simple |small |short |basic |single )?"
    + _LANGUAGE
    + r" (?P<what>script|program|module|source file|source code|file|code)\b"
    r"(?!\s+(?:examples?|snippets?|samples?|blocks?|listings?)\b)",
    re.I,
)


#: A command installing a package by name, as install guides and READMEs give it (pip, pipx, uv,
#: poetry, conda, mamba, npm, pnpm, yarn, bun, cargo, go, gem, apt, brew, composer, dotnet: the
#: package managers of the languages :data:`LANGUAGES` names, and the usual system ones); the name
#: may come anywhere after its verb on that line: ``pip install -U "numpy>=2"``, ``npm install
#: --save express``, ``go get github.com/gin-gonic/gin`` (review s6, G3: "pip install numpy").
_INSTALL = (
    r"\b(?:pip3?|pipx|uv|poetry|conda|mamba|micromamba|npm|pnpm|yarn|bun|cargo|go|gem|apt|apt-get|brew"
    r"|composer|dotnet)(?:\s+(?:pip|-\S+))*\s+(?:install|add|get|i|require|package)\b[^\n]*?"
)


def _name_pattern(name: str) -> str:
    """A regular expression of ``name`` (lower case) as code spells it: its parts joined by ``.``,
    ``::`` or ``/`` (log4cxx::fmtlayout is <log4cxx/fmtlayout.h>), ``-`` and ``_`` taken as one
    (the package ``serde-json`` is the crate ``serde_json``)."""
    parts = [re.escape(x) for x in re.split(r"::|\.|/", name.lower().strip("`")) if x]
    return r"(?:\.|::|/)".join(re.sub(r"\\?[-_]", "[-_]", x) for x in parts)


def _said_in_code(n: str, doc: str) -> bool:
    """Whether ``doc`` (lower case) uses the library of pattern ``n`` (:func:`_name_pattern`) as
    code does: on an import line (``import``, ``from``, ``use``, ``using``, ``require``,
    ``#include``, ``extern crate``, ``package``, ``namespace``, ``mod``), loaded by a call anywhere
    on a line (``const express = require('express')``, ``import("x")``, ``import_module("x")``),
    as an ES module's source (``import x from 'y'``, ``export * from "y"``), in a Go import block,
    installed (:data:`_INSTALL`), as a path (``name.x``, ``name::``, ``name/x``), or as "name
    library" (package, module, crate, framework, SDK)."""
    patterns = [
        rf"^[ \t#]*(?:import|from|use|using|require|include|extern crate|package|namespace|mod)\b[^\n]*\b{n}\b",
        rf"\b(?:require|require_relative|import|import_module)\s*\(\s*[\"'`]{n}[\"'`/]",
        rf"\bfrom\s+[\"']{n}[\"'/]",
        rf"^[ \t]*import\s*\([^)]*\"(?:[\w.-]+/)*{n}\"",
        rf"{_INSTALL}(?<![\w-]){n}(?![\w-])",
        rf"\b{n}(?:\.\w|::|/\w)",
        rf"\b{n}\s+(?:library|package|module|crate|framework|sdk)\b",
    ]
    return any(re.search(p, doc, re.M) for p in patterns)


def _used_as_library(name: str, document: str, prose: bool) -> bool:
    """Whether ``document`` uses ``name`` as code or calls it a library itself
    (:func:`_said_in_code`), or (a name with a capital, 4 characters or more) has it inside one of
    its identifiers, or (a name with ``-``, ``_`` or a digit, which no English word spells:
    "python-dotenv") says it anywhere.  A prose document (``prose``) may also name it in quotes or
    backticks, or (a name with a capital: "NumPy", "Express") as a word spelled as the sentence
    spells it: a page about a library says its name.  A code file that only says the word
    (httpx's ``_client.py``: "sending requests", and a comment naming 'requests' in quotes) does
    not use it."""
    n = _name_pattern(name)
    if (
        len(name) >= 4
        and re.search(r"[A-Z]", name)
        and re.search(rf"\w{re.escape(name)}|{re.escape(name)}\w", document)
    ):
        return True  # a proper name inside the document's identifiers: FFmpeg of WasmEdgeFFmpeg
    doc = document.lower()
    if re.search(r"[-_\d]", name) and re.search(rf"(?<![\w-]){n}(?![\w-])", doc):
        return True  # a name no English word spells, said by the document: python-dotenv of dotenv's main.py
    if prose and re.search(rf"[\"'`<]{n}[\"'`>]", doc):
        return True
    if prose and re.search(r"[A-Z]", name) and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", document):
        return True  # "Installing NumPy": the page's own word
    return _said_in_code(n, doc)


def absent_libraries(sentence: str, document: str, prose: bool = False) -> list[str]:
    """The libraries (packages, modules, crates, frameworks) ``sentence`` names that ``document``
    never uses as one (:func:`_used_as_library`): "the `requests` library" of a file that has the
    word *requests* but imports no ``requests``.  A name not in backticks is judged when it looks
    like one (a capital, a digit, ``.``, ``_`` or ``-`` in it): "the necessary libraries" names
    none."""
    out = []
    for m in LIBRARY_CLAIM.finditer(sentence):
        name = m.group(1) or m.group(3) or m.group(2)
        plain = m.group(2) is not None and not (m.group(1) or m.group(3))
        if name.lower() in _NOT_NAMES or len(name) < 2:
            continue
        if plain and not re.search(r"[A-Z0-9._-]", name):
            continue
        if not _used_as_library(name, document, prose):
            out.append(name)
    return out


def wrong_kind(sentence: str, language: str | None) -> str:
    """The claim of ``sentence`` about what the document is ("a Python script") when it is wrong
    for a document of ``language`` (a :mod:`situate.contextual.code_context` language, ``"prose"``
    for a document that is not source code, None when not known: no claim is judged); else ``""``.

    Of a prose document only a claim about the document itself (:data:`SELF_KIND_CLAIM`: it *is*
    a script, program, module, source file, file or source code of a language) is wrong: a page may
    be about a library and may contain a code example or a script.  Of a code document any claim
    (:data:`KIND_CLAIM`, :data:`SELF_KIND_CLAIM`) naming another language is wrong (C and C++ are
    taken as one: a header is either)."""
    if language is None:
        return ""
    if language == "prose":
        m = SELF_KIND_CLAIM.search(sentence)
        return m.group(0).strip(" \t\"'`(") if m else ""
    for m in [*KIND_CLAIM.finditer(sentence), *SELF_KIND_CLAIM.finditer(sentence)]:
        said = LANGUAGES[m.group("lang").lower()]
        if said != language and not {said, language} <= {"c", "cpp"}:
            return m.group(0).strip(" \t\"'`(")
    return ""


#: "chunks", which a summary of a document that never says "chunk" has from the prompt ("for the
#: purposes of improving search retrieval of its chunks") said in other words: "…, which is useful
#: for searching through the chunks of the document" (the default model's, review s6, G4), "helps
#: with retrieving the chunks".  A page about chunking says the word, and is not judged.
CHUNK_TALK = re.compile(r"\bchunks\b", re.I)


def _chunk_talk(sentence: str, document: str) -> re.Match | None:
    """Where ``sentence`` talks about chunks (:data:`CHUNK_TALK`) of a ``document`` that never says
    "chunk"; None when it does not."""
    return None if "chunk" in document.lower() else CHUNK_TALK.search(sentence)


def _finished(text: str) -> str:
    """What a cut left of a sentence, as a sentence: a fragment at its end mended
    (:func:`situate.contextual.cleaning.mended`), its end mark added, ``""`` when nothing but
    prompt words (:data:`_EMPTY_WORDS`) is left ("This summary is.")."""
    text = mended(re.sub(r"\s+([,.;:!?])", r"\1", text).strip().rstrip(",;: "))
    words = [w.lower() for w in re.findall(r"[A-Za-z_][\w'-]*", text)]
    if not [w for w in words if w not in _EMPTY_WORDS]:
        return ""
    return text if text[-1] in ".!?" else text + "."


def _without_chunk_talk(sentence: str, document: str) -> tuple[str, bool]:
    """``sentence`` cut before the clause that talks about chunks (:func:`_chunk_talk`: from the
    comma or semicolon before it), ``""`` when that talk has no clause of its own or what is left
    says nothing (:func:`_finished`); and whether it was cut."""
    m = _chunk_talk(sentence, document)
    if not m:
        return sentence, False
    comma = max(sentence.rfind(",", 0, m.start()), sentence.rfind(";", 0, m.start()))
    return (_finished(sentence[:comma]) if comma > 0 else ""), True


def summary_problems(sentence: str, document: str, language: str | None = None) -> list[str]:
    """Why a summary's ``sentence`` is dropped (:mod:`situate.contextual.summary_grounding`), as
    ``tag: what`` strings; empty when it is kept."""
    out = []
    m = SUMMARY_RESTATED.search(sentence) or SUMMARY_CLAUSE.search(sentence) or _chunk_talk(sentence, document)
    if m:
        out.append(f"restated: {m.group(0).strip(' ,')}")
    out += [f"ungrounded: {x}" for x in absent_libraries(sentence, document, prose=language == "prose")]
    out += [f"ungrounded: {x}" for x in absent_names(sentence, document)]
    kind = wrong_kind(sentence, language)
    if kind:
        out.append(f"wrong-kind: {kind}")
    return out


def ground_summary(summary: str, document: str, language: str | None = None) -> tuple[str, list[str]]:
    """``summary`` without the sentences :func:`summary_problems` finds fault with.

    Parameters
    ----------
    summary : str
        A cleaned document summary (:func:`situate.contextual.cleaning.clean_blurb`).
    document : str
        The whole document.
    language : str or None
        The document's language (:func:`summary_language`).

    Returns
    -------
    (text, tags)
        The kept sentences ("" when none is left), and the tags of the dropped ones
        (``restated``, ``ungrounded``, ``wrong-kind``), each once, in that order.
    """
    judged = judged_sentences(summary, document, language)
    tags = {p.split(":", 1)[0] for _, _, problems in judged for p in problems}
    text = " ".join(kept for _, kept, _ in judged if kept)
    return text, [t for t in ("restated", "ungrounded", "wrong-kind") if t in tags]


def judged_sentences(summary: str, document: str, language: str | None = None) -> list[tuple[str, str, list[str]]]:
    """Each sentence of ``summary`` as :func:`ground_summary` judges it: the sentence, what is
    kept of it (``""``: dropped; shorter: a restating clause cut, :data:`SUMMARY_CLAUSE`,
    :data:`CHUNK_TALK`), and why (``tag: what`` strings, :func:`summary_problems`; ``restated:
    cut`` for a cut clause)."""
    out = []
    for sentence in _sentences(summary) if summary else []:
        kept, cut = _without_summary_clause(sentence)
        kept, cut_talk = _without_chunk_talk(kept, document) if kept else (kept, False)
        problems = ["restated: cut"] if cut or cut_talk else []
        found = summary_problems(kept, document, language) if kept else []
        out.append((sentence, "" if found else kept, problems + found))
    return out


#: Words a sentence may keep after its summary clause is cut and still say nothing
#: ("The document also provides."): the prompt's words (:data:`situate.contextual.cleaning._PROMPT_WORDS`)
#: and these.
_EMPTY_WORDS = _PROMPT_WORDS | {"also", "includes", "include", "contains", "offers", "gives", "usage"}


def _without_summary_clause(sentence: str) -> tuple[str, bool]:
    """``sentence`` with a :data:`SUMMARY_CLAUSE` cut out (its end mark kept), ``""`` when what is
    left says nothing (:func:`_finished`); and whether a clause was cut."""
    out = SUMMARY_CLAUSE.sub("", sentence)
    if out == sentence:
        return sentence, False
    return _finished(out), True


def summary_language(doc: dict) -> str | None:
    """The language :func:`wrong_kind` judges a loaded document's summary by: a code file's
    (:func:`situate.contextual.code_context.detect_language`, by its name), ``"prose"`` for a file
    that is not code (Markdown, HTML, text, ...), and a corpus entry's detected language, None
    when none is detected (a Python script with no definition is not detected: its kind is not
    judged)."""
    from situate.contextual.code_context import detect_language

    fmt = doc.get("format")
    if fmt == "code":
        name = str(doc.get("source", "")).replace("\\", "/").rsplit("/", 1)[-1] or None
        return detect_language(doc["text"], name)
    if fmt == "corpus":
        return detect_language(doc["text"])
    return "prose"
