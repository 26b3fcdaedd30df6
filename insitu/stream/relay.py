"""``python -m insitu.stream.relay NAME``: the steering relay a :class:`SteeringReader` starts."""

import ctypes
import signal
import sys

from .steering import relay

if __name__ == "__main__":
    try:  # go when the simulation goes, even when it is killed (Linux)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    try:
        relay(sys.argv[1])
    except (KeyboardInterrupt, BrokenPipeError):
        pass
