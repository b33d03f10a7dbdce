"""What the no-model tests (:mod:`situate.contextual.skipping`) spare on real folders (issue 23, item 5).

Each folder goes through the pipeline's own discovery, reading and chunking (800 cl100k_base
tokens, 80 overlap: the defaults); every chunk is tested, and the chunks flagged are counted by
reason, with their share of the folder's chunks and the LLM time they would have cost at a
given rate (seconds a chunk, from the ``cost`` section of the same run when there is one).
The two labelled corpora are counted chunk by chunk as given (their Pass@k cannot move when
none of their chunks is flagged).
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def real_folders() -> dict[str, Path]:
    """Installed packages' own folders: dagster-webserver (its UI: minified JavaScript bundles,
    CSS, SVG, Python) and numpy (code, docs, test data)."""
    import importlib.util

    out = {}
    for name in ("dagster_webserver", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec and spec.origin:
            out[f"{name} (installed package)"] = Path(spec.origin).parent
    return out


def folder_counts(root: Path, max_bytes: int = 60_000_000) -> dict:
    """Chunks and flagged chunks of the documents discovery finds under ``root`` (files read in
    discovery order until ``max_bytes`` of text)."""
    from situate.contextual.chunking import make_chunks
    from situate.contextual.skipping import chunk_reasons
    from situate.contextual.tokens import count_cl100k
    from situate.resources.documents.reading import DocumentError, discover, load

    reasons: collections.Counter = collections.Counter()
    flagged_files: collections.Counter = collections.Counter()
    n_docs = n_chunks = n_bytes = 0
    t0 = time.perf_counter()
    for ref in discover(root):
        try:
            doc = load(ref)
        except (DocumentError, OSError, ValueError):
            continue
        n_bytes += len(doc.text.encode("utf-8", "replace"))
        if n_bytes > max_bytes:
            break
        chunks = make_chunks("k", doc.text, doc.headings, count_cl100k)
        why = chunk_reasons(doc.source, [c.text for c in chunks])
        n_docs += 1
        n_chunks += len(chunks)
        for w in why:
            if w:
                reasons[w] += 1
                flagged_files[doc.source] += 1
    flagged = sum(reasons.values())
    return {
        "documents": n_docs,
        "chunks": n_chunks,
        "bytes": n_bytes,
        "flagged": flagged,
        "share": round(flagged / n_chunks, 4) if n_chunks else 0.0,
        "by_reason": dict(reasons),
        "top_files": flagged_files.most_common(5),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def corpus_counts(path: Path) -> dict:
    from situate.contextual.skipping import no_model_reason

    corpus = json.loads(path.read_text())
    texts = [c["content"] for d in corpus for c in d["chunks"]]
    why = collections.Counter(r for r in map(no_model_reason, texts) if r)
    return {
        "documents": len(corpus),
        "chunks": len(texts),
        "flagged": sum(why.values()),
        "share": round(sum(why.values()) / len(texts), 4),
        "by_reason": dict(why),
    }


def skipping_section(s_per_chunk: float | None = None, log=print, max_bytes: int = 60_000_000) -> dict:
    """The two labelled corpora and the installed packages' folders (at most ``max_bytes`` of
    text each; ``run.py --tiny`` reads 200,000), chunks flagged by reason."""
    out: dict = {"s_per_chunk": s_per_chunk, "max_bytes": max_bytes, "folders": {}}
    for name in ("codebase", "docs"):
        path = ROOT / "eval" / name / f"{name}_chunks.json"
        if path.is_file():
            out["folders"][f"{name} set (labelled)"] = r = corpus_counts(path)
            log(f"skipping {name}: {r['flagged']} of {r['chunks']} chunks flagged")
    for name, root in real_folders().items():
        out["folders"][name] = r = folder_counts(root, max_bytes)
        if s_per_chunk:
            r["llm_seconds_spared"] = round(r["flagged"] * s_per_chunk, 1)
        log(f"skipping {name}: {r['flagged']} of {r['chunks']} chunks flagged {r['by_reason']} ({r['seconds']} s)")
    return out


def markdown(s: dict) -> list[str]:
    lines = [
        "",
        "## Chunks that get no LLM call (situate/contextual/skipping.py)",
        "",
        "| folder | documents | chunks | flagged | share | by reason | LLM s spared |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in s["folders"].items():
        lines.append(
            f"| {name} | {r['documents']} | {r['chunks']} | {r['flagged']} | {r['share']:.1%} | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(r['by_reason'].items())) or '—'} | "
            f"{r.get('llm_seconds_spared', '—')} |"
        )
    return lines
