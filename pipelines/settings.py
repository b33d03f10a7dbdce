"""Resources built from the environment, with the defaults a fresh clone needs.

=======================  =============================================  ==========================
variable                 meaning                                        default
=======================  =============================================  ==========================
SITUATE_DOCS             docs folder (or a corpus file)                 ``docs``
SITUATE_HOME             data folder                                    ``.situate``
SITUATE_MODELS_DIR       shared models folder                           ``~/.cache/situate/models``
SITUATE_LLM_MODEL        blurb model: a name or a chat GGUF path        ``qwen2.5-coder-0.5b``
SITUATE_LLM_URL          an OpenAI-compatible server running it         none (in process)
SITUATE_LLM_SERVED_MODEL the model name the server serves               the first it lists
SITUATE_LLM_API_KEY      the server's bearer key (never logged)         none
SITUATE_LLM_API          the API it speaks: openai or anthropic         openai (with a URL)
ANTHROPIC_API_KEY        the key for SITUATE_LLM_API=anthropic           none
SITUATE_LLM_IN_FLIGHT    documents asked of a server/API at once        1
SITUATE_LLM_BATCH        1: blurbs through Anthropic's Message Batches   0 (live requests)
SITUATE_LLM_BATCH_POLL   seconds between looks at a batch in progress   30
SITUATE_LLM_BATCH_WAIT   seconds a run waits for its batches            86400
SITUATE_LLM_RETRIES      retries of a failed server request             4
SITUATE_LLM_TIMEOUT      seconds a server request may take in all       300
SITUATE_LLM_PRICE_INPUT  USD per million input tokens (paid API)      Anthropic's rate for the model
SITUATE_LLM_PRICE_OUTPUT USD per million output tokens (paid API)     Anthropic's rate for the model
SITUATE_EMBED_URL        an OpenAI-compatible /v1/embeddings server     none (in process)
SITUATE_EMBED_SERVED_MODEL  the embedding model name it serves          the first it lists
SITUATE_EMBED_API_KEY    its bearer key (never logged)                  none
SITUATE_EMBED_MODEL      embedder: a name or an embedding GGUF path     ``bge-small-en-v1.5``
SITUATE_N_CTX            LLM context, tokens                            8192
SITUATE_N_THREADS        CPU threads (0: all)                           0
SITUATE_N_GPU_LAYERS     layers on the GPU (-1: all)                    0
SITUATE_MAX_TOKENS       blurb bound, generated tokens                  80
SITUATE_REPEAT_PENALTY   llama.cpp repeat penalty for blurbs            the model's (Qwen 1.1, SmolLM2 1.3)
SITUATE_CHUNK_TOKENS     chunk size, cl100k_base tokens                 800
SITUATE_OVERLAP_TOKENS   chunk overlap, cl100k_base tokens              80
SITUATE_RERANK_MODEL     cross-encoder ONNX (tokenizer.json beside it)  ms-marco-MiniLM-L-12-v2
SITUATE_RERANK_DEPTH     search candidates reranked (0: no rerank)      0 (``--rerank 30`` turns it on)
SITUATE_PROMPT           blurb prompt name (assets.prompting.PROMPTS)   ``anthropic-2024-primed-about``
SITUATE_CONTEXT          what writes the context: chunk, document, structure ``document``
SITUATE_DOCUMENT_TOKENS  document mode: LLM tokens of the document read  2048
SITUATE_BLURBS_FILE      blurbs taken from a file (no LLM call for them)  none
SITUATE_ALLOW_MASS_REMOVAL  1: remove most/all documents when gone (held) unset
SITUATE_ALLOWED_HOSTS    situate serve: Host names besides loopback     none
SITUATE_BATCH            chunks decoded together (shared-prefix batch)  1 (sequential)
SITUATE_FLASH_ATTN       llama.cpp flash attention for the blurb LLM    0 (off)
SITUATE_KV_TYPE          blurb LLM KV cache type: f16 or q8_0           f16
SITUATE_LLM_REPACK       llama.cpp CPU weight repacking for the blurbs  0 (off)
SITUATE_MAX_BLURB_CHUNKS  larger documents get no LLM blurbs         2000 (0: no limit)
SITUATE_VECTOR_INDEX_MIN_ROWS  rows from which vectors get IVF_FLAT     10000
SITUATE_DOCS_PER_RUN     most documents in one ingest run               0 (no limit: one run per range)
SITUATE_MAX_FALLBACK_SHARE     fallback_share check threshold           0.9
DAGSTER_HOME             Dagster instance                               ``$SITUATE_HOME/dagster``
=======================  =============================================  ==========================

Every numeric setting has a range, in one table (:data:`resources.models.llm.SETTING_BOUNDS`, each
end with its reason), checked wherever settings are read: :func:`check_environment` (every
``situate`` command, ``situate dev`` before Dagster starts, the code location of ``dagster … -m
pipelines.definitions``) and the blurb LLM and embedder resources themselves (when built, and when a
Dagster run resolves their ``dg.EnvVar`` values at its start).  A value outside is one line naming
the variable, the value and the bound: ``SITUATE_N_CTX=0 is below its minimum, 1 (allowed 1 to
131072)``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from assets.prompting import DEFAULT_PROMPT
from resources.documents.docs import CHUNK_TOKENS, OVERLAP_TOKENS, Chunking, DocsFolder
from resources.models import registry as models
from resources.models.llm import SETTING_BOUNDS, BlurbLLM, Embedder, SettingError, parse_setting
from resources.models.reranker import Reranker
from resources.store.store import Store

#: Written to a new DAGSTER_HOME: runs queue and go one at a time, so a laptop never holds
#: several copies of the models (each run loads its own).
DAGSTER_YAML = """\
concurrency:
  runs:
    max_concurrent_runs: 1
telemetry:
  enabled: false
"""

#: File in ``$SITUATE_HOME`` naming the docs folder last ingested there; the default docs folder,
#: so ``situate dev`` after ``situate ingest ~/notes`` follows ``~/notes`` and never mistakes an
#: unrelated ``./docs`` for it (which would delete every row).
DOCS_ROOT_FILE = "docs-root"


def _env(name: str, default, cast=str):
    """``dg.EnvVar(name)`` when the variable is set (so the UI shows where a value comes from),
    else ``default``."""
    if os.environ.get(name, "") == "":
        return default
    if cast is int:
        return dg.EnvVar.int(name)
    return dg.EnvVar(name)


#: The variables a run in its own data folder points elsewhere (``situate ingest --home``,
#: ``situate eval``): callers that must not keep the change restore them.
DATA_ENV = ("SITUATE_HOME", "SITUATE_DOCS", "DAGSTER_HOME", "TIKTOKEN_CACHE_DIR")


@contextlib.contextmanager
def restored_env(names=DATA_ENV) -> Iterator[None]:
    """Run a block, then put the environment variables ``names`` back as they were (unset ones
    are unset again)."""
    saved = {k: os.environ.get(k) for k in names}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def situate_home() -> Path | str:
    """``$SITUATE_HOME`` (default ``./.situate``): an absolute path, or an object store URI."""
    from resources.store.objects import is_uri, normalize_home

    home = os.environ.get("SITUATE_HOME") or ".situate"
    return normalize_home(home) if is_uri(home) else Path(normalize_home(home))


def ensure_dagster_home() -> Path:
    """Set ``DAGSTER_HOME`` to ``$SITUATE_HOME/dagster`` when unset, creating it with a
    ``dagster.yaml``; with the data folder on an object store the instance is local:
    ``~/.cache/situate/instance/<hash of the URI>`` (``SITUATE_CACHE``).  Returns the folder."""
    from resources.store.objects import cache_dir_for

    home = os.environ.get("DAGSTER_HOME")
    data = situate_home()
    if home:
        path = Path(home).expanduser().resolve()
    elif isinstance(data, str):
        path = cache_dir_for(data, "instance")
    else:
        path = data / "dagster"
    path.mkdir(parents=True, exist_ok=True)
    cfg = path / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(path)
    return path


def recorded_docs_root(home: str | None = None) -> str | None:
    """The docs folder recorded in data folder ``home`` (default ``$SITUATE_HOME``) by the last
    ``situate ingest``, if any; never for a data folder on an object store, whose ``docs-root``
    anyone with write access to the bucket could point at a local folder of this machine (the
    docs folder is then ``SITUATE_DOCS``, a local setting)."""
    from resources.store.objects import is_uri

    home = home or str(situate_home())
    if is_uri(home):
        return None
    raw = Store(home=home).read_file(DOCS_ROOT_FILE)
    return (raw.decode("utf-8", "replace").strip() or None) if raw is not None else None


def record_docs_root(path: str) -> None:
    """Remember ``path`` as this data folder's docs folder."""
    Store(home=str(situate_home())).write_file(DOCS_ROOT_FILE, str(Path(path).expanduser().resolve()).encode())


def setting_from_env(name: str, default: int | float) -> int | float:
    """The numeric setting ``name`` (a variable of :data:`resources.models.llm.SETTING_BOUNDS`), or
    ``default`` when unset or empty.

    Raises
    ------
    pipelines.preflight.StartupError
        Not a number of its kind (a whole number for an ``int`` setting), or outside its bound:
        ``SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0``.
    """
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return parse_setting(name, raw)
    except SettingError as e:
        from pipelines.preflight import StartupError

        raise StartupError(str(e)) from None


def int_from_env(name: str, default: int) -> int:
    """The whole-number setting ``name``, or ``default`` when unset or empty
    (:func:`setting_from_env`).

    Raises
    ------
    pipelines.preflight.StartupError
        Not a whole number, or outside its bound (:data:`resources.models.llm.SETTING_BOUNDS`).
    """
    return int(setting_from_env(name, default))


#: Defaults of the settings a pair rule (``Bound.below``) reads when one of the pair is unset.
PAIR_DEFAULTS = {"SITUATE_CHUNK_TOKENS": CHUNK_TOKENS, "SITUATE_OVERLAP_TOKENS": OVERLAP_TOKENS}


def check_environment() -> dict[str, int | float]:
    """Hold every set variable of :data:`resources.models.llm.SETTING_BOUNDS` to its bound, and
    each pair rule (``SITUATE_OVERLAP_TOKENS`` under ``SITUATE_CHUNK_TOKENS``): the one check of
    the settings, made wherever they are read (:func:`resources_from_env`, so every command and the
    code location; ``situate dev`` before Dagster starts).

    Returns
    -------
    dict
        The set variables' values, as numbers.

    Raises
    ------
    pipelines.preflight.StartupError
        The first variable that is not a number of its kind or is outside its bound, or a pair
        out of order: ``SITUATE_OVERLAP_TOKENS=100 is not below SITUATE_CHUNK_TOKENS=100``.
    """
    from pipelines.preflight import StartupError

    values = {name: setting_from_env(name, None) for name in SETTING_BOUNDS}
    values = {k: v for k, v in values.items() if v is not None}
    for name, bound in SETTING_BOUNDS.items():
        if bound.below and (name in values or bound.below in values):
            value = values.get(name, PAIR_DEFAULTS[name])
            limit = values.get(bound.below, PAIR_DEFAULTS[bound.below])
            if value >= limit:
                raise StartupError(
                    f"{name}={value} is not below {bound.below}={limit} (allowed {bound.low} to {limit - 1} with it)"
                )
    return values


def _switch(name: str) -> bool:
    """An on/off setting: unset, empty or ``0`` is off, ``1`` is on.

    Raises
    ------
    pipelines.preflight.StartupError
        Any other value (``false``, ``no``: read as on by a looser test, so refused here).
    """
    raw = os.environ.get(name, "").strip()
    if raw not in ("", "0", "1"):
        from pipelines.preflight import StartupError

        raise StartupError(f"{name}={raw!r}: set 1 (on) or 0 (off)")
    return raw == "1"


#: Values of ``SITUATE_LLM_API`` (empty: ``openai``, an OpenAI-compatible server where
#: ``SITUATE_LLM_URL`` is set).
LLM_APIS = ("", "openai", "anthropic")


def llm_price(model: str):
    """The rates a run's cost is counted at for ``model`` (``SITUATE_LLM_PRICE_INPUT`` /
    ``_OUTPUT`` where set, else Anthropic's published rate for it), or None.

    Raises
    ------
    pipelines.preflight.StartupError
        A rate that is not a number or is outside its bound.
    """
    from resources.models.anthropic_api import price_of

    given = [setting_from_env(n, -1.0) for n in ("SITUATE_LLM_PRICE_INPUT", "SITUATE_LLM_PRICE_OUTPUT")]
    return price_of(model, *(None if g < 0 else float(g) for g in given))


def resources_from_env(docs_path: str | None = None, home: str | None = None, plain: bool = False) -> dict:
    """The pipeline's resources.  ``plain`` resolves environment variables now (for the CLI, which
    calls resource methods outside a run); otherwise set variables become ``dg.EnvVar`` (resolved
    by Dagster at a run's start, when the resources hold them to their bounds again).

    Raises
    ------
    pipelines.preflight.StartupError
        A numeric setting that is not a number or is outside its bound (:func:`check_environment`),
        on both paths.
    """
    check_environment()

    def val(name, default, cast=str):
        if plain:
            if cast is int:
                return int_from_env(name, default)
            raw = os.environ.get(name, "")
            return default if raw == "" else cast(raw)
        return _env(name, default, cast)

    llm_path, llm_id, llm_spec = models.resolve_llm(os.environ.get("SITUATE_LLM_MODEL"))
    # an embedder name is resolved here too: its file, tokenizer, prefixes, pooling and context
    embed_path, embed_tok, embed_id, embed_spec = models.resolve_embedder(os.environ.get("SITUATE_EMBED_MODEL"))
    llm_api = os.environ.get("SITUATE_LLM_API", "").strip()
    if llm_api not in LLM_APIS:
        from pipelines.preflight import StartupError

        raise StartupError(f"SITUATE_LLM_API={llm_api!r}: choose one of {', '.join(a for a in LLM_APIS if a)}")
    llm_api = "" if llm_api == "openai" else llm_api
    llm_penalty = setting_from_env("SITUATE_REPEAT_PENALTY", llm_spec.repeat_penalty if llm_spec else 1.1)
    return {
        "docs": DocsFolder(path=docs_path or val("SITUATE_DOCS", recorded_docs_root(home) or "docs")),
        "store": Store(
            home=home or val("SITUATE_HOME", ".situate"),
            vector_index_min_rows=val("SITUATE_VECTOR_INDEX_MIN_ROWS", 10_000, int),
        ),
        # a model name is resolved here (the path is what the UI shows), a path is taken as it is
        "llm": BlurbLLM(
            model_path=llm_path,
            model_id=llm_id,
            repeat_penalty=llm_penalty,
            n_ctx=val("SITUATE_N_CTX", 8192, int),
            n_threads=val("SITUATE_N_THREADS", 0, int),
            n_gpu_layers=val("SITUATE_N_GPU_LAYERS", 0, int),
            max_tokens=val("SITUATE_MAX_TOKENS", 80, int),
            prompt=val("SITUATE_PROMPT", DEFAULT_PROMPT),
            batch=val("SITUATE_BATCH", 1, int),
            max_chunks_per_document=val("SITUATE_MAX_BLURB_CHUNKS", 2000, int),
            context=val("SITUATE_CONTEXT", "document"),
            document_tokens=val("SITUATE_DOCUMENT_TOKENS", 2048, int),
            blurbs_file=val("SITUATE_BLURBS_FILE", ""),
            server_url=val("SITUATE_LLM_URL", ""),
            served_model=val("SITUATE_LLM_SERVED_MODEL", ""),
            api=llm_api,
            api_batch=_switch("SITUATE_LLM_BATCH"),
            batch_poll_s=val("SITUATE_LLM_BATCH_POLL", 30, int),
            batch_wait_s=val("SITUATE_LLM_BATCH_WAIT", 86_400, int),
            in_flight=val("SITUATE_LLM_IN_FLIGHT", 1, int),
            server_key=val("ANTHROPIC_API_KEY" if llm_api == "anthropic" else "SITUATE_LLM_API_KEY", ""),
            server_retries=val("SITUATE_LLM_RETRIES", 4, int),
            server_timeout=val("SITUATE_LLM_TIMEOUT", 300, int),
            flash_attn=os.environ.get("SITUATE_FLASH_ATTN", "") not in ("", "0"),
            kv_type=os.environ.get("SITUATE_KV_TYPE", "") or "f16",
            repack=os.environ.get("SITUATE_LLM_REPACK", "") not in ("", "0"),
        ),
        "embedder": Embedder(
            model_path=embed_path,
            model_id=embed_id,
            tokenizer_path=embed_tok,
            n_ctx=embed_spec.n_ctx,
            pooling=embed_spec.pooling,
            document_prefix=embed_spec.document_prefix,
            query_prefix=embed_spec.query_prefix,
            n_threads=val("SITUATE_N_THREADS", 0, int),
            n_gpu_layers=val("SITUATE_N_GPU_LAYERS", 0, int),
            server_url=val("SITUATE_EMBED_URL", ""),
            served_model=val("SITUATE_EMBED_SERVED_MODEL", ""),
            server_key=val("SITUATE_EMBED_API_KEY", ""),
            server_retries=val("SITUATE_LLM_RETRIES", 4, int),
            server_timeout=val("SITUATE_LLM_TIMEOUT", 300, int),
        ),
        "chunking": Chunking(
            chunk_tokens=val("SITUATE_CHUNK_TOKENS", CHUNK_TOKENS, int),
            overlap_tokens=val("SITUATE_OVERLAP_TOKENS", OVERLAP_TOKENS, int),
        ),
    }


def reranker_from_env() -> Reranker:
    """The local cross-encoder: ``SITUATE_RERANK_MODEL`` (an ONNX file with ``tokenizer.json``
    in its folder) or the installed default (:data:`resources.models.registry.RERANKER`), loaded
    (:meth:`resources.models.reranker.Reranker.load`: once a process) when both files exist, so a
    corrupt or unreadable one is refused here, before any search uses it.

    Raises
    ------
    pipelines.preflight.StartupError
        A reranker file is corrupt (a pinned file whose size or sha256 is not the pinned one) or
        unreadable by onnxruntime or tokenizers: one line naming the file and the reason.  A
        missing file is not an error here: scoring raises ``FileNotFoundError``, and search
        answers from the first stage.
    """
    from pipelines.preflight import StartupError

    path = os.environ.get("SITUATE_RERANK_MODEL") or str(models.path_of(models.RERANKER))
    tok = str(Path(path).with_name("tokenizer.json"))
    reranker = Reranker(model_path=path, tokenizer_path=tok, n_threads=int_from_env("SITUATE_N_THREADS", 0))
    if os.path.exists(path) and os.path.exists(tok):
        try:
            reranker.load()
        except models.ModelFileError as e:
            raise StartupError(str(e)) from None
    return reranker


def rerank_depth_from_env() -> int:
    """Search candidates the cross-encoder reranks: ``SITUATE_RERANK_DEPTH``, default
    :data:`resources.models.reranker.SEARCH_RERANK_DEPTH` (0: no rerank).

    Raises
    ------
    pipelines.preflight.StartupError
        Not a whole number, or outside 0 to 1,000,000 (:data:`resources.models.llm.SETTING_BOUNDS`).
    """
    from resources.models.reranker import SEARCH_RERANK_DEPTH

    return int_from_env("SITUATE_RERANK_DEPTH", SEARCH_RERANK_DEPTH)
