"""The ``extract`` context of a prose document: its lead sentences, taken from the text, no LLM.

What a page *is* is usually said by the page itself, in the first paragraph under its title
("httpx is a fully featured HTTP client for Python 3"). The ``extract`` mode gives every chunk of
a prose document that lead as its context, beside the chunk's structural context (title and
heading path, :func:`situate.contextual.code_context.prose_context`), where the ``document`` mode
asks the LLM for a summary of the document's first ``SITUATE_DOCUMENT_TOKENS`` tokens.

Examples
--------
>>> lead_of({"text": "# httpx\\n\\n[![Build](b.svg)](ci)\\n\\nHTTPX is a fully featured HTTP client. "
...          "It has sync and async APIs.\\n\\n## Install\\n\\npip install httpx\\n"})
'HTTPX is a fully featured HTTP client. It has sync and async APIs.'
>>> lead_of({"text": "Guide\\n=====\\n\\n.. note:: draft\\n\\nWhat you can do\\n\\nRotate the keys every 90 days."})
'Rotate the keys every 90 days.'
"""

from __future__ import annotations

import re

#: Longest lead, in characters: about 60 tokens of English (cl100k_base), the length of the
#: summaries the ``document`` mode writes (``SITUATE_MAX_TOKENS`` 80 bounds them); a longer lead
#: is cut at a sentence end, else at a word.
MAX_LEAD_CHARS = 320
#: A paragraph shorter than this, in letters, is not a lead (a date, a version, a byline).
MIN_LEAD_LETTERS = 20
#: A paragraph of fewer words than this that ends with no sentence mark is a heading, not a lead
#: (text extracted from HTML keeps its headings as lines of their own).
MIN_LEAD_WORDS = 8

_NOT_PROSE = re.compile(
    r"^\s*("
    r"#{1,6}\s|"  # a Markdown heading
    r"[=\-~^\"'`#*+<>:._]{3,}\s*$|"  # a reStructuredText adornment
    r"\.\. |"  # an RST directive or comment
    r"!\[|\[!\[|<img|<!--|"  # a badge, an image, an HTML comment
    r"```|~~~|"  # a code fence
    r"\||"  # a table row
    r"[-*+]\s|\d+[.)]\s|"  # a list item
    r":[\w-]+:|"  # an RST field
    r">"  # a quotation
    r")"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")


def lead_of(doc: dict) -> str:
    """The lead of a prose document (``Document`` as JSON): its first paragraph of running text,
    cut to :data:`MAX_LEAD_CHARS` at a sentence end; empty when it has none.

    Parameters
    ----------
    doc : dict
        With ``text`` (the extracted text, ``\\n`` line ends); ``title`` is skipped where the text
        repeats it.

    Returns
    -------
    str
        One line of at most :data:`MAX_LEAD_CHARS` characters.
    """
    title = (doc.get("title") or "").strip()
    in_fence = False
    for para in re.split(r"\n\s*\n", doc["text"][:200_000]):
        lines = [x for x in para.strip().splitlines() if x.strip()]
        if not lines:
            continue
        fences = sum(x.lstrip().startswith(("```", "~~~")) for x in lines)
        if in_fence or fences:  # a code block, which may span blank lines
            in_fence ^= fences % 2 == 1
            continue
        text = " ".join(x.strip() for x in lines if not _NOT_PROSE.match(x))
        if text == title or not _is_lead(text):
            continue
        return _cut(text)
    return ""


def _is_lead(text: str) -> bool:
    """Running text, not a heading: :data:`MIN_LEAD_LETTERS` letters, and a sentence mark at its
    end or :data:`MIN_LEAD_WORDS` words."""
    if sum(c.isalpha() for c in text) < MIN_LEAD_LETTERS:
        return False
    return text.rstrip()[-1] in ".!?:" or len(text.split()) >= MIN_LEAD_WORDS


def _cut(text: str) -> str:
    """``text`` whole when short; else its sentences up to :data:`MAX_LEAD_CHARS`, or its words."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= MAX_LEAD_CHARS:
        return text
    out = ""
    for sentence in _SENTENCE_END.split(text):
        if len(out) + len(sentence) + 1 > MAX_LEAD_CHARS:
            break
        out = f"{out} {sentence}".strip()
    return out or text[:MAX_LEAD_CHARS].rsplit(" ", 1)[0]


#: Most characters of a document's heading outline in an ``outline`` reading: about 130 tokens of
#: English, half of a 256-token reading (``SITUATE_DOCUMENT_TOKENS``), so the page's beginning
#: keeps the other half.  Headings past it are left out, the outermost levels first kept.
MAX_OUTLINE_CHARS = 600
#: Deepest heading level an outline lists (``#``, ``##``, ``###``; RST's first three adornments).
OUTLINE_LEVELS = 3
#: The readings a document summary can be written from (``SITUATE_SUMMARY_READING``).
SUMMARY_READINGS = ("head", "outline")


def outline_of(doc: dict, max_chars: int = MAX_OUTLINE_CHARS) -> str:
    """A document's title and heading outline, one line: ``"Title — Contents: A; B; C"``.

    Parameters
    ----------
    doc : dict
        ``Document`` as JSON: ``title``, ``headings`` (``[[offset, level, title], ...]``, levels
        from 1; where a document has none, as a corpus file's documents, its Markdown headings:
        :func:`situate.resources.documents.reading.markdown_headings`).
    max_chars : int
        Bound on the line, in characters; headings of deeper levels are dropped first, then the
        last ones.

    Returns
    -------
    str
        Empty when the document has neither a title nor headings.
    """
    title = (doc.get("title") or "").strip()
    from situate.resources.documents.reading import markdown_headings

    found = doc.get("headings") or markdown_headings(doc.get("text") or "")
    heads = [(lvl, " ".join(str(t).split())) for _, lvl, t in found if lvl <= OUTLINE_LEVELS]
    heads = [(lvl, t) for lvl, t in heads if t and t != title]
    for deepest in range(OUTLINE_LEVELS, 0, -1):
        names = list(dict.fromkeys(t for lvl, t in heads if lvl <= deepest))
        line = "; ".join(names)
        if len(title) + len(line) + 13 <= max_chars or deepest == 1:
            break
    if len(title) + len(line) + 13 > max_chars:
        line = line[: max(0, max_chars - len(title) - 13)].rsplit(";", 1)[0]
    return f"{title} — Contents: {line}" if title and line else title or (f"Contents: {line}" if line else "")


def summary_source(doc: dict, reading: str) -> str:
    """The text a document's summary is written from (its beginning is what the summary reads:
    :func:`situate.contextual.fitting.fit_summary`).

    ``head``: the document's text.  ``outline``: its outline (:func:`outline_of`), a blank line,
    then its text, so a short reading holds what the whole page covers as well as how it opens.

    Raises
    ------
    ValueError
        ``reading`` is not one of :data:`SUMMARY_READINGS`.
    """
    if reading not in SUMMARY_READINGS:
        raise ValueError(f"SITUATE_SUMMARY_READING={reading!r}: set one of {', '.join(SUMMARY_READINGS)}")
    outline = outline_of(doc) if reading == "outline" else ""
    return f"{outline}\n\n{doc['text']}" if outline else doc["text"]
