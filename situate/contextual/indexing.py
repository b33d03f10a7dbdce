"""What is indexed for a document, with no Dagster in it: its rows of the LanceDB table (contextualised
text, vectors, the chunk and blurb fields), the fingerprint of the settings that made them, and the
checks that a document's chunks and blurbs are of one version."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import numpy as np
import pyarrow as pa

from situate.contextual.policy import NO_LLM_MODES, kind_of, uses_llm
from situate.contextual.prompts import CONTEXT_VERSION, PROMPT_VERSION
from situate.contextual.snippets import line_spans
from situate.resources.documents.docs import Chunking
from situate.resources.errors import UpstreamError
from situate.resources.models.llm import BlurbLLM, Embedder
from situate.resources.store.cache import file_sha256
from situate.resources.store.retrieval import contextualized_text
from situate.resources.store.store import table_schema


def blurb_file_id(path: str) -> str:
    """sha256 of a blurb file (the same digest :func:`situate.contextual.blurb_files.read` records), or
    ``"unreadable"`` when it is missing, not a regular file (a FIFO is never opened here) or over
    :data:`situate.contextual.blurb_files.MAX_FILE_BYTES`: the blurbs step then names the reason."""
    from situate.contextual.blurb_files import MAX_FILE_BYTES

    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return "unreadable"
        return file_sha256(path)
    except OSError:
        return "unreadable"


def fingerprint(llm: BlurbLLM, embedder: Embedder, chunking: Chunking) -> str:
    """Hash of every setting that changes a row: a document whose rows carry another fingerprint is
    stale and is ingested again.  A blurb file (``SITUATE_BLURBS_FILE``) counts by its sha256:
    setting, replacing or removing it makes the documents stale, and their blurbs taken from a
    file no longer set are written by the model (:func:`situate.contextual.edits.written_by_model`).  A model
    server counts by what it says it serves (:meth:`situate.resources.models.llm.BlurbLLM.identity`), so
    another model under the same name re-ingests."""
    settings = {
        "llm": llm.resolved_model_id(),
        "n_ctx": llm.n_ctx,
        "max_tokens": llm.max_tokens,
        "repeat_penalty": llm.repeat_penalty,
        "prompt": PROMPT_VERSION,
        **({"prompt_name": llm.prompt} if llm.prompt != "anthropic-2024" else {}),
        **({"max_blurb_chunks": llm.max_chunks_per_document} if llm.max_chunks_per_document != 2000 else {}),
        **({"context_mode": llm.context} if llm.context != "chunk" else {}),
        **({"code_context_mode": llm.code_context} if llm.code_context != llm.context else {}),
        **({"document_tokens": llm.document_tokens} if "document" in (llm.context, llm.code_context) else {}),
        **({"summary_reading": llm.summary_reading} if llm.summary_reading != "head" else {}),
        **({"summary_tokens": llm.summary_tokens} if "document" in (llm.context, llm.code_context) else {}),
        "context": CONTEXT_VERSION,
        **({"blurbs_file": blurb_file_id(llm.blurbs_file)} if llm.blurbs_file and uses_llm(llm) else {}),
        **({"llm_served": llm.identity()} if llm.remote and uses_llm(llm) else {}),
        "embedder": embedder.resolved_model_id(),
        "embed_ctx": embedder.n_ctx,
        **({"embed_served": embedder.identity()} if embedder.server_url else {}),
        "chunk_tokens": chunking.chunk_tokens,
        **(
            {"code_chunk_tokens": chunking.code_chunk_tokens}
            if chunking.code_chunk_tokens != chunking.chunk_tokens
            else {}
        ),
        "overlap_tokens": chunking.overlap_tokens,
    }
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def code_versions(llm: BlurbLLM, embedder: Embedder, chunking: Chunking) -> dict[str, str]:
    """Each per-document asset's code version (12 hex digits): a hash of what changes its output
    and of its upstream asset's version, so Dagster marks a partition stale when the chunking, the
    model, the prompt or the embedder changes.  Read from the settings alone, with no call to a
    model server (the model a server serves counts in :func:`fingerprint`, at ingest).

    Returns
    -------
    dict
        Asset name (``chunks``, ``fitted_preambles``, ``blurbs``, ``embeddings``, ``bm25_index``)
        → version.
    """

    def h(*parts) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]

    llm_id = llm.served_model or llm.model_id or os.path.basename(llm.model_path)
    embed_id = embedder.served_model or embedder.model_id or os.path.basename(embedder.model_path)
    sizes = (chunking.chunk_tokens,) + (
        (chunking.code_chunk_tokens,) if chunking.code_chunk_tokens != chunking.chunk_tokens else ()
    )
    chunks = h(*sizes, chunking.overlap_tokens, CONTEXT_VERSION)
    modes = llm.context if llm.code_context == llm.context else (llm.context, llm.code_context)
    reading = (llm.document_tokens,) if llm.summary_reading == "head" else (llm.document_tokens, llm.summary_reading)
    reading += (llm.summary_tokens,) if llm.summary_tokens != llm.max_tokens else ()
    preambles = h(chunks, llm.api, llm.server_url, llm_id, llm.n_ctx, llm.max_tokens, modes, *reading)
    blurbs = h(preambles, PROMPT_VERSION, llm.prompt, llm.repeat_penalty, llm.max_chunks_per_document, llm.blurbs_file)
    embeddings = h(blurbs, embedder.server_url, embed_id, embedder.n_ctx)
    return {
        "chunks": chunks,
        "fitted_preambles": preambles,
        "blurbs": blurbs,
        "embeddings": embeddings,
        "bm25_index": embeddings,
    }


def build_rows(
    key: str,
    doc: dict,
    chunk_list: list[dict],
    blurb_list: list[dict],
    vectors: np.ndarray,
    llm_model: str,
    embed_model: str,
    fp: str,
    llm_backend: str = "",
) -> pa.Table:
    """The document's rows for the ``chunks`` table (schema :func:`situate.resources.store.store.table_schema`);
    ``llm_backend``: what ran the blurb model (:meth:`situate.resources.models.llm.BlurbLLM.backend_kind`).

    Raises
    ------
    ValueError
        Chunks, blurbs and vectors differ in number or order.
    """
    if not (len(chunk_list) == len(blurb_list) == len(vectors)):
        raise ValueError(f"{len(chunk_list)} chunks, {len(blurb_list)} blurbs, {len(vectors)} vectors")
    for c, b in zip(chunk_list, blurb_list):
        if c["chunk_id"] != b["chunk_id"]:
            raise ValueError(f"blurb for {b['chunk_id']} where {c['chunk_id']} was expected: re-run blurbs")
    n = len(chunk_list)
    located = "text" in doc and all("start" in c and "end" in c for c in chunk_list)
    where = line_spans(doc["text"], [(c["start"], c["end"]) for c in chunk_list]) if located else [(None,) * 4] * n
    cols = {
        "chunk_id": [c["chunk_id"] for c in chunk_list],
        "document_key": [key] * n,
        "doc_id": [doc["doc_id"]] * n,
        "source": [doc["source"]] * n,
        "title": [doc["title"]] * n,
        "chunk_index": [c["index"] for c in chunk_list],
        "heading_path": [" > ".join(c["heading_path"]) for c in chunk_list],
        "context": [c.get("context", "") for c in chunk_list],
        "text": [c["text"] for c in chunk_list],
        "blurb": [b["blurb"] for b in blurb_list],
        "blurb_status": [b["status"] for b in blurb_list],
        "content_sha256": [hashlib.sha256(c["text"].encode()).hexdigest() for c in chunk_list],
        "doc_sha256": [doc["sha256"]] * n,
        "llm_model": [llm_model if b.get("mode", "") not in NO_LLM_MODES else "" for b in blurb_list],
        "llm_backend": [llm_backend if b.get("mode", "") not in NO_LLM_MODES else "" for b in blurb_list],
        "embed_model": [embed_model] * n,
        "prompt_version": [PROMPT_VERSION] * n,
        "fingerprint": [fp] * n,
        "context_mode": [b.get("mode", "") for b in blurb_list],
        "kind": [kind_of(doc)] * n,
        "blurb_doc_sha256": [b.get("doc_sha256", "") for b in blurb_list],
        "start_line": [w[0] for w in where],
        "end_line": [w[1] for w in where],
        "start_byte": [w[2] for w in where],
        "end_byte": [w[3] for w in where],
    }
    schema = table_schema(vectors.shape[1])
    arrays = [pa.array(cols[f.name], f.type) for f in schema if f.name != "vector"]
    flat = pa.array(vectors.astype(np.float32).ravel(), pa.float32())
    arrays.append(pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]))
    return pa.Table.from_arrays(arrays, schema=schema)


def check_one_version(key: str, doc: dict, chunk_data: dict, blurb_data: dict) -> None:
    """The document, chunks and blurbs stages were made from one version of the document (their
    ``doc_sha256``; stage files of earlier versions without it pass): two runs of one document
    that interleave stage by stage (the lock is taken per stage) would otherwise write rows that
    carry the new version's hash with the old version's text.

    Raises
    ------
    UpstreamError
        The versions differ: nothing is committed; the run that wrote the newest stages commits
        its own rows, and the next sync sees the document as it is.
    """
    versions = {
        "document": doc.get("sha256"),
        "chunks": chunk_data.get("doc_sha256"),
        "blurbs": blurb_data.get("doc_sha256"),
    }
    seen = {v for v in versions.values() if v}
    if len(seen) > 1:
        raise UpstreamError(
            f"{key}: the document changed while this run worked on it "
            f"({', '.join(f'{k} {v[:12]}' for k, v in versions.items() if v)}): "
            "not committed; the run of the newer version writes its rows"
        )


def indexed_texts(chunk_list: list[dict], blurbs: list[dict]) -> list[str]:
    """The contextualised text of each chunk of a document, what is embedded and BM25-indexed:
    structural context + blurb + chunk (:func:`situate.resources.store.retrieval.contextualized_text`),
    from the ``chunks`` and ``blurbs`` stages' entries, in chunk order."""
    return [contextualized_text(b["blurb"], c["text"], c.get("context", "")) for b, c in zip(blurbs, chunk_list)]


def migration_message(migration: dict) -> str:
    """The run's warning while the table's vectors change width
    (:meth:`situate.resources.store.store.Store.migration`)."""
    return (
        f"embeddings: the chunks table holds {migration['table_dim']}-wide vectors and this embedder "
        f"writes {migration['next_dim']}: {migration['documents_done']} documents wait in chunks-next, "
        f"{migration['documents_waiting']} are still to be embedded again; the table keeps its rows "
        "until every document is, then takes the new rows in one commit"
    )


def embedding_totals(ok: dict) -> dict:
    """The run's totals over its documents' entries: rows written, texts embedded, cache hits, and
    texts cut to the embedder's context (``inputs_cut``; reported once a run)."""
    return {
        "rows_written": sum(v["rows"] for v in ok.values()),
        "inputs_cut": sum(v.get("inputs_cut", 0) for v in ok.values()),
        "texts_embedded": sum(v["embedded"] for v in ok.values()),
        "embeddings_from_cache": sum(v["from_cache"] for v in ok.values()),
    }


def embedding_entry(rows: int, vectors: np.ndarray, n_computed: int, n_cut: int, seconds: float) -> dict:
    """A document's entry in the ``embeddings`` stage's metadata: rows written, the vectors' width,
    texts cut to the embedder's context, embedded now and from the cache, and seconds embedding."""
    return {
        "rows": rows,
        "dim": int(vectors.shape[1]),
        "inputs_cut": n_cut,
        "embedded": n_computed,
        "from_cache": len(vectors) - n_computed,
        "embed_seconds": round(seconds, 2),
    }
