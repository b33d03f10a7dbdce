"""The most tokens a second a model could take on this machine's cores: the bound a measured rate
is a fraction of.

A forward pass costs about 2 operations a weight a token (one multiply, one add), over the weights
that are multiplied (not the token-embedding table, looked up; the output layer of a tied LLM is
multiplied), plus attention, ``4 x layers x width x context`` a token at a context of ``context``
tokens (scores and weighted sum).  Both models run their matrix products in 8-bit integers (the
embedder: a dynamically quantised INT8 ONNX graph; the LLM: Q4_K_M weights, dotted with 8-bit
quantised activations by llama.cpp), so the peak is the cores' 8-bit multiply-adds a cycle:

- AMX (``amx_int8``): 1,024 multiply-adds a cycle a core (Intel's tile unit; a 16x64 by 64x16 tile
  product of 16 cycles per 16,384 MACs);
- AVX-512 VNNI (``avx512_vnni``): ``vpdpbusd``, 64 multiply-adds an instruction, 2 a cycle: 128;
- AVX2 (``avx2``): ``vpmaddubsw`` + ``vpmaddwd``, 32 multiply-adds an instruction pair, 2 a
  cycle: 64 (less where the FMA ports are shared).

times the cores and the clock (``/proc/cpuinfo``'s ``cpu MHz``).  It is an upper bound that no
real kernel reaches (memory bandwidth, quantisation, attention in floating point), stated so the
fraction reached can be compared between machines and changes.

    python -m benchmarks.bounds
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: The models' shapes (their model cards and config files): weights multiplied a token, layers,
#: width.  bge-small-en-v1.5: 33.4M weights, of them 11.7M the token embedding (30,522 x 384);
#: Qwen2.5-Coder-0.5B: 494M weights (tied embedding: the output layer multiplies it).
MODELS = {
    "bge-small-en-v1.5": {"weights": 21_700_000, "layers": 12, "width": 384},
    "qwen2.5-coder-0.5b": {"weights": 494_000_000, "layers": 24, "width": 896},
}

#: 8-bit multiply-adds a cycle a core by instruction set (see the module's text).
MACS_PER_CYCLE = (("amx_int8", 1024), ("avx512_vnni", 128), ("avx2", 64))


def cpu() -> dict:
    """This machine's cores (the process's), clock (MHz) and the best 8-bit instruction set."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    flags = set(re.search(r"^flags\s*:\s*(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)]
    isa, macs = next(((f, n) for f, n in MACS_PER_CYCLE if f in flags), ("none", 16))
    return {"cores": len(os.sched_getaffinity(0)), "mhz": max(mhz) if mhz else 2000.0, "isa": isa, "macs": macs}


def bound(model: str, context: int, machine: dict | None = None) -> float:
    """Tokens a second ``model`` could take at most on ``machine`` (default this one), each token
    attending to ``context`` tokens."""
    m, c = MODELS[model], machine or cpu()
    ops = 2 * m["weights"] + 4 * m["layers"] * m["width"] * context
    peak = 2 * c["macs"] * c["cores"] * c["mhz"] * 1e6
    return peak / ops


def fraction(model: str, measured: float, context: int, machine: dict | None = None) -> dict:
    """``measured`` tokens a second against the bound: ``{"bound", "measured", "fraction"}``."""
    b = bound(model, context, machine)
    return {
        "bound_tokens_per_s": round(b),
        "measured_tokens_per_s": round(measured),
        "fraction": round(measured / b, 4),
    }


if __name__ == "__main__":
    c = cpu()
    print(c)
    for name in MODELS:
        print(name, {ctx: round(bound(name, ctx, c)) for ctx in (256, 512, 2048)})
