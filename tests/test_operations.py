"""Operating it safely: kill -9 at any point, concurrent writers, start-up faults, huge inputs.

Crashes are real: a child process is killed with SIGKILL at a random moment (while it writes the
LanceDB table, while it builds the BM25 index, while the real LLM writes blurbs), and the data
folder is then checked as a later run finds it.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO, needs_models

CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _spawn(tmp_path: Path, code: str, *args: str) -> subprocess.Popen:
    script = tmp_path / f"child-{random.randrange(1 << 30)}.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        env=CHILD_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for_line(proc: subprocess.Popen, word: str, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stdout.readline()
        if word in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"child ended before {word!r}: {proc.stderr.read()[-2000:]}")
    raise AssertionError(f"no {word!r} within {timeout} s")


def _kill9(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


# -- the LanceDB table: kill -9 while writing ------------------------------------------------------

WRITER = """
    import sys, numpy as np, pyarrow as pa
    from situate.resources.store.store import Store, table_schema
    store, passes, n_docs = Store(home=sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    prefix = sys.argv[4] if len(sys.argv) > 4 else "doc"
    schema = table_schema(768)
    rng = np.random.default_rng(0)

    def rows(key, n):
        v = rng.standard_normal((n, 768)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        cols = {f.name: [f"{key}-{f.name}"] * n for f in schema if f.type == pa.string()}
        cols.update({f.name: [None] * n for f in schema if f.type == pa.int32() or f.type == pa.int64()})
        cols.update(chunk_id=[f"{key}:{i}" for i in range(n)], document_key=[key] * n,
                    chunk_index=list(range(n)), blurb_status=["model"] * n, text=[f"word{i} text" for i in range(n)],
                    blurb=[""] * n, context=[""] * n)
        cols["vector"] = list(v)
        return pa.Table.from_pydict(cols, schema=schema)

    print("ready", flush=True)
    for p in range(passes):
        n = 300 if p % 2 == 0 else 200          # every pass rewrites every document with another size
        for d in range(n_docs):
            key = f"{prefix}{d}"
            store.replace_document(key, rows(key, n))
            if len(sys.argv) > 5:                # a concurrent run: rebuild BM25 after each document
                from situate.resources.store.retrieval import rebuild_bm25_from_table
                rebuild_bm25_from_table(store)
    print("done", flush=True)
"""


def _doc_rows(store) -> dict[str, list[str]]:
    ids = store.columns(["chunk_id"]).column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)), "duplicate chunk ids"
    per: dict[str, list[str]] = {}
    for i in ids:
        per.setdefault(i.split(":")[0], []).append(i)
    return per


def test_kill_9_during_table_writes_leaves_every_document_whole(tmp_path):
    from situate.resources.store.store import Store

    home = tmp_path / "home"
    rng = random.Random(7)
    for _attempt in range(4):
        proc = _spawn(tmp_path, WRITER, str(home), "500", "8")  # passes enough to be killed inside them
        _wait_for_line(proc, "ready")
        time.sleep(rng.uniform(0.2, 2.5))
        _kill9(proc)
        store = Store(home=str(home))
        for key, ids in _doc_rows(store).items():  # readable; each document all old or all new
            assert sorted(ids, key=lambda i: int(i.split(":")[1])) in (
                [f"{key}:{i}" for i in range(300)],
                [f"{key}:{i}" for i in range(200)],
            ), key
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITER), str(home), "1", "8"],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    per = _doc_rows(Store(home=str(home)))
    assert sorted(per) == [f"doc{d}" for d in range(8)] and all(len(v) == 300 for v in per.values())


def test_concurrent_runs_land_all_their_rows_and_bm25_follows(tmp_path):
    """Three writers on different documents at once, each rebuilding BM25 after every document."""
    from situate.contextual.table_checks import unique_chunk_ids
    from situate.resources.store.retrieval import bm25_ids
    from situate.resources.store.store import Store

    home = tmp_path / "home"
    procs = [_spawn(tmp_path, WRITER, str(home), "1", "6", prefix, "bm25") for prefix in ("a", "b", "c")]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and "done" in out, err[-2000:]
    store = Store(home=str(home))
    per = _doc_rows(store)
    assert sorted(per) == sorted(f"{p}{d}" for p in "abc" for d in range(6))
    assert all(len(v) == 300 for v in per.values())
    assert unique_chunk_ids(store)[0]
    assert sorted(bm25_ids(store.bm25_dir)) == sorted(i for v in per.values() for i in v)


FIRST_WRITER = """
    import os, sys, time, numpy as np, pyarrow as pa
    from situate.resources.store.store import Store, table_schema
    store, key, go = Store(home=sys.argv[1]), sys.argv[2], sys.argv[3]
    schema = table_schema(768)
    cols = {f.name: [f"{key}-{f.name}"] * 300 for f in schema if f.type == pa.string()}
    cols.update({f.name: [None] * 300 for f in schema if f.type == pa.int32() or f.type == pa.int64()})
    cols.update(chunk_id=[f"{key}:{i}" for i in range(300)], document_key=[key] * 300,
                chunk_index=list(range(300)), vector=list(np.full((300, 768), 768 ** -0.5, np.float32)))
    rows = pa.Table.from_pydict(cols, schema=schema)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    store.replace_document(key, rows)
    print("done", flush=True)
"""


def test_writers_racing_to_create_the_table_keep_every_document(tmp_path):
    """Four runs released at once on an empty data folder all create the table: none may replace
    another's rows (Lance commits a racing create as an overwrite; before the create was
    serialised, 3 rounds in 6 of this lost a document)."""
    from situate.resources.store.store import Store

    for round_ in range(3):
        home, go = tmp_path / f"home{round_}", tmp_path / f"go{round_}"
        procs = [_spawn(tmp_path, FIRST_WRITER, str(home), f"d{i}", str(go)) for i in range(4)]
        for p in procs:
            _wait_for_line(p, "ready")
        go.touch()
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0 and "done" in out, err[-2000:]
        per = _doc_rows(Store(home=str(home)))
        assert sorted(per) == ["d0", "d1", "d2", "d3"], f"round {round_}: {sorted(per)}"
        assert all(len(v) == 300 for v in per.values())


# -- the BM25 index: kill -9 while building ----------------------------------------------------------

BM25_BUILDER = """
    import sys
    from situate.resources.store.retrieval import build_bm25
    out = sys.argv[1]
    corpora = {n: ([f"r{n}-{i:05d}" for i in range(n)], [f"term{i % 97} common words {i}" for i in range(n)])
               for n in (4000, 3000)}
    build_bm25(*corpora[4000], out)
    print("ready", flush=True)
    while True:
        for n in (3000, 4000):
            build_bm25(*corpora[n], out)
"""


def test_kill_9_during_bm25_builds_leaves_a_whole_index(tmp_path):
    from situate.resources.store import retrieval

    out = tmp_path / "bm25"
    rng = random.Random(11)
    for _attempt in range(4):
        proc = _spawn(tmp_path, BM25_BUILDER, str(out))
        _wait_for_line(proc, "ready")
        time.sleep(rng.uniform(0.1, 3.0))
        _kill9(proc)
        retrieval._LOADED.clear()
        ids = retrieval.bm25_ids(out)
        assert ids is not None and len(ids) in (3000, 4000)
        assert ids == [f"r{len(ids)}-{i:05d}" for i in range(len(ids))]
        hits = retrieval.bm25_search(out, "term5", 500)
        assert hits and all(int(h.split("-")[1]) % 97 == 5 for h in hits)
    retrieval.build_bm25(["x1"], ["one more build"], out)  # the next build clears what was left over
    assert [p.name for p in tmp_path.glob("bm25.v-*")] == [os.readlink(out)]
    assert retrieval.bm25_ids(out) == ["x1"]


def test_a_corpus_without_bm25_terms_still_gets_an_index(tmp_path):
    from situate.resources.store.retrieval import bm25_ids, bm25_search, build_bm25

    build_bm25(["a", "b"], ["x", "the of"], tmp_path / "bm25")  # stopwords and single letters only
    assert bm25_ids(tmp_path / "bm25") == ["a", "b"] and bm25_search(tmp_path / "bm25", "x the") == []


def test_commit_conflicts_are_retried_and_other_errors_are_not():
    from situate.resources.store.store import is_commit_conflict, retry_commit

    calls = []

    def fake_commit():  # FAKE: loses the race twice, then commits
        calls.append(1)
        if len(calls) < 3:
            raise OSError(
                "Retryable commit conflict for version 7: This Update transaction was "
                "preempted by concurrent transaction Rewrite at version 7. Please retry."
            )
        return "committed"

    assert retry_commit(fake_commit, sleep=lambda s: None) == "committed" and len(calls) == 3
    assert not is_commit_conflict(ValueError("Schema error: field vector"))
    with pytest.raises(ValueError, match="Schema error"):
        retry_commit(lambda: (_ for _ in ()).throw(ValueError("Schema error")), sleep=lambda s: None)
    lost = []

    def fake_always_loses():  # FAKE: another writer wins every time
        lost.append(1)
        raise OSError("Commit conflict for version 9")

    with pytest.raises(OSError, match="Commit conflict"):
        retry_commit(fake_always_loses, attempts=3, sleep=lambda s: None)
    assert len(lost) == 3


# -- start-up faults: one line each -------------------------------------------------------------------


def _situate(args: list[str], capsys, monkeypatch, **env) -> tuple[int, list[str]]:
    from situate.pipelines.cli import main
    from situate.pipelines.settings import restored_env

    with monkeypatch.context() as m, restored_env():
        for k, v in env.items():
            m.setenv(k, v)
        code = main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("situate")]
    return code, err


def test_missing_docs_and_unwritable_data_folder_get_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("a note")
    code, err = _situate(["ingest", str(tmp_path / "nowhere"), "--home", str(tmp_path / "h")], capsys, monkeypatch)
    assert code == 2 and err == [f"situate: error: docs folder {tmp_path / 'nowhere'} does not exist"]
    (tmp_path / "a-file").write_text("in the way")
    code, err = _situate(
        ["ingest", str(tmp_path / "docs"), "--home", str(tmp_path / "a-file" / "h")], capsys, monkeypatch
    )
    assert code == 2 and len(err) == 1
    assert err[0].startswith(
        f"situate: error: data folder {tmp_path / 'a-file' / 'h'} is not writable: Not a directory"
    )


def test_missing_corrupt_and_foreign_model_files_get_one_line(tmp_path, capsys, monkeypatch):
    from situate.resources.models import registry as models

    src = models.path_of(models.LLM)  # the installed default, before any variable points elsewhere
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("a note")
    args = ["ingest", str(docs), "--home", str(tmp_path / "h")]
    empty = tmp_path / "no-models"
    code, err = _situate(args, capsys, monkeypatch, SITUATE_MODELS_DIR=str(empty))
    assert code == 2 and err == [
        f"situate: error: model file {empty / models.LLM.filename} not found: "
        "run `situate models install` (or `make setup`)"
    ]
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"<html>not a model</html>")
    code, err = _situate(args, capsys, monkeypatch, SITUATE_LLM_MODEL=str(junk))
    assert code == 2 and len(err) == 1 and "is not a GGUF file (it starts with b'<htm'" in err[0]
    assert "SITUATE_LLM_MODEL" in err[0]
    # a default model with one byte changed: same size, wrong sha256 (models are copied only if present)
    if not src.exists():
        pytest.skip("default LLM not installed")
    bad_dir = tmp_path / "models"
    (bad_dir / src.name).parent.mkdir(parents=True)
    data = bytearray(src.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad_dir / src.name).write_bytes(bytes(data))
    code, err = _situate(args, capsys, monkeypatch, SITUATE_MODELS_DIR=str(bad_dir))
    assert code == 2 and len(err) == 1 and "is corrupt: sha256" in err[0] and "situate models install" in err[0]
    # cut short: the size already tells
    (bad_dir / src.name).write_bytes(bytes(data[:1000]))
    code, err = _situate(args, capsys, monkeypatch, SITUATE_MODELS_DIR=str(bad_dir))
    assert code == 2 and f"is corrupt: 1,000 bytes, pinned {models.LLM.size:,}" in err[0]


@needs_models
def test_a_context_too_small_for_any_preamble_is_said_once(tmp_path):
    from situate.pipelines.preflight import context_warning
    from situate.resources.models import registry as models
    from situate.resources.models.llm import BlurbLLM

    llm = BlurbLLM(model_path=str(models.path_of(models.LLM)), n_ctx=64, max_tokens=80)
    line = context_warning(llm)
    assert line.startswith("SITUATE_N_CTX 64 is too small for any document preamble") and "\n" not in line
    assert context_warning(BlurbLLM(model_path=str(models.path_of(models.LLM)), n_ctx=2048)) is None


# -- huge inputs ---------------------------------------------------------------------------------------


def test_a_5_mb_line_and_a_20_mb_file_are_chunked_within_bounds(tmp_path):
    from situate.contextual.chunking import make_chunks
    from situate.contextual.tokens import count_cl100k
    from situate.resources.documents.reading import discover, load
    from situate.resources.models import registry as models

    models.use_offline_tiktoken()
    rng = random.Random(3)
    line = base64.b64encode(rng.randbytes(3_750_000)).decode()  # 5,000,000 characters, no space
    (tmp_path / "one-line.txt").write_text(line)
    words = importlib.metadata.metadata("bm25s").get_payload().split()
    paragraphs, size = [], 0
    while size < 20_000_000:
        p = "\n".join(" ".join(rng.choices(words, k=rng.randint(5, 30))) for _ in range(rng.randint(1, 12)))
        paragraphs.append(p)
        size += len(p) + 2
    (tmp_path / "big.md").write_text("\n\n".join(paragraphs))
    refs = {r.source: r for r in discover(tmp_path)}
    for name, n_min in (("one-line.txt", 4000), ("big.md", 8000)):
        doc = load(refs[name])
        chunks = make_chunks(refs[name].key, doc.text, doc.headings, count_cl100k, 800, 80)
        assert len(chunks) > n_min
        sample = rng.sample(chunks, 300)
        assert all(count_cl100k(c.text) <= 800 for c in sample)
        if name == "one-line.txt":  # no overlap possible inside one unbroken run: the cuts tile the line
            assert "".join(c.text for c in chunks) == line


# -- kill -9 while the real LLM writes blurbs, then resume --------------------------------------------


def _small_docs(folder: Path) -> None:
    folder.mkdir()
    main_py = Path(importlib.util.find_spec("dotenv.main").origin).read_text()
    (folder / "main.py").write_text(main_py[:2200])
    readme = importlib.metadata.metadata("bm25s").get_payload()
    (folder / "README.md").write_text(readme[:1800])


def _small_settings(home: Path, **extra: str) -> dict:
    """The e2e suite's small settings (n_ctx 768, 120-token chunks, 24-token blurbs, a blurb a
    chunk: ``SITUATE_CONTEXT=chunk``, so a run makes several LLM calls a document) on ``home``."""
    return {
        "SITUATE_CONTEXT": "chunk",
        "SITUATE_CODE_CONTEXT": "chunk",
        "SITUATE_N_CTX": "768",
        "SITUATE_MAX_TOKENS": "24",
        "SITUATE_CHUNK_TOKENS": "120",
        "SITUATE_CODE_CHUNK_TOKENS": "120",
        "SITUATE_OVERLAP_TOKENS": "0",
        "SITUATE_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        **extra,
    }


def _ingest_until_blurbs(docs: Path, home: Path, settings: dict, n: int, capture: bool = False):
    """Start ``situate ingest DOCS`` as a child process and return it, with the blurb cache's
    folder, once ``n`` blurbs are in the cache (the child still running)."""
    pipe = subprocess.PIPE if capture else subprocess.DEVNULL
    child = subprocess.Popen(
        [sys.executable, "-m", "situate.pipelines.cli", "ingest", str(docs), "--home", str(home)],
        env={**CHILD_ENV, **settings},
        stdout=pipe,
        stderr=pipe,
        text=capture,
        start_new_session=True,
        cwd=str(REPO),
    )
    cache = home / "cache" / "blurbs"
    t0 = time.monotonic()
    while len(list(cache.glob("*/*.json"))) < n:
        assert child.poll() is None, "the ingest ended before it was stopped"
        assert time.monotonic() - t0 < 300
        time.sleep(0.05)
    return child, cache


@needs_models
@pytest.mark.models
def test_kill_9_during_blurbs_then_resume_without_repeating_a_blurb(tmp_path):
    import dagster as dg

    from situate.pipelines.cli import ingest
    from situate.pipelines.settings import restored_env
    from situate.resources.models.llm import CALLS
    from situate.resources.store.retrieval import bm25_ids
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    _small_docs(docs)
    settings = _small_settings(home)
    child, cache = _ingest_until_blurbs(docs, home, settings, 2)
    _kill9(child)
    done_before = len(list(cache.glob("*/*.json")))
    store = Store(home=str(home))
    assert store.count_rows() == 0  # killed before any document reached the table

    with restored_env(tuple(settings)):
        os.environ.update(settings)
        CALLS.clear()
        lines: list[str] = []
        out = ingest(str(docs), str(home), echo=lines.append)
        calls = CALLS["llm_generate"]
        instance = dg.DagsterInstance.get()
        runs = instance.get_runs(filters=dg.RunsFilter(job_name="ingest"))
        CALLS.clear()
        again = ingest(str(docs), str(home), echo=lambda *_: None)
        calls_again = CALLS["llm_generate"] + CALLS["embed_texts"]

    assert not out.failed and out.ingested == 2
    assert calls == out.chunks - done_before  # each finished blurb came from the cache, once
    killed = [r for r in runs if r.status == dg.DagsterRunStatus.FAILURE]
    assert len(killed) == 1 and any("is gone without finishing" in line for line in lines)
    ids = store.columns(["chunk_id"]).column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)) == out.chunks == out.table_rows
    assert sorted(bm25_ids(store.bm25_dir)) == sorted(ids)
    assert again.ingested == 0 and calls_again == 0 and store.count_rows() == out.chunks


@needs_models
@pytest.mark.models
def test_sigterm_stops_the_ingest_with_one_line_and_the_same_command_resumes(tmp_path):
    """SIGTERM (what Ctrl-C, `kill` and a container stop send) while blurbs are made: the run in
    progress fails as interrupted, no later document is started, the command says so in one line
    and exits 130 (no traceback); the same command then finishes every document, taking the
    blurbs finished before the signal from the cache."""
    import signal

    from situate.pipelines.cli import ingest
    from situate.pipelines.settings import restored_env
    from situate.resources.models.llm import CALLS
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    _small_docs(docs)
    settings = _small_settings(home, SITUATE_DOCS_PER_RUN="1")  # one run a document
    child, cache = _ingest_until_blurbs(docs, home, settings, 1, capture=True)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    done_before = len(list(cache.glob("*/*.json")))
    assert child.returncode == 130, (out, err)
    # the last line is situate's (a library may log its own traceback when the signal lands in its
    # clean-up, e.g. sqlalchemy closing a connection: seen once in four runs)
    assert err.strip().splitlines()[-1] == "situate: interrupted"
    assert "pipelines/" not in err  # no traceback through situate's code
    assert out.count("situate: run over") == 1  # the second document's run never started
    assert "situate: interrupted: 1 document(s) of run" in out
    assert Store(home=str(home)).count_rows() == 0

    with restored_env(tuple(settings)):
        os.environ.update(settings)
        CALLS.clear()
        again = ingest(str(docs), str(home), echo=lambda *_: None)
    assert not again.failed and again.ingested == 2
    assert CALLS["llm_generate"] == again.chunks - done_before


@needs_models
@pytest.mark.models
def test_a_document_over_the_blurb_limit_is_indexed_without_llm_calls(tmp_path):
    from situate.contextual.table_checks import fallback_share
    from situate.pipelines.cli import ingest
    from situate.pipelines.settings import restored_env
    from situate.resources.models.llm import CALLS
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    _small_docs(docs)
    settings = _small_settings(home, SITUATE_MAX_BLURB_CHUNKS="1")
    with restored_env(tuple(settings)):
        os.environ.update(settings)
        CALLS.clear()
        out = ingest(str(docs), str(home), echo=lambda *_: None)
    assert not out.failed and out.ingested == 2 and CALLS["llm_generate"] == 0
    assert out.blurbs_skipped == out.chunks > 2 and out.blurb_fallbacks == 0
    rows = Store(home=str(home)).columns(["blurb_status", "context", "blurb"]).to_pylist()
    assert {r["blurb_status"] for r in rows} == {"skipped:large-document"}
    assert all(r["context"] and not r["blurb"] for r in rows)  # structural context kept
    ok, md = fallback_share(Store(home=str(home)))
    assert ok and md["skipped"] == out.chunks and md["fallbacks"] == 0


# -- incremental by content: what a settings change costs ----------------------------------------------


def _ingest_with(settings: dict, docs: Path, home: Path):
    from situate.pipelines.cli import ingest
    from situate.pipelines.settings import restored_env
    from situate.resources.models.llm import CALLS

    names = tuple(set(settings) | {"SITUATE_CHUNK_TOKENS", "SITUATE_EMBED_MODEL"})
    with restored_env(names):
        for n in names:
            os.environ.pop(n, None)
        os.environ.update(settings)
        CALLS.clear()
        out = ingest(str(docs), str(home), echo=lambda *_: None)
        return out, dict(CALLS)


@needs_models
@pytest.mark.models
def test_changing_the_chunk_size_re_blurbs_only_the_chunks_whose_text_changed(tmp_path):
    from situate.resources.store.store import Store

    docs, home = tmp_path / "docs", tmp_path / "home"
    docs.mkdir()
    text = importlib.metadata.metadata("bm25s").get_payload()[:3000]
    (docs / "bm25s.md").write_text(text[: text.rfind("\n") + 1])
    base = {
        "SITUATE_N_CTX": "2048",
        "SITUATE_MAX_TOKENS": "24",
        "SITUATE_OVERLAP_TOKENS": "0",
        "SITUATE_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster"),
        "SITUATE_CONTEXT": "chunk",
    }  # a blurb a chunk: the calls follow the chunks
    first, calls1 = _ingest_with({**base, "SITUATE_CHUNK_TOKENS": "120"}, docs, home)
    old = set(Store(home=str(home)).columns(["text"]).column("text").to_pylist())
    assert calls1["llm_generate"] == first.chunks == len(old)
    second, calls2 = _ingest_with({**base, "SITUATE_CHUNK_TOKENS": "100"}, docs, home)
    new = Store(home=str(home)).columns(["text"]).column("text").to_pylist()
    changed = set(new) - old
    assert second.ingested == 1 and len(new) == second.chunks > first.chunks
    assert 0 < len(changed) < len(new)  # the document's whole window is the same: unchanged chunks hit the cache
    assert calls2["llm_generate"] == len(changed)


@needs_models
@pytest.mark.models
def test_switching_between_named_embedders_re_embeds_without_an_llm_call_and_searches(tmp_path):
    """Issue 25: a folder ingested with the default embedder (bge-small-en-v1.5, ONNX, 384 wide),
    then with ``SITUATE_EMBED_MODEL=nomic-embed-text-v1.5`` (the previous default, a GGUF, 768
    wide, installed by name): every row embedded again from the blurb cache, no LLM call, and a
    search with each embedder finds the right file."""
    from situate.pipelines.operations import search
    from situate.pipelines.settings import restored_env
    from situate.resources.models import registry as models
    from situate.resources.store.store import Store

    models.install(names=["nomic-embed-text-v1.5"], log=lambda *_: None)
    docs, home = tmp_path / "docs", tmp_path / "home"
    _small_docs(docs)
    base = _small_settings(home)
    question = "load environment variables from a .env file"
    first, _ = _ingest_with(base, docs, home)
    rows = Store(home=str(home)).columns(["embed_model", "vector"]).to_pylist()
    assert {r["embed_model"] for r in rows} == {"bge-small-en-v1.5.int8"} and {len(r["vector"]) for r in rows} == {384}
    with restored_env(("SITUATE_EMBED_MODEL", "SITUATE_CODE_ADAPTER")):
        os.environ.pop("SITUATE_EMBED_MODEL", None)
        plain, _ = search(question, k=3, home=str(home))
        os.environ["SITUATE_CODE_ADAPTER"] = "1"  # the code query map on: nothing to re-embed, it searches
        hits, _ = search(question, k=3, home=str(home))
    assert hits and hits[0].source == "main.py" and plain[0].source == "main.py"
    # the map moves code chunks' scores, not the reported cosine (the plain query vector's)
    mapped = {h.chunk_id: h.similarity for h in hits}
    both = [h for h in plain if h.chunk_id in mapped]
    assert both and [h.similarity for h in both] == [mapped[h.chunk_id] for h in both]
    assert hits[0].chunk_id in {h.chunk_id for h in plain}
    second, calls = _ingest_with({**base, "SITUATE_EMBED_MODEL": "nomic-embed-text-v1.5"}, docs, home)
    assert second.ingested == 2 and calls.get("llm_generate", 0) == 0
    assert calls["embed_texts"] == second.chunks == first.chunks
    rows = Store(home=str(home)).columns(["embed_model", "vector"]).to_pylist()
    assert {r["embed_model"] for r in rows} == {"nomic-embed-text-v1.5.f16"} and {len(r["vector"]) for r in rows} == {
        768
    }
    with restored_env(("SITUATE_EMBED_MODEL",)):
        os.environ["SITUATE_EMBED_MODEL"] = "nomic-embed-text-v1.5"
        hits, _ = search(question, k=3, home=str(home))
    assert hits and hits[0].source == "main.py"


def test_bad_settings_and_a_search_without_a_data_folder_get_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("a note")
    ingest = ["ingest", str(tmp_path / "docs"), "--home", str(tmp_path / "h")]
    code, err = _situate(ingest, capsys, monkeypatch, SITUATE_N_CTX="abc")
    assert code == 2 and err == ["situate: error: SITUATE_N_CTX='abc' is not a whole number"]
    code, err = _situate(ingest, capsys, monkeypatch, SITUATE_MAX_BLURB_CHUNKS="-1")
    assert code == 2 and err == ["situate: error: SITUATE_MAX_BLURB_CHUNKS=-1 is below its minimum, 0"]
    code, err = _situate(ingest, capsys, monkeypatch, SITUATE_EMBED_MODEL=str(tmp_path))
    assert code == 2 and len(err) == 1 and "is a folder, not a file" in err[0]
    nowhere = tmp_path / "never-ingested"
    code, err = _situate(["search", "keys", "--home", str(nowhere)], capsys, monkeypatch)
    assert code == 2 and err == [
        f"situate: error: data folder {nowhere} does not exist: run `situate ingest "
        "PATH` first, or give the --home you ingested into"
    ]
    assert not nowhere.exists()  # a mistyped --home is not created


def test_a_damaged_bm25_index_reads_as_none_and_is_rebuilt(tmp_path):
    from situate.resources.store import retrieval
    from situate.resources.store.store import Store

    store = Store(home=str(tmp_path))
    retrieval.build_bm25(["a", "b"], ["rotate the keys", "bake the bread"], store.bm25_dir)
    retrieval._LOADED.clear()
    next(store.bm25_dir.resolve().glob("data.csc.index.npy")).unlink()  # a user deletes one file
    assert retrieval.bm25_ids(store.bm25_dir) is None and retrieval.bm25_search(store.bm25_dir, "keys") == []
    retrieval.rebuild_bm25_from_table(store)  # what the next ingest does on the id mismatch
    assert retrieval.bm25_ids(store.bm25_dir) == []


def test_a_run_in_a_process_that_ignores_sigint_leaves_sigterm_as_it_was():
    """Started in the background by a non-interactive shell, a process ignores SIGINT; Dagster's
    ``capture_interrupts`` (what every in-process run goes through) ends by giving SIGTERM SIGINT's
    handling, so SIGTERM was left ignored: ``kill`` no longer stopped an ingest, and the log-tailing
    processes of a later run in a thread could not be stopped (60 s at its end).  Around a run,
    situate gives SIGTERM back what it had."""
    import signal

    from dagster._utils.interrupts import capture_interrupts

    from situate.pipelines.operations import _sigterm_kept

    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with capture_interrupts():
            pass
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # Dagster's doing, without situate
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with _sigterm_kept(), capture_interrupts():
            pass
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])


def test_situate_dev_hands_dagster_default_interrupts():
    """``situate dev`` started by a non-interactive shell's ``&`` inherits SIGINT ignored, and
    Dagster then ignored SIGTERM in all five of its processes (``kill`` left them running).  What
    ``situate dev`` execs now has both signals at their default: checked in a process that
    ignores SIGINT, as a background job does, through the same call and ``exec``."""
    import subprocess
    import sys

    probe = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if sys.argv[1] == 'fixed':\n"
        "    from situate.pipelines.cli import _default_interrupts\n"
        "    _default_interrupts()\n"
        "os.execv(sys.executable, [sys.executable, '-c', "
        "'import signal; print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, "
        "signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)'])\n"
    )
    seen = {
        how: subprocess.run(
            [sys.executable, "-c", probe, how], capture_output=True, text=True, timeout=60
        ).stdout.split()
        for how in ("fixed", "inherited")
    }
    assert seen == {"fixed": ["False", "False"], "inherited": ["True", "True"]}
