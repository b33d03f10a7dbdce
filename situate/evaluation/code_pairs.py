"""(description, code) pairs mined from the Python code installed on this machine: the standard
library and the set-up's own site-packages, as CodeSearchNet was built from documented functions.

Each documented function gives one pair: the first sentence of its docstring, and its source with
the docstring removed.  Trivial functions (a body of ``pass``, ``...``, a bare ``return`` or
``raise``), short descriptions and near-duplicates (the same code once whitespace and comments are
removed) are left out, and so is **every function of the evaluation corpora**: CoSQA's 6,267
functions and each Python function of the cookbook's sets, matched by the same normalised content
hash, with and without their docstrings (the count is in the report).  A stable slice (by hash) is
kept apart as the validation set.  Plain functions (no model); the command is
``python -m benchmarks.code_pairs``.

Examples
--------
>>> normalised_hash("def f(x):\\n    # add one\\n    return x + 1\\n") == normalised_hash("def f(x): return x+1")
True
>>> first_sentence("Return the sum of two numbers.  Both are ints.\\n\\nMore text.")
'Return the sum of two numbers.'
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import tokenize
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Bounds of a description, in words: under 4 says too little to search for ("Constructor."), over
#: 64 is not a first sentence.  Written for situate (CodeSearchNet keeps descriptions of 3 or more
#: tokens).
MIN_WORDS, MAX_WORDS = 4, 64
#: Bounds of a function's code without its docstring, in lines: a one-line body is usually a
#: trivial accessor; past 120 lines a function is longer than a code chunk (200 cl100k tokens).
MIN_LINES, MAX_LINES = 3, 120
#: Largest source file read, bytes (generated tables and vendored blobs are larger).
MAX_FILE_BYTES = 1_000_000
#: One pair in this many (by its hash) goes to the validation set.
VALIDATION_EVERY = 20


def first_sentence(doc: str) -> str:
    """The docstring's first sentence: its first paragraph up to the first ``. `` (or all of
    it), on one line."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    para = " ".join(para.split())
    m = re.search(r"^(.+?[.!?])(\s|$)", para)
    return m.group(1) if m else para


def normalised_hash(code: str) -> str:
    """sha256 (16 hex digits) of ``code`` without comments and whitespace: the same function
    indented, reflowed or commented otherwise hashes the same.  Code that does not tokenize (Python
    2) has its whitespace removed alone."""
    try:
        toks = tokenize.generate_tokens(io.StringIO(code).readline)
        parts = [t.string for t in toks if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
        text = "".join(parts)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = code
    return hashlib.sha256(re.sub(r"\s+", "", text).encode()).hexdigest()[:16]


def without_docstring(source: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """The function's source lines with its docstring's lines removed (dedented to column 0)."""
    start = _start(node)
    lines = source.splitlines()[start - 1 : node.end_lineno]
    doc = node.body[0]
    kept = lines[: doc.lineno - start] + lines[doc.end_lineno - start + 1 :]
    indent = min((len(x) - len(x.lstrip()) for x in kept if x.strip()), default=0)
    return "\n".join(x[indent:] for x in kept).strip("\n")


def _start(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The first line of a function, its decorators included (1-based)."""
    return min([d.lineno for d in node.decorator_list] + [node.lineno])


def _trivial(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = node.body[1:]  # after the docstring
    if not body:
        return True
    if len(body) == 1:
        b = body[0]
        if isinstance(b, ast.Pass | ast.Raise) or (isinstance(b, ast.Return) and b.value is None):
            return True
        if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
            return True
    return False


def _parsed(source: str) -> ast.Module | None:
    """``source`` parsed, or None (Python 2, a fragment, nesting too deep); its warnings (invalid
    escapes in old code) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def functions(source: str) -> Iterator[tuple[str, str, str]]:
    """``(name, description, code without docstring)`` of each documented, non-trivial function of
    one module's ``source``; nothing for a module that does not parse."""
    tree = _parsed(source)
    if tree is None:
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node)
        if not doc or _trivial(node):
            continue
        description = first_sentence(doc)
        if not MIN_WORDS <= len(description.split()) <= MAX_WORDS:
            continue
        code = without_docstring(source, node)
        if MIN_LINES <= len(code.splitlines()) <= MAX_LINES:
            yield node.name, description, code


def eval_hashes(corpora: Iterable[Path]) -> set[str]:
    """Normalised hashes of every function of the evaluation corpora (cookbook-form files): each
    entry's content, each labelled chunk, and each Python function in them, with and without its
    docstring."""
    out: set[str] = set()
    for path in corpora:
        for entry in json.loads(Path(path).read_text(encoding="utf-8")):
            texts = [entry["content"]] + [c["content"] for c in entry.get("chunks") or []]
            for text in texts:
                out.add(normalised_hash(text))
                for node_code in _all_functions(text):
                    out.update(normalised_hash(c) for c in node_code)
    return out


def _all_functions(source: str) -> Iterator[tuple[str, str]]:
    """``(with docstring, without)`` of every function of ``source`` (documented or not)."""
    tree = _parsed(source)
    if tree is None:
        return
    lines = source.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            whole = "\n".join(lines[_start(node) - 1 : node.end_lineno])
            bare = without_docstring(source, node) if ast.get_docstring(node) else whole
            yield whole, bare


def mine(files: Iterable[Path], excluded: set[str]) -> tuple[list[dict], dict]:
    """Pairs of ``files`` and the counts of what was left out.

    Returns
    -------
    (list of dict, dict)
        ``{"description", "code", "source", "hash", "split"}`` (``split``: ``train`` or
        ``validation``), and ``{"files", "functions", "duplicates", "excluded_eval", "pairs",
        "validation"}``.
    """
    pairs, seen = [], set()
    counts = dict.fromkeys(("files", "functions", "duplicates", "excluded_eval", "pairs", "validation"), 0)
    for path in files:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        counts["files"] += 1
        for _name, description, code in functions(source):
            counts["functions"] += 1
            h = normalised_hash(code)
            if h in excluded:
                counts["excluded_eval"] += 1
                continue
            if h in seen:
                counts["duplicates"] += 1
                continue
            seen.add(h)
            split = "validation" if int(h, 16) % VALIDATION_EVERY == 0 else "train"
            pairs.append({"description": description, "code": code, "source": str(path), "hash": h, "split": split})
    counts["pairs"] = len(pairs)
    counts["validation"] = sum(p["split"] == "validation" for p in pairs)
    return pairs, counts
