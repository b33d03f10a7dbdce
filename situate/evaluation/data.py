"""The labelled corpora that come with the repository (``eval/`` at its root): the cookbook's
codebase and docs sets (MIT) and CoSQA (C-UDA v1.0), each a cookbook-form ``<set>_chunks.json`` and
the developers' ``queries_dev.jsonl``; ``eval/README.md`` gives their sources and licences.

They are found beside the source tree, so a clone (or an editable install) has them; an install
from a wheel does not, and ``situate eval`` then needs ``--corpus``.
"""

from __future__ import annotations

from pathlib import Path

#: The repository's folder of labelled corpora (``<repository>/eval``).
EVAL_DATA = Path(__file__).resolve().parents[2] / "eval"

#: The sets in :data:`EVAL_DATA`, by name.
SETS = ("codebase", "docs", "cosqa")

#: The set ``situate eval`` scores when given no corpus.
DEFAULT_SET = "codebase"


def corpus_file(name: str) -> Path:
    """The corpus file of set ``name`` of :data:`EVAL_DATA` (``eval/<name>/<name>_chunks.json``)."""
    return EVAL_DATA / name / f"{name}_chunks.json"


def queries_file(name: str) -> Path:
    """The developers' queries of set ``name`` (``eval/<name>/queries_dev.jsonl``)."""
    return EVAL_DATA / name / "queries_dev.jsonl"


def resolve_eval_paths(corpus: str | None, queries: str | None) -> tuple[str, str | None]:
    """The corpus and queries ``situate eval`` scores: ``corpus`` None gives the codebase set; a set
    name (``docs``) gives that set's corpus file; the repository's corpus file given without
    ``queries`` brings its ``queries_dev.jsonl``.  Any other path is returned as given.

    Raises
    ------
    FileNotFoundError
        A set asked for by name (or by default) whose file is not here: situate installed without
        its repository; the message says to give ``--corpus``.
    """
    name = DEFAULT_SET if corpus is None else corpus if corpus in SETS else None
    if name is not None:
        path = corpus_file(name)
        if not path.exists():
            raise FileNotFoundError(
                f"the labelled corpus {name!r} ({path}) comes with situate's repository, not with an "
                "installed package: give --corpus FILE (and --queries FILE)"
            )
        corpus = str(path)
    if queries is None:
        for name in SETS:
            if Path(corpus).expanduser().resolve() == corpus_file(name).resolve():
                queries = str(queries_file(name))
    return corpus, queries
