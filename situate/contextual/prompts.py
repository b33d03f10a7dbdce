"""The blurb prompts: Anthropic's published prompt, verbatim, and the templates built on it (primed
answers, a system line, chunks by reference, a window in one generation, questions), by name.

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
CONTEXT_VERSION = "structural-v2+grounded-v4+clean-v3+skip-v1"


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
#: Chunks by reference: the document is read once, with ``[chunk N]`` marks at chunk
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
#: A window's blurbs in one generation: the prefix of :data:`BY_REFERENCE`
#: (so a chunk that falls back to its own call reuses the cached window), then one request for
#: every chunk of the window, answered one line a chunk.  Written for situate.
BY_REFERENCE_WINDOW = dataclasses.replace(BY_REFERENCE, name="by-reference-window", one_generation=True)
#: Query-predictive context: doc2query (Nogueira et al. 2019, "Document
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
