"""The document text each blurb prompt carries, fitted to the model's context (``n_ctx``), with no
Dagster in it: the prompt builders per document kind (the model's own chat template around a
prompt template), the generation bounds, and each document's fit plan (its preambles or windows,
:mod:`situate.contextual.preambles`).  Counts are exact, in the loaded LLM's own tokens."""

from __future__ import annotations

from situate.contextual import preambles
from situate.contextual.contextualize import PromptBuilder, chat_frame
from situate.contextual.policy import NO_LLM_MODES
from situate.resources.models.llm import BlurbLLM


def prompt_builder(llm: BlurbLLM, template=None, source: bool = False) -> PromptBuilder:
    """``template`` (default: the configured prompt ``llm.prompt``, the published one unless set)
    inside the model's own chat template, tokenized by the model.  ``source``: the document is a
    source file (a template's ``system_code`` line applies).

    Raises
    ------
    ValueError
        ``llm.prompt`` names no prompt of :data:`situate.contextual.prompts.PROMPTS`.
    """
    from situate.contextual.prompts import PROMPTS

    if template is None and llm.prompt not in PROMPTS:
        raise ValueError(f"unknown prompt {llm.prompt!r} (SITUATE_PROMPT): choose one of {', '.join(PROMPTS)}")
    from situate.contextual.contextualize import TemplateRefused
    from situate.resources.models.registry import ModelFileError

    tok = llm.tokenizer()
    template = template or PROMPTS[llm.prompt]
    system = template.system_code if source and template.system_code else template.system
    if hasattr(tok, "frame"):  # a chat API: the turns are the API's, not a chat template's
        from situate.contextual.contextualize import ChatFrame

        return PromptBuilder(tok, ChatFrame(*tok.frame(system), bos=False), template)
    bos = (
        tok.llm.detokenize([tok.llm.token_bos()], special=True).decode("utf-8", "replace")
        if tok.llm.token_bos() >= 0
        else ""
    )
    try:
        frame = chat_frame(tok.chat_template(), bos, tok.eos_text(), system)
    except TemplateRefused as e:
        raise ModelFileError(f"model file {llm.model_path}: {e}") from None
    return PromptBuilder(tok, frame, template)


def builders_by_kind(llm: BlurbLLM):
    """``doc -> PromptBuilder``: the configured prompt for a loaded document, with the system
    line for source files where the prompt has one (built once per kind)."""
    from situate.contextual.code_context import is_source

    made: dict[bool, PromptBuilder] = {}

    def builder_for(doc: dict) -> PromptBuilder:
        source = is_source(doc)
        if source not in made:
            made[source] = prompt_builder(llm, source=source)
        return made[source]

    return builder_for


#: Generated tokens allowed to a reasoning model (its template names ``<think>``): the reasoning
#: comes before the answer.  1,024 is a budget chosen here, not measured.
REASONING_MAX_TOKENS = 1024


def generation_bound(llm: BlurbLLM, builder: PromptBuilder) -> int:
    """Generated tokens a blurb may take: ``llm.max_tokens`` (a document summary's:
    ``llm.summary_tokens``), at least :data:`REASONING_MAX_TOKENS` for a reasoning model's chat
    template."""
    bound = summary_bound(llm)
    return max(bound, REASONING_MAX_TOKENS) if builder.frame.reasoning else bound


def summary_bound(llm: BlurbLLM) -> int:
    """``llm.summary_tokens`` in ``document`` mode, else ``llm.max_tokens`` (generated tokens)."""
    return llm.summary_tokens if llm.context == "document" else llm.max_tokens


#: A one-generation prompt (``by-reference-window``) reserves this many blurbs' generation bound
#: in each window for its lines: 8 × 80 tokens holds about 20 of the 25-40-token lines the default
#: model writes; a window's chunks past that fall back to their own calls.  Chosen, not measured.
ONE_GENERATION_RESERVE = 8


def fit_bound(llm: BlurbLLM, builder: PromptBuilder) -> int:
    """Generated tokens a window's prompt reserves: :func:`generation_bound`, times
    :data:`ONE_GENERATION_RESERVE` for a one-generation prompt."""
    return generation_bound(llm, builder) * (ONE_GENERATION_RESERVE if builder.template.one_generation else 1)


def fit_document(
    text: str, spans: list[tuple[int, int]], builder: PromptBuilder, n_ctx: int, max_tokens: int
) -> preambles.FitPlan:
    """:func:`situate.contextual.preambles.plan` with the builder's exact counts (by reference: the chunk
    marks of each window included) and the document's own token boundaries as cut points."""
    tokens = builder.tokenizer.encode(text)
    cuts = (
        preambles.token_cuts(text, builder.tokenizer.pieces(tokens)) if hasattr(builder.tokenizer, "pieces") else None
    )
    return preambles.plan(
        text,
        spans,
        n_ctx=n_ctx,
        max_tokens=max_tokens,
        scaffolding_tokens=builder.scaffolding_tokens,
        count_block=builder.count_block,
        count_chunk_block=builder.count_chunk_block,
        cuts=cuts,
        count_window=builder.window_counter(text, spans) if builder.by_reference else None,
    )


def document_builder(llm: BlurbLLM) -> PromptBuilder:
    """The document mode's prompt (:data:`situate.contextual.prompts.DOCUMENT_SUMMARY`) in the model's chat
    template."""
    from situate.contextual.prompts import DOCUMENT_SUMMARY

    return prompt_builder(llm, DOCUMENT_SUMMARY)


def fit_summary(text: str, builder: PromptBuilder, llm: BlurbLLM) -> preambles.FitPlan:
    """The document mode's preamble: the document's beginning, at most ``llm.document_tokens``
    LLM tokens of it (and what ``n_ctx`` leaves), for one summary; its window serves one
    pseudo-chunk of no text at offset 0 (:func:`situate.contextual.document_blurbs.document_records`)."""
    bound = generation_bound(llm, builder)
    frame = builder.scaffolding_tokens + builder.count_chunk_block("") + builder.count_block("")
    room = llm.document_tokens + bound + frame
    return fit_document(text, [(0, 0)], builder, min(llm.n_ctx, room), bound)


def document_plan(text: str, spans: list[tuple[int, int]], llm: BlurbLLM, builder) -> preambles.FitPlan:
    """The fitted plan of one document: none for ``structure`` mode (no LLM prompt), the summary's
    window for ``document`` mode (:func:`fit_summary`), else the windows of the chunk prompts
    (:func:`situate.contextual.preambles.fit_document`), none for a document of more chunks than
    ``llm.max_chunks_per_document``.

    Parameters
    ----------
    text : str
        The document.
    spans : list of (int, int)
        Its chunks' character spans.
    llm : BlurbLLM
        The blurb model's settings (context mode, ``n_ctx`` and generation bound in tokens of its
        tokenizer).
    builder : PromptBuilder or None
        The document's prompt builder (None in ``structure`` mode).
    """
    allowances = [b - a for a, b in spans]
    if llm.context in NO_LLM_MODES:
        why = f"{llm.context} mode (SITUATE_CONTEXT={llm.context}): no LLM prompt"
        return preambles.FitPlan(llm.n_ctx, llm.max_tokens, 0, 0, 0, 0, [], allowances, reason=why)
    if llm.context == "document":
        return fit_summary(text, builder, llm)
    limit = llm.max_chunks_per_document
    if limit and len(spans) > limit:  # no blurbs for it (see the blurbs asset): nothing to fit
        why = f"large document: {len(spans):,} chunks > {limit:,} (SITUATE_MAX_BLURB_CHUNKS), no LLM blurbs"
        bound = generation_bound(llm, builder)
        return preambles.FitPlan(llm.n_ctx, bound, builder.scaffolding_tokens, 0, 0, 0, [], allowances, reason=why)
    return fit_document(text, spans, builder, llm.n_ctx, fit_bound(llm, builder))


def plan_summary(plan: preambles.FitPlan, text_length: int) -> dict:
    """A document's entry in the run's metadata: its tokens and budget (tokens of the blurb LLM's
    tokenizer), windows, whether one window holds the whole document (``text_length``
    characters), the chunk allowance and the prompt's scaffolding tokens."""
    return {
        "document_tokens": plan.document_tokens,
        "budget_tokens": plan.budget,
        "windows": len(plan.windows),
        "fits_whole": len(plan.windows) == 1 and plan.windows[0].end - plan.windows[0].start == text_length,
        "chunk_allowance": plan.chunk_allowance,
        "scaffolding_tokens": plan.scaffolding_tokens,
    }
