"""``situate eval`` end to end with the real local models on a tiny corpus of real source files
(the head of python-dotenv's ``main.py`` and of pyarrow's ``ipc.cc``), every configuration, then a
second run that must make no model call at all."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from conftest import needs_models

pytestmark = [needs_models, pytest.mark.models]


def _chunks(text: str, n: int) -> list[str]:
    """Split ``text`` at blank lines into ``n`` contiguous pieces covering it."""
    paras = text.split("\n\n")
    size = -(-len(paras) // n)
    out = ["\n\n".join(paras[i:i + size]) for i in range(0, len(paras), size)]
    return [c + ("\n\n" if i < len(out) - 1 else "") for i, c in enumerate(out)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    dotenv = Path(importlib.util.find_spec("dotenv.main").origin).read_text()
    dotenv = dotenv[dotenv.index("def find_dotenv("):][:2400]
    ipc = (Path(importlib.util.find_spec("pyarrow").origin).parent / "src" / "arrow" / "python" / "ipc.cc").read_text()
    ipc = ipc[ipc.index("namespace arrow"):][:1800]
    corpus = []
    for doc_id, text in (("doc_dotenv", dotenv), ("doc_ipc", ipc)):
        pieces = _chunks(text, 3)
        assert "".join(pieces) == text
        corpus.append({"doc_id": doc_id, "original_uuid": doc_id, "content": text,
                       "chunks": [{"chunk_id": f"{doc_id}_{i}", "original_index": i, "content": c}
                                  for i, c in enumerate(pieces)]})
    (tmp / "tiny_chunks.json").write_text(json.dumps(corpus))
    gold_reader = next(i for i, c in enumerate(corpus[1]["chunks"]) if "ReadNext" in c["content"])
    queries = [
        {"query_id": "q1", "query": "How does find_dotenv search for the .env file?",
         "golden": [["doc_dotenv", 0]]},
        {"query_id": "q2", "query": "How does PyRecordBatchReader ReadNext get the next record batch?",
         "golden": [["doc_ipc", gold_reader]]},
    ]
    (tmp / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    from assets.evaluation import CONFIGS
    from pipelines.evaluate import run_eval

    kwargs = dict(corpus=str(tmp / "tiny_chunks.json"), queries=str(tmp / "q.jsonl"),
                  configs=list(CONFIGS) + ["document-context", "contextual+rerank-replace"],
                  home=str(tmp / "home"), fusions=["rrf", "weighted"], rerank_depth=4, echo=lambda *_: None)
    before = {k: os.environ.get(k) for k in ("SITUATE_HOME", "SITUATE_DOCS", "DAGSTER_HOME")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SITUATE_MAX_TOKENS", "24")
        mp.setenv("SITUATE_CONTEXT", "chunk")  # a blurb a chunk: the configurations that rank blurbs
        first = run_eval(**kwargs)
        second = run_eval(**kwargs)
    # run_eval gives the caller's environment back
    assert {k: os.environ.get(k) for k in before} == before
    return first, second


def test_every_configuration_is_scored(report):
    from assets.evaluation import CONFIGS

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
    assert {n: r["model_calls"] for n, r in second["configs"].items()} == \
        {n: 0 for n in second["configs"]}
    for name, r in first["configs"].items():
        assert second["configs"][name]["pass@20"] == r["pass@20"], name
