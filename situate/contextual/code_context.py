"""Structural context: what a chunk is part of, read from the document alone, with no model.

For code, a chunk's context is the file's leading comment (licence blocks skipped), the
definitions enclosing the chunk's first character, outermost first (``namespace x > class Y >
fn z``), and the names of the definitions that start inside the chunk.  Definitions come from a
real parser (tree-sitter grammars, installed from PyPI wheels) where one is installed, from
line patterns otherwise.  For prose, the context is the title and the heading path.

Why: on the cookbook's codebase set, this context lifted dense + BM25 RRF Pass@20 from 92.09 to
93.55 on the developers' queries (eval/README.md, "Structural context for code"), where the
blurbs of a 135M-parameter model lowered it; each of the three parts added about 3 points of BM25
Pass@20 on its own.

Examples
--------
>>> src = "class Store:\\n    def put(self, key):\\n        return key\\n"
>>> structural_context(src, src.index("return"), len(src), language="python")
'class Store > def put'
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import re
import threading
from collections.abc import Iterator

from situate.resources.documents.reading import CODE_EXT

#: Longest leading comment kept, in words (eval/README.md: "≤ 40 words").
MAX_COMMENT_WORDS = 40
#: Most names listed as "defines": a long chunk of small functions keeps the first ones.
MAX_DEFINED = 12
#: Enclosing definitions shown at most (the outermost two, "…", the innermost rest): bounds a
#: chunk's context in a deeply nested file.  Real code nests a handful deep.
MAX_ENCLOSING = 8

#: File name endings → tree-sitter language.
EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".rs": "rust",
    ".java": "java",
    ".go": "go",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".tsx": "tsx",
}

#: Order tried when the language is unknown (a corpus entry with no file name); ties go to the
#: earlier one.  C parses as C++ too, so C++ comes first: its definitions are a superset.
DETECT_ORDER = ("python", "rust", "go", "java", "typescript", "cpp", "c")

#: Node type → the word shown before its name.
_KINDS = {
    "python": {"class_definition": "class", "function_definition": "def"},
    "rust": {
        "mod_item": "mod",
        "struct_item": "struct",
        "enum_item": "enum",
        "union_item": "union",
        "trait_item": "trait",
        "impl_item": "impl",
        "function_item": "fn",
        "function_signature_item": "fn",
        "macro_definition": "macro",
        "type_item": "type",
    },
    "java": {
        "class_declaration": "class",
        "interface_declaration": "interface",
        "enum_declaration": "enum",
        "record_declaration": "record",
        "annotation_type_declaration": "@interface",
        "method_declaration": "method",
        "constructor_declaration": "constructor",
    },
    "go": {"function_declaration": "func", "method_declaration": "func", "type_spec": "type"},
    "c": {
        "function_definition": "function",
        "struct_specifier": "struct",
        "union_specifier": "union",
        "enum_specifier": "enum",
    },
    "cpp": {
        "function_definition": "function",
        "struct_specifier": "struct",
        "class_specifier": "class",
        "union_specifier": "union",
        "enum_specifier": "enum",
        "namespace_definition": "namespace",
    },
    "javascript": {
        "class_declaration": "class",
        "function_declaration": "function",
        "generator_function_declaration": "function",
        "method_definition": "method",
    },
    "typescript": {
        "class_declaration": "class",
        "abstract_class_declaration": "class",
        "interface_declaration": "interface",
        "function_declaration": "function",
        "method_definition": "method",
        "enum_declaration": "enum",
        "module": "namespace",
        "internal_module": "namespace",
        "type_alias_declaration": "type",
    },
}
_KINDS["tsx"] = _KINDS["typescript"]

_LICENCE = re.compile(r"licen[cs]e|copyright|\(c\)|spdx|all rights reserved|redistribution", re.I)
_PREAMBLE_LINE = re.compile(
    r"^\s*(#!|#\s*-\*-|package\s|import\s|from\s+\S+\s+import|use\s|extern\s+crate|#include|#pragma|"
    r"#ifndef|#define|#endif|#if\s|"
    r"using\s|@file|\"use strict\"|'use strict'|mod\s+\w+;)"
)


@dataclasses.dataclass(frozen=True)
class Definition:
    """A definition found in the source: ``kind name`` over bytes ``[start, end)`` of the UTF-8
    text (character offsets when found by patterns)."""

    kind: str
    name: str
    start: int
    end: int

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}".strip()


@functools.cache
def parser(language: str):
    """A tree-sitter parser for ``language``, or None when its grammar wheel is not installed."""
    try:
        import tree_sitter

        module = {
            "python": "tree_sitter_python",
            "rust": "tree_sitter_rust",
            "java": "tree_sitter_java",
            "go": "tree_sitter_go",
            "c": "tree_sitter_c",
            "cpp": "tree_sitter_cpp",
            "javascript": "tree_sitter_javascript",
            "typescript": "tree_sitter_typescript",
            "tsx": "tree_sitter_typescript",
        }[language]
        grammar = __import__(module)
        fn = {"typescript": "language_typescript", "tsx": "language_tsx"}.get(language, "language")
        return tree_sitter.Parser(tree_sitter.Language(getattr(grammar, fn)()))
    except (ImportError, KeyError, AttributeError, ValueError):
        return None


def _errors(node) -> int:
    n = 0
    cursor = [node]
    while cursor:
        cur = cursor.pop()
        if cur.type == "ERROR" or cur.is_missing:
            n += 1
        if cur.has_error:
            cursor.extend(cur.children)
    return n


def detect_language(text: str, name: str | None = None) -> str | None:
    """The language of source ``text``: by ``name``'s extension, else the grammar that parses it
    with the fewest errors (None when no grammar is installed or none parses a definition, and
    for a ``name`` read by line patterns, :func:`patterns_for`)."""
    if name:
        for ext, lang in EXTENSIONS.items():
            if name.lower().endswith(ext):
                return lang
        if patterns_for(name) is not None:
            return None
    return _detected(text.encode(errors="surrogatepass"))


#: Texts whose language :func:`_detected` remembers (by digest: 16 bytes and the answer each,
#: about 2 MB at most): a corpus entry is asked for at each stage of its run, and every grammar
#: parses it each time (a sixth of ``situate ingest``'s own time on CoSQA's 6,267 functions).
DETECTED = 20_000
_detected_cache: dict[bytes, str | None] = {}
_detected_lock = threading.Lock()


def _detected(data: bytes) -> str | None:
    """:func:`_detect` remembered for the last :data:`DETECTED` texts (keyed by digest, not by
    the text: a kept text would hold a whole document)."""
    key = hashlib.blake2b(data, digest_size=16).digest()
    with _detected_lock:
        if key in _detected_cache:
            return _detected_cache[key]
    lang = _detect(data)
    with _detected_lock:
        if len(_detected_cache) >= DETECTED:
            _detected_cache.pop(next(iter(_detected_cache)))  # the oldest
        _detected_cache[key] = lang
    return lang


#: Most parse errors a definition a text may have and still be told as code: the codebase set's
#: 89 entries that parse as code have at most 3.33 (C++), CoSQA's 6,267 functions 0; the docs set's
#: 13 Markdown pages that some grammar parses with a definition or more have 36 to 820 ("## Why
#: use XML tags?" read as Java with 2 definitions and 489 errors).  Measured for situate on the
#: three labelled corpora.
MAX_ERRORS_PER_DEFINITION = 10


def _detect(data: bytes) -> str | None:
    """The grammar that parses ``data`` with the fewest errors a definition (:func:`detect_language`)."""
    best, best_score = None, None
    for lang in DETECT_ORDER:
        p = parser(lang)
        if p is None:
            continue
        tree = p.parse(data)
        n_defs = sum(1 for _ in _walk_definitions(tree.root_node, lang, data))
        errors = _errors(tree.root_node)
        # prose parses with many errors and at most a stray "definition": one definition counts
        # only with few errors (code files of the cookbook set: at most 3 with one definition)
        if n_defs == 0 or (n_defs == 1 and errors > 3):
            continue
        score = errors / n_defs
        if score > MAX_ERRORS_PER_DEFINITION:  # a page of prose with code in it, not code
            continue
        if best_score is None or score < best_score:
            best, best_score = lang, score
    return best


def _text(node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode(errors="replace")


def _c_declarator_name(node, data: bytes) -> str:
    while node is not None:
        if node.type in (
            "identifier",
            "field_identifier",
            "qualified_identifier",
            "operator_name",
            "destructor_name",
            "type_identifier",
        ):
            return _text(node, data)
        nxt = node.child_by_field_name("declarator")
        if nxt is None:
            nxt = next(
                (
                    c
                    for c in node.named_children
                    if c.type.endswith("declarator") or c.type in ("identifier", "qualified_identifier")
                ),
                None,
            )
        node = nxt
    return ""


def _name(node, lang: str, data: bytes) -> str:
    if lang == "rust" and node.type == "impl_item":
        typ = node.child_by_field_name("type")
        trait = node.child_by_field_name("trait")
        t = _text(typ, data) if typ else ""
        return f"{_text(trait, data)} for {t}" if trait else t
    if lang in ("c", "cpp") and node.type == "function_definition":
        return _c_declarator_name(node.child_by_field_name("declarator"), data)
    n = node.child_by_field_name("name")
    return _text(n, data) if n is not None else ""


def _walk_definitions(root, lang: str, data: bytes) -> Iterator[Definition]:
    kinds = _KINDS.get(lang, {})
    stack = [root]
    while stack:
        node = stack.pop()
        kind = kinds.get(node.type)
        if kind is not None:
            # a C struct/enum used as a type without a body is not a definition
            if not (
                lang in ("c", "cpp") and node.type.endswith("_specifier") and node.child_by_field_name("body") is None
            ):
                name = _name(node, lang, data)
                if name:
                    yield Definition(kind, " ".join(name.split()), node.start_byte, node.end_byte)
        stack.extend(reversed(node.children))


_PATTERN_DEF = re.compile(
    r"^[ \t]*(?:(?:pub(?:\([^)]*\))?|export|default|async|static|public|private|protected|final|"
    r"abstract|unsafe|extern|inline|virtual|internal|open|override|sealed|data|case|suspend|"
    r"partial|readonly)\s+)*"
    r"(?P<kind>def|defp|defmodule|class|fn|fun|struct|enum|trait|impl|interface|func|function|"
    r"module|namespace|mod|type|object|protocol|extension|message|service|rpc|sub|procedure)\s+"
    r"(?P<name>[A-Za-z_][\w:<>,.$ ]*?)\s*(?:[(:{<\[=]|\bdo\b|$)",
    re.M,
)

#: Line patterns of formats and languages with no grammar installed, by file name ending: each
#: match opens a definition (group ``name``; group ``kind`` or the pattern's kind) that runs to
#: the next match at the same or a lower indentation.  Sources: TOML 1.0 tables (``[a.b]``,
#: ``[[a]]``), INI sections, YAML 1.2 block mappings (a key whose value is on the lines below),
#: POSIX shell functions (``name() {``) and ``function name``, make rules (``target:``).
_TOML_TABLE = (re.compile(r"^[ \t]*\[\[?[ \t]*(?P<name>[^\]\n]+?)[ \t]*\]\]?[ \t]*(?:#.*)?$", re.M), "table")
_INI_SECTION = (re.compile(r"^[ \t]*\[(?P<name>[^\]\n]+)\][ \t]*$", re.M), "section")
_YAML_BLOCK = (
    re.compile(
        r"^[ \t]*(?:- +)?(?P<name>[A-Za-z_$][\w.$/-]*|\"[^\"\n]+\"|'[^'\n]+'):[ \t]*"
        r"(?:[|>][-+]?[ \t]*)?(?:#.*)?$",
        re.M,
    ),
    "",
)
_SHELL_FUNCTION = (
    re.compile(
        r"^[ \t]*(?:function[ \t]+)?(?P<name>[A-Za-z_][\w.:-]*)[ \t]*\([ \t]*\)"
        r"|^[ \t]*function[ \t]+(?P<fname>[A-Za-z_][\w.:-]*)",
        re.M,
    ),
    "function",
)
_MAKE_RULE = (re.compile(r"^(?P<name>[A-Za-z_%$(][\w.%$()/ -]*?)[ \t]*::?(?!=)", re.M), "target")
PATTERNS = {
    ".toml": _TOML_TABLE,
    ".ini": _INI_SECTION,
    ".cfg": _INI_SECTION,
    ".yaml": _YAML_BLOCK,
    ".yml": _YAML_BLOCK,
    ".sh": _SHELL_FUNCTION,
    ".bash": _SHELL_FUNCTION,
    ".zsh": _SHELL_FUNCTION,
    "makefile": _MAKE_RULE,
    "justfile": _MAKE_RULE,
    ".mk": _MAKE_RULE,
}
#: Endings of source files the reader does not list as code (``situate.resources.documents.reading.CODE_EXT``)
#: but that are read by :data:`_PATTERN_DEF` when they come in as code.
OTHER_PATTERN_LANGUAGES = (".kts", ".dart", ".groovy", ".gradle", ".clj", ".zig", ".nim", ".fs", ".vb", ".erl")
#: Endings of languages read by :data:`_PATTERN_DEF` (no grammar here), never guessed by parsing:
#: a Ruby file parses as TypeScript with a stray ``module`` definition.  The reader's code endings
#: with no grammar (:data:`EXTENSIONS`) and no format pattern (:data:`PATTERNS`), and the others.
PATTERN_LANGUAGES = (
    tuple(sorted(CODE_EXT - set(EXTENSIONS) - set(PATTERNS)))
    + OTHER_PATTERN_LANGUAGES
    + (
        "dockerfile",
        "cmakelists.txt",
    )
)


def patterns_for(name: str | None) -> tuple[re.Pattern, str] | None:
    """The line pattern for a file ``name`` of a format or language with no grammar (a
    :data:`PATTERNS` entry, or the code pattern for :data:`PATTERN_LANGUAGES`), else None."""
    low = (name or "").lower().replace("\\", "/").rsplit("/", 1)[-1]
    for end, pattern in PATTERNS.items():
        if low == end or (end.startswith(".") and low.endswith(end)):
            return pattern
    if any(low == end or (end.startswith(".") and low.endswith(end)) for end in PATTERN_LANGUAGES):
        return (_PATTERN_DEF, "")
    return None


def _pattern_definitions(text: str, pattern: tuple[re.Pattern, str] = (_PATTERN_DEF, "")) -> list[Definition]:
    """Definitions by line patterns (no grammar): each runs until the next one at the same or a
    lower indentation.  One pass with a stack of the open definitions (linear in their number)."""
    regex, default_kind = pattern
    defs: list[Definition] = []
    open_defs: list[tuple[int, int, str, str]] = []  # (indent, start, kind, name), indents rising
    for m in regex.finditer(text):
        groups = m.groupdict()
        name = (groups.get("name") or groups.get("fname") or "").strip().strip("\"'")
        if not name:
            continue
        line = m.group(0).lstrip("\n")
        indent = len(line) - len(line.lstrip())
        start = m.start() + len(m.group(0)) - len(line)  # the line's start: its indentation is inside
        while open_defs and open_defs[-1][0] >= indent:
            _, o_start, kind, o_name = open_defs.pop()
            defs.append(Definition(kind, o_name, o_start, m.start()))
        open_defs.append((indent, start, groups.get("kind") or default_kind, name))
    defs.extend(Definition(kind, name, start, len(text)) for _, start, kind, name in open_defs)
    defs.sort(key=lambda d: d.start)
    return defs


def definitions(text: str, language: str | None, name: str | None = None) -> tuple[list[Definition], bool]:
    """Definitions in ``text`` and whether offsets are UTF-8 bytes (True: tree-sitter) or
    characters (False: patterns; the pattern for ``name``'s format, :func:`patterns_for`)."""
    p = parser(language) if language else None
    if p is None:
        return _pattern_definitions(text, patterns_for(name) or (_PATTERN_DEF, "")), False
    data = text.encode(errors="surrogatepass")
    return list(_walk_definitions(p.parse(data).root_node, language, data)), True


def _comment_lines(block: list[str]) -> str:
    out = []
    for line in block:
        s = line.strip()
        s = re.sub(r"^(///?!?|#+!?|/\*+!?|\*+/?|--|\"\"\"|''')", "", s)
        s = re.sub(r"(\*+/|\"\"\"|''')$", "", s).strip()
        if s and not re.fullmatch(r"[-=*#/ ]+", s):
            out.append(s)
    return " ".join(out)


def leading_comment(text: str, max_words: int = MAX_COMMENT_WORDS) -> str:
    """The file's first comment block that is not a licence, before the first code line
    (package, import and include lines are passed over); at most ``max_words`` words."""
    lines = text.splitlines()
    blocks: list[list[str]] = []
    cur: list[str] = []
    in_block = None  # closing delimiter of an open block comment / docstring
    for line in lines[:400]:
        s = line.strip()
        if in_block:
            cur.append(line)
            if in_block in s:
                in_block = None
                blocks.append(cur)  # a block comment ends its block
                cur = []
            continue
        if _PREAMBLE_LINE.match(line):
            if cur:
                blocks.append(cur)
                cur = []
            continue
        if not s:
            if cur:
                blocks.append(cur)
                cur = []
            continue
        if s.startswith(("/*", '"""', "'''")):
            delim = {"/*": "*/", '"""': '"""', "'''": "'''"}[s[:2] if s.startswith("/*") else s[:3]]
            cur.append(line)
            rest = s[2:] if s.startswith("/*") else s[3:]
            if delim not in rest:
                in_block = delim
            else:
                blocks.append(cur)
                cur = []
            continue
        if s.startswith(("//", "#")) and not s.startswith(("#include", "#define", "#if", "#pragma", "#!", "#[")):
            cur.append(line)
            continue
        break
    if cur:
        blocks.append(cur)
    for block in blocks:
        words = _comment_lines(block)
        if words and not _LICENCE.search(words):
            return " ".join(words.split()[:max_words])
    return ""


def chunk_contexts(
    text: str, spans: list[tuple[int, int]], language: str | None = None, name: str | None = None, comment: bool = True
) -> list[str]:
    """Structural context of each chunk ``text[start:end]`` of one source file (parsed once).

    Parameters
    ----------
    text : str
        The whole source file.
    spans : list of (start, end)
        The chunks' character offsets in ``text``.
    language : str, optional
        One of :data:`EXTENSIONS`' values; detected from ``name`` or the text when None.
    name : str, optional
        The file's name (shown first when given).
    comment : bool
        Include the file's leading comment.

    Returns
    -------
    list of str
        Per chunk, lines: file name, leading comment, enclosing definitions joined by `` > ``
        (outermost first), then ``defines: a, b``; empty parts are left out.
    """
    language = language or detect_language(text, name)
    defs, in_bytes = definitions(text, language, name)
    defs.sort(key=lambda d: (d.start, -d.end))
    head = []
    if name:
        head.append(name)
    if comment:
        c = leading_comment(text)
        if c:
            head.append(c)
    starts = [d.start for d in defs]
    # character offset -> UTF-8 byte offset, computed once per file (not once per chunk)
    to_byte = _byte_offsets(text) if in_bytes else None
    out: list[str] = [""] * len(spans)
    # one sweep over the chunks in order of their start, with a stack of the definitions begun
    # before it and still open (its height is the nesting depth): linear in chunks + definitions
    stack: list[Definition] = []
    i = 0
    for j in sorted(range(len(spans)), key=lambda j: spans[j][0]):
        start, end = spans[j]
        b_start, b_end = (to_byte(start), to_byte(end)) if to_byte else (start, end)
        while i < len(defs) and defs[i].start < b_start:
            while stack and stack[-1].end <= defs[i].start:
                stack.pop()
            stack.append(defs[i])
            i += 1
        while stack and stack[-1].end <= b_start:
            stack.pop()
        # nested definitions: every one left on the stack is open at b_start; past
        # MAX_ENCLOSING, the outermost two and the innermost rest are shown, with "…" between
        trimmed = len(stack) > MAX_ENCLOSING
        shown = stack[:2] + stack[2 - MAX_ENCLOSING :] if trimmed else stack
        enclosing = [d for d in shown if d.start < b_start < d.end]
        enclosing += [d for d in defs[i : bisect.bisect_right(starts, b_start)][:MAX_ENCLOSING] if d.end > b_end]
        inside: list[str] = []
        for d in defs[i : bisect.bisect_left(starts, b_end)]:
            if len(inside) == MAX_DEFINED:
                break
            if d.name not in inside and d not in enclosing:
                inside.append(d.name)
        parts = list(head)
        if enclosing:
            labels = [d.label for d in enclosing]
            if trimmed:
                labels.insert(2, "…")
            parts.append(" > ".join(labels))
        if inside:
            parts.append("defines: " + ", ".join(inside))
        out[j] = "\n".join(parts)
    return out


def _byte_offsets(text: str):
    """A function from character offsets of ``text`` to UTF-8 byte offsets, in O(1) after one
    linear pass (ASCII text: the identity)."""
    if text.isascii():
        return lambda i: i
    cum = [0]
    for ch in text:
        cum.append(cum[-1] + len(ch.encode(errors="surrogatepass")))
    return lambda i: cum[i]


def structural_context(
    text: str, start: int, end: int, language: str | None = None, name: str | None = None, comment: bool = True
) -> str:
    """Structural context of one chunk ``text[start:end]``; see :func:`chunk_contexts`."""
    return chunk_contexts(text, [(start, end)], language, name, comment)[0]


def prose_context(title: str, heading_path: list[str]) -> str:
    """Context of a prose chunk: the document's title, then its heading path (``A > B``)."""
    path = [h for h in heading_path if h and h != title]
    return " > ".join([title] + path) if title else " > ".join(path)


def is_source(doc: dict) -> bool:
    """A loaded document (``situate.resources.documents.reading.Document`` as JSON) is source code: a code file,
    or a corpus entry that parses as code (:func:`detect_language`)."""
    fmt = doc.get("format")
    return fmt == "code" or (fmt == "corpus" and detect_language(doc["text"]) is not None)


def document_contexts(doc: dict, spans: list[tuple[int, int]], heading_paths: list[list[str]]) -> list[str]:
    """Structural context for each chunk of a loaded document (``situate.resources.documents.reading.Document``
    as JSON): code files and corpus entries that parse as code get :func:`chunk_contexts`
    (a code file's name included), everything else :func:`prose_context`."""
    fmt = doc.get("format")
    text = doc["text"]
    if fmt == "code":
        name = doc["source"].replace("\\", "/").rsplit("/", 1)[-1]
        return chunk_contexts(text, spans, detect_language(text, name), name)
    if fmt == "corpus":
        lang = detect_language(text)
        if lang is not None:
            return chunk_contexts(text, spans, lang)
    return [prose_context(doc.get("title") or "", hp) for hp in heading_paths]
