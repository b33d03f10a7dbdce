"""Every setting situate reads from the environment, in one table: its variable, default, allowed
values and one line of help.

The configuration reference (``docs/configuration.md``, between its ``settings`` markers) is
generated from :data:`SETTINGS` by :func:`reference_markdown` (``python -m situate.resources.settings``
prints it; ``tests/test_settings_table.py`` fails when the page and the table differ, or when the
code reads a ``SITUATE_*`` variable the table does not list).  Numeric bounds come from
:data:`situate.resources.models.llm.SETTING_BOUNDS`, where each end has its source.

Examples
--------
>>> from situate.resources.settings import SETTINGS_BY_NAME, unknown_settings
>>> SETTINGS_BY_NAME["SITUATE_N_CTX"].default
'8192'
>>> unknown_settings({"SITUATE_N_CTXX": "4096", "HOME": "/root"})
[('SITUATE_N_CTXX', 'SITUATE_N_CTX')]
"""

from __future__ import annotations

import contextlib
import difflib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from situate.resources.models.llm import Bound

#: The data folder when neither an argument nor ``SITUATE_HOME`` names one.
DEFAULT_HOME = ".situate"
#: Prefix of situate's own variables: a set variable with it that :data:`SETTINGS` does not list
#: is a typo or a setting of another version (:func:`unknown_settings`).
PREFIX = "SITUATE_"


@dataclass(frozen=True)
class Setting:
    """One environment variable situate reads.

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
        The values a setting that is not a number takes, as the reference shows them (``0, 1``);
        empty for free text (a path, a URL, a name).
    """

    name: str
    group: str
    default: str
    help: str
    choices: str = ""

    @property
    def bound(self) -> Bound | None:
        """Its numeric range (:data:`situate.resources.models.llm.SETTING_BOUNDS`), or None."""
        from situate.resources.models.llm import SETTING_BOUNDS  # local: this module is imported by the
        # modules llm.py's own imports reach (the registry, the store), and needs no model code

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
        return text + (f", below `{b.below}`" if b.below else "")


#: The values of an on/off setting (``situate.pipelines.settings._switch``: anything else is refused).
SWITCH = "`0`, `1`"


def _s(name: str, group: str, default: str, help: str, choices: str = "") -> Setting:
    return Setting(name, group, default, help, choices)


#: Every variable, by group; the order of the reference.  Defaults are the ones the code applies
#: (``situate.pipelines.settings.resources_from_env`` and the modules named in each line).
SETTINGS: tuple[Setting, ...] = (
    # data
    _s("SITUATE_DOCS", "data", "the last folder ingested here, else `docs`", "docs folder, or a corpus file"),
    _s("SITUATE_HOME", "data", "`.situate`", "data folder: a path, or `s3://`, `gs://`, `az://` (Scaling out)"),
    _s("SITUATE_MODELS_DIR", "data", "`~/.cache/situate/models`", "shared models folder"),
    _s(
        "SITUATE_CACHE",
        "data",
        "`~/.cache/situate`",
        "local folder for what a data folder on object storage caches on this machine",
    ),
    _s(
        "SITUATE_BLURBS_FILE",
        "data",
        "none",
        "a blurb file (`situate eval --save-blurbs`): its chunks take their blurbs with no LLM call",
    ),
    # models
    _s(
        "SITUATE_LLM_MODEL",
        "models",
        "`qwen2.5-coder-0.5b`",
        "blurb model: a name (`situate models list`) or a chat GGUF path",
    ),
    _s("SITUATE_EMBED_MODEL", "models", "`bge-small-en-v1.5`", "embedder: a name or an embedding GGUF path"),
    _s(
        "SITUATE_RERANK_MODEL",
        "models",
        "ms-marco-MiniLM-L-12-v2 (INT8)",
        "cross-encoder ONNX file (`tokenizer.json` beside it)",
    ),
    _s("SITUATE_N_CTX", "models", "8192", "blurb LLM context, tokens of the LLM's tokenizer"),
    _s("SITUATE_N_THREADS", "models", "0", "CPU threads of each model (0: the cores other processes leave free)"),
    _s("SITUATE_N_GPU_LAYERS", "models", "0", "layers offloaded to a GPU (-1: all)"),
    _s("SITUATE_MAX_TOKENS", "models", "80", "blurb bound, generated tokens"),
    _s(
        "SITUATE_REPEAT_PENALTY", "models", "the model's (Qwen 1.1, SmolLM2 1.3)", "llama.cpp repeat penalty for blurbs"
    ),
    _s("SITUATE_BATCH", "models", "1", "chunks of a document decoded together over the shared prefix (1: sequential)"),
    _s("SITUATE_FLASH_ATTN", "models", "0", "1: llama.cpp flash attention for the blurb LLM", SWITCH),
    _s("SITUATE_KV_TYPE", "models", "`f16`", "blurb LLM KV cache type", "`f16`, `q8_0`"),
    _s("SITUATE_LLM_REPACK", "models", "0", "1: llama.cpp's CPU weight repacking for the blurb LLM", SWITCH),
    # context
    _s(
        "SITUATE_CONTEXT",
        "context",
        "`document`",
        "what writes each chunk's context: a blurb per chunk, one summary per document, or no LLM",
        "`chunk`, `document`, `structure`",
    ),
    _s("SITUATE_PROMPT", "context", "`anthropic-2024-primed-about`", "blurb prompt (the prompts table below)"),
    _s(
        "SITUATE_DOCUMENT_TOKENS",
        "context",
        "2048",
        "`document` mode: LLM tokens of the document the summary is written from",
    ),
    _s("SITUATE_MAX_BLURB_CHUNKS", "context", "2000", "a document with more chunks gets no LLM blurbs (0: no limit)"),
    # chunks
    _s("SITUATE_CHUNK_TOKENS", "chunks", "800", "chunk size, cl100k_base tokens"),
    _s("SITUATE_OVERLAP_TOKENS", "chunks", "80", "chunk overlap, cl100k_base tokens"),
    # search
    _s("SITUATE_RERANK_DEPTH", "search", "0", "search candidates the cross-encoder reranks (0: off; 30 measured)"),
    _s("SITUATE_VECTOR_INDEX_MIN_ROWS", "search", "10000", "rows from which the vectors get an IVF_FLAT index"),
    # runs
    _s("SITUATE_DOCS_PER_RUN", "runs", "0", "most documents in one ingest run (0: no limit, one run per range)"),
    _s(
        "SITUATE_ALLOW_MASS_REMOVAL",
        "runs",
        "unset",
        "1: the sensor and schedule remove documents even when most or all are gone (held otherwise)",
        SWITCH,
    ),
    _s(
        "SITUATE_MAX_FALLBACK_SHARE",
        "runs",
        "0.9",
        "the `fallback_share` check's threshold, a share of a document's chunks",
    ),
    _s(
        "SITUATE_LEASE_STALE_S",
        "runs",
        "90",
        "seconds after which a writer's lease on a document is taken as abandoned",
    ),
    _s("SITUATE_EVAL_CORPUS", "runs", "unset", "the `retrieval_eval` asset's corpus (cookbook JSON or a BEIR folder)"),
    _s("SITUATE_EVAL_QUERIES", "runs", "unset", "the `retrieval_eval` asset's query lines"),
    # servers
    _s("SITUATE_LLM_URL", "servers", "none (in process)", "an OpenAI-compatible server running the blurb model"),
    _s("SITUATE_LLM_SERVED_MODEL", "servers", "the first it lists", "the model name that server serves"),
    _s("SITUATE_LLM_API_KEY", "servers", "none", "that server's bearer key (never logged)"),
    _s("SITUATE_LLM_API", "servers", "`openai` (with a URL)", "the API it speaks", "`openai`, `anthropic`"),
    _s("SITUATE_LLM_IN_FLIGHT", "servers", "1", "documents asked of a server or API at once"),
    _s("SITUATE_LLM_BATCH", "servers", "0", "1: blurbs through Anthropic's Message Batches (0: live requests)", SWITCH),
    _s("SITUATE_LLM_BATCH_POLL", "servers", "30", "seconds between looks at a batch in progress"),
    _s("SITUATE_LLM_BATCH_WAIT", "servers", "86400", "seconds a run waits for its batches"),
    _s("SITUATE_LLM_RETRIES", "servers", "4", "retries of a failed server request"),
    _s("SITUATE_LLM_TIMEOUT", "servers", "300", "seconds a server request may take in all"),
    _s(
        "SITUATE_LLM_PRICE_INPUT",
        "servers",
        "Anthropic's rate for the model",
        "USD per million input tokens (paid API)",
    ),
    _s(
        "SITUATE_LLM_PRICE_OUTPUT",
        "servers",
        "Anthropic's rate for the model",
        "USD per million output tokens (paid API)",
    ),
    _s("SITUATE_EMBED_URL", "servers", "none (in process)", "an OpenAI-compatible `/v1/embeddings` server"),
    _s("SITUATE_EMBED_SERVED_MODEL", "servers", "the first it lists", "the embedding model name it serves"),
    _s("SITUATE_EMBED_API_KEY", "servers", "none", "its bearer key (never logged)"),
    # service
    _s(
        "SITUATE_ALLOWED_HOSTS",
        "service",
        "none",
        "`situate serve`: `Host` names answered besides loopback (comma-separated)",
    ),
    _s(
        "SITUATE_API_TOKEN",
        "service",
        "none",
        "`situate serve`: the bearer token every request must send (needed off loopback)",
    ),
)

SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}

#: The value each setting with a fixed default takes when unset: the one place those defaults are
#: written (the settings build the resources from it; ``tests/test_settings_table.py`` holds the
#: reference's ``default`` column, the resources' own field defaults and the modules' constants to
#: it).  Sources: chunk size and overlap, ``situate.resources.documents.docs.CHUNK_TOKENS``; the blurb
#: bound, shared/eval/README.md's measured setting; the lease, ``situate.resources.store.leases.STALE_S``;
#: the fallback-share threshold, ``situate.contextual.table_checks.MAX_FALLBACK_SHARE``; the prompt and the
#: context mode, docs/quality.md.
DEFAULTS: dict[str, int | float | str] = {
    "SITUATE_HOME": DEFAULT_HOME,
    "SITUATE_N_CTX": 8192,
    "SITUATE_N_THREADS": 0,
    "SITUATE_N_GPU_LAYERS": 0,
    "SITUATE_MAX_TOKENS": 80,
    "SITUATE_BATCH": 1,
    "SITUATE_KV_TYPE": "f16",
    "SITUATE_CONTEXT": "document",
    "SITUATE_PROMPT": "anthropic-2024-primed-about",
    "SITUATE_DOCUMENT_TOKENS": 2048,
    "SITUATE_MAX_BLURB_CHUNKS": 2000,
    "SITUATE_CHUNK_TOKENS": 800,
    "SITUATE_OVERLAP_TOKENS": 80,
    "SITUATE_RERANK_DEPTH": 0,
    "SITUATE_VECTOR_INDEX_MIN_ROWS": 10_000,
    "SITUATE_DOCS_PER_RUN": 0,
    "SITUATE_MAX_FALLBACK_SHARE": 0.9,
    "SITUATE_LEASE_STALE_S": 90.0,
    "SITUATE_LLM_IN_FLIGHT": 1,
    "SITUATE_LLM_BATCH_POLL": 30,
    "SITUATE_LLM_BATCH_WAIT": 86_400,
    "SITUATE_LLM_RETRIES": 4,
    "SITUATE_LLM_TIMEOUT": 300,
}


def default_of(name: str) -> int | float | str:
    """The value setting ``name`` takes when unset (:data:`DEFAULTS`).

    Raises
    ------
    KeyError
        ``name`` has no fixed default (it depends on the model, the folder, or is off when unset).
    """
    return DEFAULTS[name]


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
    rows = ["| variable | meaning | default | allowed |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.help} | {s.default} | {s.allowed} |" for s in SETTINGS]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
