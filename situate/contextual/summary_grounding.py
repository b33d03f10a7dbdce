"""The care a document summary gets beyond a blurb's cleaning: one summary is the context of every
chunk of its document, so a wrong sentence in it is wrong on each of them.

A summary's sentence is dropped when it

* restates the summary prompt (:data:`situate.contextual.prompts.DOCUMENT_SUMMARY`: "a summary of
  what this document is and what it contains", "The summary is concise", "not explicitly stated in
  the given text"): tag ``restated``;
* names a library, package, module, crate or framework the document never uses as one ("making
  HTTP requests using the `requests` library" of httpx's ``_client.py``, which has the word
  *requests* but imports no such library): tag ``ungrounded``;
* calls the document a script, program or module of a language it is not written in ("a Python
  script" of a Markdown page, or of a Java file): tag ``wrong-kind``;
* names code the document does not contain (:func:`situate.contextual.cleaning.absent_names`, the
  per-chunk blurbs' grounding): tag ``ungrounded``.

A summary left empty falls back as a failed blurb does: its chunks are indexed with their
structural context alone.
"""

from __future__ import annotations

import re

from situate.contextual.cleaning import _PROMPT_WORDS, _sentences, absent_names

#: Sentences (or their parts) that repeat the summary prompt or talk about the answer instead of
#: the document; from the committed document-mode blurb files (``benchmarks/blurbs/*-document``):
#: "It also includes a summary of what this document is and what it contains", "The summary is
#: concise and provides a clear overview", "The summary of this document is: ...", "which is not
#: explicitly stated in the given text".
SUMMARY_RESTATED = re.compile(
    r"\bwhat (?:this|the) document is(?: and what it contains)?\b"
    r"|\bthe summary (?:is|of this document|of the document|provided)\b"
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

#: "is a Python script", "a simple Rust program", "a C++ library": the language a sentence says
#: the document is written in, and what it says it is.
KIND_CLAIM = re.compile(
    r"\b(?:is|as|provides|contains) (?:a|an) (?:simple |small |short |basic )?"
    r"(python|rust|java|golang|go|c\+\+|cpp|c|javascript|typescript) "
    r"(script|program|module|file|source file|library|class|implementation|code|application|test)",
    re.I,
)


def _used_as_library(name: str, document: str, prose: bool) -> bool:
    """Whether ``document`` uses ``name`` as code or calls it a library itself: on an import line
    (``import``, ``from``, ``use``, ``using``, ``require``, ``#include``, ``extern crate``,
    ``package``, ``namespace``, ``mod``), as a path (``name.x``, ``name::``, ``name/x``), or as
    "name library" (package, module, crate, framework, SDK), or (a name with a capital, 4 characters
    or more) inside one of its identifiers, or (a name with ``-``, ``_`` or a digit, which no
    English word spells: "python-dotenv") anywhere in it; a prose document (``prose``) may also name it in
    quotes or backticks.  A code file that only says the word (httpx's ``_client.py``:
    "sending requests", and a comment naming 'requests' in quotes) does not use it."""
    parts = [re.escape(x) for x in re.split(r"::|\.|/", name.lower().strip("`")) if x]
    n = r"(?:\.|::|/)".join(parts)  # log4cxx::fmtlayout is <log4cxx/fmtlayout.h>
    if (
        len(name) >= 4
        and re.search(r"[A-Z]", name)
        and re.search(rf"\w{re.escape(name)}|{re.escape(name)}\w", document)
    ):
        return True  # a proper name inside the document's identifiers: FFmpeg of WasmEdgeFFmpeg
    doc = document.lower()
    if re.search(r"[-_\d]", name) and re.search(rf"(?<![\w-]){re.escape(name.lower().strip('`'))}(?![\w-])", doc):
        return True  # a name no English word spells, said by the document: python-dotenv of dotenv's main.py
    patterns = [
        rf"^[ \t#]*(?:import|from|use|using|require|include|extern crate|package|namespace|mod)\b[^\n]*\b{n}\b",
        rf"\b{n}(?:\.\w|::|/\w)",
        rf"\b{n}\s+(?:library|package|module|crate|framework|sdk)\b",
    ]
    if prose:
        patterns.append(rf"[\"'`<]{n}[\"'`>]")
    return any(re.search(p, doc, re.M) for p in patterns)


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
    A prose document may be about a library, so only "script", "program", "source file" and
    "module" are wrong of it."""
    if language is None:
        return ""
    for m in KIND_CLAIM.finditer(sentence):
        said, what = LANGUAGES[m.group(1).lower()], m.group(2).lower()
        if language == "prose":
            if what in ("script", "program", "source file", "module", "file", "code"):
                return m.group(0)
        elif said != language and not {said, language} <= {"c", "cpp"}:
            return m.group(0)
    return ""


def summary_problems(sentence: str, document: str, language: str | None = None) -> list[str]:
    """Why a summary's ``sentence`` is dropped (:mod:`situate.contextual.summary_grounding`), as
    ``tag: what`` strings; empty when it is kept."""
    out = []
    m = SUMMARY_RESTATED.search(sentence) or SUMMARY_CLAUSE.search(sentence)
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
    kept, tags = [], set()
    for sentence in _sentences(summary) if summary else []:
        sentence, cut = _without_summary_clause(sentence)
        if cut:
            tags.add("restated")
        problems = summary_problems(sentence, document, language) if sentence else []
        if problems:
            tags.update(p.split(":", 1)[0] for p in problems)
            continue
        if sentence:
            kept.append(sentence)
    return " ".join(kept), [t for t in ("restated", "ungrounded", "wrong-kind") if t in tags]


#: Words a sentence may keep after its summary clause is cut and still say nothing
#: ("The document also provides."): the prompt's words (:data:`situate.contextual.cleaning._PROMPT_WORDS`)
#: and these.
_EMPTY_WORDS = _PROMPT_WORDS | {"also", "includes", "include", "contains", "offers", "gives", "usage"}


def _without_summary_clause(sentence: str) -> tuple[str, bool]:
    """``sentence`` with a :data:`SUMMARY_CLAUSE` cut out (its end mark kept), ``""`` when nothing
    but prompt words is left; and whether a clause was cut."""
    out = SUMMARY_CLAUSE.sub("", sentence)
    if out == sentence:
        return sentence, False
    out = re.sub(r"\s+([,.;:!?])", r"\1", out).strip().rstrip(",;: ")
    if out and out[-1] not in ".!?":
        out += "."
    words = [w.lower() for w in re.findall(r"[A-Za-z_][\w'-]*", out)]
    return (out if [w for w in words if w not in _EMPTY_WORDS] else ""), True


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
