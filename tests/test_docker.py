"""The Docker image, checked without a container engine.

The Dockerfile's settings are checked one by one; then the image is replayed here (see
tests/support/image.py) and its ENTRYPOINT + CMD run with the configuration the image ships:
they must answer the image's own HEALTHCHECK command, chat once and stop cleanly on SIGTERM.
docker-compose.yml and every example configuration are checked too.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import aiohttp
import pytest
import yaml

from config import ConfigError, load_gateway, load_profile
from tests.support.daemon import REPO_ROOT, WAIT_S, free_port
from tests.support.image import (
    InstalledDaemon,
    InstalledImage,
    Instruction,
    build_image,
    config_argument,
    every,
    last,
    parse_dockerfile,
)

DOCKERFILE = REPO_ROOT / "Dockerfile"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
EXAMPLES = REPO_ROOT / "examples"
HEALTH_PORT = 8090
API_PORT = 8091
#: Plausible values for the variables the examples reference (fallback: a generic string).
EXAMPLE_ENV = {
    "OPENAI_API_KEY": "sk-test-key",
    "TELEGRAM_BOT_TOKEN": "123456789:AAtest-token",
    "DISCORD_BOT_TOKEN": "discord-test-token",
    "SLACK_BOT_TOKEN": "xoxb-test-token",
    "SLACK_APP_TOKEN": "xapp-test-token",
}
_VARIABLE = re.compile(r"(?<!\$)\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<default>:-[^}]*)?\}")


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE)


# The Dockerfile on its own.


def test_image_is_slim_and_runs_as_a_user(instructions: list[Instruction]) -> None:
    (base,) = every(instructions, "FROM")
    assert base.args[0].startswith("python:3.")
    assert base.args[0].endswith("-slim")
    user = last(instructions, "USER").args[0]
    assert user.split(":")[0] not in {"root", "0"}
    # Nothing runs as root after the switch.
    user_line = last(instructions, "USER").line
    assert all(run.line < user_line for run in every(instructions, "RUN"))


def test_image_declares_volume_ports_and_healthcheck(instructions: list[Instruction]) -> None:
    assert "/data" in last(instructions, "VOLUME").args
    exposed = {port for expose in every(instructions, "EXPOSE") for port in expose.args}
    assert exposed == {str(HEALTH_PORT), str(API_PORT)}
    health = last(instructions, "HEALTHCHECK")
    assert health.json_form
    assert health.args[0] == "CMD"
    assert f"127.0.0.1:{HEALTH_PORT}/healthz" in " ".join(health.args)
    flags = {flag.split("=")[0] for flag in health.flags}
    assert {"--interval", "--timeout"} <= flags


def test_entrypoint_and_cmd_are_exec_form(instructions: list[Instruction]) -> None:
    entrypoint = last(instructions, "ENTRYPOINT")
    cmd = last(instructions, "CMD")
    # Exec form: the daemon is PID 1 and receives SIGTERM itself, not through a shell.
    assert entrypoint.json_form
    assert cmd.json_form
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert entrypoint.args == ("octos-gateway",)
    assert entrypoint.args[0] in project["scripts"]
    assert cmd.args[0] == "run"
    config = PurePosixPath(config_argument(cmd))
    copied_to = {PurePosixPath(copy.args[-1]) for copy in every(instructions, "COPY")}
    assert config in copied_to, "CMD's config is not one the image ships"


def test_image_copies_every_package_it_installs(instructions: list[Instruction]) -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.removesuffix("*") for pattern in patterns}
    sources = {source for copy in every(instructions, "COPY") for source in copy.args[:-1]}
    assert packages <= sources
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= sources
    for source in sources:
        assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the build context"


def test_shipped_config_listens_where_the_image_says(instructions: list[Instruction]) -> None:
    """examples/docker is what the image copies to /etc/octos-gateway: it must fit the image."""
    loaded = load_gateway(EXAMPLES / "docker" / "gateway.yaml", env={})
    assert loaded.gateway.data_dir == Path(last(instructions, "VOLUME").args[0])
    # Inside a container, only addresses on every interface can be published.
    assert (loaded.gateway.http.host, loaded.gateway.http.port) == ("0.0.0.0", HEALTH_PORT)
    api_channels = [
        channel
        for profile in loaded.profiles.values()
        for channel in profile.channels
        if channel.type == "api"
    ]
    assert [(channel.host, channel.port) for channel in api_channels] == [("0.0.0.0", API_PORT)]


# docker-compose.yml.


def compose_seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    assert match, f"unexpected duration {duration!r}"
    return int(match[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0}[match[2]]


def test_compose_mounts_config_and_data_and_maps_ports(instructions: list[Instruction]) -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    service = compose["services"]["gateway"]
    assert service["build"] == "."
    # "[host_ip:]host_port:container_port", keyed by the container's port.
    published = {mapping.split(":")[-1]: mapping.split(":")[-2] for mapping in service["ports"]}
    assert published == {str(HEALTH_PORT): str(HEALTH_PORT), str(API_PORT): str(API_PORT)}

    config_dir = str(PurePosixPath(config_argument(last(instructions, "CMD"))).parent)
    mounts = [volume.split(":") for volume in service["volumes"]]
    (config_mount,) = [mount for mount in mounts if mount[1] == config_dir]
    assert (REPO_ROOT / config_mount[0]).resolve() == (EXAMPLES / "docker").resolve()
    assert config_mount[2:] == ["ro"]
    (data_mount,) = [mount for mount in mounts if mount[1] == "/data"]
    assert data_mount[0] in compose["volumes"], "/data must be a named volume"

    # `docker stop` kills after stop_grace_period: the daemon's own grace must fit inside it.
    shipped = load_gateway(EXAMPLES / "docker" / "gateway.yaml", env={}).gateway
    assert shipped.shutdown_grace_s < compose_seconds(service["stop_grace_period"])
    # Every variable the shipped config needs is passed through.
    needed = set(referenced_variables(EXAMPLES / "docker"))
    assert needed <= set(service.get("environment", {}))


# Every YAML file under examples/.


def referenced_variables(root: Path) -> dict[str, bool]:
    """Every `${NAME}` under `root`, mapped to whether it must be set (it has no default)."""
    found: dict[str, bool] = {}
    paths = [root] if root.is_file() else sorted(root.rglob("*.yaml"))
    for path in paths:
        for match in _VARIABLE.finditer(path.read_text()):
            required = match["default"] is None
            found[match["name"]] = found.get(match["name"], False) or required
    return found


def example_env(root: Path) -> dict[str, str]:
    """Values for the variables without a default; those with one keep the default."""
    return {
        name: EXAMPLE_ENV.get(name, f"test-value-for-{name.lower()}")
        for name, required in referenced_variables(root).items()
        if required
    }


def example_files() -> Iterator[Path]:
    yield from sorted(EXAMPLES.rglob("*.yaml"))
    yield from sorted(EXAMPLES.rglob("*.yml"))


def is_gateway_file(path: Path) -> bool:
    return path.stem == "gateway"


def load_example(path: Path, env: Mapping[str, str]) -> object:
    return load_gateway(path, env=env) if is_gateway_file(path) else load_profile(path, env=env)


def loadable_examples() -> Iterator[object]:
    for path in example_files():
        yield pytest.param(path, id=str(path.relative_to(EXAMPLES)))


@pytest.mark.parametrize("path", list(loadable_examples()))
def test_every_example_loads(path: Path) -> None:
    if is_gateway_file(path):
        loaded = load_gateway(path, env=example_env(path.parent))
        profiles_dir = loaded.gateway.profiles_dir
        assert set(loaded.profiles) == {profile.stem for profile in profiles_dir.glob("*.yaml")}
        assert loaded.profiles, f"{path} runs no profile"
    else:
        profile = load_profile(path, env=example_env(path))
        assert profile.channels, f"{path} has no channels"


@pytest.mark.parametrize(
    "path",
    [path for path in example_files() if any(referenced_variables(path).values())],
    ids=lambda path: str(path.relative_to(EXAMPLES)),
)
def test_an_example_without_its_variables_names_them(path: Path) -> None:
    env = example_env(path)
    missing = sorted(env)[0]
    del env[missing]
    with pytest.raises(ConfigError) as raised:
        load_example(path, env)
    assert missing in str(raised.value)


# The image, replayed on this machine.


@pytest.fixture(scope="module")
def installed(
    instructions: list[Instruction], tmp_path_factory: pytest.TempPathFactory
) -> InstalledImage:
    return build_image(instructions, tmp_path_factory.mktemp("docker"))


def localise_config(config: Path, data_dir: Path) -> tuple[int, int]:
    """Rewrites only what must differ here: data dir, 0.0.0.0 and the fixed ports.

    Returns the new (health port, api port).
    """
    gateway = yaml.safe_load(config.read_text())
    gateway["data_dir"] = str(data_dir)
    health_port = free_port()
    gateway["http"] = {**gateway["http"], "host": "127.0.0.1", "port": health_port}
    config.write_text(yaml.safe_dump(gateway))
    api_port = free_port()
    for profile_path in (config.parent / gateway["profiles_dir"]).glob("*.yaml"):
        profile = yaml.safe_load(profile_path.read_text())
        for channel in profile["channels"]:
            if channel.get("type") == "api":
                channel.update(host="127.0.0.1", port=api_port)
        profile_path.write_text(yaml.safe_dump(profile))
    return health_port, api_port


async def run_to_end(command: list[str], *, cwd: Path, env: Mapping[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), WAIT_S)
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


def healthcheck_command(instructions: list[Instruction], health_port: int) -> list[str]:
    """The HEALTHCHECK's own command, pointed at the port the daemon got here."""
    _cmd, *command = last(instructions, "HEALTHCHECK").args
    return [part.replace(f":{HEALTH_PORT}/", f":{health_port}/") for part in command]


async def post_json(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    timeout = aiohttp.ClientTimeout(total=WAIT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.post(url, json=body) as reply:
        return reply.status, await reply.json()


async def get_text(url: str) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=WAIT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(url) as reply:
        return reply.status, await reply.text()


@pytest.mark.slow
async def test_the_image_command_runs_from_a_fresh_install(
    instructions: list[Instruction], installed: InstalledImage
) -> None:
    image, env = installed.root, installed.env
    # The installed copy is what runs, not this checkout.
    code, location = await run_to_end(
        ["python", "-c", "import gateway; print(gateway.__file__)"], cwd=image.root, env=env
    )
    assert code == 0, location
    assert Path(location.strip()).is_relative_to(installed.venv)

    cmd = last(instructions, "CMD")
    config_path = image.path(config_argument(cmd))
    data_dir = image.path(last(instructions, "VOLUME").args[0])
    data_dir.mkdir(parents=True, exist_ok=True)
    health_port, api_port = localise_config(config_path, data_dir)
    health = healthcheck_command(instructions, health_port)
    workdir = image.path(installed.workdir)

    code, output = await run_to_end(health, cwd=workdir, env=env)
    assert code != 0, "the health check passed with no daemon running"

    entrypoint = last(instructions, "ENTRYPOINT").args
    executable = shutil.which(entrypoint[0], path=env["PATH"])
    assert executable is not None
    assert Path(executable).is_relative_to(installed.venv)
    arguments = [str(config_path) if arg == config_argument(cmd) else arg for arg in cmd.args]
    daemon = InstalledDaemon([executable, *entrypoint[1:], *arguments], cwd=workdir, env=env)
    await daemon.start()
    try:
        code, output = await run_to_end(health, cwd=workdir, env=env)
        assert code == 0, output
        await daemon.wait_log(lambda event: event.get("event") == "api.web_chat_ready")

        api = f"http://127.0.0.1:{api_port}"
        status, reply = await post_json(f"{api}/v1/chat", {"chat_id": "box", "content": "ahoy"})
        assert (status, reply["reply"]) == (200, "ahoy")
        status, page = await get_text(f"{api}/")
        assert status == 200
        assert "/static/app.js" in page  # the page's files were installed with the package
        status, _script = await get_text(f"{api}/static/app.js")
        assert status == 200

        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
    finally:
        await daemon.stop()
    assert not [event for event in daemon.logs if event.get("level") in {"error", "critical"}]
    sessions = [path.read_text() for path in data_dir.rglob("*.jsonl")]
    assert len(sessions) == 1
    _meta, *messages = sessions[0].splitlines()
    assert [json.loads(line)["content"] for line in messages] == ["ahoy", "ahoy"]
