"""Resources built from the environment, with the defaults a fresh clone needs.

Every variable, its default, its allowed values and one line of help are in one table,
:data:`situate.resources.settings.SETTINGS` (the configuration page, ``docs/configuration.md``, is generated
from it).

Every numeric setting has a range, in one table (:data:`situate.resources.models.llm.SETTING_BOUNDS`, each
end with its reason), checked wherever settings are read: :func:`check_environment` (every
``situate`` command, ``situate dev`` before Dagster starts, the code location of ``dagster … -m
situate.pipelines.definitions``) and the blurb LLM and embedder resources themselves (when built, and when a
Dagster run resolves their ``dg.EnvVar`` values at its start).  A value outside is one line naming
the variable, the value and the bound: ``SITUATE_N_CTX=0 is below its minimum, 1 (allowed 1 to
131072)``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from situate.resources.documents.docs import Chunking, DocsFolder
from situate.resources.models import registry as models
from situate.resources.models.llm import SETTING_BOUNDS, BlurbLLM, Embedder, SettingError, parse_setting
from situate.resources.models.reranker import Reranker
from situate.resources.settings import PREFIX, data_folder, default_of, env, unknown_settings
from situate.resources.store.store import Store

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


def _raw(name: str) -> str:
    """A variable's text: a ``SITUATE_*`` setting through :func:`situate.resources.settings.env`, another
    (``ANTHROPIC_API_KEY``) as the environment holds it."""
    return env(name) if name.startswith(PREFIX) else os.environ.get(name, "")


def _env(name: str, default, cast=str):
    """``dg.EnvVar(name)`` when the variable is set (so the UI shows where a value comes from),
    else ``default``."""
    if _raw(name) == "":
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
    if not cfg.exists():
        cfg.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(path)
    return path


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


def setting_from_env(name: str, default: int | float) -> int | float:
    """The numeric setting ``name`` (a variable of :data:`situate.resources.models.llm.SETTING_BOUNDS`), or
    ``default`` when unset or empty.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        Not a number of its kind (a whole number for an ``int`` setting), or outside its bound:
        ``SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0``.
    """
    raw = _raw(name)
    if raw == "":
        return default
    try:
        return parse_setting(name, raw)
    except SettingError as e:
        from situate.pipelines.preflight import StartupError

        raise StartupError(str(e)) from None


def int_from_env(name: str, default: int) -> int:
    """The whole-number setting ``name``, or ``default`` when unset or empty
    (:func:`setting_from_env`).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        Not a whole number, or outside its bound (:data:`situate.resources.models.llm.SETTING_BOUNDS`).
    """
    return int(setting_from_env(name, default))


def check_environment() -> dict[str, int | float]:
    """Hold every set variable of :data:`situate.resources.models.llm.SETTING_BOUNDS` to its bound, and
    each pair rule (``SITUATE_OVERLAP_TOKENS`` under ``SITUATE_CHUNK_TOKENS``): the one check of
    the settings, made wherever they are read (:func:`resources_from_env`, so every command and the
    code location; ``situate dev`` before Dagster starts).

    A set ``SITUATE_*`` variable that :data:`situate.resources.settings.SETTINGS` does not list (a typo,
    which would otherwise be ignored in silence) gets a :class:`UserWarning` naming the closest
    setting.

    Returns
    -------
    dict
        The set variables' values, as numbers.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        The first variable that is not a number of its kind or is outside its bound, or a pair
        out of order: ``SITUATE_OVERLAP_TOKENS=100 is not below SITUATE_CHUNK_TOKENS=100``.
    """
    from situate.pipelines.preflight import StartupError

    for name, close in unknown_settings(os.environ):
        hint = f" (did you mean {close}?)" if close else ""
        warnings.warn(f"{name} is not a situate setting and is ignored{hint}", UserWarning, stacklevel=2)

    values = {name: setting_from_env(name, None) for name in SETTING_BOUNDS}
    values = {k: v for k, v in values.items() if v is not None}
    for name, bound in SETTING_BOUNDS.items():
        if bound.below and (name in values or bound.below in values):
            value = values.get(name, default_of(name))
            limit = values.get(bound.below, default_of(bound.below))
            if value >= limit:
                raise StartupError(
                    f"{name}={value} is not below {bound.below}={limit} (allowed {bound.low} to {limit - 1} with it)"
                )
    return values


def _switch(name: str) -> bool:
    """An on/off setting: unset, empty or ``0`` is off, ``1`` is on.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        Any other value (``false``, ``no``: read as on by a looser test, so refused here).
    """
    raw = env(name)
    if raw not in ("", "0", "1"):
        from situate.pipelines.preflight import StartupError

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
    situate.pipelines.preflight.StartupError
        A rate that is not a number or is outside its bound.
    """
    from situate.resources.models.anthropic_api import price_of

    given = [setting_from_env(n, -1.0) for n in ("SITUATE_LLM_PRICE_INPUT", "SITUATE_LLM_PRICE_OUTPUT")]
    return price_of(model, *(None if g < 0 else float(g) for g in given))


def _reader(plain: bool):
    """``val(name, default=None, cast=str)``: a setting's value (``plain``) or its ``dg.EnvVar``
    when set; unset, ``default`` or :data:`situate.resources.settings.DEFAULTS`'s."""

    def val(name, default=None, cast=str):
        default = default_of(name) if default is None else default
        if plain:
            if cast is int:
                return int_from_env(name, default)
            raw = _raw(name)
            return default if raw == "" else cast(raw)
        return _env(name, default, cast)

    return val


def blurb_llm_from_env(val) -> BlurbLLM:
    """The blurb LLM resource: its model resolved by name or path (``SITUATE_LLM_MODEL``), the API
    it speaks, and every setting through ``val`` (:func:`_reader`).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        ``SITUATE_LLM_API`` is not ``openai`` or ``anthropic``; a setting outside its bound.
    """
    llm_path, llm_id, llm_spec = models.resolve_llm(env("SITUATE_LLM_MODEL") or None)
    llm_api = env("SITUATE_LLM_API")
    if llm_api not in LLM_APIS:
        from situate.pipelines.preflight import StartupError

        raise StartupError(f"SITUATE_LLM_API={llm_api!r}: choose one of {', '.join(a for a in LLM_APIS if a)}")
    llm_api = "" if llm_api == "openai" else llm_api
    llm_penalty = setting_from_env(
        "SITUATE_REPEAT_PENALTY", llm_spec.repeat_penalty if llm_spec else models.DEFAULT_REPEAT_PENALTY
    )
    # a model name is resolved here (the path is what the UI shows), a path is taken as it is
    return BlurbLLM(
        model_path=llm_path,
        model_id=llm_id,
        repeat_penalty=llm_penalty,
        n_ctx=val("SITUATE_N_CTX", cast=int),
        n_threads=val("SITUATE_N_THREADS", cast=int),
        n_gpu_layers=val("SITUATE_N_GPU_LAYERS", cast=int),
        max_tokens=val("SITUATE_MAX_TOKENS", cast=int),
        prompt=val("SITUATE_PROMPT"),
        batch=val("SITUATE_BATCH", cast=int),
        max_chunks_per_document=val("SITUATE_MAX_BLURB_CHUNKS", cast=int),
        context=val("SITUATE_CONTEXT"),
        document_tokens=val("SITUATE_DOCUMENT_TOKENS", cast=int),
        blurbs_file=val("SITUATE_BLURBS_FILE", ""),
        server_url=val("SITUATE_LLM_URL", ""),
        served_model=val("SITUATE_LLM_SERVED_MODEL", ""),
        api=llm_api,
        api_batch=_switch("SITUATE_LLM_BATCH"),
        batch_poll_s=val("SITUATE_LLM_BATCH_POLL", cast=int),
        batch_wait_s=val("SITUATE_LLM_BATCH_WAIT", cast=int),
        in_flight=val("SITUATE_LLM_IN_FLIGHT", cast=int),
        server_key=val("ANTHROPIC_API_KEY" if llm_api == "anthropic" else "SITUATE_LLM_API_KEY", ""),
        server_retries=val("SITUATE_LLM_RETRIES", cast=int),
        server_timeout=val("SITUATE_LLM_TIMEOUT", cast=int),
        flash_attn=_switch("SITUATE_FLASH_ATTN"),
        kv_type=env("SITUATE_KV_TYPE") or default_of("SITUATE_KV_TYPE"),
        repack=_switch("SITUATE_LLM_REPACK"),
    )


def embedder_from_env(val) -> Embedder:
    """The embedder resource: a name resolved to its file, tokenizer, prefixes, pooling and context
    (``SITUATE_EMBED_MODEL``), or a server (``SITUATE_EMBED_URL``); settings through ``val``."""
    embed_path, embed_tok, embed_id, embed_spec = models.resolve_embedder(env("SITUATE_EMBED_MODEL") or None)
    return Embedder(
        model_path=embed_path,
        model_id=embed_id,
        tokenizer_path=embed_tok,
        n_ctx=embed_spec.n_ctx,
        pooling=embed_spec.pooling,
        document_prefix=embed_spec.document_prefix,
        query_prefix=embed_spec.query_prefix,
        n_threads=val("SITUATE_N_THREADS", cast=int),
        n_gpu_layers=val("SITUATE_N_GPU_LAYERS", cast=int),
        server_url=val("SITUATE_EMBED_URL", ""),
        served_model=val("SITUATE_EMBED_SERVED_MODEL", ""),
        server_key=val("SITUATE_EMBED_API_KEY", ""),
        server_retries=val("SITUATE_LLM_RETRIES", cast=int),
        server_timeout=val("SITUATE_LLM_TIMEOUT", cast=int),
    )


def resources_from_env(docs_path: str | None = None, home: str | None = None, plain: bool = False) -> dict:
    """The pipeline's resources.  ``plain`` resolves environment variables now (for the CLI, which
    calls resource methods outside a run); otherwise set variables become ``dg.EnvVar`` (resolved
    by Dagster at a run's start, when the resources hold them to their bounds again).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        A numeric setting that is not a number or is outside its bound (:func:`check_environment`),
        on both paths.
    """
    check_environment()

    val = _reader(plain)
    return {
        "docs": DocsFolder(path=docs_path or val("SITUATE_DOCS", recorded_docs_root(home) or "docs")),
        "store": Store(
            home=home or val("SITUATE_HOME"),
            vector_index_min_rows=val("SITUATE_VECTOR_INDEX_MIN_ROWS", cast=int),
        ),
        "llm": blurb_llm_from_env(val),
        "embedder": embedder_from_env(val),
        "chunking": Chunking(
            chunk_tokens=val("SITUATE_CHUNK_TOKENS", cast=int),
            overlap_tokens=val("SITUATE_OVERLAP_TOKENS", cast=int),
        ),
    }


def reranker_from_env() -> Reranker:
    """The local cross-encoder: ``SITUATE_RERANK_MODEL`` (an ONNX file with ``tokenizer.json``
    in its folder) or the installed default (:data:`situate.resources.models.registry.RERANKER`), loaded
    (:meth:`situate.resources.models.reranker.Reranker.load`: once a process) when both files exist, so a
    corrupt or unreadable one is refused here, before any search uses it.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        A reranker file is corrupt (a pinned file whose size or sha256 is not the pinned one) or
        unreadable by onnxruntime or tokenizers: one line naming the file and the reason.  A
        missing file is not an error here: scoring raises ``FileNotFoundError``, and search
        answers from the first stage.
    """
    from situate.pipelines.preflight import StartupError

    path = env("SITUATE_RERANK_MODEL") or str(models.path_of(models.RERANKER))
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
    :data:`situate.resources.models.reranker.SEARCH_RERANK_DEPTH` (0: no rerank).

    Raises
    ------
    situate.pipelines.preflight.StartupError
        Not a whole number, or outside 0 to 1,000,000 (:data:`situate.resources.models.llm.SETTING_BOUNDS`).
    """
    from situate.resources.models.reranker import SEARCH_RERANK_DEPTH

    return int_from_env("SITUATE_RERANK_DEPTH", SEARCH_RERANK_DEPTH)
