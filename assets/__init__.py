"""The transformations, one module per stage, each a thin asset over plain functions."""
