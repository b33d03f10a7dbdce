"""The ``documents`` dynamic partitions and the reversible path ↔ partition-key encoding.

Dagster partition keys must not contain ``...`` or control characters, and commas and ``|`` break
selection and backfills in the UI (shared/DAGSTER.md), so a key uses only ``[A-Za-z0-9._-]``.
The encoding is deterministic and reversible, so a key maps back to its source without any state:

* ``A-Z a-z 0-9 -`` stand for themselves; ``.`` too, unless it follows a ``.`` (no ``..``/``...``);
* ``_`` is the escape character: ``__`` is ``_``, ``_.`` is ``/``, ``_HH`` is one UTF-8 byte in hex.

Examples
--------
>>> encode_key("docs/getting_started.md")
'docs_.getting__started.md'
>>> decode_key("docs_.getting__started.md")
'docs/getting_started.md'
>>> encode_key("codebase_chunks.json#doc_70")
'codebase__chunks.json_23doc__70'
"""

from __future__ import annotations

import warnings

import dagster as dg

from resources.keys import KEY_PATTERN, PartitionKeyError, check_key, decode_key, encode_key  # noqa: F401

# backfill_policy (one run for many documents) is marked beta in Dagster 1.13; it is used on
# purpose, so its warning is not repeated on every import.
warnings.filterwarnings("ignore", category=dg.BetaWarning)

#: The one partitions definition for every per-document asset (issue 2: named ``documents``).
documents = dg.DynamicPartitionsDefinition(name="documents")
