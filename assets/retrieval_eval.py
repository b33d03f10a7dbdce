"""Asset ``retrieval_eval``: "is my context helping?" answered in the Dagster UI.

Runs ``situate eval`` (:func:`situate.pipelines.evaluate.run_eval`) on a configured dataset in a child
process (the evaluation ingests into its own data folder and Dagster instance, apart from this
run's), then shows the table (Markdown), a Pass@k chart, and each configuration's figures as
numeric metadata, which the UI plots across materialisations.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg

from situate.evaluation.metrics import bar_chart
from situate.resources.settings import child_environ, data_folder, env

ROOT = Path(__file__).resolve().parent.parent


class EvalConfig(dg.Config):
    """The dataset and the configurations to score.

    Attributes
    ----------
    corpus : str
        Cookbook-form corpus JSON or BEIR folder; empty for ``$SITUATE_EVAL_CORPUS`` (read when the
        run starts, not when the code location loads).
    queries : str
        Query lines; empty for ``$SITUATE_EVAL_QUERIES`` (a BEIR folder brings its own).
    configs : str
        Comma-separated configurations; empty for all.
    fusion : str
        Comma-separated fusion methods (``rrf``, ``weighted``).
    home : str
        Data folder of the evaluation; empty for ``$SITUATE_HOME/eval/<corpus name>``.
    """

    corpus: str = ""
    queries: str = ""
    configs: str = ""
    fusion: str = "rrf"
    home: str = ""


def eval_command(config: EvalConfig, out_json: str) -> list[str]:
    """The ``situate eval`` command line for ``config``.

    Raises
    ------
    dagster.Failure
        No corpus configured.
    """
    corpus = config.corpus or env("SITUATE_EVAL_CORPUS")
    queries = config.queries or env("SITUATE_EVAL_QUERIES")
    if not corpus:
        raise dg.Failure(
            description="retrieval_eval: no dataset: set SITUATE_EVAL_CORPUS (and "
            "SITUATE_EVAL_QUERIES) or the run config's corpus/queries"
        )

    def absolute(p: str) -> str:  # the child runs in the project folder
        return str(Path(p).expanduser().resolve())

    cmd = [
        sys.executable,
        "-m",
        "situate.pipelines.cli",
        "eval",
        "--corpus",
        absolute(corpus),
        "--json",
        out_json,
        "--fusion",
        config.fusion,
    ]
    for flag, value in (
        ("--queries", queries and absolute(queries)),
        ("--configs", config.configs),
        ("--home", config.home and absolute(config.home)),
    ):
        if value:
            cmd += [flag, value]
    return cmd


def eval_metadata(report: dict) -> dict:
    """Materialisation metadata of an evaluation report (:func:`situate.pipelines.evaluate.run_eval`)."""
    md = {
        "table": dg.MetadataValue.md(report["markdown"]),
        "pass@k chart": dg.MetadataValue.md(bar_chart(report["configs"])),
        "n_queries": report["n_queries"],
        "n_chunks": report["n_chunks"],
        "blurb_quality": dg.MetadataValue.json(report["blurb_quality"]),
        "eval_seconds": report["seconds"],
        "data_folder": dg.MetadataValue.path(report["data_folder"]),
    }
    for name, r in report["configs"].items():
        for k in ("pass@5", "pass@20", "failure@20", "mrr@10"):
            md[f"{name}/{k}"] = float(r[k])
    return md


@dg.asset(
    kinds={"python"},
    group_name="evaluation",
    description="Retrieval quality on a labelled dataset (SITUATE_EVAL_CORPUS / SITUATE_EVAL_QUERIES): "
    "Pass@5/10/20, failure@20 and MRR@10 for chunk, chunk+bm25, heuristic, "
    "document-context, contextual-dense, contextual and contextual+rerank.",
)
def retrieval_eval(context: dg.AssetExecutionContext, config: EvalConfig) -> dg.MaterializeResult:
    with tempfile.TemporaryDirectory(prefix="situate-eval-") as tmp:
        out = str(Path(tmp) / "eval.json")
        cmd = eval_command(config, out)
        context.log.info("running " + " ".join(cmd))
        env = {k: v for k, v in child_environ().items() if k != "DAGSTER_HOME"}
        env["SITUATE_HOME"] = str(Path(data_folder()).expanduser().resolve())
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail = []
        try:
            for line in proc.stdout:
                line = line.rstrip()
                tail = (tail + [line])[-20:]
                if line.startswith("situate"):
                    context.log.info(line)
        except BaseException:  # the run was stopped or failed: stop the evaluation too
            proc.kill()
            raise
        if proc.wait() != 0 or not Path(out).exists():
            raise dg.Failure(
                description=f"situate eval exited with status {proc.returncode}",
                metadata={"output": dg.MetadataValue.text("\n".join(tail))},
            )
        report = json.loads(Path(out).read_text())
    return dg.MaterializeResult(metadata=eval_metadata(report))
