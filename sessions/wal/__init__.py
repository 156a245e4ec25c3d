"""The profile's write-ahead log: framed records in segment files, group-committed, replayable.

The log is the single durable record of what a profile received, what it answered and what it
delivered; session files are written behind it and the log is cut at checkpoints.
"""

from sessions.wal.framing import FrameError, ScanResult, encode_record, scan_records
from sessions.wal.log import LogInUse, LogWriteError, WriteAheadLog, lock_pid

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
