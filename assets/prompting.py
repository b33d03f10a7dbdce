"""The blurb prompt (Anthropic's, verbatim) and cleaning of what a small model writes back.

The prompt is the one published in Anthropic's "Introducing Contextual Retrieval" (2024-09-19)::

    <document>
    {{WHOLE_DOCUMENT}}
    </document>
    Here is the chunk we want to situate within the whole document
    <chunk>
    {{CHUNK_CONTENT}}
    </chunk>
    Please give a short succinct context to situate this chunk within the overall document for the
    purposes of improving search retrieval of the chunk. Answer only with the succinct context and
    nothing else.

It is split at the chunk so that everything before ``Here is the chunk`` is a shared prefix.
"""

from __future__ import annotations

import dataclasses
import re

#: Bump when the prompt or the cleaning changes: rows carry it, and a change re-contextualises.
PROMPT_VERSION = "anthropic-2024-09/v1"
#: Bump when the cleaning, the grounding, the structural context or the composition of the
#: contextualised text changes: rows carry it in their fingerprint, and a change rebuilds them from
#: the blurb and embedding caches (no model call for what is unchanged).
CONTEXT_VERSION = "structural-v2+grounded-v2+clean-v3"


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    """A blurb prompt in four pieces around the document window and the chunk."""

    name: str
    document_head: str
    document_tail: str
    chunk_head: str
    chunk_tail: str
    #: Text placed at the start of the model's answer (after the chat template's assistant turn);
    #: the model continues it, and it is part of the blurb.
    answer_prefix: str = ""

    def document_block(self, window: str) -> str:
        return f"{self.document_head}{window}{self.document_tail}"

    def chunk_block(self, chunk: str) -> str:
        return f"{self.chunk_head}{chunk}{self.chunk_tail}"


#: Anthropic's published prompt (see the module docstring), verbatim.
ANTHROPIC_2024 = PromptTemplate(
    name="anthropic-2024",
    document_head="<document>\n",
    document_tail="\n</document>\n",
    chunk_head="Here is the chunk we want to situate within the whole document\n<chunk>\n",
    chunk_tail=(
        "\n</chunk>\n"
        "Please give a short succinct context to situate this chunk within the overall document "
        "for the purposes of improving search retrieval of the chunk. Answer only with the "
        "succinct context and nothing else."
    ),
)

#: One blurb per document (the ``document-context`` configuration of ``situate eval``): the same
#: document block as :data:`ANTHROPIC_2024`, then a request for the document's own context in the
#: published prompt's words.  Written for situate; not from the blog.
DOCUMENT_SUMMARY = PromptTemplate(
    name="document-summary",
    document_head="<document>\n",
    document_tail="\n</document>\n",
    chunk_head="",
    chunk_tail=(
        "Please give a short succinct summary of what this document is and what it contains, for "
        "the purposes of improving search retrieval of its chunks. Answer only with the summary "
        "and nothing else."
    ),
)

#: The published prompt with the answer started for the model ("This chunk"), so a small model
#: continues a description instead of restating the instruction.  Written for situate.
ANTHROPIC_2024_PRIMED = dataclasses.replace(ANTHROPIC_2024, name="anthropic-2024-primed",
                                            answer_prefix="This chunk")

#: Prompts by name; the default is Anthropic's published one (the only one measured on the
#: developers' queries: see README, Quality).
PROMPTS = {p.name: p for p in (ANTHROPIC_2024, ANTHROPIC_2024_PRIMED)}

#: Longest blurb kept, in characters (about 80 words): the blog's contexts are 50-100 tokens.
MAX_BLURB_CHARS = 480
#: Fewer words than this is not a usable context.
MIN_BLURB_WORDS = 3

_THINK_CLOSED = re.compile(r"<think>.*?</think>", re.S | re.I)
_THINK_OPEN = re.compile(r"<think>.*\Z", re.S | re.I)
_TAG = re.compile(r"</?\s*(document|chunk|context|answer|think|response|output)\s*>", re.I)
_LEAD = re.compile(
    r"^\s*(?:here(?:'s| is) (?:the|a) (?:short |succinct )*context[^:\n]*:|"
    r"(?:succinct |short )*context\s*:|answer\s*:)\s*", re.I)
#: Phrases of the prompt a small model repeats instead of answering (shared/eval/README.md: a fifth
#: of SmolLM2-135M's blurbs restate the instruction).
_INSTRUCTION = re.compile(
    r"situate (?:this|the) chunk|want to situate|succinct context|search retrieval|the document you provided|"
    r"answer only with|here is the chunk|within the (?:whole|overall) document|"
    r"(?:short|succinct) context (?:to|for)", re.I)


@dataclasses.dataclass
class CleanBlurb:
    """A cleaned blurb and what was done to it.

    Attributes
    ----------
    text : str
        The blurb to index; empty when unusable.
    problems : list of str
        Each a short tag: ``think``, ``tags``, ``loop``, ``truncated``, ``empty``, ``too-short``,
        ``instruction``, ``dangling`` (a sentence ending in a colon), ``chunk-echo``,
        ``ungrounded`` (sentences naming things absent from the document were dropped).  The last
        tag names the reason when the blurb is unusable.
    """

    text: str
    problems: list[str]

    @property
    def usable(self) -> bool:
        return bool(self.text)


def cut_loops(text: str, min_repeat_words: int = 6) -> tuple[str, bool]:
    """Cut a repetition loop: keep text up to the second occurrence of a repeated sentence or
    of a repeated run of ``min_repeat_words`` words.  Returns ``(text, cut)``.
    """
    sentences = re.split(r"(?<=[.!?])\s+", text.strip())
    seen, kept = set(), []
    for s in sentences:
        key = re.sub(r"\W+", " ", s.lower()).strip()
        if key and key in seen:
            return " ".join(kept), True
        seen.add(key)
        kept.append(s)
    words = text.split()
    n = min_repeat_words
    grams: dict[tuple, int] = {}
    for i in range(len(words) - n + 1):
        g = tuple(w.lower().strip(".,;:") for w in words[i:i + n])
        if g in grams and i >= grams[g] + n:  # a non-overlapping repeat of n words
            kept = " ".join(words[:i]).rstrip(" ,;:")
            end = max(kept.rfind(". "), kept.rfind("! "), kept.rfind("? "))
            if kept.endswith((".", "!", "?")) or end < 0:
                return kept, True
            return kept[:end + 1], True
        grams.setdefault(g, i)
    return text, False


def _bound(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    end = max(cut.rfind(". "), cut.rfind(".\n"))
    if end >= limit // 2:
        return cut[:end + 1], True
    return cut.rsplit(" ", 1)[0].rstrip(" ,;:") + "…", True


def _chunk_echo(blurb: str, chunk: str) -> bool:
    """True when the blurb is mostly copied from the chunk (≥ 80% of its 5-word runs)."""
    w = re.findall(r"\w+", blurb.lower())
    if len(w) < 5:
        return " ".join(w) in " ".join(re.findall(r"\w+", chunk.lower())) and len(w) > 0
    c = re.findall(r"\w+", chunk.lower())
    cgrams = {tuple(c[i:i + 5]) for i in range(len(c) - 4)}
    bgrams = [tuple(w[i:i + 5]) for i in range(len(w) - 4)]
    return sum(g in cgrams for g in bgrams) >= 0.8 * len(bgrams)


#: Words a blurb may use without the document containing them: names of languages, formats and
#: kinds of code that situate a chunk without being in it.
GENERIC_NAMES = frozenset("""
rust python java javascript typescript go golang c c++ cpp kotlin swift ruby php scala haskell
api apis json yaml toml xml html css sql http https url urls cli gui ui id ids io os utf-8 ascii
unicode readme markdown github git linux windows macos unix posix llvm gcc jvm javadoc junit
pytest""".split())

_NAME = re.compile(r"`([^`]+)`|\b([A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_][\w]*)+)\b|\b([A-Za-z_]\w*)\b")


_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf)\.", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> list[str]:
    """Sentences of ``text``, not split after e.g., i.e., etc., vs., cf."""
    guarded = _ABBREVIATIONS.sub(lambda m: m.group(1) + "\x00", text.strip())
    return [x.replace("\x00", ".") for x in _SENTENCE_END.split(guarded) if x]


def _present(name: str, doc: str) -> bool:
    """``name`` (lower case) is in ``doc``: whole, or each part of a dotted / ``::`` path."""
    name = re.sub(r"\(.*\)$|<.*>$", "", name.strip()).strip()  # read_file() → read_file
    if not name or name in GENERIC_NAMES or name in doc:
        return True
    parts = [x for x in re.split(r"::|\.", name) if x]
    return len(parts) > 1 and all(x in doc or x in GENERIC_NAMES for x in parts)


def absent_names(sentence: str, document: str) -> list[str]:
    """Code-like names in ``sentence`` that ``document`` does not contain.

    A name is text in backticks, a dotted or ``::`` path, or a word with an inner capital, an
    underscore or a digit (``loadConfig``, ``read_file``, ``utf8``), or a capitalised word that does
    not start the sentence.  Words in :data:`GENERIC_NAMES` are allowed; the match against the
    document ignores case, a call's ``()`` and generic ``<…>``, and a path is present when each of
    its parts is.
    """
    doc = document.lower()
    sentence = _ABBREVIATIONS.sub(" ", sentence)
    absent = []
    for m in _NAME.finditer(sentence):
        name = m.group(1) or m.group(2) or m.group(3)
        if m.group(3):
            w = m.group(3)
            code_like = (any(ch.isupper() for ch in w[1:]) or "_" in w or any(ch.isdigit() for ch in w))
            proper = w[0].isupper() and m.start() > 0 and len(w) > 2
            if not (code_like or proper):
                continue
        if not _present(name.lower(), doc):
            absent.append(name)
    return absent


def ground_blurb(blurb: str, document: str) -> tuple[str, int]:
    """Drop the sentences of ``blurb`` that name something absent from ``document``.

    A small model invents function, class and product names (shared/MODELS.md: "it invents
    facts"); a sentence whose names are all in the document is kept.

    Returns
    -------
    (text, n_dropped)
        The kept sentences, and how many were dropped.
    """
    sentences = _sentences(blurb)
    kept = [x for x in sentences if not absent_names(x, document)]
    return " ".join(kept), len(sentences) - len(kept)


def clean_blurb(raw: str, chunk: str, max_chars: int = MAX_BLURB_CHARS,
                document: str | None = None) -> CleanBlurb:
    """Clean what the LLM wrote for one chunk.

    Strips ``<think>`` stages (closed, empty or unterminated), echoed prompt tags and lead-ins
    ("Context:"), cuts repetition loops, drops sentences that restate the instruction or end in a
    dangling colon and an unfinished last sentence (cut by the token cap) after finished ones,
    bounds the length at a sentence end near ``max_chars``, and rejects a blurb that is empty, too
    short, restates the instruction or copies the chunk.

    Parameters
    ----------
    raw : str
        The generated text.
    chunk : str
        The chunk it is meant to situate.
    max_chars : int
        Longest blurb kept, in characters.
    document : str, optional
        The whole document: when given, sentences naming things absent from it are dropped
        (:func:`ground_blurb`, problem tag ``ungrounded``).

    Returns
    -------
    CleanBlurb
        ``text`` empty when unusable (the chunk is then indexed alone).
    """
    problems: list[str] = []
    text = raw
    if re.search(r"<think>", text, re.I):
        problems.append("think")
        text = _THINK_CLOSED.sub(" ", text)
        text = _THINK_OPEN.sub(" ", text)
    text = re.sub(r"</think>", " ", text, flags=re.I)
    if _TAG.search(text):
        problems.append("tags")
        text = _TAG.sub(" ", text)
    text = _LEAD.sub("", text)
    text = re.sub(r"\s+", " ", text).strip().strip("\"'` ").strip()
    text, looped = cut_loops(text)
    if looped:
        problems.append("loop")
    sentences = re.split(r"(?<=[.!?:])\s+", text) if text else []
    kept = [x for x in sentences if not _INSTRUCTION.search(x) and not x.endswith(":")]
    if len(kept) < len(sentences):
        problems.append("instruction" if any(_INSTRUCTION.search(x) for x in sentences) else "dangling")
        text = " ".join(kept)
    if len(kept) >= 2 and not re.search(r"[.!?)\]\"'`…]$", kept[-1]):
        # the generation stopped mid-sentence (the max_tokens cap): keep the finished sentences
        problems.append("unfinished")
        kept = kept[:-1]
        text = " ".join(kept)
    text, cut = _bound(text, max_chars)
    if cut:
        problems.append("truncated")
    if document is not None and text:
        text, dropped = ground_blurb(text, document)
        if dropped:
            problems.append("ungrounded")
    unusable = None
    if not text:
        unusable = "empty"
    elif len(re.findall(r"\w+", text)) < MIN_BLURB_WORDS:
        unusable = "too-short"
    elif _chunk_echo(text, chunk):
        unusable = "chunk-echo"
    if unusable:
        if unusable == "empty" and problems and problems[-1] in ("instruction", "dangling", "ungrounded"):
            unusable = problems.pop()
        problems.append(unusable)
        return CleanBlurb("", problems)
    return CleanBlurb(text, problems)


def contextualized_text(blurb: str, chunk: str, context: str = "") -> str:
    """The text that is embedded and BM25-indexed: the structural context and the blurb (each
    when not empty, one per line), a blank line, then the chunk; the chunk alone when both are
    empty.  Blurb, blank line, chunk is Anthropic's cookbook's form."""
    head = "\n".join(x for x in (context, blurb) if x)
    return f"{head}\n\n{chunk}" if head else chunk
