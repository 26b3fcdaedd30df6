"""What ADIOS2 SST leaves to us: which interface to advertise, whose contact file to trust,
who is connected.

SST has no authentication: a reader connects to whatever address the writer's contact
file (``<name>.sst``) names, and a writer serves whoever connects. So a reader opens only
contact files the user owns, that nobody else can rewrite, in a directory where nobody
else can swap them (:func:`read_contact`), and reads a private copy of what it checked,
so the file cannot change between the check and ADIOS2's read. SST's ``sockets``
transport listens on every interface whatever it advertises; ``NetworkInterface`` only
picks the address written into contact files, which is the loopback interface by
default (:func:`sst_parameters`).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import sys
import tempfile
import time

__all__ = ["ContactFileError", "ReaderTimeoutError", "open_contact", "peers", "read_contact", "sst_parameters"]

#: Environment variable naming the network interface SST advertises ("" lets ADIOS2 choose).
INTERFACE_ENV = "INSITU_SST_INTERFACE"


class ContactFileError(PermissionError):
    """An SST contact file that someone else could have written: not opened."""


class ReaderTimeoutError(TimeoutError):
    """SST readers held a writer past its deadline and were dropped."""


def _user(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def sst_parameters(interface: str | None = None) -> dict[str, str]:
    """SST engine parameters that choose the network interface written into contact files.

    Parameters
    ----------
    interface : str, optional
        Interface name ("lo", "eth0", "ib0"); "" leaves the choice to ADIOS2. Default:
        ``$INSITU_SST_INTERFACE``, else "lo" where the machine has one (Linux).

    Returns
    -------
    {"NetworkInterface": name} or {}
    """
    if interface is None:
        interface = os.environ.get(INTERFACE_ENV)
    if interface is None:
        interface = "lo" if _interfaces() and "lo" in _interfaces() else ""
    if not interface:
        return {}
    names = _interfaces()
    if names and interface not in names:
        raise ValueError(f"SST network interface {interface!r} (interface= or ${INTERFACE_ENV}): no such interface; "
                         f"this machine has {', '.join(sorted(names))}")
    return {"NetworkInterface": interface}


def _interfaces() -> list[str]:
    try:
        return [n for _, n in socket.if_nameindex()]
    except (OSError, AttributeError):
        return []


def _check(name: str, st: os.stat_result) -> None:
    path = name + ".sst"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise ContactFileError(f"refusing SST contact file {path}: not a regular file (a link or other kind of file "
                               "could point anywhere)")
    me = os.geteuid()
    if st.st_uid != me:
        raise ContactFileError(f"refusing SST contact file {path}: owned by {_user(st.st_uid)}, not by this user "
                               f"({_user(me)}); SST has no authentication, so a stream is only opened from a contact "
                               "file the user wrote")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ContactFileError(f"refusing SST contact file {path}: writable by others "
                               f"(mode {stat.S_IMODE(st.st_mode):o}, owner {_user(st.st_uid)})")
    folder = os.path.dirname(os.path.abspath(path))
    d = os.stat(folder)
    if d.st_mode & stat.S_IWOTH and not d.st_mode & stat.S_ISVTX:
        raise ContactFileError(f"refusing SST contact file {path} (owner {_user(st.st_uid)}): its directory "
                               f"{folder} is world-writable without the sticky bit, so anyone can replace it")


def read_contact(name: str) -> bytes:
    """The contact file of SST stream `name`, checked: a regular file (not a link) owned by
    this user, writable by no one else, in a directory that is not world-writable without
    the sticky bit.

    Raises
    ------
    FileNotFoundError
        No contact file (no writer yet).
    ContactFileError
        Someone else could have written it; the message names the file and its owner.
    """
    path = name + ".sst"
    try:
        # O_NONBLOCK: a planted FIFO must not hang the open; fstat below refuses it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ContactFileError(f"refusing SST contact file {path}: a symbolic link "
                                   f"(owner {_user(os.lstat(path).st_uid)})") from None
        raise
    try:
        _check(name, os.fstat(fd))  # what was opened, not what the name points at by now
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def open_contact(name: str, opener, *, timeout: float = 0.0):
    """``opener(private_name)`` on a private copy of stream `name`'s checked contact file.

    Waits up to `timeout` seconds for the contact file to appear, checks it
    (:func:`read_contact`), copies it into a fresh directory only this user can enter and
    returns ``opener(copy)``, where `copy` is the stream name ADIOS2 opens (SST reads the
    contact file once, in its open); the copy is removed afterwards.
    """
    end = time.monotonic() + timeout
    while True:
        try:
            contact = read_contact(name)
            break
        except FileNotFoundError:
            if time.monotonic() >= end:
                raise FileNotFoundError(f"SST stream {name}: no contact file {name}.sst (no writer) after "
                                        f"{timeout:g} s") from None
            time.sleep(0.05)
    folder = tempfile.mkdtemp(prefix="insitu-sst-")
    try:
        copy = os.path.join(folder, os.path.basename(name) or "stream")
        with open(copy + ".sst", "wb") as f:
            f.write(contact)
        return opener(copy)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _table(pid: int) -> list[tuple[str, str, str, int, int]]:
    """(local, remote, state, uid, inode) of every TCP socket in `pid`'s network namespace."""
    rows = []
    for proto in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{proto}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            p = line.split()
            rows.append((_addr(p[1]), _addr(p[2]), p[3], int(p[7]), int(p[9])))
    return rows


def _addr(hexaddr: str) -> str:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    # /proc/net/tcp prints each 32-bit word in host order
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    text = socket.inet_ntop(family, raw)
    if text.startswith("::ffff:") and "." in text:
        text = text[7:]
    return f"{text}:{int(port, 16)}"


def peers(pid: int) -> list[str]:
    """The TCP peers of process `pid` (an SST writer of its own: its readers), as
    "address:port", with the peer's user where it is on this machine ("127.0.0.1:40100
    (uid 65534 (nobody))"). Linux; [] where /proc cannot tell."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(int(link[8:-1]))
    except OSError:
        return []
    table = _table(pid)
    owner = {local: uid for local, _, _, uid, _ in table}
    out = []
    for local, remote, state, _, inode in table:
        if inode in inodes and state == "01":  # ESTABLISHED
            who = f" ({_user(owner[remote])})" if remote in owner else ""
            if f"{remote}{who}" not in out:
                out.append(f"{remote}{who}")
    return out
