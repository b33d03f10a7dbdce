"""The ``situate`` command line: models, ingest, search, eval, demo, dev.

Examples
--------
::

    situate models install
    situate ingest ~/notes
    situate search "how do I rotate the keys?" -k 5 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path


def _prepare_env(home: str | None, docs: str | None = None) -> None:
    if home:
        os.environ["SITUATE_HOME"] = str(Path(home).expanduser().resolve())
    if docs:
        os.environ["SITUATE_DOCS"] = str(Path(docs).expanduser().resolve())
    from pipelines.settings import ensure_dagster_home
    from resources import models

    ensure_dagster_home()
    models.use_offline_tiktoken()


@dataclasses.dataclass
class IngestSummary:
    """What ``situate ingest`` did."""

    documents: int = 0
    ingested: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: dict = dataclasses.field(default_factory=dict)
    chunks: int = 0
    blurbs_from_model: int = 0
    model_calls: int = 0
    blurbs_from_cache: int = 0
    blurb_fallbacks: int = 0
    blurbs_skipped: int = 0
    table_rows: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_tokens_reused: int = 0
    llm_seconds: float = 0.0
    seconds: float = 0.0
    per_document: dict = dataclasses.field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"documents: {self.documents} ({self.ingested} ingested, {self.unchanged} unchanged, "
               f"{self.removed} removed, {len(self.failed)} failed)",
               f"chunks ingested: {self.chunks}; LLM calls: {self.model_calls}, blurbs from the cache: "
               f"{self.blurbs_from_cache}; usable blurbs: {self.blurbs_from_model}, "
               f"fallbacks to the chunk alone: {self.blurb_fallbacks}"
               + (f", skipped (large documents): {self.blurbs_skipped}" if self.blurbs_skipped else ""),
               f"prompt tokens evaluated: {self.prompt_tokens_evaluated:,}, reused from the KV cache: "
               f"{self.prompt_tokens_reused:,}",
               f"table rows: {self.table_rows}; LLM time {self.llm_seconds:.1f} s"
               + (f" ({self.chunks / self.llm_seconds:.2f} blurbs/s)" if self.llm_seconds else "")
               + f"; wall time {self.seconds:.1f} s"]
        for key, reason in self.failed.items():
            out.append(f"FAILED {key}: {reason}")
        return out


def ingest(path: str, home: str | None = None, echo=print, replace: bool = False) -> IngestSummary:
    """Sync ``path`` (a folder or a corpus file) with Dagster and materialise new and changed
    documents, then the BM25 index.  Same assets, same instance as ``dagster dev``.

    ``replace``: the data folder may hold another docs folder's documents; they are replaced.

    Raises
    ------
    pipelines.preflight.StartupError
        ``path`` does not exist, the data folder is not writable or is a folder of the user's, it
        holds another docs folder's documents and ``replace`` is false, a model file is missing or
        corrupt (one line each; see :mod:`pipelines.preflight`).
    """
    import dagster as dg

    from pipelines.preflight import check_data_folder, check_docs, check_same_docs, preflight

    from assets.blurbs import blurb_summary
    from assets.contextualize import BlurbRecord
    from assets.bm25_index import ids_match
    from pipelines.automation import RANGE_END, RANGE_START, apply_to_instance, plan_for, reap_dead_runs
    from pipelines.definitions import build_definitions
    from pipelines.settings import resources_from_env
    from pipelines.sync import contiguous_ranges

    t0 = time.perf_counter()
    docs_path = check_docs(path)
    home_path = check_data_folder(home or os.environ.get("SITUATE_HOME") or ".situate")
    check_same_docs(home_path, docs_path, replace)
    _prepare_env(home, path)
    from pipelines.settings import record_docs_root

    record_docs_root(path)
    res = resources_from_env(plain=True)
    store = res["store"]
    for warning in preflight(None, res, store.root):
        echo(f"situate: warning: {warning}")
    defs = build_definitions(plain=True)
    instance = dg.DagsterInstance.get()
    reap_dead_runs(instance, log=lambda m: echo(f"situate: {m}"))
    plan, fp = plan_for(instance, res["docs"], store, res["llm"], res["embedder"], res["chunking"])
    summary = IngestSummary(documents=len(plan.refs), unchanged=len(plan.fresh), removed=len(plan.removed))
    echo(f"situate: {len(plan.refs)} documents in {res['docs'].root}; {len(plan.added)} new, "
         f"{len(plan.stale)} to ingest, {len(plan.fresh)} unchanged, {len(plan.removed)} removed"
         + (f", {len(plan.known_bad)} bad and unchanged since" if plan.known_bad else ""))
    order = apply_to_instance(instance, store, plan)
    for key, why in plan.invalid.items():
        echo(f"situate: warning: partition {key!r} left alone (not deleted, not run): {why}")
    for key, reason in plan.known_bad.items():
        summary.failed[key] = f"{reason} (unchanged since it failed)"
    job = defs.resolve_job_def("ingest")
    run_config = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
    for first, last in contiguous_ranges(order, plan.stale):
        keys = order[order.index(first): order.index(last) + 1]
        echo(f"situate: run over {len(keys)} document(s): {first} … {last}")
        if first == last:
            result = job.execute_in_process(instance=instance, partition_key=first, run_config=run_config,
                                            raise_on_error=False)
        else:
            result = job.execute_in_process(instance=instance, run_config=run_config, raise_on_error=False,
                                            tags={RANGE_START: first, RANGE_END: last})
        if not result.success:
            reason = next((str(ev.event_specific_data.error.message).strip().splitlines()[-1]
                           for ev in result.all_events if ev.is_step_failure), "see the run's log")
            echo(f"situate: run {result.run_id} failed: {reason}")
            for key in keys:
                summary.failed.setdefault(key, f"run {result.run_id} failed: {reason}")
    if plan.stale or plan.removed or not ids_match(store)[0]:
        defs.resolve_job_def("bm25").execute_in_process(instance=instance, run_config=run_config,
                                                        raise_on_error=False)
    for key in plan.stale:
        err = None
        for stage in ("document", "chunks", "preambles", "blurbs", "embeddings"):
            p = store.stage_path(key, stage)
            if p.exists():
                d = json.loads(p.read_text())
                if isinstance(d, dict) and d.get("error") and not d.get("upstream"):
                    err = f"{stage}: {d['error']}"
                    break
        if err:
            summary.failed[key] = err
            continue
        if key in summary.failed:  # its run failed as a whole
            continue
        p = store.stage_path(key, "blurbs")
        if not p.exists():
            continue
        recs = [BlurbRecord(**{k: v for k, v in b.items() if k != "chunk_id"})
                for b in json.loads(p.read_text())["blurbs"]]
        s = blurb_summary(recs)
        summary.per_document[key] = s
        summary.ingested += 1
        summary.chunks += s["chunks"]
        summary.blurbs_from_model += s["blurbs_from_model"]
        summary.model_calls += s["model_calls"]
        summary.blurbs_from_cache += s["cached"]
        summary.blurb_fallbacks += s["fallbacks"]
        summary.blurbs_skipped += s.get("skipped", 0)
        summary.prompt_tokens_evaluated += s["prompt_tokens_evaluated"]
        summary.prompt_tokens_reused += s["prompt_tokens_reused"]
        summary.llm_seconds += s["llm_seconds"]
    summary.table_rows = store.count_rows()
    summary.seconds = time.perf_counter() - t0
    return summary


class QueryError(ValueError):
    """A search the CLI answers with one line and exit status 2 (empty query, bad ``k``)."""


#: Largest ``-k`` (and ``--rerank``) a search takes: LanceDB limits are 64-bit, and a larger
#: number was a traceback.
MAX_K = 1_000_000


def search(query: str, k: int = 10, home: str | None = None, rerank: int | None = None):
    """Hybrid search of the data folder (see :func:`resources.retrieval.hybrid_search`), then the
    first stage's top ``rerank`` reranked by the local cross-encoder, its order fused with the
    first stage's (:func:`resources.reranker.rerank_hits`).

    Parameters
    ----------
    rerank : int or None
        Candidates reranked; ``None`` means ``SITUATE_RERANK_DEPTH`` or 0
        (:data:`resources.reranker.SEARCH_RERANK_DEPTH`: no rerank).  About 0.06-0.08 s a candidate on 2
        CPU cores (``benchmarks/run.py --only rerank``).

    Returns
    -------
    (hits, warnings)
        At most ``k`` hits; warnings for an empty table, a query cut for the embedder, a query
        with no BM25 terms (stopwords only), ``k`` above the row count, a reranker not installed
        (the first stage's order is kept).

    Raises
    ------
    QueryError
        The query is empty or whitespace, ``k`` < 1 or ``rerank`` < 0.
    pipelines.preflight.StartupError
        The data folder does not exist or is not a folder; ``SITUATE_RERANK_DEPTH`` is not a
        whole number ≥ 0; the table's vectors are not the embedder's width (an ingest with
        another embedder is under way, :meth:`resources.store.Store.migration`).
    """
    from pipelines.settings import rerank_depth_from_env, reranker_from_env, resources_from_env
    from resources.reranker import rerank_hits
    from resources.retrieval import hybrid_search

    if not query or not query.strip():
        raise QueryError("empty query: give the words to search for")
    if k < 1:
        raise QueryError(f"-k must be at least 1, got {k}")
    if k > MAX_K:
        raise QueryError(f"-k must be at most {MAX_K:,}, got {k}")
    if rerank is not None and rerank > MAX_K:
        raise QueryError(f"--rerank must be at most {MAX_K:,}, got {rerank}")
    if rerank is not None and rerank < 0:
        raise QueryError(f"--rerank must be 0 (off) or more, got {rerank}")
    from pipelines.preflight import StartupError

    if rerank is None:
        rerank = rerank_depth_from_env()

    root = Path(home or os.environ.get("SITUATE_HOME") or ".situate").expanduser().resolve()
    if not root.is_dir():  # never create a folder a search was pointed at by mistake
        what = "is not a folder" if root.exists() else "does not exist"
        raise StartupError(f"data folder {root} {what}: run `situate ingest PATH` first, or give the "
                           "--home you ingested into")
    _prepare_env(home)
    res = resources_from_env(plain=True)
    store = res["store"]
    rows = store.count_rows()
    if rows == 0:
        return [], [f"the table in {store.root} is empty: run `situate ingest PATH` first"]
    embedder = res["embedder"]
    vecs, n_cut = embedder.embed([query], embedder.query_prefix)
    table_dim = store.table().schema.field("vector").type.list_size
    if vecs.shape[1] != table_dim:
        migration = store.migration()
        under_way = (f" ({migration['documents_done']} documents embedded again, "
                     f"{migration['documents_waiting']} to go)" if migration else "")
        raise StartupError(f"the table in {store.root} holds {table_dim}-wide vectors and the embedder "
                           f"{embedder.resolved_model_id()} writes {vecs.shape[1]}-wide ones{under_way}: "
                           "finish `situate ingest` with this embedder, or set SITUATE_EMBED_MODEL back")
    hits, warnings = hybrid_search(store, vecs[0], query, max(k, rerank))
    if n_cut:
        warnings.append(f"the query is longer than the embedder's {embedder.n_ctx} tokens: "
                        "its end was cut for the dense search (BM25 used all of it)")
    if k > rows:
        warnings.append(f"-k {k} is more than the {rows} rows in the table: every row can be returned")
    if rerank > 0 and hits:
        try:
            hits = rerank_hits(reranker_from_env(), query, hits, rerank)
        except FileNotFoundError as e:  # the reranker is not installed: answer from the first stage
            warnings.append(f"no reranker at {e.filename}: first-stage order kept (run `situate models "
                            "install`, or --rerank 0 to silence this)")
    return hits[:k], warnings


def _print_hits(hits, as_json: bool) -> None:
    if as_json:
        print(json.dumps([h.to_json() for h in hits], ensure_ascii=False, indent=2))
        return
    for h in hits:
        text = " ".join(h.text.split())
        print(f"{h.rank:>2}. {h.source} #{h.chunk_index}  (score {h.score:.4f})")
        if h.blurb:
            print(f"    context: {h.blurb[:200]}")
        print(f"    {text[:240]}{'…' if len(text) > 240 else ''}")


class _Parser(argparse.ArgumentParser):
    """argparse with the command's own one-line refusal (``situate: error: …``, exit status 2)
    instead of the usage block; ``--help`` still shows the usage."""

    def error(self, message: str):
        print(f"situate: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``situate`` command; returns the exit status."""
    parser = _Parser(prog="situate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_models = sub.add_parser("models", help="install, list or check the local models")
    p_models.add_argument("action", choices=["install", "list", "check"])
    p_models.add_argument("names", nargs="*", metavar="NAME",
                          help="blurb models to install besides the defaults (see `situate models list`)")
    p_ingest = sub.add_parser("ingest", help="ingest a folder or a corpus file")
    p_ingest.add_argument("path")
    p_ingest.add_argument("--home", help="data folder (default $SITUATE_HOME or ./.situate)")
    p_ingest.add_argument("--json", metavar="OUT", help="write the summary as JSON to OUT "
                          "(exit status 1 when any document failed)")
    p_ingest.add_argument("--replace", action="store_true",
                          help="the data folder holds another docs folder's documents: replace them")
    p_search = sub.add_parser("search", help="hybrid search (dense + BM25, RRF), optionally reranked by "
                              "the local cross-encoder")
    p_search.add_argument("query")
    p_search.add_argument("-k", type=int, default=10)
    p_search.add_argument("--json", action="store_true")
    p_search.add_argument("--home")
    p_search.add_argument("--rerank", type=int, default=None, metavar="N",
                          help="candidates the local cross-encoder reranks (default $SITUATE_RERANK_DEPTH "
                          "or 0, off; 30 is the measured depth; about 0.06-0.08 s a candidate on 2 CPU cores)")
    p_demo = sub.add_parser("demo", help="ingest the demo corpus and run example searches")
    p_demo.add_argument("--home")
    p_demo.add_argument("--replace", action="store_true",
                        help="the data folder holds another docs folder's documents: replace them")
    p_eval = sub.add_parser("eval", help="retrieval quality: ingest an evaluation corpus, score every "
                            "configuration (Pass@5/10/20, failure@20, MRR@10)")
    p_eval.add_argument("--corpus", required=True, help="cookbook-form corpus JSON, or a BEIR folder")
    p_eval.add_argument("--queries", help="query lines {query_id, query, golden: [[doc_id, chunk_index]]}")
    p_eval.add_argument("--configs", help="comma-separated (default: all of "
                        "chunk,chunk+bm25,heuristic,contextual-dense,blurb,contextual,contextual+rerank)")
    p_eval.add_argument("--fusion", default="rrf", help="comma-separated fusion methods: rrf, weighted "
                        "(the first is the one reported under the plain name)")
    p_eval.add_argument("--rerank-depth", type=int, default=None, help="candidates the reranker reorders")
    p_eval.add_argument("--home", help="data folder (default $SITUATE_HOME/eval/<corpus name>)")
    p_eval.add_argument("--json", metavar="OUT", help="write the figures and each query's golden ranks to OUT")
    p_eval.add_argument("--markdown", metavar="OUT", help="write the table as Markdown to OUT")
    sub.add_parser("dev", help="dagster dev on this project's workspace, with the data folder's instance")
    args = parser.parse_args(argv)
    from pipelines.preflight import StartupError
    from resources.models import ModelFileError

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(out), EscapingStream(err)
    try:
        return _run(args)
    except (StartupError, ModelFileError) as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    finally:
        sys.stdout, sys.stderr = out, err


#: Characters never written raw to a terminal: C0 and C1 controls but newline and tab (ESC starts
#: terminal escape sequences: hidden text, clipboard writes by OSC 52), and the Unicode bidi
#: overrides and isolates that reorder what is shown.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with every terminal control character written as ``\\uXXXX`` (also valid inside a
    JSON string), so a document's text or file name cannot drive the terminal.

    Examples
    --------
    >>> escape_controls("a\x1b[8mhidden")
    'a\\u001b[8mhidden'
    """
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class EscapingStream:
    """A text stream that escapes control characters (:func:`escape_controls`) in everything the
    ``situate`` command prints: hits, blurbs, file names in failure lines, Dagster's log lines."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(escape_controls(text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _run(args) -> int:
    """Carry out a parsed ``situate`` command; returns the exit status."""

    if args.command == "models":
        from resources import models

        if args.action == "install":
            try:
                models.install(names=args.names)
            except models.ModelInstallError as e:
                print(f"situate: error: {e}".splitlines()[0], file=sys.stderr)
                return 2
            return 0
        if args.action == "list":
            current = models.resolve_llm(os.environ.get("SITUATE_LLM_MODEL"))[0]
            print(f"{'name':<36} {'role':<19} {'size':>9} {'licence':<11} installed")
            for r in models.listing():
                mark = " (in use)" if r["role"] == "blurb LLM" and r["path"] == current else ""
                print(f"{r['name']:<36} {r['role']:<19} {r['size'] / 1e6:>6,.0f} MB {r['licence']:<11} "
                      f"{'yes' if r['installed'] else 'no'}{' (default)' if r['default'] else ''}{mark}")
            return 0
        bad = [m.key for m in models.DEFAULTS if not models.is_installed(m)]
        print("all models present and verified" if not bad else f"missing or corrupt: {', '.join(bad)}")
        return 1 if bad else 0
    if args.command == "ingest":
        summary = ingest(args.path, args.home, replace=args.replace)
        for line in summary.lines():
            print(f"situate: {line}")
        if args.json:
            Path(args.json).write_text(json.dumps(dataclasses.asdict(summary), indent=2))
        return 1 if summary.failed else 0
    if args.command == "search":
        try:
            hits, warnings = search(args.query, args.k, args.home, args.rerank)
        except QueryError as e:
            print(f"situate: error: {e}", file=sys.stderr)
            return 2
        for w in warnings:
            print(f"situate: warning: {w}", file=sys.stderr)
        _print_hits(hits, args.json)
        return 0
    if args.command == "eval":
        from pipelines.evaluate import RERANK_DEPTH, run_eval

        try:
            report = run_eval(args.corpus, args.queries,
                              [c.strip() for c in args.configs.split(",")] if args.configs else None,
                              args.home, [f.strip() for f in args.fusion.split(",")],
                              args.rerank_depth if args.rerank_depth is not None else RERANK_DEPTH)
        except (FileNotFoundError, ValueError) as e:
            print(f"situate eval: error: {e}", file=sys.stderr)
            return 2
        print(report["markdown"])
        print("blurb quality (% of chunk blurbs): " + ", ".join(f"{k} {v}" for k, v in report["blurb_quality"].items()))
        print(f"situate eval: {report['seconds']:.1f} s in all")
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2))
        if args.markdown:
            Path(args.markdown).write_text(report["markdown"] + "\n")
        return 0
    if args.command == "demo":
        from pipelines.demo import run_demo

        return run_demo(args.home, args.replace)
    if args.command == "dev":
        _prepare_env(None)
        root = Path(__file__).resolve().parent.parent
        os.execv(sys.executable, [sys.executable, "-m", "dagster", "dev", "-w", str(root / "workspace.yaml")])
    return 2


if __name__ == "__main__":
    sys.exit(main())
