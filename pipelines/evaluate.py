"""``situate eval``: ingest an evaluation corpus through the pipeline, then score every
configuration on its queries (see :mod:`situate.evaluation.metrics` for the metric).

The corpus goes through the same assets as any folder (``situate ingest``), into its own data
folder (default ``$SITUATE_HOME/eval/<corpus name>``).  Blurbs, embeddings and reranker scores are
cached there by content, so a second run makes no model call and takes minutes.

Configurations (:data:`situate.evaluation.metrics.CONFIGS`):

==================  ==============================================================================
chunk               dense over the chunk alone
chunk+bm25          dense + BM25 over the chunk, fused
heuristic           structural context (no model) + chunk, dense + BM25
document-context    one LLM summary per document + chunk, dense + BM25
contextual-dense    the chunk's LLM blurb + chunk, dense only (the blog's "contextual embeddings")
blurb               the chunk's LLM blurb + chunk, dense + BM25 (the blog's recipe, local models)
ensemble            ``contextual``'s dense and BM25 rankings plus dense over the chunk alone, fused
contextual+structural-bm25  dense + BM25 over structural context + blurb + chunk, plus BM25 over the
                    structural context + chunk without the blurb, fused by RRF, in memory (what
                    ``contextual`` computes through the pipeline's index: a check that they agree)
contextual-2-rankings  the first two of those rankings only (the search default before)
blurb-ungrounded    as ``blurb``, with the blurb cleaned but not checked against the document
contextual-ungrounded  structural context + that blurb + chunk, dense + BM25 (in memory)
contextual          the pipeline's own rows and ``situate search`` (structural context + grounded
                    blurb + chunk, dense + BM25, and BM25 without the blurb, RRF)
contextual+rerank   ``contextual``'s top ``rerank_depth`` reranked by the local cross-encoder, its order
                    fused with the first stage's by RRF (``situate search --rerank 30``)
contextual+rerank-replace  the same candidates in the cross-encoder's order alone (the cookbook's step)
contextual+rerank-blurb    as ``contextual+rerank``, the cross-encoder reading the LLM blurb too
fusion-cv           a weighted RRF over up to seven rankings (``contextual``'s three, dense over the
                    chunk alone and over the structural context + chunk, and with ``--questions``
                    BM25 over a chunk's predicted questions and dense over structural context +
                    questions + chunk), chosen by k-fold cross-validation over the queries
                    (:mod:`situate.evaluation.fusion_fit`); reported as the out-of-fold figure
==================  ==============================================================================
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from situate.evaluation import metrics as ev
from situate.resources.models.reranker import RERANK_DEPTH  # candidates reranked; settable per run
from situate.resources.settings import env, override

#: The configurations that rerank ``contextual``'s top ``rerank_depth``.
RERANKED = ("contextual+rerank", "contextual+rerank-replace", "contextual+rerank-blurb")


def default_home(corpus: str | Path) -> Path:
    """``$SITUATE_HOME/eval/<corpus file or folder name without extension>``."""
    from situate.pipelines.settings import situate_home

    return situate_home() / "eval" / Path(corpus).name.split(".")[0]


def _keys(rows_by_id: dict, ids: list[str]) -> list[ev.Key]:
    return [(rows_by_id[i]["doc_id"], int(rows_by_id[i]["chunk_index"])) for i in ids if i in rows_by_id]


def _spans(rows_by_id: dict, ids: list[str]) -> list[ev.Span]:
    rows = [rows_by_id[i] for i in ids if i in rows_by_id]
    return [(r["doc_id"], int(r["start_byte"] or 0), int(r["end_byte"] or 0)) for r in rows]


def document_blurbs(store, llm, keys: list[str], echo=print) -> tuple[dict[str, str], int]:
    """One LLM summary per document in ``store`` (prompt :data:`situate.contextual.prompts.DOCUMENT_SUMMARY`,
    the first window of a long document), through the blurb cache.

    Returns
    -------
    (blurbs, model_calls)
        ``{document_key: cleaned summary ("" when unusable)}`` and the LLM calls made.
    """
    from situate.contextual.contextualize import contextualize
    from situate.contextual.document_blurbs import STOP, blurb_key, grounded_summary
    from situate.contextual.fitting import fit_document, prompt_builder
    from situate.contextual.prompts import DOCUMENT_SUMMARY
    from situate.contextual.summary_grounding import summary_language
    from situate.resources.store.cache import blurb_cache_for

    builder = prompt_builder(llm, DOCUMENT_SUMMARY)
    cache = blurb_cache_for(store)
    key_fn = blurb_key(llm, DOCUMENT_SUMMARY.name)
    out, calls = {}, 0
    for n, key in enumerate(keys):
        doc = store.read_stage(key, "document")
        if not isinstance(doc, dict) or doc.get("error"):
            continue
        plan = fit_document(doc["text"], [(0, 0)], builder, llm.n_ctx, llm.max_tokens)
        rec = contextualize(
            doc["text"], [""], plan, builder, lambda t: llm.generate(t, stop=STOP), cache=cache, cache_key=key_fn
        )[0]
        calls += not rec.cached
        rec = grounded_summary(rec, doc["text"], summary_language(doc))
        out[key] = rec.blurb
        if not rec.cached:
            echo(f"situate eval: document summary {n + 1}/{len(keys)} {key}: {rec.blurb[:90]!r}")
    return out, calls


def write_blurb_file(store, llm, path: str) -> int:
    """Every document's blurbs in ``store`` as a blurb file (:func:`situate.contextual.blurb_files.write`);
    returns the number of lines."""
    from situate.contextual import blurb_files

    keys = sorted({r["document_key"] for r in store.columns(["document_key"]).to_pylist()})
    sha = llm.identity()
    lines = []
    for key in keys:
        stage, doc = store.read_stage_if_any(key, "blurbs"), store.read_stage_if_any(key, "document")
        if isinstance(stage, dict) and isinstance(doc, dict) and not stage.get("error"):
            lines += blurb_files.stage_lines(stage, doc.get("doc_id", key), sha)
    return blurb_files.write(path, lines)


def blurb_quality(store, keys: list[str]) -> dict:
    """Share (percent) of the chunk blurbs of documents ``keys`` with each problem found by
    cleaning, and of those indexed (``usable``)."""
    counts: collections.Counter = collections.Counter()
    n = 0
    for key in keys:
        try:
            b = store.read_stage(key, "blurbs")
        except (FileNotFoundError, OSError, ValueError):
            continue
        if not isinstance(b, dict) or "blurbs" not in b:
            continue
        for r in b["blurbs"]:
            n += 1
            counts["usable"] += r["status"] == "model"
            for p in set(r["problems"]):
                counts[p] += 1
    return {"blurbs": n, **{k: round(100 * v / n, 1) for k, v in sorted(counts.items())}} if n else {"blurbs": 0}


def side_blurbs(store, rows: list[dict], path: str, mode: str) -> tuple[dict[str, str], dict]:
    """Blurbs of another mode or prompt for the table's chunks, from a blurb file (untrusted:
    read within :mod:`situate.contextual.blurb_files`' bounds), cleaned and grounded as any model answer.

    Parameters
    ----------
    store : situate.resources.store.store.Store
    rows : list of dict
        The table's rows (``chunk_id``, ``document_key``, ``text``).
    path : str
        The blurb file.
    mode : str
        Its lines' mode, e.g. ``chunk:questions``.

    Returns
    -------
    (blurbs, counts)
        ``{chunk_id: cleaned text ("" when unusable or absent)}`` and ``{"found", "usable",
        "missing", "rejected_lines"}``.

    Raises
    ------
    situate.contextual.blurb_files.BlurbFileError
        The file cannot be read (the message names it).
    """
    from situate.contextual import blurb_files
    from situate.contextual.contextualize import record_from_raw
    from situate.contextual.edits import text_sha256
    from situate.contextual.prompts import PROMPTS

    f = blurb_files.read(path, mode=mode)
    prompt = PROMPTS.get(mode.split(":", 1)[1]) if mode.startswith("chunk:") else None
    by_reference = bool(prompt and prompt.by_reference)
    # one line per (document version, chunk text): the first model's, whichever model wrote it
    where = {}
    for _, model, doc_sha, t_sha in f.raws:
        where.setdefault((doc_sha, t_sha), model)
    docs: dict[str, dict] = {}
    out, found, usable = {}, 0, 0
    for r in rows:
        doc = docs.setdefault(r["document_key"], store.read_stage(r["document_key"], "document"))
        key = (doc["sha256"], text_sha256(r["text"]))
        if key not in where:
            out[r["chunk_id"]] = ""
            continue
        found += 1
        rec = record_from_raw(f.get(mode, where[key], *key), r["text"], doc["text"], by_reference)
        usable += bool(rec.blurb)
        out[r["chunk_id"]] = rec.blurb
    return out, {"found": found, "usable": usable, "missing": len(rows) - found, "rejected_lines": f.rejected}


def embedder_spans(embedder):
    """``spans(text)``: the token offsets of ``text`` in an ONNX embedder's own WordPiece
    tokenizer (no special tokens, no truncation), for :mod:`situate.contextual.embed_windows`; ``None`` for
    a GGUF or served embedder (not measured)."""
    if embedder.server_url or not embedder.is_onnx():
        return None

    tok = Tokenizer.from_file(embedder.tokenizer_path)
    tok.no_truncation()
    tok.no_padding()
    return lambda text: tok.encode(text, add_special_tokens=False).offsets


def late_chunked_rankings(store, rows: list[dict], qs: list, echo=print) -> list[list[str]]:
    """Dense top-150 chunk ids per query from late-chunked vectors (:mod:`situate.contextual.late_chunking`)
    of nomic-embed-text-v1.5 (2,048-token windows), the query embedded by the same model.

    Vectors are cached in the data folder (``cache/late-chunking.npz``) by the model file's
    sha256, the window and each document's chunk texts, so a re-run reads no document again.

    Raises
    ------
    situate.resources.models.registry.ModelFileError
        nomic-embed-text-v1.5 is not installed (``situate models install nomic-embed-text-v1.5``).
    """
    from situate.contextual import late_chunking
    from situate.resources.models.registry import resolve_embedder
    from situate.resources.models.token_embedder import TokenEmbedder
    from situate.resources.store.cache import digest, file_sha256

    path, _, _, spec = resolve_embedder("nomic-embed-text-v1.5")
    te = TokenEmbedder(path, n_ctx=2048)
    head = te.bos + te.tokenize(spec.document_prefix)
    model = [file_sha256(path), te.n_ctx, late_chunking.OVERLAP, spec.document_prefix]
    cache_path = store.root / "cache" / "late-chunking.npz"
    cache = dict(np.load(cache_path)) if cache_path.exists() else {}
    by_doc: dict[str, list[dict]] = {}
    for r in rows:
        by_doc.setdefault(r["document_key"], []).append(r)
    vec: dict[str, np.ndarray] = {}
    t0, new = time.perf_counter(), 0
    for n, (_key, rs) in enumerate(sorted(by_doc.items())):
        rs.sort(key=lambda r: int(r["chunk_index"]))
        k = digest(model, [r["text"] for r in rs])
        if k not in cache:
            cache[k] = late_chunking.chunk_vectors(
                [r["text"] for r in rs], te.tokenize, te.token_vectors, te.n_ctx, head, te.eos
            )
            new += 1
            if new % 10 == 0:
                echo(
                    f"situate eval: late chunking: {n + 1}/{len(by_doc)} documents, "
                    f"{te.tokens_read:,} tokens read in {time.perf_counter() - t0:.0f} s"
                )
        for r, v in zip(rs, cache[k]):
            vec[r["chunk_id"]] = v
    if new:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache_path, **cache)
    echo(
        f"situate eval: late chunking: {new} documents read ({te.tokens_read:,} tokens, "
        f"{time.perf_counter() - t0:.0f} s), {len(by_doc) - new} from the cache"
    )
    ids = [r["chunk_id"] for r in rows]
    dv = np.stack([vec[i] for i in ids])
    qv = np.stack([te.query_vector(spec.query_prefix + q.query) for q in qs])
    return ev.dense_rankings(qv, dv, ids)


def cv_rankings(
    store, rows: list[dict], qs: list, qv, embedder, dcache, questions: str | None, late: bool = False, echo=print
) -> tuple[dict[str, list[list[str]]], dict]:
    """Every ranking ``fusion-cv`` can fuse, as top-150 chunk ids per query.

    ``dense``, ``bm25``: over structural context + blurb + chunk (the table's text);
    ``structure-bm25``: over structural context + chunk (today's third ranking);
    ``bm25-identifiers``, ``structure-bm25-identifiers``: the same two with compound code identifiers
    split into words (:func:`situate.resources.store.retrieval.split_identifiers`); ``chunk-dense``,
    ``structure-dense``: dense over the chunk alone, over structural context + chunk;
    ``windows-dense``: the chunk in pieces that fit the embedder, scored by its best piece (an ONNX
    embedder only, :mod:`situate.contextual.embed_windows`); ``late-dense`` with ``late``
    (:func:`late_chunked_rankings`); with ``questions`` (:func:`side_blurbs`), ``questions-bm25``
    over the questions alone and ``questions-dense`` over structural context + questions + chunk.

    Returns
    -------
    (lists, questions_counts)
    """
    from situate.resources.store.cache import embed_with_cache
    from situate.resources.store.retrieval import contextualized_text

    ids = [r["chunk_id"] for r in rows]
    qtexts = [q.query for q in qs]
    ctx = [contextualized_text(r["blurb"] or "", r["text"], r["context"] or "") for r in rows]
    structure = [contextualized_text("", r["text"], r["context"] or "") for r in rows]
    dense_texts = {"dense": ctx, "chunk-dense": [r["text"] for r in rows], "structure-dense": structure}
    extra: dict = {}
    lists: dict[str, list[list[str]]] = {}
    spans = embedder_spans(embedder)
    if spans is not None:
        from situate.contextual.embed_windows import max_sim_rankings, piece_texts

        window = embedder.n_ctx - 2 - len(spans(embedder.document_prefix))
        ptexts, owner = piece_texts(rows, contextualized_text, spans, window)
        pv, _, _ = embed_with_cache(embedder, ptexts, dcache)
        lists["windows-dense"] = max_sim_rankings(qv, pv, owner, ids)
        echo(
            f"situate eval: windows-dense: {len(ptexts)} pieces for {len(rows)} chunks "
            f"({len(ptexts) - len(set(owner))} more than one a chunk)"
        )
    if late:
        lists["late-dense"] = late_chunked_rankings(store, rows, qs, echo)
    lists["dense"] = ev.dense_rankings(qv, embed_with_cache(embedder, ctx, dcache)[0], ids)
    lists["bm25"] = ev.bm25_rankings(ctx, ids, qtexts)
    lists["structure-bm25"] = ev.bm25_rankings(structure, ids, qtexts)
    lists["bm25-identifiers"] = ev.bm25_rankings(ctx, ids, qtexts, identifiers=True)
    lists["structure-bm25-identifiers"] = ev.bm25_rankings(structure, ids, qtexts, identifiers=True)
    for name in ("chunk-dense", "structure-dense"):
        lists[name] = ev.dense_rankings(qv, embed_with_cache(embedder, dense_texts[name], dcache)[0], ids)
    if questions:
        qmap, extra = side_blurbs(store, rows, questions, "chunk:questions")
        echo(f"situate eval: questions from {questions}: {extra}")
        lists["questions-bm25"] = ev.bm25_rankings([qmap[i] for i in ids], ids, qtexts)
        qtext = [contextualized_text(qmap[r["chunk_id"]], r["text"], r["context"] or "") for r in rows]
        lists["questions-dense"] = ev.dense_rankings(qv, embed_with_cache(embedder, qtext, dcache)[0], ids)
    return lists, extra


def rerank_ranking(store, rows: list[dict], qs: list, lists: dict[str, list[list[str]]], depth: int) -> list[list[str]]:
    """The cross-encoder's order of today's search's top ``depth`` (``dense``, ``bm25`` and
    ``structure-bm25`` fused by RRF), per query: a ranking for ``fusion-cv`` to blend with the
    others, scores cached as ``contextual+rerank``'s."""
    from situate.pipelines.settings import reranker_from_env
    from situate.resources.models.reranker import rerank_passage
    from situate.resources.store.retrieval import fuse

    by_id = {r["chunk_id"]: r for r in rows}
    cache = RerankCache(store.root / "cache" / "rerank.json", reranker_from_env())
    out = []
    for n, q in enumerate(qs):
        head = [i for i, _ in fuse([lists["dense"][n], lists["bm25"][n], lists["structure-bm25"][n]], "rrf")][:depth]
        scores = cache.scores(q.query, [rerank_passage(by_id[i]["text"], by_id[i]["context"] or "") for i in head])
        out.append([head[j] for j in sorted(range(len(head)), key=lambda j: -scores[j])])
    cache.save()
    return out


#: The rankings of today's search (:func:`situate.resources.store.retrieval.hybrid_search`): the baseline
#: every fitted fusion is measured against.
TODAY = ("dense", "bm25", "structure-bm25")


def fusion_cv(
    store,
    rows: list[dict],
    qs: list,
    qv,
    embedder,
    dcache,
    questions: str | None,
    folds: int,
    repeats: int,
    echo=print,
    late: bool = False,
    rerank_depth: int = 0,
    sets: list[list[str]] | None = None,
    save_rankings: str | None = None,
) -> dict:
    """The ``fusion-cv`` configuration: the rankings of :func:`cv_rankings` (and, with
    ``rerank_depth``, :func:`rerank_ranking` as ``rerank``), then
    :func:`situate.evaluation.fusion_fit.fit_report` against today's search (:data:`TODAY`, equal weights,
    RRF k = 60), once for each set of rankings in ``sets`` (each with :data:`TODAY`'s three;
    default one set: every ranking of the run).  With ``save_rankings``, every ranking of the run
    is written there first (:func:`situate.evaluation.ranking_files.write_rankings`), to be fitted
    again, alone or with other sets (``benchmarks/fusion_pooled.py``), with no model.

    Returns
    -------
    dict
        The first set's :func:`situate.evaluation.fusion_fit.fit_report`, plus ``"sets"`` (``{label:
        report}`` for every set, the label naming the rankings added to today's) and
        ``"questions"`` (the counts of :func:`side_blurbs`) when ``questions`` is given.

    Raises
    ------
    ValueError
        A name in ``sets`` that is not a ranking of this run.
    """
    from situate.evaluation.fusion_fit import fit_report

    lists, extra = cv_rankings(store, rows, qs, qv, embedder, dcache, questions, late, echo)
    if rerank_depth:
        lists["rerank"] = rerank_ranking(store, rows, qs, lists, rerank_depth)
    by_id = {r["chunk_id"]: r for r in rows}
    keyed = {n: [_keys(by_id, x) for x in v] for n, v in lists.items()}
    if save_rankings:
        from situate.evaluation.ranking_files import write_rankings

        write_rankings(save_rankings, keyed, [q.query_id for q in qs], [q.golden for q in qs])
        echo(f"situate eval: fusion-cv: {len(keyed)} rankings of {len(qs)} queries written to {save_rankings}")
    reports = {}
    for names in sets or [list(lists)]:
        unknown = sorted(set(names) - set(lists))
        if unknown:
            raise ValueError(f"fusion-cv has no ranking {', '.join(unknown)} here: choose from {', '.join(lists)}")
        chosen = [n for n in lists if n in set(names) | set(TODAY)]
        label = " + ".join(n for n in chosen if n not in TODAY) or "today's three"
        echo(f"situate eval: fusion-cv: fitting {label} ({len(chosen)} rankings)")
        reports[label] = fit_report(
            {n: keyed[n] for n in chosen}, [q.golden for q in qs], dict.fromkeys(TODAY, 1), folds=folds, repeats=repeats
        )
    report = dict(next(iter(reports.values())))
    report["sets"] = reports
    if questions:
        report["questions"] = extra
    return report


def run_eval(*args, **kwargs) -> dict:
    """:func:`evaluate` with the caller's environment restored afterwards (the evaluation points
    ``SITUATE_HOME``, ``SITUATE_DOCS`` and ``DAGSTER_HOME`` at its own data folder while it runs)."""
    from situate.pipelines.settings import DATA_ENV, restored_env

    with restored_env(DATA_ENV + ("SITUATE_BLURBS_FILE",)):
        return evaluate(*args, **kwargs)


def evaluate(
    corpus: str,
    queries: str | None = None,
    configs: list[str] | None = None,
    home: str | None = None,
    fusions: list[str] | None = None,
    rerank_depth: int = RERANK_DEPTH,
    echo=print,
    blurbs: str | None = None,
    save_blurbs: str | None = None,
    questions: str | None = None,
    cv_folds: int = 5,
    cv_repeats: int = 10,
    late_chunking: bool = False,
    cv_rerank: bool = False,
    cv_sets: list[list[str]] | None = None,
    cv_save_rankings: str | None = None,
    verbose: bool = False,
    rechunk: bool = False,
) -> dict:
    """Ingest ``corpus`` and score each configuration on ``queries``.

    Parameters
    ----------
    corpus : str
        A cookbook-form corpus file (``codebase_chunks.json``) or a BEIR folder.
    queries : str, optional
        Query lines (:func:`situate.evaluation.metrics.load_queries`); a BEIR folder brings its own.
    configs : list of str, optional
        Default :data:`situate.evaluation.metrics.CONFIGS`.
    home : str, optional
        Data folder (default :func:`default_home`).
    fusions : list of str, optional
        Fusion methods to report for the hybrid configurations (default ``["rrf"]``); a method
        other than the first is reported as ``"<config> (<method>)"``.
    rerank_depth : int
        Candidates the cross-encoder reorders for ``contextual+rerank``.
    blurbs : str, optional
        A blurb file (:mod:`situate.contextual.blurb_files`): chunks it has blurbs for (same model file, same
        mode and prompt) take them from it with no LLM call; the model makes the rest.
    save_blurbs : str, optional
        Write the corpus's blurbs to this blurb file after the ingest.
    questions : str, optional
        A blurb file of the ``questions`` prompt (mode ``chunk:questions``): ``fusion-cv`` adds
        its rankings (BM25 over the questions, dense over structural context + questions + chunk).
    cv_folds, cv_repeats : int
        ``fusion-cv``'s folds and shuffles (:func:`situate.evaluation.fusion_fit.cross_validate`).
    late_chunking : bool
        ``fusion-cv`` adds a late-chunked dense ranking (:func:`late_chunked_rankings`).
    cv_rerank : bool
        ``fusion-cv`` adds the cross-encoder's order of the top ``rerank_depth``
        (:func:`rerank_ranking`).
    cv_sets : list of lists of str, optional
        ``fusion-cv`` fits each set of rankings (with today's three) apart (:func:`fusion_cv`).
    cv_save_rankings : str, optional
        ``fusion-cv`` writes every ranking it computed to this ranking file
        (:mod:`situate.evaluation.ranking_files`).
    verbose : bool
        The ingest prints Dagster's console log instead of a short line a progress step
        (:func:`situate.pipelines.operations.ingest`).
    rechunk : bool
        Ingest the corpus's documents without their labelled chunks, cut by the chunker at the
        settings' ``SITUATE_CHUNK_TOKENS`` / ``SITUATE_CODE_CHUNK_TOKENS``, and score a retrieved
        chunk as finding every labelled chunk it covers
        (:func:`situate.evaluation.metrics.covers`), so chunk sizes can be compared on the
        labelled queries.  A cookbook-form corpus file only; not with ``fusion-cv``.

    Returns
    -------
    dict
        ``{"configs": {name: {"pass@5", "pass@10", "pass@20", "failure@20", "mrr@10", "seconds",
        "model_calls"}}, "n_queries", "golden_ranks": {name: {query_id: [rank or None]}},
        "ingest", "blurb_quality", ...}``.

    Raises
    ------
    FileNotFoundError
        The corpus or the queries file does not exist.
    ValueError
        An unknown configuration or fusion, a malformed query line, or queries missing for a
        cookbook-form corpus.
    """
    from situate.pipelines.operations import ingest, prepare_env
    from situate.pipelines.settings import resources_from_env

    t_all = time.perf_counter()
    configs, fusions = _checked_options(configs, fusions)
    corpus_path = Path(corpus).expanduser()
    if not corpus_path.exists():
        raise FileNotFoundError(f"{corpus} does not exist")
    home_path = _eval_home(home, corpus_path)
    corpus_file, qs = _load_corpus(corpus_path, queries, home_path)
    spans = None
    if rechunk:
        if corpus_path.is_dir() or "fusion-cv" in configs:
            raise ValueError("--rechunk takes a cookbook-form corpus file and no fusion-cv")
        corpus_file, spans = rechunked_corpus(corpus_file, home_path)
    _check_recorded_docs(home_path, corpus_file)
    echo(f"situate eval: {len(qs)} queries; data folder {home_path}")
    # the evaluation's own Dagster instance, never the user's
    os.environ["DAGSTER_HOME"] = str(home_path / "dagster")
    _check_blurb_files(blurbs, questions, echo)
    summary = ingest(str(corpus_file), home=str(home_path), echo=echo, verbose=verbose)
    for line in summary.lines():
        echo(f"situate eval: ingest: {line}")
    prepare_env(str(home_path))
    res = resources_from_env(plain=True)
    store = res["store"]
    if save_blurbs:
        n_saved = write_blurb_file(store, res["llm"], save_blurbs)
        echo(f"situate eval: {n_saved} blurbs written to {save_blurbs}")
    run = _Run.start(store, res["embedder"], qs, home_path, echo, spans)
    ingest_calls = sum(v.get("model_calls", v.get("chunks", 0)) for v in summary.per_document.values())
    if "document-context" in configs:
        keys = sorted({r["document_key"] for r in run.rows})
        run.doc_blurbs, run.doc_calls = document_blurbs(store, res["llm"], keys, echo)
    if "blurb-ungrounded" in configs or "contextual-ungrounded" in configs:
        run.ungrounded = _ungrounded_blurbs(store, run.rows)
    for config in configs:
        if config not in ("contextual", "fusion-cv") + RERANKED:
            _score_config(run, config, fusions)
    reranked = [c for c in RERANKED if c in configs]
    contextual_top = {}
    if "contextual" in configs or reranked:
        contextual_top = _score_contextual(run, "contextual" in configs, fusions, ingest_calls + run.queries_embedded)
    if reranked:
        _score_reranked(run, reranked, fusions, contextual_top, rerank_depth)
    cv = None
    if "fusion-cv" in configs:
        depth = rerank_depth if cv_rerank else 0
        cv = _fit_fusion(run, questions, cv_folds, cv_repeats, late_chunking, depth, cv_sets, cv_save_rankings)
    files = {"blurbs": blurbs, "questions": questions}
    report = _report(
        run, corpus_path, queries, home_path, fusions, rerank_depth, summary, ingest_calls, res["llm"], files
    )
    report["seconds"] = round(time.perf_counter() - t_all, 1)
    report["markdown"] = report.pop("markdown")  # last, as before
    if cv is not None:
        report["fusion_cv"] = cv
        report["markdown"] += "\n\n" + _cv_markdown(cv)
    return report


def _fit_fusion(
    run: _Run, questions: str | None, folds: int, repeats: int, late: bool, rerank_depth: int, sets, save: str | None
) -> dict:
    """The ``fusion-cv`` configuration (:func:`fusion_cv`) on ``run``'s rows, its tables echoed."""
    t0 = time.perf_counter()
    cv = fusion_cv(
        run.store,
        run.rows,
        run.qs,
        run.qv,
        run.embedder,
        run.dcache,
        questions,
        folds,
        repeats,
        run.echo,
        late=late,
        rerank_depth=rerank_depth,
        sets=sets,
        save_rankings=save,
    )
    cv["seconds"] = round(time.perf_counter() - t0, 1)
    for line in _cv_markdown(cv).splitlines():
        run.echo(f"situate eval: {line}")
    return cv


def _checked_options(configs: list[str] | None, fusions: list[str] | None) -> tuple[list[str], list[str]]:
    """``(configs, fusions)`` with their defaults.

    Raises
    ------
    ValueError
        An unknown configuration or fusion, naming the choices.
    """
    from situate.resources.store.retrieval import FUSIONS

    configs = list(configs or ev.CONFIGS)
    fusions = list(fusions or ["rrf"])
    for c in configs:
        if c not in ev.CONFIGS + ev.EXTRA_CONFIGS:
            raise ValueError(f"unknown configuration {c!r}: choose from {', '.join(ev.CONFIGS + ev.EXTRA_CONFIGS)}")
    for f in fusions:
        if f not in FUSIONS:
            raise ValueError(f"unknown fusion {f!r}: choose from {', '.join(FUSIONS)}")
    return configs, fusions


def _eval_home(home: str | None, corpus_path: Path) -> Path:
    """The evaluation's local data folder (``home``, else :func:`default_home`), checked.

    Raises
    ------
    ValueError
        ``home`` (or ``$SITUATE_HOME`` when no ``home``) is an object-store URI.
    """
    from situate.pipelines.preflight import check_data_folder
    from situate.resources.store.objects import is_uri

    if is_uri(home) or (not home and is_uri(env("SITUATE_HOME"))):
        raise ValueError(
            "situate eval keeps its datasets in a local data folder: give --home a local path "
            "(the evaluation measures retrieval, not the store)"
        )
    return check_data_folder(Path(home).expanduser().resolve() if home else default_home(corpus_path))


def _load_corpus(corpus_path: Path, queries: str | None, home_path: Path) -> tuple[Path, list]:
    """``(corpus file to ingest, queries)``: a BEIR folder is written as one corpus file in the
    data folder (rewritten only when it changed) and brings its queries unless ``queries`` is given.

    Raises
    ------
    FileNotFoundError
        The queries file does not exist.
    ValueError
        A corpus file without ``queries``, or no query with golden chunks.
    """
    if corpus_path.is_dir():
        beir_corpus, qs = ev.load_beir(corpus_path)
        corpus_file = home_path / f"{corpus_path.name}.corpus.json"
        data = json.dumps(beir_corpus, ensure_ascii=False)
        if not corpus_file.exists() or corpus_file.read_text(encoding="utf-8") != data:
            corpus_file.write_text(data, encoding="utf-8")
        if queries:
            qs = ev.load_queries(queries)
    else:
        if not queries:
            raise ValueError("a corpus file needs --queries FILE")
        if not Path(queries).expanduser().exists():
            raise FileNotFoundError(f"{queries} does not exist")
        corpus_file = corpus_path.resolve()
        qs = ev.load_queries(Path(queries).expanduser())
    if not qs:
        raise ValueError(f"no queries with golden chunks in {queries or corpus_path}")
    return corpus_file, qs


def rechunked_corpus(corpus_file: Path, home_path: Path) -> tuple[Path, dict]:
    """The corpus file without its labelled chunks (written to ``home_path`` only when it
    changed), and each labelled chunk's span in its document.

    Returns
    -------
    (Path, dict)
        The file to ingest, and ``{(doc_id, original_index): (doc_id, start, end)}`` with
        ``start``/``end`` UTF-8 byte offsets in the document's ``content`` (the unit of the table's
        ``start_byte``/``end_byte``).

    Raises
    ------
    ValueError
        An entry without ``content``, or a labelled chunk that is not a substring of it.
    """
    from situate.contextual.chunking import locate

    entries = json.loads(corpus_file.read_text(encoding="utf-8"))
    spans, out = {}, []
    for e in entries:
        text, doc_id = e.get("content"), str(e.get("doc_id"))
        if not isinstance(text, str):
            raise ValueError(f"{corpus_file}: document {doc_id} has no content")
        chunks = sorted(e.get("chunks") or [], key=lambda c: int(c.get("original_index", 0)))
        try:
            located = locate(text, [c["content"] for c in chunks])
        except ValueError as err:
            raise ValueError(f"{corpus_file}: document {doc_id}: {err}") from None
        for c, (a, b) in zip(chunks, located):
            start = len(text[:a].encode("utf-8"))
            spans[(doc_id, int(c.get("original_index", 0)))] = (doc_id, start, start + len(text[a:b].encode("utf-8")))
        out.append({**e, "chunks": None})
    target = home_path / f"{corpus_file.name.split('.')[0]}.rechunked.json"
    data = json.dumps(out, ensure_ascii=False)
    if not target.exists() or target.read_text(encoding="utf-8") != data:
        target.write_text(data, encoding="utf-8")
    return target, spans


def _check_recorded_docs(home_path: Path, corpus_file: Path) -> None:
    """Refuse a data folder that holds another corpus (the ingest would delete its rows).

    Raises
    ------
    ValueError
        Naming both corpora.
    """
    recorded = home_path / "docs-root"
    if recorded.exists() and recorded.read_text().strip() not in ("", str(corpus_file)):
        raise ValueError(
            f"{home_path} is the data folder of {recorded.read_text().strip()}, not of "
            f"{corpus_file}: an evaluation would delete its rows. Use another --home."
        )


def _check_blurb_files(blurbs: str | None, questions: str | None, echo) -> None:
    """Point the ingest at the blurb file ``blurbs`` (``SITUATE_BLURBS_FILE``, an override).

    Raises
    ------
    FileNotFoundError
        ``blurbs`` or ``questions`` is not a file.
    """
    if blurbs:
        if not Path(blurbs).expanduser().is_file():
            raise FileNotFoundError(f"blurb file {blurbs} does not exist")
        override("SITUATE_BLURBS_FILE", str(Path(blurbs).expanduser().resolve()))
        echo(f"situate eval: blurbs from {blurbs} where it has them (no LLM call for those)")
    if questions and not Path(questions).expanduser().is_file():
        raise FileNotFoundError(f"questions blurb file {questions} does not exist")


def _ungrounded_blurbs(store, rows: list[dict]) -> dict[str, str]:
    """Each chunk's blurb cleaned but not checked against its document: ``{chunk_id: text}``."""
    from situate.contextual.cleaning import clean_blurb

    out = {}
    for key in {r["document_key"] for r in rows}:
        chunk_list = store.read_stage(key, "chunks")["chunks"]
        for c, b in zip(chunk_list, store.read_stage(key, "blurbs")["blurbs"]):
            out[c["chunk_id"]] = clean_blurb(b["raw"], c["text"]).text
    return out


def _cv_markdown(cv: dict) -> str:
    """``fusion-cv``'s tables: the first set's fit, then every set's."""
    from situate.evaluation.fusion_fit import markdown, sets_markdown

    return markdown(cv) + "\n\n" + sets_markdown(cv["sets"])


@dataclasses.dataclass
class _Run:
    """One evaluation's table rows (sorted by chunk id), queries and their vectors, and the
    scores recorded so far (``results``, ``ranks``: in the order recorded, which the report keeps)."""

    store: object
    embedder: object
    qs: list
    rows: list[dict]
    qv: np.ndarray
    queries_embedded: int
    dcache: object
    echo: object
    spans: dict | None = None  # labelled chunks' byte spans when the corpus was re-chunked
    doc_blurbs: dict = dataclasses.field(default_factory=dict)
    doc_calls: int = 0
    ungrounded: dict = dataclasses.field(default_factory=dict)
    results: dict = dataclasses.field(default_factory=dict)
    ranks: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def start(cls, store, embedder, qs: list, home_path: Path, echo, spans: dict | None = None) -> _Run:
        """Read the table's rows and embed the queries (through the embedding cache); ``spans``:
        the labelled chunks' spans of a re-chunked corpus (:func:`rechunked_corpus`).

        Raises
        ------
        ValueError
            The table has no rows (every document failed).
        """
        from situate.resources.store.cache import embed_with_cache, embedding_cache_for

        rows = store.columns(
            ["chunk_id", "document_key", "doc_id", "chunk_index", "context", "blurb", "text", "start_byte", "end_byte"]
        ).to_pylist()
        if not rows:
            raise ValueError(
                f"the table of {home_path} has no rows: every document failed (see the FAILED lines above)"
            )
        rows.sort(key=lambda r: r["chunk_id"])
        known = spans or {(r["doc_id"], int(r["chunk_index"])) for r in rows}
        missing = sum(g not in known for q in qs for g in q.golden)
        if missing:
            echo(f"situate eval: warning: {missing} golden chunks are not in the table (failed documents?)")
        qv, q_new, _ = embed_with_cache(
            embedder, [q.query for q in qs], embedding_cache_for(store, embedder, query=True), query=True
        )
        return cls(store, embedder, qs, rows, qv, q_new, embedding_cache_for(store, embedder), echo, spans)

    @property
    def ids(self) -> list[str]:
        return [r["chunk_id"] for r in self.rows]

    @property
    def by_id(self) -> dict[str, dict]:
        return {r["chunk_id"]: r for r in self.rows}

    @property
    def qtexts(self) -> list[str]:
        return [q.query for q in self.qs]

    def texts(self, config: str) -> list[str]:
        """What configuration ``config`` embeds and BM25-indexes for each row."""
        from situate.resources.store.retrieval import contextualized_text

        rows = self.rows
        if config in ("chunk", "chunk+bm25"):
            return [r["text"] for r in rows]
        if config == "heuristic":
            return [contextualized_text("", r["text"], r["context"] or "") for r in rows]
        if config == "document-context":
            return [contextualized_text(self.doc_blurbs.get(r["document_key"], ""), r["text"]) for r in rows]
        if config in ("contextual-dense", "blurb"):
            return [contextualized_text(r["blurb"] or "", r["text"]) for r in rows]
        if config == "blurb-ungrounded":
            return [contextualized_text(self.ungrounded.get(r["chunk_id"], ""), r["text"]) for r in rows]
        if config == "contextual-ungrounded":
            return [
                contextualized_text(self.ungrounded.get(r["chunk_id"], ""), r["text"], r["context"] or "") for r in rows
            ]
        return [contextualized_text(r["blurb"] or "", r["text"], r["context"] or "") for r in rows]

    def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """``(vectors, texts embedded now)``, through the data folder's embedding cache."""
        from situate.resources.store.cache import embed_with_cache

        dv, n, _ = embed_with_cache(self.embedder, texts, self.dcache)
        return dv, n

    def record(self, name: str, ranked_ids: list[list[str]], seconds: float, calls: int) -> None:
        """Score one configuration's rankings (chunk ids, best first, one list per query)."""
        by_id = self.by_id
        if self.spans is None:
            keyed = [_keys(by_id, r) for r in ranked_ids]
            ranks = [ev.golden_ranks(k, q.golden) for q, k in zip(self.qs, keyed)]
            figures = ev.score(keyed, self.qs)
        else:  # a re-chunked corpus: a golden chunk is found by the first chunk that covers it
            golden = [[self.spans[g] for g in dict.fromkeys(q.golden)] for q in self.qs]
            ranks = [ev.covering_ranks(_spans(by_id, r), g) for r, g in zip(ranked_ids, golden)]
            figures = ev.score_ranks(ranks)
        self.results[name] = {**figures, "seconds": round(seconds, 2), "model_calls": calls}
        self.ranks[name] = {q.query_id: r for q, r in zip(self.qs, ranks)}
        r = self.results[name]
        self.echo(
            f"situate eval: {name:<28} Pass@5 {r['pass@5']:6.2f}  Pass@10 {r['pass@10']:6.2f}  "
            f"Pass@20 {r['pass@20']:6.2f}  failure@20 {r['failure@20']:6.2f}  MRR@10 {r['mrr@10']:.4f}"
        )


def _fused(lists: list[list[list[str]]], fusion: str = "rrf") -> list[list[str]]:
    """Per query, the rankings of ``lists`` (each one list per query) fused by ``fusion``."""
    from situate.resources.store.retrieval import fuse

    return [[i for i, _ in fuse(list(per_query), fusion)] for per_query in zip(*lists)]


def _score_config(run: _Run, config: str, fusions: list[str]) -> None:
    """Score one in-memory configuration (every one but ``contextual``, the reranked and ``fusion-cv``)."""
    t0 = time.perf_counter()
    ids, qtexts = run.ids, run.qtexts
    if config in ("contextual+structural-bm25", "ensemble"):
        ctx_texts = run.texts("contextual")
        dv_ctx, n = run.embed(ctx_texts)
        lists = [ev.dense_rankings(run.qv, dv_ctx, ids), ev.bm25_rankings(ctx_texts, ids, qtexts)]
        if config == "ensemble":
            dv_chunk, n2 = run.embed(run.texts("chunk"))
            lists.append(ev.dense_rankings(run.qv, dv_chunk, ids))
            n += n2
        else:
            lists.append(ev.bm25_rankings(run.texts("heuristic"), ids, qtexts))
        # three rankings: RRF only (the cookbook's weights are for two)
        run.record(config, _fused(lists), time.perf_counter() - t0, n)
        return
    texts = run.texts(config)
    dv, n_embedded = run.embed(texts)
    dense = ev.dense_rankings(run.qv, dv, ids)
    calls = n_embedded + (run.doc_calls if config == "document-context" else 0)
    if config in ("chunk", "contextual-dense"):
        run.record(config, dense, time.perf_counter() - t0, calls)
        return
    sparse = ev.bm25_rankings(texts, ids, qtexts)
    for f in fusions:
        name = config if f == fusions[0] else f"{config} ({f})"
        run.record(name, _fused([dense, sparse], f), time.perf_counter() - t0, calls)


def _score_contextual(run: _Run, record: bool, fusions: list[str], calls: int) -> dict[str, list[list[str]]]:
    """``situate search``'s own top :data:`situate.evaluation.metrics.DEPTH` per query and fusion
    (``{fusion: [[chunk_id, ...] per query]}``), recorded as ``contextual`` when ``record``."""
    from situate.resources.store.retrieval import hybrid_search

    contextual_top = {}
    for f in fusions:
        t0 = time.perf_counter()
        top = []
        for i, q in enumerate(run.qtexts):
            code_vector = run.embedder.code_query_vector(run.qv[i])  # a missing map fails the eval: it measures it
            hits, _ = hybrid_search(run.store, run.qv[i], q, k=ev.DEPTH, fusion=f, code_vector=code_vector)
            top.append([h.chunk_id for h in hits])
        contextual_top[f] = top
        if record:
            run.record("contextual" if f == fusions[0] else f"contextual ({f})", top, time.perf_counter() - t0, calls)
    return contextual_top


def _score_reranked(run: _Run, reranked: list[str], fusions: list[str], contextual_top: dict, depth: int) -> None:
    """Score the reranked configurations: ``contextual``'s top ``depth`` reordered by the local
    cross-encoder (scores cached in the data folder), fused with the first stage or replacing it."""
    from situate.pipelines.settings import reranker_from_env
    from situate.resources.models.reranker import rerank_order, rerank_passage

    score_cache = RerankCache(run.store.root / "cache" / "rerank.json", reranker_from_env())
    by_id = run.by_id
    for config in reranked:
        how = "replace" if config.endswith("-replace") else "rrf"
        with_blurb = config.endswith("-blurb")
        for f in fusions:
            t0 = time.perf_counter()
            before = score_cache.computed
            out = []
            for q, top in zip(run.qtexts, contextual_top[f]):
                head, tail = top[:depth], top[depth:]
                passages = [
                    rerank_passage(by_id[i]["text"], by_id[i]["context"] or "", by_id[i]["blurb"] or "", with_blurb)
                    for i in head
                ]
                scores = score_cache.scores(q, passages)
                if score_cache.computed - before and (score_cache.computed - before) % 500 < len(head):
                    score_cache.save()  # keep work done if the run is stopped
                out.append([head[j] for j, _ in rerank_order(scores, how)] + tail)
            score_cache.save()
            name = config if f == fusions[0] else f"{config} ({f})"
            run.record(name, out, time.perf_counter() - t0, score_cache.computed - before)


def _report(
    run: _Run, corpus_path, queries, home_path, fusions, rerank_depth, summary, ingest_calls, llm, files: dict
) -> dict:
    """The report :func:`evaluate` returns, less its ``seconds`` and ``fusion_cv``; ``files`` are
    the blurb files given (``{"blurbs": path or None, "questions": path or None}``), named with
    their sha256."""
    from situate.resources.store.cache import file_sha256

    keys = sorted({r["document_key"] for r in run.rows})
    return {
        "corpus": str(corpus_path),
        "queries_file": str(queries) if queries else None,
        "data_folder": str(home_path),
        "n_queries": len(run.qs),
        "n_chunks": len(run.rows),
        "configs": dict(run.results),
        "golden_ranks": run.ranks,
        "fusions": fusions,
        "rerank_depth": rerank_depth,
        "ingest": {
            "documents": summary.documents,
            "ingested": summary.ingested,
            "failed": summary.failed,
            "llm_calls": ingest_calls,
            "prompt_tokens_evaluated": summary.prompt_tokens_evaluated,
            "prompt_tokens_reused": (
                summary.prompt_tokens_reused
                if summary.model_calls_reuse_not_reported < summary.model_calls or not summary.model_calls
                else "not reported by this server"
            ),
            "llm_seconds": round(summary.llm_seconds, 1),
            "blurbs_from_cache": summary.blurbs_from_cache,
            "seconds": round(summary.seconds, 1),
        },
        "context_mode": llm.context,
        "code_context_mode": llm.code_context,
        "prompt": llm.prompt,
        "files": {
            name: {"path": str(f), "sha256": file_sha256(Path(f).expanduser())} for name, f in files.items() if f
        },
        "llm_model": llm.resolved_model_id(),
        "document_summaries": {"llm_calls": run.doc_calls, "empty": sum(1 for v in run.doc_blurbs.values() if not v)},
        "blurb_quality": blurb_quality(run.store, keys),
        "markdown": ev.markdown_table(dict(run.results), len(run.qs)),
    }


class RerankCache:
    """Cross-encoder scores by sha256 of (model and tokenizer file sha256, pair and query lengths,
    batch size, query, passage), in one JSON file.  The batch size is in the key because the INT8
    model quantises activations per batch: a pair's logit moves slightly with its batch-mates."""

    def __init__(self, path: Path, reranker):
        from situate.resources.models.reranker import MAX_PAIR_TOKENS, MAX_QUERY_TOKENS
        from situate.resources.store.cache import file_sha256

        self.path = Path(path)
        self.reranker = reranker
        self.model = [
            file_sha256(reranker.model_path),
            file_sha256(reranker.tokenizer_path),
            MAX_PAIR_TOKENS,
            MAX_QUERY_TOKENS,
            reranker.batch_size,
        ]
        try:
            self.data = json.loads(self.path.read_text()) if self.path.exists() else {}
        except (ValueError, OSError):
            self.data = {}  # a damaged cache is rebuilt, never trusted
        self.computed = 0

    def scores(self, query: str, passages: list[str]) -> list[float]:
        from situate.resources.store.cache import digest

        keys = [digest(self.model, query, p) for p in passages]
        todo = [j for j, k in enumerate(keys) if k not in self.data]
        if todo:
            new = self.reranker.score(query, [passages[j] for j in todo])
            for j, s in zip(todo, new):
                self.data[keys[j]] = float(s)
            self.computed += len(todo)
        return [self.data[k] for k in keys]

    def save(self) -> None:
        from situate.resources.store.store import write_json_atomic

        write_json_atomic(self.path, self.data)
