"""A collection: one docs folder's assets, partitions, resources, jobs and automation, named so
that several live side by side in one code location (product docs, a code repository, tickets).

The default collection (``name=""``) has the names situate has always had (assets ``chunks``,
``blurbs``…, partitions ``documents``, resources ``store``, ``llm``…, jobs ``ingest`` and ``bm25``),
so ``dagster asset materialize -m situate.pipelines.definitions --select blurbs`` keeps working.
A named collection prefixes each of them: assets ``docs/chunks``, partitions ``docs_documents``,
resources ``docs_store``, jobs ``docs_ingest``.

Examples
--------
>>> from situate.assets.collection import Collection
>>> c = Collection("product")
>>> c.key("blurbs").to_user_string(), c.partitions_name, c.resource_key("store"), c.job_name("ingest")
('product/blurbs', 'product_documents', 'product_store', 'product_ingest')
>>> Collection("").key("blurbs").to_user_string()
'blurbs'
"""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from types import SimpleNamespace

import dagster as dg

from situate.assets.partitions import LLM_POOL, PARTITIONS, documents

#: A collection's name: a Dagster name that is also a folder and key segment (lower case, digits,
#: underscores; at most 48 characters, so ``<name>_documents`` stays short in the UI).
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,47}")

#: The resources an asset or sensor of a collection may ask for (see :meth:`Collection.resource_key`).
ROLES = ("docs", "store", "llm", "embedder", "chunking")


@dataclasses.dataclass(frozen=True)
class Collection:
    """The names and labels of one collection's definitions.

    Attributes
    ----------
    name : str
        ``""`` for the default collection (unprefixed names), else :data:`NAME_PATTERN`.
    group : str
        The assets' group in the UI (default ``ingest``; a named collection's default is its name).
    owners : tuple of str
        Dagster owners of every asset (``team:search``, an e-mail address).
    tags : tuple of (str, str)
        Dagster tags of every asset.
    pool : str
        The concurrency pool of the steps that hold the blurb LLM (shared by collections by default,
        so one machine's model runs one at a time).
    code_versions : tuple of (str, str)
        Asset name → code version (what the prompt, model and chunking make it), so the UI marks a
        partition stale when they change; empty gives none.
    fresh_within_h : float or None
        Hours within which the collection's output (``bm25_index``) must have been rebuilt, as a
        Dagster freshness policy (a collection with a re-ingest schedule sets it: the schedule's
        period and some slack); None for none.

    Raises
    ------
    ValueError
        ``name`` is not empty and does not match :data:`NAME_PATTERN`.
    """

    name: str = ""
    group: str = ""
    owners: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    pool: str = LLM_POOL
    code_versions: tuple[tuple[str, str], ...] = ()
    fresh_within_h: float | None = None

    def __post_init__(self) -> None:
        if self.name and not NAME_PATTERN.fullmatch(self.name):
            raise ValueError(
                f"collection name {self.name!r}: use lower-case letters, digits and underscores, "
                f"starting with a letter, at most 48 characters"
            )

    @property
    def key_prefix(self) -> list[str]:
        """The asset key prefix: ``[name]``, or none for the default collection."""
        return [self.name] if self.name else []

    def key(self, asset: str) -> dg.AssetKey:
        """The key of this collection's asset ``asset`` (``product/blurbs``)."""
        return dg.AssetKey([*self.key_prefix, asset])

    @property
    def group_name(self) -> str:
        """The assets' group: :attr:`group`, else the name, else ``ingest``."""
        return self.group or self.name or "ingest"

    @property
    def partitions_name(self) -> str:
        """Its dynamic partitions: one per document (``documents``, ``product_documents``)."""
        return f"{self.name}_{PARTITIONS}" if self.name else PARTITIONS

    @property
    def partitions(self) -> dg.DynamicPartitionsDefinition:
        """The partitions definition of :attr:`partitions_name`."""
        return dg.DynamicPartitionsDefinition(name=self.partitions_name) if self.name else documents

    def resource_key(self, role: str) -> str:
        """The resource key of ``role`` (one of :data:`ROLES`): ``store`` or ``product_store``."""
        if role not in ROLES:
            raise KeyError(f"{role!r} is not a collection resource ({', '.join(ROLES)})")
        return f"{self.name}_{role}" if self.name else role

    def resource_keys(self, *roles: str) -> set[str]:
        """The resource keys of ``roles``, for ``required_resource_keys``."""
        return {self.resource_key(r) for r in roles}

    def resources(self, context) -> SimpleNamespace:
        """This collection's resources on a Dagster ``context``, by role (``.store``, ``.llm``)."""
        have = context.resources
        return SimpleNamespace(
            **{r: getattr(have, self.resource_key(r)) for r in ROLES if hasattr(have, self.resource_key(r))}
        )

    def job_name(self, job: str) -> str:
        """A job's or automation's name in this collection (``ingest``, ``product_ingest``)."""
        return f"{self.name}_{job}" if self.name else job

    def asset_attributes(self, asset: str) -> dict:
        """The keyword arguments every asset of the collection shares (key, group, owners, tags,
        code version) for ``dg.asset``."""
        version = dict(self.code_versions).get(asset)
        fresh = self.fresh_within_h if asset == "bm25_index" else None
        return {
            "key": self.key(asset),
            "group_name": self.group_name,
            "owners": list(self.owners) or None,
            "tags": dict(self.tags) or None,
            **({"code_version": version} if version else {}),
            **({"freshness_policy": dg.FreshnessPolicy.time_window(timedelta(hours=fresh))} if fresh else {}),
        }

    def per_document(self, asset: str) -> dict:
        """:meth:`asset_attributes` plus the per-document partitions (one-run backfills, changed
        by the code location from its settings)."""
        return {
            **self.asset_attributes(asset),
            "partitions_def": self.partitions,
            "backfill_policy": dg.BackfillPolicy.single_run(),
        }


#: The default collection: situate's own code location, with the names it has always had.
DEFAULT = Collection()
