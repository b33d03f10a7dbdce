"""Issue 32, finding 11: every section of the benchmark suite runs with the default models.

``benchmarks/run.py --quick`` stopped in its ``embed`` section on a fresh clone: it loaded the
default embedder (bge-small-en-v1.5, an ONNX file) through llama.cpp, a path written for the GGUF
embedder before.  Sections had been run one at a time, so nothing saw it.  Here the real suite
runs as a process, ``--only all --tiny``: every section, each on a few real texts (the cookbook
corpus's shortest documents cut to three short chunks), with the real default models (the 0.5B
blurb model writing 16-token blurbs), so the next change of a default cannot break a section
unseen.  The figures of a tiny run mean nothing; what is checked is that each section ran to the
end with the default models and reported what it measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, needs_models

pytestmark = [needs_models, pytest.mark.models]

#: Settings that would swap a default model or mode for another: the run must see the defaults.
NOT_DEFAULT = (
    "SITUATE_EMBED_MODEL",
    "SITUATE_LLM_MODEL",
    "SITUATE_RERANK_MODEL",
    "SITUATE_CONTEXT",
    "SITUATE_CODE_CONTEXT",
    "SITUATE_PROMPT",
    "SITUATE_HOME",
    "SITUATE_DOCS",
    "DAGSTER_HOME",
    "SITUATE_BENCH_CORPUS",
)


def test_every_section_runs_on_a_tiny_input_with_the_default_models(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import run

    from situate.resources.models import registry as models
    from situate.resources.models.llm import amx_build

    env = {k: v for k, v in os.environ.items() if k not in NOT_DEFAULT} | {"SITUATE_MAX_TOKENS": "16"}
    out_json = tmp_path / "tiny.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--tiny", "--only", "all", "--json", str(out_json)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    report = json.loads(out_json.read_text())
    s = report["sections"]
    assert report["tiny"] is True and list(s) == list(run.ALL_SECTIONS)

    default_embed = models.EMBED_MODELS[models.DEFAULT_EMBED]
    embed_id = default_embed.files[0].model_id
    # the embedder sections ran the default embedder through the pipeline's own Embedder
    e = s["embed"]
    assert e["embed_model"] == embed_id and e["runtime"] == "onnxruntime"
    assert e["texts"] == 4 and e["tokens"] > 4 and set(e["by_batch"]) == {"1", "4"}
    assert s["embedq"] == {"applies": False, "embed_model": embed_id, "reason": s["embedq"]["reason"]}
    assert "GGUF" in s["embedq"]["reason"]
    d = s["embedders"]["embedders"][models.DEFAULT_EMBED]
    assert d["width"] == default_embed.width and d["x_default_s_per_chunk"] == 1.0
    # synthetic rows as wide as the default embedder's vectors, searched by the product
    assert {r["dim"] for r in s["search"]["sizes"].values()} == {default_embed.width}
    assert all(0.0 <= r["indexed_recall_at_10"] <= 1.0 for r in s["search"]["sizes"].values())
    assert s["rerank"]["queries"] == 1 and s["rerank"]["depth"] == 4
    # the blurb model's sections
    llm_id = models.LLMS[models.DEFAULT_LLM].model_id
    assert s["llm"]["llm_model"] == s["cost"]["llm_model"] == llm_id
    assert s["cost"]["default_mode"] is not None and s["cost"]["modes"]["structure"]["llm_seconds"] == 0.0
    assert 0.0 < s["llm"]["prefix_reuse_ratio"] < 1.0 and s["llm"]["batched"]["2"]["blurbs"] == 2
    assert {r["setting"] for r in s["threads"]["rows"]} == {"1 thread", "auto (situate's default: the free cores)"}
    assert set(s["models"]["settings"]) == {"default", "flash_attn", "kv_q8_0", "threads_1", "repack_on"}
    # repacking on is measured, except where this llama.cpp build would crash with it (AMX)
    assert ("skipped" in s["models"]["settings"]["repack_on"]) == amx_build()
    assert s["models"]["windows"]["384"]["windows"] >= 2
    # a second ingest of the same documents makes no model call; the service answered over HTTP
    assert s["reingest"]["first_llm_calls"] >= 2 and s["reingest"]["reingest_llm_calls"] == 0
    assert s["reingest"]["reingest_embed_calls"] == 0
    assert s["partitions"]["partitions"] == 50
    assert s["service"]["real"]["rows"] == s["reingest"]["chunks"] and s["service"]["synthetic"]["rows"] == 2000
    assert s["service"]["real"]["concurrent"]["requests"] == 4
    # scale-out: S3 against local disk, and a document ingested through the Dagster daemon with
    # its blurb made by the model in the default (document) mode
    assert s["scale_out"]["search"]["rows"] == 500
    assert s["scale_out"]["docs_per_hour"]["one_run_at_a_time"]["llm_calls"] >= 1
    assert s["scale_out"]["docs_per_hour"]["one_run_at_a_time"]["statuses"] == ["SUCCESS"]
    # the backends: in process and llama-server (built by make llama-server), its reuse from its answers
    b = s["backends"]["modes"]["chunk"]
    served = b["llama-server, 1 in flight (--parallel 1)"]
    assert set(b) == {"in-process", "llama-server, 1 in flight (--parallel 1)"} and served["failed"] == {}
    assert served["reuse_from"] == "its answers (timings.cache_n)" and served["chunks"] == b["in-process"]["chunks"]
    md = out_json.with_suffix(".md").read_text()
    assert md.startswith("# Performance (tiny (smoke: figures meaningless) run,")
    assert "Does not apply: the embedder" in md and f"## Embeddings ({embed_id}, onnxruntime" in md
