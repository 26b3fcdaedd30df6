"""Processes of this node as the pool sees them (Linux ``/proc``): alive or not, and who
they are across pid reuse. Shared by the daemon and the block cache (which cleans the
spill directories of dead processes)."""

from __future__ import annotations

import os
import re
import socket

__all__ = ["host_tag", "pid_alive", "start_time"]


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs on this node: whether any of its threads does. A zombie
    no one reaped yet has exited and closed its sockets: not alive. The main thread alone
    is not enough: killed, it can turn zombie while other threads still hold the
    process's files (a client then reaches a socket that dies under it)."""
    try:
        tasks = os.listdir(f"/proc/{int(pid)}/task")
    except (FileNotFoundError, ProcessLookupError):
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{int(pid)}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue  # gone meanwhile
        if state not in (b"Z", b"X"):
            return True
    return False


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), None if it does not exist: with
    the pid, it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22 of proc(5), counted after comm
    except (OSError, IndexError, ValueError):
        return None


def host_tag() -> str:
    """This node's short host name, safe in file names (no dashes: they separate fields)."""
    return re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname().split(".")[0][:24]) or "host"
