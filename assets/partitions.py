"""The ``documents`` dynamic partitions, shared by the per-document assets and the wiring (sync,
sensor, schedule).  Keys and their path encoding live in :mod:`situate.resources.documents.keys` (the store checks
them too); they are re-exported here."""

from __future__ import annotations

import warnings

import dagster as dg

from situate.resources.documents.keys import KEY_PATTERN, PartitionKeyError, check_key, decode_key, encode_key  # noqa: F401
from situate.resources.settings import env

# backfill_policy (one run for many documents) is marked beta in Dagster 1.13; it is used on
# purpose, so its warning is not repeated on every import.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

#: Name of the dynamic partitions: one partition per document (issue 2: named ``documents``).
PARTITIONS = "documents"

#: The one partitions definition for every per-document asset.
documents = dg.DynamicPartitionsDefinition(name=PARTITIONS)


def backfill_policy() -> dg.BackfillPolicy:
    """How a backfill of many documents becomes runs: ``SITUATE_DOCS_PER_RUN=N`` gives runs of at
    most N documents (``BackfillPolicy.multi_run(N)``: disjoint documents, each run loading its
    model once, as many in parallel as the instance's run queue and the ``llm`` pool allow);
    unset or 0, one run for the whole backfill (``single_run()``).  A value that is not a whole
    number is refused by the settings check of every command (:mod:`situate.pipelines.settings`)."""
    raw = env("SITUATE_DOCS_PER_RUN")
    n = int(raw) if raw.isdigit() else 0
    return dg.BackfillPolicy.multi_run(n) if n > 0 else dg.BackfillPolicy.single_run()


#: The policy of every per-document asset, fixed when the code location loads.
BACKFILL = backfill_policy()

#: Concurrency pool of the steps that hold the blurb LLM: ``dagster instance concurrency set llm
#: N`` (or ``pools.default_limit`` in dagster.yaml) caps the runs holding a model at N.
LLM_POOL = "llm"
