"""Counting cl100k_base tokens (tiktoken, read offline), the unit chunk sizes are given in."""

from __future__ import annotations

import functools

import tiktoken


@functools.lru_cache(maxsize=1)
def cl100k():
    """tiktoken ``cl100k_base``, read from the models folder (never downloaded at run time).

    Raises
    ------
    RuntimeError
        The cl100k file is not installed (run ``situate models install``).
    """
    from situate.resources.models import registry as models

    models.use_offline_tiktoken()
    if not models.is_installed(models.CL100K, verify=False):
        raise RuntimeError(
            f"tiktoken cl100k_base file missing at {models.path_of(models.CL100K)}: run `situate models install`"
        )

    return tiktoken.get_encoding("cl100k_base")


def count_cl100k(text: str) -> int:
    """Length of ``text`` in cl100k_base tokens (special tokens counted as text)."""
    return len(cl100k().encode(text, disallowed_special=()))
