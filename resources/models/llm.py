"""The in-process models: the instruct LLM that writes blurbs and the embedding model.

Both are llama-cpp-python ``Llama`` objects, loaded once per process and kept in a process-wide
cache keyed by their settings, so one run over many documents (or several runs in one ``situate
ingest``) loads each model once.  llama.cpp keeps only the last prompt's KV cache: a document's
chunks must be sent back to back with a token-identical prefix for it to be reused.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg
import numpy as np
import pydantic

from situate.resources.models.registry import DEFAULT_REPEAT_PENALTY
from situate.resources.models.threads import fit_threads
from situate.resources.settings import check_setting, parse_setting

if TYPE_CHECKING:
    from situate.resources.models.backends import LlmBackend

_LOCK = threading.Lock()
_CACHE: dict[tuple, object] = {}

#: Model calls made in this process: ``llm_generate`` (one per blurb prompt, sequential or in a
#: shared-prefix batch) and ``embed_texts`` (texts sent to the embedding model).  Read by the
#: benchmarks (re-ingest must make none) and by tests that count work.
CALLS: collections.Counter = collections.Counter()
#: Tokens this process was billed for by a paid API (Anthropic's), whatever became of the answer
#: (a document that failed after some answers still paid for them): ``requests``,
#: ``evaluated`` (input + cache writes), ``written``, ``reused`` (cache reads), ``generated``,
#: each also with a ``batch_`` prefix for Message Batches answers.  Summed by
#: :func:`count_api_usage`; a run reports the difference between its start and its end.
API_USAGE: collections.Counter = collections.Counter()
_USAGE_LOCK = threading.Lock()


def count_api_usage(evaluated: int, written: int, reused: int, generated: int, batch: bool = False) -> None:
    """Add one paid answer's usage to :data:`API_USAGE` (thread-safe: documents in flight)."""
    p = "batch_" if batch else ""
    with _USAGE_LOCK:
        API_USAGE.update(
            {
                f"{p}requests": 1,
                f"{p}evaluated": evaluated,
                f"{p}written": written,
                f"{p}reused": reused,
                f"{p}generated": generated,
            }
        )


def api_usage_since(start: dict) -> dict:
    """:data:`API_USAGE` now minus ``start`` (a copy taken earlier)."""
    with _USAGE_LOCK:
        return {k: v - start.get(k, 0) for k, v in API_USAGE.items() if v - start.get(k, 0)}


@contextlib.contextmanager
def _quiet_stderr():
    """Send file descriptor 2 to /dev/null for a block (llama.cpp writes there from C, past Python's
    ``sys.stderr``); put back after, even on an error."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def amx_build() -> bool:
    """Whether the installed llama.cpp was built with Intel AMX kernels (``AMX_INT8 = 1`` in
    ``llama_print_system_info()``; a source build with ``GGML_NATIVE`` gets them on a CPU that has
    AMX, such as a Xeon of the Sapphire Rapids family).  With weight repacking on, such a build
    moves Q4_K/Q6_K/Q8_0 weights into AMX tiles, and llama-cpp-python 0.3.36 then dies with SIGSEGV
    on the first prompt of more than one token (measured on a 2-core Xeon with AMX: a 96-token
    ``eval`` of Qwen2.5-Coder-0.5B, exit -11; off, the same call succeeds).  A known llama.cpp crash
    in ``ggml_backend_amx_mul_mat`` (ggml-org/llama.cpp issue 20824, open).  No error is raised."""
    import llama_cpp

    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


@contextlib.contextmanager
def _weight_repacking(on: bool):
    """Load models with llama.cpp's CPU weight repacking ``on`` or off (``use_extra_bufts`` in
    ``llama_model_params``, which ``Llama()`` takes no argument for).  Repacked Q4_K weights use a
    kernel that multiplies four tokens at a time, so a token's logits depend on the tokens evaluated
    with it (docs/performance.md: measured on Qwen2.5-Coder-1.5B).  Call under ``_LOCK``."""
    import llama_cpp.llama_cpp as lc

    if on:
        yield
        return
    default = lc.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    lc.llama_model_default_params = params
    try:
        yield
    finally:
        lc.llama_model_default_params = default


def model_lock(llm) -> threading.RLock:
    """The lock of one loaded llama.cpp model (``Llama``): a llama.cpp context holds one KV cache
    and one batch, and two threads decoding in it at once corrupt both (the service's, the MCP
    server's and an application's threads all reach the same process-wide model), so every call
    into it (:meth:`BlurbLLM.generate`, :meth:`BlurbLLM.generate_lines`, :meth:`Embedder.embed`)
    holds this lock.  Re-entrant: ``generate_lines`` calls ``generate``."""
    lock = getattr(llm, "_situate_lock", None)
    if lock is None:
        with _LOCK:
            lock = getattr(llm, "_situate_lock", None)
            if lock is None:
                lock = llm._situate_lock = threading.RLock()
    return lock


def _refuse_amx_repacking() -> None:
    """Raise ``SettingError`` before a load with weight repacking on an AMX build (:func:`amx_build`),
    which would kill the process at its first prompt rather than fail."""
    if amx_build():
        from situate.resources.errors import SettingError

        raise SettingError(
            "SITUATE_LLM_REPACK=1: this llama.cpp build repacks weights into Intel AMX tiles "
            "(llama_print_system_info: AMX_INT8 = 1), and llama-cpp-python 0.3.36 then crashes "
            "(SIGSEGV) on the first prompt of more than one token; leave repacking off (the default)"
        )


def _load(key: tuple, repack: bool = True, **kwargs):
    from llama_cpp import Llama

    from situate.resources.models.registry import check_model_file

    with _LOCK:
        if key not in _CACHE:
            env_var = "SITUATE_LLM_MODEL" if key[0] == "llm" else "SITUATE_EMBED_MODEL"
            check_model_file(kwargs["model_path"], env_var)
            if repack and not kwargs.get("vocab_only"):
                _refuse_amx_repacking()
            try:
                if kwargs.get("vocab_only"):
                    with _quiet_stderr():  # llama.cpp warns about n_ctx_train 0 of a vocabulary-only load
                        _CACHE[key] = Llama(**kwargs)
                else:
                    with _weight_repacking(repack):
                        _CACHE[key] = Llama(**kwargs)
            except ValueError as e:  # llama.cpp: "Failed to load model from file"
                from situate.resources.models.registry import ModelFileError

                if "context" in str(e):  # the file loaded; the context settings did not work
                    raise ModelFileError(
                        f"llama.cpp could not create a context of n_ctx {kwargs.get('n_ctx')} "
                        f"for {kwargs['model_path']} (check SITUATE_N_CTX and free memory): {e}"
                    ) from None
                raise ModelFileError(
                    f"model file {kwargs['model_path']} could not be loaded by llama.cpp "
                    f"(truncated, or a model this llama.cpp does not know: {e})"
                ) from None
        return _CACHE[key]


def default_threads() -> int:
    """Physical-core guess for llama.cpp threads: all CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@dataclass
class Generation:
    """One completion and llama.cpp's own counters for it.

    Attributes
    ----------
    text : str
    prompt_tokens : int
        Tokens in the prompt.
    evaluated : int
        Prompt tokens llama.cpp evaluated (``n_p_eval`` of ``llama_perf_context``).
    reused : int
        ``prompt_tokens - evaluated``: served from the KV cache.
    generated : int
        Tokens generated.
    seconds : float
        Wall time of the call.
    prefill_seconds, generate_seconds : float
        llama.cpp's own time in prompt evaluation and in generation for this call
        (``t_p_eval_ms`` / ``t_eval_ms`` of ``llama_perf_context``); 0 when not available.
    written : int
        Of ``evaluated``, the tokens an API wrote to its prompt cache (Anthropic's
        ``cache_creation_input_tokens``, billed above plain input); 0 elsewhere.
    reuse_reported : bool
        Whether ``reused`` was measured or reported: False through a model server that does not
        say which prompt tokens it reused (llama-cpp-python's server), where ``reused`` is 0 and
        ``evaluated`` is every prompt token sent, not a measurement.
    """

    text: str
    prompt_tokens: int
    evaluated: int
    reused: int
    generated: int
    seconds: float
    prefill_seconds: float = 0.0
    generate_seconds: float = 0.0
    written: int = 0
    reuse_reported: bool = True


# -- setting bounds: situate.resources.settings (SETTING_BOUNDS, check_setting, parse_setting) ---

#: The :class:`BlurbLLM` fields set from the environment, and their variables.
LLM_SETTINGS = {
    "n_ctx": "SITUATE_N_CTX",
    "n_threads": "SITUATE_N_THREADS",
    "n_gpu_layers": "SITUATE_N_GPU_LAYERS",
    "max_tokens": "SITUATE_MAX_TOKENS",
    "repeat_penalty": "SITUATE_REPEAT_PENALTY",
    "batch": "SITUATE_BATCH",
    "max_chunks_per_document": "SITUATE_MAX_BLURB_CHUNKS",
    "document_tokens": "SITUATE_DOCUMENT_TOKENS",
    "summary_tokens": "SITUATE_SUMMARY_TOKENS",
    "server_retries": "SITUATE_LLM_RETRIES",
    "server_timeout": "SITUATE_LLM_TIMEOUT",
    "batch_poll_s": "SITUATE_LLM_BATCH_POLL",
    "batch_wait_s": "SITUATE_LLM_BATCH_WAIT",
    "in_flight": "SITUATE_LLM_IN_FLIGHT",
}

#: The :class:`Embedder` fields set from the environment, and their variables.
EMBEDDER_SETTINGS = {
    "n_threads": "SITUATE_N_THREADS",
    "n_gpu_layers": "SITUATE_N_GPU_LAYERS",
    "server_retries": "SITUATE_LLM_RETRIES",
    "server_timeout": "SITUATE_LLM_TIMEOUT",
}

#: Dagster's whole-number ``dg.EnvVar.int`` reference (an ``int`` subclass whose value is a 0
#: placeholder until a run resolves it).
_INT_ENV_VAR = type(dg.EnvVar.int("SITUATE_N_CTX"))


def _held_to_bounds(data, fields: dict[str, str]):
    """Check the fields ``fields`` (field name to variable) of a resource's raw arguments
    ``data`` against :data:`SETTING_BOUNDS` (a ``model_validator(mode="before")``, which sees a
    ``dg.EnvVar`` before pydantic turns it into its placeholder).

    A number is checked as it is: built directly, or when a Dagster run re-creates the resource
    with its resolved config at its start (``ConfigurableResource._with_updated_values``), so a
    value changed after the code location loaded, or given as run config, is held too.  A
    ``dg.EnvVar`` is checked with its variable's value now when it has one (the code location
    refuses to load), and at the run's start otherwise.

    Raises
    ------
    SettingError
        A field outside its bound (pydantic reports it as a ``ValidationError`` with this message).
    """
    if not isinstance(data, dict):
        return data
    for field, name in fields.items():
        value = data.get(field)
        if isinstance(value, (dg.EnvVar, _INT_ENV_VAR)):
            var = value.name if isinstance(value, _INT_ENV_VAR) else value.env_var_name
            raw = os.environ.get(var, "")
            if raw != "":
                parse_setting(name, raw, label=var)
        elif isinstance(value, str):  # run config as text: pydantic would convert it
            parse_setting(name, value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            check_setting(name, value)
    return data


def _normalised(vecs: list, n: int) -> np.ndarray:
    """``float32[n, dim]`` of ``vecs``, each row L2-normalised (a zero row stays zero)."""
    arr = np.asarray(vecs, dtype=np.float32).reshape(n, -1)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return arr / np.where(norms == 0, 1, norms)


def forget_servers() -> None:
    """Drop this process's checked model-server clients (:meth:`BlurbLLM.server`,
    :meth:`Embedder.server`), so the next use checks the server again: what a URL serves can change
    between two ingests of one process (a server restarted with another model under the same name)."""
    with _LOCK:
        for key in [k for k in _CACHE if k and k[0] in ("server", "embed-server")]:
            _CACHE.pop(key, None)


class BlurbLLM(dg.ConfigurableResource):
    """The instruct LLM that writes blurbs: its settings, and the one backend they choose
    (:meth:`backend_object`: llama-cpp-python in process, an OpenAI-compatible server or
    Anthropic's Messages API, :mod:`situate.resources.models.backends`), which every method that
    runs the model delegates to.

    The numeric fields set from the environment (:data:`LLM_SETTINGS`) are held to
    :data:`SETTING_BOUNDS` when the resource is built and again when a Dagster run resolves its
    config: a value outside is a ``pydantic.ValidationError`` naming the variable, the value and
    the bound, before any step of the run.

    Attributes
    ----------
    model_path : str
        A chat GGUF; default Qwen2.5-Coder-0.5B-Instruct Q4_K_M (``SITUATE_LLM_MODEL``, a name of
        ``situate.resources.models.registry.LLMS`` or a path).
    model_id : str
        Name recorded in each row (default: the file name without ``.gguf``).
    n_ctx : int
        Context window in the model's tokens (8192: SmolLM2's trained context; Qwen2.5-Coder's is
        32,768, and 8192 keeps a blurb's attention cost bounded on CPU).
    n_threads : int
        CPU threads for prompt and generation; 0 (the default): before each call, the cores the
        other processes leave free (:mod:`situate.resources.models.threads`; at least 1, at most every
        allowed core), so a busy core does not stall the model (docs/performance.md: threads).
    n_gpu_layers : int
        Layers offloaded to a GPU (-1 all, 0 none).
    n_batch : int
        Prompt tokens per llama.cpp decode call.
    max_tokens : int
        Bound on a blurb, in generated tokens (80: eval/README.md's measured setting; the
        blog's contexts are 50-100 tokens).
    repeat_penalty : float
        The model's own (``situate.resources.models.registry.ModelFile.repeat_penalty``: Qwen 1.1, SmolLM2 1.3,
        which curbs the 135M model's loops), or ``SITUATE_REPEAT_PENALTY``.
    prompt : str
        Name of the blurb prompt (``situate.contextual.prompts.PROMPTS``); default
        ``anthropic-2024-primed-about``, the published prompt with the answer started.
    batch : int
        Chunks of one document window decoded together over the shared prefix
        (:class:`situate.resources.models.batching.SharedPrefixBatcher`); 1 is the sequential path.  The output is
        the same token for token either way with weight repacking off (``repack``, the default);
        with it on, not with Qwen2.5-Coder-1.5B (:mod:`situate.resources.models.batching`).  Default 1: on 2 CPU
        cores batching measured no faster (benchmarks/reports/performance.md); on a GPU try 8.
    flash_attn : bool
        llama.cpp flash attention (``SITUATE_FLASH_ATTN=1``); off by default: on 2 CPU cores it
        measured no faster (benchmarks/reports, section ``models``).
    kv_type : str
        KV cache type, ``f16`` (default) or ``q8_0`` (``SITUATE_KV_TYPE``; llama.cpp needs flash
        attention for a quantised V cache, so ``q8_0`` turns it on).
    max_chunks_per_document : int
        A document with more chunks gets no LLM blurbs (its chunks keep their structural
        context; status ``skipped:large-document``), so one huge file (a 20 MB log: about 8,000
        chunks, 10 hours of blurbs on 2 cores at 4.7 s each) cannot hold up every other document.
        ``SITUATE_MAX_BLURB_CHUNKS``, default 2,000 (about 2.6 h on 2 cores); 0 = no limit.
    repack : bool
        llama.cpp's CPU weight repacking.  Off by default: with it, the Qwen2.5-Coder-1.5B model's
        logits for a token depend on how many tokens are evaluated with it, so a blurb depended on
        what the previous chunk left in the KV cache and the batched path differed from the
        sequential one (2 of 4 test blurbs); off, they are equal (docs/performance.md).  Off
        measured no slower (0.5B: 6.17 s a blurb against 6.43 s on, ``benchmarks/reports/models.md``).
        ``SITUATE_LLM_REPACK=1`` turns it on.
    context : str
        What writes each chunk's context (``SITUATE_CONTEXT``): ``chunk`` (a blurb per chunk,
        the prompt ``prompt``), ``document`` (one LLM call per document: a summary of what the
        document is, joined with each chunk's structural context) or ``structure`` (no LLM: the
        structural context alone).  Default ``document``: on both labelled corpora it matched the
        per-chunk blurbs (codebase Pass@5/20 87.89/94.35 against 85.27/93.55; docs 86.67/92.67
        against 85.67/93.67) at 0.35x their LLM seconds a chunk (docs/quality.md, Quality per cost).
    code_context : str
        What writes the chunks' context of source code (``SITUATE_CODE_CONTEXT``; ``context`` is
        every other document's), one of the same three.  Default ``structure``: on code the LLM's
        summary gained nothing beyond the fold spread on the codebase set
        (:mod:`situate.contextual.policy`).
    document_tokens : int
        With ``context="document"``: LLM tokens of the document the summary is written from
        (its beginning; at most what ``n_ctx`` leaves).  ``SITUATE_DOCUMENT_TOKENS``, default 192
        (with ``summary_tokens`` 24): on the docs set's dev half, cold, beside the 2,048 / 80 of
        before, Pass@5/20 85.67/90.67 against 86.67/92.67 (within the fold spread, 2.0 / 4.0) at
        0.24x the wall time a page (2.74 s against 11.58 on 2 cores;
        ``benchmarks/reports/prose-reading-outline.md``, docs/quality.md).
    summary_reading : str
        With ``context="document"``: what those tokens are (``SITUATE_SUMMARY_READING``): ``head``
        (the document's beginning) or ``outline`` (its title and heading outline, at most 600
        characters, then its beginning: :func:`situate.contextual.lead.summary_source`).
    summary_tokens : int
        With ``context="document"``: the summary's bound, generated tokens
        (``SITUATE_SUMMARY_TOKENS``, default 24, one sentence: measured with ``document_tokens``;
        ``max_tokens`` bounds the other modes' blurbs).
    blurbs_file : str
        A blurb file (``situate.contextual.blurb_files``, ``SITUATE_BLURBS_FILE``): a chunk whose text has a
        line there made by this model file in this mode takes its blurb from it (cleaned and
        grounded again), with no LLM call; the others are made by the model.  Untrusted input:
        read within bounds, line by line, once per run and only when a document can use it
        (:func:`situate.contextual.blurb_files.read`).  Empty: none.
    server_url : str
        An OpenAI-compatible server that runs the model (``SITUATE_LLM_URL``: llama-server,
        ``llama_cpp.server``, vLLM; :mod:`situate.resources.models.server`); empty (the default): the model
        runs in this process.  The prompts are still built with ``model_path``'s tokenizer
        (vocabulary only), which must be the served model's: checked at start.
    served_model : str
        The model name requests carry (``SITUATE_LLM_SERVED_MODEL``); empty: the first the server
        lists.  Recorded in each row as the model.
    server_key : str
        Bearer key for the server (``SITUATE_LLM_API_KEY``, a ``dg.EnvVar``), never logged.
    server_retries : int
        Tries after the first on a refused or dropped connection, a timeout, 429 or 5xx
        (``SITUATE_LLM_RETRIES``, default 4: waits of 1, 2, 4 and 8 s).
    server_timeout : int
        Seconds one request may take in all (``SITUATE_LLM_TIMEOUT``, default 300).
    api : str
        The API a server speaks (``SITUATE_LLM_API``): empty or ``openai`` (an OpenAI-compatible
        server at ``server_url``) or ``anthropic`` (Anthropic's Messages API through the official
        SDK, :mod:`situate.resources.models.anthropic_api`: ``served_model`` is the Claude model,
        ``server_key`` the key from ``ANTHROPIC_API_KEY``, ``server_url`` an optional gateway;
        windows are fitted in UTF-8 bytes, a bound on the model's tokens, and ``model_path`` is
        not read).
    api_batch : bool
        With ``api="anthropic"``: a run's blurb requests go through the Message Batches API at
        half the price (``SITUATE_LLM_BATCH=1``; :mod:`situate.resources.models.message_batches`).
    in_flight : int
        Documents whose blurbs are asked at once through a server or API
        (``SITUATE_LLM_IN_FLIGHT``, default 1), each document's chunks still back to back; on
        llama-server each thread keeps to its own slot (``id_slot``), so each document's prefix
        stays in one slot's cache.  The in-process model takes one document at a time.
    batch_poll_s, batch_wait_s : int
        Seconds between two looks at a batch in progress (``SITUATE_LLM_BATCH_POLL``, default
        30) and seconds a run waits for its batches (``SITUATE_LLM_BATCH_WAIT``, default 86,400).
    """

    model_path: str
    model_id: str = ""
    n_ctx: int = 8192
    n_threads: int = 0
    n_gpu_layers: int = 0
    n_batch: int = 512
    max_tokens: int = 80
    repeat_penalty: float = DEFAULT_REPEAT_PENALTY
    seed: int = 0
    prompt: str = "anthropic-2024-primed-about"  # situate.contextual.prompts.DEFAULT_PROMPT
    flash_attn: bool = False
    kv_type: str = "f16"
    batch: int = 1
    max_chunks_per_document: int = 2000
    repack: bool = False
    context: str = "document"
    code_context: str = "structure"
    document_tokens: int = 192
    summary_reading: str = "head"
    summary_tokens: int = 24
    blurbs_file: str = ""
    server_url: str = ""
    served_model: str = ""
    server_key: str = ""
    server_retries: int = 4
    server_timeout: int = 300
    api: str = ""
    api_batch: bool = False
    batch_poll_s: int = 30
    batch_wait_s: int = 86_400
    in_flight: int = 1

    @pydantic.model_validator(mode="before")
    @classmethod
    def _bounds(cls, data):
        """The fields of :data:`LLM_SETTINGS` inside :data:`SETTING_BOUNDS` (:func:`_held_to_bounds`).

        Raises
        ------
        pydantic.ValidationError
            From :class:`SettingError`: ``SITUATE_N_CTX=0 is below its minimum, 1 (allowed 1 to 131072)``.
        """
        return _held_to_bounds(data, LLM_SETTINGS)

    def _key(self, vocab_only: bool) -> tuple:
        return (
            "llm",
            self.model_path,
            self.n_ctx,
            self.n_threads,
            self.n_gpu_layers,
            self.n_batch,
            self.seed,
            vocab_only,
            self.flash_attn,
            self.kv_type,
            self.repack,
        )

    def _attention_kwargs(self) -> dict:
        """llama.cpp context settings for flash attention and the KV cache type."""
        if self.kv_type == "f16" and not self.flash_attn:
            return {}
        import llama_cpp

        kinds = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}
        if self.kv_type not in kinds:
            raise ValueError(f"kv_type {self.kv_type!r}: choose f16 or q8_0")
        out = {"flash_attn": True if self.kv_type != "f16" else self.flash_attn}
        if self.kv_type != "f16":
            out.update(type_k=kinds[self.kv_type], type_v=kinds[self.kv_type])
        return out

    def backend_object(self) -> LlmBackend:
        """The process-wide :class:`situate.resources.models.backends.LlmBackend` these settings ask
        for (:func:`situate.resources.models.backends.llm_backend`): the model in process, an
        OpenAI-compatible server or Anthropic's API, chosen once; the methods below delegate to it."""
        from situate.resources.models.backends import llm_backend

        return llm_backend(self)

    @property
    def remote(self) -> bool:
        """Whether a server or an API runs the model (not this process)."""
        return self.backend_object().remote

    def resolved_model_id(self) -> str:
        """``model_id``, or the GGUF file name without ``.gguf``; with a server, the served model's
        name (``served_model``, else the one the server lists first); with Anthropic's API, the
        model id it gives for ``served_model``."""
        return self.backend_object().model_id()

    def identity(self) -> str:
        """sha256 hex of what writes the blurbs: the GGUF file in process; with a server,
        ``openai-compatible|<served model>|<what it says served it>`` (the model file
        llama-cpp-python's server names, a ``system_fingerprint``), so a server's blurbs are never
        taken for the local file's, nor one served model's for another's under the same name, in
        the blurb cache, kept blurbs or blurb files; with Anthropic's API, ``anthropic|<model id>``."""
        return self.backend_object().identity()

    def backend_kind(self) -> str:
        """What runs the model, short, for each row (``llm_backend``): ``in-process``,
        ``openai-compatible <scheme://host:port>``, ``anthropic-messages <…>`` or
        ``anthropic-batches <…>`` (never a path, user or key of the URL)."""
        return self.backend_object().kind()

    def backend(self) -> str:
        """What runs the model, for a run's metadata: ``in-process`` or ``openai-compatible
        <scheme://host:port> (<dialect>; context <n> tokens | context not reported; prompt tokens
        reused: reported | not reported)`` or ``anthropic-messages <scheme://host:port> (…)``, never
        a path, user or key of the URL."""
        return self.backend_object().describe()

    def api_client(self):
        """The process-wide :class:`situate.resources.models.anthropic_api.MessagesClient` for these
        settings, checked (:meth:`~situate.resources.models.anthropic_api.MessagesClient.check`) on first use
        (:func:`situate.resources.models.backends.messages_client`).

        Raises
        ------
        situate.resources.models.server.ServerError
            As the client and its check (no model or key, a wrong key, an unknown model, an
            unreachable endpoint).
        """
        from situate.resources.models.backends import messages_client

        return messages_client(self)

    def batch_round(self):
        """A new :class:`situate.resources.models.message_batches.MessageBatchRound` for one run (Anthropic's
        Message Batches API), or None when ``api_batch`` is off.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :meth:`api_client`; or ``api_batch`` is set without ``api="anthropic"``.
        """
        return self.backend_object().batch_round()

    def server(self):
        """The process-wide :class:`situate.resources.models.server.ServerClient` for ``server_url``, checked
        (:meth:`~situate.resources.models.server.ServerClient.check`) on first use
        (:func:`situate.resources.models.backends.server_client`).

        Raises
        ------
        situate.resources.models.server.ServerError
            As ``check``; or the server's context is smaller than ``n_ctx`` (a
            :class:`~situate.resources.models.server.ContextExceeded` naming both).
        """
        from situate.resources.models.backends import server_client

        return server_client(self)

    def load(self, vocab_only: bool = False):
        """The process-wide ``Llama`` for these settings (vocab only: tokenizer without weights).

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            ``model_path`` is missing, corrupt (a default model whose sha256 is not the pinned
            one) or not a GGUF file.
        situate.resources.errors.SettingError
            ``repack`` on with a llama.cpp built with AMX kernels, which would crash (:func:`amx_build`).
        """
        return _load(
            self._key(vocab_only),
            model_path=self.model_path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads or default_threads(),
            n_gpu_layers=self.n_gpu_layers,
            n_batch=self.n_batch,
            seed=self.seed,
            vocab_only=vocab_only,
            verbose=False,
            repack=self.repack,
            **({} if vocab_only else self._attention_kwargs()),
        )

    def tokenizer(self) -> LlmTokenizer:
        """The model's own tokenizer (loads the vocabulary only, no weights); with a server, one
        that never lets document text spell a control token (it is sent as text); with
        Anthropic's API, :class:`situate.resources.models.anthropic_api.ChatTokenizer` (UTF-8 bytes)."""
        return self.backend_object().tokenizer()

    def generate(
        self, tokens: list[int], stop: list[str] | None = None, max_tokens: int | None = None, grammar: str = ""
    ) -> Generation:
        """Greedy completion of a token prompt on the shared ``Llama``; prefix reuse is automatic.

        Parameters
        ----------
        tokens : list of int
            The whole prompt, in this model's tokens; ``len(tokens) + max_tokens <= n_ctx``.
        stop : list of str, optional
            Stop strings.
        max_tokens : int, optional
            Bound on generated tokens (default ``self.max_tokens``).
        grammar : str
            A GBNF grammar the output must follow (llama.cpp's ``LlamaGrammar``); empty for none.

        Returns
        -------
        Generation

        Raises
        ------
        situate.resources.models.server.ServerError
            With ``server_url``: the server failed after its retries, or cut the prompt; with
            Anthropic's API, as :meth:`situate.resources.models.anthropic_api.MessagesClient.complete`, or
            a grammar was asked for (the API has none).
        """
        return self.backend_object().generate(tokens, stop, max_tokens, grammar)

    def generate_lines(
        self,
        tokens: list[int],
        starts: list[str],
        stop: list[str] | None = None,
        max_tokens: int | None = None,
        grammar: str = "",
    ) -> Generation:
        """One sequence of lines: the completion of ``tokens`` up to a line break, then for each
        of ``starts`` that text (the next line's start, given) and its completion, each
        continuing the same KV cache (only the given start is evaluated between lines).

        Parameters
        ----------
        tokens : list of int
            The prompt, in this model's tokens.
        starts : list of str
            The start of each line after the first (e.g. ``"\n[chunk 4] This chunk is about"``).
        stop : list of str, optional
            Stop strings besides the line break.
        max_tokens : int, optional
            Bound on each line's generated tokens (default ``self.max_tokens``).

        Returns
        -------
        Generation
            ``text`` is the first line's completion, then each start and its completion;
            token counts and seconds are summed over the lines (in process ``prompt_tokens`` is
            the last call's prompt; through a server, where each line is a request, the prompts'
            sum, with the reuse the server reports).  Lines stop early where the next one could overrun the context:
            a line is begun only while the sequence, its start and ``max_tokens`` fit in
            ``n_ctx`` tokens, so the lines not begun are missing from ``text`` (the caller
            situates those chunks by their own calls), and llama.cpp's "Requested tokens exceed
            context window" is never reached.  With no room for even the first line, ``text``
            is empty and nothing is evaluated.

        Raises
        ------
        ValueError
            With Anthropic's API (a one-generation prompt continues the model's own tokens).
        situate.resources.models.server.ServerError
            As :meth:`generate`.
        """
        return self.backend_object().generate_lines(tokens, starts, stop, max_tokens, grammar)

    def batcher(self, stop: list[str] | None = None, max_tokens: int | None = None):
        """The process-wide :class:`situate.resources.models.batching.SharedPrefixBatcher` for these settings
        (``batch`` sequences, each with this LLM's ``n_ctx``), sharing the loaded weights;
        ``max_tokens`` bounds each generation (default ``self.max_tokens``).

        Raises
        ------
        ValueError
            A server or an API runs the model (it batches requests itself).
        """
        return self.backend_object().batcher(stop, max_tokens)


def _grammar(text: str):
    """The parsed ``LlamaGrammar`` of a GBNF text (parsed once per process)."""
    key = ("grammar", text)
    if key not in _CACHE:
        from llama_cpp import LlamaGrammar

        with _quiet_stderr():
            _CACHE[key] = LlamaGrammar.from_string(text, verbose=False)
    return _CACHE[key]


class LlmTokenizer:
    """Exact token counting with a loaded LLM's own tokenizer.

    ``encode(text)`` never adds BOS and never parses special tokens, so a document that contains
    ``<|im_end|>`` stays text; ``encode_template`` parses them (for the chat template).
    """

    def __init__(self, llm, defuse: bool = False):
        self.llm = llm
        self.defuse = defuse

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS, special tokens as plain text).  With ``defuse`` (a model
        server, which reads the prompt as text), a control-token spelling in ``text`` is broken
        first (:func:`situate.resources.models.server.defuse_controls`), so the server reads these tokens."""
        if self.defuse and text:
            from situate.resources.models.server import defuse_controls

            text = defuse_controls(text)
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False) if text else []

    def count(self, text: str) -> int:
        """Length of ``text`` in this model's tokens."""
        return len(self.encode(text))

    def encode_template(self, text: str, bos: bool) -> list[int]:
        """Token ids of chat-template text, special tokens parsed, BOS added if ``bos``."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True) if text else []

    def pieces(self, tokens: list[int]) -> list[bytes]:
        """Byte string of each token (for cut points on token boundaries)."""
        return [self.llm.detokenize([t]) for t in tokens]

    def chat_template(self) -> str | None:
        """The GGUF's Jinja chat template (``tokenizer.chat_template``), if any."""
        return self.llm.metadata.get("tokenizer.chat_template")

    def eos_text(self) -> str:
        """The end-of-sequence token as text."""
        return self.llm.detokenize([self.llm.token_eos()], special=True).decode("utf-8", "replace")


class Embedder(dg.ConfigurableResource):
    """The embedding model, in process: a GGUF with llama-cpp-python (pooling as the GGUF says) or
    an ONNX encoder with onnxruntime (:mod:`situate.resources.models.encoder`).  ``n_threads`` and
    ``n_gpu_layers`` are held to :data:`SETTING_BOUNDS` as :class:`BlurbLLM`'s fields are.

    Attributes
    ----------
    model_path : str
        An embedding GGUF or ONNX file; default bge-small-en-v1.5 INT8 ONNX, 384-wide
        (``SITUATE_EMBED_MODEL``, :data:`situate.resources.models.registry.EMBED_MODELS`).
    model_id : str
        Name recorded in each row.
    n_ctx : int
        Longest input in the model's tokens (bge-small-en-v1.5: 512 WordPiece tokens;
        nomic-embed-text-v1.5: 2048); longer text is cut.
    n_threads, n_gpu_layers
        As :class:`BlurbLLM`.
    batch_size : int
        Texts per ``embed()`` call.  llama-cpp-python packs a call's texts into one decode whose
        attention spans all of its tokens, so small is fast: 24 codebase chunks took 42-51 s one
        at a time against 64-70 s eight at a time (2 cores, measured side by side).
    document_prefix, query_prefix : str
        The model's task prefixes (nomic: ``search_document: `` / ``search_query: ``; see
        :data:`situate.resources.models.registry.EMBED_MODELS` for each named embedder's).
    tokenizer_path : str
        For an ONNX embedder (``model_path`` ending in ``.onnx``, run by
        :mod:`situate.resources.models.encoder`): its ``tokenizer.json``.  Empty for a GGUF.
    pooling : str
        For an ONNX embedder: ``cls`` or ``mean`` (as its authors specify).  A GGUF pools as its
        metadata says (mean, where it says none).
    code_adapter : str
        A learnt query map for code chunks (``.npy``, :mod:`situate.resources.models.code_adapter`);
        empty for none (``SITUATE_CODE_ADAPTER``).
    server_url, served_model, server_key, server_retries, server_timeout
        An OpenAI-compatible ``/v1/embeddings`` server running the model (``SITUATE_EMBED_URL``,
        ``SITUATE_EMBED_SERVED_MODEL``, ``SITUATE_EMBED_API_KEY``, ``SITUATE_LLM_RETRIES``,
        ``SITUATE_LLM_TIMEOUT``), as
        :class:`BlurbLLM`'s; ``model_path`` must then be the served model's GGUF, whose
        vocabulary cuts each text to ``n_ctx`` tokens and is checked against the server at start.
    """

    model_path: str
    model_id: str = ""
    n_ctx: int = 2048
    n_threads: int = 0
    n_gpu_layers: int = 0
    batch_size: int = 1
    document_prefix: str = "search_document: "
    query_prefix: str = "search_query: "
    tokenizer_path: str = ""
    pooling: str = ""
    code_adapter: str = ""
    server_url: str = ""
    served_model: str = ""
    server_key: str = ""
    server_retries: int = 4
    server_timeout: int = 300

    @pydantic.model_validator(mode="before")
    @classmethod
    def _bounds(cls, data):
        """The fields of :data:`EMBEDDER_SETTINGS` inside :data:`SETTING_BOUNDS` (:func:`_held_to_bounds`).

        Raises
        ------
        pydantic.ValidationError
            From :class:`SettingError`: ``SITUATE_N_THREADS=-1 is below its minimum, 0 …``.
        """
        return _held_to_bounds(data, EMBEDDER_SETTINGS)

    def resolved_model_id(self) -> str:
        """``model_id``, or the model file name without ``.gguf`` / ``.onnx``; with a server, the
        served model's name."""
        if self.server_url:
            return self.served_model or self.server().info.model
        return self.model_id or os.path.basename(self.model_path).removesuffix(".gguf").removesuffix(".onnx")

    def identity(self) -> str:
        """sha256 hex of what makes the vectors (the embedding cache's key): the model file in
        process; with a server, ``openai-compatible-embeddings|<served model>|<what it says served
        it, and the width>``."""
        if self.server_url:
            info = self.server().info
            return hashlib.sha256(f"openai-compatible-embeddings|{info.model}|{info.served_as}".encode()).hexdigest()
        from situate.resources.store.cache import file_sha256

        return file_sha256(self.model_path)

    def vector_key(self, prefix: str) -> str:
        """What makes a vector besides its text: the embedding cache's model key.

        :meth:`identity`, ``n_ctx``, ``prefix`` and, for an ONNX embedder, the pooling, the
        batch size (the INT8 model quantises activations per batch, padding included: a text's
        vector moves with its batch-mates, cosine down to 0.989) and the tokenizer file's
        sha256.  Without the last three, vectors cached under one batch size or pooling were
        served after it changed: a Quality row made in a data folder with such a cache could not
        be reproduced in a fresh one (docs/quality.md).
        """
        key = f"{self.identity()}|{self.n_ctx}|{prefix}"
        if self.is_onnx() and not self.server_url:
            from situate.resources.store.cache import file_sha256

            key += f"|{self.pooling or 'mean'}|batch {self.batch_size}|{file_sha256(self.tokenizer_path)}"
        return key

    def _vocab(self):
        """The GGUF's vocabulary only (a server embedder cuts texts with it)."""
        return _load(("embed-vocab", self.model_path), model_path=self.model_path, vocab_only=True, verbose=False)

    def server(self):
        """The process-wide, checked :class:`situate.resources.models.server.ServerClient` for ``server_url``.

        Raises
        ------
        situate.resources.models.server.ServerError
            As :meth:`BlurbLLM.server`, naming ``SITUATE_EMBED_*``; an ONNX ``model_path`` (its
            tokenizer cannot be checked against a server's).
        """
        from situate.resources.models.server import ServerClient, ServerError

        key = (
            "embed-server",
            self.server_url,
            self.served_model,
            hash(self.server_key),
            self.server_retries,
            self.server_timeout,
        )
        client = _CACHE.get(key)
        if client is None:
            if self.is_onnx():
                raise ServerError(
                    "SITUATE_EMBED_URL needs SITUATE_EMBED_MODEL to be the served model's GGUF "
                    "(its vocabulary cuts texts to the context and is checked against the server)"
                )
            client = ServerClient(
                self.server_url,
                self.served_model,
                self.server_key,
                retries=self.server_retries,
                timeout=self.server_timeout,
                settings="SITUATE_EMBED",
            )
            vocab = self._vocab()
            client.check(lambda t: vocab.tokenize(t.encode("utf-8"), add_bos=True, special=True), kind="embeddings")
            _CACHE[key] = client
        return client

    def is_onnx(self) -> bool:
        """True for an ONNX embedder (onnxruntime), False for a GGUF (llama.cpp)."""
        return self.model_path.endswith(".onnx")

    def load(self):
        """The process-wide embedding ``Llama`` (``n_batch = n_ubatch = n_ctx``, so any input that
        fits the context fits one batch).

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            As :meth:`BlurbLLM.load`.
        """
        import llama_cpp

        key = ("embed", self.model_path, self.n_ctx, self.n_threads, self.n_gpu_layers)
        kwargs = dict(
            model_path=self.model_path,
            embedding=True,
            n_ctx=self.n_ctx,
            n_batch=self.n_ctx,
            n_ubatch=self.n_ctx,
            n_threads=self.n_threads or default_threads(),
            n_gpu_layers=self.n_gpu_layers,
            verbose=False,
        )
        # weight repacking off, as for the blurb model: with it on, embedding with a Q4_K GGUF
        # (Qwen2.5-Coder-0.5B as the embedder) crashed llama.cpp 0.3.36 in its repacked kernel
        # (a segmentation fault on this project's 2-core machine); the f16 default is unaffected
        kwargs["repack"] = False
        llm = _load(key, **kwargs)
        if llama_cpp.llama_pooling_type(llm.ctx) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            # a GGUF without a pooling type (a chat model used as the embedder): one vector per
            # token; mean pooling gives one per text
            with _LOCK:
                _CACHE.pop(key, None)
            llm = _load(key + ("mean",), **kwargs, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN)
            with _LOCK:
                _CACHE[key] = llm
        return llm

    def _fit(self, llm, text: str) -> tuple[str, bool]:
        """Cut ``text`` so that it tokenizes (with BOS/EOS) to at most ``n_ctx`` tokens."""

        def count(s: str) -> int:
            return len(llm.tokenize(s.encode("utf-8"), add_bos=True, special=False)) + 1

        if count(text) <= self.n_ctx:
            return text, False
        lo, hi = 0, len(text)  # the longest prefix that fits: a bisection over characters
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid]) <= self.n_ctx:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo], True

    def embed(self, texts: list[str], prefix: str) -> tuple[np.ndarray, int]:
        """Embed ``texts`` (each with ``prefix``), L2-normalised.

        Returns
        -------
        (vectors, n_cut)
            ``float32[len(texts), dim]``, and how many inputs were cut to ``n_ctx`` tokens.

        Raises
        ------
        situate.resources.models.registry.ModelFileError
            The model file (or an ONNX embedder's tokenizer) is missing, corrupt or not loadable.
        """
        if self.server_url:
            return self._server_embed(texts, prefix)
        if self.is_onnx():
            from situate.resources.models import encoder

            CALLS["embed_texts"] += len(texts)
            return encoder.encode(
                self.model_path,
                self.tokenizer_path,
                [prefix + t for t in texts],
                self.pooling or "mean",
                self.n_ctx,
                self.n_threads or default_threads(),
                batch_size=self.batch_size,
            )
        llm = self.load()
        with model_lock(llm):  # one caller at a time in a llama.cpp context (threads of a service, MCP)
            return self._embed(llm, texts, prefix)

    def _server_embed(self, texts: list[str], prefix: str) -> tuple[np.ndarray, int]:
        """:meth:`embed` through the server: each text cut to ``n_ctx`` tokens with the local
        vocabulary, sent 16 at a time, L2-normalised here."""
        from situate.resources.models.server import embeddings

        client = self.server()
        inputs, n_cut = self._fitted(self._vocab(), texts, prefix)
        vecs = [v for i in range(0, len(inputs), 16) for v in embeddings(client, inputs[i : i + 16])]
        return _normalised(vecs, len(inputs)), n_cut

    def _fitted(self, llm, texts: list[str], prefix: str) -> tuple[list[str], int]:
        """Each of ``texts`` with ``prefix``, cut to ``n_ctx`` tokens of ``llm``'s vocabulary
        (:meth:`_fit`), and how many were cut."""
        CALLS["embed_texts"] += len(texts)
        fitted = [self._fit(llm, prefix + t) for t in texts]
        return [f for f, _ in fitted], sum(cut for _, cut in fitted)

    def _embed(self, llm, texts: list[str], prefix: str) -> tuple[np.ndarray, int]:
        """:meth:`embed` on the loaded ``llm``, its lock held."""
        fit_threads(llm, self.n_threads)
        inputs, n_cut = self._fitted(llm, texts, prefix)
        vecs = [
            v
            for i in range(0, len(inputs), self.batch_size)
            for v in llm.embed(inputs[i : i + self.batch_size], normalize=False, truncate=False)
        ]
        return _normalised(vecs, len(inputs)), n_cut

    def embed_documents(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """``float32[n, dim]`` for contextualised texts (document prefix) and the count cut."""
        return self.embed(texts, self.document_prefix)

    def code_query_vector(self, query_vector: np.ndarray) -> np.ndarray | None:
        """The query's vector for comparing with code chunks: ``query_vector`` (float32[width],
        from the query prefix) through :attr:`code_adapter`; None without one.

        Raises
        ------
        ValueError
            The adapter file is not a finite float32 ``(width, width)`` matrix
            (:func:`situate.resources.models.code_adapter.load_adapter`).
        FileNotFoundError
            The adapter file is not there.
        """
        if not self.code_adapter:
            return None
        from situate.resources.models.code_adapter import load_adapter

        return load_adapter(self.code_adapter, int(np.asarray(query_vector).shape[-1])).apply(query_vector)

    def code_adapter_id(self) -> str:
        """``sha256:<hex>`` of :attr:`code_adapter`'s file, ``none``, ``missing: <path>`` or
        ``unreadable: <path> (<error>)``: which code map a search uses (recorded in the embeddings
        asset's metadata)."""
        if not self.code_adapter:
            return "none"
        from situate.resources.store.cache import file_sha256

        try:
            return f"sha256:{file_sha256(self.code_adapter)}"
        except FileNotFoundError:
            return f"missing: {self.code_adapter}"
        except OSError as e:  # a folder, or not readable
            return f"unreadable: {self.code_adapter} ({type(e).__name__})"

    def embed_query(self, query: str) -> np.ndarray:
        """``float32[dim]`` for a query (query prefix)."""
        return self.embed([query], self.query_prefix)[0][0]
