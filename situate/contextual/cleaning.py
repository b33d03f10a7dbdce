"""Cleaning what a small model writes back into a blurb: reasoning and tags stripped, restated
prompt words and loops cut, the length bounded, sentences naming things absent from the document
dropped (grounding), instruction-like text refused (:mod:`situate.contextual.injection`); an
unusable answer falls back to the chunk alone with its reasons."""

from __future__ import annotations

import dataclasses
import re

from situate.contextual.injection import is_instruction, strip_invisible

#: Longest blurb kept, in characters (about 80 words): the blog's contexts are 50-100 tokens.
MAX_BLURB_CHARS = 480
#: Fewer words than this is not a usable context.
MIN_BLURB_WORDS = 3

#: An answer prefix given to the model (``This chunk`` / ``This chunk is about``) and the function
#: words that say nothing after it: a blurb that is only these (the model stopped at once, or a
#: one-generation line with nothing after its mark) is ``empty``, not a blurb.
_PRIMED_ONLY = re.compile(r"^\W*this chunk(?: is about)?(?:\W+(?:the|a|an|this|that|of|to|and|its|it))*\W*$", re.I)

#: Reasoning tags: ``<think>``, ``<thinking>``, ``<reasoning>``, with or without attributes.
_THINK_OPEN_TAG = re.compile(r"<\s*(?:think|thinking|reasoning)\b[^>]*>", re.I)
_THINK_CLOSE_TAG = re.compile(r"<\s*/\s*(?:think|thinking|reasoning)\s*>", re.I)
_TAG = re.compile(r"</?\s*(document|chunk|context|answer|think|response|output)\s*>", re.I)
_LEAD = re.compile(
    r"^\s*(?:here(?:'s| is) (?:the|a) (?:short |succinct |concise )*context[^:\n]*:|"
    r"(?:succinct |short |concise )*context\s*:|answer\s*:)\s*",
    re.I,
)

#: Fragments that restate the published prompt (its words: "situate", "the whole/overall
#: document", "the purposes of improving search retrieval", "a short succinct context", "Answer
#: only with …"), as SmolLM2-135M and Qwen2.5-Coder-0.5B were seen writing them, misspellings
#: included ("The chunk sitsuate within the document to provide …").  Each is cut out of its
#: sentence; what the sentence says besides is kept.
_RESTATED = [
    re.compile(p, re.I)
    for p in (
        r"\b(?:here is|this is|these are) (?:the|a) chunks? (?:that )?(?:we|you) (?:want|wanted|need) to \w+"
        r"(?: (?:within|in) (?:the )?(?:whole |overall |entire )?document)?",
        r"\b(?:the|this|a) chunks? (?:that )?(?:(?:we|you) (?:want|wanted|need) to |is to be |to be |is being )?"
        r"si\w{0,3}u?ate[sd]?\b(?: (?:within|in) (?:the )?(?:whole |overall |entire )?document)?",
        r"\b(?:(?:the|this) chunk )?(?:sits?|is situated|is located|is placed|fits?) (?:with)?in (?:the )?"
        r"(?:whole |overall |entire )?document\b",
        r"\b(?:situat\w*|sitsuat\w*) (?:(?:this|the) chunk )?(?:(?:within|in) (?:the )?(?:whole |overall |entire )?document)?",  # noqa: E501
        r"\b(?:(?:with|for) the |for )?purposes? of improving (?:the )?search(?:ing)? retrieval(?: of (?:the|this|a) chunks?)?",  # noqa: E501
        r"\b(?:to |for |and )?(?:improve|improving|improves|better) (?:the )?search(?:ing)? retrieval(?: of (?:the|this|a) chunks?)?",  # noqa: E501
        r"\bsearch(?:ing)? retrieval(?: of (?:the|this|a) chunks?)?",
        # the prompt's purpose clause ("... to provide a concise context for"); "This chunk provides a
        # brief context for the installation of X" says something and is kept
        r"\b(?:by|to|and) (?:provid(?:e|ing)|giv(?:e|ing)|offer(?:ing)?) (?:a |an )?(?:short |succinct |concise |brief )+"  # noqa: E501
        r"context(?: (?:for|to))?",
        r"\bshort succinct context\b",
        r"\banswer only with[^.]*",
    )
]
#: Talk about the task or the reader instead of the chunk: the whole sentence is dropped.
_META = re.compile(r"\bthe document you provided\b|\byou provided\b|\bas an ai\b", re.I)
#: Words of the prompt and of talk about the task: a sentence left with nothing but these (and
#: stopwords) after the restated fragments are cut says nothing about the chunk.
_PROMPT_WORDS = frozenset(
    """
a an the this that these those it its is are was be to of for in within with by on and or as
chunk chunks document documents whole overall entire situate situates situating situated sitsuate
context contexts succinct short concise brief purpose purposes improve improving improves better
search searching retrieval retrieve provide provides providing provided give gives giving
offer offers offering answer only nothing else here we you want need can will which so help helps
information overview description summary""".split()
)


#: The last word of what a cut left, when it needs more after it ("This summary is.", "…, which is
#: a crucial aspect of.", "…and its importance in."): a copula, a modal, a preposition, an
#: article, a conjunction or a relative pronoun (review s6, G4; 21 of the committed per-chunk
#: blurbs ended so after their cut: ``benchmarks/reports/summary-grounding-rules.md``).
DANGLING_END = re.compile(
    r"\b(?:is|are|was|were|be|been|being|will|can|may|would|should|for|of|to|with|by|in|on|at|as|from|into"
    r"|about|the|a|an|and|or|that|which|this|its|their|helps?|how)\W*$",
    re.I,
)


def mended(text: str) -> str:
    """``text`` (what a cut left of a sentence) without a fragment at its end (:data:`DANGLING_END`):
    the clause from its last comma or semicolon ("This chunk is about latency, which is a crucial
    aspect of." → "This chunk is about latency."), else the dangling words ("…routing and its
    importance in." → "…routing and its importance."); ``""`` when nothing is left."""
    body = text.strip().rstrip(" .!?")
    while body and DANGLING_END.search(body):
        comma = max(body.rfind(","), body.rfind(";"))
        body = body[:comma] if comma > 0 else DANGLING_END.sub("", body)
        body = body.rstrip(" ,;:")
    if body == text.strip().rstrip(" .!?"):
        return text
    return body + "." if body else ""


def _restated(sentence: str) -> tuple[str, bool]:
    """``sentence`` with the fragments that restate the prompt cut out, and whether any was.
    A fragment left at its end is mended (:func:`mended`: "…, which is important for search
    retrieval." leaves no "…, which is important for."); empty when nothing but prompt words is
    left ("This summary is for the purposes of improving search retrieval." leaves no "This
    summary is."): such a sentence is removed whole."""
    out = sentence
    for pat in _RESTATED:
        out = pat.sub(" ", out)
    if out == sentence:
        return sentence, False
    out = re.sub(r"\s+", " ", out).strip()
    out = re.sub(r"\s+([,.;:!?])", r"\1", out)
    # connectors left dangling at the start: "is about X" -> "about X", ", and X" -> "X"
    out = re.sub(r"^(?:[,;:.\-–]\s*)*(?:(?:is|are|and|to|in|that|which|it|for)\b\s*)*[,;:]?\s*", "", out, flags=re.I)
    out = mended(out)
    words = [w.lower() for w in re.findall(r"[A-Za-z_][\w'-]*|\d+", out)]
    if not [w for w in words if w not in _PROMPT_WORDS]:
        return "", True
    out = out[0].upper() + out[1:] if out and out[0].islower() else out
    if out and out[-1] not in ".!?…)]\"'`":
        out += "."
    return out, True


def strip_reasoning(text: str) -> tuple[str, str]:
    """The answer of a reasoning model's output, and what was done.

    * ``…</think>answer`` (the opening tag was in the chat template): the text after the last
      closing tag, nested or attribute-bearing tags included (``<think type="x">``,
      ``<thinking>``, ``<reasoning>``);
    * ``<think>…`` never closed (reasoning cut by the token cap): what came before the opening tag,
      usually nothing.

    Returns
    -------
    (answer, how)
        ``how`` is ``""`` (no reasoning), ``"think"`` (reasoning removed) or ``"think-unfinished"``.
    """
    closes = list(_THINK_CLOSE_TAG.finditer(text))
    if closes:
        return text[closes[-1].end() :], "think"
    opened = _THINK_OPEN_TAG.search(text)
    if opened:
        return text[: opened.start()], "think-unfinished"
    return text, ""


@dataclasses.dataclass
class CleanBlurb:
    """A cleaned blurb and what was done to it.

    Attributes
    ----------
    text : str
        The blurb to index; empty when unusable.
    problems : list of str
        Each a short tag: ``think`` (reasoning removed), ``tags``, ``looped``, ``restated`` (words
        restating the prompt were cut, or a whole sentence of them dropped), ``dangling`` (a
        sentence ending in a colon), ``unfinished`` (cut mid-sentence), ``truncated``, ``empty``,
        ``too-short``, ``chunk-echo``, ``instruction`` (a sentence speaking to or as an assistant was
        dropped: a chat role label, template tokens, orders about instructions or the reply),
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
        g = tuple(w.lower().strip(".,;:") for w in words[i : i + n])
        if g in grams and i >= grams[g] + n:  # a non-overlapping repeat of n words
            kept = " ".join(words[:i]).rstrip(" ,;:")
            end = max(kept.rfind(". "), kept.rfind("! "), kept.rfind("? "))
            if kept.endswith((".", "!", "?")) or end < 0:
                return kept, True
            return kept[: end + 1], True
        grams.setdefault(g, i)
    return text, False


def _bound(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    end = max(cut.rfind(". "), cut.rfind(".\n"))
    if end >= limit // 2:
        return cut[: end + 1], True
    return cut.rsplit(" ", 1)[0].rstrip(" ,;:") + "…", True


def _chunk_echo(blurb: str, chunk: str) -> bool:
    """True when the blurb is mostly copied from the chunk (≥ 80% of its 5-word runs)."""
    w = re.findall(r"\w+", blurb.lower())
    if len(w) < 5:
        return " ".join(w) in " ".join(re.findall(r"\w+", chunk.lower())) and len(w) > 0
    c = re.findall(r"\w+", chunk.lower())
    cgrams = {tuple(c[i : i + 5]) for i in range(len(c) - 4)}
    bgrams = [tuple(w[i : i + 5]) for i in range(len(w) - 4)]
    return sum(g in cgrams for g in bgrams) >= 0.8 * len(bgrams)


#: Words a blurb may use without the document containing them: names of languages, formats and
#: kinds of code that situate a chunk without being in it.
GENERIC_NAMES = frozenset(
    """
rust python java javascript typescript go golang c c++ cpp kotlin swift ruby php scala haskell
api apis json yaml toml xml html css sql http https url urls cli gui ui id ids io os utf-8 ascii
unicode readme markdown github git linux windows macos unix posix llvm gcc jvm javadoc junit
pytest""".split()
)

_NAME = re.compile(r"`([^`]+)`|\b([A-Za-z_][\w]*(?:(?:\.|::)[A-Za-z_][\w]*)+)\b|\b([A-Za-z_]\w*)\b")


_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf)\.", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> list[str]:
    """Sentences of ``text``, not split after e.g., i.e., etc., vs., cf."""
    guarded = _ABBREVIATIONS.sub(lambda m: m.group(1) + "\x00", text.strip())
    return [x.replace("\x00", ".") for x in _SENTENCE_END.split(guarded) if x]


def _present(name: str, doc: str) -> bool:
    """``name`` (lower case) is in ``doc``: whole, as the plural of a name it has ("TTYs", "ASTs",
    "UDFs": three of the wrong drops read by hand in ``benchmarks/reports/summary-grounding-rules.md``),
    or each part of a dotted / ``::`` path."""
    name = re.sub(r"\(.*\)$|<.*>$", "", name.strip()).strip()  # read_file() → read_file
    if not name or name in GENERIC_NAMES or name in doc:
        return True
    if len(name) > 3 and name.endswith("s") and name[:-1] in doc:
        return True
    parts = [x for x in re.split(r"::|\.", name) if x]
    return len(parts) > 1 and all(x in doc or x in GENERIC_NAMES for x in parts)


#: An acronym and its expansion given together: "natural language processing (NLP)", "the NDC
#: (Nested Diagnostic Context)", "user-defined functions (UDFs)".  The model glosses a term in
#: words the document need not use; four of the correct summaries read by hand in
#: ``benchmarks/reports/summary-grounding-rules.md`` were emptied for such words alone.
_GLOSS_BEFORE = re.compile(r"((?:[\w'-]+\s+){0,5}[\w'-]+)\s*\(([A-Za-z][A-Za-z0-9]{1,7})\)")
_GLOSS_AFTER = re.compile(r"\b([A-Za-z][A-Za-z0-9]{1,7})\s*\(((?:[\w'-]+\s+){1,5}[\w'-]+)\)")
#: Words an acronym may leave out of its letters ("Internet of Things (IoT)" keeps "of").
_GLOSS_SKIPPED = frozenset("of and the for to in on a an".split())


def _initials(words: list[str], skip: frozenset = frozenset()) -> str:
    """The first letters of ``words`` and of the parts of each (``WebAssembly``: W, A;
    ``user-defined``: u, d), lower case, leaving out the words in ``skip``."""
    parts = [p for w in words if w.lower() not in skip for p in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", w)]
    return "".join(p[0] for p in parts).lower()


def _expands(acronym: str, words: list[str]) -> bool:
    """Whether ``words`` spell ``acronym`` (a plural's ``s`` left out: "UDFs") by their initials."""
    letters = re.sub(r"(?<=[A-Z])s$", "", acronym).lower()
    return letters in (_initials(words), _initials(words, _GLOSS_SKIPPED))


def _glosses(sentence: str, doc: str) -> list[tuple[int, int]]:
    """The spans of ``sentence`` where an acronym is given with its expansion (:data:`_GLOSS_BEFORE`,
    :data:`_GLOSS_AFTER`) and either the acronym is in ``doc`` (lower case: "NDC (Nested Diagnostic
    Context)") or the expansion is in lower case ("natural language processing (NLP)"): their words
    are not names the document must contain.  "Amazon Web Services (AWS)" of a page without AWS is
    still judged."""
    found = []
    for m in _GLOSS_BEFORE.finditer(sentence):
        words = m.group(1).split()
        k = next((k for k in range(1, len(words) + 1) if _expands(m.group(2), words[-k:])), 0)
        if k:
            found.append((m.end(1) - len(" ".join(words[-k:])), m.end(), m.group(2), words[-k:]))
    for m in _GLOSS_AFTER.finditer(sentence):
        if _expands(m.group(1), m.group(2).split()):
            found.append((m.start(), m.end(), m.group(1), m.group(2).split()))
    return [
        (a, b) for a, b, acronym, words in found if _present(acronym.lower(), doc) or all(w == w.lower() for w in words)
    ]


def absent_names(sentence: str, document: str) -> list[str]:
    """Code-like names in ``sentence`` that ``document`` does not contain.

    A name is text in backticks, a dotted or ``::`` path, or a word with an inner capital, an
    underscore or a digit (``loadConfig``, ``read_file``, ``utf8``), or a capitalised word that does
    not start the sentence.  Words in :data:`GENERIC_NAMES` are allowed, and so are an acronym and
    its expansion given together (:func:`_glosses`); the match against the document ignores case,
    a call's ``()`` and generic ``<…>``, a plural's ``s``, and a path is present when each of its
    parts is.
    """
    doc = document.lower()
    sentence = _ABBREVIATIONS.sub(" ", sentence)
    glosses = _glosses(sentence, doc)
    absent = []
    for m in _NAME.finditer(sentence):
        name = m.group(1) or m.group(2) or m.group(3)
        if any(a <= m.start() and m.end() <= b for a, b in glosses):
            continue
        if m.group(3):
            w = m.group(3)
            code_like = any(ch.isupper() for ch in w[1:]) or "_" in w or any(ch.isdigit() for ch in w)
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


def _grounded(blurb: str, document: str) -> tuple[str, list[str]]:
    """``blurb`` without the sentences that name code absent from ``document``
    (:func:`ground_blurb`), a library it never uses as one, or restate a prompt
    (:func:`situate.contextual.summary_grounding.ground_summary`, the check a document summary
    gets; no language is judged here: a chunk's blurb describes a part, not the file); and the
    tags of what was dropped (``restated``, ``ungrounded``)."""
    from situate.contextual.summary_grounding import ground_summary  # it builds on this module

    return ground_summary(blurb, document, None)


def _kept_sentences(sentences: list[str], document: str | None) -> tuple[list[str], list[str]]:
    """The sentences of a blurb that say something about the chunk, and why others were dropped
    (``instruction``: an instruction the document does not contain, :func:`is_instruction`;
    ``restated``: the prompt's words restated; ``dangling``: a sentence ending in a colon), each
    tag once, in that order."""
    kept, restated, dangling, instruction = [], False, False, False
    for x in sentences:
        if is_instruction(x, document):
            instruction = True
            continue
        if _META.search(x):
            restated = True
            continue
        x, cut = _restated(x)
        restated |= cut
        if not x:
            continue
        if x.endswith(":"):
            dangling = True
            continue
        kept.append(x)
    why = [tag for tag, hit in (("instruction", instruction), ("restated", restated), ("dangling", dangling)) if hit]
    return kept, why


def _unusable(text: str, chunk: str | None, problems: list[str], how: str) -> str | None:
    """Why a cleaned blurb cannot be used (``empty``, ``too-short``, ``chunk-echo``), or None.  An
    empty one is named by what emptied it, taken out of ``problems`` (``ungrounded``,
    ``instruction``, ``restated``, ``dangling``; a reasoning model's unfinished thinking)."""
    if not text or _PRIMED_ONLY.match(text):
        for why in ("ungrounded", "instruction", "restated", "dangling", "think"):
            if why in problems:
                problems.remove(why)
                return "unfinished" if why == "think" and how == "think-unfinished" else why
        return "empty"
    if len(re.findall(r"\w+", text)) < MIN_BLURB_WORDS:
        return "too-short"
    if _chunk_echo(text, chunk):
        return "chunk-echo"
    return None


def clean_blurb(raw: str, chunk: str, max_chars: int = MAX_BLURB_CHARS, document: str | None = None) -> CleanBlurb:
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
        The whole document: when given, sentences naming code or a library absent from it are
        dropped (problem tag ``ungrounded``), and sentences restating a prompt (``restated``)
        (:func:`_grounded`).

    Returns
    -------
    CleanBlurb
        ``text`` empty when unusable (the chunk is then indexed alone).
    """
    problems: list[str] = []
    text, how = strip_reasoning(strip_invisible(raw))
    if how:
        problems.append("think")
    # the answer is one paragraph: a blank line ends it (the "\n\n" stop string, applied here
    # for reasoning models, whose generation cannot stop there)
    text = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0] if text.strip() else ""
    if _TAG.search(text):
        problems.append("tags")
        text = _TAG.sub(" ", text)
    text = _LEAD.sub("", text)
    text = re.sub(r"\s+", " ", text).strip().strip("\"'` ").strip()
    text, looped = cut_loops(text)
    if looped:
        problems.append("looped")
    kept, dropped_why = _kept_sentences(_sentences(text) if text else [], document)
    problems += dropped_why
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
        text, tags = _grounded(text, document)
        problems += [t for t in tags if t not in problems]
    unusable = _unusable(text, chunk, problems, how)
    if unusable:
        problems.append(unusable)
        return CleanBlurb("", problems)
    return CleanBlurb(text, problems)
