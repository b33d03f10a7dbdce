"""The blurb model in process against the same model behind llama-cpp-python's server (issue 33).

The same documents (python-dotenv's ``main.py``, ``parser.py`` and ``variables.py``, installed
with situate) are ingested in ``chunk`` mode with the default model, once in process and once
through ``python -m llama_cpp.server`` started here with the same GGUF, context and threads; each
ingest into a fresh data folder, the in-process one first and the server started only after it,
so the two never share the cores.  Reported: LLM seconds a chunk (the ingest's ``llm_seconds`` over
its model calls), the ratio server / in-process, wall seconds, and how many blurbs are identical.

Run: ``.venv/bin/python benchmarks/backends.py`` (about 5 min on 2 cores); writes
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


def _docs(root: Path) -> Path:
    src = Path(importlib.util.find_spec("dotenv.main").origin).parent
    docs = root / "docs"
    docs.mkdir()
    for name in FILES:
        shutil.copy(src / name, docs / name)
    return docs


def _ingest(docs: Path, home: Path, env: dict):
    from pipelines.operations import ingest
    from pipelines.settings import restored_env

    names = ("SITUATE_CONTEXT", "SITUATE_LLM_URL", "SITUATE_N_THREADS", "SITUATE_HOME", "SITUATE_DOCS", "DAGSTER_HOME")
    with restored_env(names):
        for k in names:
            os.environ.pop(k, None)
        os.environ.update({"SITUATE_CONTEXT": "chunk", "SITUATE_N_THREADS": "2", "SITUATE_HOME": str(home),
                           "SITUATE_DOCS": str(docs), "DAGSTER_HOME": str(home / "dagster")} | env)
        t0 = time.perf_counter()
        s = ingest(str(docs), str(home), echo=lambda *_: None)
        return s, time.perf_counter() - t0


def _blurbs(home: Path) -> list[str]:
    from resources.store.store import Store

    rows = Store(home=str(home)).columns(["chunk_id", "blurb"]).to_pylist()
    return [r["blurb"] for r in sorted(rows, key=lambda r: r["chunk_id"])]


def _server(port: int, log: Path) -> subprocess.Popen:
    from resources.models import registry as models

    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(models.path_of(models.LLM)),
                             "--n_ctx", "8192", "--n_threads", "2", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(log.read_text()[-2000:])


def measure() -> dict:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        docs = _docs(root)
        local, local_s = _ingest(docs, root / "local", {})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = _server(port, root / "server.log")
        try:
            served, served_s = _ingest(docs, root / "served", {"SITUATE_LLM_URL": f"http://127.0.0.1:{port}"})
        finally:
            proc.kill()
            proc.wait()
        a, b = _blurbs(root / "local"), _blurbs(root / "served")
        # llama.cpp prints each request's evaluated prompt tokens (llama_perf_context_print)
        evaluated = [int(n) for n in re.findall(r"prompt eval time = +[0-9.]+ ms / +([0-9]+) tokens",
                                                (root / "server.log").read_text(errors="replace"))]
    out = {}
    for name, s, wall in (("in-process", local, local_s), ("llama_cpp.server", served, served_s)):
        out[name] = {"chunks": s.chunks, "model_calls": s.model_calls, "llm_seconds": round(s.llm_seconds, 2),
                     "llm_seconds_a_chunk": round(s.llm_seconds / max(1, s.model_calls), 3),
                     "prompt_tokens": s.prompt_tokens_evaluated + s.prompt_tokens_reused,
                     "prompt_tokens_reused": s.prompt_tokens_reused,
                     "wall_seconds": round(wall, 1), "failed": s.failed}
    sent = out["llama_cpp.server"]["prompt_tokens"]
    out["llama_cpp.server"]["prompt_tokens_evaluated_by_its_log"] = sum(evaluated)
    out["llama_cpp.server"]["requests_in_its_log"] = len(evaluated)
    out["server_reuse_ratio_by_its_log"] = round(1 - sum(evaluated) / sent, 3) if sent else 0.0
    out["in_process_reuse_ratio"] = round(out["in-process"]["prompt_tokens_reused"] / out["in-process"]["prompt_tokens"], 3)
    out["server_over_in_process"] = round(out["llama_cpp.server"]["llm_seconds_a_chunk"] /
                                          out["in-process"]["llm_seconds_a_chunk"], 3)
    out["identical_blurbs"] = sum(x == y for x, y in zip(a, b))
    out["blurbs"] = len(a)
    return out


def markdown(res: dict) -> str:
    rows = ["| backend | chunks | model calls | LLM s | LLM s a chunk | prompt tokens reused (reported) | wall s |",
            "|---|---|---|---|---|---|---|"]
    for name in ("in-process", "llama_cpp.server"):
        r = res[name]
        rows.append(f"| {name} | {r['chunks']} | {r['model_calls']} | {r['llm_seconds']} | {r['llm_seconds_a_chunk']} | "
                    f"{r['prompt_tokens_reused']:,} of {r['prompt_tokens']:,} | {r['wall_seconds']} |")
    return ("# Backends: the blurb model in process and behind llama_cpp.server\n\n"
            f"python-dotenv's {', '.join(FILES)} in `chunk` mode, default model and prompt, n_ctx 8192, 2 threads "
            f"(`benchmarks/backends.py`, {res['date']}).\n\n" + "\n".join(rows) +
            f"\n\nServer / in-process, LLM seconds a chunk: **{res['server_over_in_process']}**. "
            f"Identical blurbs: {res['identical_blurbs']} of {res['blurbs']}. llama_cpp.server does not report "
            "the prompt tokens it reused from its KV cache, so its row shows 0; its log counts the tokens each "
            f"request evaluated: {res['llama_cpp.server']['prompt_tokens_evaluated_by_its_log']:,} over "
            f"{res['llama_cpp.server']['requests_in_its_log']} requests, a reuse ratio of "
            f"**{res['server_reuse_ratio_by_its_log']}** against {res['in_process_reuse_ratio']} in process.\n")


def main() -> None:
    sys.path.insert(0, str(ROOT))
    res = measure() | {"date": time.strftime("%Y-%m-%d")}
    reports = ROOT / "benchmarks" / "reports"
    (reports / "backends.json").write_text(json.dumps(res, indent=2) + "\n")
    (reports / "backends.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
