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
