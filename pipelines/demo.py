"""The demo: real documents that are on every machine after set-up, ingested and searched.

The corpus is text not written for this project: the READMEs of two installed dependencies (the
Markdown long descriptions in tiktoken's and lancedb's wheel metadata) and python-dotenv's
``main.py``: about 6k tokens, chosen so that the run takes about a minute on 2 cores with the
default blurb model (docs/performance.md).  It is copied into ``$SITUATE_HOME/demo-docs`` so the
run never depends on what else is on the machine.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import time
from pathlib import Path

from situate.resources.settings import data_folder

#: (distribution, file name in the demo folder) for READMEs taken from wheel metadata.
READMES = [("tiktoken", "tiktoken-README.md"), ("lancedb", "lancedb-README.md")]
#: (module, file name) for source files.
SOURCES = [("dotenv.main", "dotenv-main.py")]
#: One question for each document (the answer is in tiktoken's README, lancedb's README and
#: dotenv's main.py, in that order).
QUERIES = [
    "How many bytes does a token correspond to on average?",
    "What should I install on an old CPU without AVX2?",
    "How does load_dotenv find the .env file when no path is given?",
]


def build_demo_corpus(folder: Path) -> list[Path]:
    """Copy the demo documents into ``folder`` (idempotent). Returns their paths.

    Raises
    ------
    RuntimeError
        A package of the demo is not installed (set-up incomplete).
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for dist, name in READMES:
        try:
            body = importlib.metadata.metadata(dist).get_payload()
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(f"demo needs the installed package {dist}: run `make setup`") from None
        out.append(_write(folder / name, body))
    for module, name in SOURCES:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            raise RuntimeError(f"demo needs the module {module}: run `make setup`")
        out.append(_write(folder / name, Path(spec.origin).read_text(encoding="utf-8")))
    return out


def _write(path: Path, text: str) -> Path:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def run_demo(home: str | None = None, replace: bool = False, verbose: bool = False) -> int:
    """Build the demo corpus, ingest it, print the summary and the results of a few searches;
    ``verbose``: Dagster's full log of the ingest instead of one short line a progress step.

    Raises
    ------
    situate.pipelines.preflight.StartupError
        The data folder is a folder of the user's, or holds another docs folder's documents and
        ``replace`` is false.
    """
    from situate.pipelines.operations import ingest, search
    from situate.pipelines.output import print_hits
    from situate.pipelines.preflight import check_data_folder, check_same_docs

    home_path = check_data_folder(data_folder(home))
    folder = home_path / "demo-docs"
    check_same_docs(home_path, folder, replace)
    files = build_demo_corpus(folder)
    print(f"situate demo: {len(files)} documents in {folder}: {', '.join(f.name for f in files)}")
    t0 = time.perf_counter()
    summary = ingest(str(folder), str(home_path), replace=replace, verbose=verbose)
    for line in summary.lines():
        print(f"situate: {line}")
    for key, s in summary.per_document.items():
        reused = s["prompt_tokens_reused"]  # a count, or "not reported by this server"
        print(
            f"situate:   {key}: {s['chunks']} chunks, prompt tokens evaluated {s['prompt_tokens_evaluated']:,} "
            f"/ reused {f'{reused:,}' if isinstance(reused, int) else reused}, {s['llm_seconds']} s"
        )
    for q in QUERIES:
        hits, warnings = search(q, 3, str(home_path))
        print(f"\nsearch: {q}")
        for w in warnings:
            print(f"  warning: {w}")
        print_hits(hits, False, q)
    print(f"\nsituate demo: done in {time.perf_counter() - t0:.1f} s")
    return 0 if not summary.failed else 1
