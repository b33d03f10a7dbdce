"""The pipeline's resources, built from the settings (:class:`situate.resources.settings.Settings`).

The settings are read and checked once, by :func:`check_environment` (every ``situate`` command,
``situate dev`` before Dagster starts, the code location of ``dagster … -m
situate.pipelines.definitions``), and what is built from them gets them as arguments:
:func:`resources_from_env` (the Dagster resources), :func:`reranker_from_env`, :func:`llm_price`.
A value outside its bound (:data:`situate.resources.settings.SETTING_BOUNDS`, each end with its
reason) is one line naming the variable, the value and the bound: ``SITUATE_N_CTX=0 is below its
minimum, 1 (allowed 1 to 131072)``; the blurb LLM and embedder resources hold their fields to the
same bounds when a Dagster run resolves their ``dg.EnvVar`` values at its start.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from situate.resources.documents.docs import Chunking, DocsFolder
from situate.resources.errors import SettingError
from situate.resources.models import registry as models
from situate.resources.models.llm import BlurbLLM, Embedder
from situate.resources.models.reranker import Reranker
from situate.resources.settings import (
    Settings,
    data_folder,
    env,
    field_name,
    overridden,
    read_settings,
    unknown_settings,
)
from situate.resources.store.store import Store

#: Written to a new DAGSTER_HOME: runs queue and go one at a time, so a laptop never holds
#: several copies of the models (each run loads its own); Dagster's SQLite event log with one
#: engine a database (:class:`situate.resources.store.event_log.SqliteEventLog`: the same files,
#: each event's statements compiled once a process, not once an event).
DAGSTER_YAML = """\
concurrency:
  runs:
    max_concurrent_runs: 1
telemetry:
  enabled: false
event_log_storage:
  module: situate.resources.store.event_log
  class: SqliteEventLog
"""

#: What :data:`DAGSTER_YAML` was before the event log storage: an instance folder that still
#: holds exactly this is given the new one (the same databases, so nothing logged is lost).
DAGSTER_YAML_BEFORE = DAGSTER_YAML.split("event_log_storage:")[0]

#: File in ``$SITUATE_HOME`` naming the docs folder last ingested there; the default docs folder,
#: so ``situate dev`` after ``situate ingest ~/notes`` follows ``~/notes`` and never mistakes an
#: unrelated ``./docs`` for it (which would delete every row).
DOCS_ROOT_FILE = "docs-root"


#: The variables a run in its own data folder points elsewhere (``situate ingest --home``,
#: ``situate eval``): callers that must not keep the change restore them.
DATA_ENV = ("SITUATE_HOME", "SITUATE_DOCS", "DAGSTER_HOME", "TIKTOKEN_CACHE_DIR")


@contextlib.contextmanager
def restored_env(names=DATA_ENV) -> Iterator[None]:
    """Run a block, then put the environment variables ``names`` back as they were (unset ones
    are unset again), and the settings' overrides (:func:`situate.resources.settings.override`)."""
    from situate.resources.settings import restored_overrides

    saved = {k: os.environ.get(k) for k in names}
    try:
        with restored_overrides():
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def situate_home() -> Path | str:
    """``$SITUATE_HOME`` (default ``./.situate``): an absolute path, or an object store URI."""
    from situate.resources.store.objects import is_uri, normalize_home

    home = data_folder()
    return normalize_home(home) if is_uri(home) else Path(normalize_home(home))


def ensure_dagster_home() -> Path:
    """Set ``DAGSTER_HOME`` to ``$SITUATE_HOME/dagster`` when unset, creating it with a
    ``dagster.yaml``; with the data folder on an object store the instance is local:
    ``~/.cache/situate/instance/<hash of the URI>`` (``SITUATE_CACHE``).  Returns the folder."""
    from situate.resources.store.objects import cache_dir_for

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
    if not cfg.exists() or cfg.read_text() == DAGSTER_YAML_BEFORE:
        cfg.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(path)
    os.environ.setdefault(*PLANNED_EVENTS)
    return path


#: Dagster's own switch (``EventLogStorage.supports_partition_subset_in_asset_materialization_planned_events``):
#: a run over a range of documents logs one "materialization planned" event an asset, naming the
#: range, instead of one a document and asset.  With SQLite storage each event costs about 7 ms
#: (measured here), so a run over CoSQA's 6,267 documents spent 3.7 minutes logging 31,335
#: planned events before reading the first document.  What Dagster says it costs: the partitions
#: of a run that fails as a whole are not marked failed (they stay missing); situate fails a bad
#: document alone inside a run (its stage file and the step's metadata name it) and the next sync
#: asks for every document not ingested.  Set by :func:`ensure_dagster_home` unless already set
#: (``false`` turns it off); inherited by ``situate dev``'s webserver and daemon.
PLANNED_EVENTS = ("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "true")


def recorded_docs_root(home: str | None = None) -> str | None:
    """The docs folder recorded in data folder ``home`` (default ``$SITUATE_HOME``) by the last
    ``situate ingest``, if any; never for a data folder on an object store, whose ``docs-root``
    anyone with write access to the bucket could point at a local folder of this machine (the
    docs folder is then ``SITUATE_DOCS``, a local setting)."""
    from situate.resources.store.objects import is_uri

    home = home or str(situate_home())
    if is_uri(home):
        return None
    raw = Store(home=home).read_file(DOCS_ROOT_FILE)
    return (raw.decode("utf-8", "replace").strip() or None) if raw is not None else None


def record_docs_root(path: str) -> None:
    """Remember ``path`` as this data folder's docs folder."""
    Store(home=str(situate_home())).write_file(DOCS_ROOT_FILE, str(Path(path).expanduser().resolve()).encode())


def check_environment() -> Settings:
    """The settings, read and checked once (:func:`situate.resources.settings.read_settings`):
    every number inside its bound, each switch ``0`` or ``1``, the overlap below the chunk size.
    Called wherever settings are read: :func:`resources_from_env` (so every command and the code
    location), ``situate dev`` before Dagster starts.

    A set ``SITUATE_*`` variable that :class:`~situate.resources.settings.Settings` does not have (a
    typo, which would otherwise be ignored in silence) gets a :class:`UserWarning` naming the
    closest setting.

    Returns
    -------
    Settings
        Every setting's value (set, or its default).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        The first variable that is not a number of its kind, is outside its bound, or is a switch
        set to another value; a pair out of order: ``SITUATE_OVERLAP_TOKENS=100 is not below
        SITUATE_CHUNK_TOKENS=100``.
    """
    from situate.pipelines.preflight import StartupError

    for name, close in unknown_settings(os.environ):
        hint = f" (did you mean {close}?)" if close else ""
        warnings.warn(f"{name} is not a situate setting and is ignored{hint}", UserWarning, stacklevel=2)
    try:
        return read_settings()
    except SettingError as e:
        raise StartupError(str(e)) from None


#: Values of ``SITUATE_LLM_API`` (empty: ``openai``, an OpenAI-compatible server where
#: ``SITUATE_LLM_URL`` is set).
LLM_APIS = ("", "openai", "anthropic")


def llm_price(model: str, settings: Settings):
    """The rates a run's cost is counted at for ``model`` (``settings.llm_price_input`` /
    ``_output`` where set, else Anthropic's published rate for it), or None."""
    from situate.resources.models.anthropic_api import price_of

    return price_of(model, settings.llm_price_input, settings.llm_price_output)


def _reader(settings: Settings, plain: bool):
    """``val(name, default=None)``: setting ``name``'s value in ``settings`` (``default`` where it
    is empty), or, unless ``plain``, its ``dg.EnvVar`` where the environment set it (so the UI
    shows where a value comes from); a value this process set (:func:`~situate.resources.settings.
    override`) or that differs from the environment's (a component's attribute) is given as it is."""

    from_env = None if plain else read_settings()  # a value given otherwise (a component's) is no EnvVar

    def val(name, default=None):
        value = getattr(settings, field_name(name))
        if value in ("", None):
            return value if default is None else default
        if plain or overridden(name) or env(name) == "" or isinstance(value, (bool, float)):
            return value
        if value != getattr(from_env, field_name(name)):
            return value
        return dg.EnvVar.int(name) if isinstance(value, int) else dg.EnvVar(name)

    return val


def _api_key(llm_api: str, settings: Settings, plain: bool):
    """The blurb LLM's key: ``ANTHROPIC_API_KEY`` (Anthropic's own variable) for the Anthropic API,
    else ``settings.llm_api_key``; a ``dg.EnvVar`` unless ``plain``, so no key is in the run's
    config (it is resolved at the run's start, and never logged)."""
    if llm_api != "anthropic":
        return _reader(settings, plain)("SITUATE_LLM_API_KEY", "")
    if os.environ.get("ANTHROPIC_API_KEY", "") == "":
        return ""
    return os.environ["ANTHROPIC_API_KEY"] if plain else dg.EnvVar("ANTHROPIC_API_KEY")


def blurb_llm_from_env(settings: Settings, plain: bool = False) -> BlurbLLM:
    """The blurb LLM resource from ``settings``: its model resolved by name or path
    (``llm_model``), the API it speaks, every setting as a value (``plain``) or the ``dg.EnvVar``
    that set it (:func:`_reader`).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        ``SITUATE_LLM_API`` is not ``openai`` or ``anthropic``.
    """
    val = _reader(settings, plain)
    llm_path, llm_id, llm_spec = models.resolve_llm(settings.llm_model or None)
    if settings.llm_api not in LLM_APIS:
        from situate.pipelines.preflight import StartupError

        raise StartupError(f"SITUATE_LLM_API={settings.llm_api!r}: choose one of {', '.join(a for a in LLM_APIS if a)}")
    llm_api = "" if settings.llm_api == "openai" else settings.llm_api
    penalty = settings.repeat_penalty
    if penalty is None:
        penalty = llm_spec.repeat_penalty if llm_spec else models.DEFAULT_REPEAT_PENALTY
    # a model name is resolved here (the path is what the UI shows), a path is taken as it is
    return BlurbLLM(
        model_path=llm_path,
        model_id=llm_id,
        repeat_penalty=penalty,
        n_ctx=val("SITUATE_N_CTX"),
        n_threads=val("SITUATE_N_THREADS"),
        n_gpu_layers=val("SITUATE_N_GPU_LAYERS"),
        max_tokens=val("SITUATE_MAX_TOKENS"),
        prompt=val("SITUATE_PROMPT"),
        batch=val("SITUATE_BATCH"),
        max_chunks_per_document=val("SITUATE_MAX_BLURB_CHUNKS"),
        context=val("SITUATE_CONTEXT"),
        code_context=val("SITUATE_CODE_CONTEXT"),
        document_tokens=val("SITUATE_DOCUMENT_TOKENS"),
        summary_reading=val("SITUATE_SUMMARY_READING"),
        summary_tokens=val("SITUATE_SUMMARY_TOKENS"),
        blurbs_file=val("SITUATE_BLURBS_FILE"),
        server_url=val("SITUATE_LLM_URL"),
        served_model=val("SITUATE_LLM_SERVED_MODEL"),
        api=llm_api,
        api_batch=settings.llm_batch,
        batch_poll_s=val("SITUATE_LLM_BATCH_POLL"),
        batch_wait_s=val("SITUATE_LLM_BATCH_WAIT"),
        in_flight=val("SITUATE_LLM_IN_FLIGHT"),
        server_key=_api_key(llm_api, settings, plain),
        server_retries=val("SITUATE_LLM_RETRIES"),
        server_timeout=val("SITUATE_LLM_TIMEOUT"),
        flash_attn=settings.flash_attn,
        kv_type=settings.kv_type,
        repack=settings.llm_repack,
    )


def code_adapter_path(settings: Settings, embed_id: str) -> str:
    """The code map of the embedder ``embed_id`` (:data:`situate.resources.models.code_adapter.ADAPTERS`)
    when ``SITUATE_CODE_ADAPTER`` is on and the model runs in process ("": none; a server's vectors
    are not known to be the same model's)."""
    from situate.resources.models.code_adapter import ADAPTERS

    name = next((n for n in ADAPTERS if embed_id.startswith(n)), None)
    if not settings.code_adapter or settings.embed_url or name is None:
        return ""
    return str(ADAPTERS[name])


def embedder_from_env(settings: Settings, plain: bool = False) -> Embedder:
    """The embedder resource from ``settings``: a name resolved to its file, tokenizer, prefixes,
    pooling and context (``embed_model``), or a server (``embed_url``)."""
    val = _reader(settings, plain)
    embed_path, embed_tok, embed_id, embed_spec = models.resolve_embedder(settings.embed_model or None)
    return Embedder(
        model_path=embed_path,
        model_id=embed_id,
        tokenizer_path=embed_tok,
        n_ctx=embed_spec.n_ctx,
        pooling=embed_spec.pooling,
        document_prefix=embed_spec.document_prefix,
        query_prefix=embed_spec.query_prefix,
        code_adapter=code_adapter_path(settings, embed_id),
        n_threads=val("SITUATE_N_THREADS"),
        n_gpu_layers=val("SITUATE_N_GPU_LAYERS"),
        server_url=val("SITUATE_EMBED_URL"),
        served_model=val("SITUATE_EMBED_SERVED_MODEL"),
        server_key=val("SITUATE_EMBED_API_KEY"),
        server_retries=val("SITUATE_LLM_RETRIES"),
        server_timeout=val("SITUATE_LLM_TIMEOUT"),
    )


def resources_from_env(
    docs_path: str | None = None, home: str | None = None, plain: bool = False, settings: Settings | None = None
) -> dict:
    """The pipeline's resources, built from ``settings`` (default: :func:`check_environment`).
    ``plain`` gives values (for the CLI, which calls resource methods outside a run); otherwise a
    value the environment set is its ``dg.EnvVar`` (resolved by Dagster at a run's start, when the
    resources hold them to their bounds again).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        A setting that is not a number of its kind or is outside its bound (:func:`check_environment`).
    """
    settings = settings or check_environment()
    val = _reader(settings, plain)
    return {
        "docs": DocsFolder(
            path=docs_path or val("SITUATE_DOCS", recorded_docs_root(home) or "docs"),
            include=val("SITUATE_INCLUDE"),
            exclude=val("SITUATE_EXCLUDE"),
            generated=val("SITUATE_GENERATED"),
        ),
        "store": Store(
            home=home or val("SITUATE_HOME"),
            vector_index_min_rows=val("SITUATE_VECTOR_INDEX_MIN_ROWS"),
        ),
        "llm": blurb_llm_from_env(settings, plain),
        "embedder": embedder_from_env(settings, plain),
        "chunking": Chunking(
            chunk_tokens=val("SITUATE_CHUNK_TOKENS"),
            code_chunk_tokens=val("SITUATE_CODE_CHUNK_TOKENS"),
            overlap_tokens=val("SITUATE_OVERLAP_TOKENS"),
        ),
    }


def reranker_from_env(settings: Settings | None = None) -> Reranker:
    """The local cross-encoder: ``settings.rerank_model`` (default :func:`check_environment`; an
    ONNX file with ``tokenizer.json`` in its folder) or the installed default
    (:data:`situate.resources.models.registry.RERANKER`), loaded
    (:meth:`situate.resources.models.reranker.Reranker.load`: once a process) when both files exist,
    so a corrupt or unreadable one is refused here, before any search uses it.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        A setting outside its bound; a reranker file is corrupt (a pinned file whose size or sha256
        is not the pinned one) or unreadable by onnxruntime or tokenizers: one line naming the file
        and the reason.  A missing file is not an error here: scoring raises ``FileNotFoundError``,
        and search answers from the first stage.
    """
    from situate.pipelines.preflight import StartupError

    settings = settings or check_environment()
    path = settings.rerank_model or str(models.path_of(models.RERANKER))
    tok = str(Path(path).with_name("tokenizer.json"))
    reranker = Reranker(model_path=path, tokenizer_path=tok, n_threads=settings.n_threads)
    if os.path.exists(path) and os.path.exists(tok):
        try:
            reranker.load()
        except models.ModelFileError as e:
            raise StartupError(str(e)) from None
    return reranker
