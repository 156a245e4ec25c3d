"""What a profile's failure means to an operator (the daemon tests run these through a real
daemon where the machine allows: as root, a read-only directory is writable all the same)."""

from __future__ import annotations

import errno
from pathlib import Path

from gateway.daemon.profile import diagnose
from sessions.wal import LogInUse


def test_a_journal_in_use_is_known_and_exits_69_even_inside_a_task_group() -> None:
    held = LogInUse("the journal /d/p/journal is in use by pid 7: stop it")
    failure = diagnose(ExceptionGroup("task group", [held]), Path("/d"))
    assert (failure.known, failure.exit_status) == (True, 69)
    assert failure.summary() == "the journal /d/p/journal is in use by pid 7: stop it"


def test_a_read_only_data_dir_is_known_and_exits_73(tmp_path: Path) -> None:
    refused = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "main"))
    failure = diagnose(refused, tmp_path)
    assert (failure.known, failure.exit_status) == (True, 73)
    assert failure.reason == (
        f"cannot use the data directory {tmp_path}: Permission denied ({tmp_path / 'main'})"
    )
    assert "--data-dir" in failure.suggestion


def test_a_refused_file_elsewhere_is_unexpected(tmp_path: Path) -> None:
    refused = PermissionError(errno.EACCES, "Permission denied", "/etc/secret.pem")
    failure = diagnose(refused, tmp_path)
    assert (failure.known, failure.exit_status) == (False, 70)
    assert failure.reason == "PermissionError: [Errno 13] Permission denied: '/etc/secret.pem'"


def test_a_taken_address_is_known_and_exits_69(tmp_path: Path) -> None:
    taken = OSError(errno.EADDRINUSE, "Address already in use")
    try:
        raise RuntimeError("the listener failed") from taken
    except RuntimeError as error:
        failure = diagnose(error, tmp_path)
    assert (failure.known, failure.exit_status) == (True, 69)
    assert failure.reason == "cannot listen: Address already in use"
