"""situate as a Dagster component: one collection of documents per ``defs.yaml``, in any Dagster
project that installs situate.

.. code-block:: bash

    dg list components                       # shows situate.pipelines.component.SituateCollection
    dg scaffold defs situate.pipelines.component.SituateCollection product_docs \\
        --json-params '{"name": "product", "docs": "/srv/docs/product", "home": "/srv/situate/product"}'
    dg check defs && dg list defs            # product/raw_documents … product/bm25_index, product_ingest …

The ``defs.yaml`` it writes:

.. code-block:: yaml

    type: situate.pipelines.component.SituateCollection
    attributes:
      name: product
      docs: /srv/docs/product
      home: /srv/situate/product

Each instance is a :class:`situate.assets.collection.Collection`: its own asset keys
(``product/blurbs``), dynamic partitions (``product_documents``), resources (``product_store``…),
jobs (``product_ingest``, ``product_bm25``), sensor and schedule, over its own docs folder and data
folder, so two collections never touch each other's table, leases or blurb cache.  An attribute
left out takes the environment's setting (``SITUATE_LLM_MODEL``…, :mod:`situate.resources.settings`),
so secrets stay in environment variables (``SITUATE_LLM_API_KEY``, ``ANTHROPIC_API_KEY``), read at a
run's start through ``dg.EnvVar`` and never written to a ``defs.yaml``.  Two collections with the same
model load it once per process (:mod:`situate.resources.models.llm` caches loaded models).
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Literal

import dagster as dg
from dagster.components import Scaffolder, ScaffoldRequest

from situate.assets.collection import NAME_PATTERN, Collection
from situate.pipelines.collections import collection_definitions
from situate.pipelines.settings import check_environment
from situate.resources.errors import SettingError
from situate.resources.models import registry as models
from situate.resources.settings import Settings
from situate.resources.store.objects import is_uri, normalize_home


class CollectionParams(dg.Model):
    """What ``dg scaffold defs … --json-params`` takes: the collection's name, docs folder and
    data folder (a path, or an object-store URI for the data folder)."""

    name: str
    docs: str
    home: str


class CollectionScaffolder(Scaffolder[CollectionParams]):
    """Writes a ``defs.yaml`` for one collection (``dg scaffold defs``)."""

    @classmethod
    def get_scaffold_params(cls) -> type[CollectionParams]:
        return CollectionParams

    def scaffold(self, request: ScaffoldRequest[CollectionParams]) -> None:
        p = request.params
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(
            textwrap.dedent(
                f"""\
                type: {request.type_name}
                attributes:
                  name: {p.name}
                  docs: {p.docs}
                  home: {p.home}
                """
            )
        )


#: The attributes that are settings (:class:`situate.resources.settings.Settings` fields of the same
#: name): given, they replace the environment's value for this collection.
SETTINGS_GIVEN = (
    "llm_model",
    "embed_model",
    "llm_url",
    "llm_api",
    "llm_served_model",
    "embed_url",
    "embed_served_model",
    "context",
    "code_context",
    "prompt",
    "chunk_tokens",
    "code_chunk_tokens",
    "overlap_tokens",
    "generated",
)
#: The attributes that are lists of globs: given, they replace the setting of the same name
#: (``SITUATE_INCLUDE``, ``SITUATE_EXCLUDE``: comma-separated) for this collection.
GLOBS_GIVEN = ("include", "exclude")


@dg.scaffold_with(CollectionScaffolder)
class SituateCollection(dg.Component, dg.Model, dg.Resolvable):
    """A collection of documents made searchable with Contextual Retrieval: its documents →
    chunks → fitted preambles → blurbs → embeddings → BM25 index, partitioned per document, kept in
    step with its docs folder by a sensor and a schedule.

    Attributes
    ----------
    name : str
        The collection's name: its asset key prefix, partitions, resource keys and job names
        (lower-case letters, digits, ``_``).
    docs : str
        Its docs folder (a path; relative to the project root).
    home : str
        Its data folder: a path (relative to the project root) or ``s3://``, ``gs://``, ``az://``.
    llm_model, embed_model : str, optional
        The blurb model and the embedder, by name (``situate models list``) or path; default the
        environment's (``SITUATE_LLM_MODEL``, ``SITUATE_EMBED_MODEL``) or situate's.
    llm_url, llm_api, llm_served_model, embed_url, embed_served_model : str, optional
        The backend: an OpenAI-compatible model server for the blurbs (``llm_url``) or Anthropic's
        API (``llm_api: anthropic``), an embeddings server (``embed_url``), and the model names they
        serve (``SITUATE_LLM_URL``…); their keys stay environment variables.
    context : {"chunk", "document", "extract", "structure"}, optional
        What writes the context of each prose document's chunks (``SITUATE_CONTEXT``).
    code_context : {"chunk", "document", "extract", "structure"}, optional
        The same for source code (``SITUATE_CODE_CONTEXT``; default ``structure``: no LLM).
    prompt : str, optional
        The blurb prompt (``SITUATE_PROMPT``).
    chunk_tokens, code_chunk_tokens, overlap_tokens : int, optional
        Largest chunk of prose, of source code, and the overlap, cl100k_base tokens
        (``SITUATE_CHUNK_TOKENS``, ``SITUATE_CODE_CHUNK_TOKENS``, ``SITUATE_OVERLAP_TOKENS``).
    include, exclude : list of str, optional
        gitignore-style globs of files read although git ignores them or they are hidden, and of
        files not read (``SITUATE_INCLUDE``, ``SITUATE_EXCLUDE``; docs/using.md, "What a folder's
        documents are").  A glob may not hold a comma (the setting's separator).
    generated : {"index", "skip"}, optional
        Files ``.gitattributes`` marks ``linguist-generated`` or ``linguist-vendored``
        (``SITUATE_GENERATED``).
    cron : str or None
        When the re-ingest schedule runs (default 02:00 nightly); ``null`` for no schedule.
    fresh_within_h : float or None
        With a schedule, hours within which the collection's ``bm25_index`` must have been rebuilt
        (a freshness policy the UI shows; default 30: a nightly run and 6 hours of slack).
    group : str, optional
        The assets' group (default the name).
    owners : list of str
        Dagster owners of every asset (``team:search``, an e-mail address).
    tags : dict
        Dagster tags of every asset.
    pool : str
        The concurrency pool of the blurb steps (default ``llm``, shared with other collections).
    """

    name: str
    docs: str
    home: str
    llm_model: str | None = None
    embed_model: str | None = None
    llm_url: str | None = None
    llm_api: Literal["openai", "anthropic"] | None = None
    llm_served_model: str | None = None
    embed_url: str | None = None
    embed_served_model: str | None = None
    context: Literal["chunk", "document", "extract", "structure"] | None = None
    code_context: Literal["chunk", "document", "extract", "structure"] | None = None
    prompt: str | None = None
    chunk_tokens: int | None = None
    code_chunk_tokens: int | None = None
    overlap_tokens: int | None = None
    include: list[str] | None = None
    exclude: list[str] | None = None
    generated: Literal["index", "skip"] | None = None
    cron: str | None = "0 2 * * *"
    fresh_within_h: float | None = 30.0
    group: str | None = None
    owners: list[str] = []
    tags: dict[str, str] = {}
    pool: str = "llm"

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The collection's definitions (:meth:`definitions`, with the environment's settings and
        paths relative to the project root).

        Raises
        ------
        situate.resources.errors.SettingError
            An attribute outside its bound (``chunk_tokens: 0``), or a name that is not a
            collection name; the message names the ``defs.yaml``.
        """
        models.use_offline_tiktoken()
        if not NAME_PATTERN.fullmatch(self.name):
            raise SettingError(f"{context.path}: name {self.name!r}: use lower-case letters, digits and _")
        return self.definitions(check_environment(), Path(context.project_root), label=str(context.path))

    def definitions(
        self, settings: Settings, root: Path | None = None, plain: bool = False, label: str = "situate"
    ) -> dg.Definitions:
        """The collection's definitions (:func:`situate.pipelines.collections.collection_definitions`)
        with ``settings`` where an attribute gives none.  situate's own code location is the instance
        with the empty name (the unprefixed names) and empty ``docs`` and ``home`` (the settings'
        folders): :func:`situate.pipelines.definitions.build_definitions`.

        Parameters
        ----------
        settings : Settings
            The environment's settings (:func:`situate.pipelines.settings.check_environment`).
        root : Path, optional
            What relative ``docs`` and ``home`` are under (default the working folder).
        plain : bool
            Resources hold values, not the ``dg.EnvVar`` of each variable set (the command line).
        label : str
            What an error message names (the ``defs.yaml``).

        Raises
        ------
        situate.resources.errors.SettingError
            An attribute outside its bound; a data folder another collection of this process (code
            location) was given.
        """
        given = {f: getattr(self, f) for f in SETTINGS_GIVEN if getattr(self, f) is not None}
        for f in GLOBS_GIVEN:
            globs = getattr(self, f)
            if globs is not None and any("," in g for g in globs):
                raise SettingError(f"{label}: {f}: a glob may not hold a comma: {globs!r}")
            given |= {f: ",".join(globs)} if globs is not None else {}
        try:
            settings = dataclasses.replace(settings, **given)
        except SettingError as e:
            raise SettingError(f"{label}: {e}") from None
        c = Collection(
            self.name,
            self.group or "",
            tuple(self.owners),
            tuple(sorted(self.tags.items())),
            self.pool,
            fresh_within_h=self.fresh_within_h if self.cron else None,
        )
        root = root or Path.cwd()
        docs = self._path(root, self.docs) if self.docs else None
        home = self._path(root, self.home) if self.home else None
        if self.name and home:
            home = _claim_home(self.name, home, label)
        return collection_definitions(c, settings, docs, home, plain, cron=self.cron or None)

    @staticmethod
    def _path(root: Path, where: str) -> str:
        """``where`` as it is when an object-store URI or absolute, else under ``root``."""
        if is_uri(where) or Path(where).expanduser().is_absolute():
            return where
        return str((root / where).resolve())


#: The data folder of each named collection built in this process (a code location): normalised
#: ``home`` → collection name.  A second collection given the same folder is refused at load.
_HOMES: dict[str, str] = {}


def _claim_home(name: str, home: str, label: str) -> str:
    """``home`` normalised (:func:`situate.resources.store.objects.normalize_home`), recorded as
    collection ``name``'s in this process.

    Raises
    ------
    situate.resources.errors.SettingError
        Another collection of this process has that data folder, or a URI the store layers misread.
    """
    try:
        key = normalize_home(home)
    except ValueError as e:
        raise SettingError(f"{label}: home: {e}") from None
    other = _HOMES.setdefault(key, name)
    if other != name:
        raise SettingError(
            f"{label}: collection {name!r} has the data folder (home) of collection {other!r}, {key}: "
            "each collection needs its own, or their rows and stage files replace each other's"
        )
    return key
