"""A Docker image replayed without a container engine, for tests of the Dockerfile.

The Dockerfile is read with BuildKit's own parser (the `dockerfile` package); its COPY steps
are replayed into a folder standing in for the image's root; the project is installed from
there into a fresh virtual environment, offline: the dependencies are the ones the tests run
with, seen through a .pth file, and the project itself is a real, non-editable install.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import dockerfile  # type: ignore[import-not-found]

from tests.support.daemon import REPO_ROOT, DaemonProcess

#: Longest wait for a build step (venv, pip), in seconds.
BUILD_WAIT_S = 180.0


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    args: tuple[str, ...]
    flags: tuple[str, ...]
    json_form: bool
    line: int


def parse_dockerfile(path: Path) -> list[Instruction]:
    return [
        Instruction(
            keyword=str(command.cmd).upper(),
            args=tuple(str(value) for value in command.value),
            flags=tuple(str(flag) for flag in command.flags),
            json_form=bool(command.json),
            line=int(command.start_line),
        )
        for command in dockerfile.parse_file(str(path))
    ]


def last(instructions: list[Instruction], keyword: str) -> Instruction:
    """The instruction that takes effect: Docker keeps the last CMD, USER, ENTRYPOINT..."""
    found = [instruction for instruction in instructions if instruction.keyword == keyword]
    assert found, f"the Dockerfile has no {keyword}"
    return found[-1]


def every(instructions: list[Instruction], keyword: str) -> list[Instruction]:
    return [instruction for instruction in instructions if instruction.keyword == keyword]


def config_argument(cmd: Instruction) -> str:
    assert "-c" in cmd.args, f"CMD {cmd.args} names no config with -c"
    return cmd.args[cmd.args.index("-c") + 1]


def environment(instructions: list[Instruction]) -> dict[str, str]:
    """The image's ENV settings (the parser gives them as key, value, key, value...)."""
    settings: dict[str, str] = {}
    for instruction in every(instructions, "ENV"):
        pairs = instruction.args
        settings.update(zip(pairs[::2], pairs[1::2], strict=True))
    return settings


@dataclass(frozen=True, slots=True)
class ImageRoot:
    """A folder standing in for the image's filesystem root."""

    root: Path

    def path(self, container_path: str, workdir: str = "/") -> Path:
        absolute = PurePosixPath(workdir) / container_path
        return self.root.joinpath(*absolute.parts[1:])

    def copy(self, instruction: Instruction, workdir: str) -> None:
        """COPY as Docker does it: a directory's contents, a file into a `dir/` or by name."""
        *sources, destination = instruction.args
        target = self.path(destination, workdir)
        for source in sources:
            origin = REPO_ROOT / source
            if origin.is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                shutil.copytree(origin, target, dirs_exist_ok=True, ignore=ignore)
            elif destination.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target / origin.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)


@dataclass(frozen=True, slots=True)
class InstalledImage:
    root: ImageRoot
    venv: Path
    workdir: str
    env: dict[str, str]


def build_image(instructions: list[Instruction], base: Path) -> InstalledImage:
    image = ImageRoot(base / "image")
    workdir = "/"
    for instruction in instructions:
        if instruction.keyword == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / instruction.args[0])
        elif instruction.keyword == "COPY":
            image.copy(instruction, workdir)
    (install,) = [run for run in every(instructions, "RUN") if "pip install" in run.args[0]]
    assert re.search(r"pip install \"?\.(\[[\w,]+\])?\"?", install.args[0]), install
    venv = base / "venv"
    install_project(venv, image.path(workdir))
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    }
    env.update(environment(instructions))
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return InstalledImage(image, venv, workdir, env)


def install_project(venv: Path, source: Path) -> None:
    """A fresh venv with the project installed from `source` (what the image's pip does).

    The dependencies are the ones this test runs with, seen through a .pth file, so nothing
    is downloaded; the project itself is a real, non-editable install of the copied sources.
    """
    run = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
    subprocess.run(run, check=True, timeout=BUILD_WAIT_S)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=BUILD_WAIT_S,
    ).stdout.strip()
    Path(purelib, "zz_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run(
        [*pip, "--no-build-isolation", "--disable-pip-version-check", str(source)],
        check=True,
        timeout=BUILD_WAIT_S,
        cwd=source,
    )


class InstalledDaemon(DaemonProcess):
    """The image's ENTRYPOINT + CMD, from the fresh install rather than `python -m gateway`."""

    def __init__(self, command: list[str], *, cwd: Path, env: Mapping[str, str]) -> None:
        super().__init__(Path(command[-1]))
        self.command = command
        self.cwd = cwd
        self.full_env = dict(env)

    async def start(self) -> InstalledDaemon:
        self.process = await asyncio.create_subprocess_exec(
            *self.command,
            cwd=self.cwd,
            env=self.full_env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read_logs(), name="installed-daemon-logs")
        listening = await self.wait_log(lambda event: event.get("event") == "daemon.listening")
        self.http_url = str(listening["url"])
        return self
