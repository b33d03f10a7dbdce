"""What ``situate`` prints: control characters escaped, hits laid out for a person or as JSON."""

from __future__ import annotations

import json
import re

#: Characters never written raw to a terminal: C0 and C1 controls but newline and tab (ESC starts
#: terminal escape sequences: hidden text, clipboard writes by OSC 52), and the Unicode bidi
#: overrides and isolates that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with every terminal control character written as ``\\uXXXX`` (also valid inside a
    JSON string), so a document's text or file name cannot drive the terminal.

    Examples
    --------
    >>> escape_controls("a\x1b[8mhidden")
    'a\\u001b[8mhidden'
    """
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class EscapingStream:
    """A text stream that escapes control characters (:func:`escape_controls`) in everything the
    ``situate`` command prints: hits, blurbs, file names in failure lines, Dagster's log lines."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(escape_controls(text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def print_hits(hits, as_json: bool) -> None:
    if as_json:
        print(json.dumps([h.to_json() for h in hits], ensure_ascii=False, indent=2))
        return
    for h in hits:
        text = " ".join(h.text.split())
        where = f"[{h.collection}] " if h.collection else ""
        print(f"{h.rank:>2}. {where}{h.source} #{h.chunk_index}  (score {h.score:.4f})")
        if h.blurb:
            print(f"    context: {h.blurb[:200]}")
        print(f"    {text[:240]}{'…' if len(text) > 240 else ''}")
