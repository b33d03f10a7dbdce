"""Shared fixtures.  Fakes here are for unit tests of pure logic and are named as fakes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from situate.resources.models import registry as models

REPO = Path(__file__).resolve().parent.parent
#: The labelled corpora of the repository (eval/README.md); SHARED_EVAL, the codebase set, is the
#: name the tests have used since the sets lived beside the checkout.
EVAL_DATA = REPO / "eval"
SHARED_EVAL = EVAL_DATA / "codebase"


class FakeByteTokenizer:
    """FAKE tokenizer: one token per UTF-8 byte (so multi-byte characters span several tokens).
    ``encode_template`` parses nothing special; BOS is token 256."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))

    def encode_template(self, text: str, bos: bool) -> list[int]:
        return ([256] if bos else []) + list(text.encode("utf-8"))

    def pieces(self, tokens: list[int]) -> list[bytes]:
        return [bytes([t]) if t < 256 else b"" for t in tokens]


@pytest.fixture
def fake_tokenizer() -> FakeByteTokenizer:
    return FakeByteTokenizer()


def models_present() -> bool:
    return all(models.is_installed(m, verify=False) for m in models.DEFAULTS)


needs_models = pytest.mark.skipif(
    not models_present() and not os.environ.get("CI"),
    reason="default models not installed: run `make setup` (in CI they are required)",
)


def small_settings(docs, home, context: str | None = "chunk") -> dict:
    """The end-to-end tests' small settings (``n_ctx`` 768, 120-token chunks, 24-token blurbs and summaries, no
    overlap), so a document needs more than one window and the suite stays quick on 2 cores; with
    the docs folder, data folder and Dagster instance of one test module.

    ``context`` is ``SITUATE_CONTEXT`` and ``SITUATE_CODE_CONTEXT`` (every kind of document):
    ``chunk`` by default here, because these tests exercise the per-chunk path (windows, the reused
    document prefix, a blurb a chunk); ``None`` leaves situate's default (a summary for prose, the
    structure for code), which ``test_cost_e2e`` and the demo's test run."""
    return {
        "SITUATE_N_CTX": "768",
        "SITUATE_MAX_TOKENS": "24",
        "SITUATE_SUMMARY_TOKENS": "24",
        "SITUATE_CHUNK_TOKENS": "120",
        "SITUATE_CODE_CHUNK_TOKENS": "120",
        "SITUATE_OVERLAP_TOKENS": "0",
        "SITUATE_HOME": str(home),
        "SITUATE_DOCS": str(docs),
        "DAGSTER_HOME": str(home / "dagster"),
        **({"SITUATE_CONTEXT": context, "SITUATE_CODE_CONTEXT": context} if context else {}),
    }


#: Settings an end-to-end test may set for one ingest: cleared around each :func:`ingest_with`,
#: so a value set by one test (or the shell) never reaches another's ingest.
INGEST_SETTINGS = (
    "SITUATE_CONTEXT",
    "SITUATE_CODE_CONTEXT",
    "SITUATE_PROMPT",
    "SITUATE_BLURBS_FILE",
    "SITUATE_MAX_BLURB_CHUNKS",
    "SITUATE_DOCUMENT_TOKENS",
    "SITUATE_SUMMARY_READING",
    "SITUATE_LLM_URL",
    "SITUATE_LLM_SERVED_MODEL",
    "SITUATE_LLM_API_KEY",
    "SITUATE_LLM_RETRIES",
    "SITUATE_EMBED_URL",
    "SITUATE_EMBED_MODEL",
    "SITUATE_LLM_API",
    "ANTHROPIC_API_KEY",
    "SITUATE_LLM_TIMEOUT",
    "SITUATE_LLM_PRICE_INPUT",
    "SITUATE_LLM_PRICE_OUTPUT",
)


def every_kind(settings: dict, env: dict) -> dict:
    """``settings`` updated with ``env``, where a ``SITUATE_CONTEXT`` given without
    ``SITUATE_CODE_CONTEXT`` is every kind's mode (these tests name one mode for every document)."""
    out = settings | env
    if "SITUATE_CONTEXT" in env and "SITUATE_CODE_CONTEXT" not in env:
        out["SITUATE_CODE_CONTEXT"] = env["SITUATE_CONTEXT"]
    return out


def ingest_with(docs, home, **env):
    """A real in-process ingest of ``docs`` into ``home`` with :func:`small_settings` and ``env``
    (the process environment restored afterwards); returns its ``IngestSummary``."""
    from situate.pipelines.operations import ingest
    from situate.pipelines.settings import restored_env

    settings = every_kind(small_settings(docs, home), env)
    names = tuple(settings) + INGEST_SETTINGS
    with restored_env(names):
        for k in names:
            os.environ.pop(k, None)
        os.environ.update(settings)
        return ingest(str(docs), str(home), echo=lambda *_: None)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3-compatible server for the session (:func:`benchmarks.s3server.seaweedfs`:
    SeaweedFS on free loopback ports, bucket ``situate``), its client variables set in
    ``os.environ`` meanwhile.  Yields ``{"endpoint", "bucket", "env", "log"}``."""
    import sys

    sys.path.insert(0, str(REPO))
    from benchmarks.s3server import seaweedfs

    try:
        server = seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
        s3 = server.__enter__()
    except (FileNotFoundError, RuntimeError) as e:
        pytest.fail(str(e))
    from situate.pipelines.settings import restored_env

    try:
        with restored_env(tuple(s3["env"])):
            os.environ.update(s3["env"])
            yield s3
    finally:
        server.__exit__(None, None, None)


def tiny_source_corpus(path) -> tuple[list[dict], int]:
    """A cookbook-form corpus of two real source files, three chunks each (the head of
    python-dotenv's ``main.py`` and of pyarrow's ``ipc.cc``), written to ``path``; returns it and
    the index of ``ipc.cc``'s chunk that holds ``ReadNext``."""
    import importlib.util
    import json
    from pathlib import Path

    def chunks(text: str, n: int) -> list[str]:  # n contiguous pieces split at blank lines
        paras = text.split("\n\n")
        size = -(-len(paras) // n)
        out = ["\n\n".join(paras[i : i + size]) for i in range(0, len(paras), size)]
        return [c + ("\n\n" if i < len(out) - 1 else "") for i, c in enumerate(out)]

    dotenv = Path(importlib.util.find_spec("dotenv.main").origin).read_text()
    dotenv = dotenv[dotenv.index("def find_dotenv(") :][:2400]
    ipc = (Path(importlib.util.find_spec("pyarrow").origin).parent / "src" / "arrow" / "python" / "ipc.cc").read_text()
    ipc = ipc[ipc.index("namespace arrow") :][:1800]
    corpus = []
    for doc_id, text in (("doc_dotenv", dotenv), ("doc_ipc", ipc)):
        pieces = chunks(text, 3)
        assert "".join(pieces) == text
        corpus.append(
            {
                "doc_id": doc_id,
                "original_uuid": doc_id,
                "content": text,
                "chunks": [
                    {"chunk_id": f"{doc_id}_{i}", "original_index": i, "content": c} for i, c in enumerate(pieces)
                ],
            }
        )
    Path(path).write_text(json.dumps(corpus))
    reader = next(i for i, c in enumerate(corpus[1]["chunks"]) if "ReadNext" in c["content"])
    return corpus, reader


@pytest.fixture(autouse=True)
def _settings_overrides_end_with_the_test():
    """A command run in this process (``cli.main([... "--home", x])``) sets settings overrides for
    the rest of the process, as it would in its own; here each test starts without them."""
    from situate.resources.settings import restored_overrides

    with restored_overrides():
        yield


def pytest_configure(config):
    """Ctrl-C stops the suite however it was started.  Run in the background by a non-interactive
    shell (``make test &``, a CI step), the process ignores SIGINT; Dagster's in-process runs then
    leave SIGTERM ignored too (``capture_interrupts`` copies SIGINT's handling onto it: situate's
    own runs give it back, :func:`situate.pipelines.operations._sigterm_kept`, but tests that call
    ``dg.materialize`` directly do not), and the log-tailing processes of a later run in a thread
    inherit that and hold its end 60 s (tests/test_llama_server.py's killed server: 140 s in the
    suite instead of 21)."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionfinish(session, exitstatus):
    """Close the models the suite loaded (each ``Llama`` kept in situate's process-wide cache) while
    llama_cpp is still whole: left to the interpreter's shutdown, each one's ``__del__`` runs after
    llama_cpp's ctypes functions are gone and prints "TypeError: 'NoneType' object is not callable"
    (14 such tracebacks after the summary of a whole run)."""
    import sys

    from situate.resources.models.llm import _CACHE

    llama_cpp = sys.modules.get("llama_cpp")
    if llama_cpp is not None:
        for model in [m for m in _CACHE.values() if isinstance(m, llama_cpp.Llama)]:
            model.close()
