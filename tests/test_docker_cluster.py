"""docker-compose.cluster.yml, checked without a container engine: the services, their
commands and healthchecks, and that they agree with the NATS config and the example config."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.support.daemon import REPO_ROOT
from tests.test_docker import compose_seconds, referenced_variables

COMPOSE_FILE = REPO_ROOT / "docker-compose.cluster.yml"
NATS_CONF = REPO_ROOT / "deploy" / "nats.conf"
EXAMPLE = REPO_ROOT / "examples" / "cluster"
GATEWAY_SERVICES = ("ingress-1", "ingress-2", "worker")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


@pytest.fixture(scope="module")
def gateway_yaml() -> dict[str, Any]:
    # Read as YAML, not through config.load_gateway: `bus.nats` is another branch's model.
    loaded: dict[str, Any] = yaml.safe_load((EXAMPLE / "gateway.yaml").read_text())
    return loaded


def role_of(service: dict[str, Any]) -> str:
    command = service["command"]
    assert isinstance(command, list), "exec form: the daemon is PID 1 and gets SIGTERM itself"
    assert command[:2] == ["run", "-c"]
    assert command[3] == "--role"
    role: str = command[4]
    return role


def test_two_ingress_and_three_workers_over_nats_and_postgres(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"nats", "postgres", *GATEWAY_SERVICES}
    replicas = {name: services[name].get("deploy", {}).get("replicas", 1) for name in services}
    roles = [
        role for name in GATEWAY_SERVICES for role in [role_of(services[name])] * replicas[name]
    ]
    assert sorted(roles) == ["ingress"] * 2 + ["worker"] * 3
    for name in GATEWAY_SERVICES:
        service = services[name]
        assert service["build"] == "."
        assert service["depends_on"] == {
            "nats": {"condition": "service_healthy"},
            "postgres": {"condition": "service_healthy"},
        }


def test_every_process_reads_the_mounted_cluster_config(compose: dict[str, Any]) -> None:
    for name in GATEWAY_SERVICES:
        service = compose["services"][name]
        config = PurePosixPath(service["command"][2])
        mounts = [volume.split(":") for volume in service["volumes"]]
        (mount,) = [m for m in mounts if PurePosixPath(m[1]) == config.parent]
        assert (REPO_ROOT / mount[0]).resolve() == EXAMPLE.resolve()
        assert mount[2:] == ["ro"]
        assert (EXAMPLE / config.name).is_file()
        # Every variable the config needs is passed through.
        needed = set(referenced_variables(EXAMPLE))
        assert needed <= set(service["environment"]), name


def test_every_gateway_process_shares_one_data_volume(compose: dict[str, Any]) -> None:
    """Pairing codes and the allow-list overlay are files there: an approval made with
    `octos-gateway pair` must reach every ingress."""
    data_dir = yaml.safe_load((EXAMPLE / "gateway.yaml").read_text())["data_dir"]
    sources = set()
    for name in GATEWAY_SERVICES:
        mounts = [volume.split(":") for volume in compose["services"][name]["volumes"]]
        (mount,) = [m for m in mounts if m[1] == data_dir]
        sources.add(mount[0])
    (volume,) = sources
    assert volume in compose["volumes"], "a named volume, not a directory per container"


def test_gateway_healthchecks_ask_readyz_on_the_configured_port(
    compose: dict[str, Any], gateway_yaml: dict[str, Any]
) -> None:
    port = gateway_yaml["http"]["port"]
    for name in GATEWAY_SERVICES:
        service = compose["services"][name]
        check = service["healthcheck"]
        assert check["test"][0] == "CMD"
        assert f"http://127.0.0.1:{port}/readyz" in " ".join(check["test"])
        assert compose_seconds(check["timeout"]) < compose_seconds(check["interval"])
        # `docker stop` kills after stop_grace_period: the daemon's grace must fit inside it.
        assert gateway_yaml["shutdown_grace_s"] < compose_seconds(service["stop_grace_period"])


def test_ingress_publish_their_api_on_distinct_ports(compose: dict[str, Any]) -> None:
    profile = yaml.safe_load((EXAMPLE / "profiles" / "support.yaml").read_text())
    (api,) = [channel for channel in profile["channels"] if channel["type"] == "api"]
    published = []
    for name in ("ingress-1", "ingress-2"):
        by_container_port = {
            m.split(":")[-1]: m.split(":")[-2] for m in compose["services"][name]["ports"]
        }
        published.append(by_container_port[str(api["port"])])
    assert len(set(published)) == 2, "a load balancer needs both ingress reachable"
    assert "ports" not in compose["services"]["worker"], "workers serve no traffic"


def test_gateway_config_points_at_the_compose_services(
    compose: dict[str, Any], gateway_yaml: dict[str, Any]
) -> None:
    nats = urlsplit(gateway_yaml["bus"]["nats"]["url"])
    assert gateway_yaml["bus"]["backend"] == "nats"
    assert (nats.hostname, nats.port) == ("nats", _nats_int("port"))
    assert gateway_yaml["bus"]["nats"]["partitions"] >= 1
    dsn = urlsplit(gateway_yaml["store"]["dsn"])
    postgres = compose["services"]["postgres"]["environment"]
    assert gateway_yaml["store"]["backend"] == "postgres"
    assert dsn.hostname == "postgres"
    assert (dsn.username, dsn.path.lstrip("/")) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_DB"],
    )


def test_nats_runs_jetstream_on_its_volume_with_fsync_always(compose: dict[str, Any]) -> None:
    service = compose["services"]["nats"]
    conf_mount = next(v.split(":") for v in service["volumes"] if v.startswith("./deploy/"))
    assert (REPO_ROOT / conf_mount[0]).resolve() == NATS_CONF.resolve()
    assert service["command"] == ["-c", conf_mount[1]]
    jetstream = _jetstream_block()
    assert re.search(r"^\s*sync_interval:\s*always\s*$", jetstream, re.MULTILINE)
    store_dir = re.search(r"^\s*store_dir:\s*(\S+)\s*$", jetstream, re.MULTILINE)
    assert store_dir is not None
    data_mount = next(
        v.split(":") for v in service["volumes"] if v.split(":")[0] in compose["volumes"]
    )
    assert PurePosixPath(store_dir[1]).is_relative_to(data_mount[1]), (
        "JetStream must be on the volume"
    )
    monitor = f"http://127.0.0.1:{_nats_int('http_port')}/healthz"
    assert monitor in " ".join(service["healthcheck"]["test"])


def test_nats_conf_is_valid_for_nats_server(tmp_path: Path) -> None:
    """The real server's parser checks the file. The one here is 2.9, which predates
    `sync_interval` (2.10): that line is checked above and left out here."""
    server = shutil.which("nats-server")
    if server is None:
        pytest.fail("nats-server is needed on PATH to check deploy/nats.conf", pytrace=False)
    text = NATS_CONF.read_text().replace("/data/jetstream", str(tmp_path / "jetstream"))
    copy = tmp_path / "nats.conf"
    copy.write_text(re.sub(r"^\s*sync_interval:.*$", "", text, flags=re.MULTILINE))
    result = subprocess.run(
        [server, "-t", "-c", str(copy)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr + result.stdout


def _jetstream_block() -> str:
    match = re.search(
        r"^jetstream\s*\{(?P<body>.*?)^\}", NATS_CONF.read_text(), re.DOTALL | re.MULTILINE
    )
    assert match is not None, "deploy/nats.conf has no jetstream { } block"
    return match["body"]


def _nats_int(key: str) -> int:
    match = re.search(rf"^{key}:\s*(\S+)\s*$", NATS_CONF.read_text(), re.MULTILINE)
    assert match is not None, f"deploy/nats.conf does not set {key}"
    return int(match[1])
