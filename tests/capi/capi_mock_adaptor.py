"""A stand-in adaptor module for the C ABI tests (``INSITU_ADAPTOR=capi_mock_adaptor``).

It has the Python adaptor's functions and exceptions and records what the C library hands
over: in-process (``CALLS``, the Blueprint domains as received) and, when the config's
``mock: {out: DIR}`` is set, one ``.npz`` per rank and step with every field's values and
how it arrived (address, strides, read-only flag, owner) so tests can check the zero-copy
translation of a separate program's memory.

Config (YAML/JSON file or dict): Ascent-like ``pipelines`` (contour ``iso_values`` give
``results()["iso_values"]``), plus ``mock``: ``out``, ``stop_at`` (step from which
``results()["stop"]`` is true), ``params`` (steering parameters), ``require_fields`` (a
missing one fails ``execute`` like a pipeline would), ``raise_at`` (``execute`` raises),
``report`` (rank 0 prints the interpreter it runs in).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

KNOWN = {"pipelines", "scenes", "extracts", "triggers", "exceptions", "mock"}
CALLS: list[dict] = []
STATE: dict = {}


class ConfigError(ValueError):
    pass


class NotInitializedError(RuntimeError):
    pass


def _load(config):
    if isinstance(config, dict):
        return config
    with open(config) as f:
        text = f.read()
    if str(config).endswith(".json"):
        return json.loads(text)
    import yaml

    return yaml.safe_load(text)


def initialize(config, comm=None):
    cfg = _load(config)
    problems = []
    if not isinstance(cfg, dict):
        raise ConfigError(f"(config) expected a mapping, got {type(cfg).__name__}")
    for key in cfg:
        if key not in KNOWN:
            problems.append(f"({key}) unknown key; known: {', '.join(sorted(KNOWN))}")
    if "pipelines" in cfg and not isinstance(cfg["pipelines"], dict):
        problems.append("(pipelines) expected a mapping of named pipelines")
    if problems:
        raise ConfigError("; ".join(problems))
    STATE.clear()
    STATE.update(cfg=cfg, mock=cfg.get("mock") or {}, rank=comm.Get_rank() if comm else 0,
                 size=comm.Get_size() if comm else 1, step=None, errors=[], comm=comm)
    CALLS.clear()
    if STATE["mock"].get("report") and STATE["rank"] == 0:
        print(f"mock: size={STATE['size']} prefix={sys.prefix} executable={sys.executable}", flush=True)


def _iso_values():
    out = {}
    for name, filters in (STATE["cfg"].get("pipelines") or {}).items():
        for f in (filters or {}).values():
            if isinstance(f, dict) and f.get("type") == "contour":
                out[name] = list((f.get("params") or {}).get("iso_values") or [])
    return out


def execute(step, time, mesh):
    if not STATE:
        raise NotInitializedError("execute before initialize")
    mock = STATE["mock"]
    if mock.get("raise_at") is not None and step >= mock["raise_at"]:
        raise ZeroDivisionError(f"mock pipeline raised at step {step}")
    STATE["step"] = step
    CALLS.append({"step": step, "time": time, "mesh": mesh})
    for dom in mesh:
        for name in mock.get("require_fields") or []:
            if name not in dom["fields"]:
                STATE["errors"].append(f"(p1/f1/contour) unknown field '{name}'; fields: "
                                       + ", ".join(repr(k) for k in dom["fields"]))
                return False
    if mock.get("out"):
        rec = {}
        for dom in mesh:
            c = dom["coordsets"]["coords"]
            p = f"d{dom['state']['domain_id']}_"
            rec[p + "dims"] = [c["dims"][a] for a in "ijk"]
            rec[p + "origin"] = [c["origin"][a] for a in "xyz"]
            rec[p + "spacing"] = [c["spacing"]["d" + a] for a in "xyz"]
            rec[p + "state"] = [dom["state"]["cycle"], dom["state"]["time"]]
            for name, f in dom["fields"].items():
                v = f["values"]
                rec[p + name] = np.asarray(v)
                rec[p + name + "_meta"] = [v.ctypes.data, *v.strides, int(v.flags.writeable),
                                           int(v.flags.owndata), int(f["association"] == "vertex")]
        os.makedirs(mock["out"], exist_ok=True)
        np.savez(os.path.join(mock["out"], f"r{STATE['rank']}_s{step:04d}.npz"), **rec)
    return True


def results():
    if not STATE:
        raise NotInitializedError("results before initialize")
    mock = STATE["mock"]
    step = STATE["step"]
    stop = mock.get("stop_at") is not None and step is not None and step >= mock["stop_at"]
    return {"step": step, "stop": bool(stop), "iso_values": _iso_values(), "camera": {},
            "params": dict(mock.get("params") or {}), "errors": list(STATE["errors"])}


def about():
    return {"engine": "mock"}


def finalize():
    STATE.clear()
