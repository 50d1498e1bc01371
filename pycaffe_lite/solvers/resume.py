"""The pycaffe-lite part of a solver state: what an exact resume needs beyond Caffe's fields.

Caffe's ``SolverState`` holds the iteration, the weights file, the lr-schedule step and the
update history. Resuming from it continues the schedule, but the random numbers (dropout, data
shuffling) and the data layers' read positions start afresh, so the run drifts from the
uninterrupted one. pycaffe-lite also stores (in ``SolverState.resume_state``, field 1000, and as
the ``resume_state`` dataset of an HDF5 state) the host random generator's state, in GPU mode
the position of the device's random stream (dropout's masks there), and, for every layer that
has ``get_state()``/``set_state()`` (data layers), its state. Training N iterations,
snapshotting, restoring (in the same mode) and training N more then gives exactly the weights
of 2N uninterrupted iterations.

The encoding is JSON (UTF-8) with tagged NumPy arrays, bytes and tuples, so it holds no code and
reads back on any machine.
"""

import base64
import json
import logging

import numpy as np

from .. import backend
from ..errors import CaffeError

log = logging.getLogger("pycaffe_lite")

FORMAT_VERSION = 1


def _encode(obj):
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _encode(v) for k, v in obj.items()}
        return {"__dict__": [[_encode(k), _encode(v)] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    if isinstance(obj, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, np.ndarray) or backend.is_cupy_array(obj):
        arr = np.ascontiguousarray(backend.to_host(obj))
        return {"__ndarray__": {"dtype": arr.dtype.str, "shape": list(arr.shape),
                                "data": base64.b64encode(arr.tobytes()).decode("ascii")}}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CaffeError("cannot store a %s in a solver state (layer get_state() must return "
                     "dicts, lists, tuples, numbers, strings, bytes or NumPy arrays)"
                     % type(obj).__name__)


def _decode(obj):
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if len(obj) == 1:
        (key, value), = obj.items()
        if key == "__tuple__":
            return tuple(_decode(v) for v in value)
        if key == "__bytes__":
            return base64.b64decode(value)
        if key == "__dict__":
            return {_decode(k): _decode(v) for k, v in value}
        if key == "__ndarray__":
            raw = base64.b64decode(value["data"])
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(
                value["shape"]).copy()
    return {k: _decode(v) for k, v in obj.items()}


def dumps(obj):
    return json.dumps(_encode(obj), separators=(",", ":")).encode("utf-8")


def loads(data, source="solver state"):
    """The state :func:`dumps` encoded; a CaffeError naming ``source`` when it is corrupt."""
    try:
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data).decode("utf-8")
        return _decode(json.loads(data))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CaffeError("%s: resume_state is corrupt (%s: %s); restore an earlier snapshot"
                         % (source, type(exc).__name__, exc)) from None


def _layer_states(net):
    states = {}
    for name, layer in zip(net.layer_names, net.layers):
        get_state = getattr(layer, "get_state", None)
        if callable(get_state) and callable(getattr(layer, "set_state", None)):
            states[name] = get_state()
    return states


def capture(solver):
    """The resume state of ``solver`` (a dict)."""
    return {
        "version": FORMAT_VERSION,
        "solver_type": solver.type,
        "rng": backend.get_rng_state(),
        "device_rng": backend.get_device_rng_state(),
        "train_layers": _layer_states(solver.net),
        "test_layers": [_layer_states(n) for n in solver.test_nets],
    }


def _restore_layers(net, states, what):
    layers = net.layer_dict
    for name, state in states.items():
        layer = layers.get(name)
        if layer is None or not callable(getattr(layer, "set_state", None)):
            log.warning("Solver state holds the state of layer '%s' but the %s has no such "
                        "layer with set_state(); ignoring it", name, what)
            continue
        layer.set_state(state)


def apply(solver, state, source):
    """Restore what :func:`capture` recorded."""
    version = state.get("version") if isinstance(state, dict) else None
    if version != FORMAT_VERSION:
        raise CaffeError("%s: resume_state has an unknown format (version %r); it was written "
                         "by another pycaffe-lite version" % (source, version))
    try:
        if state.get("rng") is not None:
            backend.set_rng_state(state["rng"])
        backend.set_device_rng_state(state.get("device_rng"))
        _restore_layers(solver.net, state.get("train_layers", {}), "train net")
        tests = state.get("test_layers", [])
        for i, (net, states) in enumerate(zip(solver.test_nets, tests)):
            _restore_layers(net, states, "test net #%d" % i)
    except CaffeError as exc:
        raise CaffeError("%s: %s" % (source, exc)) from None
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise CaffeError("%s: resume_state is corrupt or does not fit this net (%s: %s); "
                         "restore an earlier snapshot" % (source, type(exc).__name__, exc)) \
            from None
