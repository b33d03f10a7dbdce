"""Writing blurbs for a document's chunks, back to back, so the document prefix stays cached.

Plain functions over two small interfaces (a tokenizer and a ``generate(tokens)`` callable), so
the loop is tested with fakes and run in the pipeline with the in-process llama-cpp-python model.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable

from assets.preambles import FitPlan
from assets.prompting import ANTHROPIC_2024, PromptTemplate, clean_blurb

_SENTINEL = "\x00SITUATE-USER-MESSAGE\x00"


@dataclasses.dataclass(frozen=True)
class ChatFrame:
    """The chat template's text before and after the user message (the prompt scaffolding)."""

    head: str
    tail: str
    bos: bool  # let the tokenizer add BOS before ``head``
    #: The template is a reasoning model's (it names ``<think>`` tags): the answer follows a
    #: reasoning stage, so generation may not stop at a blank line and needs more tokens.
    reasoning: bool = False


def chat_frame(template: str | None, bos_token: str = "", eos_token: str = "", system: str = "") -> ChatFrame:
    """Split a GGUF's Jinja chat template around one user message, with the generation prompt.

    Without a template (a base model) the frame is empty before and a newline after; with
    ``system``, a system message comes first (a base model gets it as a first line).  The
    template comes from the model file, so it is rendered in jinja2's immutable sandbox: a template
    that reaches for Python internals is refused, it never runs.

    Raises
    ------
    TemplateRefused
        The sandbox refused the template, or it does not render one user message.
    """
    if not template:
        return ChatFrame(f"{system}\n" if system else "", "\n", True)
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
    try:
        rendered = env.from_string(template).render(
            messages=([{"role": "system", "content": system}] if system else [])
            + [{"role": "user", "content": _SENTINEL}], add_generation_prompt=True,
            bos_token=bos_token, eos_token=eos_token)
    except jinja2.exceptions.SecurityError as e:
        raise TemplateRefused(f"the chat template was refused by jinja2's sandbox ({e})") from None
    except jinja2.exceptions.TemplateError as e:
        raise TemplateRefused(f"the chat template does not render ({type(e).__name__}: {e})") from None
    if _SENTINEL not in rendered:
        raise TemplateRefused("the chat template does not render the user message")
    head, tail = rendered.split(_SENTINEL, 1)
    reasoning = bool(re.search(r"</?\s*think", template, re.I))
    if bos_token and head.startswith(bos_token):
        return ChatFrame(head, tail, False, reasoning)
    return ChatFrame(head, tail, True, reasoning)


class TemplateRefused(ValueError):
    """A model file's chat template that situate will not use (refused by the sandbox, or not
    rendering a user message)."""


@dataclasses.dataclass
class PromptBuilder:
    """Token-exact prompts: ``frame.head + document block + chunk block + frame.tail``."""

    tokenizer: object  # .encode(str) -> list[int], .encode_template(str, bos) -> list[int]
    frame: ChatFrame
    template: PromptTemplate = ANTHROPIC_2024

    def __post_init__(self):
        self._head = self.tokenizer.encode_template(self.frame.head, self.frame.bos)
        self._tail = self.tokenizer.encode_template(self.frame.tail, False)

    @property
    def scaffolding_tokens(self) -> int:
        """LLM tokens of the chat template around the user message (head + tail) and of the
        answer prefix."""
        answer = len(self.tokenizer.encode(self.template.answer_prefix)) if self.template.answer_prefix else 0
        return len(self._head) + len(self._tail) + answer

    def count_block(self, window: str) -> int:
        """Exact LLM tokens of the document block holding ``window``."""
        return len(self.tokenizer.encode(self.template.document_block(window)))

    def count_chunk_block(self, chunk: str) -> int:
        """Exact LLM tokens of the chunk block (chunk, tags and instruction)."""
        return len(self.tokenizer.encode(self.template.chunk_block(chunk)))

    def prefix(self, window: str) -> list[int]:
        """Tokens shared by every chunk of a window: template head + document block."""
        return self._head + self.tokenizer.encode(self.template.document_block(window))

    def suffix(self, chunk: str) -> list[int]:
        """Tokens after the prefix for one chunk: chunk block + template tail (+ the template's
        answer prefix)."""
        answer = self.tokenizer.encode(self.template.answer_prefix) if self.template.answer_prefix else []
        return self.tokenizer.encode(self.template.chunk_block(chunk)) + self._tail + answer


@dataclasses.dataclass
class BlurbRecord:
    """What happened for one chunk.

    Attributes
    ----------
    blurb : str
        The cleaned blurb; empty when the chunk is indexed alone.
    status : str
        ``model`` (a usable blurb), or ``fallback:<reason>``.
    raw : str
        What the model wrote.
    problems : list of str
        Tags from :func:`assets.prompting.clean_blurb`.
    prompt_tokens, evaluated, reused, generated : int
        LLM tokens: in the prompt, evaluated, served from the KV cache, generated.
    seconds : float
    window : int
        Index of the window used.
    cached : bool
        The raw text came from the blurb cache (no model call; token counts are the original
        call's, and ``evaluated``/``reused`` are 0).
    """

    blurb: str
    status: str
    raw: str
    problems: list[str]
    prompt_tokens: int
    evaluated: int
    reused: int
    generated: int
    seconds: float
    window: int
    cached: bool = False


def contextualize(text: str, chunks: list[str], plan: FitPlan, builder: PromptBuilder,
                  generate: Callable, log: logging.Logger | None = None,
                  on_blurb: Callable[[int, BlurbRecord], None] | None = None,
                  cache=None, cache_key: Callable[[str, str], str] | None = None,
                  ground: bool = True, generate_batch: Callable | None = None) -> list[BlurbRecord]:
    """Blurbs for every chunk of one document, window by window, chunks back to back.

    Parameters
    ----------
    text : str
        The document.
    chunks : list of str
        Its chunks, in order (``plan.windows[*].chunks`` index into this list).
    plan : FitPlan
        From :func:`assets.preambles.plan`.
    builder : PromptBuilder
    generate : callable
        ``tokens -> resources.llm.Generation`` (the shared ``Llama``, so the prefix is reused).
    log : logging.Logger, optional
        Gets a warning for each fallback.
    on_blurb : callable, optional
        Called with ``(chunk index, record)`` after each chunk.
    cache : resources.cache.BlurbCache, optional
        Raw outputs by ``cache_key(window text, chunk prompt text)``: a hit makes no model call.
    ground : bool
        Drop blurb sentences naming things absent from the document
        (:func:`assets.prompting.ground_blurb`).
    generate_batch : callable, optional
        ``(prefix tokens, [suffix tokens]) -> [Generation]`` (a
        :class:`resources.batching.SharedPrefixBatcher`): a window's uncached chunks are generated
        together over the shared prefix instead of one ``generate`` call each.  Greedy output is
        the same token for token.

    Returns
    -------
    list of BlurbRecord
        One per chunk, in chunk order.  Never raises for a bad blurb: it falls back to the chunk
        alone with status ``fallback:<reason>``.
    """
    out: list[BlurbRecord | None] = [None] * len(chunks)
    if not plan.windows:
        for i, c in enumerate(chunks):
            out[i] = BlurbRecord("", f"fallback:{plan.reason}", "", [], 0, 0, 0, 0, 0.0, -1)
        return out  # type: ignore[return-value]
    for w_index, window in enumerate(plan.windows):
        window_text = text[window.start:window.end]
        prefix = builder.prefix(window_text)
        prompts = {i: chunks[i][:plan.chunk_prompt_ends[i]] for i in window.chunks}
        keys = {i: cache_key(window_text, prompts[i]) if cache is not None else None for i in window.chunks}
        entries = {i: cache.get(keys[i]) if keys[i] else None for i in window.chunks}
        batched: dict[int, object] = {}
        if generate_batch is not None:
            todo = [i for i in window.chunks if entries[i] is None]
            if todo:
                gens = generate_batch(prefix, [builder.suffix(prompts[i]) for i in todo])
                batched = dict(zip(todo, gens))
        for i in window.chunks:
            chunk_prompt = prompts[i]
            key, entry = keys[i], entries[i]
            t0 = time.perf_counter()
            if entry is not None:
                raw, n_prompt, n_eval, n_reused, n_gen = entry["raw"], entry["prompt_tokens"], 0, 0, entry["generated"]
                seconds = time.perf_counter() - t0
            else:
                gen = batched[i] if i in batched else generate(prefix + builder.suffix(chunk_prompt))
                gen.text = builder.template.answer_prefix + gen.text
                raw, n_prompt, n_eval, n_reused, n_gen = gen.text, gen.prompt_tokens, gen.evaluated, gen.reused, gen.generated
                seconds = gen.seconds if i in batched else time.perf_counter() - t0
                if key:
                    cache.put(key, {"raw": raw, "prompt_tokens": n_prompt, "generated": n_gen})
            cleaned = clean_blurb(raw, chunks[i], document=text if ground else None)
            status = "model" if cleaned.usable else f"fallback:{cleaned.problems[-1]}"
            rec = BlurbRecord(cleaned.text, status, raw, cleaned.problems, n_prompt, n_eval, n_reused, n_gen,
                              round(seconds, 4), w_index, entry is not None)
            if not cleaned.usable and log is not None:
                log.warning("chunk %d: unusable blurb (%s), indexing the chunk alone; model wrote %r",
                            i, ", ".join(cleaned.problems), raw[:200])
            out[i] = rec
            if on_blurb:
                on_blurb(i, rec)
    return out  # type: ignore[return-value]
