"""Every error situate raises on purpose, in one module, with one base: :class:`SituateError`.

Each class also keeps the built-in base it has always had (``ValueError`` for bad input,
``OSError`` for files and stores, ``RuntimeError`` for a fault found while working), so code
written against those keeps working, and an application catches all of situate's own errors in one
clause:

>>> from situate import SituateError
>>> try:
...     raise DocumentError("notes/a.md", "empty (0 bytes)")
... except SituateError as e:
...     print(e, isinstance(e, ValueError))
notes/a.md: empty (0 bytes) True

The classes are importable from here and, as before, from the module that raises each one.
"""

from __future__ import annotations


class SituateError(Exception):
    """Base of every error situate raises on purpose; ``str(err)`` is one line for a person,
    naming what failed (a file, a setting, a server) and why."""


# --- input: documents, keys, settings, files situate reads ------------------------------------


class DocumentError(SituateError, ValueError):
    """A source document cannot be read; ``str(err)`` names the source and the reason.

    Attributes
    ----------
    source : str
        The document's source (path relative to the docs folder, or ``file#doc_id``).
    reason : str
        Why, for a person: ``"empty (0 bytes)"``, ``"binary content (NUL byte at offset 12)"``...
    """

    def __init__(self, source: str, reason: str):
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class ListingError(SituateError, RuntimeError):
    """``git`` could not list a docs folder it should have (it failed or timed out): the message
    names the folder and git's own words (``situate.resources.documents.listing``)."""


class PartitionKeyError(SituateError, ValueError):
    """A string is not a key produced by ``situate.resources.documents.keys.encode_key`` of a relative
    path inside a folder."""


class SettingError(SituateError, ValueError):
    """A setting that is not a number or is outside its bounds
    (``situate.resources.models.llm.SETTING_BOUNDS``); ``str()`` is one line naming the variable, the
    value and the bound."""


class DataFolderURIError(SituateError, ValueError):
    """A data-folder URI the object store layers would read differently
    (``situate.resources.store.objects.normalize_home``)."""


class BlurbFileError(SituateError, ValueError):
    """A blurb file that cannot be read: the message names the file, the line and the reason."""


class TemplateRefused(SituateError, ValueError):
    """A model file's chat template that situate will not use (refused by the sandbox, or not
    rendering a user message)."""


class QueryError(SituateError, ValueError):
    """A search the CLI answers with one line and exit status 2 (empty query, bad ``k``)."""


# --- files and stores ---------------------------------------------------------------------------


class LinkRefused(SituateError, OSError):
    """A path component under the folder is a symbolic link, or the file is not a regular file
    (a FIFO, a device, a folder); ``str(err)`` says which, for a person."""


class TooLarge(SituateError, OSError):
    """The file is larger than the limit given to ``situate.resources.documents.files.read_under``.

    Attributes
    ----------
    size, limit : int
        The file's size and the limit, in bytes.
    """

    def __init__(self, size: int, limit: int):
        super().__init__(f"too large ({size:,} bytes > {limit:,})")
        self.size, self.limit = size, limit


class StoreUnavailable(SituateError, OSError):
    """The object store refused or could not be reached; ``str(err)`` is one line for a person
    (what failed and the likely reason: endpoint, credentials, bucket)."""


# --- models and model servers -------------------------------------------------------------------


class ModelInstallError(SituateError, RuntimeError):
    """A model file could not be downloaded, extracted or verified."""


class ModelFileError(SituateError, RuntimeError):
    """A model file to load is missing, corrupt (sha256) or not a GGUF; the message is one line
    naming the file, the reason and the fix."""


class ServerError(SituateError, RuntimeError):
    """A model server that cannot be used: the message names the server, the reason and the setting."""


class ContextExceeded(ServerError):
    """A prompt longer than the server's context: cut by the server, or refused."""


class BatchMissing(ServerError):
    """A request the Message Batch did not answer; its document is left to the next run."""


# --- runs -----------------------------------------------------------------------------------------


class UpstreamError(SituateError, RuntimeError):
    """An earlier stage failed for this document; the message carries its reason."""


class LeaseLost(SituateError, RuntimeError):
    """This holder's lease was taken over, or could not be renewed for half the stale time: its
    block must stop before it writes anything more."""


class StartupError(SituateError, RuntimeError):
    """A fault found before any work started; ``str()`` is the whole answer, one line."""


class AnswerRefused(ServerError):
    """What situate's HTTP client for Anthropic's API refused before the SDK saw it: an answer over
    ``MAX_RESPONSE_BYTES``, or a request to an origin other than ``SITUATE_LLM_URL``'s
    (``situate.resources.models.anthropic_api``)."""


class BatchGone(SituateError, RuntimeError):
    """A Message Batch that cannot be collected (the message says why): it is forgotten."""


class ListingPageTooLarge(SituateError, OSError):
    """An object store listing page over ``MAX_LIST_PAGE_BYTES`` (raised while the page is read, before it is held)."""


class ObjectTooLarge(SituateError, OSError):
    """An object's GET carried more than the bytes asked for (``ObjectFolder.get_bounded``)."""


class ObjectChanged(SituateError, OSError):
    """An object is no longer the version it was asked for (``ObjectFolder.get_bounded``)."""
