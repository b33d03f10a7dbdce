"""Contextualisation, the logic situate exists for, with no Dagster in it: chunking, structural
context of code, the prompts and blurb cleaning, preamble fitting and windows, skipping, edits,
blurb files and the checks of the table.  The assets in ``situate.assets`` are thin over these
modules; they import ``situate.resources`` and nothing above it (``tests/test_layers.py``)."""
