"""The ``documents`` dynamic partitions, shared by the per-document assets and the wiring (sync,
sensor, schedule).  Keys and their path encoding live in :mod:`resources.keys` (the store checks
them too); they are re-exported here."""

from __future__ import annotations

import warnings

import dagster as dg

from resources.keys import KEY_PATTERN, PartitionKeyError, check_key, decode_key, encode_key  # noqa: F401

# backfill_policy (one run for many documents) is marked beta in Dagster 1.13; it is used on
# purpose, so its warning is not repeated on every import.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

#: Name of the dynamic partitions: one partition per document (issue 2: named ``documents``).
PARTITIONS = "documents"

#: The one partitions definition for every per-document asset.
documents = dg.DynamicPartitionsDefinition(name=PARTITIONS)
