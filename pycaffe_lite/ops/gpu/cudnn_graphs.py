"""cuDNN convolutions through NVIDIA's cuDNN frontend (``nvidia-cudnn-frontend``, cuDNN 9).

Each distinct convolution (its kind, shapes, geometry and element type) becomes one cuDNN
operation graph, built the first time it runs and kept in :data:`CACHE`; its execution plan is
chosen then, once: with autotuning (the default) every plan the heuristics offer is built and
timed on the arrays of that first call, and the fastest one is kept; without it, the
heuristics' first choice. Later calls only bind the arrays' device pointers and launch.

The kinds: ``fprop`` (``y = conv(x, w)``), ``dgrad`` (``dx = conv_T(dy, w)``), ``wgrad``
(``dw = dW(x, dy)``) and ``fprop_bias`` / ``fprop_bias_relu`` (the forward with the bias and a
ReLU fused into it, for inference). Groups (depthwise included) follow from the shapes: the
weights ``(K, C / G, kh, kw)`` against an input of ``C`` channels. Every tensor is NCHW and
contiguous; the outputs' strides are given explicitly (without them cuDNN may choose another
layout).

float32: no plan that rounds through TF32 tensor cores (numerical notes ``TENSOR_CORE``,
``DOWN_CONVERT_INPUTS``, ``REDUCED_PRECISION_REDUCTION``) unless :func:`set_allow_tf32` allows
them, as PyTorch's ``allow_tf32``; so GPU results equal the CPU's to float32 rounding. float16
runs on tensor cores with float32 accumulation, or float16 accumulation where the caller asks
for half math (NVCaffe's ``forward_math`` / ``backward_math`` FLOAT16).

A graph that cuDNN cannot build or run for a configuration is remembered as unsupported (the
caller then runs the CAFFE engine for it, and the log says why, once per configuration).
Nothing here sees a layer; :mod:`.cudnn` decides which arrays come here.
"""

import logging
import os
import threading

import numpy as np

from ...backend import cudnn_frontend
from ._util import cupy
from ...switches import flag as flag_value, switch

log = logging.getLogger("pycaffe_lite")

FPROP, DGRAD, WGRAD = "fprop", "dgrad", "wgrad"
FPROP_BIAS, FPROP_BIAS_RELU = "fprop_bias", "fprop_bias_relu"
# the numerical notes of plans that do not compute in float32 throughout
STRICT_FLOAT32_EXCLUDES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION")
TIMING_REPEATS = 3
DEFAULT_WORKSPACE_MB = 256


def _workspace_limit_from_env():
    """``PYCAFFE_LITE_CUDNN_WORKSPACE_MB`` in bytes; a value that is not a whole number of
    MiB, 0 or more, is ignored with a warning naming it (this module is imported with the
    package, GPU or not)."""
    value = os.environ.get("PYCAFFE_LITE_CUDNN_WORKSPACE_MB", "").strip()
    if not value:
        return DEFAULT_WORKSPACE_MB << 20
    try:
        mb = int(value)
    except ValueError:
        mb = -1
    if mb < 0:
        log.warning("PYCAFFE_LITE_CUDNN_WORKSPACE_MB=%r is not a whole number of MiB (0 or "
                    "more); it is ignored (the limit stays %d MiB)", value,
                    DEFAULT_WORKSPACE_MB)
        return DEFAULT_WORKSPACE_MB << 20
    return mb << 20


# Plans needing more workspace than this are left out while others exist (a few plans of large
# convolutions ask for gigabytes, for little gain).
WORKSPACE_LIMIT = _workspace_limit_from_env()

#: the heuristics whose plans are built (and timed), by the frontend's ``heur_mode`` names
DEFAULT_HEURISTICS = ("a", "fallback")
HEURISTICS = ("a", "b", "fallback")


def _heuristics_from_env():
    value = os.environ.get("PYCAFFE_LITE_CUDNN_HEURISTICS", "")
    names = tuple(n.strip().lower() for n in value.split(",") if n.strip())
    if not names:
        return DEFAULT_HEURISTICS
    if not set(names) <= set(HEURISTICS):
        log.warning("PYCAFFE_LITE_CUDNN_HEURISTICS=%s: the heuristics are some of %s; using "
                    "%s", value, ",".join(HEURISTICS), ",".join(DEFAULT_HEURISTICS))
        return DEFAULT_HEURISTICS
    return names


_settings = {
    "allow_tf32": False,
    "autotune": switch("PYCAFFE_LITE_CUDNN_AUTOTUNE"),
    "heuristics": _heuristics_from_env(),
}
_lock = threading.Lock()


def set_heuristics(names):
    """The cuDNN heuristics whose plans are built and timed for a new graph: some of
    :data:`HEURISTICS` (``a``: the fast one, ``b``: the more thorough one, ``fallback``),
    :data:`DEFAULT_HEURISTICS` unless ``PYCAFFE_LITE_CUDNN_HEURISTICS`` says otherwise. Where
    cuDNN cannot query one of them for a graph, the defaults are used for it. Returns the old
    setting; the graphs built so far are dropped."""
    names = tuple(str(n).strip().lower() for n in names)
    if not names or not set(names) <= set(HEURISTICS):
        raise ValueError("cuDNN heuristics are some of %s, got %r" % (", ".join(HEURISTICS),
                                                                       names))
    old = _settings["heuristics"]
    _settings["heuristics"] = names
    if old != names:
        CACHE.clear()
    return old


def set_allow_tf32(flag):
    """Let float32 convolutions use TF32 tensor cores (faster, about 1e-3 relative error), as
    PyTorch's ``torch.backends.cudnn.allow_tf32``. Off by default. Returns the old value; the
    graphs built so far are dropped, so the next call chooses its plans again."""
    old = _settings["allow_tf32"]
    _settings["allow_tf32"] = flag_value(flag, "set_allow_tf32")
    if old != _settings["allow_tf32"]:
        CACHE.clear()
    return old


def allow_tf32():
    return _settings["allow_tf32"]


def set_autotune(flag):
    """Time every plan of a new graph and keep the fastest (True, the default), or take the
    heuristics' first choice (False). Returns the old value."""
    old = _settings["autotune"]
    _settings["autotune"] = flag_value(flag, "set_autotune")
    return old


def strides(shape):
    """The element strides of a contiguous (C-order) array of ``shape``."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= int(n)
    return list(reversed(out))


def _data_type(fe, dtype, half_math=False):
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return fe.data_type.FLOAT, fe.data_type.FLOAT
    if dtype == np.float16:
        return fe.data_type.HALF, fe.data_type.HALF if half_math else fe.data_type.FLOAT
    if dtype == np.float64:
        return fe.data_type.DOUBLE, fe.data_type.DOUBLE
    raise NotSupported("element type %s" % dtype)


class NotSupported(Exception):
    """cuDNN offers no plan for this graph here."""


class Key(tuple):
    """What identifies one graph: ``(kind, x shape, w shape, y shape, pad, stride, dilation,
    dtype, tf32, device, half math)``."""

    __slots__ = ()

    @classmethod
    def make(cls, kind, x_shape, w_shape, y_shape, pad, stride, dilation, dtype, device,
             half_math=False):
        half_math = bool(half_math) and np.dtype(dtype) == np.float16
        return cls((kind, tuple(x_shape), tuple(w_shape), tuple(y_shape), tuple(pad),
                    tuple(stride), tuple(dilation), np.dtype(dtype).str,
                    _settings["allow_tf32"], device, half_math))

    def describe(self):
        kind, x, w, y, pad, stride, dil, dtype = self[:8]
        return ("%s x%s w%s y%s pad %s stride %s dilation %s %s%s"
                % (kind, list(x), list(w), list(y), list(pad), list(stride), list(dil),
                   np.dtype(dtype).name, " (half math)" if self[10:11] == (True,) else ""))


class Plan:
    """One built graph: its tensors (in the order the calls pass arrays), the chosen plan's
    index and its workspace size."""

    __slots__ = ("graph", "tensors", "index", "workspace", "timings", "launch")

    def __init__(self, graph, tensors, index, workspace, timings=None):
        self.graph, self.tensors, self.index = graph, tensors, index
        self.workspace, self.timings = workspace, timings or {}
        self.launch = None  # (pointers, workspace pointer, handle) -> None, once known

    def execute(self, pointers, workspace, handle):
        launch = self.launch
        if launch is None:
            launch = self.launch = _launcher(self, handle)
        launch(pointers, workspace, handle)


def _launcher(plan, handle):
    """How to launch ``plan``: straight into the frontend's lowered (C++) graph where this
    frontend has one (frontend 1.x from 1.30: its Python graph spends about 60 us per call on
    bookkeeping), else through the public ``execute_plan_at_index``."""
    graph, index, tensors = plan.graph, plan.index, plan.tensors

    def public(pointers, workspace, h):
        graph.execute_plan_at_index(dict(zip(tensors, pointers)), workspace, index, handle=h)

    try:
        lowered = graph._lowered_graph
        if graph._engine_for(graph._plans[index]) is not None:
            return public  # a plan the frontend runs in Python: only its own path runs it
        cpp_index = graph._materialize_backend_plan(index).cpp_index
        raw_handle = cudnn_frontend()._handle.to_backend_handle(handle)
        uids = [t.uid for t in tensors]
        run_lowered = lowered._execute_plan_at_index
        if cpp_index is None or not callable(run_lowered):
            return public
    except Exception:  # another frontend version: its public path
        return public

    def direct(pointers, workspace, h):
        run_lowered(dict(zip(uids, pointers)), workspace, cpp_index, raw_handle, None, None,
                    None)
    return direct


def build_graph(fe, key, handle, heuristics=DEFAULT_HEURISTICS):
    """The frontend graph for ``key`` and its tensors: ``(graph, tensors)`` where tensors are
    in the order of the arrays the kind's calls pass (see :func:`run`); its plans those of
    ``heuristics`` (names of :data:`HEURISTICS`)."""
    kind, x_shape, w_shape, y_shape, pad, stride, dilation = key[:7]
    io, compute = _data_type(fe, key[7], key[10] if len(key) > 10 else False)
    graph = fe.pygraph(io_data_type=io, intermediate_data_type=compute,
                       compute_data_type=compute, handle=handle)

    def tensor(name, shape):
        return graph.tensor(name=name, dim=list(shape), stride=strides(shape), data_type=io)

    def output(t, shape):
        t.set_output(True).set_dim(list(shape)).set_stride(strides(shape)).set_data_type(io)

    geometry = dict(padding=list(pad), stride=list(stride), dilation=list(dilation),
                    compute_data_type=compute)
    if kind in (FPROP, FPROP_BIAS, FPROP_BIAS_RELU):
        x, w = tensor("x", x_shape), tensor("w", w_shape)
        y = graph.conv_fprop(image=x, weight=w, **geometry)
        tensors = [x, w]
        if kind != FPROP:
            b = graph.tensor(name="b", dim=[1, w_shape[0], 1, 1],
                             stride=[w_shape[0], 1, 1, 1], data_type=io)
            y = graph.bias(input=y, bias=b, compute_data_type=compute)
            tensors.append(b)
            if kind == FPROP_BIAS_RELU:
                y = graph.relu(input=y, compute_data_type=compute)
        output(y, y_shape)
        tensors.append(y)
    elif kind == DGRAD:
        dy, w = tensor("dy", y_shape), tensor("w", w_shape)
        dx = graph.conv_dgrad(loss=dy, filter=w, **geometry)
        output(dx, x_shape)
        tensors = [dy, w, dx]
    elif kind == WGRAD:
        x, dy = tensor("x", x_shape), tensor("dy", y_shape)
        dw = graph.conv_wgrad(image=x, loss=dy, **geometry)
        output(dw, w_shape)
        tensors = [x, dy, dw]
    else:
        raise ValueError("unknown convolution kind %r" % (kind,))
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([getattr(fe.heur_mode, h.upper()) for h in heuristics])
    if np.dtype(key[7]) == np.float32 and not key[8]:
        notes = [getattr(fe.numerical_note, n) for n in STRICT_FLOAT32_EXCLUDES
                 if hasattr(fe.numerical_note, n)]
        graph.deselect_numeric_notes(notes)
    graph.check_support()
    graph.build_plans(fe.build_plan_policy.ALL if _settings["autotune"]
                      else fe.build_plan_policy.HEURISTICS_CHOICE)
    return graph, tensors


class GraphCache:
    """Built graphs by :class:`Key`, with the plan chosen for each; ``None`` for a key cuDNN
    cannot run (so it is tried once). ``timer(graph, index, pack, workspace)`` times one plan
    (milliseconds) when autotuning."""

    def __init__(self):
        self._plans = {}
        self.builds = 0

    def __len__(self):
        return len(self._plans)

    def clear(self):
        with _lock:
            self._plans.clear()
            FUSED.clear()

    def get(self, key):
        return self._plans.get(key, False)

    def plan(self, fe, key, handle, pointers, workspace, timer):
        """The :class:`Plan` for ``key`` (built and tuned on ``pointers`` the first time), or
        None where cuDNN cannot run it."""
        plan = self._plans.get(key, False)
        if plan is not False:
            return plan
        with _lock:
            plan = self._plans.get(key, False)
            if plan is False:
                plan = self._build(fe, key, handle, pointers, workspace, timer)
                self._plans[key] = plan
        return plan

    def _build(self, fe, key, handle, pointers, workspace, timer):
        self.builds += 1
        try:
            heuristics = _settings["heuristics"]
            try:
                graph, tensors = build_graph(fe, key, handle, heuristics)
            except Exception as exc:
                if heuristics == DEFAULT_HEURISTICS:
                    raise
                log.debug("cuDNN %s with heuristics %s: %s; the default ones instead",
                          key.describe(), ",".join(heuristics), exc)
                graph, tensors = build_graph(fe, key, handle)
            candidates = _built_plans(graph)
            if not candidates:
                raise NotSupported("no execution plan could be built")
        except Exception as exc:  # the frontend's errors have no common base
            log.info("cuDNN cannot run %s (%s: %s); the CAFFE engine computes it",
                     key.describe(), type(exc).__name__, str(exc).splitlines()[0][:200]
                     if str(exc) else "")
            return None
        pack = dict(zip(tensors, pointers))
        timings = {}
        if _settings["autotune"] and len(candidates) > 1:
            for index, size in candidates:
                try:
                    timings[index] = timer(graph, index, pack, workspace(size))
                except Exception as exc:
                    log.debug("cuDNN plan %d of %s failed: %s", index, key.describe(), exc)
            if not timings:
                log.info("cuDNN cannot run %s (every plan failed); the CAFFE engine "
                         "computes it", key.describe())
                return None
            index = min(timings, key=timings.get)
        else:
            index = candidates[0][0]
        size = dict(candidates)[index]
        return Plan(graph, tensors, index, size, timings)


def _built_plans(graph):
    """``[(index, workspace bytes)]`` of the plans that were built (those filtered out by the
    numerical notes or failing to build are left out)."""
    out = []
    for index in range(graph.get_execution_plan_count()):
        try:
            size = int(graph.get_workspace_size_plan_at_index(index))
        except Exception:
            continue
        out.append((index, size))
    small = [(i, size) for i, size in out if size <= WORKSPACE_LIMIT]
    return small or out


CACHE = GraphCache()


# ---- the device side -------------------------------------------------------------------------
_device_state = {"handles": {}, "workspace": {}, "streams": {}, "retired": []}


def _handle(fe, device):
    handles = _device_state["handles"]
    h = handles.get(device)
    if h is None:
        h = handles[device] = fe.create_handle()
    stream = cupy().cuda.get_current_stream().ptr
    if _device_state["streams"].get(device) != stream:
        fe.set_stream(h, stream)
        _device_state["streams"][device] = stream
    return h


def _workspace(device, size):
    """A device buffer of at least ``size`` bytes, shared by every graph of the device (graphs
    run one after another on the stream); its pointer."""
    buf = _device_state["workspace"].get(device)
    if buf is None or buf.nbytes < size:
        if buf is not None:  # a captured CUDA graph may still use it: never freed
            _device_state["retired"].append(buf)
        buf = cupy().empty(max(int(size), 1 << 20), dtype=np.uint8)
        _device_state["workspace"][device] = buf
    return buf.data.ptr


def time_ms(fn):
    """Milliseconds per call of ``fn`` on the current stream: one call to warm up, then
    :data:`TIMING_REPEATS` between two CUDA events."""
    cp = cupy()
    fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(TIMING_REPEATS):
        fn()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / TIMING_REPEATS


def _time_plan(handle):
    def timer(graph, index, pack, workspace_ptr):
        return time_ms(lambda: graph.execute_plan_at_index(pack, workspace_ptr, index,
                                                           handle=handle))
    return timer


#: per fused forward's :class:`Key`: whether its fused graph runs rather than the
#: convolution's graph and a separate pass adding the bias (:func:`prefer_fused`)
FUSED = {}


def prefer_fused(key, fused, separate, timer=time_ms):
    """Whether a convolution + bias (+ ReLU) of ``key`` (an ``FPROP_BIAS`` or
    ``FPROP_BIAS_RELU`` key) runs as ``fused()`` (one cuDNN graph) rather than ``separate()``
    (the convolution's graph, then a pass adding the bias, and clipping). Both compute the
    same into the same output, and each returns False where cuDNN cannot run it. Decided the
    first time a key is seen: the fused graph where it runs and plans are not autotuned, else
    the faster of the two as ``timer`` measures them on that call's arrays (cuDNN's fused
    plans are generated at run time and are not always faster than its convolution alone and
    one more pass over the output)."""
    choice = FUSED.get(key)
    if choice is None:
        if not fused():
            choice = False
        elif not _settings["autotune"] or not separate():
            choice = True
        else:
            fused_ms, separate_ms = timer(fused), timer(separate)
            choice = fused_ms <= separate_ms
            log.debug("cuDNN %s: fused %.3f ms, convolution then the bias %.3f ms",
                      key.describe(), fused_ms, separate_ms)
        FUSED[key] = choice
    return choice


def run(kind, arrays, x_shape, w_shape, y_shape, pad, stride, dilation, half_math=False):
    """Run the ``kind`` convolution on CuPy ``arrays`` (contiguous, in the order
    :func:`build_graph` lists its tensors: fprop ``x, w, y``; fprop_bias(_relu) ``x, w, b,
    y``; dgrad ``dy, w, dx``; wgrad ``x, dy, dw``). Returns False (and writes nothing) where
    cuDNN cannot run it. ``half_math``: float16 arrays accumulate in float16."""
    fe = cudnn_frontend()
    cp = cupy()
    device = cp.cuda.runtime.getDevice()
    key = Key.make(kind, x_shape, w_shape, y_shape, pad, stride, dilation, arrays[0].dtype,
                   device, half_math)
    pointers = [a.data.ptr for a in arrays]
    handle = _handle(fe, device)
    plan = CACHE.get(key)
    if plan is False:
        plan = CACHE.plan(fe, key, handle, pointers,
                          lambda size: _workspace(device, size), _time_plan(handle))
    if plan is None:
        return False
    plan.execute(pointers, _workspace(device, plan.workspace), handle)
    return True
