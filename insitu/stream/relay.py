"""``python -m insitu.stream.relay NAME``: the steering relay a :class:`SteeringReader` starts."""

import sys

from .steering import relay

if __name__ == "__main__":
    try:
        relay(sys.argv[1])
    except (KeyboardInterrupt, BrokenPipeError):
        pass
