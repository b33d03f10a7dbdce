"""Issue 25's cost figures for each installed embedder of ``situate models`` (``--only embedders``).

For each embedder in :data:`situate.resources.models.registry.EMBED_MODELS` whose files are installed,
in one run on the same chunks of the cookbook codebase set (contextualised texts are not needed:
the cost is the chunk's tokens):

- embedding throughput: the model's own tokens a second (the GGUF's tokenizer for llama.cpp,
  ``tokenizer.json`` for ONNX, each input cut to the model's context as the product cuts it) and
  seconds a chunk, and each one's ratio to the default embedder's seconds a chunk (the bound of
  issue 25: at most 2×);
- a query's embedding time (ms, mean over the queries);
- the vector width, and search p50 / p95 over 100,000 synthetic rows of that width with the
  product's ``hybrid_search`` and the IVF_FLAT index it builds at that size
  (:mod:`benchmarks.search_scale`), and the data folder's bytes.
"""

from __future__ import annotations

import time
from pathlib import Path

QUERIES = [
    "how are retries configured for failed requests",
    "parse the command line arguments",
    "where is the cache invalidated",
    "convert a date string to a timestamp",
    "which function writes the output file",
    "handle a missing configuration key",
    "sort the results by score",
    "open a database connection with a timeout",
    "test that the parser rejects bad input",
    "load the model weights from disk",
]


def tokens_read(emb, texts: list[str]) -> int:
    """Tokens the embedder reads for ``texts`` (document prefix, cut to its context), counted with
    the embedder's own tokenizer whichever runtime it has: ``tokenizer.json`` for an ONNX
    embedder (onnxruntime), the GGUF's vocabulary for one run by llama.cpp.

    Parameters
    ----------
    emb : situate.resources.models.llm.Embedder
        The embedder, as the pipeline configures it.
    texts : list of str
        Chunks, without the document prefix.

    Returns
    -------
    int
        Tokens, each text's count cut to ``emb.n_ctx`` as the product cuts it.

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        The model file (or an ONNX embedder's tokenizer) is missing, corrupt or not loadable.
    """
    if emb.is_onnx():
        from situate.resources.models import encoder

        _, tok, _ = encoder.session(emb.model_path, emb.tokenizer_path, emb.n_ctx, emb.n_threads or 2)
        return sum(len(e.ids) for e in tok.encode_batch([emb.document_prefix + t for t in texts]))
    L = emb.load()
    return sum(min(emb.n_ctx, len(L.tokenize((emb.document_prefix + t).encode(), add_bos=True)) + 1) for t in texts)


def embedders_section(corpus: list[dict], quick: bool, work: Path, log=print, tiny: bool = False) -> dict:
    """Each installed embedder on the same chunks and its search figures (the module docstring).

    ``quick``: 24 chunks and 20 queries; ``tiny`` (``run.py --tiny``, a smoke run): 4 chunks,
    5 queries and 2,000 rows instead of 100,000 (``search_rows`` says which), figures meaningless.
    """
    import search_scale

    from situate.pipelines.settings import resources_from_env
    from situate.resources.models import registry as models
    from situate.resources.models.llm import Embedder

    base = resources_from_env(plain=True)["embedder"]
    texts = [c["content"] for d in corpus for c in d["chunks"]][: (4 if tiny else 24 if quick else 96)]
    rows = 2_000 if tiny else 100_000
    out: dict = {"texts": len(texts), "default": models.DEFAULT_EMBED, "search_rows": rows, "embedders": {}}
    for name, spec in models.EMBED_MODELS.items():
        if not all(models.is_installed(f, verify=False) for f in spec.files):
            log(f"embedders: {name} not installed (situate models install {name}): skipped")
            continue
        path, tok, model_id, spec = models.resolve_embedder(name)
        emb = Embedder(
            **{
                **base.model_dump(),
                "model_path": path,
                "tokenizer_path": tok,
                "model_id": model_id,
                "n_ctx": spec.n_ctx,
                "pooling": spec.pooling,
                "document_prefix": spec.document_prefix,
                "query_prefix": spec.query_prefix,
            }
        )
        n_tokens = tokens_read(emb, texts)
        emb.embed_documents(texts[:2])  # load and warm up
        t0 = time.perf_counter()
        vecs, n_cut = emb.embed_documents(texts)
        dt = time.perf_counter() - t0
        t1 = time.perf_counter()
        for q in QUERIES:
            emb.embed_query(q)
        q_ms = (time.perf_counter() - t1) * 1000 / len(QUERIES)
        r = {
            "model_id": model_id,
            "width": int(vecs.shape[1]),
            "n_ctx": spec.n_ctx,
            "tokens": n_tokens,
            "inputs_cut": n_cut,
            "seconds": round(dt, 2),
            "tokens_per_s": round(n_tokens / dt, 1),
            "s_per_chunk": round(dt / len(texts), 4),
            "query_ms": round(q_ms, 1),
        }
        log(
            f"embedders: {name}: {r['tokens_per_s']} tokens/s, {r['s_per_chunk']} s a chunk, "
            f"query {r['query_ms']} ms, width {r['width']}"
        )
        scale = search_scale.run(
            work / f"emb-{name}",
            texts,
            sizes=(rows,),
            n_queries=5 if tiny else 20 if quick else 50,
            log=log,
            dim=r["width"],
        )[rows]
        mode = "indexed" if scale["index_by_default"] else "exact"
        r.update(
            search_p50_ms_100k=scale[mode]["p50_ms"],
            search_p95_ms_100k=scale[mode]["p95_ms"],
            folder_bytes_100k=scale["folder_bytes"],
            indexed_recall_at_10=scale["indexed_recall_at_10"],
        )
        out["embedders"][name] = r
    d = out["embedders"].get(models.DEFAULT_EMBED)
    for r in out["embedders"].values():
        r["x_default_s_per_chunk"] = round(r["s_per_chunk"] / d["s_per_chunk"], 3) if d else None
    return out


def markdown(sec: dict) -> list[str]:
    lines = [
        "",
        "## Embedders (issue 25)",
        "",
        f"{sec['texts']} chunks of the codebase set, each embedder in turn in one run; search over "
        f"{sec.get('search_rows', 100_000):,} synthetic rows of each width (hybrid search, IVF_FLAT index).",
        "",
        "| embedder | width | context | tokens/s | s a chunk | × default | query ms | search p50 ms | "
        "search p95 ms | data folder MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in sec["embedders"].items():
        lines.append(
            f"| {name}{' (default)' if name == sec['default'] else ''} | {r['width']} | {r['n_ctx']} | "
            f"{r['tokens_per_s']} | {r['s_per_chunk']} | {r['x_default_s_per_chunk']} | {r['query_ms']} | "
            f"{r['search_p50_ms_100k']} | {r['search_p95_ms_100k']} | {r['folder_bytes_100k'] / 1e6:.0f} |"
        )
    return lines
