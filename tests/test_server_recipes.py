"""The model-server recipes of docs/models.md are the commands the tests and benchmarks run
(``benchmarks/llama_server.py``): a change to one without the other fails here."""

from __future__ import annotations

import shlex
import sys

from conftest import REPO

sys.path.insert(0, str(REPO))
from benchmarks.llama_server import llama_cpp_server_recipe, recipe  # noqa: E402

MODEL = "~/.cache/situate/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def _command(page: str, start: str) -> list[str]:
    """The one line of ``page`` that starts with ``start``, split as the shell would."""
    lines = [ln for ln in page.splitlines() if ln.startswith(start)]
    assert len(lines) == 1, (start, lines)
    return shlex.split(lines[0], posix=False)


def test_the_server_recipes_are_the_ones_the_tests_run():
    page = (REPO / "docs" / "models.md").read_text()
    from situate.resources.models import registry as models

    assert MODEL.endswith("/" + models.LLMS[models.DEFAULT_LLM].filename)
    llama = _command(page, ".venv/bin/llama-server ")
    assert llama[1:] == recipe(MODEL, 16384, 2, 2, "situate") + ["--port", "8080"]
    # threads set and quiet, as the tests' llama_cpp.server
    assert "-t" in llama and "-tb" in llama and "--log-verbosity" in llama and "--no-repack" in llama
    served = _command(page, "python -m llama_cpp.server --model ~/.cache/situate/models/qwen")
    assert served[3:] == llama_cpp_server_recipe(MODEL, 8192, 2) + ["--port", "8080"]
    assert served[served.index("--verbose") + 1] == "false" and "--n_threads" in served
