"""Which process listens on a TCP port, read from Linux's /proc: how `doctor` tells the ports of
this configuration's running daemon from those another program (or octos-gateway) holds.

A bind test cannot tell them apart (both refuse the bind), nor can asking the port's /healthz
(every octos-gateway answers it alike); the socket's owner can: the listening socket's inode,
among the open files of the pid that holds this configuration's journal.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
#: The `st` column of /proc/net/tcp for a listening socket.
_LISTEN = "0A"


def listening_holder(port: int, pids: Iterable[int]) -> int | None:
    """The one of `pids` with a socket listening on `port`, or None when none of them has.

    Raises OSError when /proc does not say (another system, or no /proc/net/tcp).
    """
    sockets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    for pid in pids:
        fds = PROC / str(pid) / "fd"
        try:
            names = os.listdir(fds)
        except OSError:
            continue  # gone, or another user's: not a holder this check can see
        for name in names:
            try:
                if os.readlink(fds / name) in sockets:
                    return pid
            except OSError:
                continue  # closed meanwhile
    return None


def _listening_inodes(port: int) -> set[int]:
    inodes: set[int] = set()
    tables = [PROC / "net" / "tcp", PROC / "net" / "tcp6"]
    present = [table for table in tables if table.exists()]
    if not present:
        raise FileNotFoundError(f"{tables[0]} does not exist")
    for table in present:
        for line in table.read_text(encoding="ascii").splitlines()[1:]:
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(int(fields[9]))
    return inodes
