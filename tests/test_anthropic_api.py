"""Issue 33: the blurb model through Anthropic's Messages API (``SITUATE_LLM_API=anthropic``).

The API is paid and this machine cannot reach it, so the requests go to
:class:`fake_anthropic.FakeAnthropic`, a local stand-in named as a FAKE; everything on situate's
side is real: the official ``anthropic`` SDK (its retries included), the real ingest (Dagster in
process), the real embedder, real files.  ``test_live_api`` runs only where ``ANTHROPIC_API_KEY``
is set, against the real API.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from conftest import ingest_with, needs_models
from fake_anthropic import ALIAS, KEY, MODEL_ID, FakeAnthropic
from test_kept_blurbs import guide

pytestmark = [needs_models, pytest.mark.models]


@pytest.fixture
def fake():
    f = FakeAnthropic()
    yield f
    f.close()


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir(parents=True)
    (docs / "keys.md").write_text(guide())
    return docs


def _api(fake, **extra) -> dict:
    return {
        "SITUATE_LLM_API": "anthropic",
        "SITUATE_LLM_URL": fake.url,
        "SITUATE_LLM_SERVED_MODEL": ALIAS,
        "ANTHROPIC_API_KEY": KEY,
        "SITUATE_LLM_RETRIES": "3",
        **extra,
    }


def _rows(home):
    from situate.resources.store.store import Store

    cols = ["chunk_id", "chunk_index", "text", "blurb", "blurb_status", "llm_model", "llm_backend"]
    return sorted(Store(home=str(home)).columns(cols).to_pylist(), key=lambda r: r["chunk_index"])


def _files_text(home: Path) -> str:
    out = []
    for p in home.rglob("*"):
        if p.is_file() and p.stat().st_size < 50_000_000:
            out.append(p.read_bytes().decode("latin-1"))
    return "\n".join(out)


def test_an_ingest_sends_the_published_prompt_with_the_document_block_cached(tmp_path, fake):
    from situate.contextual.prompts import ANTHROPIC_2024

    docs, home = _docs(tmp_path), tmp_path / "home"
    # 2,500 bytes: the 3.9 kB guide needs two or more windows, each shared by several chunks
    s = ingest_with(docs, home, **_api(fake, SITUATE_PROMPT="anthropic-2024", SITUATE_N_CTX="2500"))
    assert not s.failed, s.failed
    rows = _rows(home)
    assert len(rows) >= 4 and {r["blurb_status"] for r in rows} == {"model"}, [r["blurb_status"] for r in rows]
    assert {r["llm_model"] for r in rows} == {MODEL_ID}  # the id the API gave, not the alias asked
    assert {r["llm_backend"] for r in rows} == {f"anthropic-messages {fake.url}"}
    assert s.model_calls == len(rows) == len(fake.requests)
    chunks = {r["text"] for r in rows}
    text = (docs / "keys.md").read_text()
    for body in fake.requests:
        assert body["model"] == ALIAS and "system" not in body
        assert len(body["messages"]) == 1  # the published prompt: no started answer
        doc, chunk = body["messages"][0]["content"]
        assert doc["cache_control"] == {"type": "ephemeral"} and "cache_control" not in chunk
        assert doc["text"].startswith("<document>\n") and doc["text"].endswith("\n</document>\n")
        assert doc["text"][len("<document>\n") : -len("\n</document>\n")] in text
        inner = chunk["text"].removeprefix(ANTHROPIC_2024.chunk_head).removesuffix(ANTHROPIC_2024.chunk_tail)
        # the chunk (its beginning, where the window leaves less room than the whole chunk)
        assert chunk["text"] == ANTHROPIC_2024.chunk_block(inner) and any(c.startswith(inner) for c in chunks)
        assert "\n\n" not in body.get("stop_sequences", [])  # whitespace-only stops are applied by situate
    # the windows are fitted in bytes: each at most n_ctx with its chunk block and answer
    windows = {b["messages"][0]["content"][0]["text"] for b in fake.requests}
    assert 2 <= len(windows) < len(rows)
    for b in fake.requests:
        assert sum(len(x["text"].encode()) for x in b["messages"][0]["content"]) + b["max_tokens"] <= 2500
    # each window's first request writes the cache, the others read it (as the API reports)
    assert s.prompt_tokens_reused > 0 and s.prompt_tokens_reused < s.prompt_tokens_evaluated + s.prompt_tokens_reused
    for r in rows:
        assert r["blurb"].startswith("This chunk is about the part of the guide on"), r["blurb"]
    assert KEY not in _files_text(home)  # never in a stage file, the table, metadata or the event log
    # the cost at the model's rates: the fake's model has none published, so the rates are asked for
    assert s.cost_usd is None and "SITUATE_LLM_PRICE_INPUT" in s.cost_rates


def test_the_cost_of_a_run_is_counted_from_the_tokens_the_api_reports(tmp_path, fake):
    from situate.resources.models.anthropic_api import CACHE_READ, CACHE_WRITE

    docs, home = _docs(tmp_path), tmp_path / "home"
    s = ingest_with(
        docs, home, **_api(fake, SITUATE_N_CTX="2500", SITUATE_LLM_PRICE_INPUT="2", SITUATE_LLM_PRICE_OUTPUT="10")
    )
    assert not s.failed, s.failed
    usage = fake.usages  # what the API reported, summed by situate as it is
    assert s.prompt_tokens_reused == sum(u["cache_read_input_tokens"] for u in usage) > 0
    assert s.prompt_tokens_cache_written == sum(u["cache_creation_input_tokens"] for u in usage) > 0
    assert s.prompt_tokens_evaluated == sum(u["input_tokens"] + u["cache_creation_input_tokens"] for u in usage)
    assert s.generated_tokens == sum(u["output_tokens"] for u in usage)
    plain = s.prompt_tokens_evaluated - s.prompt_tokens_cache_written
    want = (
        plain * 2
        + s.prompt_tokens_cache_written * 2 * CACHE_WRITE
        + s.prompt_tokens_reused * 2 * CACHE_READ
        + s.generated_tokens * 10
    ) / 1e6
    assert s.cost_usd == pytest.approx(want) and s.cost_usd > 0
    assert "$2.0/$10.0" in s.cost_rates
    assert any("cost $" in line for line in s.lines())


def test_a_primed_prompt_starts_the_answer_and_the_blurb_keeps_it(tmp_path, fake):
    docs, home = _docs(tmp_path), tmp_path / "home"
    s = ingest_with(docs, home, **_api(fake))  # the default prompt: the answer started
    assert not s.failed, s.failed
    for body in fake.requests:
        assert body["messages"][1] == {"role": "assistant", "content": "This chunk is about"}
    rows = _rows(home)
    assert rows and all(r["blurb"].startswith("This chunk is about the part of the guide on") for r in rows)


def test_document_mode_sends_one_request_a_document(tmp_path, fake):
    docs, home = _docs(tmp_path), tmp_path / "home"
    (docs / "b.md").write_text("# Billing\n\nInvoices are sent monthly by the billing service.\n")
    s = ingest_with(docs, home, **_api(fake, SITUATE_CONTEXT="document"))
    assert not s.failed, s.failed
    assert len(fake.requests) == 2
    assert all("summary" in b["messages"][0]["content"][-1]["text"] for b in fake.requests)


def test_429_and_529_are_retried_and_a_chunk_that_still_fails_is_left_to_the_next_run(tmp_path, fake):
    docs, home = _docs(tmp_path), tmp_path / "home"
    fake.fail = [429, 529, 0]  # rate limited, overloaded, a dropped connection: each retried by the SDK
    s = ingest_with(docs, home, **_api(fake))
    assert not s.failed, s.failed
    n = len(_rows(home))
    assert len(fake.requests) == n + 3
    # no retries left: the document fails with a named error and no row is written for it
    docs2, home2 = _docs(tmp_path / "two"), tmp_path / "home2"
    fake.requests.clear()
    fake.fail = [429] * 3
    s = ingest_with(docs2, home2, **_api(fake, SITUATE_LLM_RETRIES="0"))
    ((key, why),) = s.failed.items()
    assert "HTTP 429" in why and "after its retries" in why, why
    assert KEY not in why
    from situate.resources.store.store import Store

    assert Store(home=str(home2)).table() is None or not _rows(home2)
    s = ingest_with(docs2, home2, **_api(fake))  # the next run finishes it
    assert not s.failed and len(_rows(home2)) == n and {r["blurb_status"] for r in _rows(home2)} == {"model"}


def test_a_prompt_the_api_calls_too_long_is_a_named_error(tmp_path, fake):
    docs, home = _docs(tmp_path), tmp_path / "home"
    fake.max_prompt_bytes = 200
    s = ingest_with(docs, home, **_api(fake))
    ((key, why),) = s.failed.items()
    assert "prompt is too long" in why and "SITUATE_N_CTX" in why, why


def _preflight(tmp_path, env: dict) -> str:
    from situate.pipelines.preflight import StartupError, preflight
    from situate.pipelines.settings import resources_from_env, restored_env

    docs = _docs(tmp_path)
    with restored_env(tuple(env) + ("SITUATE_PROMPT", "SITUATE_CONTEXT")):
        os.environ.update(env)
        try:
            preflight(str(docs), resources_from_env(plain=True), tmp_path / "home")
        except StartupError as e:
            return str(e)
    return ""


def test_start_up_errors_name_the_setting_to_fix(tmp_path, fake):
    from situate.resources.models.llm import forget_servers

    def check(**env):
        forget_servers()
        return _preflight(tmp_path / str(len(os.listdir(tmp_path))), _api(fake) | env)

    assert check() == ""
    assert "ANTHROPIC_API_KEY" in check(ANTHROPIC_API_KEY="sk-ant-wrong") and "401" in check(ANTHROPIC_API_KEY="x")
    assert "sk-ant-wrong" not in check(ANTHROPIC_API_KEY="sk-ant-wrong")
    assert "SITUATE_LLM_SERVED_MODEL" in check(SITUATE_LLM_SERVED_MODEL="claude-none")
    assert "SITUATE_LLM_SERVED_MODEL" in check(SITUATE_LLM_SERVED_MODEL="")
    assert "ANTHROPIC_API_KEY" in check(ANTHROPIC_API_KEY="")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert "SITUATE_LLM_URL" in check(SITUATE_LLM_URL=closed, SITUATE_LLM_RETRIES="0")
    grammar = check(SITUATE_CONTEXT="chunk", SITUATE_PROMPT="anthropic-2024+grammar")
    assert "SITUATE_PROMPT" in grammar and "grammar" in grammar
    assert "SITUATE_PROMPT" in check(SITUATE_CONTEXT="chunk", SITUATE_PROMPT="by-reference-window")
    assert "SITUATE_LLM_API" in check(SITUATE_LLM_API="anthropics")


@pytest.mark.skipif(
    not os.environ.get("ANTHROPIC_API_KEY"), reason="ANTHROPIC_API_KEY not set: the live API test runs only with a key"
)
def test_live_api(tmp_path):
    """The real API: one small document, a blurb a chunk, the document block cached."""
    docs, home = _docs(tmp_path), tmp_path / "home"
    model = os.environ.get("SITUATE_TEST_CLAUDE_MODEL", "claude-haiku-4-5")
    s = ingest_with(
        docs,
        home,
        SITUATE_LLM_API="anthropic",
        SITUATE_LLM_SERVED_MODEL=model,
        ANTHROPIC_API_KEY=os.environ["ANTHROPIC_API_KEY"],
        SITUATE_N_CTX="131072",
        SITUATE_CHUNK_TOKENS="120",
        SITUATE_CODE_CHUNK_TOKENS="120",
        SITUATE_MAX_TOKENS="100",
    )
    assert not s.failed, s.failed
    rows = _rows(home)
    assert rows and {r["blurb_status"] for r in rows} == {"model"}


def test_the_estimate_counts_an_ingest_before_any_model_call(tmp_path, fake):
    from situate.pipelines.estimate import estimate
    from situate.pipelines.settings import resources_from_env, restored_env

    docs, home = _docs(tmp_path), tmp_path / "home"
    env = {
        "SITUATE_DOCS": str(docs),
        "SITUATE_HOME": str(home),
        "SITUATE_CONTEXT": "chunk",
        "SITUATE_N_CTX": "2500",
        "SITUATE_MAX_TOKENS": "24",
        "SITUATE_CHUNK_TOKENS": "120",
        "SITUATE_CODE_CHUNK_TOKENS": "120",
        "SITUATE_OVERLAP_TOKENS": "0",
        "SITUATE_LLM_PRICE_INPUT": "2",
        "SITUATE_LLM_PRICE_OUTPUT": "10",
        **_api(fake),
    }
    with restored_env(tuple(env)):
        os.environ.update(env)
        est = estimate(resources_from_env(plain=True))
    assert fake.requests == [] and not home.exists()  # no model call, nothing written
    assert est.unit == "bytes" and est.documents == est.readable == 1 and est.cost_usd > 0
    s = ingest_with(docs, home, **{k: v for k, v in env.items() if k not in ("SITUATE_DOCS", "SITUATE_HOME")})
    assert not s.failed, s.failed
    assert est.requests == len(fake.requests) == s.model_calls
    # the fake counts 4 bytes a token; the estimate's bytes (a bound) match what was sent
    sent = sum(len(b["text"].encode()) for body in fake.requests for b in body["messages"][0]["content"]) + sum(
        len(body["messages"][1]["content"].encode()) for body in fake.requests
    )  # the started answers
    assert sent <= est.prompt_written + est.prompt_read <= sent + 8 * est.requests
    assert abs(est.prompt_read / 4 - s.prompt_tokens_reused) <= est.requests
    assert est.cost_usd_bound >= est.cost_usd >= s.cost_usd  # bounds: bytes, every answer at its bound
    assert est.cost_usd_bound > est.cost_usd


def test_the_estimate_of_the_local_model_is_exact_in_its_own_tokens(tmp_path):
    """``situate ingest --estimate`` with the in-process model (document mode, one request): the
    prompt tokens it counts are the ones the real ingest then evaluates."""
    import json
    import subprocess
    import sys

    from conftest import REPO, small_settings

    docs, home = _docs(tmp_path), tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "ANTHROPIC_"))}
    env |= small_settings(docs, home, context="document") | {"PYTHONPATH": str(REPO)}
    out = tmp_path / "estimate.json"
    p = subprocess.run(
        [sys.executable, "-m", "situate.pipelines.cli", "ingest", str(docs), "--estimate", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(REPO),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert "prompt tokens evaluated" in p.stdout and not home.exists()
    est = json.loads(out.read_text())
    assert est["requests"] == 1 and est["unit"] == "tokens" and est["cost_usd"] is None
    s = ingest_with(docs, home, SITUATE_CONTEXT="document")
    assert not s.failed and s.model_calls == 1
    assert est["prompt_written"] == s.prompt_tokens_evaluated + s.prompt_tokens_reused
    # the wall-time prediction: the chunks the ingest made, rates measured with the real models
    assert est["chunks"] == s.chunks and "wall time of a cold ingest on this machine" in p.stdout
    rates = est["rates"]
    assert (
        rates["embed_tokens_per_s"] > 100 and rates["prefill_tokens_per_s"] > 10 and rates["generate_tokens_per_s"] > 1
    )
    assert est["wall_seconds"] > est["rates"]["start_seconds"]
    assert "stages: start" in "\n".join(s.lines()) and set(s.stages) >= {"raw_documents", "embeddings", "bm25_index"}


def test_a_cold_ingest_through_message_batches(tmp_path, fake):
    """SITUATE_LLM_BATCH=1: the run's requests go as one Message Batch (keyed, the same prompts as
    live), the run polls until it ends, and each chunk's blurb comes from it; a request the batch
    errored or let expire fails its document, and the next run sends only those."""
    docs, home = _docs(tmp_path), tmp_path / "home"
    (docs / "b.md").write_text("# Billing\n\nInvoices are sent monthly by the billing service. " * 3 + "\n")
    env = _api(
        fake,
        SITUATE_LLM_BATCH="1",
        SITUATE_LLM_BATCH_POLL="1",
        SITUATE_LLM_PRICE_INPUT="2",
        SITUATE_LLM_PRICE_OUTPUT="10",
    )
    fake.batch_fail = ["errored", "expired"]
    s = ingest_with(docs, home, **env)
    assert fake.requests == []  # no live request: everything went through the batch
    (batch,) = fake.batches.values()
    assert batch["looks"] >= 2  # polled until it ended (the SDK looks once more for the results)
    n = len(batch["requests"])
    assert len({r["custom_id"] for r in batch["requests"]}) == n
    for r in batch["requests"]:
        assert len(r["custom_id"]) <= 64 and r["custom_id"].isalnum()
        content = r["params"]["messages"][0]["content"]
        assert content[0]["cache_control"] == {"type": "ephemeral"} and content[0]["text"].startswith("<document>")
        assert r["params"]["model"] == ALIAS
    # the first two requests were not answered: their document(s) failed, named, nothing written for them
    assert s.failed and all("Message Batch" in why and "next run" in why for why in s.failed.values()), s.failed
    assert s.cost_usd is not None and "Message Batches" in s.cost_rates
    first_rows = len(_rows(home)) if (home / "lancedb").exists() else 0
    # the next run sends only what is still missing, and finishes
    s2 = ingest_with(docs, home, **env)
    assert not s2.failed, s2.failed
    assert len(fake.batches) == 2
    second = fake.batches["msgbatch_fake1"]["requests"]
    assert 2 <= len(second) < n
    rows = _rows(home)
    assert len(rows) > first_rows and {r["blurb_status"] for r in rows} == {"model"}
    assert {r["llm_backend"] for r in rows} == {f"anthropic-batches {fake.url}"}
    assert fake.requests == []


def test_documents_in_flight_overlap_but_a_documents_own_requests_do_not(tmp_path, fake):
    """SITUATE_LLM_IN_FLIGHT=3: three documents' requests at once (the API batches them), each
    document's chunks still one after another, so a window's first request has written the cache
    before the next is sent; the rows are the same as one document at a time."""
    docs, home = _docs(tmp_path), tmp_path / "home"
    for n in range(3):  # every line tagged, so every window names its document
        (docs / f"guide{n}.md").write_text("\n".join(f"{x} (copy {n})" if x else x for x in guide().split("\n")))
    fake.delay = 0.15
    s = ingest_with(docs, home, **_api(fake, SITUATE_LLM_IN_FLIGHT="3", SITUATE_N_CTX="2500"))
    assert not s.failed, s.failed
    spans = sorted(fake.spans)
    most = max(sum(1 for a, b, _ in spans if a <= t < b) for t, _, _ in spans)
    assert most >= 2, "no two documents were in flight at once"
    by_window: dict = {}
    for a, b, w in spans:
        by_window.setdefault(w, []).append((a, b))
    for ivs in by_window.values():
        assert all(ivs[i][1] <= ivs[i + 1][0] for i in range(len(ivs) - 1)), "a document's requests overlapped"
    rows = _rows(home)
    assert len(rows) == s.model_calls == len(spans) and {r["blurb_status"] for r in rows} == {"model"}
    serial, home2 = FakeAnthropic(), tmp_path / "home2"
    try:
        s2 = ingest_with(docs, home2, **_api(serial, SITUATE_N_CTX="2500"))
    finally:
        serial.close()
    assert not s2.failed
    assert [(r["chunk_id"], r["blurb"]) for r in _rows(home2)] == [(r["chunk_id"], r["blurb"]) for r in rows]


def test_hostile_answers_are_named_errors_and_what_was_billed_is_counted(tmp_path, fake):
    """An answer that is not the API's (HTML, negative or non-numeric usage) fails its document
    with an error naming the URL, the other documents go on, and the cost counts every answer the
    API billed, those of the failed document included."""
    docs, home = _docs(tmp_path), tmp_path / "home"
    (docs / "b.md").write_text("# Billing\n\nInvoices are sent monthly by the billing service.\n")
    bad = json.dumps(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": MODEL_ID,
            "content": [{"type": "text", "text": "x y z"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": -1000000, "output_tokens": 5},
        }
    ).encode()
    env = _api(fake, SITUATE_LLM_PRICE_INPUT="2", SITUATE_LLM_PRICE_OUTPUT="10")
    fake.override = [None, None, (200, b"<html>gateway</html>", "text/html")]  # keys.md's second request
    s = ingest_with(docs, home, **env)
    (why,) = s.failed.values()
    assert "not a Messages API answer" in why and fake.url.split("//")[1] in why, why
    # billed: b.md's answer and keys.md's first, though keys.md then failed
    assert s.api_usage["requests"] == len(fake.usages) == 2 and s.api_usage["evaluated"] > 0
    assert s.cost_usd > 0
    fake.override = [(200, bad, "application/json")]
    (why,) = ingest_with(docs, home, **env).failed.values()
    assert "usage.input_tokens" in why and "not a token count" in why, why
    s3 = ingest_with(docs, home, **env)  # the next run finishes what failed
    assert not s3.failed and {r["blurb_status"] for r in _rows(home)} == {"model"}


def test_a_model_id_quoting_the_key_is_not_recorded_and_the_ingest_goes_on(tmp_path, fake, monkeypatch):
    """A gateway at SITUATE_LLM_URL whose model check answers an id quoting ANTHROPIC_API_KEY: the
    id is not taken, every row records the name asked (SITUATE_LLM_SERVED_MODEL), the start-up
    warning says so without the key, the documents land, and the key is in no file of the data
    folder (rows, stage files, run databases).  (Review s6, G5.)"""
    import fake_anthropic

    from situate.pipelines.preflight import preflight_models
    from situate.pipelines.settings import resources_from_env, restored_env

    docs, home = _docs(tmp_path), tmp_path / "home"
    monkeypatch.setattr(fake_anthropic, "MODEL_ID", f"claude-fake-{KEY}")
    s = ingest_with(docs, home, **_api(fake))
    assert not s.failed and s.ingested == s.documents > 0
    assert {r["llm_model"] for r in _rows(home)} == {ALIAS}
    assert KEY not in _files_text(home)
    with restored_env(tuple(_api(fake))):
        os.environ.update(_api(fake))
        warnings = preflight_models(resources_from_env(plain=True))
    why = next(w for w in warnings if "ANTHROPIC_API_KEY" in w)
    assert f"recorded as '{ALIAS}' (SITUATE_LLM_SERVED_MODEL)" in why and KEY not in why


def test_a_malformed_batch_result_fails_only_its_own_chunk(tmp_path, fake):
    docs, home = _docs(tmp_path), tmp_path / "home"
    (docs / "b.md").write_text("# Billing\n\nInvoices are sent monthly by the billing service.\n")
    fake.batch_override = {0: {"type": "succeeded", "message": {"usage": {"input_tokens": "n/a", "output_tokens": 1}}}}
    s = ingest_with(docs, home, **_api(fake, SITUATE_LLM_BATCH="1", SITUATE_LLM_BATCH_POLL="1"))
    assert len(s.failed) == 1, s.failed
    (why,) = s.failed.values()
    assert "not a token count" in why or "not a Messages API answer" in why, why
    assert len(_rows(home)) >= 1  # the other document was written
    before = len(fake.batches)
    s2 = ingest_with(docs, home, **_api(fake, SITUATE_LLM_BATCH="1", SITUATE_LLM_BATCH_POLL="1"))
    assert not s2.failed and len(fake.batches) == before + 1
    assert len(list(fake.batches.values())[-1]["requests"]) == 1  # only the one that was missing


def test_a_batch_that_outlasts_the_wait_is_collected_by_the_next_run_not_sent_again(tmp_path, fake):
    docs, home = _docs(tmp_path), tmp_path / "home"
    env = _api(fake, SITUATE_LLM_BATCH="1", SITUATE_LLM_BATCH_POLL="1", SITUATE_LLM_BATCH_WAIT="2")
    fake.batch_looks = 10**6  # never ends while this run waits
    s = ingest_with(docs, home, **env)
    assert s.failed and all("still in progress" in w and "next run collects" in w for w in s.failed.values())
    assert (home / "cache" / "message-batches.json").exists()
    fake.batch_looks = 0  # it has ended by the next run
    s2 = ingest_with(docs, home, **env)
    assert not s2.failed, s2.failed
    assert len(fake.batches) == 1  # collected, not sent again
    assert json.loads((home / "cache" / "message-batches.json").read_text()) == {}


def test_the_estimate_refuses_what_an_ingest_refuses_in_one_line(tmp_path, fake):
    import subprocess
    import sys

    from conftest import REPO

    docs = _docs(tmp_path)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SITUATE_", "ANTHROPIC_"))}
    base |= {"PYTHONPATH": str(REPO), "SITUATE_HOME": str(tmp_path / "home"), **_api(fake)}
    for extra, word in (
        ({"ANTHROPIC_API_KEY": "sk-wrong"}, "ANTHROPIC_API_KEY"),
        ({"SITUATE_CONTEXT": "chunk", "SITUATE_PROMPT": "anthropic-2024+grammar"}, "SITUATE_PROMPT"),
        ({"SITUATE_LLM_BATCH": "false"}, "SITUATE_LLM_BATCH"),
    ):
        p = subprocess.run(
            [sys.executable, "-m", "situate.pipelines.cli", "ingest", str(docs), "--estimate"],
            env=base | extra,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(REPO),
        )
        assert p.returncode == 2, (extra, p.stdout, p.stderr[-800:])
        assert "Traceback" not in p.stderr and word in p.stderr, (extra, p.stderr[-800:])
        assert "sk-wrong" not in p.stderr
    assert fake.requests == []
