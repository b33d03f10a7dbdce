"""Callers at once (issue 24): threads searching two data folders through ``situate.search``
never see each other's folder nor change the process environment; threads calling one shared
llama.cpp model get what each would get alone; the MCP tool bounds its query.  Real models, real
text (python-dotenv's ``main.py`` in one folder, bm25s's and tiktoken's READMEs in the other),
ingested in the structure mode (no LLM: the embedder and BM25 are what these tests contend for)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import threading
from pathlib import Path

import pytest
from conftest import needs_models, small_settings

pytestmark = [needs_models, pytest.mark.models]

FOLDERS = {"a": {"main.py"}, "b": {"bm25s-README.md", "tiktoken-README.md"}}
QUERIES = [
    "how does find_dotenv locate the .env file",
    "BM25 scoring with sparse matrices",
    "encode text into tokens",
    "parse variables and interpolate values",
    "load a saved index",
]


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    from situate.pipelines.operations import ingest
    from situate.pipelines.settings import restored_env

    out = {}
    for name in FOLDERS:
        docs, home = tmp_path_factory.mktemp(f"docs-{name}"), tmp_path_factory.mktemp(f"home-{name}")
        if name == "a":
            (docs / "main.py").write_text(Path(importlib.util.find_spec("dotenv.main").origin).read_text()[:3000])
        else:
            for dist in ("bm25s", "tiktoken"):
                (docs / f"{dist}-README.md").write_text(importlib.metadata.metadata(dist).get_payload()[:2500])
        settings = small_settings(docs, home, context="structure")
        settings.pop("SITUATE_HOME"), settings.pop("SITUATE_DOCS"), settings.pop("DAGSTER_HOME")
        with restored_env(tuple(settings)):
            os.environ.update(settings)
            before = dict(os.environ)
            summary = ingest(str(docs), str(home), echo=lambda *_: None)
            # an ingest gives the caller's environment back
            assert dict(os.environ) == before
        assert summary.failed == {} and summary.ingested == len(FOLDERS[name])
        out[name] = str(home)
    return out


def test_threads_searching_two_folders_never_mix_and_leave_the_environment(homes, monkeypatch):
    import situate

    monkeypatch.setenv("SITUATE_HOME", homes["b"])
    env_before = dict(os.environ)
    seen = {"a": [], "b": []}
    errors = []

    def worker(name: str):
        try:
            for i in range(12):
                hits = situate.search(QUERIES[i % len(QUERIES)], k=5, home=homes[name])
                seen[name].append({h.source for h in hits})
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b", "a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for name, results in seen.items():
        assert len(results) == 24 and all(r and r <= FOLDERS[name] for r in results), (name, results)
    assert dict(os.environ) == env_before
    # a search with no folder uses $SITUATE_HOME (b), not the last folder a call was given (a)
    assert {h.source for h in situate.search("encode text into tokens", k=5)} <= FOLDERS["b"]


def test_threads_in_one_embedder_get_what_each_gets_alone(homes):
    from situate.pipelines.settings import resources_from_env

    embedder = resources_from_env(plain=True)["embedder"]
    texts = [f"{q} ({i})" for i in range(6) for q in QUERIES]
    alone = embedder.embed(texts, embedder.query_prefix)[0]
    got: dict[int, object] = {}

    def worker(i: int):
        got[i] = embedder.embed(texts[i::4], embedder.query_prefix)[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert got[i].shape == alone[i::4].shape
        assert abs(got[i] - alone[i::4]).max() < 1e-4, i


def test_mcp_tool_refuses_an_oversized_query_and_answers_a_real_one(homes):
    import asyncio

    from mcp.server.mcpserver.exceptions import ToolError

    from situate.mcp_server import create_server
    from situate.service import MAX_QUERY_CHARS

    server = create_server(homes["a"])

    async def call(query: str):
        return await server.call_tool("search", {"query": query, "k": 3})

    with pytest.raises(ToolError, match="at most 8,000 characters"):
        asyncio.run(call("x" * (MAX_QUERY_CHARS + 1)))
    out = asyncio.run(call("how does find_dotenv locate the .env file"))
    assert "main.py" in str(out)
