"""The profile's write-ahead log: framed records in segment files, group-committed, replayable.

The log is the single durable record of what a profile received, what it answered and what it
delivered; session files are written behind it and the log is cut at checkpoints.
"""

from sessions.wal.log import (
    FrameError,
    LogInUse,
    LogWriteError,
    ScanResult,
    WriteAheadLog,
    encode_record,
    lock_pid,
    scan_records,
)

__all__ = [
    "FrameError",
    "LogInUse",
    "LogWriteError",
    "ScanResult",
    "WriteAheadLog",
    "encode_record",
    "lock_pid",
    "scan_records",
]
