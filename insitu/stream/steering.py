"""Steering: updates from a viewer back to the simulation on a second ADIOS2 SST stream.

The viewer writes (:class:`SteeringWriter`), the simulation's root rank polls
(:class:`SteeringReader`) once per step. Each step of the stream holds one variable,
``update``: a JSON object such as ``{"camera": {"azimuth": 30}, "iso_values": [0.4]}``.

The simulation never waits for it: a thread of the reader opens the stream once the
viewer's contact file (``<name>.sst``) exists and queues what arrives; ``poll`` only
drains that queue. The viewer does not wait for the simulation either (no rendezvous; a
small queue, oldest updates dropped), so an update sent before the simulation connects
can be lost: a viewer sends its whole state with every update, which the simulation
merges, so the newest one is all that matters.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

__all__ = ["SteeringReader", "SteeringWriter", "steering_name"]

_WRITER = {"RendezvousReaderCount": "0", "QueueLimit": "16", "QueueFullPolicy": "Discard"}


def steering_name(frames: str) -> str:
    """The steering stream that goes with the frame stream `frames`."""
    return f"{frames}.steer"


class SteeringWriter:
    """The viewer's end: sends updates (JSON objects)."""

    def __init__(self, name: str) -> None:
        import adios2

        self.name = name
        self._adios = adios2.Adios()
        io = self._adios.declare_io(f"insitu-steer-writer:{name}")
        io.set_engine("SST")
        io.set_parameters(_WRITER)
        self._stream = adios2.Stream(io, name, "w")
        self.sent = 0

    def send(self, update: Mapping[str, Any]) -> None:
        s = self._stream
        s.begin_step()
        s.write("update", json.dumps(dict(update)))  # an ADIOS2 string variable
        s.end_step()
        self.sent += 1

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> "SteeringWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SteeringReader:
    """The simulation's end: ``poll()`` returns the updates that arrived and never blocks.

    A background thread does the waiting: it opens the stream once the viewer's contact
    file exists (SST completes a reader's open only when the writer next calls into
    ADIOS2, so opening on the simulation's thread could stall a step), reads updates
    into a queue, and after the viewer leaves (end of stream, or a killed viewer's stale
    contact file) waits for the next one.

    Parameters
    ----------
    name : str
        The steering stream (``steering_name(frames)``).
    open_timeout : float
        Seconds an open may take once a contact file is there.
    """

    def __init__(self, name: str, *, open_timeout: float = 10.0) -> None:
        import queue
        import threading

        self.name = name
        self.open_timeout = float(open_timeout)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._connected = threading.Event()
        self.received = 0
        self._thread = threading.Thread(target=self._run, name=f"insitu-steering:{name}", daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        """Whether a viewer's stream is open now."""
        return self._connected.is_set()

    def poll(self) -> list[dict]:
        """Updates received since the last poll, oldest first (malformed ones skipped)."""
        out = []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out

    def _contact(self) -> float | None:
        try:
            return os.stat(self.name + ".sst").st_mtime_ns
        except OSError:
            return None

    def _run(self) -> None:
        import adios2

        tried = None
        while not self._stop.is_set():
            mtime = self._contact()
            if mtime is None or mtime == tried:
                self._stop.wait(0.1)
                continue
            tried = mtime
            ad = adios2.Adios()
            io = ad.declare_io(f"insitu-steer-reader:{self.name}:{mtime}")
            io.set_engine("SST")
            io.set_parameters({"OpenTimeoutSecs": str(max(1, int(round(self.open_timeout))))})
            try:
                stream = adios2.Stream(io, self.name, "r")
            except Exception:  # a stale contact file: that viewer is gone
                continue
            self._connected.set()
            try:
                self._drain(stream, adios2.bindings.StepStatus)
            finally:
                self._connected.clear()
                try:
                    stream.close()
                except Exception:
                    pass

    def _drain(self, stream, status) -> None:
        while not self._stop.is_set():
            try:
                st = stream.begin_step(timeout=0.2)
            except Exception:
                return
            if st == status.NotReady:
                continue
            if st != status.OK:  # the viewer closed or died
                return
            try:
                raw = stream.read("update")
                update = json.loads(raw if isinstance(raw, str) else bytes(np.asarray(raw, np.uint8)).decode())
                if isinstance(update, dict):
                    self._queue.put(update)
                    self.received += 1
            except (ValueError, UnicodeDecodeError):
                pass
            finally:
                stream.end_step()

    def close(self) -> None:
        """Stop the thread (within a fraction of a second, or the open timeout)."""
        self._stop.set()
        self._thread.join(timeout=self.open_timeout + 1)
