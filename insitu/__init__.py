"""insitu: in-situ GPU visualization of running simulations.

The runtime layer: arrays and the counted transfer gateway (:mod:`insitu.arrays`),
domain decomposition (:mod:`insitu.domain`), halo exchange (:mod:`insitu.halo`) over
pluggable transports (:mod:`insitu.transports`); logging (:mod:`insitu.log`: named
loggers, the MPI rank in each record, ``insitu.log.enable()`` for output on stderr).
"""

from . import arrays, domain, halo, log, transports
from .arrays import (
    DeviceUnavailableError,
    HostTransferError,
    asarray,
    count_transfers,
    no_host_transfers,
    to_device,
    to_host,
)
from .domain import BlockInfo, Domain, dims_create
from .errors import InsituError, MismatchError, PeerTimeoutError
from ._version import __version__
from .halo import HaloExchange, exchange_halos

__all__ = [
    "BlockInfo",
    "DeviceUnavailableError",
    "Domain",
    "HaloExchange",
    "HostTransferError",
    "InsituError",
    "MismatchError",
    "PeerTimeoutError",
    "__version__",
    "arrays",
    "asarray",
    "count_transfers",
    "dims_create",
    "domain",
    "exchange_halos",
    "halo",
    "log",
    "no_host_transfers",
    "to_device",
    "to_host",
    "transports",
]
