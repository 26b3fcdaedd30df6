"""The MPI job as filters and plots see it: global reductions, bounds and agreement on a
step's failures, every collective with a deadline (:class:`Context`)."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from insitu import arrays
from insitu.errors import PeerTimeoutError

from .errors import AdaptorError, MeshError
from .mesh import CellDomain, MeshDomain

__all__ = ["Context", "PeerFailedError"]


class PeerFailedError(AdaptorError):
    """Another rank failed in a step this rank was part of."""


#: Tags of the agreement traffic on the context's private communicator.
_UP, _DOWN = 0x1A50, 0x1A51
_OPS = {"min": np.minimum, "max": np.maximum, "sum": np.add}


class Context:
    """What filters and plots need from the job: global reductions and bounds, with deadlines.

    Every collective goes through rank 0 over a private duplicate of `comm` (point to
    point, numbered by step and by call), so that each one has a deadline and names who
    is missing, and a rank that left a step early is noticed at once instead of pairing
    its next call with the others' current one:

    - rank 0 waits up to `timeout` seconds for everybody's part; a rank that does not
      come is named in a :class:`~insitu.errors.PeerTimeoutError` raised on every rank
      that took part; the others wait up to twice that for rank 0;
    - a rank that failed inside a step reports that at the step's end
      (:meth:`step_verdict`); a collective it skipped fails at once on every rank
      (:class:`PeerFailedError` naming it), and the verdict gives every rank the same
      list of failures.

    Linear in the number of ranks at rank 0: meant for the few small values a step
    agrees on (ranges, bounds, layer kinds, errors), not for bulk data.

    Parameters
    ----------
    comm : mpi4py communicator, optional
        The job's ranks; ``None``: one process.
    timeout : float
        Seconds rank 0 waits for the other ranks in one collective.
    """

    def __init__(self, comm=None, *, timeout: float = 60.0) -> None:
        self.comm = comm
        self.rank, self.size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
        self.timeout = float(timeout)
        self._p2p = None
        self._epoch, self._seq, self._step_calls = 0, 0, 0
        self._left: dict[int, Any] = {}  # rank 0: ranks that reported this step's verdict early (they left)
        self._gone: set[int] = set()  # rank 0: ranks that missed a deadline in this step
        self._failed: dict[int, tuple] = {}  # rank 0: failure of each collective of this step that failed
        self._verdicts: dict[int, dict] = {}  # rank 0: the last steps' verdicts, for ranks that come late
        self._later: list = []  # rank 0: messages of a step it has not begun yet
        self._sent: list = []  # requests of messages not known to be delivered yet
        if self.size > 1:
            from insitu.transports.base import wait_requests

            # Private traffic, so the simulation's own messages never match ours (Idup: a
            # rank that never calls times out instead of hanging the others).
            dup, req = comm.Idup()
            wait_requests([req], [None], time.monotonic() + self.timeout,
                          f"adaptor set-up on rank {self.rank} (duplicating the communicator)")
            self._p2p = dup

    def close(self) -> None:
        """Free the private communicator (messages still in flight are abandoned)."""
        if self._p2p is not None:
            self._sent = [r for r in self._sent if not r.Test()]
            p2p, self._p2p = self._p2p, None
            p2p.Free()

    # -- steps --------------------------------------------------------------------------------

    def step_begin(self) -> None:
        """Start a step: its collectives are numbered afresh, and what earlier steps left
        behind (late messages of ranks that timed out) can no longer pair with them."""
        self._epoch += 1
        self._seq, self._step_calls = 0, 0
        self._left, self._gone, self._failed = {}, set(), {}
        self._sent = [r for r in self._sent if not r.Test()]

    @property
    def step_calls(self) -> int:
        """Collectives this rank entered since :meth:`step_begin`."""
        return self._step_calls

    def step_verdict(self, status: dict | None) -> dict[int, dict | None]:
        """Collective: every rank's outcome of the step (the same on every rank that
        reported in time).

        Parameters
        ----------
        status : dict or None
            This rank's outcome: ``None`` (all went well) or ``{"error": message,
            "relayed": bool}``, `relayed` true when the failure only reports another
            rank's.

        Returns
        -------
        dict
            rank -> ``None``, such a dict, or ``{"missing": message}`` for a rank that did
            not report within the deadline.
        """
        self._step_calls += 1
        if self.size == 1:
            return {0: status}
        if self.rank == 0:
            return self._verdict_root(status)
        self._post(("v", self._epoch, -1, self.rank, "step verdict", status))
        try:
            got = self._await_reply("v", self._epoch, -1, "the end of the step")
        except PeerTimeoutError as e:
            return {0: {"missing": str(e)}, self.rank: status}
        return got

    # -- collectives ------------------------------------------------------------------------------

    def allreduce(self, value, op: str, *, what: str | None = None):
        """``min``/``max``/``sum`` of a number (or, elementwise, of a sequence of numbers)
        over all ranks; collective."""
        if op not in _OPS:
            raise ValueError(f"allreduce: op must be one of {', '.join(_OPS)}, got {op!r}")
        if self.size == 1:
            return value

        def combine(values):
            out = np.asarray(values[0], np.float64)
            for v in values[1:]:
                out = _OPS[op](out, np.asarray(v, np.float64))
            return out.tolist()

        return self._collective(what or f"allreduce ({op})", value, combine)

    def allgather(self, value, *, what: str = "allgather") -> list:
        """Every rank's `value`, in rank order, on every rank; collective."""
        return [value] if self.size == 1 else self._collective(what, value, list)

    def gather(self, value, *, what: str = "gather") -> list | None:
        """Every rank's `value` at rank 0 (``None`` elsewhere); collective."""
        return [value] if self.size == 1 else self._collective(what, value, list, share=False)

    def bcast(self, value, *, root: int = 0, what: str = "broadcast"):
        """`value` of rank `root` on every rank; collective."""
        if self.size == 1:
            return value
        return self._collective(what, value if self.rank == root else None, lambda vals: vals[root])

    def barrier(self, *, what: str = "barrier") -> None:
        """Wait (within the deadline) until every rank arrived; collective."""
        if self.size > 1:
            self._collective(what, None, lambda vals: None, share=False)

    def reduce_field(self, domains: Sequence[MeshDomain | CellDomain], name: str, op: str) -> float:
        """``min``/``max``/``sum``/``avg`` of a field over the real part of every domain
        of every rank (NaN ignored); collective."""
        vals, count = [], 0
        for d in domains:
            if name not in d.fields:
                raise MeshError(f"domain {d.domain_id}: no field {name!r}; fields: {', '.join(sorted(d.fields))}")
            v = d.real_values(name)
            xp = arrays.get_array_module(v)
            if op in ("min", "max"):
                r = _reduce(getattr(xp, f"nan{op}") if v.dtype.kind == "f" else getattr(xp, op), v)
            else:
                r = _reduce(xp.nansum if v.dtype.kind == "f" else xp.sum, v)
                count += int(arrays.scalar_to_host(xp.count_nonzero(~xp.isnan(v)))) if v.dtype.kind == "f" else v.size
            vals.append(float(arrays.scalar_to_host(r)))
        what = f"{op} of field {name!r}"
        if op == "min":
            return self.allreduce(min(vals, default=np.inf), "min", what=what)
        if op == "max":
            return self.allreduce(max(vals, default=-np.inf), "max", what=what)
        total, n = self.allreduce([float(sum(vals)), float(count)], "sum", what=what)
        if op == "sum":
            return total
        return total / n if n else float("nan")

    def agree(self, error: BaseException | None, what: str) -> None:
        """Collective: raise on every rank if `error` happened on any (before a collective
        step, so that no rank waits for one that gave up)."""
        if self.size == 1:
            if error is not None:
                raise error
            return
        msgs = self.allgather(None if error is None else f"{type(error).__name__}: {error}", what=what)
        if error is not None:
            raise error
        bad = [(r, m) for r, m in enumerate(msgs) if m is not None]
        if bad:
            raise _relayed(PeerFailedError(f"{what}: rank {bad[0][0]} failed ({bad[0][1]})"
                                           + (f" and {len(bad) - 1} more rank(s)" if len(bad) > 1 else "")))

    def bounds(self, domains: Sequence[MeshDomain | CellDomain]) -> tuple:
        """The world box of all real cells of the job: (x0, x1, y0, y1, z0, z1)."""
        lo = [min((d.box[2 * a] for d in domains), default=np.inf) for a in range(3)]
        hi = [max((d.box[2 * a + 1] for d in domains), default=-np.inf) for a in range(3)]
        # One reduction: the maxima as negated minima.
        m = self.allreduce([*map(float, lo), *(-float(v) for v in hi)], "min", what="data bounds")
        return (m[0], -m[3], m[1], -m[4], m[2], -m[5])

    # -- the protocol ---------------------------------------------------------------------------

    def _collective(self, what: str, value, combine: Callable[[list], Any], *, share: bool = True):
        self._seq += 1
        self._step_calls += 1
        seq = self._seq
        if self.rank == 0:
            return self._collective_root(what, seq, value, combine, share)
        self._post(("c", self._epoch, seq, self.rank, what, value))
        return self._await_reply("r", self._epoch, seq, what)

    def _post(self, msg, dest: int = 0, tag: int = _UP) -> None:
        # Non-blocking: a large message to a rank that stopped listening must not block us.
        self._sent.append(self._p2p.isend(msg, dest=dest, tag=tag))

    def _reply(self, dest: int, msg) -> None:
        self._post(msg, dest, _DOWN)

    def _await_reply(self, kind: str, epoch: int, seq: int, what: str):
        """A non-root rank: rank 0's answer to (kind, epoch, seq), within twice the timeout
        (rank 0 itself waits up to one timeout for the others)."""
        deadline = time.monotonic() + 2 * self.timeout
        while True:
            msg = self._receive(0, _DOWN, deadline)
            if msg is None:
                raise PeerTimeoutError(f"{what} on rank {self.rank}: rank(s) [0] did not answer within "
                                       f"{2 * self.timeout:g} s (dead, hung, or not in the same step)")
            k, ep, sq, ok, payload = msg
            if (k, ep, sq) != (kind, epoch, seq):
                continue  # the answer to a call this rank gave up on
            if ok:
                return payload
            name, text = payload
            raise _relayed((PeerTimeoutError if name == "PeerTimeoutError" else PeerFailedError)(text))

    def _receive(self, source: int, tag: int, deadline: float):
        """The next message (unpickled) from `source` with `tag`, or None at `deadline`."""
        spin = 0
        while True:
            m = self._p2p.improbe(source=source, tag=tag)
            if m is not None:
                return m.recv()
            if time.monotonic() > deadline:
                return None
            spin += 1
            if spin > 1000:  # stay quick for fast answers, stop burning a core for slow ones
                time.sleep(1e-4 if spin < 20000 else 1e-3)

    def _next_up(self, deadline: float):
        """Rank 0: the next message of this step from any rank (earlier steps' answered,
        later steps' kept), or None at `deadline`."""
        from mpi4py import MPI

        while True:
            now = [m for m in self._later if m[1] == self._epoch]
            if now:
                self._later.remove(now[0])
                return now[0]
            msg = self._receive(MPI.ANY_SOURCE, _UP, deadline)
            if msg is None:
                return None
            if msg[1] > self._epoch:
                self._later.append(msg)  # a rank that gave up waiting for us and went on
            elif msg[1] < self._epoch:
                self._answer_stale(msg)
            else:
                return msg

    def _answer_stale(self, msg) -> None:
        kind, ep, sq, r, what = msg[:5]
        if kind == "v":
            self._reply(r, ("v", ep, -1, True, self._verdicts.get(ep) or {r: msg[5]}))
        else:
            self._reply(r, ("r", ep, sq, False, ("PeerTimeoutError", f"{what} on rank {r}: the other ranks gave "
                                                  "up on that step (it came too late)")))

    def _collective_root(self, what: str, seq: int, value, combine, share: bool):
        values = {0: value}
        waiting = set(range(1, self.size)) - set(self._left) - self._gone
        failure = None
        if self._left:
            r = min(self._left)
            failure = ("PeerFailedError", f"{what}: rank {r} left the step ({_status_text(self._left[r])})")
        elif self._gone:  # already reported by the call that waited for them
            failure = ("PeerFailedError", f"{what}: rank(s) {sorted(self._gone)} did not answer in time "
                                          "earlier in this step")
        deadline = time.monotonic() + self.timeout
        while waiting and failure is None:
            msg = self._next_up(deadline)
            if msg is None:
                self._gone |= waiting
                failure = ("PeerTimeoutError", f"{what}: rank(s) {sorted(waiting)} did not answer within "
                                               f"{self.timeout:g} s (dead, hung, or not in the same step)")
                break
            kind, _, sq, r, their = msg[:5]
            if kind == "v":
                self._left[r] = msg[5]
                failure = ("PeerFailedError", f"{what}: rank {r} left the step ({_status_text(msg[5])})")
            elif sq == seq:
                values[r] = msg[5]
                waiting.discard(r)
            else:
                self._answer_out_of_turn(r, sq, their, f"rank 0 is in {what}")
                if sq > seq:
                    failure = ("PeerFailedError", f"{what}: rank {r} is in {their} instead (the ranks took "
                                                  "different paths)")
        if failure is not None:
            self._failed[seq] = failure
            for r in values:
                if r:
                    self._reply(r, ("r", self._epoch, seq, False, failure))
            # A timeout rank 0 saw itself is its own finding; anything else reports another rank.
            raise _relayed(PeerTimeoutError(failure[1]) if failure[0] == "PeerTimeoutError"
                           else PeerFailedError(failure[1]), failure[0] == "PeerFailedError")
        result = combine([values[r] for r in range(self.size)])
        for r in range(1, self.size):
            self._reply(r, ("r", self._epoch, seq, True, result if share else None))
        return result

    def _answer_out_of_turn(self, r: int, sq: int, their: str, where: str) -> None:
        """Rank 0 got rank `r`'s part of call `sq` (`their`) while elsewhere (`where`)."""
        failure = self._failed.get(sq) or ("PeerFailedError", f"{their} on rank {r}: {where}")
        self._reply(r, ("r", self._epoch, sq, False, failure))

    def _verdict_root(self, status) -> dict:
        out: dict[int, Any] = {0: status, **self._left}
        for r in self._gone:
            out.setdefault(r, {"missing": f"rank {r} did not answer in time"})
        waiting = set(range(1, self.size)) - set(out)
        deadline = time.monotonic() + self.timeout
        while waiting:
            msg = self._next_up(deadline)
            if msg is None:
                for r in waiting:
                    out[r] = {"missing": f"rank {r} did not finish the step within {self.timeout:g} s"}
                break
            kind, _, sq, r, their = msg[:5]
            if kind == "v":
                out[r] = msg[5]
                waiting.discard(r)
            else:
                self._answer_out_of_turn(r, sq, their, "rank 0 left the step before that")
        out = dict(sorted(out.items()))
        self._verdicts[self._epoch] = out
        for ep in [e for e in self._verdicts if e < self._epoch - 8]:
            del self._verdicts[ep]
        for r, st in out.items():
            if r and not (st and "missing" in st):
                self._reply(r, ("v", self._epoch, -1, True, out))
        self._left, self._gone, self._failed = {}, set(), {}
        return out


def _relayed(exc: BaseException, relayed: bool = True) -> BaseException:
    """Mark `exc` as reporting another rank's failure (not this rank's own)."""
    exc.relayed = relayed
    return exc


def _status_text(status: dict | None) -> str:
    if status is None:
        return "it finished the step without this call"
    return status.get("error") or status.get("missing") or "no reason given"


def _reduce(fn, v):
    """`fn` over all of `v` in two stages: along the last axis, then over the (contiguous)
    rest. A strided view (a domain's real part) reduced to one value at once runs in a
    single thread block on the GPU; the first stage spreads it over the whole device."""
    return fn(fn(v, axis=-1)) if v.ndim > 1 else fn(v)
