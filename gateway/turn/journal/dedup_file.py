"""The dedup table's durable copy: platform keys seen in the last 24 hours, one per line.

Kept beside the log rather than in its checkpoints: restating 200,000 keys in every checkpoint
would cost megabytes of writes per cut. Each checkpoint appends the keys accepted since the
previous one (and syncs them) before it drops the log records that held them; when the file
holds twice the live entries it is rewritten with only those. A torn last line is ignored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from sessions.durable import sync_data, write_all, write_state_file

Entry = tuple[str, int, float]


def _line(entry: Entry) -> bytes:
    key, inbound_id, at = entry
    # Keys are channel\x1fchat\x1fid: they hold no tab or newline of their own once escaped.
    escaped = key.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return f"{escaped}\t{inbound_id}\t{at:.3f}\n".encode()


def _unescape(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for char in chars:
        if char != "\\":
            out.append(char)
            continue
        following = next(chars, "")
        out.append({"n": "\n", "t": "\t"}.get(following, following))
    return "".join(out)


def read_entries(path: Path) -> Iterator[Entry]:
    """Every whole, readable line; blocking."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for raw in data.split(b"\n")[:-1]:
        parts = raw.decode("utf-8", "replace").split("\t")
        if len(parts) != 3:
            continue
        try:
            yield _unescape(parts[0]), int(parts[1]), float(parts[2])
        except ValueError:
            continue


def append_entries(path: Path, entries: Iterable[Entry], *, durable: bool) -> int:
    """Append and (with `durable`) sync; the number of lines written. Blocking."""
    data = b"".join(_line(entry) for entry in entries)
    if not data:
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        if durable:
            sync_data(fd)
    finally:
        os.close(fd)
    return data.count(b"\n")


def rewrite_entries(path: Path, entries: Iterable[Entry]) -> None:
    """Replace the file with exactly `entries`, atomically. Blocking."""
    write_state_file(path, b"".join(_line(entry) for entry in entries))
