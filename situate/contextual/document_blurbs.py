"""A document's blurbs, with no Dagster in it: the records of each context mode (one summary per
document, a blurb per chunk by reference over the cached document or with the published prompt, or
structure alone), the cache keys and settings that make them, the blurb file and the edit's kept
blurbs they reuse, and the stage the ``blurbs`` asset writes (:class:`DocumentBlurber`).

One in-process ``Llama`` object works through a document's chunks back to back; the document window
is a token-identical prefix, so llama.cpp evaluates it once and reuses its KV cache for the next chunk.
"""

from __future__ import annotations

import collections
import dataclasses
import threading

from situate.contextual import blurb_files
from situate.contextual.contextualize import BlurbRecord, contextualize, record_from_raw
from situate.contextual.edits import kept_blurbs, recheck, text_sha256
from situate.contextual.fitting import builders_by_kind, document_builder, generation_bound, summary_bound
from situate.contextual.lead import lead_of, summary_source
from situate.contextual.policy import NO_LLM_MODES, context_for, with_mode
from situate.contextual.preambles import FitPlan
from situate.contextual.prompts import ANTHROPIC_2024, CONTEXT_VERSION, PROMPT_VERSION
from situate.contextual.skipping import chunk_reasons
from situate.resources.models.llm import BlurbLLM
from situate.resources.models.message_batches import BatchCache
from situate.resources.store.cache import blurb_cache_for, digest
from situate.resources.store.store import Store, read_ok

#: Generation stops at a blank line or an echoed tag: a blurb is one short paragraph.
STOP = ["\n\n", "</chunk>", "<document>", "<chunk>"]
#: What a summary says of the prompt tokens reused where no model call's reuse was reported (a
#: model server that does not count them, llama-cpp-python's): never a 0 that reads as measured.
REUSE_NOT_REPORTED = "not reported by this server"


def stops(reasoning: bool) -> list[str]:
    """Stop strings: :data:`STOP`; without the blank line for a reasoning model, whose reasoning
    has blank lines before the answer (cleaning keeps the answer's first paragraph instead)."""
    return [s for s in STOP if s != "\n\n"] if reasoning else list(STOP)


def blurb_key(
    llm: BlurbLLM,
    template_name: str = ANTHROPIC_2024.name,
    reasoning: bool = False,
    max_tokens: int | None = None,
    system: str = "",
):
    """The blurb cache key function: ``(window text, chunk prompt text) -> sha256 hex`` over the LLM
    file's sha256, the prompt template and version, and the decoding settings (``system``: the
    chat frame's head, when the template sets a system line; empty for the model's default)."""
    settings = {
        "llm_sha256": llm.identity(),
        "template": template_name,
        "prompt_version": PROMPT_VERSION,
        "max_tokens": max_tokens or llm.max_tokens,
        "repeat_penalty": llm.repeat_penalty,
        "stop": stops(reasoning),
        "temperature": 0.0,
        "seed": llm.seed,
    }
    if system:
        settings["system"] = system

    def key(window: str, chunk_prompt: str) -> str:
        return digest(settings, window, chunk_prompt)

    return key


#: What writes a chunk's context (``SITUATE_CONTEXT``; :class:`situate.resources.models.llm.BlurbLLM`).
CONTEXT_MODES = ("chunk", "document", "extract", "structure")


def skipped_records(n: int, reason: str, mode: str = "structure", doc_sha256: str = "") -> list[BlurbRecord]:
    """``n`` records of chunks that get no blurb on purpose (status ``skipped:<reason>``, no model
    call): not a fallback, so the ``fallback_share`` check does not count them."""
    return [
        BlurbRecord("", f"skipped:{reason}", "", [], 0, 0, 0, 0, 0.0, -1, mode=mode, doc_sha256=doc_sha256)
        for _ in range(n)
    ]


def extract_records(n: int, lead: str, doc_sha256: str) -> list[BlurbRecord]:
    """``n`` records of the chunks of a prose document in ``extract`` mode: each gets the
    document's lead (:func:`situate.contextual.lead.lead_of`) as its context, no model call (status
    ``skipped:extract``, mode ``extract``)."""
    return [
        BlurbRecord(lead, "skipped:extract", "", [], 0, 0, 0, 0, 0.0, -1, mode="extract", doc_sha256=doc_sha256)
        for _ in range(n)
    ]


def settings_id(llm: BlurbLLM, max_tokens: int | None = None) -> str:
    """What makes a document's blurbs: the LLM file's sha256, the mode and prompt, the decoding
    settings, ``n_ctx`` (it decides the windows the model reads) and the chunk limit
    (``max_chunks_per_document``: whether the model is asked at all).  Blurbs kept across an edit
    or an unchanged re-ingest (:mod:`situate.contextual.edits`) must have been made with the same settings."""
    return digest(
        llm.identity(),
        llm.context,
        llm.prompt,
        PROMPT_VERSION,
        CONTEXT_VERSION,
        max_tokens or summary_bound(llm),
        llm.repeat_penalty,
        llm.document_tokens if llm.context == "document" else 0,
        {"n_ctx": llm.n_ctx, "max_chunks_per_document": llm.max_chunks_per_document}
        | (
            {"summary_reading": llm.summary_reading}
            if llm.context == "document" and llm.summary_reading != "head"
            else {}
        ),
    )


def keep_rechecked(
    kept: dict[int, dict], decided: dict[int, BlurbRecord], texts: list[str], document: str, by_reference: bool
) -> int:
    """Put the kept records (:func:`situate.contextual.edits.kept_blurbs`) that still pass against
    ``document`` into ``decided`` (as :class:`BlurbRecord`, marked kept, no tokens spent); the
    others are left to the model.  Returns how many failed the check (:func:`situate.contextual.edits.recheck`)."""
    fields = {f.name for f in dataclasses.fields(BlurbRecord)}
    failed = 0
    for i, prev in kept.items():
        if i in decided:
            continue
        if not recheck(prev, texts[i], document, by_reference):
            failed += 1
            continue
        decided[i] = dataclasses.replace(
            BlurbRecord(**{k: v for k, v in prev.items() if k in fields}),
            cached=True,
            kept=True,
            evaluated=0,
            reused=0,
            seconds=0.0,
        )
    return failed


class LazyBlurbFile:
    """``SITUATE_BLURBS_FILE`` read once per run, on the first document that can use it (never in
    ``structure`` mode, nor for a run whose documents all skip the model), keeping the lines of
    one mode and model file (:func:`situate.contextual.blurb_files.read`).  A file that cannot be read fails
    each document that needed it with the same :class:`situate.contextual.blurb_files.BlurbFileError` (its
    message names the file and the line); documents that did not need it go on."""

    def __init__(self, path: str, mode: str, model_sha256: str, log):
        self.path, self.mode, self.model_sha256, self.log = path, mode, model_sha256, log
        self._file: blurb_files.BlurbFile | None = None
        self._error: blurb_files.BlurbFileError | None = None
        self._lock = threading.Lock()  # documents in flight: the file is read once

    def get(self) -> blurb_files.BlurbFile:
        """The file's lines for this mode and model.

        Raises
        ------
        situate.contextual.blurb_files.BlurbFileError
            The file cannot be read (first try, and every later call of the run).
        """
        with self._lock:
            return self._get()

    def _get(self) -> blurb_files.BlurbFile:
        if self._error is not None:
            raise self._error
        if self._file is None:
            try:
                self._file = blurb_files.read(self.path, mode=self.mode, model_sha256=self.model_sha256)
            except blurb_files.BlurbFileError as e:
                self._error = e
                self.log.error(f"blurbs: {e} (SITUATE_BLURBS_FILE); the documents that need it fail")
                raise
            f = self._file
            self.log.info(
                f"blurbs: {len(f):,} blurbs for {self.mode} in {self.path} (SITUATE_BLURBS_FILE) "
                f"of {f.lines:,} lines; the model makes those it lacks"
            )
            if f.rejected:
                self.log.warning(
                    f"blurbs: {f.rejected:,} line(s) of {self.path} rejected, their chunks go to "
                    f"the model: {'; '.join(f.rejections)}"
                )
        return self._file

    def summary(self) -> dict:
        """The file's figures for the run's metadata (:meth:`situate.contextual.blurb_files.BlurbFile.summary`);
        empty when no file was read."""
        if self._error is not None:
            return {"blurb_file_error": str(self._error)}
        return self._file.summary() if self._file is not None else {}


def document_records(
    text: str,
    n: int,
    plan: FitPlan,
    builder,
    generate,
    reasons: list[str | None],
    cache=None,
    cache_key=None,
    doc_sha256: str = "",
    given_raw: str | None = None,
    blurb_file: str = "",
    language: str | None = None,
    read: str | None = None,
) -> list[BlurbRecord]:
    """The document mode: one LLM summary of the document (``builder``'s template, e.g.
    :data:`situate.contextual.prompts.DOCUMENT_SUMMARY`, over ``plan``'s first window) given to each of its
    ``n`` chunks as their blurb; a chunk with a ``reasons`` entry gets ``skipped:<reason>`` instead,
    and when every chunk has one, no call is made.  The first chunk's record carries the call's
    tokens and seconds; the others are marked as making no call (``window`` -1).  ``given_raw``:
    the summary's raw text from a blurb file (:mod:`situate.contextual.blurb_files`) whose sha256 is
    ``blurb_file``, no call made.  The summary is grounded as a summary (:func:`grounded_summary`,
    ``language``: :func:`situate.contextual.summary_grounding.summary_language`) against ``text``
    whatever it was written from: ``read``, the text ``plan`` was fitted over
    (:func:`situate.contextual.lead.summary_source`; default ``text``)."""
    if all(reasons):
        return [skipped_records(1, r, doc_sha256=doc_sha256)[0] for r in reasons]
    if given_raw is not None:
        rec = dataclasses.replace(record_from_raw(given_raw, "", text), from_file=blurb_file)
    else:
        rec = contextualize(read or text, [""], plan, builder, generate, cache=cache, cache_key=cache_key)[0]
    rec = grounded_summary(rec, text, language)
    out, first = [], True
    for r in reasons:
        if r:
            out.append(skipped_records(1, r, doc_sha256=doc_sha256)[0])
            continue
        one = dataclasses.replace(rec, mode="document", doc_sha256=doc_sha256, problems=list(rec.problems))
        if not first:
            one = dataclasses.replace(one, prompt_tokens=0, evaluated=0, reused=0, generated=0, seconds=0.0, window=-1)
        first = False
        out.append(one)
    return out


def grounded_summary(rec: BlurbRecord, document: str, language: str | None) -> BlurbRecord:
    """``rec`` (a document's summary) without the sentences that restate the prompt, name a library
    or code ``document`` lacks, or call it what it is not
    (:func:`situate.contextual.summary_grounding.ground_summary`), each tag added to its problems;
    a summary left empty falls back (status ``fallback:<first tag>``): its chunks are indexed with
    their structural context alone, as a failed blurb's are."""
    from situate.contextual.summary_grounding import ground_summary

    if not rec.blurb:
        return rec
    text, tags = ground_summary(rec.blurb, document, language)
    if not tags:
        return rec
    problems = rec.problems + [t for t in tags if t not in rec.problems]
    if text:
        return dataclasses.replace(rec, blurb=text, problems=problems)
    return dataclasses.replace(rec, blurb="", status=f"fallback:{tags[0]}", problems=problems)


def blurb_summary(records: list) -> dict:
    """Per-document figures: blurbs, fallbacks by reason, model calls and blurbs from the cache,
    prompt tokens evaluated / reused (over model calls only; reused is :data:`REUSE_NOT_REPORTED`
    where no call's reuse was reported, and ``model_calls_reuse_not_reported`` counts the calls
    whose reuse was not), problems found by cleaning."""
    fresh = [r for r in records if not getattr(r, "cached", False)]
    prompt = sum(r.prompt_tokens for r in fresh)
    evaluated = sum(r.evaluated for r in fresh)
    seconds = sum(r.seconds for r in fresh)
    problems = collections.Counter(p for r in records for p in r.problems)
    reasons = collections.Counter(r.status.split(":", 1)[1] for r in records if r.status.startswith("fallback:"))
    one_gen = collections.Counter(
        p.split(":", 1)[1] for r in records for p in r.problems if p.startswith("one-generation-fallback:")
    )
    called = [r for r in fresh if r.window >= 0]  # no window: no prompt was sent
    unreported = sum(not getattr(r, "reuse_reported", True) for r in called)
    measured = not called or unreported < len(called)
    return {
        "chunks": len(records),
        "blurbs_from_model": sum(r.status == "model" for r in records),
        "fallbacks": sum(reasons.values()),
        "fallback_reasons": ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())) or "none",
        "skipped": sum(r.status.startswith("skipped:") for r in records),
        "blurbs_from_file": sum(bool(getattr(r, "from_file", "")) for r in records),
        "skipped_reasons": dict(
            collections.Counter(r.status.split(":", 1)[1] for r in records if r.status.startswith("skipped:"))
        ),
        "kept_from_earlier_version": sum(getattr(r, "kept", False) for r in records),
        "one_generation_lines": sum("one-generation" in r.problems for r in records),
        "one_generation_fallbacks": dict(one_gen),
        "problems": dict(sorted(problems.items())),
        "model_calls": len(called),
        "cached": len(records) - len(fresh),
        "prompt_tokens": prompt,
        "prompt_tokens_evaluated": evaluated,
        "prompt_tokens_reused": prompt - evaluated if measured else REUSE_NOT_REPORTED,
        "model_calls_reuse_not_reported": unreported,
        "prompt_tokens_cache_written": sum(getattr(r, "written", 0) for r in fresh),
        "reuse_ratio": (round((prompt - evaluated) / prompt, 3) if prompt else 0.0) if measured else REUSE_NOT_REPORTED,
        "generated_tokens": sum(r.generated for r in records),
        "generated_tokens_called": sum(r.generated for r in fresh),  # by this run's calls
        "llm_seconds": round(seconds, 2),
        "blurbs_per_second": round(len(fresh) / seconds, 3) if seconds else 0.0,
    }


@dataclasses.dataclass
class DocumentInput:
    """One document's inputs to its blurbs: its partition ``key``, the loaded document (``text``,
    ``sha256``, ``source``), its chunks (the ``chunks`` stage's entries) and their texts and
    character spans, its fitted plan, and each chunk's reason for no LLM call ("" for none)."""

    key: str
    doc: dict
    chunks: list[dict]
    texts: list[str]
    spans: list[tuple[int, int]]
    plan: FitPlan
    reasons: list[str]


def decided_records(
    doc_in: DocumentInput, builder, store: Store, settings: str, given: dict, loaded, info
) -> tuple[dict[int, BlurbRecord], dict]:
    """The chunks of one document whose record is settled before the model is asked: those with
    a reason for no LLM call, those a blurb file gives (``given``, from ``loaded``), and those an
    earlier version of the document keeps (:func:`situate.contextual.edits.kept_blurbs`, written under the
    same ``settings``) that still pass against this version.

    Returns
    -------
    (dict, dict)
        Chunk index -> :class:`BlurbRecord`, and the edit's summary (with ``rechecked_out``: kept
        blurbs that failed the re-check and are written again).
    """
    key, doc, texts, chunk_list = doc_in.key, doc_in.doc, doc_in.texts, doc_in.chunks
    reasons, doc_sha = doc_in.reasons, doc_in.doc["sha256"]
    decided = {i: skipped_records(1, r, doc_sha256=doc_sha)[0] for i, r in enumerate(reasons) if r}
    kept, edit = kept_blurbs(
        store.read_stage_if_any(key, "blurbs"),
        [{"text_sha256": text_sha256(x), "n_tokens": c["n_tokens"]} for x, c in zip(texts, chunk_list)],
        doc_sha,
        settings,
        blurb_file=loaded.sha256 if loaded else "",
    )
    if edit["why"] == "" and kept:
        info(
            f"blurbs {doc['source']}: edited ({edit['changed_share']:.1%} of its tokens in "
            f"{edit['changed_chunks']} new or changed chunk(s)): {len(kept)} blurb(s) kept"
        )
    for i, raw in given.items():
        if i not in decided:
            decided[i] = dataclasses.replace(
                record_from_raw(raw, texts[i], doc["text"], builder.by_reference),
                window=-1,
                from_file=loaded.sha256,
            )
    stale = keep_rechecked(kept, decided, texts, doc["text"], builder.by_reference)
    if stale:
        info(
            f"blurbs {doc['source']}: {stale} kept blurb(s) no longer pass against this version "
            "(a name they use is gone, or cleaning rejects them): written again"
        )
        edit["rechecked_out"] = stale
    return decided, edit


def chunk_records(
    llm: BlurbLLM,
    builder,
    doc_in: DocumentInput,
    call,
    *,
    store: Store,
    settings: str,
    given: dict,
    loaded,
    cache,
    log,
    on_blurb,
    info,
) -> tuple[list[BlurbRecord], dict]:
    """The records of ``chunk`` mode for one document: a blurb per chunk through ``builder``'s
    prompt (:func:`situate.contextual.contextualize.contextualize`), after the chunks that get no LLM call, the
    blurbs a blurb file gives and those an earlier version of the document keeps.

    Parameters
    ----------
    llm : BlurbLLM
        The blurb model and its settings.
    builder : situate.contextual.contextualize.PromptBuilder
        The document's prompt builder.
    doc_in : DocumentInput
        The document, its chunks, spans, fitted plan and each chunk's reason for no LLM call.
    call : callable
        ``(tokens, stop, max_tokens, grammar) -> Generation``: the model, or a Message Batch round.
    store : Store
        The data folder (the document's earlier ``blurbs`` stage).
    settings : str
        :func:`settings_id` of this run: kept blurbs must have been written under it.
    given : dict
        Chunk index -> the raw blurb a blurb file gives.
    loaded : situate.contextual.blurb_files.BlurbFile or None
        That blurb file.
    cache : BlurbCache
        The blurb cache (or a Message Batch round's).
    log : object or None
        ``warning(msg, *args)`` for a fallback, or None while a Message Batch is gathered.
    on_blurb : callable or None
        ``(i, record)`` after each chunk.
    info : callable
        ``(message)``: the run's log at info level (kept and re-checked blurbs of an edit).

    Returns
    -------
    (list of BlurbRecord, dict)
        A record per chunk, and the summary of what an earlier version of the document kept
        (:func:`situate.contextual.edits.kept_blurbs`).
    """
    doc, texts, doc_sha, plan = doc_in.doc, doc_in.texts, doc_in.doc["sha256"], doc_in.plan
    reasoning, bound = builder.frame.reasoning, generation_bound(llm, builder)
    key_fn = blurb_key(
        llm,
        llm.prompt,
        reasoning,
        bound,
        system=builder.frame.head if builder.template.system or builder.template.system_code else "",
    )
    grammar = builder.template.grammar

    def generate(tokens: list[int]):
        return call(tokens, stops(reasoning), bound, grammar)

    decided, edit = decided_records(doc_in, builder, store, settings, given, loaded, info)

    def generate_window(tokens: list[int], starts: list[str], max_tokens: int):
        # each line is one chunk's blurb: a blurb's bound, not the window's whole
        # reserve (``plan.max_tokens``, fit_bound), which left no room for the first
        # line of a window fitted close to n_ctx
        return llm.generate_lines(
            tokens, starts, stop=stops(reasoning), max_tokens=min(max_tokens, bound), grammar=grammar
        )

    records = contextualize(
        doc["text"],
        texts,
        plan,
        builder,
        generate,
        log=log,
        on_blurb=on_blurb,
        cache=cache,
        cache_key=key_fn,
        spans=doc_in.spans,
        kept=decided,
        generate_window=generate_window if builder.template.one_generation else None,
        generate_batch=llm.batcher(stops(reasoning), bound).generate if llm.batch > 1 else None,
    )
    for r in records:
        if not r.mode:
            r.mode = f"chunk:{llm.prompt}" if not r.status.startswith("skipped:") else "structure"
        r.doc_sha256 = r.doc_sha256 or doc_sha
    return records, edit


def blurbs_stage(
    records: list[BlurbRecord],
    chunk_list: list[dict],
    edit: dict,
    model_id: str,
    backend: str,
    prompt: str,
    mode: str,
    doc_sha: str,
    settings: str,
) -> dict:
    """The ``blurbs`` stage file of one document: what wrote it (model, backend, prompt and its
    version, context mode, :func:`settings_id`), the document's sha256, the chunk texts of the
    older versions kept blurbs were written against (:mod:`situate.contextual.edits`), and a record per chunk
    with its ``chunk_id``."""
    return {
        "model_id": model_id,
        "backend": backend,
        "prompt_version": PROMPT_VERSION,
        "prompt": prompt,
        "context_mode": mode,
        "doc_sha256": doc_sha,
        "settings": settings,
        "versions": {v: t for v, t in edit.get("versions", {}).items() if any(r.doc_sha256 == v for r in records)},
        "blurbs": [dataclasses.asdict(r) | {"chunk_id": c["chunk_id"]} for r, c in zip(records, chunk_list)],
    }


def edit_summary(edit: dict) -> dict:
    """A document's summary entries for an edit (:func:`situate.contextual.edits.kept_blurbs`'s summary; ``{}``
    for none): why blurbs were or were not kept, the share of tokens changed, and the kept blurbs
    that failed the re-check or drifted."""
    if not edit:
        return {}
    return {
        "edit": edit["why"] or "kept unchanged chunks",
        "changed_share": edit["changed_share"],
        "kept_failed_recheck": edit.get("rechecked_out", 0),
        "kept_drifted": edit.get("drifted", 0),
    }


def file_blurbs(loaded, wanted: str, model_sha: str, doc_sha: str, texts: list[str], reasons: list[str]) -> dict:
    """Chunk index -> the raw blurb a blurb file (``loaded``, :class:`situate.contextual.blurb_files.BlurbFile`)
    holds for that chunk's text under this mode (``wanted``), model file and document; chunks with
    a reason for no LLM call get none."""
    given = {}
    for i, x in enumerate(texts):
        raw = loaded.get(wanted, model_sha, doc_sha, text_sha256(x))
        if raw is not None and not reasons[i]:
            given[i] = raw
    return given


def blurb_totals(ok: dict) -> dict:
    """The run's totals over its documents' summaries (``ok``: partition key -> :func:`blurb_summary`
    with ``prompt_tokens``, ``prompt_tokens_evaluated``, ``llm_seconds``, ``chunks``…): blurbs,
    fallbacks, skipped and kept chunks, model calls, cache hits, prompt tokens evaluated / reused
    (tokens of the blurb LLM's tokenizer; reused is :data:`REUSE_NOT_REPORTED` where no call's
    reuse was reported), blurbs a second of LLM time."""
    prompt = sum(v["prompt_tokens"] for v in ok.values())
    evaluated = sum(v["prompt_tokens_evaluated"] for v in ok.values())
    calls = sum(v["model_calls"] for v in ok.values())
    unreported = sum(v.get("model_calls_reuse_not_reported", 0) for v in ok.values())
    secs = sum(v["llm_seconds"] for v in ok.values())
    n = sum(v["chunks"] for v in ok.values())
    return {
        "blurbs_total": n,
        "fallbacks_total": sum(v["fallbacks"] for v in ok.values()),
        "skipped_total": sum(v.get("skipped", 0) for v in ok.values()),
        "kept_from_earlier_version_total": sum(v.get("kept_from_earlier_version", 0) for v in ok.values()),
        "one_generation_fallbacks_total": sum(sum(v.get("one_generation_fallbacks", {}).values()) for v in ok.values()),
        "model_calls_total": sum(v["model_calls"] for v in ok.values()),
        "blurbs_from_cache_total": sum(v["cached"] for v in ok.values()),
        "prompt_tokens_evaluated_total": evaluated,
        "prompt_tokens_reused_total": prompt - evaluated if not calls or unreported < calls else REUSE_NOT_REPORTED,
        "model_calls_reuse_not_reported_total": unreported,
        "blurbs_per_second": round(n / secs, 3) if secs else 0.0,
    }


@dataclasses.dataclass
class _ModeState:
    """What the documents of one context mode are written with: the model seen in that mode, its
    settings id (:func:`settings_id`), the model's identity, the mode a blurb file's lines must
    have, and the blurb file read for it."""

    llm: object
    settings: str
    model_sha: str
    wanted: str
    from_file: LazyBlurbFile


class DocumentBlurber:
    """Writes the ``blurbs`` stage of one document at a time, as ``llm.context`` says; what the
    ``blurbs`` asset runs for each partition.

    Parameters
    ----------
    store : situate.resources.store.store.Store
        The data folder: the document, chunks and preambles stages are read from it, the blurbs
        stage written to it, the blurb cache kept in it.
    llm : situate.resources.models.llm.BlurbLLM
        The blurb model and its settings (mode, prompt, blurb file, chunk limit).
    log : logger
        Takes ``info``, ``warning`` and ``debug`` (a Dagster run's ``context.log``).
    batches : optional
        A Message Batches round (:meth:`situate.resources.models.llm.BlurbLLM.batch_round`), or None.
    """

    def __init__(self, store, llm: BlurbLLM, log, batches=None):
        self.store, self.llm, self.log, self.batches = store, llm, log, batches
        self.builder_for = builders_by_kind(llm)
        self.model_id = llm.resolved_model_id()
        self.cache = blurb_cache_for(store)
        self._modes: dict[str, _ModeState] = {}
        self._modes_lock = threading.Lock()

    def mode_state(self, mode: str) -> _ModeState:
        """What a document of context mode ``mode`` is written with (made once a run)."""
        with self._modes_lock:
            if mode not in self._modes:
                view = with_mode(self.llm, mode)
                llm_used = mode not in NO_LLM_MODES
                model_sha = self.llm.identity() if llm_used else ""
                wanted = "document" if mode == "document" else f"chunk:{self.llm.prompt}"
                self._modes[mode] = _ModeState(
                    view,
                    settings_id(view) if llm_used else mode,
                    model_sha,
                    wanted,
                    LazyBlurbFile(self.llm.blurbs_file, wanted, model_sha, self.log),
                )
            return self._modes[mode]

    def file_summary(self) -> dict:
        """The blurb file's figures for the run's metadata, over the modes that read it."""
        out: dict = {}
        for state in self._modes.values():
            out.update(state.from_file.summary())
        return out

    def call(self, tokens: list[int], stop: list[str], max_tokens: int, grammar: str = ""):
        """One generation: through the Message Batches round when there is one, else the model."""
        if self.batches is not None:
            return self.batches.call(tokens, stop, max_tokens)
        return self.llm.generate(tokens, stop=stop, max_tokens=max_tokens, grammar=grammar)

    def work(self, key: str) -> dict:
        """Write document ``key``'s blurbs stage; returns its :func:`blurb_summary` and
        :func:`edit_summary` (``{}`` while a Message Batches round gathers its requests).

        Raises
        ------
        situate.contextual.blurb_files.BlurbFileError
            The blurb file this document needed cannot be read.
        """
        batches = self.batches
        gathering = batches is not None and batches.gathering
        if batches is not None:
            batches.start_document()
        doc = read_ok(self.store, key, "document")
        chunk_list = read_ok(self.store, key, "chunks")["chunks"]
        texts = [c["text"] for c in chunk_list]
        st = self.mode_state(context_for(self.llm, doc))
        records, edit = self._records(st, key, doc, chunk_list, texts, gathering)
        if gathering:
            return {}  # the requests are gathered; nothing is written until the batch answers
        if batches is not None:
            batches.check_document()  # a chunk the batch did not answer: to the next run, nothing written
        for r, x in zip(records, texts):
            r.text_sha256 = text_sha256(x)
        mode = st.llm.context
        backend = self.llm.backend_kind() if mode not in NO_LLM_MODES else ""
        stage = blurbs_stage(
            records, chunk_list, edit, self.model_id, backend, self.llm.prompt, mode, doc["sha256"], st.settings
        )
        self.store.write_stage(key, "blurbs", stage)
        return blurb_summary(records) | edit_summary(edit)

    def _records(self, st: _ModeState, key: str, doc: dict, chunk_list: list[dict], texts: list[str], gathering: bool):
        """``(records, edit)`` of one document: skipped on purpose (structure mode, a document over
        the chunk limit), or from the model, the cache, the blurb file or the earlier version."""
        n, mode, doc_sha, limit = len(texts), st.llm.context, doc["sha256"], self.llm.max_chunks_per_document
        if mode == "structure":
            return skipped_records(n, "structure", doc_sha256=doc_sha), {}
        if mode == "extract":
            return extract_records(n, lead_of(doc), doc_sha), {}
        if limit and n > limit:
            self.log.warning(
                f"blurbs {doc['source']}: large document, {n:,} chunks > {limit:,} "
                "(SITUATE_MAX_BLURB_CHUNKS): no LLM blurbs, its chunks are indexed with "
                "their structural context"
            )
            return skipped_records(n, "large-document", doc_sha256=doc_sha), {}
        reasons = chunk_reasons(doc["source"], texts, doc.get("generated"))
        for why in sorted({r for r in reasons if r}):
            n_why = reasons.count(why)
            self.log.info(f"blurbs {doc['source']}: {n_why} chunk(s) get no LLM call ({why}): structural context only")
        given, loaded = {}, None
        if self.llm.blurbs_file and not all(reasons):
            loaded = st.from_file.get()
            given = file_blurbs(loaded, st.wanted, st.model_sha, doc_sha, texts, reasons)
        cache_now = BatchCache(self.cache, self.batches) if self.batches is not None else self.cache
        plan = FitPlan.from_json(read_ok(self.store, key, "preambles"))
        if mode == "document":
            return self._document_records(st.llm, doc, n, plan, reasons, given, loaded, cache_now), {}
        spans = [(c["start"], c["end"]) for c in chunk_list]
        return chunk_records(
            st.llm,
            self.builder_for(doc),
            DocumentInput(key, doc, chunk_list, texts, spans, plan, reasons),
            self.call,
            store=self.store,
            settings=st.settings,
            given=given,
            loaded=loaded,
            cache=cache_now,
            log=None if gathering else _PrefixedLog(self.log, f"blurbs {doc['source']}: "),
            on_blurb=None if gathering else _progress(self.log, doc["source"], n),
            info=self.log.info,
        )

    def _document_records(self, llm, doc, n, plan, reasons, given, loaded, cache_now) -> list[BlurbRecord]:
        """``document`` mode: one summary of the document, shared by its chunks (``llm``: the
        model seen in that mode)."""
        from situate.contextual.summary_grounding import summary_language

        builder = document_builder(llm)
        bound = generation_bound(llm, builder)
        key_fn = blurb_key(llm, builder.template.name, builder.frame.reasoning, bound)
        return document_records(
            doc["text"],
            n,
            plan,
            builder,
            lambda t: self.call(t, stops(builder.frame.reasoning), bound),
            reasons,
            cache=cache_now,
            cache_key=key_fn,
            doc_sha256=doc["sha256"],
            given_raw=next(iter(given.values())) if given else None,
            blurb_file=loaded.sha256 if loaded else "",
            language=summary_language(doc),
            read=summary_source(doc, llm.summary_reading),
        )


class _PrefixedLog:
    """A logger's ``warning`` with a prefix and %-style arguments (what :func:`chunk_records` calls)."""

    def __init__(self, log, prefix: str):
        self.log, self.prefix = log, prefix

    def warning(self, msg, *args):
        self.log.warning(self.prefix + (msg % args))


def _progress(log, source: str, n: int):
    """The per-chunk progress line of the document at path ``source`` (``n`` chunks), logged at info."""

    def progress(i: int, rec) -> None:
        how = (
            "kept from the earlier version"
            if rec.kept
            else "from the cache"
            if rec.cached
            else f"{rec.evaluated}/{rec.prompt_tokens} prompt tokens evaluated, {rec.seconds:.1f} s"
        )
        log.info(f"blurbs {source} [{i + 1}/{n}] {rec.status}, {how}: {rec.blurb[:100]!r}")

    return progress
