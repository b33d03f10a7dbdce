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

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from situate.contextual.cleaning import clean_blurb
from situate.contextual.preambles import FitPlan
from situate.contextual.prompts import ANTHROPIC_2024, MARK_RE, PromptTemplate, chunk_mark, first_line
from situate.resources.errors import TemplateRefused  # noqa: F401  (importable from here as before)

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

    env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
    try:
        rendered = env.from_string(template).render(
            messages=([{"role": "system", "content": system}] if system else [])
            + [{"role": "user", "content": _SENTINEL}],
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
        )
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


@dataclasses.dataclass
class PromptBuilder:
    """Token-exact prompts: ``frame.head + document block + chunk block + frame.tail``.

    With a by-reference template (:attr:`situate.contextual.prompts.PromptTemplate.by_reference`) the
    document block carries a mark at each chunk start and the template's instruction, and the
    chunk block only names the chunk's mark and quotes its first line: the prefix is
    ``frame.head + <document> + text with marks + </document> + instruction`` and a chunk's
    suffix ``reference + frame.tail + answer prefix``.  Each piece (document text between marks,
    each mark) is tokenized on its own and the token lists are joined, so counts are exact and a
    mark is never merged with the text around it.
    """

    tokenizer: object  # .encode(str) -> list[int], .encode_template(str, bos) -> list[int]
    frame: ChatFrame
    template: PromptTemplate = ANTHROPIC_2024

    def __post_init__(self):
        self._head = self.tokenizer.encode_template(self.frame.head, self.frame.bos)
        self._tail = self.tokenizer.encode_template(self.frame.tail, False)
        # where the shared prefix ends, for a tokenizer that marks it (a chat API's cache
        # breakpoint: situate.resources.models.anthropic_api.ChatTokenizer); none for a model's own
        self._break = self.tokenizer.cache_breakpoint() if hasattr(self.tokenizer, "cache_breakpoint") else []

    @property
    def by_reference(self) -> bool:
        return self.template.by_reference

    @property
    def scaffolding_tokens(self) -> int:
        """LLM tokens of the chat template around the user message (head + tail) and of the
        answer prefix."""
        answer = len(self.tokenizer.encode(self.template.answer_prefix)) if self.template.answer_prefix else 0
        return len(self._head) + len(self._tail) + len(self._break) + answer

    def count_block(self, window: str) -> int:
        """Exact LLM tokens of the document block holding ``window`` (by reference: without
        marks, with the instruction; :meth:`window_counter` counts the marks)."""
        if self.by_reference:
            return len(self._marked_block(window, []))
        return len(self.tokenizer.encode(self.template.document_block(window)))

    def count_chunk_block(self, chunk: str) -> int:
        """Exact LLM tokens of the chunk block (chunk, tags and instruction); by reference, of the
        reference to the chunk (a four-digit mark, its first line quoted)."""
        if self.by_reference:
            return len(self.tokenizer.encode(self.template.reference_block(9998, first_line(chunk))))
        return len(self.tokenizer.encode(self.template.chunk_block(chunk)))

    def _marked_block(self, window: str, marks: list[tuple[int, int]]) -> list[int]:
        """Tokens of a by-reference document block: ``marks`` are ``(offset in window, chunk
        index)``, sorted; each mark is its own token run, on its own line where the chunk starts
        a line."""
        enc = self.tokenizer.encode
        out = enc(self.template.document_head)
        pos = 0
        for off, index in marks:
            out += enc(window[pos:off])
            at_line_start = off == 0 or window[off - 1] == "\n"
            out += enc(chunk_mark(index) + ("\n" if at_line_start else " "))
            pos = off
        out += enc(window[pos:])
        return out + enc(self.template.document_tail) + enc(self.template.instruction)

    @staticmethod
    def marks(spans, a: int, b: int) -> list[tuple[int, int]]:
        """``(offset in the window, chunk index)`` of the chunks that start in ``[a, b)``."""
        return [(s - a, i) for i, (s, _) in enumerate(spans) if a <= s < b]

    def window_counter(self, text: str, spans) -> Callable[[int, int], int]:
        """``(a, b) -> exact LLM tokens of the document block for text[a:b]`` (with its marks,
        by reference), for :func:`situate.contextual.preambles.plan`."""
        if not self.by_reference:
            return lambda a, b: self.count_block(text[a:b])
        return lambda a, b: len(self._marked_block(text[a:b], self.marks(spans, a, b)))

    def window_text(self, text: str, spans, a: int, b: int) -> str:
        """The document text of window ``[a, b)`` as the prompt carries it (marks included), the
        blurb cache's key for the window."""
        if not self.by_reference:
            return text[a:b]
        window, out, pos = text[a:b], [], 0
        for off, index in self.marks(spans, a, b):
            out += [window[pos:off], "\x00" + chunk_mark(index) + "\x00"]
            pos = off
        return "".join(out + [window[pos:]])

    def prefix(self, window: str) -> list[int]:
        """Tokens shared by every chunk of a window: template head + document block."""
        return self._head + self.tokenizer.encode(self.template.document_block(window)) + self._break

    def window_prefix(self, text: str, spans, a: int, b: int) -> list[int]:
        """:meth:`prefix` of window ``[a, b)`` of ``text``; by reference with the marks of the
        chunks that start in it and the instruction."""
        if not self.by_reference:
            return self.prefix(text[a:b])
        return self._head + self._marked_block(text[a:b], self.marks(spans, a, b)) + self._break

    def chunk_text(self, index: int, chunk: str) -> str:
        """What the chunk's suffix says of it: the chunk (tags and instruction around it), or by
        reference the mark and first line."""
        if self.by_reference:
            return self.template.reference_block(index, first_line(chunk))
        return self.template.chunk_block(chunk)

    def window_suffix(self, indexes: list[int]) -> list[int]:
        """One-generation suffix: the window's request (the marks of ``indexes``) + template tail
        + the first line's start, ``[chunk N]`` and the answer prefix."""
        start = f"{chunk_mark(indexes[0])} {self.template.answer_prefix}".rstrip()
        return self.tokenizer.encode(self.template.window_block(indexes)) + self._tail + self.tokenizer.encode(start)

    def suffix(self, chunk: str, index: int | None = None) -> list[int]:
        """Tokens after the prefix for one chunk: chunk block (by reference: the reference to
        chunk ``index``) + template tail (+ the template's answer prefix)."""
        answer = self.tokenizer.encode(self.template.answer_prefix) if self.template.answer_prefix else []
        if self.by_reference:
            if index is None:
                raise ValueError("a by-reference suffix needs the chunk's index")
            return self.tokenizer.encode(self.chunk_text(index, chunk)) + self._tail + answer
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
        Tags from :func:`situate.contextual.cleaning.clean_blurb`.
    prompt_tokens, evaluated, reused, generated : int
        LLM tokens: in the prompt, evaluated, served from the KV cache, generated.
    written : int
        Of ``evaluated``, the tokens an API wrote to its prompt cache (billed above plain input:
        Anthropic's ``cache_creation_input_tokens``); 0 for a model without such a cache.
    seconds : float
    window : int
        Index of the window used.
    cached : bool
        The raw text came from the blurb cache (no model call; token counts are the original
        call's, and ``evaluated``/``reused`` are 0).
    kept : bool
        Kept from an earlier version of the document whose chunk had the same text
        (:mod:`situate.contextual.edits`): no prompt was built (``cached`` is true as well).
    doc_sha256 : str
        sha256 of the document version the blurb was written against.
    from_file : str
        The sha256 of the blurb file (:mod:`situate.contextual.blurb_files`) the raw text came from; empty
        when this machine's model wrote it.  Such a blurb is kept across ingests only while the
        same file is set (:func:`situate.contextual.edits.written_by_model`), so a removed or replaced file
        stops supplying blurbs, and it is exported with status ``file``.
    text_sha256 : str
        sha256 of the chunk's text (how the chunk is recognised in a later version).
    reuse_reported : bool
        Whether ``reused`` was measured: False where a model server did not say which prompt
        tokens it reused (``reused`` is then 0 and ``evaluated`` every token sent).
    mode : str
        What made the context: ``chunk:<prompt name>`` (a blurb per chunk), ``document`` (one
        summary per document), ``structure`` (no LLM call: the structural context alone; the
        status says why).
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
    kept: bool = False
    doc_sha256: str = ""
    text_sha256: str = ""
    mode: str = ""
    from_file: str = ""
    written: int = 0
    reuse_reported: bool = True


_LINE_MARK = re.compile(r"^\s*[-*]?\s*\[\s*chunk\s+(\d+)\s*\]\s*[:.\-–]?\s*", re.I)


def parse_window_lines(text: str, indexes: list[int]) -> dict[int, tuple[str, str]]:
    r"""Each chunk's line of a one-generation answer: ``{index: (line, "")}``, or ``("", why)``
    with ``why`` ``missing`` (no line starts with its mark), ``repeated`` (more than one does, or
    its line says word for word what an earlier chunk's said: a loop) or ``garbled`` (its line
    says nothing).  A line without a mark continues the line before it;
    a mark of a chunk not asked for is ignored.

    Examples
    --------
    >>> parse_window_lines("[chunk 1] This chunk is about A.\n[chunk 3] This chunk is about C.", [0, 1, 2])
    {0: ('This chunk is about A.', ''), 1: ('', 'missing'), 2: ('This chunk is about C.', '')}
    """
    found: dict[int, list[str]] = {i: [] for i in indexes}
    current: list[str] | None = None
    for line in text.splitlines():
        m = _LINE_MARK.match(line)
        if m:
            i = int(m.group(1)) - 1
            current = found[i] if i in found else None
            if current is not None:
                current.append(line[m.end() :].strip())
        elif current is not None and current and line.strip():
            current[-1] = f"{current[-1]} {line.strip()}"
    out = {}
    seen: set[str] = set()
    for i in indexes:
        lines = found[i]
        said = re.sub(r"\W+", " ", lines[0]).strip().lower() if len(lines) == 1 else ""
        if not lines:
            out[i] = ("", "missing")
        elif len(lines) > 1 or (said and said in seen):  # twice, or another chunk's line again (a loop)
            out[i] = ("", "repeated")
        elif len(re.findall(r"\w+", lines[0])) < 2:
            out[i] = ("", "garbled")
        else:
            out[i] = (lines[0], "")
        seen.add(said)
    return out


def record_from_raw(
    raw: str,
    chunk: str,
    document: str | None,
    by_reference: bool = False,
    prompt_tokens: int = 0,
    evaluated: int = 0,
    reused: int = 0,
    generated: int = 0,
    seconds: float = 0.0,
    window: int = -1,
    cached: bool = True,
) -> BlurbRecord:
    """The record of what the model wrote for a chunk: chunk marks removed (by reference),
    cleaned and grounded against ``document`` (:func:`situate.contextual.cleaning.clean_blurb`); status
    ``model`` or ``fallback:<reason>``.  Used for fresh, cached and file-given outputs alike."""
    answer = MARK_RE.sub("", raw) if by_reference else raw
    cleaned = clean_blurb(answer, chunk, document=document)
    status = "model" if cleaned.usable else f"fallback:{cleaned.problems[-1]}"
    return BlurbRecord(
        cleaned.text,
        status,
        raw,
        cleaned.problems,
        prompt_tokens,
        evaluated,
        reused,
        generated,
        seconds,
        window,
        cached,
    )


def contextualize(
    text: str,
    chunks: list[str],
    plan: FitPlan,
    builder: PromptBuilder,
    generate: Callable,
    log: logging.Logger | None = None,
    on_blurb: Callable[[int, BlurbRecord], None] | None = None,
    cache=None,
    cache_key: Callable[[str, str], str] | None = None,
    ground: bool = True,
    generate_batch: Callable | None = None,
    spans: list[tuple[int, int]] | None = None,
    kept: dict[int, BlurbRecord] | None = None,
    generate_window: Callable | None = None,
) -> list[BlurbRecord]:
    """Blurbs for every chunk of one document, window by window, chunks back to back.

    Parameters
    ----------
    text : str
        The document.
    chunks : list of str
        Its chunks, in order (``plan.windows[*].chunks`` index into this list).
    plan : FitPlan
        From :func:`situate.contextual.preambles.plan`.
    builder : PromptBuilder
    generate : callable
        ``tokens -> situate.resources.models.llm.Generation`` (the shared ``Llama``, so the prefix is reused).
    log : logging.Logger, optional
        Gets a warning for each fallback.
    on_blurb : callable, optional
        Called with ``(chunk index, record)`` after each chunk.
    cache : situate.resources.store.cache.BlurbCache, optional
        Raw outputs by ``cache_key(window text, chunk prompt text)``: a hit makes no model call.
    ground : bool
        Drop blurb sentences naming things absent from the document
        (:func:`situate.contextual.cleaning.ground_blurb`).
    generate_batch : callable, optional
        ``(prefix tokens, [suffix tokens]) -> [Generation]`` (a
        :class:`situate.resources.models.batching.SharedPrefixBatcher`): a window's uncached chunks are generated
        together over the shared prefix instead of one ``generate`` call each.  Greedy output is
        the same token for token.
    spans : list of (start, end), optional
        The chunks' character spans in ``text``: required by a by-reference builder (the marks
        go where chunks start).
    kept : dict, optional
        ``{chunk index: record}`` of chunks whose blurb is kept from an earlier version of the
        document (:func:`situate.contextual.edits.kept_blurbs`): no prompt is built for them, and a window
        whose chunks are all kept is not read.
    generate_window : callable, optional
        ``(tokens, line starts, max_tokens a line) -> Generation``
        (:meth:`situate.resources.models.llm.BlurbLLM.generate_lines`): with a one-generation template
        (:attr:`situate.contextual.prompts.PromptTemplate.one_generation`), one sequence writes the lines of
        every uncached chunk of a window, each line started with its chunk's mark and the answer
        prefix (a 0.5B model asked for several lines at once wrote one and stopped); the lines are
        parsed back to their chunks (:func:`parse_window_lines`), and a chunk whose line is
        missing, repeated, garbled or unusable gets its own call through ``generate`` (problem tag
        ``one-generation-fallback:<why>``), over the same cached prefix.

    Returns
    -------
    list of BlurbRecord
        One per chunk, in chunk order.  Never raises for a bad blurb: it falls back to the chunk
        alone with status ``fallback:<reason>``.

    Raises
    ------
    ValueError
        A by-reference builder without ``spans``.
    """
    kept = kept or {}
    out: list[BlurbRecord | None] = [kept.get(i) for i in range(len(chunks))]
    if builder.by_reference and spans is None:
        raise ValueError("a by-reference prompt needs the chunks' spans")
    if not plan.windows:
        for i in range(len(chunks)):
            if out[i] is None:
                out[i] = BlurbRecord("", f"fallback:{plan.reason}", "", [], 0, 0, 0, 0, 0.0, -1)
        return out  # type: ignore[return-value]
    job = _Document(
        text, chunks, plan, builder, generate, log, on_blurb, cache, cache_key, ground, generate_batch, spans
    )
    for w_index, window in enumerate(plan.windows):
        members = [i for i in window.chunks if i not in kept]
        if members:
            job.window(w_index, window, members, out, generate_window)
    return out  # type: ignore[return-value]


@dataclasses.dataclass
class _Document:
    """One document's :func:`contextualize` call: its arguments, shared by its windows."""

    text: str
    chunks: list[str]
    plan: FitPlan
    builder: PromptBuilder
    generate: Callable
    log: logging.Logger | None
    on_blurb: Callable[[int, BlurbRecord], None] | None
    cache: object
    cache_key: Callable[[str, str], str] | None
    ground: bool
    generate_batch: Callable | None
    spans: list[tuple[int, int]] | None

    def emit(self, i: int, rec: BlurbRecord, out: list) -> None:
        out[i] = rec
        if self.on_blurb:
            self.on_blurb(i, rec)

    def window(self, w_index: int, window, members: list[int], out: list, generate_window: Callable | None) -> None:
        """The records of the chunks ``members`` of window ``w_index``, into ``out``: from the
        cache, one generation over the window, a batch over its shared prefix, or a call each."""
        builder, plan, text, spans = self.builder, self.plan, self.text, self.spans
        fell_back: dict[int, str] = {}
        unpaid: dict = {}
        window_text = builder.window_text(text, spans, window.start, window.end)
        prefix = builder.window_prefix(text, spans, window.start, window.end)
        prompts = {i: self.chunks[i][: plan.chunk_prompt_ends[i]] for i in members}
        keys = {
            i: self.cache_key(window_text, builder.chunk_text(i, prompts[i]) if builder.by_reference else prompts[i])
            if self.cache is not None
            else None
            for i in members
        }
        entries = {i: self.cache.get(keys[i]) if keys[i] else None for i in members}
        todo = [i for i in members if entries[i] is None]
        if builder.template.one_generation and generate_window is not None and todo:
            done, fell_back, unpaid = _one_generation(
                text,
                self.chunks,
                todo,
                prefix,
                builder,
                generate_window,
                plan.n_ctx,
                plan.max_tokens,
                w_index,
                window_text,
                self.cache,
                self.cache_key,
                self.ground,
            )
            for i, rec in done.items():
                self.emit(i, rec, out)
            members = [i for i in members if i not in done]
            todo = [i for i in todo if i not in done]
        batched: dict[int, object] = {}
        if self.generate_batch is not None and todo:
            gens = self.generate_batch(prefix, [builder.suffix(prompts[i], i) for i in todo])
            batched = dict(zip(todo, gens))
        for i in members:
            rec = self.record(i, prefix, prompts[i], keys[i], entries[i], batched.get(i), w_index)
            if i in fell_back:
                rec.problems = rec.problems + [f"one-generation-fallback:{fell_back[i]}"]
                if unpaid:  # the window's call made no usable line: its figures go here
                    for k in ("prompt_tokens", "evaluated", "reused", "generated", "seconds"):
                        setattr(rec, k, getattr(rec, k) + unpaid[k])
                    rec.reuse_reported = rec.reuse_reported and unpaid["reuse_reported"]
                    unpaid = {}
            self.emit(i, rec, out)

    def record(self, i: int, prefix, chunk_prompt: str, key, entry, batched, w_index: int) -> BlurbRecord:
        """Chunk ``i``'s record: from its cache ``entry``, its ``batched`` generation, or a call
        of ``generate`` over the window's ``prefix`` (written to the cache under ``key``)."""
        builder = self.builder
        t0 = time.perf_counter()
        gen = None
        if entry is not None:
            raw, n_prompt, n_eval, n_reused, n_gen = entry["raw"], entry["prompt_tokens"], 0, 0, entry["generated"]
            seconds = time.perf_counter() - t0
        else:
            gen = batched if batched is not None else self.generate(prefix + builder.suffix(chunk_prompt, i))
            gen.text = builder.template.answer_prefix + gen.text
            raw, n_prompt, n_eval, n_reused, n_gen = (
                gen.text,
                gen.prompt_tokens,
                gen.evaluated,
                gen.reused,
                gen.generated,
            )
            seconds = gen.seconds if batched is not None else time.perf_counter() - t0
            if key:
                self.cache.put(key, {"raw": raw, "prompt_tokens": n_prompt, "generated": n_gen})
        rec = record_from_raw(
            raw,
            self.chunks[i],
            self.text if self.ground else None,
            builder.by_reference,
            n_prompt,
            n_eval,
            n_reused,
            n_gen,
            round(seconds, 4),
            w_index,
            entry is not None,
        )
        if rec.status != "model" and self.log is not None:
            self.log.warning(
                "chunk %d: unusable blurb (%s), indexing the chunk alone; model wrote %r",
                i,
                ", ".join(rec.problems),
                raw[:200],
            )
        if gen is not None:
            rec.written = getattr(gen, "written", 0)
            rec.reuse_reported = getattr(gen, "reuse_reported", True)
        return rec


def _one_generation(
    text,
    chunks,
    todo,
    prefix,
    builder,
    generate_window,
    n_ctx,
    max_tokens,
    w_index,
    window_text,
    cache,
    cache_key,
    ground,
) -> tuple[dict[int, BlurbRecord], dict[int, str], dict]:
    """A window's one generation (see :func:`contextualize`).

    Returns
    -------
    (records, fallbacks, call)
        The usable records it gives; ``{index: why}`` of the chunks it leaves to their own call
        (``missing``, ``repeated``, ``garbled``, or the cleaning's reason); the call's figures when
        no record carries them (no line was usable), else ``{}``.
    """
    suffix = builder.window_suffix(todo)
    key = cache_key(window_text, "one-generation:" + ",".join(map(str, todo))) if cache is not None else None
    entry = cache.get(key) if key else None
    t0 = time.perf_counter()
    reported = True
    if entry is not None:
        raw, n_prompt, n_eval, n_gen, seconds = entry["raw"], entry["prompt_tokens"], 0, entry["generated"], 0.0
    else:
        starts = [f"\n{chunk_mark(i)} {builder.template.answer_prefix}".rstrip() for i in todo[1:]]
        gen = generate_window(prefix + suffix, starts, max_tokens)
        raw = f"{chunk_mark(todo[0])} {builder.template.answer_prefix}".rstrip() + gen.text
        n_prompt, n_eval, n_gen, seconds = gen.prompt_tokens, gen.evaluated, gen.generated, time.perf_counter() - t0
        reported = getattr(gen, "reuse_reported", True)
        if key and gen.generated:  # a sequence with no room for a line is not an answer to keep
            cache.put(key, {"raw": raw, "prompt_tokens": n_prompt, "generated": n_gen})
    call = {
        "prompt_tokens": n_prompt,
        "evaluated": n_eval,
        "reused": n_prompt - n_eval,
        "generated": n_gen,
        "seconds": round(seconds, 4),
        "window": w_index,
        "reuse_reported": reported,
    }
    out: dict[int, BlurbRecord] = {}
    fallbacks: dict[int, str] = {}
    for i, (line, why) in parse_window_lines(raw, todo).items():
        if why:
            fallbacks[i] = why
            continue
        rec = record_from_raw(line, chunks[i], text if ground else None, True, cached=entry is not None)
        if rec.status != "model":
            fallbacks[i] = rec.problems[-1]  # unusable (ungrounded, restated, ...): its own call
            continue
        rec.raw = line
        rec.problems = rec.problems + ["one-generation"]
        if not out:  # the one call's figures go to the first chunk it served
            for k, v in call.items():
                setattr(rec, k, v)
        out[i] = rec
    return out, fallbacks, ({} if out else call)
