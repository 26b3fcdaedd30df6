"""The processes that hold ADIOS2 SST calls away from the simulation (ADIOS2's Python calls
hold the GIL while SST waits):

- ``python -m insitu.stream.relay steer NAME``: the steering relay a :class:`SteeringReader`
  starts (:func:`insitu.stream.steering.relay`);
- ``python -m insitu.stream.relay frames NAME PARAMS``: the SST writer a
  :class:`FrameWriter` starts (:func:`insitu.stream.frames.serve`; PARAMS: JSON engine
  parameters).
"""

import ctypes
import json
import signal
import sys

if __name__ == "__main__":
    try:  # go when the simulation goes, even when it is killed (Linux)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    # stdout is the data channel to the simulation: the log goes to stderr (the simulation's)
    from ..log import enable

    enable("WARNING")
    try:
        if sys.argv[1] == "frames":
            from .frames import serve

            serve(sys.argv[2], json.loads(sys.argv[3]))
        else:
            from .steering import relay

            relay(sys.argv[2])
    except (KeyboardInterrupt, BrokenPipeError):
        pass
