"""``situate ingest --estimate``: the prompt tokens, cost and wall time of an ingest, before it.

The folder is read, chunked and fitted exactly as an ingest would (the same plain functions as the
``raw_documents``, ``chunks`` and ``fitted_preambles`` assets) and nothing is written; with local
models, they are timed on a sample for the wall time (:func:`predict_wall`).  Each request the
blurbs step would send is then counted as a cold ingest makes it (no blurb cache, no blurbs kept
from an earlier version): in ``chunk`` mode, per window, the first
chunk's request writes the window's document prefix to the server's cache and the others read it;
in ``document`` mode, one request a document.  Generated tokens are counted at their bound
(``SITUATE_MAX_TOKENS``).  Two costs: with the cache as planned, and with no cache hit at all
(every prefix written again), an upper bound whatever the cache does: a prefix under the model's
minimum cacheable length is not cached, and caching inside a Message Batch is best-effort.

Counts are in the blurb model's own tokens for a local GGUF (exact).  Through Anthropic's API the
windows are fitted in UTF-8 bytes (:mod:`situate.resources.models.anthropic_api`); the estimate then gives
the bytes (a bound on Claude's tokens) and an estimate in ``cl100k_base`` tokens, scaled per
document by its cl100k tokens a byte (Claude's tokenizer is not published).

The requests, prompt tokens and (local models) the LLM's seconds are also given by top folder
(:attr:`Estimate.by_folder`), with every file the ingest would skip and why
(:mod:`situate.pipelines.dry_run`, which gives the same counts with no model and no reading).
"""

from __future__ import annotations

import dataclasses
import time

from situate.pipelines.dry_run import folder_sizes, skipped_lines, top_folder

#: The counts of :attr:`Estimate.by_folder` added up a document at a time.
FOLDER_COUNTS = ("requests", "prompt_written", "generated_bound", "generated_typical")


@dataclasses.dataclass
class Estimate:
    """What an ingest of a folder would send to the blurb model.

    Attributes
    ----------
    documents, readable, requests : int
        Documents found, read, and LLM requests a cold ingest makes.
    unit : str
        What the token counts count: ``tokens`` (the model's own), or ``bytes`` (a bound).
    prompt_written, prompt_read, generated_bound : int
        In ``unit``: prompt tokens evaluated (with the cache writes among them: each window's
        first request), read from the cache, and generated at most.
    generated_typical : int
        Tokens generated as the default model does: each request's bound, at most
        :data:`GENERATED_TYPICAL` (what the wall time is predicted from).
    cache_writes : int
        Of ``prompt_written``, the document prefixes a server caches.
    approx_tokens : dict
        Through a chat API: the same three counts estimated in cl100k_base tokens.
    failed : dict
        Document path to why it could not be read or fitted.
    by_folder : dict
        Top folder (``docs/``, ``./`` for the files at the top:
        :func:`situate.pipelines.dry_run.top_folder`) → ``documents``, ``requests``,
        ``prompt_written`` and ``generated_bound`` (as above) and ``llm_seconds``: the LLM's share of
        the predicted wall time spent on the folder's requests (None where the wall time is not
        predicted).
    skipped : dict
        Path (a folder ends with ``/``) → why it is not read (ignored, hidden, empty, unknown
        format ...: :meth:`situate.resources.documents.docs.DocsFolder.discover`).
    skipped_folders : dict
        A skipped folder → ``[files, bytes]`` under it (:func:`situate.pipelines.dry_run.folder_sizes`).
    """

    documents: int = 0
    readable: int = 0
    requests: int = 0
    unit: str = "tokens"
    prompt_written: int = 0
    prompt_read: int = 0
    generated_bound: int = 0
    generated_typical: int = 0
    cache_writes: int = 0
    approx_tokens: dict = dataclasses.field(default_factory=dict)
    failed: dict = dataclasses.field(default_factory=dict)
    cost_usd: float | None = None
    #: the cost with no cache hit at all (every prefix written again: 1.25x input), an upper
    #: bound whatever the cache does (a prefix under the model's minimum cacheable length is not
    #: cached; caching inside a batch is best-effort), with each answer at its bound
    cost_usd_bound: float | None = None
    cost_rates: str = ""
    #: chunks a cold ingest makes, and their texts' tokens the embedder reads (its own tokenizer
    #: for an ONNX embedder, else cl100k_base; each cut to the embedder's context)
    chunks: int = 0
    embed_tokens: int = 0
    #: the rates measured on this machine for the wall-time prediction (:func:`predict_wall`)
    rates: dict = dataclasses.field(default_factory=dict)
    #: the predicted wall time of a cold ingest, seconds; None where it cannot be measured here
    #: (the LLM behind a server or an API)
    wall_seconds: float | None = None
    by_folder: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)
    skipped_folders: dict = dataclasses.field(default_factory=dict)
    #: chunk texts kept for the embedder's calibration (not in the JSON's meaning; at most 32)
    samples: list = dataclasses.field(default_factory=list, repr=False)

    def lines(self) -> list[str]:
        out = [
            f"documents: {self.documents} ({self.readable} readable); LLM requests of a cold ingest: {self.requests:,}",
            f"prompt {self.unit} evaluated: {self.prompt_written:,} (of them written to the cache: "
            f"{self.cache_writes:,}), read from the cache: {self.prompt_read:,}; generated at most: "
            f"{self.generated_bound:,}",
        ]
        if self.approx_tokens:
            a = self.approx_tokens
            out.append(
                f"in cl100k_base tokens, about: evaluated {a['evaluated']:,} (written to the cache "
                f"{a['written']:,}), read from the cache {a['read']:,}"
            )
        if self.cost_usd is not None:
            out.append(
                f"cost ${self.cost_usd:,.4f} with the cache as planned, at most ${self.cost_usd_bound:,.4f} "
                f"with no cache hit; every answer at its bound, at {self.cost_rates}"
                + (" (input counted in bytes, a bound on tokens)" if self.unit == "bytes" else "")
            )
        elif self.cost_rates:
            out.append(f"cost: {self.cost_rates}")
        if self.wall_seconds is not None:
            r = self.rates
            out.append(
                f"wall time of a cold ingest on this machine: about {_minutes(self.wall_seconds)} "
                f"({self.chunks:,} chunks, embedder {r['embed_tokens_per_s']:,.0f} tokens/s"
                + (
                    f", LLM prefill {r['prefill_tokens_per_s']:,.0f} and generation "
                    f"{r['generate_tokens_per_s']:.1f} tokens/s"
                    if r.get("prefill_tokens_per_s")
                    else ""
                )
                + f", {r['document_seconds']} s a document around the models)"
            )
        out += self.folder_lines()
        out += skipped_lines(self.skipped, self.skipped_folders)
        for path, why in self.failed.items():
            out.append(f"not counted {path}: {why}")
        return out

    def folder_lines(self) -> list[str]:
        """One line a top folder, the most LLM requests first: its documents, requests, and the
        LLM time predicted for them (else their prompt tokens)."""
        out = []
        for folder, f in sorted(self.by_folder.items(), key=lambda kv: (-kv[1]["requests"], kv[0])):
            cost = (
                f"LLM time about {_minutes(f['llm_seconds'])}"
                if f["llm_seconds"] is not None
                else f"prompt {self.unit} {f['prompt_written']:,}"
            )
            docs, requests = f["documents"], f["requests"]
            out.append(
                f"by folder: {folder} {docs:,} document{'' if docs == 1 else 's'}, {requests:,} LLM "
                f"request{'' if requests == 1 else 's'}, {cost}"
            )
        return out


def _requests(text: str, spans: list[tuple[int, int]], reasons: list, plan, builder, mode: str) -> list[tuple]:
    """``(prefix, rest, first_of_window)`` lengths in the builder's units, one per request."""
    out = []
    if mode == "document":
        if plan.windows and not all(reasons):
            w = plan.windows[0]
            out.append((len(builder.window_prefix(text, [(0, 0)], w.start, w.end)), len(builder.suffix("", 0)), True))
        return out
    for w in plan.windows:
        prefix = len(builder.window_prefix(text, spans, w.start, w.end))
        first = True
        for i in w.chunks:
            if reasons[i]:
                continue
            a, b = spans[i]
            out.append((prefix, len(builder.suffix(text[a:b][: plan.chunk_prompt_ends[i]], i)), first))
            first = False
    return out


def estimate(res: dict, echo=print) -> Estimate:
    """Count what ingesting ``res["docs"]`` would send to ``res["llm"]`` (:mod:`situate.pipelines.estimate`).

    Parameters
    ----------
    res : dict
        :func:`situate.pipelines.settings.resources_from_env` (``docs``, ``llm``, ``chunking``).
    echo : callable
        Called with one progress line every 100 documents.

    Returns
    -------
    Estimate

    Raises
    ------
    situate.resources.models.server.ServerError
        Through Anthropic's API: the model check failed (the rates are the model's).
    """
    from situate.resources.documents.reading import DocumentError, load

    docs, llm = res["docs"], res["llm"]
    api = llm.api == "anthropic"
    est = Estimate(unit="bytes" if api else "tokens")
    approx = {"evaluated": 0.0, "written": 0.0, "read": 0.0}
    builders: dict = {}
    refs = docs.discover(passed_over=est.skipped)
    est.skipped = dict(sorted(est.skipped.items()))
    read = frozenset(r.source for r in refs)  # an include glob may take files back from an ignored folder
    est.skipped_folders = {} if docs.remote else folder_sizes(docs.base, est.skipped, read)
    est.documents = len(refs)
    counts = embed_token_counter(res["embedder"])
    for n, ref in enumerate(refs, 1):
        if n % 100 == 0:
            echo(f"situate: estimate: {n}/{len(refs)} documents read")
        folder = _folder_of(est, ref.source)
        try:
            doc = load(ref)
        except DocumentError as e:
            est.failed[ref.source] = str(e)
            continue
        est.readable += 1
        before = tuple(getattr(est, name) for name in FOLDER_COUNTS)
        _count_document(est, approx, ref.key, doc, llm, res["chunking"], builders, api, counts, res["embedder"].n_ctx)
        after = tuple(getattr(est, name) for name in FOLDER_COUNTS)
        for name, b, now in zip(FOLDER_COUNTS, before, after, strict=True):
            folder[name] += now - b
    if api:
        est.approx_tokens = {k: round(v) for k, v in approx.items()}
        _add_cost(est, llm)
    elif not llm.server_url:
        predict_wall(est, res)
    est.samples = []
    return est


def _folder_of(est: Estimate, source: str) -> dict:
    """The counts of the top folder of ``source`` in ``est.by_folder``, its document counted."""
    folder = est.by_folder.setdefault(
        top_folder(source), {"documents": 0, **dict.fromkeys(FOLDER_COUNTS, 0), "llm_seconds": None}
    )
    folder["documents"] += 1
    return folder


def _count_document(
    est: Estimate, approx: dict, key: str, doc, llm, chunking, builders: dict, api: bool, embed_counts, embed_ctx: int
) -> None:
    """Add document ``key``'s requests to ``est`` (and, through an API, its cl100k_base token
    approximations to ``approx``); a document no prompt fits goes to ``est.failed``."""
    from situate.contextual.chunking import document_chunks
    from situate.contextual.code_context import is_source
    from situate.contextual.fitting import (
        document_builder,
        fit_bound,
        fit_document,
        fit_summary,
        generation_bound,
        prompt_builder,
    )
    from situate.contextual.policy import NO_LLM_MODES, for_document
    from situate.contextual.skipping import chunk_reasons
    from situate.contextual.tokens import count_cl100k

    text = doc.text
    chunks = document_chunks(key, doc.to_json(), chunking, count_cl100k)
    spans = [(c.start, c.end) for c in chunks]
    est.chunks += len(chunks)
    if len(est.samples) < SAMPLE_CHUNKS:
        est.samples.extend(c.text for c in chunks[: SAMPLE_CHUNKS - len(est.samples)])
    est.embed_tokens += sum(min(n, embed_ctx) for n in embed_counts([c.text for c in chunks]))
    reasons = chunk_reasons(doc.source, [c.text for c in chunks])
    llm = for_document(llm, doc.to_json())  # its kind's mode (situate.contextual.policy)
    if llm.context in NO_LLM_MODES or (llm.max_chunks_per_document and len(chunks) > llm.max_chunks_per_document):
        return
    kind = "document" if llm.context == "document" else is_source(doc.to_json())
    if kind not in builders:
        builders[kind] = document_builder(llm) if kind == "document" else prompt_builder(llm, source=kind)
    builder = builders[kind]
    if kind == "document":
        from situate.contextual.lead import summary_source

        text = summary_source(doc.to_json(), llm.summary_reading)
        plan = fit_summary(text, builder, llm)
    else:
        plan = fit_document(text, spans, builder, llm.n_ctx, fit_bound(llm, builder))
    if plan.reason:
        est.failed[doc.source] = f"no prompt fits: {plan.reason}"
        return
    bound = generation_bound(llm, builder)
    ratio = count_cl100k(text) / max(len(text.encode("utf-8")), 1) if api else 1.0
    for prefix, rest, first in _requests(text, spans, reasons, plan, builder, llm.context):
        est.requests += 1
        est.generated_bound += bound
        est.generated_typical += min(bound, GENERATED_TYPICAL)
        if first:
            est.prompt_written += prefix + rest
            est.cache_writes += prefix
            approx["written"] += prefix * ratio
        else:
            est.prompt_written += rest
            est.prompt_read += prefix
            approx["read"] += prefix * ratio
        approx["evaluated"] += (prefix + rest if first else rest) * ratio


def _add_cost(est: Estimate, llm) -> None:
    """The cost of ``est`` through Anthropic's API at the model's rates, where they are known:
    with every cache hit, and with none (every prefix written again, the dearest)."""
    from situate.pipelines.settings import check_environment, llm_price
    from situate.resources.models.anthropic_api import cost_usd

    price = llm_price(llm.resolved_model_id(), check_environment())
    if price is None:
        est.cost_rates = "no rate known for this model: set SITUATE_LLM_PRICE_INPUT and _OUTPUT"
        return
    est.cost_usd = cost_usd(
        price, est.prompt_written, est.cache_writes, est.prompt_read, est.generated_bound, batch=llm.api_batch
    )
    # no hit: every request's prefix written again (the dearest the cache can make it)
    prefixes = est.cache_writes + est.prompt_read
    est.cost_usd_bound = cost_usd(
        price, est.prompt_written + est.prompt_read, prefixes, 0, est.generated_bound, batch=llm.api_batch
    )
    est.cost_rates = f"${price.input}/${price.output} per million input/output tokens ({price.source})" + (
        ", half of it through the Message Batches API" if llm.api_batch else ""
    )


#: Chunk texts the embedder is timed on (:func:`predict_wall`): enough for a steady rate (about
#: 3 s of bge-small on 2 cores), few enough that the estimate stays quick.
SAMPLE_CHUNKS = 32
#: Seconds a document costs around the models in a cold ingest, on 2 cores: Dagster's events (a
#: materialization of each of 5 assets, stored in SQLite), the stage files, the table's commits.
#: Measured: CoSQA's 6,267 one-function documents in structure mode, 424.5 s cold of which the
#: embedder's own 82.0 s: 0.055 s a document (``benchmarks/reports/ingest-scale.md``).
DOCUMENT_SECONDS = 0.055
#: Seconds of a cold ingest's start and end: the command's imports, the plan, the Dagster runs'
#: start and end and the BM25 index (same measurement: 2.1 s before the first run, 4.3 s of the
#: runs' start and end, 1.9 s of BM25 index, 2.2 s of the command's own start).
START_SECONDS = 10.0
#: Tokens a summary or blurb takes when its bound allows: the docs set's 45 committed summaries
#: (``benchmarks/blurbs/docs-qwen2.5-coder-0.5b-document.jsonl.gz``) are 219 characters long on
#: average, about 48 tokens (0.6 of the 80 of ``SITUATE_MAX_TOKENS``); a lower bound is reached.
GENERATED_TYPICAL = 48


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def embed_token_counter(embedder):
    """A function giving each text's token count in the embedder's own tokenizer (an ONNX
    embedder's ``tokenizer.json``), else in cl100k_base."""
    if embedder.is_onnx() and embedder.tokenizer_path:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(embedder.tokenizer_path)
        tok.no_truncation()
        tok.no_padding()
        return lambda texts: [len(e.ids) for e in tok.encode_batch(texts)] if texts else []
    from situate.contextual.tokens import count_cl100k

    return lambda texts: [count_cl100k(t) + 2 for t in texts]


def predict_wall(est: Estimate, res: dict) -> None:
    """Fill ``est.rates`` and ``est.wall_seconds``: the embedder timed on the folder's first
    chunks, the in-process LLM (when a request needs it) timed on one prompt of a request's mean
    length, and the constants above for what a document costs around the models."""
    embedder, llm = res["embedder"], res["llm"]
    texts = est.samples or ["x"]
    embedder.embed(texts[:1], embedder.document_prefix)  # loaded, warm
    t0 = time.perf_counter()
    embedder.embed(texts, embedder.document_prefix)
    seconds = time.perf_counter() - t0
    counts = embed_token_counter(embedder)(texts)
    rate = sum(min(n, embedder.n_ctx) for n in counts) / max(seconds, 1e-9)
    est.rates = {
        "embed_tokens_per_s": round(rate),
        "document_seconds": DOCUMENT_SECONDS,
        "start_seconds": START_SECONDS,
    }
    wall = START_SECONDS + est.readable * DOCUMENT_SECONDS + est.embed_tokens / rate
    for f in est.by_folder.values():
        f["llm_seconds"] = 0.0
    if est.requests:
        prefill, generate = _llm_rates(llm, max(16, min(2048, est.prompt_written // est.requests)))
        est.rates.update(prefill_tokens_per_s=round(prefill), generate_tokens_per_s=round(generate, 1))
        wall += _llm_seconds(est.prompt_written, est.generated_typical, prefill, generate)
        for f in est.by_folder.values():
            f["llm_seconds"] = round(_llm_seconds(f["prompt_written"], f["generated_typical"], prefill, generate), 1)
    est.wall_seconds = round(wall, 1)


def _llm_seconds(prompt: int, generated: int, prefill: float, generate: float) -> float:
    """Seconds the LLM takes to evaluate ``prompt`` tokens and generate ``generated`` tokens, at
    ``prefill`` and ``generate`` tokens/s."""
    return prompt / prefill + generated / generate


def _llm_rates(llm, n: int) -> tuple[float, float]:
    """Prefill and generation tokens/s of the in-process LLM on a prompt of ``n`` tokens (16
    generated), from llama.cpp's own counters."""
    vocab = llm.load()
    ids = [t for t in vocab.tokenize(b"def f(x):\n    return x * 2\n" * 200, add_bos=False)][:n]
    g = llm.generate(ids, max_tokens=16, stop=[])
    return g.evaluated / max(g.prefill_seconds, 1e-9), max(g.generated, 1) / max(g.generate_seconds, 1e-9)
