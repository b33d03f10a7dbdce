"""The blurb model in process against the same model behind llama-cpp-python's server and
llama.cpp's own llama-server: continuous batching of several documents on CPU.

The same documents (python-dotenv's ``main.py``, ``parser.py`` and ``variables.py``, installed
with situate) are ingested with the default model in ``chunk`` mode (a blurb a chunk) and in
``document`` mode (a summary a document), each mode: once in process; once through
``python -m llama_cpp.server`` started here with the same GGUF, context and threads (and
``--logits_all false``: the server's default keeps every prompt token's logits, which measured
1.42x the in-process LLM seconds a chunk with the same prompt tokens evaluated); and through
``llama-server`` (:mod:`llama_server`, the recipe of docs/models.md) with ``--parallel`` 1, 2 and
4 slots and as many documents in flight (``SITUATE_LLM_IN_FLIGHT``), so its continuous batching
decodes several documents' requests together.  Each ingest into a fresh data folder, one after
another, a server started only for its own run, so no two share the cores.  Reported: wall
seconds, chunks a second, LLM seconds a call, prompt tokens reused as each backend counts them,
and the share of the document prefix read from the cache after each window's first request.

Run: ``.venv/bin/python benchmarks/backends.py`` (about 20 min on 2 cores); writes
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
    from llama_server import llama_cpp_server_recipe

    from situate.resources.models import registry as models

    # verbose: its log is where each request's evaluated prompt tokens are read (it reports none)
    recipe = llama_cpp_server_recipe(str(models.path_of(models.LLM)), 8192, 2, verbose=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", *recipe, "--port", str(port)],
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
MODES = ("chunk", "document")


def _run_served(docs: Path, home: Path, mode: dict, name: str, k: int, root: Path) -> tuple[dict, list[int]]:
    """One ingest through server ``name`` (``llama_cpp.server`` or ``llama-server``) started here
    with ``k`` slots (llama-server ``-np k``, ``-c`` 8,192 a slot) and ``k`` documents in flight;
    the row and, from llama_cpp.server's log, each request's evaluated prompt tokens."""
    from llama_server import LlamaServer, free_port

    from situate.resources.models import registry as models

    port = free_port()
    log = root / f"{name}-{k}-{mode['SITUATE_CONTEXT']}.log"
    if name == "llama-server":
        srv = LlamaServer(root, str(models.path_of(models.LLM)), n_ctx=8192 * k, parallel=k, port=port)
        stop = srv.stop
    else:
        proc = _server(port, log)
        stop = lambda: (proc.kill(), proc.wait())  # noqa: E731
    try:
        served = {"SITUATE_LLM_URL": f"http://127.0.0.1:{port}", "SITUATE_LLM_IN_FLIGHT": str(k)}
        s, wall = _ingest(docs, home, mode | served)
    finally:
        stop()
    # llama_cpp.server prints each request's evaluated prompt tokens (llama_perf_context_print);
    # the first two requests are situate's start-up checks
    pattern = r"prompt eval time = +[0-9.]+ ms / +([0-9]+) tokens"
    evaluated = [int(n) for n in re.findall(pattern, log.read_text(errors="replace"))] if log.exists() else []
    row = _row(s, wall) | {"server": name, "slots": k, "in_flight": k}
    if evaluated:
        row["prompt_tokens_reused"] = row["prompt_tokens"] - sum(evaluated[2:])
        row["reuse_from"] = "its log"
    else:
        row["reuse_from"] = "its answers (timings.cache_n)"
    return row, evaluated


def _mode_rows(docs: Path, root: Path, mode_name: str, in_flight, servers) -> dict:
    """The rows of one mode: in process, then each server with each documents-in-flight count."""
    mode = {"SITUATE_CONTEXT": mode_name, "SITUATE_CODE_CONTEXT": mode_name}
    head = _head_tokens()
    local, local_s = _ingest(docs, root / f"local-{mode_name}", mode)
    rows = {"in-process": _row(local, local_s) | {"server": "", "slots": 0, "in_flight": 1, "reuse_from": "llama.cpp"}}
    if mode_name == "chunk":
        rows["in-process"]["prefix_reuse_after_first"] = _prefix_reuse(
            root / f"local-{mode_name}", _records(root / f"local-{mode_name}"), head
        )
    for name, counts in servers:
        for k in counts:
            home = root / f"{name}-{k}-{mode_name}"
            row, evaluated = _run_served(docs, home, mode, name, k, root)
            if mode_name == "chunk" and (name == "llama-server" or k == 1):
                row["prefix_reuse_after_first"] = _prefix_reuse(
                    home, _records(home), head, evaluated[2:] if evaluated else None
                )
            label = f"{name}, {k} in flight" + (f" (--parallel {k})" if name == "llama-server" else "")
            rows[label] = row
            if name == "llama-server" and k == 1:
                rows[label]["identical_blurbs"] = sum(
                    x == y for x, y in zip(_blurbs(root / f"local-{mode_name}"), _blurbs(home))
                )
    return rows


def measure(files=FILES, in_flight=IN_FLIGHT, modes=MODES, llama_cpp_server: bool = True) -> dict:
    """The figures of the module docstring: ``files`` of python-dotenv in each of ``modes``, in
    process, through llama_cpp.server (one document in flight; with ``llama_cpp_server``) and
    through llama-server with each of ``in_flight`` slots and documents in flight."""
    servers = ([("llama_cpp.server", (1,))] if llama_cpp_server else []) + [("llama-server", tuple(in_flight))]
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        docs = _docs(root, files)
        out = {"modes": {m: _mode_rows(docs, root, m, in_flight, servers) for m in modes}}
    for rows in out["modes"].values():
        base = rows["in-process"]
        for r in rows.values():
            r["wall_over_in_process"] = round(r["wall_seconds"] / base["wall_seconds"], 3)
            r["llm_s_a_chunk_over_in_process"] = round(
                r["llm_seconds_a_chunk"] / max(1e-9, base["llm_seconds_a_chunk"]), 3
            )
    out["files"], out["in_flight"], out["servers"] = list(files), list(in_flight), [n for n, _ in servers]
    return out


def markdown(res: dict) -> str:
    """The report: one table a mode, then what the figures say."""
    head = (
        "| backend | chunks | model calls | wall s | chunks/s | wall / in process | LLM s a call | "
        "generated tokens | prompt tokens reused (as counted) | document prefix reused after a window's first request |"
    )
    parts = [
        "# Backends: the blurb model in process, behind llama_cpp.server and behind llama-server\n\n"
        f"python-dotenv's {', '.join(res.get('files', FILES))}, default model and prompt, a context of 8,192 "
        "tokens a sequence, 2 threads; llama-server (llama.cpp build 11434, deploy/llama-server.txt) with "
        "`--parallel k` slots and k documents in flight (`SITUATE_LLM_IN_FLIGHT`), each document keeping to "
        f"its slot (`id_slot`) (`benchmarks/backends.py`, {res['date']}). Every run on the same 2 cores, one "
        "after another; a server started only for its run.\n"
    ]
    for mode, rows in res["modes"].items():
        lines = [f"\n## `{mode}` mode\n", head, "|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in rows.items():
            lines.append(
                f"| {name} | {r['chunks']} | {r['model_calls']} | {r['wall_seconds']} | "
                f"{round(r['chunks'] / max(r['wall_seconds'], 1e-9), 3)} | {r['wall_over_in_process']} | "
                f"{r['llm_seconds_a_chunk']} | {r['generated_tokens']:,} | "
                f"{r['prompt_tokens_reused']:,} of {r['prompt_tokens']:,} ({r['reuse_from']}) | "
                f"{r.get('prefix_reuse_after_first', '')} |"
            )
        parts.append("\n".join(lines) + "\n")
    parts.append(
        "\nWall seconds are the whole ingest (chunking, the model, embeddings, the index); LLM s a call is "
        "the ingest's LLM seconds over its model calls (through a server with several documents in flight, "
        "calls overlap, so this grows while the wall time may not). Prompt tokens reused: llama.cpp's own "
        "count in process, llama-server's `timings.cache_n` in its answers, llama_cpp.server's log (it "
        "reports none in its answers; the start-up checks' two requests left out).\n"
    )
    return "".join(parts)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    res = measure() | {"date": time.strftime("%Y-%m-%d")}
    reports = ROOT / "benchmarks" / "reports"
    (reports / "backends.json").write_text(json.dumps(res, indent=2) + "\n")
    (reports / "backends.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
