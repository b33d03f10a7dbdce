"""The ``documents`` dynamic partitions.  Keys and their path encoding live in
:mod:`resources.keys` (the store checks them too); they are re-exported here for the wiring."""

from __future__ import annotations

import warnings

import dagster as dg

from resources.keys import KEY_PATTERN, PartitionKeyError, check_key, decode_key, encode_key  # noqa: F401

# backfill_policy (one run for many documents) is marked beta in Dagster 1.13; it is used on
# purpose, so its warning is not repeated on every import.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

#: The one partitions definition for every per-document asset (issue 2: named ``documents``).
documents = dg.DynamicPartitionsDefinition(name="documents")
