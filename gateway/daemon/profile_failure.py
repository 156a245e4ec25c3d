"""Why a profile stopped running, in words an operator can act on, and the exit status it earns.

The mistakes an operator makes and can fix (a second daemon on the same data directory, a data
directory that is a file or not writable, a port another process holds) are known: each becomes
one line with the fix, and the traceback, which adds nothing for them, is kept for debug. Any
other exception is a defect: its traceback is logged in full.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sessions.wal import LogInUse

#: Exit status when the data directory cannot be written (EX_CANTCREAT).
EXIT_CANNOT_CREATE = 73
#: Exit status when every profile failed with an unexpected error (EX_SOFTWARE).
EXIT_SOFTWARE = 70
#: Exit status when a port or the data directory's log is another process's (EX_UNAVAILABLE).
EXIT_UNAVAILABLE = os.EX_UNAVAILABLE

#: The errors of a data directory that is not a writable directory.
_UNUSABLE_DIRECTORY = frozenset(
    {errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST, errno.EROFS}
)
#: The errors of a listener whose address is taken or not this machine's.
_UNAVAILABLE_ADDRESS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL})


@dataclass(frozen=True, slots=True)
class ProfileFailure:
    """Why a profile is not running, for the log, `/readyz` and the status page."""

    reason: str
    #: What to do about it; empty when `reason` says it already, or the failure is unexpected.
    suggestion: str
    #: The daemon's exit status when no profile runs because of this.
    exit_status: int
    #: False for an unexpected exception, whose traceback is worth an operator's eyes.
    known: bool

    def summary(self) -> str:
        return f"{self.reason}; {self.suggestion}" if self.suggestion else self.reason


def diagnose(error: BaseException, data_dir: Path) -> ProfileFailure:
    """What `error`, which ended a profile keeping its data under `data_dir`, means."""
    for cause in _causes(error):
        if isinstance(cause, LogInUse):
            # Its message names the holder's pid and the fix.
            return ProfileFailure(str(cause), "", EXIT_UNAVAILABLE, known=True)
        if not isinstance(cause, OSError):
            continue
        if cause.errno in _UNUSABLE_DIRECTORY and _within(cause.filename, data_dir):
            return ProfileFailure(
                f"cannot use the data directory {data_dir}: {cause.strerror} ({cause.filename})",
                "make data_dir a directory this user can write, or choose another with "
                "gateway.yaml's data_dir or --data-dir",
                EXIT_CANNOT_CREATE,
                known=True,
            )
        if cause.errno in _UNAVAILABLE_ADDRESS:
            return ProfileFailure(
                f"cannot listen: {cause.strerror or cause}",
                "stop what uses the port, or choose another in the profile's channels",
                EXIT_UNAVAILABLE,
                known=True,
            )
    return ProfileFailure(f"{type(error).__name__}: {error}", "", EXIT_SOFTWARE, known=False)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and what it holds: the members of a task group's exception group, and causes."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        if current.__cause__ is not None:
            pending.append(current.__cause__)


def _within(filename: object, directory: Path) -> bool:
    if not isinstance(filename, str | bytes | os.PathLike):
        return False
    path = Path(os.path.abspath(os.fsdecode(filename)))
    return path.is_relative_to(os.path.abspath(directory))
