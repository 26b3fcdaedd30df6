"""The adaptor a simulation calls: initialize / execute / results / finalize.

Catalyst's shape, Ascent's actions::

    import adaptors
    adaptors.initialize("insitu.yaml", comm=MPI.COMM_WORLD)
    for step in range(n):
        advance()
        adaptors.execute(step, t, mesh)        # Blueprint dicts, host or device arrays
        if adaptors.results()["stop"]:
            break
    adaptors.finalize()

or ``with adaptors.Adaptor(config, comm) as insitu: insitu.execute(...)``. Every rank
calls every function (SPMD). With ``exceptions: catch`` (the default) a failing step
is logged, recorded in ``results()["errors"]`` and ``execute`` returns False: the
simulation goes on. Steering (camera, iso values, colormap, user parameters, stop)
arrives through :meth:`Adaptor.steer`, a steering file, or a viewer, and applies from
the next ``execute``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import time as _time
from typing import Any, Mapping, Sequence

from insitu import arrays
from insitu.engine import get_engine
from insitu.errors import PeerTimeoutError
from insitu.launch import share_cpu_threads
from insitu.log import enable as enable_logging
from insitu.log import get_logger
from insitu.profile import StageTimer

from . import mesh as _mesh
from .config import SCHEMA, camera_problems, check_steering, is_number, load
from .errors import AdaptorError, MeshError, NotInitializedError
from .extracts import EXTRACTS, Extract
from .context import Context, PeerFailedError
from .pipelines import Dataset, added_fields, pipeline_order, run_pipeline
from .scenes import SceneRenderer
from .queries import MeshData, Queries
from .triggers import holds

_TRANSFER_KEYS = ("h2d_calls", "h2d_bytes", "d2h_calls", "d2h_bytes")


def _prepare_cpu_kernels() -> None:
    """Numba's one-time set-up of its CPU target (its first dispatch in a process loads
    the linker and SciPy's BLAS: 0.5-0.8 s) here in initialize, not in the first step."""
    try:
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()
    except Exception:  # another Numba's internals: the first step pays it instead
        pass

_log = get_logger(__name__)

__all__ = ["Adaptor", "STEERABLE", "about", "execute", "finalize", "initialize", "results", "steer"]

#: Keys a steering update may hold (:data:`adaptors.config.SCHEMA` ``["steering"]`` checks their values).
STEERABLE = tuple(SCHEMA["steering"])


class Adaptor:
    """In-situ visualization for one simulation (all of its ranks).

    Parameters
    ----------
    config : dict, str or path
        The configuration (see :mod:`adaptors.config`), YAML/JSON text or a file.
    comm : mpi4py communicator, optional
        The simulation's ranks; ``None``: one process.

    Raises
    ------
    ConfigError
        The configuration is malformed (every problem listed with its path).
    """

    def __init__(self, config, comm=None) -> None:
        self.config = load(config)
        level = {"quiet": None, "errors": "WARNING", "info": "INFO"}[self.config["log"]]
        if level:
            enable_logging(level)  # only where the application set up no logging of its own
        engine = self.config["engine"]
        self.comm = comm
        share_cpu_threads(comm)  # CPU kernels: the node's cores shared among its ranks
        _prepare_cpu_kernels()
        self.ctx = Context(comm, timeout=self.config["timeout"])
        self.rank, self.size = self.ctx.rank, self.ctx.size
        self.prof = StageTimer(self.config["profile"])
        #: This rank's engine: the embedded engine's in-process worker draws the rank's
        #: domains; with Spark, the driver's SparkEngine at rank 0 (None elsewhere).
        self.engine = None
        self._scenes: SceneRenderer  # SparkSceneRenderer under Spark
        if engine["type"] == "spark":
            from .spark_scenes import SparkSceneRenderer, start_spark

            self.engine, daemon_dir = start_spark(self.ctx, engine["params"])
            self._scenes = SparkSceneRenderer(self.ctx, engine["params"], self.engine, daemon_dir)
        else:
            # device=None: the worker takes the simulation's arrays where they are (CuPy
            # on the current device) and leaves the current device alone ("auto" would pick one).
            self.engine = get_engine(engine["type"])(comm, device=None, timeout=self.config["timeout"])
            self._scenes = SceneRenderer(self.ctx, self.engine)
        self._scenes.prof = self.prof
        self._streams: dict = {}  # extract name -> FrameStream or MeshStream
        self._errors: list[str] = []
        self._step: int | None = None
        self._time: float | None = None
        self._frames: list[str] = []
        self._timings: dict[str, float] = {}
        self._transfers: dict[str, int] = {}
        self._executes = 0
        self._steer_mtime: float | None = None
        self._steering: dict[str, Any] = {"camera": {}, "iso_values": {}, "colormap": None, "transfer_function": None,
                          "params": dict(self.config.get("params") or {}), "pause": False, "stop": False}
        self._steer_readers: list = []  # viewers' steering streams (rank 0)
        triggered = {a for t in self.config["triggers"].values() for a in t["actions"]}
        self._always = [n for n in (*self.config["scenes"], *self.config["extracts"]) if n not in triggered]
        # Fixed by the configuration (steering changes neither): the idle step reads flags only.
        self._steer_file = (self.config.get("steering") or {}).get("file")
        self._steered = bool(self._steer_file) or self._steers_by_stream()
        self._every = [t.get("every") for t in self.config["triggers"].values()]
        self._queries = Queries(self.config["queries"])
        self._open = True

    # -- steering ---------------------------------------------------------------------------

    def steer(self, updates: Mapping[str, Any]) -> None:
        """Apply steering from the next ``execute`` on (call it on every rank, or give
        the config a steering file that rank 0 reads).

        Parameters
        ----------
        updates : mapping
            ``camera``: render camera keys (azimuth, elevation, zoom, position, ...);
            ``iso_values``: a list for every contour, or ``{pipeline: [values]}``;
            ``colormap``: a colormap name for every plot; ``transfer_function``: opacity
            control points ``[[value, alpha], ...]`` for every volume plot; ``params``:
            ``{name: number}``; ``pause``: skip the in-situ work while true;
            ``stop``: ask the simulation to stop (``results()["stop"]``). ``None`` for
            camera, a camera key, iso_values, colormap or transfer_function: back to the
            configuration's. Each value is checked by the configuration's schema
            (:data:`adaptors.config.SCHEMA`, section ``steering``).

        Raises
        ------
        ValueError
            Naming each key at fault; the update then changes nothing.
        """
        # Everything is checked before anything changes: a bad update changes nothing, and
        # a value that passed cannot break the next frames.
        u = check_steering(updates, self.config)
        new = copy.deepcopy(self._steering)
        if "camera" in u:
            cam = {} if u["camera"] is None else {**new["camera"], **u["camera"]}
            new["camera"] = {k: v for k, v in cam.items() if v is not None}
            problems = [p for sname, s in self.config["scenes"].items() for rname, r in s["renders"].items()
                        for p in camera_problems({**r["camera"], **new["camera"]},
                                                 f"camera (with scenes/{sname}/renders/{rname}/camera)")]
            if problems:
                raise ValueError(f"steer: {'; '.join(problems)}")
        if "iso_values" in u:
            given = dict.fromkeys(new["iso_values"]) if u["iso_values"] is None else u["iso_values"]
            for p, vals in given.items():
                if vals is None:
                    new["iso_values"].pop(p, None)
                else:
                    new["iso_values"][p] = vals
        if "params" in u:
            new["params"].update(u["params"])
        for k in ("colormap", "transfer_function", "pause", "stop"):
            if k in u:
                new[k] = u[k]
        self._steering = new

    def _poll_steering(self) -> None:
        """Gather steering from the steering file and viewers' streams at rank 0 and apply
        it on every rank (one broadcast; nothing when neither is configured)."""
        if not self._steered:
            return
        sfile = self._steer_file
        updates, problems = [], []
        if self.rank == 0:
            try:
                u, p = self._read_steering_file(sfile) if sfile else (None, None)
                updates += [u] if u else []
                problems += [p] if p else []
                for reader in self._steer_readers:
                    updates += reader.poll()
                    while reader.problems:  # a refused contact file, a relay that died: taken once
                        problems.append(f"steering: {reader.problems.pop(0)}")
            except Exception as e:  # reported below; the other ranks wait in the broadcast
                problems.append(f"steering: {type(e).__name__}: {e}")
        updates, problems = self.ctx.bcast((updates, problems), what="steering updates")
        for p in problems:
            self._record(p)
        for u in updates:
            try:
                self.steer(u)
            except ValueError as e:
                self._record(f"steering ({sfile or 'viewer'}): {e}")

    def _steers_by_stream(self) -> bool:
        return any(e["type"] == "adios2" and e["params"]["engine"] == "SST" and e["params"]["steering"]
                   for e in self.config["extracts"].values())

    def _read_steering_file(self, sfile: str):
        """(update or None, problem or None) from the steering file, when it changed."""
        try:
            mtime = os.stat(sfile).st_mtime_ns
        except OSError:
            return None, None
        if mtime == self._steer_mtime:
            return None, None
        self._steer_mtime = mtime
        try:
            with open(sfile) as f:
                update = json.load(f)
            if not isinstance(update, dict):
                raise ValueError(f"expected a JSON object, got {type(update).__name__}")
        except (OSError, ValueError) as e:
            return None, f"steering file {sfile}: {e}"
        return update, None

    # -- the step -----------------------------------------------------------------------------

    def execute(self, step: int, time: float, mesh, *, error: BaseException | None = None) -> bool:
        """Run the configured pipelines, scenes, extracts and triggers on this step's mesh.

        Every rank learns how the step went on every rank: a failure on one rank (an
        image that cannot be written, an extract, a scene, a peer that stopped answering
        within ``timeout``) fails the step on all of them, and the next step runs as usual.
        A failing image or extract does not stop the step's other images and extracts.

        Parameters
        ----------
        step, time : int, float
            The cycle and simulation time.
        mesh : dict or list of dict
            This rank's domains (Conduit Mesh Blueprint).
        error : Exception, optional
            A problem the caller found with this rank's mesh (the C ABI's checks): the
            step fails on every rank, agreed like a mesh the adaptor rejects itself, and
            `mesh` is not looked at.

        Returns
        -------
        bool
            True when everything ran on every rank; False when something failed (logged and
            recorded in ``results()["errors"]`` on every rank), unless ``exceptions: forward``
            made it raise (this rank's own error, else :class:`PeerFailedError` or
            :class:`~insitu.errors.PeerTimeoutError`).
        """
        if not self._open:
            raise NotInitializedError("execute: the adaptor was finalized")
        t0 = _time.perf_counter()
        step = int(step)
        if error is None and not self._steered and (self._steering["pause"] or not self._busy(step)):
            # Nothing runs on any rank (the same configuration and step everywhere): no
            # collective, so no step of the job's context either; the mesh is not looked at.
            self._step, self._time, self._frames = step, float(time), []
            self._timings = {**self.prof.times(), "execute": _time.perf_counter() - t0}
            self._transfers = dict.fromkeys(_TRANSFER_KEYS, 0)
            self._executes += 1
            return True
        self.ctx.step_begin()
        self._failures: list[BaseException] = []
        with arrays.count_transfers() as moved:
            try:
                self._execute(step, float(time), mesh, error)
            except Exception as e:
                self._failures.append(e)
        self._transfers = {k: int(getattr(moved, k)) for k in _TRANSFER_KEYS}
        failures, self._failures = self._failures, []
        status = _status(failures)
        if self.ctx.size > 1 and self.ctx.step_calls:
            # Every rank took part in this step's collectives, so every rank takes part in
            # this one too (no collective means the step did nothing anywhere).
            verdict = self.ctx.step_verdict(status)
        else:
            verdict = {self.rank: status}
        self._timings = {**self.prof.times(), "execute": _time.perf_counter() - t0}
        self._executes += 1
        message = _failure_message(step, verdict, failures, self.ctx.size)
        if self.config.get("save_info") and self.rank == 0:
            self._save_info(step, message)
        if message is None:
            return True
        mine = [e for e in failures if not getattr(e, "relayed", False)]
        anyone = any(st and st.get("error") and not st.get("relayed") for st in verdict.values())
        self._record(message, echo=bool(mine) or (self.rank == 0 and not anyone))
        if self.config["exceptions"] == "forward":
            if mine:
                raise mine[0]
            timeout = any(st and "missing" in st for st in verdict.values()) or any(
                isinstance(e, PeerTimeoutError) for e in failures)
            raise (PeerTimeoutError if timeout else PeerFailedError)(message)
        return False

    def _execute(self, step: int, time: float, mesh, error: BaseException | None = None) -> None:
        """One step on this rank. Failures that leave the other ranks' collectives intact
        (an image, an extract, a scene: each raised on every rank alike) go to
        ``self._failures`` and the step goes on; anything else raises."""
        self._poll_steering()
        self._step, self._time, self._frames = step, time, []
        if self._steering["pause"] or not self._busy(step):
            if error is not None:
                raise error  # nothing runs on any rank: only this rank's call failed
            return  # nothing runs this step: the mesh is not even looked at
        domains: list = []
        with self.prof.stage("mesh"):
            if error is None:
                try:
                    domains = _mesh.parse(mesh, ghost_field=self.config["ghost_field"], cells=True)
                    self._check_fields(domains)
                except (MeshError, ValueError, TypeError) as e:
                    error = e
            self.ctx.agree(error, f"mesh of step {step}")
        raw = Dataset(domains)
        active = self._active(step, time, domains)
        needed = {p["pipeline"] for s in active if s in self.config["scenes"]
                  for p in self.config["scenes"][s]["plots"].values() if p.get("pipeline")}
        datasets: dict = {}
        # A pipeline starting from another's output runs after it (the configuration has no cycle).
        for name in pipeline_order(self.config["pipelines"], needed):
            steer = {f: {"iso_values": self._steering["iso_values"][name]}
                     for f, flt in self.config["pipelines"][name].items()
                     if flt["type"] == "contour" and name in self._steering["iso_values"]}
            with self.prof.stage("pipelines"):
                datasets[name] = run_pipeline(name, self.config["pipelines"][name], domains, self.ctx, steer, datasets)
        images = {}
        for sname in (s for s in self.config["scenes"] if s in active):
            try:
                out = self._scenes.render(sname, self.config["scenes"][sname], datasets, raw, self._steering, step,
                                          time)
            except Exception as e:
                # The renderer agrees before its collectives, so this scene failed on every
                # rank (or the context failed it everywhere): the next scene can still run.
                e.add_note(f"in scenes/{sname}")
                self._failures.append(e)
                continue
            for rname, r in out.items():
                images[f"{sname}/{rname}"] = r
                if r.path:
                    from render.image import write_png

                    try:
                        with self.prof.stage("png"):
                            self._frames.append(write_png(r.path, r.rgba))
                    except Exception as e:  # a full disk, an unwritable directory: reported at the step's end
                        e.add_note(f"writing {r.path} for scenes/{sname}/renders/{rname}")
                        self._failures.append(e)
        for ename in (e for e in self.config["extracts"] if e in active):
            try:
                with self.prof.stage("extracts"):
                    self._extract(ename, self.config["extracts"][ename], images, domains, step, time)
            except Exception as e:  # no collective inside: the step's end tells the other ranks
                e.add_note(f"in extracts/{ename}")
                self._failures.append(e)

    def _save_info(self, step: int, message: str | None) -> None:
        """Ascent's save_info: what the adaptor knows after this step, as YAML (rank 0)."""
        import json

        import yaml

        path = self.config["save_info"]
        try:
            path = path % step if "%" in path else path
        except (TypeError, ValueError):
            pass
        info = {"status": {"message": message or f"insitu execute completed (step {step})"},
                "state": {"cycle": step, "time": self._time},
                "images": [{"image_name": f} for f in self._frames],
                "results": self.results(), "actions": self.config}
        try:
            with open(path, "w") as f:
                yaml.safe_dump(json.loads(json.dumps(info, default=str)), f, sort_keys=False)
        except OSError as e:
            self._record(f"step {step}: save_info: cannot write {path}: {e.strerror}")

    def _busy(self, step: int) -> bool:
        """Whether anything may run this step (conditions need the mesh to decide)."""
        if self._always or self._queries or self.config.get("save_info"):
            return True
        return any(e is None or step % e == 0 for e in self._every)

    def _check_fields(self, domains) -> None:
        """Every field the configuration names exists (so no rank fails inside a collective)."""
        have = set.intersection(*(set(d.fields) for d in domains)) if domains else None
        if have is None:
            return
        out: dict = {}
        for pname in pipeline_order(self.config["pipelines"]):
            filters = self.config["pipelines"][pname]
            avail = set(have)
            for fname, f in filters.items():
                if f.get("input"):
                    avail = set(out[f["input"]])
                prm = f["params"]
                names = [prm.get(k) for k in ("field", "field1", "field2", "field3")]
                if f["type"] == "eikonal" and not is_number(prm["speed"]):
                    names = [prm["speed"]]
                for n in names:
                    if n is not None and n not in avail and f"{n}/magnitude" not in avail:  # an mcarray by name
                        raise MeshError(f"pipelines/{pname}/{fname}: no field {n!r} in the mesh; "
                                        f"fields: {', '.join(sorted(avail))}")
                if f["type"] == "eikonal":
                    avail.add(prm["output"])
                avail.update(added_fields(f["type"], prm))
            out[pname] = avail
        for sname, s in self.config["scenes"].items():
            for plname, p in s["plots"].items():
                if p.get("field") and not p.get("pipeline") and p["field"] not in have:
                    raise MeshError(f"scenes/{sname}/plots/{plname}: no field {p['field']!r} in the mesh; "
                                    f"fields: {', '.join(sorted(have))}")

    def _active(self, step: int, time: float, domains) -> set[str]:
        active = set(self._always)
        data = MeshData(domains, self.ctx)
        # Queries first: conditions read their values (Ascent's order).
        self._queries.run(step, time, data, param=lambda k: self._param(k, "queries"))
        for tname, t in self.config["triggers"].items():
            if t.get("every") is not None:
                fire = step % t["every"] == 0
            else:
                fire = holds(t["condition"], self._queries.env(
                    step, time, data, param=lambda k: self._param(k, f"triggers/{tname}")))
            if fire:
                active.update(t["actions"])
        return active

    def _param(self, name: str, where: str) -> float:
        if name not in self._steering["params"]:
            raise KeyError(f"{where}: no user parameter {name!r}; params: "
                           f"{', '.join(sorted(self._steering['params'])) or 'none'}")
        return self._steering["params"][name]

    def _extract(self, name: str, e: Mapping, images: Mapping, domains, step: int, time: float) -> None:
        EXTRACTS[e["type"]](Extract(name, e["params"], step, time, self.rank, self.size, domains, images,
                                    self._streams, self._steer_readers, ctx=self.ctx))

    def _record(self, message: str, *, echo: bool = True) -> None:
        self._errors.append(message)
        del self._errors[:-100]  # keep the newest
        if echo:
            _log.error("%s", message, extra={"rank": self.rank})  # this job's rank (a sub-communicator's)

    # -- reporting ------------------------------------------------------------------------------

    def results(self) -> dict:
        """What comes back to the simulation: steering values, a stop request, errors.

        Returns
        -------
        dict
            ``step``, ``time``, ``stop``, ``iso_values`` ({pipeline: values in use}),
            ``camera`` (steered camera keys), ``colormap``, ``params``, ``errors`` (newest
            last), ``frames`` (images written by the last step), ``timings`` (seconds),
            ``transfers`` (the library's host<->device copies during the last step:
            ``h2d_calls, h2d_bytes, d2h_calls, d2h_bytes``; process-wide), ``queries``
            ({name: newest value}, plain Python: numbers, lists, dicts for objects).
        """
        iso = {}
        for p, filters in self.config["pipelines"].items():
            for f in filters.values():
                if f.get("type") == "contour":
                    iso[p] = self._steering["iso_values"].get(p, f["params"].get("iso_values"))
        s = self._steering
        return {"step": self._step, "time": self._time, "stop": s["stop"], "pause": s["pause"],
                "iso_values": copy.deepcopy(iso), "camera": dict(s["camera"]), "colormap": s["colormap"],
                "transfer_function": copy.deepcopy(s["transfer_function"]), "params": dict(s["params"]),
                "errors": list(self._errors), "frames": list(self._frames), "timings": dict(self._timings),
                "transfers": dict(self._transfers), "queries": self._queries.latest()}

    def about(self) -> dict:
        """Versions, engine, ranks, devices, what is configured, and the errors so far."""
        import insitu

        return {"insitu": insitu.__version__, "engine": self.config["engine"]["type"], "ranks": self.size,
                "rank": self.rank, "cuda": arrays.cuda_available(), "pipelines": list(self.config["pipelines"]),
                "scenes": list(self.config["scenes"]), "extracts": list(self.config["extracts"]),
                "triggers": list(self.config["triggers"]), "executes": self._executes,
                "errors": list(self._errors)}

    def finalize(self) -> None:
        """Close streams, steering relays and renderers; the adaptor cannot execute afterwards.

        Each is closed on its own: one that fails (a stream on a full disk) does not keep
        the others open.

        Raises
        ------
        AdaptorError
            After everything else was closed, naming each thing that failed to close (also
            recorded in ``results()["errors"]``).
        """
        if not self._open:
            return
        self._open = False
        problems: list[str] = []

        def attempt(what: str, close, owner=None) -> None:
            try:
                close()
            except Exception as e:  # collected, raised once everything is closed
                problems.append(f"{what}: {_describe(e)}")
                if owner is not None:
                    _keep_forever(owner)

        for name, s in self._streams.items():
            attempt(f"extracts/{name}", s.close, s)
        self._streams.clear()
        for r in self._steer_readers:
            attempt(f"steering relay of {r.name}", r.close)
        self._steer_readers.clear()
        attempt("scenes", self._scenes.close)
        if self.engine is not None:
            engine, self.engine = self.engine, None
            attempt(f"engine: {self.config['engine']['type']}", engine.close)
        attempt("communicator", self.ctx.close)
        if problems:
            for p in problems:
                self._record(f"finalize: {p}")
            raise AdaptorError(f"finalize on rank {self.rank}: " + "; ".join(problems))

    def __enter__(self) -> "Adaptor":
        return self

    def __exit__(self, *exc) -> None:
        self.finalize()


def _describe(e: BaseException) -> str:
    """``Type: message [notes]``, without the terminal colours ADIOS2 puts in its messages."""
    text = f"{type(e).__name__}: {e}" + "".join(f" [{n}]" for n in getattr(e, "__notes__", []))
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _status(failures: Sequence[BaseException]) -> dict | None:
    """This rank's outcome of a step for :meth:`Context.step_verdict`."""
    if not failures:
        return None
    mine = [e for e in failures if not getattr(e, "relayed", False)]
    return {"error": "; ".join(_describe(e) for e in (mine or failures)), "relayed": not mine}


def _failure_message(step: int, verdict: dict, failures: Sequence[BaseException], size: int) -> str | None:
    """The line every rank records for a failed step (None: it went well everywhere)."""
    if size == 1:
        return f"step {step}: " + "; ".join(_describe(e) for e in failures) if failures else None
    own = [(r, st["error"]) for r, st in verdict.items() if st and st.get("error") and not st.get("relayed")]
    missing = [st["missing"] for st in verdict.values() if st and "missing" in st]
    if not own and not missing:  # only reports of others' failures: say those
        own = [(r, st["error"]) for r, st in verdict.items() if st and st.get("error")]
    if not own and not missing:
        return None
    return f"step {step}: " + "; ".join([f"rank {r}: {text}" for r, text in own] + missing)


def _keep_forever(obj) -> None:
    """Never free `obj`. An ADIOS2 engine whose close failed (a full disk) closes again in
    its C++ destructor, fails again there and aborts the process (std::terminate, exit
    134); leaking it until the process ends is the lesser harm."""
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


# -- Catalyst-style module functions over one adaptor per process -------------------------------

_current: Adaptor | None = None


def _get(what: str) -> Adaptor:
    if _current is None:
        raise NotInitializedError(f"{what}: call adaptors.initialize(config, comm) first")
    return _current


def initialize(config, comm=None) -> Adaptor:
    """Start in-situ visualization for this process (see :class:`Adaptor`)."""
    global _current
    previous, _current = _current, None
    if previous is not None:
        try:
            previous.finalize()
        except AdaptorError:
            pass  # the rest was closed and the failure logged with its rank (log: errors): start afresh
    _current = Adaptor(config, comm)
    return _current


def execute(step: int, time: float, mesh, *, error: BaseException | None = None) -> bool:
    """:meth:`Adaptor.execute` on the adaptor made by :func:`initialize`."""
    return _get("execute").execute(step, time, mesh, error=error)


def results() -> dict:
    """:meth:`Adaptor.results` of the current adaptor."""
    return _get("results").results()


def steer(updates: Mapping[str, Any]) -> None:
    """:meth:`Adaptor.steer` on the current adaptor."""
    _get("steer").steer(updates)


def about() -> dict:
    """:meth:`Adaptor.about` of the current adaptor (versions and the configuration
    summary; without one, just the versions)."""
    if _current is None:
        import insitu

        return {"insitu": insitu.__version__, "initialized": False, "cuda": arrays.cuda_available()}
    return {**_current.about(), "initialized": True}


def finalize() -> None:
    """Finish: close streams and renderers (see :meth:`Adaptor.finalize`; the adaptor is
    gone afterwards even when something failed to close)."""
    global _current
    current, _current = _current, None
    if current is not None:
        current.finalize()

