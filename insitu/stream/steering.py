"""Steering: updates from a viewer back to the simulation on a second ADIOS2 SST stream.

The viewer writes (:class:`SteeringWriter`), the simulation's root rank polls
(:class:`SteeringReader`) once per step. Each step of the stream holds one variable,
``update``: a JSON object such as ``{"camera": {"azimuth": 30}, "iso_values": [0.4]}``.

The simulation never waits for it: a relay process opens the stream once the viewer's
contact file (``<name>.sst``) exists and passes what arrives through a pipe; ``poll``
only reads what is already in the pipe. SST has no authentication, so the relay opens
only a contact file of this user's that nobody else can rewrite (``_sst.read_contact``);
another one is refused and reported in :attr:`SteeringReader.problems`. The viewer does
not wait for the simulation either (no rendezvous; a small queue, and SST drops new
updates while it is full, which the relay's prompt reading keeps from happening), so an
update sent before the simulation connects can be lost: a viewer sends
its whole state with every update, which the simulation merges, so the newest one is all
that matters.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from ..log import get_logger
from ._sst import ContactFileError, open_contact, sst_parameters
from .frames import _Stream

__all__ = ["SteeringReader", "SteeringWriter", "relay", "steering_name"]

_WRITER = {"RendezvousReaderCount": "0", "QueueLimit": "16", "QueueFullPolicy": "Discard"}

_log = get_logger(__name__)


def steering_name(frames: str) -> str:
    """The steering stream that goes with the frame stream `frames`."""
    return f"{frames}.steer"


class SteeringWriter(_Stream):
    """The viewer's end: sends updates (JSON objects).

    Parameters
    ----------
    name : str
        The steering stream (``steering_name(frames)``).
    interface : str, optional
        The network interface written into the contact file (see :func:`sst_parameters`).
    """

    def __init__(self, name: str, *, interface: str | None = None) -> None:
        import adios2

        self.name = name
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-steer-writer:{name}")
        io.set_engine("SST")
        io.set_parameters({**_WRITER, **sst_parameters(interface)})
        self._stream = adios2.Stream(io, name, "w")
        try:  # readers refuse a contact file others may write (a umask of 002 makes one)
            st = os.stat(name + ".sst")
            if st.st_uid == os.geteuid() and st.st_mode & 0o022:
                os.chmod(name + ".sst", st.st_mode & 0o755)
        except OSError:
            pass
        self.sent = 0

    def send(self, update: Mapping[str, Any]) -> None:
        s = self._stream
        s.begin_step()
        s.write("update", json.dumps(dict(update)))  # an ADIOS2 string variable
        s.end_step()
        self.sent += 1


class SteeringReader:
    """The simulation's end: ``poll()`` returns the updates that arrived and never blocks.

    A relay process does the waiting (``python -m insitu.stream.relay NAME``): it opens
    the stream once the viewer's contact file exists, reads updates and prints them as
    JSON lines, and after a viewer leaves (end of stream, or a killed viewer's stale
    contact file) waits for the next one. A process, not a thread: ADIOS2's Python calls
    hold the GIL while they block (an SST open lasts until the viewer next calls into
    ADIOS2), which would stall the simulation's own thread.

    Parameters
    ----------
    name : str
        The steering stream (``steering_name(frames)``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.received = 0
        #: What the relay refused or could not do, newest last (a contact file of another user...).
        self.problems: list[str] = []
        #: Relays started again after one died (ADIOS2's SST reader can crash on a viewer's exit).
        self.restarts = 0
        self._buf = b""
        self._started = 0.0
        self._start()

    def _start(self) -> None:
        import subprocess
        import sys
        import time

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the relay imports insitu as we do
        self._proc = subprocess.Popen([sys.executable, "-m", "insitu.stream.relay", "steer", self.name],
                                      stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                                      start_new_session=True)
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._started = time.monotonic()

    @property
    def alive(self) -> bool:
        """Whether the relay process runs."""
        return self._proc.poll() is None

    def poll(self) -> list[dict]:
        """Updates received since the last poll, oldest first (malformed ones skipped; the
        relay's reports go to :attr:`problems`). A relay that died is started again (at most
        once a second)."""
        import time

        if not self.alive and time.monotonic() - self._started > 1.0:
            out = self._read()
            self._proc.stdout.close()
            self._start()
            self.restarts += 1
            return out
        return self._read()

    def _read(self) -> list[dict]:
        try:
            chunk = self._proc.stdout.read()
        except (OSError, ValueError):
            chunk = None
        if chunk:
            self._buf += chunk
        out = []
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            try:
                update = json.loads(line)
            except ValueError:
                continue
            if isinstance(update, dict):
                out.append(update)
                self.received += 1
            elif isinstance(update, list) and update[:1] == ["problem"] and len(update) == 2:
                self.problems.append(str(update[1]))
                del self.problems[:-100]
        return out

    def close(self) -> None:
        """Stop the relay."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except Exception:
                self._proc.kill()
        self._proc.stdout.close()


def relay(name: str, *, out=None, interface: str | None = None) -> None:
    """Forward the updates of steering stream `name` to `out` (stdout) as JSON lines,
    viewer after viewer, until killed. A contact file that another user could have written
    is not opened: ``["problem", "refusing SST contact file ..."]`` goes out instead (and
    is logged as a warning), once per version of the file."""
    import sys
    import time

    import adios2

    out = out or sys.stdout
    params = {"OpenTimeoutSecs": "10", **sst_parameters(interface)}
    tried = None
    while True:
        try:
            st = os.lstat(name + ".sst")
            version = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)  # ctime: a chmod/chown makes a new version
        except OSError:
            version = None
        if version is None or version == tried:
            time.sleep(0.05)
            continue
        tried = version
        ad = adios2.Adios()
        io = ad.declare_io(f"insitu-steer-relay:{version}")
        io.set_engine("SST")
        io.set_parameters(params)
        try:
            stream = open_contact(name, lambda copy: adios2.Stream(io, copy, "r"))
        except ContactFileError as e:
            _log.warning("steering relay: %s", e)
            out.write(json.dumps(["problem", str(e)]) + "\n")
            out.flush()
            continue
        except Exception:  # a stale contact file: that viewer is gone
            continue
        status = adios2.bindings.StepStatus
        try:
            while True:
                # Blocking: a finite SST timeout has crashed the reader (ADIOS2 issue 1862);
                # this is a process of its own, terminated when the simulation closes.
                st = stream.begin_step(timeout=-1)
                if st != status.OK:  # the viewer closed or died
                    break
                try:
                    raw = stream.read("update")
                    text = raw if isinstance(raw, str) else bytes(np.asarray(raw, np.uint8)).decode()
                    json.loads(text)
                    out.write(text.replace("\n", " ") + "\n")
                    out.flush()
                except (ValueError, UnicodeDecodeError):
                    pass
                finally:
                    stream.end_step()
        except Exception:
            pass
        finally:
            try:
                stream.close()
            except Exception:
                pass
