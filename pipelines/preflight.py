"""Start-up checks: each fault a user can make before any work starts gets one line, not a traceback.

=====================================  ==========================================================
fault                                  answer (:class:`StartupError`, or a warning for the last)
=====================================  ==========================================================
docs folder (or corpus file) missing   ``docs folder … does not exist``
data folder not creatable / writable   ``data folder … is not writable: <OS reason>``
a non-empty folder not situate's       ``data folder … is a non-empty folder that is not a situate data folder``
object store unreachable               ``data folder s3://…: cannot reach the object store at …``
object store refuses the credentials   ``data folder s3://…: the object store at … refused the credentials …``
object store bucket missing            ``data folder s3://…: the bucket of s3://… does not exist …``
another docs folder, same data folder  ``data folder … holds the documents of …: add --replace``
model file missing                     ``model file … not found: run `situate models install```
default model corrupt (size, sha256)   ``model file … is corrupt: sha256 … is not the pinned …``
another file that is not a GGUF        ``model file … is not a GGUF file``
a numeric setting out of its bounds    ``SITUATE_N_CTX=0 is below its minimum, 1 (allowed 1 to 131072)``
                                       (:func:`situate.pipelines.settings.check_environment`, on every path)
LLM context too small for a preamble   a warning, once: every chunk is indexed without a blurb
=====================================  ==========================================================

Examples
--------
>>> import tempfile, pathlib
>>> try:
...     check_docs(pathlib.Path(tempfile.mkdtemp()) / "nowhere")
... except StartupError as e:
...     print(str(e).split("/")[-1])
nowhere does not exist
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from situate.resources.errors import StartupError  # noqa: F401  (importable from here as before)


def check_docs(path: str | os.PathLike) -> Path:
    """The docs folder or corpus file, absolute.

    Raises
    ------
    StartupError
        It does not exist.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise StartupError(f"docs folder {p.resolve()} does not exist")
    return p.resolve()


def check_data_folder(home: str | os.PathLike) -> Path | str:
    """Create the data folder if needed and prove it is writable (a file is created and removed).

    The folder gets the marker file :data:`situate.resources.store.store.DATA_MARKER`.  An object store URI
    (``s3://bucket/prefix``: :mod:`situate.resources.store.objects`) is probed the same way, with one try per
    request, so a wrong endpoint, refused credentials or a missing bucket are named within
    seconds, before any work.

    Returns
    -------
    Path or str
        The absolute local folder, or the URI.

    Raises
    ------
    StartupError
        It cannot be created or written (permissions, a file in the way, a read-only disk, no space,
        an unreachable object store, refused credentials, a missing bucket), or it is a non-empty
        folder that is not a situate data folder (a folder of the user's: its files must not be
        touched).
    """
    from situate.resources.store.objects import ObjectFolder, StoreUnavailable, is_uri, normalize_home
    from situate.resources.store.store import DATA_MARKER

    if is_uri(home):
        uri = normalize_home(home)
        try:
            folder = ObjectFolder(uri, retries=0)
            folder.check()
            if folder.get(DATA_MARKER) is None:
                names = folder.list("")
                earlier = any(n == "docs-root" or n.startswith("lancedb/") for n in names)
                if any(not n.startswith(".write-probe-") for n in names) and not earlier:
                    raise StartupError(
                        f"data folder {uri} holds objects and is not a situate data folder: "
                        "give a new or empty prefix (--home or SITUATE_HOME); situate never "
                        "writes into or deletes from a prefix of yours"
                    )
                folder.create(DATA_MARKER, b'{"situate": "data folder"}\n')
        except StoreUnavailable as e:
            raise StartupError(f"data folder {uri}: {e}") from None
        except ValueError as e:
            raise StartupError(f"data folder {uri}: {e}") from None
        return uri
    p = Path(home).expanduser().resolve()

    if p.is_dir() and not (p / DATA_MARKER).exists():
        # a data folder of an earlier situate (no marker yet) has its docs-root file or its table
        earlier = (p / "docs-root").is_file() or (p / "lancedb").is_dir()
        if any(p.iterdir()) and not earlier:
            raise StartupError(
                f"data folder {p} is a non-empty folder that is not a situate data folder: "
                "give a new or empty folder (--home or SITUATE_HOME); situate never writes into "
                "or deletes from a folder of yours"
            )
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=p, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
        if not (p / DATA_MARKER).exists():
            (p / DATA_MARKER).write_text('{"situate": "data folder"}\n')
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise StartupError(
            f"data folder {p} is not writable: {reason} (set --home or SITUATE_HOME to a folder you can write)"
        ) from None
    return p


#: The data folder's record of the collection it belongs to (``{"collection": "<name>"}``), written
#: by the collection's first sensor or schedule tick (:func:`claim_data_folder`).
OWNER_FILE = "collection"
#: Bytes of :data:`OWNER_FILE` read at most (the record is a few dozen).
MAX_OWNER_BYTES = 4096


def _owner_record(home: Path | str, mine: bytes) -> bytes | None:
    """Create :data:`OWNER_FILE` with ``mine`` unless it exists (a conditional create, so two
    collections starting at once cannot both win); its bytes (at most :data:`MAX_OWNER_BYTES`,
    None when it is larger)."""
    from situate.resources.store.objects import ObjectFolder, ObjectTooLarge, is_uri

    if is_uri(home):
        folder = ObjectFolder(str(home))
        folder.create(OWNER_FILE, mine)
        try:
            return folder.get_bounded(OWNER_FILE, MAX_OWNER_BYTES) or b""
        except ObjectTooLarge:
            return None
    path = Path(home) / OWNER_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(mine)
    with open(path, "rb") as f:
        raw = f.read(MAX_OWNER_BYTES + 1)
    return raw if len(raw) <= MAX_OWNER_BYTES else None


def claim_data_folder(home: str | os.PathLike, collection: str) -> Path | str:
    """The data folder of collection ``collection`` (a Dagster component's), checked as
    ``situate ingest`` checks it (:func:`check_data_folder`: created if needed, marked, a non-empty
    folder of the user's refused) and, for a named collection, recorded as its own
    (:data:`OWNER_FILE`) or refused when another collection's.

    Returns
    -------
    Path or str
        The absolute local folder, or the URI.

    Raises
    ------
    StartupError
        As :func:`check_data_folder`; or the data folder belongs to another collection (two
        collections given one ``home``), or its record is unreadable.
    """
    import json

    from situate.resources.store.objects import StoreUnavailable

    where = check_data_folder(home)
    if not collection:
        return where
    try:
        raw = _owner_record(where, json.dumps({"collection": collection}).encode() + b"\n")
    except (OSError, StoreUnavailable) as e:
        raise StartupError(f"data folder {where}: its {OWNER_FILE} record cannot be written or read: {e}") from None
    try:
        owner = json.loads(raw) if raw is not None else None
    except ValueError:
        owner = None
    if not isinstance(owner, dict) or not isinstance(owner.get("collection"), str):
        raise StartupError(
            f"data folder {where} holds a {OWNER_FILE} record that is not situate's: give collection "
            f"{collection!r} a data folder of its own (home)"
        )
    if owner["collection"] != collection:
        raise StartupError(
            f"data folder {where} belongs to collection {owner['collection'][:60]!r}: give collection "
            f"{collection!r} a data folder of its own (home); two collections never share one"
        )
    return where


def check_same_docs(home: Path | str, docs: Path, replace: bool) -> None:
    """Refuse to ingest ``docs`` into a data folder that holds another docs folder's documents
    (the sync would delete every row of those), unless ``replace``.

    Raises
    ------
    StartupError
        The data folder's recorded docs folder is another one and ``replace`` is false.
    """
    from situate.resources.store.store import Store

    if replace:
        return
    recorded = Store(home=str(home)).read_file("docs-root")
    before = (recorded or b"").decode("utf-8", "replace").strip()
    if before and before != str(docs):
        raise StartupError(
            f"data folder {home} holds the documents of {before}: ingesting {docs} would "
            "replace them (add --replace to do so, or give another --home)"
        )


def check_models(llm_path: str | None, embed_path: str | None, embed_tokenizer: str = "") -> None:
    """The LLM (when given: not with Anthropic's API) and the embedder (with an ONNX embedder's
    tokenizer, when given) exist and are sound (:func:`situate.resources.models.registry.check_model_file`).

    Raises
    ------
    StartupError
        The first model file that is missing, corrupt or not a GGUF.
    """
    from situate.resources.models.registry import ModelFileError, check_model_file

    try:
        if llm_path:
            check_model_file(llm_path, "SITUATE_LLM_MODEL")
        if embed_path:
            check_model_file(embed_path, "SITUATE_EMBED_MODEL")
        if embed_tokenizer:
            check_model_file(embed_tokenizer, "SITUATE_EMBED_MODEL")
    except ModelFileError as e:
        raise StartupError(str(e)) from None


def context_warning(llm) -> str | None:
    """One line when ``llm.n_ctx`` leaves no room for any document preamble (so every chunk will be
    indexed alone, without a blurb), else None.  Loads the LLM's vocabulary only."""
    from situate.contextual.fitting import fit_document, generation_bound, prompt_builder

    builder = prompt_builder(llm)
    plan = fit_document("x", [(0, 1)], builder, llm.n_ctx, generation_bound(llm, builder))
    if plan.windows:
        return None
    return (
        f"SITUATE_N_CTX {llm.n_ctx} is too small for any document preamble ({plan.reason}): every "
        "chunk is indexed with its structural context only, no LLM blurb"
    )


#: GGUF architectures that are encoders (embedding models), never chat models (llama.cpp's names).
ENCODER_ARCHITECTURES = (
    "bert",
    "nomic-bert",
    "nomic-bert-moe",
    "jina-bert-v2",
    "jina-bert-v3",
    "roberta",
    "modern-bert",
    "neo-bert",
    "t5encoder",
)


def check_chat_model(llm) -> None:
    """The blurb model is a chat model: not an embedding GGUF (an encoder architecture, or one
    whose metadata names a pooling type), which llama.cpp loads and then fails every document with
    ``AssertionError: Memory is not initialized``.  Reads the vocabulary and metadata only.

    Raises
    ------
    StartupError
        One line naming the file and what it is.
    """
    meta = llm.load(vocab_only=True).metadata
    arch = meta.get("general.architecture", "")
    if arch in ENCODER_ARCHITECTURES or f"{arch}.pooling_type" in meta:
        raise StartupError(
            f"SITUATE_LLM_MODEL={llm.model_path}: an embedding model ({arch}), not a chat "
            "model: the blurbs need an instruct model (situate models list), or "
            "SITUATE_CONTEXT=structure for none"
        )


def check_server(llm) -> None:
    """A model server (``SITUATE_LLM_URL``) that answers, serves the model, tokenizes as the local
    GGUF and serves at least ``SITUATE_N_CTX`` tokens where it says (:meth:`BlurbLLM.server`).

    Raises
    ------
    StartupError
        Each :class:`situate.resources.models.server.ServerError`, with its message (it names the setting);
        ``SITUATE_BATCH`` over 1 with a server.
    """
    from situate.resources.models.server import ServerError, check_url

    if llm.batch > 1:
        raise StartupError(
            "SITUATE_BATCH applies to the in-process model; a model server batches requests itself: "
            "leave SITUATE_BATCH at 1 with SITUATE_LLM_URL"
        )
    if llm.api == "anthropic":
        check_chat_api_prompt(llm)
    try:
        if llm.api == "anthropic":
            llm.api_client()
        else:
            check_url(llm.server_url)
            llm.server()
    except ServerError as e:
        raise StartupError(str(e)) from None


def check_chat_api_prompt(llm) -> None:
    """The prompt works on a chat API (Anthropic's): no GBNF grammar, no one-generation prompt
    (which continues the model's own tokens line by line).

    Raises
    ------
    StartupError
        Naming ``SITUATE_PROMPT`` and the prompts that work.
    """
    from situate.contextual.prompts import PROMPTS

    if "chunk" not in (llm.context, llm.code_context) or llm.prompt not in PROMPTS:
        return
    template = PROMPTS[llm.prompt]
    if template.grammar or template.one_generation:
        usable = ", ".join(n for n, t in PROMPTS.items() if not t.grammar and not t.one_generation)
        what = "a GBNF grammar" if template.grammar else "one generation a window, continued token by token"
        raise StartupError(
            f"SITUATE_PROMPT={llm.prompt} needs {what}, which only a llama.cpp model gives; with "
            f"SITUATE_LLM_API=anthropic choose one of {usable}"
        )


def preflight(docs_path: str | None, res: dict, home: str | os.PathLike) -> list[str]:
    """Every start-up check for ``situate ingest``; returns the warnings (each said once).

    Parameters
    ----------
    docs_path : str or None
        The folder or corpus file to ingest (None: not checked).
    res : dict
        :func:`situate.pipelines.settings.resources_from_env` (``llm`` and ``embedder`` are checked).
    home : path
        The data folder.

    Raises
    ------
    StartupError
        As :func:`check_docs`, :func:`check_data_folder`, :func:`check_models`,
        :func:`check_server`; an unknown ``SITUATE_CONTEXT``.
    """
    if docs_path is not None:
        check_docs(docs_path)
    check_data_folder(home)
    return preflight_models(res)


def preflight_models(res: dict) -> list[str]:
    """The start-up checks of the settings and models (:func:`preflight` without the folders; also
    ``situate ingest --estimate``'s, which writes nothing); returns the warnings.

    Raises
    ------
    StartupError
        As :func:`check_models`, :func:`check_server`, :func:`check_chat_api_prompt`; an unknown
        ``SITUATE_CONTEXT``; ``SITUATE_LLM_BATCH=1`` without Anthropic's API.
    """
    from situate.contextual.document_blurbs import CONTEXT_MODES
    from situate.contextual.policy import uses_llm

    for name, mode in (("SITUATE_CONTEXT", res["llm"].context), ("SITUATE_CODE_CONTEXT", res["llm"].code_context)):
        if mode not in CONTEXT_MODES:
            raise StartupError(f"{name}={mode!r}: choose one of {', '.join(CONTEXT_MODES)}")
    # Anthropic's API reads no local model file: only the embedder's is checked then
    check_models(
        None if res["llm"].api == "anthropic" else res["llm"].model_path,
        res["embedder"].model_path,
        res["embedder"].tokenizer_path,
    )
    if res["embedder"].server_url:
        from situate.resources.models.server import ServerError, check_url

        try:
            check_url(res["embedder"].server_url, "SITUATE_EMBED")
            res["embedder"].server()
        except ServerError as e:
            raise StartupError(str(e)) from None
    if res["llm"].api_batch and res["llm"].api != "anthropic":
        raise StartupError(
            "SITUATE_LLM_BATCH=1 sends the blurbs through Anthropic's Message Batches API: set "
            "SITUATE_LLM_API=anthropic, or leave SITUATE_LLM_BATCH unset"
        )
    if not uses_llm(res["llm"]):  # no LLM prompt to fit
        return []
    if res["llm"].api != "anthropic":
        check_chat_model(res["llm"])
    warnings = []
    if res["llm"].remote:
        check_server(res["llm"])
        if res["llm"].api == "anthropic" and res["llm"].api_client().info.warning:
            warnings.append(res["llm"].api_client().info.warning)
    warning = context_warning(res["llm"])
    return warnings + ([warning] if warning else [])
