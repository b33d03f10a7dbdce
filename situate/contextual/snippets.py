"""Where a chunk sits in its document, and the lines of it that a query matched.

A chunk is a character span ``[start, end)`` of its document's text (the text situate read:
``\\n`` line ends).  :func:`line_spans` turns spans into 1-based line numbers and UTF-8 byte
offsets of that text, for the table's ``start_line`` / ``end_line`` / ``start_byte`` /
``end_byte``; :func:`matched_lines` picks the few lines of a hit that best match the query, with
their own line breaks and indentation, for what ``situate search`` and the page show.

Examples
--------
>>> line_spans("a\\nbé\\nc\\n", [(2, 5), (5, 7)])
[(2, 2, 2, 6), (3, 3, 6, 8)]
>>> matched_lines("import os\\n\\ndef load_env(path):\\n    return open(path)\\n", "load_env path", 10, width=2)
[(12, 'def load_env(path):'), (13, '    return open(path)')]
"""

from __future__ import annotations

import bisect
import re

#: Lines a hit shows by default: enough for a signature and its first statements, or a heading
#: and its first sentences; a terminal shows ten hits' worth on one screen.
MATCH_LINES = 5
#: Longest line shown, in characters; a longer one is cut and ends with ``…`` (minified or
#: generated text has lines of thousands of characters).
MAX_LINE_CHARS = 160
#: Words of a question that name no code and no topic: they match every line of English, so they
#: do not choose the lines shown (a short list of the commonest English function words).
STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i if in into is it its my no not of on or "
    "the this that to use used using what when where which who why with you your".split()
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")


def line_spans(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """``(start_line, end_line, start_byte, end_byte)`` of each character span of ``text``.

    Parameters
    ----------
    text : str
        The document's text.
    spans : list of (int, int)
        Character offsets ``[start, end)``, each within ``text``.

    Returns
    -------
    list of (int, int, int, int)
        Lines are 1-based and inclusive (the line of the span's last character other than its
        trailing line breaks); bytes are UTF-8 offsets ``[start_byte, end_byte)`` in ``text``
        encoded.  An empty span is one line.
    """
    breaks = [m.start() for m in re.finditer("\n", text)]
    points = sorted({p for span in spans for p in span})
    to_byte, at, count = {}, 0, 0
    for p in points:  # one pass over the text, however many spans overlap
        count += len(text[at:p].encode("utf-8"))
        to_byte[p], at = count, p
    out = []
    for a, b in spans:
        b_text = a + len(text[a:b].rstrip("\n"))  # a chunk's trailing line breaks end no line of it
        first = bisect.bisect_right(breaks, a - 1) + 1
        last = bisect.bisect_right(breaks, max(a, b_text - 1) - 1) + 1
        out.append((first, max(first, last), to_byte[a], to_byte[b]))
    return out


def query_terms(query: str) -> dict[str, float]:
    """The words of ``query`` that choose lines, lower case, with their weight: an identifier
    (``load_env``, ``findDotenv``, ``os.path``) 3, any other word 1; :data:`STOP_WORDS` left out.
    The parts of an identifier count too (``find``, ``dotenv`` of ``find_dotenv``), at 1."""
    terms: dict[str, float] = {}
    for word in _WORD.findall(query):
        low = word.lower()
        if low in STOP_WORDS or len(low) < 2:
            continue
        ident = "_" in word or any(c.isupper() for c in word[1:])
        terms[low] = max(terms.get(low, 0.0), 3.0 if ident else 1.0)
        for part in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", word) if ident else []:
            if part.lower() not in STOP_WORDS and len(part) > 1:
                terms.setdefault(part.lower(), 1.0)
    return terms


def matched_lines(text: str, query: str, first_line: int = 1, width: int = MATCH_LINES) -> list[tuple[int, str]]:
    """The ``width`` consecutive lines of a chunk that best match ``query``, numbered.

    Each line scores the weights of the :func:`query_terms` it contains (a term counted once in
    a window), and a window that starts on a matching line half a point more; the window with
    the highest score wins, the earliest on a tie.  Where no term
    matches, the chunk's first lines.  Blank lines at either end of the window are dropped.

    Parameters
    ----------
    text : str
        The chunk's text.
    query : str
        The search's query.
    first_line : int
        The line number of the chunk's first line in its document (:func:`line_spans`).
    width : int
        Lines shown at most.

    Returns
    -------
    list of (int, str)
        ``(line number, line)``, the line as written (indentation kept, cut to
        :data:`MAX_LINE_CHARS` characters).
    """
    lines = text.split("\n")
    terms = query_terms(query)
    found = [{t for t in terms if t in line.lower()} for line in lines]
    best, best_score = 0, 0.0
    for i in range(len(lines)):
        score = sum(terms[t] for t in set().union(*found[i : i + width])) + (0.5 if found[i] else 0.0)
        if score > best_score:
            best, best_score = i, score
    chosen = list(range(best, min(len(lines), best + width)))
    while chosen and not lines[chosen[-1]].strip():
        chosen.pop()
    while chosen and not lines[chosen[0]].strip():
        chosen.pop(0)
    return [(first_line + i, _cut(lines[i].rstrip())) for i in chosen]


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def hit_json(hit, query: str, width: int = MATCH_LINES) -> dict:
    """A search hit (:class:`situate.resources.store.retrieval.Hit`) as JSON, with ``matched``:
    its :func:`matched_lines` for ``query`` as ``[{"line": n, "text": line}, ...]`` (the whole
    chunk stays in ``text``; ``line`` is null for a row written before lines were recorded)."""
    lines = matched_lines(hit.text, query, hit.start_line or 1, width)
    known = hit.start_line is not None
    return hit.to_json() | {"matched": [{"line": n if known else None, "text": t} for n, t in lines]}
