"""llama.cpp's rates on an idle machine and beside one busy core, by thread setting (issue 23, item 6).

Each setting runs in a fresh process (OpenMP reads its environment once), loads the default blurb
model and measures, from llama.cpp's own counters (``llama_perf_context``): the prefill rate over
a real source file's first ``PREFILL_TOKENS`` tokens and the generation rate over
``GENERATE_TOKENS`` greedy tokens after it.  "Busy" runs beside one process that spins on a core
for the whole measurement (a laptop's browser, a test suite, another ingest).  From the rates and
the tokens a chunk of the cost section (``benchmarks/reports/cost-quick.json``: prompt tokens
evaluated and tokens generated a chunk, by mode) it estimates LLM seconds a chunk for the default
mode and for today's prompt.

Settings: ``SITUATE_N_THREADS`` 2 and 1 (fixed), 2 with ``OMP_WAIT_POLICY=PASSIVE`` (threads
waiting at llama.cpp's barriers sleep instead of spinning), and 0 (situate's default: threads
follow the free cores, :mod:`situate.resources.models.threads`).  llama-cpp-python exposes no threadpool
setting beyond ``n_threads`` / ``n_threads_batch``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFILL_TOKENS = 640
GENERATE_TOKENS = 48
SETTINGS = (
    ("2 threads", {"SITUATE_N_THREADS": "2"}),
    ("1 thread", {"SITUATE_N_THREADS": "1"}),
    ("2 threads, OMP_WAIT_POLICY=PASSIVE", {"SITUATE_N_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}),
    ("auto (situate's default: the free cores)", {"SITUATE_N_THREADS": "0"}),
)


def worker(prefill_tokens: int = PREFILL_TOKENS, generate_tokens: int = GENERATE_TOKENS) -> dict:
    """In a fresh process: the rates with this process's settings (see the module docstring),
    over ``prefill_tokens`` prompt tokens and ``generate_tokens`` generated ones."""
    sys.path.insert(0, str(ROOT))
    from situate.pipelines.settings import resources_from_env
    from situate.resources.models.threads import meter

    llm = resources_from_env(plain=True)["llm"]
    L = llm.load()
    code = json.loads((ROOT / "eval" / "codebase" / "codebase_chunks.json").read_text())
    text = next(d for d in code if d["doc_id"] == "doc_11")["content"]
    tokens = L.tokenize(text.encode(), add_bos=False)[:prefill_tokens]
    rounds = []
    for _ in range(2):
        L.reset()
        pre = llm.generate(tokens, stop=[], max_tokens=1)
        gen = llm.generate(tokens + L.tokenize(b"\n", add_bos=False), stop=[], max_tokens=generate_tokens)
        rounds.append(
            {
                "prefill_tokens_per_s": pre.evaluated / pre.prefill_seconds,
                "generated_tokens_per_s": gen.generated / gen.generate_seconds,
                "threads": getattr(L, "_situate_threads", None),
                "others_busy_cores": round(meter().others, 2),
            }
        )
    best = rounds[-1]  # the second round: the first pays page faults of a fresh load
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in best.items()}


def threads_section(log=print, tiny: bool = False) -> dict:
    """Every setting idle and beside one busy core; rates and estimated LLM seconds a chunk.

    ``tiny`` (``run.py --tiny``, a smoke run): idle only, 1 thread and the default, over 32
    prompt tokens and 4 generated ones (no ratio to 2 threads); the figures mean nothing.

    Raises
    ------
    RuntimeError
        A worker process failed (its standard error's end is quoted).
    """
    cost_file = ROOT / "benchmarks" / "reports" / "cost-quick.json"
    modes = json.loads(cost_file.read_text())["sections"]["cost"]["modes"] if cost_file.is_file() else {}
    loads = ("idle",) if tiny else ("idle", "one busy core")
    settings = (SETTINGS[1], SETTINGS[-1]) if tiny else SETTINGS
    sizes = ["--prefill", "32", "--generate", "4"] if tiny else []
    rows = []
    for load in loads:
        busy = None
        if load != "idle":
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(1.0)
        try:
            for label, env in settings:
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", *sizes],
                    env={**os.environ, **env},
                    capture_output=True,
                    text=True,
                    cwd=str(ROOT),
                    timeout=900,
                )
                if out.returncode != 0:
                    raise RuntimeError(f"threads worker {label}: {out.stderr[-2000:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                r.update(setting=label, load=load)
                for name, m in modes.items():
                    if m.get("evaluated_per_chunk"):
                        r[f"s_per_chunk {name}"] = round(
                            m["evaluated_per_chunk"] / r["prefill_tokens_per_s"]
                            + m["generated_per_chunk"] / r["generated_tokens_per_s"],
                            2,
                        )
                rows.append(r)
                log(
                    f"threads {load} · {label}: prefill {r['prefill_tokens_per_s']} tok/s, "
                    f"generation {r['generated_tokens_per_s']} tok/s, threads {r['threads']}"
                )
        finally:
            if busy:
                busy.kill()
                busy.wait()
    out = {"rows": rows, "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}

    def rate(load, label, key):
        return next(r[key] for r in rows if r["load"] == load and r["setting"] == label)

    auto = SETTINGS[-1][0]
    for key in ("prefill_tokens_per_s", "generated_tokens_per_s"):
        for load, name in (("one busy core", "busy"), ("idle", "idle")):
            if load in loads and SETTINGS[0] in settings:
                out[f"auto_over_2_threads_{name}_{key}"] = round(
                    rate(load, auto, key) / rate(load, "2 threads", key), 2
                )
    return out


def markdown(t: dict) -> list[str]:
    est = sorted({k for r in t["rows"] for k in r if k.startswith("s_per_chunk ")})
    lines = [
        "",
        "## llama.cpp threads, idle and beside one busy core",
        "",
        f"{t['cores']} cores. Prefill and generation rates of the default blurb model (tokens/s, llama.cpp's "
        "counters); LLM seconds a chunk estimated from them and the cost section's tokens a chunk.",
        "",
        "| load | setting | threads used | prefill tok/s | generation tok/s | "
        + " | ".join(e.replace("s_per_chunk ", "est. s a chunk: ") for e in est)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(est),
    ]
    for r in t["rows"]:
        lines.append(
            f"| {r['load']} | {r['setting']} | {r['threads']} | {r['prefill_tokens_per_s']} | "
            f"{r['generated_tokens_per_s']} | " + " | ".join(str(r.get(e, "")) for e in est) + " |"
        )
    return lines


if __name__ == "__main__":
    if "--worker" in sys.argv:

        def _arg(name: str, default: int) -> int:
            return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default

        print(json.dumps(worker(_arg("--prefill", PREFILL_TOKENS), _arg("--generate", GENERATE_TOKENS))))
    else:
        print(json.dumps(threads_section(), indent=1))
