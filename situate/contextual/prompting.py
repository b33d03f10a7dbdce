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

from situate.contextual.injection import is_instruction, strip_invisible
from situate.resources.store.retrieval import contextualized_text  # noqa: F401  (what the blurb becomes part of)

#: Bump when the prompt or the cleaning changes: rows carry it, and a change re-contextualises.
PROMPT_VERSION = "anthropic-2024-09/v1"
#: Bump when the cleaning, the grounding, the structural context or the composition of the
#: contextualised text changes: rows carry it in their fingerprint, and a change rebuilds them from
#: the blurb and embedding caches (no model call for what is unchanged).
CONTEXT_VERSION = "structural-v2+grounded-v2+clean-v3+skip-v1"


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
    #: A system message put before the user turn (empty: the chat template's own default, e.g.
    #: Qwen's "You are Qwen, created by Alibaba Cloud…").
    system: str = ""
    #: The system message for source files (empty: ``system`` for every document).
    system_code: str = ""
    #: A GBNF grammar the generation must follow (llama.cpp ``LlamaGrammar``); empty for none.
    grammar: str = ""
    #: Chunks by reference: the document block carries a mark (:func:`chunk_mark`) where each
    #: chunk starts, ``instruction`` follows it inside the shared prefix, and a chunk's own
    #: suffix only names its mark and quotes its first line (:meth:`reference_block`) instead
    #: of repeating the chunk, so each chunk goes through the model once, inside the document.
    by_reference: bool = False
    #: With ``by_reference``: the instruction after the document block (in the shared prefix).
    instruction: str = ""
    #: With ``by_reference``: one generation per window writes every chunk's blurb, one line a
    #: chunk starting with its mark (:meth:`window_block`); a chunk whose line is missing,
    #: repeated, garbled or unusable is situated by its own call over the same prefix.
    one_generation: bool = False

    def window_block(self, indexes: list[int]) -> str:
        """The per-window text of a one-generation prompt: the marks of the chunks to situate and
        how to answer."""
        marks = ", ".join(chunk_mark(i) for i in indexes)
        return (
            f"Here are the chunks we want to situate within the whole document: {marks}. Answer with one "
            "line per chunk, in this order, each line starting with the chunk's mark."
        )

    def reference_block(self, index: int, first_line: str) -> str:
        """The per-chunk text of a by-reference prompt: ``chunk_head``, the chunk's mark and its
        quoted first line (:func:`first_line`), ``chunk_tail``."""
        return f"{self.chunk_head}{chunk_mark(index)}, which begins\n<chunk>\n{first_line}\n</chunk>{self.chunk_tail}"

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

#: The mark that starts chunk ``index`` (0-based) in a by-reference prompt's document block.
#: Plain words and digits, so the model can name it and a tokenizer splits it into a few common
#: tokens; it is tokenized on its own (never merged with the document's text around it).
MARK_FORMAT = "[chunk {n}]"
#: Any mark in a model's answer: removed before cleaning, so a mark never reaches a blurb.
MARK_RE = re.compile(r"\s*\[\s*chunk\s+\d+\s*\]", re.I)
#: Most characters of a chunk quoted in its by-reference suffix (about 40 tokens of code or
#: prose: the issue's bound on the quote).
QUOTE_CHARS = 160


def chunk_mark(index: int) -> str:
    """``[chunk N]`` with ``N = index + 1``."""
    return MARK_FORMAT.format(n=index + 1)


def first_line(chunk: str, limit: int = QUOTE_CHARS) -> str:
    """The chunk's first non-blank line, cut to ``limit`` characters at a word end (``…`` marks a
    cut); what a by-reference prompt quotes so the model finds the mark it names."""
    line = next((x.strip() for x in chunk.splitlines() if x.strip()), "")
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0].rstrip() + "…"


#: The published prompt with the answer started for the model ("This chunk"), so a small model
#: continues a description instead of restating the instruction.  Written for situate.
ANTHROPIC_2024_PRIMED = dataclasses.replace(ANTHROPIC_2024, name="anthropic-2024-primed", answer_prefix="This chunk")

#: A system line saying what a situating context is, before the published prompt (which stays
#: verbatim in the user turn).  Written for situate: small instruct models restate the
#: published instruction ("The chunk sits within the overall document for the purposes of
#: improving search retrieval") instead of answering it.
SITUATING_SYSTEM = (
    "You write search context for chunks of documents. Given a document and one chunk of it, you answer "
    "with one or two sentences that say which document the chunk comes from, which section, class or "
    "function it belongs to, and what it covers. You never repeat the instructions."
)
#: The same for source files, in the terms of code (file, module, class, function).
SITUATING_SYSTEM_CODE = (
    "You write search context for chunks of source files. Given a source file and one chunk of it, you "
    "answer with one or two sentences that say what the file is for, which class, function or section "
    "the chunk belongs to, and what that code does. You never repeat the instructions."
)
#: One or two sentences, no tags, no line breaks (GBNF).  A period followed by a non-space
#: (``main.py``, ``e.g.``) does not end a sentence.
TWO_SENTENCES_GBNF = r"""
root ::= sentence (" " sentence)?
sentence ::= [A-Za-z0-9`"'(] char* [.!?]
char ::= [^.!?<>\n] | [.!?] [^ .!?<>\n]
"""

#: The published prompt with the answer started as "This chunk is about": the model goes on with
#: what the chunk covers.  "This chunk" alone (:data:`ANTHROPIC_2024_PRIMED`) let
#: Qwen2.5-Coder-0.5B go on with "sits within the overall document for the purposes of improving
#: search retrieval" (a sample of docs and code chunks, 2026-12-01).  Written for situate.
ANTHROPIC_2024_PRIMED_ABOUT = dataclasses.replace(
    ANTHROPIC_2024, name="anthropic-2024-primed-about", answer_prefix="This chunk is about"
)
#: Chunks by reference (issue 23): the document is read once, with ``[chunk N]`` marks at chunk
#: starts; the published instruction follows the document in the shared prefix (its words
#: verbatim, "this chunk" naming the chunk given after it), and each chunk's own suffix names
#: its mark and quotes its first line.  The answer is started as in
#: :data:`ANTHROPIC_2024_PRIMED_ABOUT`.  Written for situate.
BY_REFERENCE = PromptTemplate(
    name="by-reference",
    document_head="<document>\n",
    document_tail="\n</document>\n",
    instruction=(
        "The document marks where each chunk starts, as [chunk 1], [chunk 2] and so on. "
        "Please give a short succinct context to situate this chunk within the overall document "
        "for the purposes of improving search retrieval of the chunk. Answer only with the "
        "succinct context and nothing else.\n"
    ),
    chunk_head="Here is the chunk we want to situate within the whole document: the chunk marked ",
    chunk_tail="",
    answer_prefix="This chunk is about",
    by_reference=True,
)
#: A window's blurbs in one generation (issue 23, item 2): the prefix of :data:`BY_REFERENCE`
#: (so a chunk that falls back to its own call reuses the cached window), then one request for
#: every chunk of the window, answered one line a chunk.  Written for situate.
BY_REFERENCE_WINDOW = dataclasses.replace(BY_REFERENCE, name="by-reference-window", one_generation=True)
#: Query-predictive context (issue 34, item 1): doc2query (Nogueira et al. 2019, "Document
#: Expansion by Query Prediction") over the cached document, by reference as
#: :data:`BY_REFERENCE` (each chunk goes through the model once, inside the document).  The
#: model writes the questions a user would ask that the chunk answers, in the document's own
#: names; cleaning drops a question that names something absent from the document (the filter of
#: doc2query--, Gospodinov et al. 2023, by names instead of a relevance model).  Written for
#: situate.
QUESTIONS = dataclasses.replace(
    BY_REFERENCE,
    name="questions",
    instruction=(
        "The document marks where each chunk starts, as [chunk 1], [chunk 2] and so on. "
        "Please write three different short questions that a user searching for this chunk would ask and "
        "that the chunk answers, naming what it belongs to in the document's own words. Answer only with "
        "the three numbered questions and nothing else.\n"
    ),
    chunk_head="Here is the chunk we want questions for: the chunk marked ",
    answer_prefix="1.",
)
ANTHROPIC_2024_SYSTEM = dataclasses.replace(ANTHROPIC_2024, name="anthropic-2024+system", system=SITUATING_SYSTEM)
ANTHROPIC_2024_SYSTEM_PRIMED = dataclasses.replace(
    ANTHROPIC_2024_SYSTEM, name="anthropic-2024+system-primed", answer_prefix="This chunk"
)
ANTHROPIC_2024_CODE_SYSTEM = dataclasses.replace(
    ANTHROPIC_2024, name="anthropic-2024+code-system", system_code=SITUATING_SYSTEM_CODE
)
ANTHROPIC_2024_GRAMMAR = dataclasses.replace(ANTHROPIC_2024, name="anthropic-2024+grammar", grammar=TWO_SENTENCES_GBNF)

#: The prompt ``SITUATE_PROMPT`` defaults to: the published prompt, verbatim, with the answer
#: started as "This chunk is about" (docs/quality.md: chosen on blurb shares and Pass@k).
DEFAULT_PROMPT = "anthropic-2024-primed-about"
#: Prompts by name (``SITUATE_PROMPT``); each keeps the published prompt verbatim in the user turn
#: and adds one lever: a primed answer, a system line (for every document or for source files
#: only), a grammar.  The default is chosen on both labelled corpora (docs/quality.md).
PROMPTS = {
    p.name: p
    for p in (
        ANTHROPIC_2024,
        ANTHROPIC_2024_PRIMED,
        ANTHROPIC_2024_PRIMED_ABOUT,
        ANTHROPIC_2024_SYSTEM,
        ANTHROPIC_2024_SYSTEM_PRIMED,
        ANTHROPIC_2024_CODE_SYSTEM,
        ANTHROPIC_2024_GRAMMAR,
        BY_REFERENCE,
        BY_REFERENCE_WINDOW,
        QUESTIONS,
    )
}

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
information overview description""".split()
)


def _restated(sentence: str) -> tuple[str, bool]:
    """``sentence`` with the fragments that restate the prompt cut out, and whether any was.
    Empty when nothing but prompt words is left."""
    out = sentence
    for pat in _RESTATED:
        out = pat.sub(" ", out)
    if out == sentence:
        return sentence, False
    out = re.sub(r"\s+", " ", out).strip()
    out = re.sub(r"\s+([,.;:!?])", r"\1", out)
    # connectors left dangling at the start: "is about X" -> "about X", ", and X" -> "X"
    out = re.sub(r"^(?:[,;:.\-–]\s*)*(?:(?:is|are|and|to|in|that|which|it|for)\b\s*)*[,;:]?\s*", "", out, flags=re.I)
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
        The whole document: when given, sentences naming things absent from it are dropped
        (:func:`ground_blurb`, problem tag ``ungrounded``).

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
        text, dropped = ground_blurb(text, document)
        if dropped:
            problems.append("ungrounded")
    unusable = _unusable(text, chunk, problems, how)
    if unusable:
        problems.append(unusable)
        return CleanBlurb("", problems)
    return CleanBlurb(text, problems)
