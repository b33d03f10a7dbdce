"""The ``situate`` command line: models, ingest, sync, search, eval, demo, dev.

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
import sys
import warnings
from pathlib import Path

from situate.pipelines.operations import (  # noqa: F401
    MAX_K,
    IngestSummary,
    QueryError,
    ingest,
    prepare_env,
    search,
    search_collections,
)
from situate.pipelines.output import EscapingStream, escape_controls, print_hits  # noqa: F401
from situate.resources.settings import DEFAULT_HOME, env


class _Parser(argparse.ArgumentParser):
    """argparse with the command's own one-line refusal (``situate: error: …``, exit status 2)
    instead of the usage block; ``--help`` still shows the usage."""

    def error(self, message: str):
        print(f"situate: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _bounded_int(lo: int, hi: int, flag: str):
    """An argparse type: an integer in ``lo..hi``; anything else is refused naming ``flag``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number from {lo} to {hi}, not {text!r}") from None
        if not lo <= n <= hi:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number from {lo} to {hi}, not {n}")
        return n

    return parse


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``situate`` command; returns the exit status (130 when interrupted by
    Ctrl-C or SIGTERM: one line, no traceback; what was finished is kept and the same command
    resumes; 141, 128 + SIGPIPE as a shell reports it, when standard output's reader went away,
    ``situate ingest --dry-run | head``: no traceback)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("situate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a shell's commands do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 141


def _main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from situate.pipelines.preflight import StartupError
    from situate.resources.errors import ListingError
    from situate.resources.models.registry import ModelFileError
    from situate.resources.store.objects import DataFolderURIError

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(out), EscapingStream(err)
    # a misspelt setting: one line, once, as the command's other warnings read (not Python's form)
    warnings.formatwarning = _setting_warning_line
    warnings.filterwarnings("once", message=r".* is not a situate setting", category=UserWarning)
    try:
        return _run(args)
    except (StartupError, ModelFileError, DataFolderURIError, ListingError) as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    finally:
        sys.stdout, sys.stderr = out, err


_PYTHON_WARNING_LINE = warnings.formatwarning


def _setting_warning_line(message, category, filename, lineno, line=None) -> str:
    """A misspelt setting's warning as one line (``situate: warning: …``); any other warning as
    Python writes it."""
    if "is not a situate setting" in str(message):
        return f"situate: warning: {message}\n"
    return _PYTHON_WARNING_LINE(message, category, filename, lineno, line)


def _parser() -> _Parser:
    """The ``situate`` command line: one subcommand per action."""
    parser = _Parser(prog="situate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_models(sub)
    _add_ingest(sub)
    _add_sync(sub)
    _add_search(sub)
    _add_demo(sub)
    _add_eval(sub)
    _add_eval_fusion_cv(sub.choices["eval"])
    _add_servers(sub)
    return parser


def _add_models(sub) -> None:
    """``situate models install|list|check [NAME ...]``."""
    p_models = sub.add_parser("models", help="install, list or check the local models")
    p_models.add_argument("action", choices=["install", "list", "check"])
    p_models.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="blurb models or embedders to install besides the defaults (see `situate models list`)",
    )


def _add_ingest(sub) -> None:
    """``situate ingest PATH``."""
    p_ingest = sub.add_parser(
        "ingest",
        help="ingest a folder or a corpus file",
        description="Ingest a folder (in a git working tree: what git tracks or does not ignore, "
        "less .situateignore and --exclude, plus --include) or a corpus file into the data folder.",
        epilog=INGEST_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_ingest.add_argument("path", help="the docs folder, or a corpus file")
    p_ingest.add_argument(
        "--include",
        action="append",
        metavar="GLOB",
        help="also read files matching this gitignore-style glob although git ignores them or they "
        "are hidden (repeat for several; adds to $SITUATE_INCLUDE)",
    )
    p_ingest.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="do not read files matching this gitignore-style glob (repeat for several; adds to "
        "$SITUATE_EXCLUDE; wins over --include)",
    )
    p_ingest.add_argument("--home", help="data folder (default $SITUATE_HOME or ./.situate)")
    p_ingest.add_argument(
        "--json", metavar="OUT", help="write the summary as JSON to OUT (exit status 1 when any document failed)"
    )
    p_ingest.add_argument(
        "--replace", action="store_true", help="the data folder holds another docs folder's documents: replace them"
    )
    p_ingest.add_argument(
        "--allow-removal",
        action="store_true",
        help="remove the rows of documents gone from the folder even when most (or all) "
        "are gone (held otherwise, exit status 2: an unmounted share?)",
    )
    p_ingest.add_argument(
        "--estimate",
        action="store_true",
        help="count the LLM requests, prompt tokens and (a paid API) the cost an ingest of "
        "PATH would take, and (local models) predict its wall time: every document is read, "
        "chunked and fitted, the local models are timed on a sample, nothing is written",
    )
    p_ingest.add_argument(
        "--dry-run",
        action="store_true",
        help="list what an ingest of PATH would read, by top folder and kind (prose, code, other), "
        "with the LLM calls each folder would make, and every file it would skip with the reason: "
        "no model loaded, nothing written, seconds (--estimate adds the LLM seconds)",
    )
    _add_verbose(p_ingest)


#: What ``situate ingest``'s exit status means (its ``--help`` epilog; docs/using.md says the same).
INGEST_EXIT_CODES = """exit status:
  0    every document was ingested or is unchanged; files that are not documents (ignored,
       hidden, empty, of no known format) are skipped and counted, not failures
  1    some documents failed (each named by its path with the reason); the others are ingested
  2    nothing could run: a bad argument or setting, the docs or data folder, a model file, or a
       mass removal held (an unmounted share?)
  130  interrupted (Ctrl-C or SIGTERM): what was finished is kept; the same command resumes"""


def globs_override(name: str, given: list[str] | None) -> None:
    """Add the globs ``given`` on the command line to setting ``name`` (``SITUATE_INCLUDE`` or
    ``SITUATE_EXCLUDE``) for this process."""
    from situate.resources.settings import override

    if given:
        override(name, ",".join([g for g in (env(name),) if g] + given))


def _add_sync(sub) -> None:
    """``situate sync NAME [NAME ...]``: collections of the Dagster project in this folder, ingested."""
    p_sync = sub.add_parser(
        "sync",
        help="ingest collection NAME of the Dagster project in this folder (its sensor's work, done once, "
        "on $DAGSTER_HOME's instance); several names, one after the other, the models loaded once",
    )
    p_sync.add_argument("names", nargs="+", metavar="NAME", help="a collection's name (the `name` of its defs.yaml)")
    p_sync.add_argument("--project", default=".", help="the project's folder (default: this one)")
    _add_verbose(p_sync)


def _add_verbose(parser) -> None:
    """``--verbose``: Dagster's full console log instead of one short line a progress step."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print Dagster's full log of the runs (each document's lines) instead of one short "
        "line a progress step, warning and error",
    )


#: The help of ``--collection`` (search, serve, mcp).
COLLECTION_HELP = "search this collection (repeat for several: their hits are fused by RRF, each naming its collection)"


def collections_of(given: list[str] | None) -> dict[str, str] | None:
    """``--collection NAME=DATA_FOLDER`` values as a dict, or None when none was given.

    Raises
    ------
    QueryError
        A value without ``=`` or without a data folder.
    """
    if not given:
        return None
    pairs = [c.split("=", 1) for c in given]
    if any(len(p) != 2 or not p[0] or not p[1] for p in pairs):
        raise QueryError("--collection takes NAME=DATA_FOLDER")
    return dict(pairs)


def _add_search(sub) -> None:
    """``situate search QUERY``."""
    p_search = sub.add_parser(
        "search",
        help="hybrid search (dense + BM25 over the contextualised text, BM25 without the blurb; each kind of "
        "chunk fused its own way: prose by RRF, code by score), optionally reranked by "
        "the local cross-encoder",
    )
    p_search.add_argument("query", help="what to look for, in words or identifiers (quote it)")
    p_search.add_argument("-k", type=int, default=10, help="hits to show (default 10)")
    p_search.add_argument(
        "--json",
        action="store_true",
        help="the hits as JSON: each whole chunk with its location (path:start-end, lines and bytes), "
        "context, blurb, the lines that matched, score and rank",
    )
    p_search.add_argument("--home", help="the data folder to search (default $SITUATE_HOME, else .situate here)")
    p_search.add_argument(
        "--collection",
        action="append",
        metavar="NAME=DATA_FOLDER",
        help=COLLECTION_HELP,
    )
    p_search.add_argument(
        "--rerank",
        type=int,
        default=None,
        metavar="N",
        help="candidates the local cross-encoder reranks (default $SITUATE_RERANK_DEPTH "
        "or 0, off; 30 is the measured depth; about 0.06-0.08 s a candidate on 2 CPU cores)",
    )


def _add_demo(sub) -> None:
    """``situate demo``."""
    p_demo = sub.add_parser("demo", help="ingest the demo corpus and run example searches")
    p_demo.add_argument("--home")
    p_demo.add_argument(
        "--replace", action="store_true", help="the data folder holds another docs folder's documents: replace them"
    )
    _add_verbose(p_demo)


def _add_eval(sub) -> None:
    """``situate eval --corpus FILE ...``: the options every configuration takes."""
    p_eval = sub.add_parser(
        "eval",
        help="retrieval quality: ingest an evaluation corpus, score every "
        "configuration (Pass@5/10/20, failure@20, MRR@10)",
    )
    p_eval.add_argument(
        "--corpus",
        help="cookbook-form corpus JSON, a BEIR folder, or the name of a labelled corpus of the repository's "
        "eval/ folder: codebase (the default), docs, cosqa",
    )
    p_eval.add_argument(
        "--queries",
        help="query lines {query_id, query, golden: [[doc_id, chunk_index]]} (default, for a corpus of eval/: "
        "its queries_dev.jsonl)",
    )
    p_eval.add_argument(
        "--configs",
        help="comma-separated (default: all of "
        "chunk,chunk+bm25,heuristic,contextual-dense,blurb,contextual,contextual+rerank)",
    )
    p_eval.add_argument(
        "--fusion",
        default="rrf",
        help="comma-separated fusion methods: rrf, weighted (the first is the one reported under the plain name)",
    )
    p_eval.add_argument("--rerank-depth", type=int, default=None, help="candidates the reranker reorders")
    p_eval.add_argument("--home", help="data folder (default $SITUATE_HOME/eval/<corpus name>)")
    p_eval.add_argument("--json", metavar="OUT", help="write the figures and each query's golden ranks to OUT")
    p_eval.add_argument("--markdown", metavar="OUT", help="write the table as Markdown to OUT")
    p_eval.add_argument(
        "--blurbs",
        metavar="FILE",
        help="take blurbs from this blurb file (.jsonl.gz) where it "
        "has them: no LLM call for those (benchmarks/blurbs/ holds the committed ones)",
    )
    p_eval.add_argument("--save-blurbs", metavar="FILE", help="write the corpus's blurbs to FILE (.jsonl.gz)")
    p_eval.add_argument(
        "--rechunk",
        action="store_true",
        help="ignore the corpus's labelled chunks: cut its documents at $SITUATE_CHUNK_TOKENS (prose) and "
        "$SITUATE_CODE_CHUNK_TOKENS (code), and count a labelled chunk found by the first hit that covers "
        "half of it or of itself (to compare chunk sizes; a corpus file, not with fusion-cv)",
    )
    _add_verbose(p_eval)


def _add_eval_fusion_cv(p_eval) -> None:
    """``situate eval``'s options of the ``fusion-cv`` configuration."""
    p_eval.add_argument(
        "--questions",
        metavar="FILE",
        help="a blurb file of the questions prompt: fusion-cv adds BM25 over each chunk's "
        "questions and dense over structural context + questions + chunk",
    )
    p_eval.add_argument(
        "--late-chunking",
        action="store_true",
        help="fusion-cv: add a late-chunked dense ranking (nomic-embed-text-v1.5, installed with "
        "`situate models install nomic-embed-text-v1.5`)",
    )
    p_eval.add_argument(
        "--cv-rerank",
        action="store_true",
        help="fusion-cv: add the cross-encoder's order of the top --rerank-depth as a ranking",
    )
    p_eval.add_argument(
        "--cv-rankings",
        metavar="SETS",
        help="fusion-cv: sets of rankings to fit apart, each added to today's dense, bm25 and "
        "structure-bm25: names joined by ',', sets by ';' (default: one set, every ranking)",
    )
    p_eval.add_argument(
        "--cv-save-rankings",
        metavar="FILE",
        help="fusion-cv: write every ranking it computed, per query, to FILE (.json.gz), to fit "
        "again with no model (benchmarks/fusion_pooled.py fits one fusion over several sets)",
    )
    p_eval.add_argument(
        "--cv-folds",
        type=_bounded_int(2, 20, "--cv-folds"),
        default=5,
        help="fusion-cv: folds of the queries (2-20; default 5)",
    )
    p_eval.add_argument(
        "--cv-repeats",
        type=_bounded_int(1, 100, "--cv-repeats"),
        default=10,
        help="fusion-cv: seeded shuffles of the folds (1-100; default 10)",
    )


def _add_servers(sub) -> None:
    """``situate serve``, ``situate mcp`` and ``situate dev``."""
    p_serve = sub.add_parser("serve", help="the search service (HTTP JSON API and a search page), models loaded once")
    p_serve.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; another needs SITUATE_API_TOKEN)"
    )
    p_serve.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    p_serve.add_argument("--home", help="data folder (default $SITUATE_HOME or ./.situate)")
    p_serve.add_argument("--collection", action="append", metavar="NAME=DATA_FOLDER", help=COLLECTION_HELP)
    p_mcp = sub.add_parser("mcp", help="a Model Context Protocol server over stdio with a `search` tool")
    p_mcp.add_argument("--home", help="data folder (default $SITUATE_HOME or ./.situate)")
    p_mcp.add_argument("--collection", action="append", metavar="NAME=DATA_FOLDER", help=COLLECTION_HELP)
    sub.add_parser("dev", help="dagster dev on this project's workspace, with the data folder's instance")


def _run(args) -> int:
    """Carry out a parsed ``situate`` command; returns the exit status."""
    if args.command == "ingest":
        globs_override("SITUATE_INCLUDE", args.include)
        globs_override("SITUATE_EXCLUDE", args.exclude)
    if args.command == "ingest" and args.estimate:
        return _estimate_cmd(args)
    if args.command == "ingest" and args.dry_run:
        return _dry_run_cmd(args)
    commands = {
        "models": _models_cmd,
        "ingest": _ingest_cmd,
        "sync": _sync_cmd,
        "search": _search_cmd,
        "eval": _eval_cmd,
        "demo": _demo_cmd,
        "serve": _serve,
        "mcp": _mcp_cmd,
        "dev": _dev_cmd,
    }
    return commands[args.command](args) if args.command in commands else 2


def _models_cmd(args) -> int:
    """``situate models``: install (exit 2 on a failed install), list, or check (exit 1 when one is missing)."""
    from situate.resources.models import registry as models

    if args.action == "install":
        try:
            models.install(names=args.names)
        except models.ModelInstallError as e:
            print(f"situate: error: {e}".splitlines()[0], file=sys.stderr)
            return 2
        return 0
    if args.action == "list":
        current = models.resolve_llm(env("SITUATE_LLM_MODEL") or None)[0]
        print(f"{'name':<36} {'role':<19} {'size':>9} {'licence':<11} installed")
        for r in models.listing():
            mark = " (in use)" if r["role"] == "blurb LLM" and r["path"] == current else ""
            print(
                f"{r['name']:<36} {r['role']:<19} {r['size'] / 1e6:>6,.0f} MB {r['licence']:<11} "
                f"{'yes' if r['installed'] else 'no'}{' (default)' if r['default'] else ''}{mark}"
            )
        return 0
    bad = [m.key for m in models.DEFAULTS if not models.is_installed(m)]
    print("all models present and verified" if not bad else f"missing or corrupt: {', '.join(bad)}")
    return 1 if bad else 0


def _estimate_cmd(args) -> int:
    """``situate ingest --estimate``: what an ingest would ask of the model, nothing written."""
    from situate.pipelines.estimate import estimate
    from situate.pipelines.preflight import StartupError, check_docs, preflight_models
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.server import ServerError

    try:
        res = resources_from_env(docs_path=str(check_docs(args.path)), plain=True)
        for warning in preflight_models(res):  # the API, the model and the prompt, before the folder is read
            print(f"situate: warning: {warning}", file=sys.stderr)
        est = estimate(res, echo=lambda m: print(m, file=sys.stderr))
    except (StartupError, ServerError) as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    for line in est.lines():
        print(f"situate: estimate: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(est), indent=2))
    return 0


def _dry_run_cmd(args) -> int:
    """``situate ingest --dry-run``: what an ingest would read and skip, no model, nothing written."""
    from situate.pipelines.dry_run import dry_run
    from situate.pipelines.preflight import check_docs
    from situate.pipelines.settings import resources_from_env
    from situate.resources.documents.listing import ListingError

    try:
        result = dry_run(resources_from_env(docs_path=str(check_docs(args.path)), plain=True))
    except ListingError as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    print(f"situate: dry run of {result.docs}: nothing read by a model, nothing written")
    for line in result.lines():
        print(f"situate: dry run: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(result), indent=2))
    return 0


def _ingest_cmd(args) -> int:
    """``situate ingest``: exit 2 when a mass removal was held, 1 when a document failed
    (:data:`INGEST_EXIT_CODES`)."""
    summary = ingest(args.path, args.home, replace=args.replace, allow_removal=args.allow_removal, verbose=args.verbose)
    for line in summary.lines():
        print(f"situate: {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(dataclasses.asdict(summary), indent=2))
    return 2 if summary.removal_held else 1 if summary.failed else 0


def _sync_cmd(args) -> int:
    """``situate sync``: exit 1 when a run failed."""
    from situate.pipelines.project_sync import sync_collection

    failed = False
    for name in args.names:
        result = sync_collection(name, args.project, verbose=args.verbose)
        for job, docs, ok in result.runs:
            print(f"situate: {job}{' over ' + docs if docs else ''}: {'done' if ok else 'FAILED'}")
        failed = failed or bool(result.failed)
    return 1 if failed else 0


def _search_cmd(args) -> int:
    """``situate search``: exit 2 on a refused query."""
    try:
        collections = collections_of(args.collection)
        if collections:
            hits, warnings = search_collections(args.query, collections, args.k, args.rerank)
        else:
            hits, warnings = search(args.query, args.k, args.home, args.rerank)
    except QueryError as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"situate: warning: {w}", file=sys.stderr)
    print_hits(hits, args.json, args.query)
    return 0


def _eval_cmd(args) -> int:
    """``situate eval``: exit 2 on a missing file or a bad option."""
    from situate.evaluation.data import resolve_eval_paths
    from situate.pipelines.evaluate import RERANK_DEPTH, run_eval

    sets = None
    if args.cv_rankings:
        sets = [[x.strip() for x in part.split(",") if x.strip()] for part in args.cv_rankings.split(";")]
    try:
        corpus, queries = resolve_eval_paths(args.corpus, args.queries)
        report = run_eval(
            corpus,
            queries,
            [c.strip() for c in args.configs.split(",")] if args.configs else None,
            args.home,
            [f.strip() for f in args.fusion.split(",")],
            args.rerank_depth if args.rerank_depth is not None else RERANK_DEPTH,
            blurbs=args.blurbs,
            save_blurbs=args.save_blurbs,
            questions=args.questions,
            cv_folds=args.cv_folds,
            cv_repeats=args.cv_repeats,
            late_chunking=args.late_chunking,
            cv_rerank=args.cv_rerank,
            cv_sets=sets,
            cv_save_rankings=args.cv_save_rankings,
            verbose=args.verbose,
            rechunk=args.rechunk,
        )
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


def _demo_cmd(args) -> int:
    """``situate demo``."""
    from situate.pipelines.demo import run_demo

    return run_demo(args.home, args.replace, verbose=args.verbose)


def _mcp_cmd(args) -> int:
    """``situate mcp``: the MCP server over stdio."""
    from situate.mcp_server import main as mcp_main

    try:
        collections = collections_of(args.collection)
    except QueryError as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    prepare_env(args.home)
    return mcp_main(args.home, collections)


def _dev_cmd(args) -> int:
    """``situate dev``: ``dagster dev`` on this project's workspace (replaces this process)."""
    from situate.pipelines.settings import check_environment

    check_environment()  # the code location would refuse to load: say it here, in one line
    prepare_env(None)
    root = Path(__file__).resolve().parent.parent
    _default_interrupts()
    os.execv(sys.executable, [sys.executable, "-m", "dagster", "dev", "-w", str(root / "workspace.yaml")])
    return 2  # not reached: execv replaces the process


def _default_interrupts() -> None:
    """SIGINT and SIGTERM back to their default handling before ``dagster dev`` replaces this
    process.  Started in the background by a non-interactive shell (``situate dev &``, a service
    script, CI) a process inherits SIGINT ignored; ``dagster dev`` and each process it starts then
    set SIGTERM to that same "ignored" (Dagster's ``capture_interrupts``), so ``kill`` left all five
    running.  An ignored signal survives ``exec``, a default one is Python's own again."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _serve(args) -> int:
    """``situate serve``: refuse a non-loopback address without a token, then run uvicorn."""
    from situate.service import TOKEN_ENV, create_app, is_loopback

    token = env(TOKEN_ENV) or None
    if not is_loopback(args.host) and not token:
        print(
            f"situate: error: --host {args.host} is not a loopback address: set {TOKEN_ENV} (clients send "
            "it as a bearer token) or bind 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    if not 0 < args.port < 65536:
        print(f"situate: error: --port must be 1..65535, got {args.port}", file=sys.stderr)
        return 2
    import uvicorn

    try:
        collections = collections_of(args.collection)
        prepare_env(args.home)
        app = create_app(args.home, token, collections=collections)
    except QueryError as e:
        print(f"situate: error: {e}", file=sys.stderr)
        return 2
    where = (
        "collections " + ", ".join(collections)
        if collections
        else f"data folder {env('SITUATE_HOME') or Path(DEFAULT_HOME).resolve()}"
    )
    print(f"situate: serving http://{args.host}:{args.port}/ ({where}; API at /docs)", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
