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
    from situate.pipelines.settings import PLANNED_EVENTS, restored_env

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
            os.environ.setdefault(*PLANNED_EVENTS)  # set on purpose for the whole process by the first ingest
            before = dict(os.environ)
            summary = ingest(str(docs), str(home), echo=lambda *_: None)
            # an ingest gives the caller's environment back
            assert dict(os.environ) == before
        assert summary.failed == {} and summary.ingested == len(FOLDERS[name])
        out[name] = str(home)
        DOCS[name] = docs
    return out


#: Each folder's docs, as the fixture wrote them (name → folder).
DOCS: dict[str, Path] = {}


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


def test_each_hit_names_its_lines_and_shows_the_lines_that_matched(homes, capsys):
    """Every row's start/end line and byte offsets are its chunk's place in the file (code and
    prose), and `situate search` prints ``path:start-end``, the enclosing definition and the
    lines that matched, with their line breaks, the query's identifier among them."""
    import re

    from situate.pipelines.cli import main
    from situate.resources.store.store import Store

    for name, files in FOLDERS.items():
        cols = ["source", "text", "start_line", "end_line", "start_byte", "end_byte"]
        for r in Store(home=homes[name]).columns(cols).to_pylist():
            raw = (DOCS[name] / r["source"]).read_bytes()
            lines = raw.decode().split("\n")
            assert raw[r["start_byte"] : r["end_byte"]].decode() == r["text"], r["source"]
            span = "\n".join(lines[r["start_line"] - 1 : r["end_line"]])
            assert r["text"] in span and r["text"].split("\n")[0] in lines[r["start_line"] - 1]
            assert r["text"].rstrip("\n").split("\n")[-1] in lines[r["end_line"] - 1]
        assert {r["source"] for r in Store(home=homes[name]).columns(["source"]).to_pylist()} == files

    query = "how does _get_stream open the dotenv file"
    assert main(["search", query, "--home", homes["a"], "-k", "3"]) == 0
    out = capsys.readouterr().out.split("\n")
    m = re.match(r" 1\. main\.py:(\d+)-(\d+)  \(similarity 0\.\d\d\d(: weak match)?, fused 1\.0000\)$", out[0])
    assert m, out[:3]
    first, last = int(m.group(1)), int(m.group(2))
    assert out[1].startswith("    in: ") and "DotEnv" in out[1], out[:3]
    own = out[2 : next(i for i, x in enumerate(out) if x.startswith(" 2. "))]  # the first hit's lines
    shown = [re.match(r"    +(\d+) \| (.*)$", x) for x in own if re.match(r"    +\d+ \| ", x)]
    source = (DOCS["a"] / "main.py").read_text().split("\n")
    assert shown and all(first <= int(s.group(1)) <= last for s in shown)
    assert all(source[int(s.group(1)) - 1].rstrip().startswith(s.group(2).rstrip("…")) for s in shown)
    assert any("_get_stream" in s.group(2) for s in shown)


def test_a_nonsense_query_looks_weak_and_no_two_hits_share_a_similarity(homes):
    """The similarity each hit carries is one scale across queries: the best hit of a query about
    nothing in the folder is below WEAK_MATCH (measured on the docs set: benchmarks/score_scale.py),
    and no two hits of one query share it (at the 4 places the JSON gives) unless their texts do."""
    import situate
    from situate.resources.store.retrieval import WEAK_MATCH

    for home in homes.values():
        junk = situate.search("qwxzv blorptangle", k=5, home=home)
        assert junk and max(h.similarity for h in junk) < WEAK_MATCH, [(h.source, h.similarity) for h in junk]
        for q in QUERIES:
            hits = situate.search(q, k=5, home=home)
            seen = {}
            for h in hits:
                assert -1 <= h.similarity <= 1
                assert seen.setdefault(round(h.similarity, 4), h.text) == h.text, (q, h.similarity)
