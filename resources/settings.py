"""situate's settings: one typed, frozen object, :class:`Settings`, with a field per setting (its
environment variable, default, bounds and one line of help), read and validated once by
:func:`read_settings`.

Every command, the Dagster code location, the service, the MCP server and the Python API build what
they use from a :class:`Settings` (:mod:`situate.pipelines.settings`); this is the one module that
reads a ``SITUATE_*`` variable (``tests/test_settings_table.py`` greps the others).  What a command
sets for its process (a data folder, a docs folder, a blurb file) is an override
(:func:`override`), read before the environment; the environment itself is never written.

The configuration reference (``docs/configuration.md``, between its ``settings`` markers) is
generated from the fields by :func:`reference_markdown` (``python -m situate.resources.settings``
prints it; a test fails when the page and the fields differ).  Numeric bounds are
:data:`SETTING_BOUNDS`, where each end has its source.

Examples
--------
>>> from situate.resources.settings import read_settings, unknown_settings
>>> s = read_settings({"SITUATE_N_CTX": "4096"})
>>> s.n_ctx, s.chunk_tokens, s.context
(4096, 300, 'document')
>>> read_settings({"SITUATE_N_CTX": "0"})
Traceback (most recent call last):
  ...
situate.resources.errors.SettingError: SITUATE_N_CTX=0 is below its minimum, 1 (allowed 1 to 131072)
>>> unknown_settings({"SITUATE_N_CTXX": "4096", "HOME": "/root"})
[('SITUATE_N_CTXX', 'SITUATE_N_CTX')]
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from situate.resources.errors import SettingError

#: The data folder when neither an argument nor ``SITUATE_HOME`` names one.
DEFAULT_HOME = ".situate"
#: Prefix of situate's own variables: a set variable with it that :class:`Settings` does not have
#: is a typo or a setting of another version (:func:`unknown_settings`).
PREFIX = "SITUATE_"
#: The values of an on/off setting, as the reference shows them (anything else is refused).
SWITCH = "`0`, `1`"


# -- bounds --------------------------------------------------------------------------------------
class Bound(NamedTuple):
    """The allowed range of one numeric setting (both ends inclusive).

    Attributes
    ----------
    low, high : int, float or None
        Smallest and largest allowed value; None: no bound on that side.
    kind : type
        ``int`` (a whole number) or ``float``.
    source : str
        Why these ends: what goes wrong past them, or where the number comes from.
    below : tuple of str
        Other variables of this table whose values this one must stay under (none: ``()``).
    """

    low: int | float | None
    high: int | float | None
    kind: type
    source: str
    below: tuple[str, ...] = ()


#: The one table of bounds of situate's numeric settings, by environment variable.  The blurb
#: LLM and the embedder hold their fields to it themselves
#: (:func:`situate.resources.models.llm._held_to_bounds`: whoever builds them, and again when a
#: Dagster run resolves their ``dg.EnvVar`` values at its start); :class:`Settings` holds every field
#: to it when it is made (:func:`read_settings`: every ``situate`` command, the code location of
#: ``situate dev`` and ``dagster … -m situate.pipelines.definitions``).  Held on both paths: when the
#: bounds held on the command line only, ``SITUATE_MAX_BLURB_CHUNKS=-1`` through Dagster marked every
#: document too large.
SETTING_BOUNDS: dict[str, Bound] = {
    "SITUATE_N_CTX": Bound(
        1,
        131_072,
        int,
        "0 is no context: llama-cpp-python 0.3.36 cannot create one (measured: every document failed "
        "with 'could not create a context of n_ctx 0'); a context too small for any preamble is "
        "situate.pipelines.preflight.context_warning's warning, not a refusal.  131,072: Qwen2.5's longest "
        "context (YaRN; Qwen2.5-Coder is trained on 32,768), the longest of the listed models; its f16 "
        "KV cache alone is then 1.5 GiB (0.5B: 24 layers x 2 KV heads x 64 x 2 x 2 bytes a token) to "
        "3.5 GiB (1.5B: 28 layers x 2 x 128 x 2 x 2 bytes)",
    ),
    "SITUATE_MAX_TOKENS": Bound(
        1,
        None,
        int,
        "0 or less means 'no bound: until the context is full' to llama-cpp-python's "
        "create_completion (max_tokens <= 0); no upper bound of its own: one that leaves no room for "
        "a prompt in n_ctx is situate.pipelines.preflight.context_warning's warning (every chunk then keeps "
        "its structural context only)",
    ),
    "SITUATE_N_THREADS": Bound(
        0,
        512,
        int,
        "0 follows the cores other processes leave free (situate.resources.models.threads); 512 = "
        "GGML_MAX_N_THREADS (ggml.h), the most threads ggml's thread pool holds; also the onnxruntime "
        "embedder's and reranker's intra-op threads",
    ),
    "SITUATE_N_GPU_LAYERS": Bound(
        -1,
        2**31 - 1,
        int,
        "-1 offloads every layer (llama.cpp's convention), 0 none; llama.cpp offloads min(n, layers); "
        "2**31 - 1: llama_model_params.n_gpu_layers is an int32_t (llama.h), and a larger count "
        "overflowed the ctypes field (wrapped negative) instead of being refused",
    ),
    "SITUATE_BATCH": Bound(
        1,
        256,
        int,
        "1 is the sequential path; 256 = LLAMA_MAX_SEQ (llama.cpp's llama-cparams.h), the most "
        "sequences of one context: with 257 llama-cpp-python 0.3.36 could not create the batched "
        "context (measured: 'Failed to create llama_context'), with 256 it could",
    ),
    "SITUATE_MAX_BLURB_CHUNKS": Bound(
        0,
        None,
        int,
        "0 is no limit; a negative limit makes every document 'too large' (blurb status "
        "skipped:large-document for all of them)",
    ),
    "SITUATE_DOCUMENT_TOKENS": Bound(
        64,
        None,
        int,
        "64: the minimum since settings were first checked (commit d7866b5); under it the summary "
        "reads less than a title and a first sentence.  No upper bound: the summary reads at most "
        "what n_ctx leaves (situate.contextual.fitting.fit_summary)",
    ),
    "SITUATE_SUMMARY_TOKENS": Bound(
        8,
        None,
        int,
        "8: under it a summary is cut before its first clause ends and cleaning drops the unfinished "
        "sentence; no upper bound of its own, as SITUATE_MAX_TOKENS",
    ),
    "SITUATE_CHUNK_TOKENS": Bound(
        1,
        None,
        int,
        "situate.contextual.chunking.chunk_text refuses chunk_tokens < 1 (every document would fail); no upper "
        "bound: a chunk longer than the embedder's context is cut to it, and the run says how many",
    ),
    "SITUATE_CODE_CHUNK_TOKENS": Bound(
        1,
        None,
        int,
        "as SITUATE_CHUNK_TOKENS, for source code",
    ),
    "SITUATE_OVERLAP_TOKENS": Bound(
        0,
        None,
        int,
        "tokens shared by consecutive chunks, so at least 0 and under the chunk size "
        "(situate.contextual.chunking.chunk_text: overlap in [0, chunk_tokens), else every document fails)",
        below=("SITUATE_CHUNK_TOKENS", "SITUATE_CODE_CHUNK_TOKENS"),
    ),
    "SITUATE_VECTOR_INDEX_MIN_ROWS": Bound(
        0,
        None,
        int,
        "a row count (situate.resources.store.store.Store.ensure_vector_index); 0 indexes from the first row",
    ),
    "SITUATE_RERANK_DEPTH": Bound(
        0,
        1_000_000,
        int,
        "0 is no rerank; 1,000,000 = situate.pipelines.operations.MAX_K, the bound of --rerank and -k",
    ),
    "SITUATE_DOCS_PER_RUN": Bound(
        0, None, int, "0 is no limit (one run per range of documents); a count of documents otherwise"
    ),
    "SITUATE_SYNC_INTERVAL_S": Bound(
        5,
        86_400,
        int,
        "Dagster's sensor daemon ticks about every 5 s, so a shorter interval is not kept; a day is "
        "the nightly re-ingest's period, past which the schedule already does the sensor's work",
    ),
    "SITUATE_REPEAT_PENALTY": Bound(
        1.0,
        None,
        float,
        "llama.cpp divides a repeated token's positive logit by it (and multiplies a negative one): "
        "1.0 is off, under 1 rewards repetition (the loops it is there to curb), 0 divides by zero",
    ),
    "SITUATE_LLM_RETRIES": Bound(
        0,
        10,
        int,
        "tries after the first when a model server refuses, drops, times out or answers 429/5xx "
        "(situate.resources.models.server); the waits double from 1 s, so 10 retries wait up to 17 min in all",
    ),
    "SITUATE_LLM_TIMEOUT": Bound(
        1,
        3600,
        int,
        "seconds one model-server request may take in all (situate.resources.models.server); an hour is "
        "longer than any blurb or summary on a CPU (a 2,048-token summary: about 25 s on 2 cores)",
    ),
    "SITUATE_LLM_PRICE_INPUT": Bound(
        0.0,
        10_000.0,
        float,
        "USD per million input tokens of a paid API (situate.resources.models.anthropic_api.price_of); a price "
        "is not negative, and 10,000 is 100 times the dearest published rate (Claude Opus 4: 75 for "
        "output)",
    ),
    "SITUATE_LLM_PRICE_OUTPUT": Bound(
        0.0, 10_000.0, float, "USD per million output tokens (as SITUATE_LLM_PRICE_INPUT)"
    ),
    "SITUATE_LLM_IN_FLIGHT": Bound(
        1,
        256,
        int,
        "documents whose blurbs are asked of a model server or API at once (situate.assets.per_document."
        "for_each_document, one thread each); 256: llama.cpp's most sequences (LLAMA_MAX_SEQ), so no "
        "llama-server has more slots to keep documents on",
    ),
    "SITUATE_LLM_BATCH_POLL": Bound(
        1,
        3600,
        int,
        "seconds between two looks at a Message Batch in progress (situate.resources.models.message_batches); "
        "an hour: most batches end within one (Anthropic's Message Batches docs)",
    ),
    "SITUATE_LLM_BATCH_WAIT": Bound(
        1,
        172_800,
        int,
        "seconds a run waits for its Message Batches; a batch expires 24 hours after it is sent "
        "(Anthropic's docs), so 48 hours is past any answer",
    ),
    "SITUATE_MAX_FALLBACK_SHARE": Bound(
        0.0,
        1.0,
        float,
        "a share of rows (situate.contextual.table_checks.fallback_share): over 1 the check could never fail, "
        "under 0 it always would",
    ),
    "SITUATE_LEASE_STALE_S": Bound(
        1.0,
        None,
        float,
        "seconds of one unchanged lease version before a waiter takes it for a dead holder's "
        "(situate.resources.store.leases); under 1 s a live holder, which renews every STALE_S / 3, "
        "would lose its lease to a waiter on a slow store",
    ),
}


def check_setting(name: str, value: int | float, label: str = "") -> int | float:
    """``value`` of setting ``name`` (a key of :data:`SETTING_BOUNDS`), when inside its bound.

    Parameters
    ----------
    name : str
        The setting's environment variable.
    value : int or float
        Its value (tokens, threads, layers, rows… as the table says).
    label : str
        The name said in the message (default ``name``): the variable a ``dg.EnvVar`` read.

    Returns
    -------
    int or float
        ``value``.

    Raises
    ------
    SettingError
        Outside the bound: ``SITUATE_N_CTX=0 is below its minimum, 1 (allowed 1 to 131072)``; a
        float that is not finite.
    KeyError
        ``name`` is not in the table.
    """
    bound = SETTING_BOUNDS[name]
    label = label or name
    if isinstance(value, float) and not math.isfinite(value):
        raise SettingError(f"{label}={value} is not a finite number")
    span = f" (allowed {bound.low} to {bound.high})" if bound.low is not None and bound.high is not None else ""
    if bound.low is not None and value < bound.low:
        raise SettingError(f"{label}={value} is below its minimum, {bound.low}{span}")
    if bound.high is not None and value > bound.high:
        raise SettingError(f"{label}={value} is above its maximum, {bound.high}{span}")
    return value


def parse_setting(name: str, raw: str, label: str = "") -> int | float:
    """The text ``raw`` of setting ``name`` as its kind of number, checked by :func:`check_setting`.

    Raises
    ------
    SettingError
        Not a whole number (an ``int`` setting) or not a number, or outside the bound.
    """
    bound = SETTING_BOUNDS[name]
    try:
        value = bound.kind(raw.strip())
    except ValueError:
        kind = "a whole number" if bound.kind is int else "a number"
        raise SettingError(f"{label or name}={raw!r} is not {kind}") from None
    return check_setting(name, value, label)


# -- the settings --------------------------------------------------------------------------------
def _setting(env: str, group: str, default, shown: str, help: str, choices: str = ""):
    """A :class:`Settings` field: its value when unset (``default``) and, as metadata, its
    variable, the reference's group, default as written there (``shown``), help and choices."""
    choices = SWITCH if isinstance(default, bool) else choices  # an on/off setting
    meta = {"env": env, "group": group, "shown": shown, "help": help, "choices": choices}
    secret = env.endswith(("_API_KEY", "_API_TOKEN"))  # never in a repr, so never in a log
    return dataclasses.field(default=default, metadata=meta, repr=not secret)


@dataclass(frozen=True)
class Settings:
    """Every setting, typed, with its default: one field per ``SITUATE_*`` variable, named as the
    variable less its prefix, lower case (``SITUATE_N_CTX`` is ``n_ctx``).

    Units and meanings are each field's ``help`` (``dataclasses.fields(Settings)[i].metadata``,
    the reference's ``meaning`` column); a ``str`` field is ``""`` when unset, a number with no
    fixed default (it follows the model) is None.  Made by :func:`read_settings` from the
    environment, or directly (``Settings(n_ctx=4096)``) by an application; either way checked.

    Raises
    ------
    situate.resources.errors.SettingError
        A number outside its bound (:data:`SETTING_BOUNDS`), a switch that is not a bool, or
        ``overlap_tokens`` not below ``chunk_tokens`` and ``code_chunk_tokens``.
    """

    # data
    docs: str = _setting(
        "SITUATE_DOCS", "data", "", "the last folder ingested here, else `docs`", "docs folder, or a corpus file"
    )
    home: str = _setting(
        "SITUATE_HOME",
        "data",
        DEFAULT_HOME,
        "`.situate`",
        "data folder: a path, or `s3://`, `gs://`, `az://` (Scaling out)",
    )
    models_dir: str = _setting("SITUATE_MODELS_DIR", "data", "", "`~/.cache/situate/models`", "shared models folder")
    cache: str = _setting(
        "SITUATE_CACHE",
        "data",
        "",
        "`~/.cache/situate`",
        "local folder for what a data folder on object storage caches on this machine",
    )
    blurbs_file: str = _setting(
        "SITUATE_BLURBS_FILE",
        "data",
        "",
        "none",
        "a blurb file (`situate eval --save-blurbs`): its chunks take their blurbs with no LLM call",
    )
    include: str = _setting(
        "SITUATE_INCLUDE",
        "data",
        "",
        "none",
        "gitignore-style globs (comma-separated) of files read although git ignores them or they are hidden",
    )
    exclude: str = _setting(
        "SITUATE_EXCLUDE",
        "data",
        "",
        "none",
        "gitignore-style globs (comma-separated) of files not read (beside `.gitignore` and `.situateignore`)",
    )
    generated: str = _setting(
        "SITUATE_GENERATED",
        "data",
        "index",
        "`index`",
        "files `.gitattributes` marks `linguist-generated` or `-vendored`: indexed with no LLM call, or skipped",
        choices="`index`, `skip`",
    )
    # models
    llm_model: str = _setting(
        "SITUATE_LLM_MODEL",
        "models",
        "",
        "`qwen2.5-coder-0.5b`",
        "blurb model: a name (`situate models list`) or a chat GGUF path",
    )
    embed_model: str = _setting(
        "SITUATE_EMBED_MODEL", "models", "", "`bge-small-en-v1.5`", "embedder: a name or an embedding GGUF path"
    )
    rerank_model: str = _setting(
        "SITUATE_RERANK_MODEL",
        "models",
        "",
        "ms-marco-MiniLM-L-12-v2 (INT8)",
        "cross-encoder ONNX file (`tokenizer.json` beside it)",
    )
    n_ctx: int = _setting("SITUATE_N_CTX", "models", 8192, "8192", "blurb LLM context, tokens of the LLM's tokenizer")
    n_threads: int = _setting(
        "SITUATE_N_THREADS", "models", 0, "0", "CPU threads of each model (0: the cores other processes leave free)"
    )
    n_gpu_layers: int = _setting("SITUATE_N_GPU_LAYERS", "models", 0, "0", "layers offloaded to a GPU (-1: all)")
    max_tokens: int = _setting("SITUATE_MAX_TOKENS", "models", 80, "80", "blurb bound, generated tokens")
    repeat_penalty: float | None = _setting(
        "SITUATE_REPEAT_PENALTY",
        "models",
        None,
        "the model's (Qwen 1.1, SmolLM2 1.3)",
        "llama.cpp repeat penalty for blurbs",
    )
    batch: int = _setting(
        "SITUATE_BATCH",
        "models",
        1,
        "1",
        "chunks of a document decoded together over the shared prefix (1: sequential)",
    )
    flash_attn: bool = _setting(
        "SITUATE_FLASH_ATTN", "models", False, "0", "1: llama.cpp flash attention for the blurb LLM"
    )
    kv_type: str = _setting(
        "SITUATE_KV_TYPE", "models", "f16", "`f16`", "blurb LLM KV cache type", choices="`f16`, `q8_0`"
    )
    llm_repack: bool = _setting(
        "SITUATE_LLM_REPACK", "models", False, "0", "1: llama.cpp's CPU weight repacking for the blurb LLM"
    )
    # context
    context: str = _setting(
        "SITUATE_CONTEXT",
        "context",
        "document",
        "`document`",
        "what writes the context of each prose document's chunks: a blurb per chunk, one summary per "
        "document, its lead sentences (no LLM), or no LLM (source code: SITUATE_CODE_CONTEXT)",
        choices="`chunk`, `document`, `extract`, `structure`",
    )
    code_context: str = _setting(
        "SITUATE_CODE_CONTEXT",
        "context",
        "structure",
        "`structure`",
        "what writes the context of source code's chunks (SITUATE_CONTEXT: every other document's); "
        "structure: its file and enclosing definitions, no LLM",
        choices="`chunk`, `document`, `extract`, `structure`",
    )
    prompt: str = _setting(
        "SITUATE_PROMPT",
        "context",
        "anthropic-2024-primed-about",
        "`anthropic-2024-primed-about`",
        "blurb prompt (the prompts table below)",
    )
    document_tokens: int = _setting(
        "SITUATE_DOCUMENT_TOKENS",
        "context",
        192,
        "192",
        "`document` mode: LLM tokens of the document the summary is written from",
    )
    summary_tokens: int = _setting(
        "SITUATE_SUMMARY_TOKENS",
        "context",
        24,
        "24",
        "`document` mode: a summary's bound, generated tokens (SITUATE_MAX_TOKENS bounds the other blurbs)",
    )
    summary_reading: str = _setting(
        "SITUATE_SUMMARY_READING",
        "context",
        "head",
        "`head`",
        "`document` mode: what the summary reads within SITUATE_DOCUMENT_TOKENS: the document's "
        "beginning, or its title and heading outline before it",
        choices="`head`, `outline`",
    )
    max_blurb_chunks: int = _setting(
        "SITUATE_MAX_BLURB_CHUNKS",
        "context",
        2000,
        "2000",
        "a document with more chunks gets no LLM blurbs (0: no limit)",
    )
    # chunks
    chunk_tokens: int = _setting(
        "SITUATE_CHUNK_TOKENS",
        "chunks",
        300,
        "300",
        "largest chunk of prose (and of any non-code text), cl100k_base tokens",
    )
    code_chunk_tokens: int = _setting(
        "SITUATE_CODE_CHUNK_TOKENS", "chunks", 200, "200", "largest chunk of source code, cl100k_base tokens"
    )
    overlap_tokens: int = _setting("SITUATE_OVERLAP_TOKENS", "chunks", 20, "20", "chunk overlap, cl100k_base tokens")
    # search
    rerank_depth: int = _setting(
        "SITUATE_RERANK_DEPTH", "search", 0, "0", "search candidates the cross-encoder reranks (0: off; 30 measured)"
    )
    code_adapter: bool = _setting(
        "SITUATE_CODE_ADAPTER",
        "search",
        False,
        "0",
        "1: map the query for code chunks by the embedder's learnt code map, where it has one (bge-small-en-v1.5; "
        "CoSQA dev Pass@5 +2.4, the codebase set's −1.1)",
    )
    vector_index_min_rows: int = _setting(
        "SITUATE_VECTOR_INDEX_MIN_ROWS", "search", 10000, "10000", "rows from which the vectors get an IVF_FLAT index"
    )
    # runs
    docs_per_run: int = _setting(
        "SITUATE_DOCS_PER_RUN", "runs", 0, "0", "most documents in one ingest run (0: no limit, one run per range)"
    )
    sync_interval_s: int = _setting(
        "SITUATE_SYNC_INTERVAL_S",
        "runs",
        60,
        "60",
        "seconds between two looks of the documents sensor at the docs folder (Dagster's minimum interval)",
    )
    allow_mass_removal: bool = _setting(
        "SITUATE_ALLOW_MASS_REMOVAL",
        "runs",
        False,
        "unset",
        "1: the sensor and schedule remove documents even when most or all are gone (held otherwise)",
    )
    max_fallback_share: float = _setting(
        "SITUATE_MAX_FALLBACK_SHARE",
        "runs",
        0.9,
        "0.9",
        "the `fallback_share` check's threshold, a share of a document's chunks",
    )
    lease_stale_s: float = _setting(
        "SITUATE_LEASE_STALE_S",
        "runs",
        90.0,
        "90",
        "seconds after which a writer's lease on a document is taken as abandoned",
    )
    eval_corpus: str = _setting(
        "SITUATE_EVAL_CORPUS",
        "runs",
        "",
        "unset",
        "the `retrieval_eval` asset's corpus (cookbook JSON or a BEIR folder)",
    )
    eval_queries: str = _setting(
        "SITUATE_EVAL_QUERIES", "runs", "", "unset", "the `retrieval_eval` asset's query lines"
    )
    # servers
    llm_url: str = _setting(
        "SITUATE_LLM_URL", "servers", "", "none (in process)", "an OpenAI-compatible server running the blurb model"
    )
    llm_served_model: str = _setting(
        "SITUATE_LLM_SERVED_MODEL", "servers", "", "the first it lists", "the model name that server serves"
    )
    llm_api_key: str = _setting("SITUATE_LLM_API_KEY", "servers", "", "none", "that server's bearer key (never logged)")
    llm_api: str = _setting(
        "SITUATE_LLM_API", "servers", "", "`openai` (with a URL)", "the API it speaks", choices="`openai`, `anthropic`"
    )
    llm_in_flight: int = _setting(
        "SITUATE_LLM_IN_FLIGHT", "servers", 1, "1", "documents asked of a server or API at once"
    )
    llm_batch: bool = _setting(
        "SITUATE_LLM_BATCH", "servers", False, "0", "1: blurbs through Anthropic's Message Batches (0: live requests)"
    )
    llm_batch_poll: int = _setting(
        "SITUATE_LLM_BATCH_POLL", "servers", 30, "30", "seconds between looks at a batch in progress"
    )
    llm_batch_wait: int = _setting(
        "SITUATE_LLM_BATCH_WAIT", "servers", 86400, "86400", "seconds a run waits for its batches"
    )
    llm_retries: int = _setting("SITUATE_LLM_RETRIES", "servers", 4, "4", "retries of a failed server request")
    llm_timeout: int = _setting(
        "SITUATE_LLM_TIMEOUT", "servers", 300, "300", "seconds a server request may take in all"
    )
    llm_price_input: float | None = _setting(
        "SITUATE_LLM_PRICE_INPUT",
        "servers",
        None,
        "Anthropic's rate for the model",
        "USD per million input tokens (paid API)",
    )
    llm_price_output: float | None = _setting(
        "SITUATE_LLM_PRICE_OUTPUT",
        "servers",
        None,
        "Anthropic's rate for the model",
        "USD per million output tokens (paid API)",
    )
    embed_url: str = _setting(
        "SITUATE_EMBED_URL", "servers", "", "none (in process)", "an OpenAI-compatible `/v1/embeddings` server"
    )
    embed_served_model: str = _setting(
        "SITUATE_EMBED_SERVED_MODEL", "servers", "", "the first it lists", "the embedding model name it serves"
    )
    embed_api_key: str = _setting("SITUATE_EMBED_API_KEY", "servers", "", "none", "its bearer key (never logged)")
    # service
    allowed_hosts: str = _setting(
        "SITUATE_ALLOWED_HOSTS",
        "service",
        "",
        "none",
        "`situate serve`: `Host` names answered besides loopback (comma-separated)",
    )
    api_token: str = _setting(
        "SITUATE_API_TOKEN",
        "service",
        "",
        "none",
        "`situate serve`: the bearer token every request must send (needed off loopback)",
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            var, value = f.metadata["env"], getattr(self, f.name)
            if var in SETTING_BOUNDS and value is not None:
                check_setting(var, value)
            elif f.metadata["choices"] == SWITCH and not isinstance(value, bool):
                raise SettingError(f"{var}={value!r}: set 1 (on) or 0 (off)")
        if self.summary_reading not in ("head", "outline"):
            raise SettingError(f"SITUATE_SUMMARY_READING={self.summary_reading!r}: set head or outline")
        if self.generated not in ("index", "skip"):
            raise SettingError(f"SITUATE_GENERATED={self.generated!r}: set index or skip")
        for var, bound in SETTING_BOUNDS.items():
            for other in bound.below:
                value, limit = getattr(self, field_name(var)), getattr(self, field_name(other))
                if value >= limit:
                    raise SettingError(
                        f"{var}={value} is not below {other}={limit} (allowed {bound.low} to {limit - 1} with it)"
                    )


def field_name(var: str) -> str:
    """The :class:`Settings` field of variable ``var`` (``SITUATE_N_CTX`` → ``n_ctx``)."""
    return var[len(PREFIX) :].lower()


class Setting(NamedTuple):
    """One row of the reference: a :class:`Settings` field as the docs show it.

    Attributes
    ----------
    name : str
        The variable (``SITUATE_N_CTX``).
    group : str
        The reference's section: data, models, context, chunks, search, runs, servers, service.
    default : str
        What applies when it is unset, as the reference says it (``8192``, ``none``).
    help : str
        One line: what it sets, with its unit (tokens of which tokenizer, seconds, rows).
    choices : str
        The values a setting that is not a number takes (``0, 1``); empty for free text.
    field : str
        Its :class:`Settings` field (``n_ctx``).
    type : str
        The field's type (``int``, ``float | None``, ``bool``, ``str``).
    """

    name: str
    group: str
    default: str
    help: str
    choices: str
    field: str
    type: str

    @property
    def bound(self) -> Bound | None:
        """Its numeric range (:data:`SETTING_BOUNDS`), or None."""
        return SETTING_BOUNDS.get(self.name)

    @property
    def allowed(self) -> str:
        """The allowed values, as the reference shows them (``1 to 131072``, ``≥ 0``, or empty)."""
        b = self.bound
        if b is None:
            return self.choices

        def num(x: float) -> str:
            return f"{x:g}" if isinstance(x, float) else f"{x:,}"

        if b.low is None and b.high is None:
            text = "any number"
        elif b.high is None:
            text = f"≥ {num(b.low)}"
        elif b.low is None:
            text = f"≤ {num(b.high)}"
        else:
            text = f"{num(b.low)} to {num(b.high)}"
        return text + "".join(f", below `{x}`" for x in b.below)


#: Every setting, in the reference's order (the fields of :class:`Settings`).
SETTINGS: tuple[Setting, ...] = tuple(
    Setting(
        f.metadata["env"],
        f.metadata["group"],
        f.metadata["shown"],
        f.metadata["help"],
        f.metadata["choices"],
        f.name,
        str(f.type),
    )
    for f in dataclasses.fields(Settings)
)
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: The value each setting with a fixed default takes when unset (the fields' defaults; a test holds
#: the resources' own field defaults and the modules' constants to them).
DEFAULTS: dict[str, int | float | str] = {
    f.metadata["env"]: f.default
    for f in dataclasses.fields(Settings)
    if f.default is not None and f.default != "" and not isinstance(f.default, bool)
}


def default_of(name: str) -> int | float | str:
    """The value setting ``name`` takes when unset (:data:`DEFAULTS`).

    Raises
    ------
    KeyError
        ``name`` has no fixed default (it depends on the model, the folder, or is off when unset).
    """
    return DEFAULTS[name]


def _parse(setting: Setting, raw: str) -> int | float | bool | str:
    """The text ``raw`` of ``setting`` as its field's type."""
    if setting.name in SETTING_BOUNDS:
        return parse_setting(setting.name, raw)
    if setting.choices == SWITCH:
        if raw not in ("0", "1"):
            raise SettingError(f"{setting.name}={raw!r}: set 1 (on) or 0 (off)")
        return raw == "1"
    return raw


def read_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings: each set variable parsed as its field's type, the rest their defaults.

    Parameters
    ----------
    environ : Mapping[str, str], optional
        Where to read them; default: this process's overrides (:func:`override`), then
        ``os.environ``.

    Returns
    -------
    Settings
        Checked (:class:`Settings`); an empty value counts as unset.

    Raises
    ------
    situate.resources.errors.SettingError
        The first variable that is not a number of its kind, is outside its bound, or is a switch
        set to something other than ``0`` or ``1`` (``false``, ``no``: read as on by a looser test,
        so refused); ``overlap_tokens`` not below ``chunk_tokens`` and ``code_chunk_tokens``.
    """
    values = {}
    for s in SETTINGS:
        raw = env(s.name, environ)
        if raw != "":
            values[s.field] = _parse(s, raw)
    return Settings(**values)


def env(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of setting ``name`` in the environment, with surrounding blanks removed; ``""``
    when unset.  The one place situate reads a ``SITUATE_*`` variable (a test holds every other
    module to it), so each read is of a setting :data:`SETTINGS` lists.

    Parameters
    ----------
    name : str
        A setting's variable (``SITUATE_N_CTX``).
    environ : Mapping[str, str], optional
        Where to read it (default ``os.environ``).

    Returns
    -------
    str
        The raw text; the caller parses and bounds it (:func:`situate.resources.models.llm.parse_setting`).

    Raises
    ------
    KeyError
        ``name`` is not in :data:`SETTINGS` (a misspelt name in the code).
    """
    if name not in SETTINGS_BY_NAME:
        raise KeyError(f"{name} is not a situate setting (situate.resources.settings.SETTINGS)")
    if environ is None:
        with _OVERRIDES_LOCK:
            if name in _OVERRIDES:
                return _OVERRIDES[name]
        environ = os.environ
    return environ.get(name, "").strip()


#: What a command set for this process over the environment (its data folder, docs folder, blurb
#: file): ``{name: value}``, read first by :func:`env`.  The environment itself is never written,
#: so a Dagster run, a thread or a child process sees what the user set plus these, nothing else.
_OVERRIDES: dict[str, str] = {}
_OVERRIDES_LOCK = threading.RLock()


def override(name: str, value: str) -> None:
    """Set setting ``name`` to ``value`` for this process, over the environment, until
    :func:`restored_overrides` ends (or the process does).

    Raises
    ------
    KeyError
        ``name`` is not in :data:`SETTINGS`.
    """
    if name not in SETTINGS_BY_NAME:
        raise KeyError(f"{name} is not a situate setting (situate.resources.settings.SETTINGS)")
    with _OVERRIDES_LOCK:
        _OVERRIDES[name] = str(value).strip()


@contextlib.contextmanager
def restored_overrides() -> Iterator[None]:
    """Run a block, then put the overrides back as they were before it (those it set are gone)."""
    with _OVERRIDES_LOCK:
        saved = dict(_OVERRIDES)
    try:
        yield
    finally:
        with _OVERRIDES_LOCK:
            _OVERRIDES.clear()
            _OVERRIDES.update(saved)


def overridden(name: str) -> bool:
    """Whether this process set setting ``name`` over the environment (:func:`override`)."""
    with _OVERRIDES_LOCK:
        return name in _OVERRIDES


def child_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: ``base`` (default ``os.environ``) with this process's
    overrides (:func:`override`) set, so the child reads the same settings."""
    with _OVERRIDES_LOCK:
        return {**(os.environ if base is None else base), **_OVERRIDES}


def data_folder(home: str | None = None) -> str:
    """The data folder a command uses: ``home`` when given, else ``$SITUATE_HOME``, else
    :data:`DEFAULT_HOME` (not normalised: a path as written, or an object-store URI)."""
    return home or env("SITUATE_HOME") or DEFAULT_HOME


def unknown_settings(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """Set ``SITUATE_*`` variables that no setting has, each with the closest name, if any.

    Parameters
    ----------
    environ : Mapping[str, str]
        The environment (``os.environ``).

    Returns
    -------
    list of (str, str or None)
        ``(name, suggestion)``, sorted by name: a typo (``SITUATE_N_CTXX`` → ``SITUATE_N_CTX``) or a
        variable of another version, which situate ignores.
    """
    out = []
    for name in sorted(environ):
        if name.startswith(PREFIX) and name not in SETTINGS_BY_NAME:
            close = difflib.get_close_matches(name, SETTINGS_BY_NAME, n=1, cutoff=0.8)
            out.append((name, close[0] if close else None))
    return out


def reference_markdown() -> str:
    """The configuration reference: one Markdown table of :data:`SETTINGS` (variable, meaning,
    default, allowed values), the part of ``docs/configuration.md`` between its markers."""
    rows = ["| variable | field | meaning | default | allowed |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | `{s.field}: {s.type}` | {s.help} | {s.default} | {s.allowed} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
