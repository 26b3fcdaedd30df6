"""Which node a worker daemon lives on, without assuming one host.

A *node id* names the set of daemons that can hand data to each other through shared
memory or CUDA IPC and reach each other's Unix sockets: processes of one host that share
a daemon directory. It is ``<hostname>:<daemon directory>`` unless ``$INSITU_NODE_ID``
gives it (tests that make several "hosts" on one machine give each its own). Two records
of the same node id may use the node's hand-offs; records of different node ids move
their data over the network (:mod:`insitu.transports.tcp`).

The address other nodes reach this one's daemons at (their TCP block servers bind it) is
``$INSITU_NODE_HOST``, else the address the hostname resolves to. For Spark, name
executors' hosts alike (a standalone worker's ``--host``), so that the preferred
locations of partitions (the host that holds their blocks) match executors.
"""

from __future__ import annotations

import os
import socket

__all__ = ["network_enabled", "node_host", "node_id"]


def node_id(directory: str | None = None) -> str:
    """This process's node id: ``$INSITU_NODE_ID``, else ``<hostname>:<directory>``.

    Parameters
    ----------
    directory : str, optional
        The node's daemon directory (made absolute); default ``$INSITU_DAEMON_DIR`` or ``""``.
    """
    given = os.environ.get("INSITU_NODE_ID")
    if given:
        return given
    d = directory if directory is not None else os.environ.get("INSITU_DAEMON_DIR", "")
    return f"{socket.gethostname()}:{os.path.abspath(d) if d else ''}"


def node_host() -> str:
    """The address this node's daemons listen at for other nodes: ``$INSITU_NODE_HOST``,
    else what the hostname resolves to (``127.0.0.1`` if it resolves to nothing)."""
    given = os.environ.get("INSITU_NODE_HOST")
    if given:
        return given
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def network_enabled() -> bool:
    """Whether daemons started from this environment serve their blocks over TCP
    (``$INSITU_DAEMON_TCP`` set to 1/true/yes; :class:`~insitu.engine.SparkEngine` with
    ``network=True`` sets it for its executors)."""
    return os.environ.get("INSITU_DAEMON_TCP", "").strip().lower() in ("1", "true", "yes", "on")
