"""Issue 34's options end to end with the real local models on real source files: the ``questions``
prompt writes a blurb file, and ``situate eval --configs fusion-cv`` fuses its rankings with
windowed and late-chunked dense ones, from files and caches, with no LLM call."""

import gzip
import json
from pathlib import Path

import pytest
from conftest import needs_models, tiny_source_corpus

pytestmark = [needs_models, pytest.mark.models]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from situate.pipelines.cli import main
    from situate.pipelines.evaluate import run_eval

    assert main(["models", "install", "nomic-embed-text-v1.5"]) == 0  # for late chunking; sha256 checked
    tmp = tmp_path_factory.mktemp("fusion")
    _, reader = tiny_source_corpus(tmp / "tiny_chunks.json")
    queries = [
        ("How does find_dotenv search for the .env file?", [["doc_dotenv", 0]]),
        ("How does PyRecordBatchReader ReadNext get the next record batch?", [["doc_ipc", reader]]),
        ("Where are variables from a .env file loaded into the environment?", [["doc_dotenv", 1], ["doc_dotenv", 2]]),
        ("How is a Python record batch reader made from a C++ one?", [["doc_ipc", 0]]),
    ]
    (tmp / "q.jsonl").write_text(
        "".join(json.dumps({"query_id": f"q{i}", "query": q, "golden": g}) + "\n" for i, (q, g) in enumerate(queries))
    )
    common = dict(corpus=str(tmp / "tiny_chunks.json"), queries=str(tmp / "q.jsonl"), echo=lambda *_: None)
    questions = tmp / "questions.jsonl.gz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SITUATE_CONTEXT", "chunk")
        mp.setenv("SITUATE_CODE_CONTEXT", "chunk")
        mp.setenv("SITUATE_PROMPT", "questions")
        mp.setenv("SITUATE_MAX_TOKENS", "48")
        asked = run_eval(configs=["contextual"], home=str(tmp / "q-home"), save_blurbs=str(questions), **common)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SITUATE_CONTEXT", "structure")
        fused = run_eval(
            configs=["contextual", "fusion-cv"],
            home=str(tmp / "s-home"),
            questions=str(questions),
            cv_folds=2,
            cv_repeats=2,
            late_chunking=True,
            cv_rerank=True,
            rerank_depth=4,
            **common,
        )
        # the questions of one chunk garbled: that chunk loses only its questions
        with gzip.open(questions, "rt") as f:
            lines = [json.loads(x) for x in f]
        first = next(i for i, x in enumerate(lines) if x["status"] == "model")
        lines[first]["raw"] = "<chunk> </chunk> ??"
        garbled = tmp / "garbled.jsonl.gz"
        with gzip.open(garbled, "wt") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
        again = run_eval(
            configs=["contextual", "fusion-cv"],
            home=str(tmp / "s-home"),
            questions=str(garbled),
            cv_folds=2,
            cv_repeats=2,
            late_chunking=True,
            cv_sets=[["windows-dense", "late-dense", "questions-bm25"], ["late-dense"]],
            **common,
        )
    return asked, fused, again, questions


def test_the_questions_prompt_writes_questions_for_every_chunk(runs):
    asked, _, _, questions = runs
    assert asked["prompt"] == "questions" and asked["ingest"]["llm_calls"] == 6
    with gzip.open(questions, "rt") as f:
        lines = [json.loads(x) for x in f]
    assert len(lines) == 6 and {x["mode"] for x in lines} == {"chunk:questions"}
    usable = [x["blurb"] for x in lines if x["status"] == "model"]
    assert len(usable) >= 5
    # primed with "1.": numbered questions
    assert sum(b.startswith("1.") and "?" in b for b in usable) >= 4


def test_fusion_cv_fuses_every_ranking_without_an_llm_call(runs):
    _, fused, _, questions = runs
    cv = fused["fusion_cv"]
    assert fused["ingest"]["llm_calls"] == 0
    # the report names the files its figures were made from
    import hashlib

    assert fused["files"] == {
        "questions": {"path": str(questions), "sha256": hashlib.sha256(questions.read_bytes()).hexdigest()}
    }
    assert cv["rankings"] == [
        "windows-dense",
        "late-dense",
        "dense",
        "bm25",
        "structure-bm25",
        "bm25-identifiers",
        "structure-bm25-identifiers",
        "chunk-dense",
        "structure-dense",
        "questions-bm25",
        "questions-dense",
        "rerank",
    ]
    assert cv["questions"] == {"found": 6, "usable": cv["questions"]["usable"], "missing": 0, "rejected_lines": 0}
    assert cv["questions"]["usable"] >= 5
    # the in-memory baseline is today's search: the same figures as the pipeline's own `contextual`
    for k in (5, 10, 20):
        assert cv[f"baseline@{k}"] == fused["configs"]["contextual"][f"pass@{k}"]
    for name, r in cv["alone"].items():
        assert 0 <= r["pass@5"] <= r["pass@10"] <= r["pass@20"] <= 100, name
    assert cv["space"] == 2 * (3**12 - 1) and cv["folds"] == 2 and cv["repeats"] == 2
    # the cross-encoder reordered the top 4 only: nothing below rank 4, so Pass@5 = Pass@20
    assert cv["alone"]["rerank"]["pass@5"] == cv["alone"]["rerank"]["pass@20"] > 0
    assert Path(fused["data_folder"], "cache", "rerank.json").is_file()
    assert "fitted, out of fold" in fused["markdown"]


def test_late_chunked_vectors_come_from_the_cache_the_second_time(runs):
    _, fused, again, _ = runs
    assert again["fusion_cv"]["alone"]["late-dense"] == fused["fusion_cv"]["alone"]["late-dense"]
    assert Path(fused["data_folder"], "cache", "late-chunking.npz").is_file()


def test_a_chunk_whose_questions_are_garbled_keeps_its_other_rankings(runs):
    _, fused, again, _ = runs
    assert again["fusion_cv"]["rankings"] == [
        "windows-dense",
        "late-dense",
        "dense",
        "bm25",
        "structure-bm25",
        "questions-bm25",
    ]
    assert list(again["fusion_cv"]["sets"]) == ["windows-dense + late-dense + questions-bm25", "late-dense"]
    assert again["fusion_cv"]["sets"]["late-dense"]["rankings"] == ["late-dense", "dense", "bm25", "structure-bm25"]
    assert "| late-dense | 160 |" in again["markdown"]  # 2 k x (3^4 - 1) weightings
    q = again["fusion_cv"]["questions"]
    assert q["found"] == 6 and q["usable"] == fused["fusion_cv"]["questions"]["usable"] - 1
    # every ranking that does not read the questions is unchanged
    for name in ("dense", "bm25", "structure-bm25", "windows-dense", "late-dense"):
        assert again["fusion_cv"]["alone"][name] == fused["fusion_cv"]["alone"][name]
