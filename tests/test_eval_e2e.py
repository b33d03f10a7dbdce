"""``situate eval`` end to end with the real local models on a tiny corpus of real source files
(the head of python-dotenv's ``main.py`` and of pyarrow's ``ipc.cc``), every configuration, then a
second run that must make no model call at all."""

import json
import os

import pytest
from conftest import needs_models, tiny_source_corpus

pytestmark = [needs_models, pytest.mark.models]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    _, gold_reader = tiny_source_corpus(tmp / "tiny_chunks.json")
    queries = [
        {"query_id": "q1", "query": "How does find_dotenv search for the .env file?", "golden": [["doc_dotenv", 0]]},
        {
            "query_id": "q2",
            "query": "How does PyRecordBatchReader ReadNext get the next record batch?",
            "golden": [["doc_ipc", gold_reader]],
        },
    ]
    (tmp / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    from situate.evaluation.metrics import CONFIGS
    from situate.pipelines.evaluate import run_eval

    kwargs = dict(
        corpus=str(tmp / "tiny_chunks.json"),
        queries=str(tmp / "q.jsonl"),
        configs=list(CONFIGS) + ["document-context", "contextual+rerank-replace"],
        home=str(tmp / "home"),
        fusions=["rrf", "weighted"],
        rerank_depth=4,
        echo=lambda *_: None,
    )
    before = {k: os.environ.get(k) for k in ("SITUATE_HOME", "SITUATE_DOCS", "DAGSTER_HOME")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SITUATE_MAX_TOKENS", "24")
        mp.setenv("SITUATE_CONTEXT", "chunk")  # a blurb a chunk: the configurations that rank blurbs
        mp.setenv("SITUATE_CODE_CONTEXT", "chunk")  # code too
        first = run_eval(**kwargs)
        second = run_eval(**kwargs)
    # run_eval gives the caller's environment back
    assert {k: os.environ.get(k) for k in before} == before
    return first, second


def test_every_configuration_is_scored(report):
    from situate.evaluation.metrics import CONFIGS

    first, _ = report
    assert first["n_queries"] == 2 and first["n_chunks"] == 6
    for name in CONFIGS:
        r = first["configs"][name]
        assert 0 <= r["pass@5"] <= r["pass@10"] <= r["pass@20"] <= 100, name
        assert r["failure@20"] == pytest.approx(100 - r["pass@20"])
        assert set(first["golden_ranks"][name]) == {"q1", "q2"}
    for name in ("chunk+bm25", "heuristic", "blurb", "contextual", "contextual+rerank"):
        assert f"{name} (weighted)" in first["configs"]
    # 6 chunks: every golden chunk is in the top 5 for every configuration
    assert all(r["pass@5"] == 100.0 for r in first["configs"].values())
    # the names in the query are in the chunk: BM25-backed configurations put it first
    assert first["golden_ranks"]["chunk+bm25"]["q2"] == [1]
    # blurb shares are reported, in percent of the 6 chunk blurbs
    q = first["blurb_quality"]
    assert q["blurbs"] == 6 and 0 <= q["usable"] <= 100
    assert first["ingest"]["llm_calls"] == 6 and first["document_summaries"]["llm_calls"] == 2
    assert first["configs"]["contextual+rerank"]["model_calls"] == 8  # 2 queries x depth 4
    assert first["configs"]["contextual+rerank-replace"]["model_calls"] == 0  # the same pairs, cached
    assert "| contextual+rerank |" in first["markdown"] and "| contextual+rerank-replace |" in first["markdown"]


def test_second_run_makes_no_model_call(report):
    first, second = report
    assert second["ingest"]["llm_calls"] == 0 and second["document_summaries"]["llm_calls"] == 0
    assert {n: r["model_calls"] for n, r in second["configs"].items()} == {n: 0 for n in second["configs"]}
    for name, r in first["configs"].items():
        assert second["configs"][name]["pass@20"] == r["pass@20"], name
