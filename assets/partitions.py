"""The ``documents`` dynamic partitions, shared by the per-document assets and the wiring (sync,
sensor, schedule).  Keys and their path encoding live in :mod:`situate.resources.documents.keys` (the store checks
them too); they are re-exported here."""

from __future__ import annotations

import warnings

import dagster as dg

from situate.resources.documents.keys import KEY_PATTERN, PartitionKeyError, check_key, decode_key, encode_key  # noqa: F401

# backfill_policy (one run for many documents) is marked beta in Dagster 1.13; it is used on
# purpose, so its warning is not repeated on every import.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

#: Name of the dynamic partitions: one partition per document.
PARTITIONS = "documents"

#: The one partitions definition for every per-document asset.
documents = dg.DynamicPartitionsDefinition(name=PARTITIONS)


def backfill_policy(docs_per_run: int = 0) -> dg.BackfillPolicy:
    """How a backfill of many documents becomes runs: ``docs_per_run`` N > 0 gives runs of at most
    N documents (``BackfillPolicy.multi_run(N)``: disjoint documents, each run loading its model
    once, as many in parallel as the instance's run queue and the ``llm`` pool allow); 0, one run
    for the whole backfill (``single_run()``).  The code location sets it from
    ``SITUATE_DOCS_PER_RUN`` (:func:`situate.pipelines.definitions.build_definitions`)."""
    return dg.BackfillPolicy.multi_run(docs_per_run) if docs_per_run > 0 else dg.BackfillPolicy.single_run()


#: Concurrency pool of the steps that hold the blurb LLM: ``dagster instance concurrency set llm
#: N`` (or ``pools.default_limit`` in dagster.yaml) caps the runs holding a model at N.
LLM_POOL = "llm"
