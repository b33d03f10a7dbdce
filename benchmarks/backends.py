"""The blurb model in process against the same model behind llama-cpp-python's server (issue 33).

The same documents (python-dotenv's ``main.py``, ``parser.py`` and ``variables.py``, installed
with situate) are ingested in ``chunk`` mode with the default model, once in process and once
through ``python -m llama_cpp.server`` started here with the same GGUF, context and threads (and
``--logits_all false``: the server's default keeps every prompt token's logits, which measured
1.42x the in-process LLM seconds a chunk with the same prompt tokens evaluated); each
ingest into a fresh data folder, the in-process one first and the server started only after it,
so the two never share the cores.  Reported: LLM seconds a chunk (the ingest's ``llm_seconds`` over
its model calls), the ratio server / in-process, wall seconds, and how many blurbs are identical.

Then the server again with 2 and 4 documents in flight (``SITUATE_LLM_IN_FLIGHT``).

Run: ``.venv/bin/python benchmarks/backends.py`` (about 10 min on 2 cores); writes
``benchmarks/reports/backends.{json,md}``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("main.py", "parser.py", "variables.py")


def _docs(root: Path, files=FILES) -> Path:
    src = Path(importlib.util.find_spec("dotenv.main").origin).parent
    docs = root / "docs"
    docs.mkdir()
    for name in files:
        shutil.copy(src / name, docs / name)
    return docs


def _ingest(docs: Path, home: Path, env: dict):
    from situate.pipelines.operations import ingest
    from situate.pipelines.settings import restored_env

    names = (
        "SITUATE_CONTEXT",
        "SITUATE_CODE_CONTEXT",
        "SITUATE_LLM_URL",
        "SITUATE_N_THREADS",
        "SITUATE_HOME",
        "SITUATE_DOCS",
        "DAGSTER_HOME",
        "SITUATE_LLM_IN_FLIGHT",
    )
    with restored_env(names):
        for k in names:
            os.environ.pop(k, None)
        os.environ.update(
            {
                "SITUATE_CONTEXT": "chunk",
                "SITUATE_CODE_CONTEXT": "chunk",  # a blurb a chunk for every document: the backends' work
                "SITUATE_N_THREADS": "2",
                "SITUATE_HOME": str(home),
                "SITUATE_DOCS": str(docs),
                "DAGSTER_HOME": str(home / "dagster"),
            }
            | env
        )
        t0 = time.perf_counter()
        s = ingest(str(docs), str(home), echo=lambda *_: None)
        return s, time.perf_counter() - t0


def _blurbs(home: Path) -> list[str]:
    from situate.resources.store.store import Store

    rows = Store(home=str(home)).columns(["chunk_id", "blurb"]).to_pylist()
    return [r["blurb"] for r in sorted(rows, key=lambda r: r["chunk_id"])]


def _server(port: int, log: Path) -> subprocess.Popen:
    from situate.resources.models import registry as models

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(models.path_of(models.LLM)),
            "--n_ctx",
            "8192",
            "--n_threads",
            "2",
            "--n_threads_batch",
            "2",
            "--logits_all",
            "false",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )
    for _ in range(600):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(log.read_text()[-2000:])


def _records(home: Path) -> list[dict]:
    """Each model call's blurb record (stage files), in the order the calls were made."""
    from situate.resources.store.store import Store

    store = Store(home=str(home))
    out = []
    for key in sorted(p.name for p in (home / "stages").iterdir()):
        stage = store.read_stage_if_any(key, "blurbs") or {}
        out += [dict(b, document=key) for b in stage.get("blurbs", []) if not b.get("cached") and b["window"] >= 0]
    return out


def _prefix_reuse(home: Path, records: list[dict], head: int, evaluated: list[int] | None = None) -> float:
    """Prompt tokens read from the cache over the document prefix (``head``, the chat template's
    tokens before the user message, plus the window's document block: the preambles stage's
    ``n_tokens``), over the requests after each window's first (``evaluated``: the server's own
    count per request, in the records' order)."""
    from situate.resources.store.store import Store

    store = Store(home=str(home))
    windows = {}
    read = prefix = 0
    seen = set()
    for n, r in enumerate(records):
        if r["document"] not in windows:
            windows[r["document"]] = store.read_stage_if_any(r["document"], "preambles")["windows"]
        first = (r["document"], r["window"]) not in seen
        seen.add((r["document"], r["window"]))
        if first:
            continue
        ev = evaluated[n] if evaluated is not None else r["evaluated"]
        prefix += head + windows[r["document"]][r["window"]]["n_tokens"]
        read += min(r["prompt_tokens"] - ev, head + windows[r["document"]][r["window"]]["n_tokens"])
    return round(read / prefix, 3) if prefix else 0.0


def _head_tokens() -> int:
    """Tokens of the default model's chat template before the user message (the start of every
    prompt's document prefix)."""
    from situate.contextual.fitting import prompt_builder
    from situate.pipelines.settings import resources_from_env

    return len(prompt_builder(resources_from_env(plain=True)["llm"])._head)


def _row(s, wall: float) -> dict:
    return {
        "chunks": s.chunks,
        "model_calls": s.model_calls,
        "llm_seconds": round(s.llm_seconds, 2),
        "llm_seconds_a_chunk": round(s.llm_seconds / max(1, s.model_calls), 3),
        "generated_tokens": s.generated_tokens,
        "llm_seconds_a_generated_token": round(s.llm_seconds / max(1, s.generated_tokens), 4),
        "prompt_tokens": s.prompt_tokens_evaluated + s.prompt_tokens_reused,
        "prompt_tokens_reused": s.prompt_tokens_reused,
        "wall_seconds": round(wall, 1),
        "failed": s.failed,
    }


IN_FLIGHT = (1, 2, 4)


def measure(files=FILES, in_flight=IN_FLIGHT) -> dict:
    """The figures of the module docstring (``files`` of python-dotenv; the server with each of
    ``in_flight`` documents in flight)."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        docs = _docs(root, files)
        local, local_s = _ingest(docs, root / "local", {})
        head = _head_tokens()
        out = {
            "in-process": _row(local, local_s)
            | {"prefix_reuse_after_first": _prefix_reuse(root / "local", _records(root / "local"), head)}
        }
        logs = {}
        for k in in_flight:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            log = root / f"server-{k}.log"
            proc = _server(port, log)
            try:
                served, served_s = _ingest(
                    docs,
                    root / f"served-{k}",
                    {"SITUATE_LLM_URL": f"http://127.0.0.1:{port}", "SITUATE_LLM_IN_FLIGHT": str(k)},
                )
            finally:
                proc.kill()
                proc.wait()
            # llama.cpp prints each request's evaluated prompt tokens (llama_perf_context_print);
            # the first two requests are situate's start-up checks
            evaluated = [
                int(n)
                for n in re.findall(
                    r"prompt eval time = +[0-9.]+ ms / +([0-9]+) tokens", log.read_text(errors="replace")
                )
            ]
            row = _row(served, served_s)
            row["prompt_tokens_evaluated_by_its_log"] = sum(evaluated[2:])
            row["requests_in_its_log"] = len(evaluated)
            sent = row["prompt_tokens"]
            row["reuse_ratio_by_its_log"] = round(1 - sum(evaluated[2:]) / sent, 3) if sent else 0.0
            if k == 1:  # one document at a time: the log's requests are in the records' order
                row["prefix_reuse_after_first"] = _prefix_reuse(
                    root / "served-1", _records(root / "served-1"), head, evaluated[2:]
                )
                logs["blurbs"] = _blurbs(root / "served-1")
            out[f"llama_cpp.server, {k} in flight"] = row
        a = _blurbs(root / "local")
    one = out["llama_cpp.server, 1 in flight"]
    out["in_process_reuse_ratio"] = round(
        out["in-process"]["prompt_tokens_reused"] / out["in-process"]["prompt_tokens"], 3
    )
    out["server_over_in_process"] = round(one["llm_seconds_a_chunk"] / out["in-process"]["llm_seconds_a_chunk"], 3)
    out["server_over_in_process_a_generated_token"] = round(
        one["llm_seconds_a_generated_token"] / out["in-process"]["llm_seconds_a_generated_token"], 3
    )
    out["identical_blurbs"] = sum(x == y for x, y in zip(a, logs["blurbs"]))
    out["blurbs"] = len(a)
    out["files"], out["in_flight"] = list(files), list(in_flight)
    return out


def markdown(res: dict) -> str:
    rows = [
        "| backend | chunks | model calls | LLM s | LLM s a chunk | generated tokens | LLM s a generated token | "
        "prompt tokens reused | document prefix reused after a window's first request | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ["in-process"] + [f"llama_cpp.server, {k} in flight" for k in res.get("in_flight", IN_FLIGHT)]:
        r = res[name]
        reused = r.get("prompt_tokens_evaluated_by_its_log")
        reused = (
            f"{r['prompt_tokens'] - reused:,} of {r['prompt_tokens']:,} (its log)"
            if reused is not None
            else f"{r['prompt_tokens_reused']:,} of {r['prompt_tokens']:,}"
        )
        rows.append(
            f"| {name} | {r['chunks']} | {r['model_calls']} | {r['llm_seconds']} | {r['llm_seconds_a_chunk']} | "
            f"{r['generated_tokens']:,} | {r['llm_seconds_a_generated_token']} | {reused} | "
            f"{r.get('prefix_reuse_after_first', '')} | {r['wall_seconds']} |"
        )
    return (
        "# Backends: the blurb model in process and behind llama_cpp.server\n\n"
        f"python-dotenv's {', '.join(res.get('files', FILES))} in `chunk` mode, default model and prompt, n_ctx 8192, "
        f"2 threads, documents in flight {', '.join(map(str, res.get('in_flight', IN_FLIGHT)))} through the server "
        f"(`benchmarks/backends.py`, {res['date']}).\n\n"
        + "\n".join(rows)
        + f"\n\nServer (1 in flight) / in-process: LLM seconds a chunk **{res['server_over_in_process']}**, "
        f"LLM seconds a generated token **{res['server_over_in_process_a_generated_token']}** (the blurbs differ, "
        f"identical: {res['identical_blurbs']} of {res['blurbs']}, because the server tokenizes the prompt's text "
        "as a whole where the in-process prompt joins separately tokenized pieces, so they are not the same "
        "length). llama_cpp.server does not report the prompt tokens it reused; its log counts the tokens each "
        "request evaluated (the start-up checks' two requests left out). llama_cpp.server runs one sequence: "
        "documents in flight interleave their requests in its one KV cache.\n"
    )


def main() -> None:
    sys.path.insert(0, str(ROOT))
    res = measure() | {"date": time.strftime("%Y-%m-%d")}
    reports = ROOT / "benchmarks" / "reports"
    (reports / "backends.json").write_text(json.dumps(res, indent=2) + "\n")
    (reports / "backends.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
