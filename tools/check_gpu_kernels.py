#!/usr/bin/env python
"""Check the CUDA kernels of ``pycaffe_lite.ops.gpu`` on a machine without a GPU.

    python tools/check_gpu_kernels.py

1. ``nvcc -ptx`` (when nvcc is on the PATH) compiles every RawKernel source for float and
   double: syntax and types as the GPU compiler sees them.
2. The same sources, compiled as plain C++ with ``g++`` (``__global__`` dropped, one "thread"
   whose grid-stride loop covers every item), run on random inputs and must give what the
   NumPy functions they replace give: im2col/col2im, MAX/AVE pooling forward and backward, LRN
   forward and backward, SoftmaxWithLoss's gather and gradient.
3. With CuPy replaced by a host shim (RawModule and ElementwiseKernel compile the same code
   as C++; kernel arguments must be contiguous arrays and NumPy scalars of the exact C types)
   and NumPy arrays taken for CuPy arrays, the Python side runs for real: the solvers' fused
   update of every rule for a few iterations of a tiny net, and the layers whose hot paths
   dispatch to the kernels (Convolution, Deconvolution, Pooling, LRN, SoftmaxWithLoss), must
   match the NumPy code.

This checks the kernels' arithmetic and indexing and the Python glue, not CuPy itself: that is
``tests/test_gpu_cupy.py`` on a real GPU. Exit status 1 on a mismatch or a compile error.
"""

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from pycaffe_lite import ops  # noqa: E402
from pycaffe_lite.ops.gpu import im2col as g_im2col  # noqa: E402
from pycaffe_lite.ops.gpu import lrn as g_lrn  # noqa: E402
from pycaffe_lite.ops.gpu import pooling as g_pool  # noqa: E402
from pycaffe_lite.ops.gpu import softmax_loss as g_sl  # noqa: E402
from pycaffe_lite.ops.gpu import solver_updates as g_su  # noqa: E402

RAW_MODULES = (g_im2col, g_pool, g_lrn, g_sl)
CTYPES = {np.float32: "float", np.float64: "double"}
PRELUDE = r"""
#include <cmath>
#include <algorithm>
using std::max; using std::min; using std::sqrt; using std::pow; using std::log;
struct Dim3 { int x, y, z; };
static Dim3 blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0},
    gridDim = {1, 1, 1};
#define __global__
#define __device__
#define __forceinline__ inline
"""


class Host:
    """Kernel sources compiled for the host, loaded with ctypes."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.libs = {}

    def compile(self, key, source):
        lib = self.libs.get(key)
        if lib is None:
            path = os.path.join(self.workdir, "_".join(key))
            with open(path + ".cpp", "w") as f:
                f.write(source)
            subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC",
                            path + ".cpp", "-o", path + ".so"], check=True)
            lib = self.libs[key] = ctypes.CDLL(path + ".so")
        return lib

    def raw(self, module, dtype):
        ctype = CTYPES[dtype]
        return self.compile((module.__name__.rsplit(".", 1)[1], ctype),
                            PRELUDE + "typedef %s T;\n" % ctype + module._SOURCE)

    def rule(self, rule, dtype):
        ins, outs, body = g_su.SPECS[rule]
        params, decls = [], []
        for t, name in (p.split() for p in ins.split(",")):
            if name == "data":
                params.append("const T* data_")
                decls.append("const T data = data_[i];")
            else:
                params.append("%s %s" % ("int" if t == "int32" else "T", name))
        for _, name in (p.split() for p in outs.split(",")):
            params.append("T* %s_" % name)
            decls.append("T& %s = %s_[i];" % (name, name))
        ctype = CTYPES[dtype]
        source = (PRELUDE + "typedef %s T;\nextern \"C\" void run(int n, %s) {\n"
                  "  for (int i = 0; i < n; ++i) {\n    %s\n%s\n  }\n}\n"
                  % (ctype, ", ".join(params), "\n    ".join(decls), body))
        return self.compile(("rule", rule, ctype), source)


def ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def i32(v):
    return ctypes.c_int(int(v))


def scalar(v, dtype):
    return (ctypes.c_float if dtype == np.float32 else ctypes.c_double)(float(v))


def check_nvcc(workdir):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc: not on the PATH, PTX compilation not checked")
        return 0
    failures = 0
    for module in RAW_MODULES:
        for ctype in CTYPES.values():
            path = os.path.join(workdir, "%s_%s.cu" % (module.__name__.rsplit(".", 1)[1], ctype))
            with open(path, "w") as f:
                f.write("typedef %s T;\n%s" % (ctype, module._SOURCE))
            r = subprocess.run([nvcc, "-ptx", "--std=c++11", path, "-o", path + ".ptx"],
                               capture_output=True, text=True)
            if r.returncode:
                failures += 1
                print("nvcc FAILED on %s:\n%s" % (os.path.basename(path), r.stderr))
    print("nvcc: %d sources compiled to PTX, %d failures" % (2 * len(RAW_MODULES), failures))
    return failures


def check_raw_kernels(host):
    rng = np.random.default_rng(0)
    checks = 0
    for dt in (np.float32, np.float64):
        tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-13)
        lib = host.raw(g_im2col, dt)
        for shape, k, p, s, d in [((2, 3, 7, 6), (3, 3), (1, 1), (2, 2), (1, 1)),
                                  ((1, 2, 9, 8), (3, 2), (0, 1), (1, 2), (2, 1)),
                                  ((3, 4, 5, 5), (1, 1), (0, 0), (1, 1), (1, 1)),
                                  ((2, 3, 10, 9), (3, 3), (2, 1), (3, 2), (2, 3))]:
            x = rng.normal(size=shape).astype(dt)
            nb, nc, h, w = shape
            oh, ow = g_im2col.conv_output_shape((h, w), k, p, s, d)
            geo = [i32(v) for v in (nc, nb, h, w, k[0], k[1], p[0], p[1], s[0], s[1], d[0],
                                    d[1], oh, ow)]
            cols = ops.im2col(x, k, p, s, d)
            out = np.empty(cols.shape, dt)
            lib.im2col_2d(ptr(x), ptr(out), i32(nc * nb * oh * ow), *geo)
            np.testing.assert_array_equal(out, cols, err_msg="im2col %s" % (shape,))
            dcol = rng.normal(size=cols.shape).astype(dt)
            img = np.empty(shape, dt)
            lib.col2im_2d(ptr(dcol), ptr(img), i32(x.size), *geo)
            np.testing.assert_allclose(img, ops.col2im(dcol, shape, k, p, s, d), **tol)
            checks += 2
        lib = host.raw(g_pool, dt)
        for shape, k, p, s in [((2, 3, 7, 6), (3, 3), (1, 1), (2, 2)),
                               ((1, 2, 8, 8), (2, 2), (0, 0), (2, 2)),
                               ((2, 2, 5, 7), (3, 2), (0, 1), (1, 3)),
                               ((2, 2, 7, 5), (2, 3), (1, 2), (3, 2))]:
            x = rng.normal(size=shape).astype(dt)
            x.ravel()[::5] = x.ravel()[1]  # ties
            x.ravel()[7] = np.nan  # skipped by MAX
            n, c, h, w = shape
            pooled = tuple(ops.pooled_size(z, kk, pp, st)
                           for z, kk, pp, st in zip((h, w), k, p, s))
            geo = [i32(v) for v in (h, w, pooled[0], pooled[1], k[0], k[1], p[0], p[1], s[0],
                                    s[1])]
            top, arg = np.empty((n, c) + pooled, dt), np.empty((n, c) + pooled, np.int32)
            ops.max_pool_forward(x, k, p, s, pooled, top, arg)
            gtop, garg = np.empty_like(top), np.empty_like(arg)
            lib.max_pool_forward(ptr(x), ptr(gtop), ptr(garg), i32(top.size), *geo,
                                 scalar(-g_pool.FLT_MAX, dt))
            np.testing.assert_array_equal(gtop, top)
            np.testing.assert_array_equal(garg, arg)
            dy = rng.normal(size=top.shape).astype(dt)
            dx, gdx = np.empty_like(x), np.empty_like(x)
            ops.max_pool_backward(dy, arg, k, p, s, pooled, dx)
            lib.max_pool_backward(ptr(dy), ptr(arg), ptr(gdx), i32(x.size), *geo)
            np.testing.assert_allclose(gdx, dx, **tol)
            x = np.nan_to_num(x)
            div = ops.pool_divisors(h, w, k, p, s, pooled, dtype=dt)
            ops.ave_pool_forward(x, k, p, s, pooled, top, div)
            lib.ave_pool_forward(ptr(x), ptr(div), ptr(gtop), i32(top.size), *geo)
            np.testing.assert_allclose(gtop, top, **tol)
            ops.ave_pool_backward(dy, k, p, s, pooled, div, dx)
            lib.ave_pool_backward(ptr(dy), ptr(div), ptr(gdx), i32(x.size), *geo)
            np.testing.assert_allclose(gdx, dx, **tol)
            checks += 4
        checks += check_lrn(host, dt, rng)
        checks += check_softmax_loss(host, dt, rng, tol)
    print("host C++: %d kernel checks against NumPy passed" % checks)


def check_lrn(host, dt, rng):
    from pycaffe_lite.testing import make_layer, random_blobs

    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-10, atol=1e-12)
    lib = host.raw(g_lrn, dt)
    checks = 0
    for text in ['type: "LRN" lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 k: 1.5 }',
                 'type: "LRN" lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL '
                 'alpha: 0.8 }']:
        x = rng.normal(size=(2, 7, 4, 5)).astype(dt)
        dy = rng.normal(size=x.shape).astype(dt)
        layer = make_layer(text, dt)
        bottom, top = random_blobs([x], dtype=dt), random_blobs([x], dtype=dt)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        top[0].diff[...] = dy
        layer.Backward(top, [True], bottom)
        across = layer.region == 0
        size = layer.size
        if across:
            div, coeff, offset = 1, dt(layer.alpha / size), dt(layer.k)
        else:
            div, coeff, offset = dt(size * size), dt(layer.alpha), dt(1)
        _, c, h, w = x.shape
        squares, scale, y = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        lib.lrn_square(ptr(x), ptr(squares), i32(x.size))
        lib.lrn_forward(ptr(x), ptr(squares), ptr(scale), ptr(y), i32(x.size), i32(c), i32(h),
                        i32(w), i32(size), i32(across), scalar(div, dt), scalar(coeff, dt),
                        scalar(offset, dt), scalar(-layer.beta, dt))
        np.testing.assert_allclose(y, top[0].data, **tol)
        np.testing.assert_allclose(scale, layer.scale, **tol)
        ratio, dx = np.empty_like(x), np.empty_like(x)
        lib.lrn_ratio(ptr(dy), ptr(y), ptr(scale), ptr(ratio), i32(x.size))
        n_window = size if across else size * size
        lib.lrn_backward(ptr(x), ptr(dy), ptr(scale), ptr(ratio), ptr(dx), i32(x.size), i32(c),
                         i32(h), i32(w), i32(size), i32(across), scalar(-layer.beta, dt),
                         scalar(2.0 * layer.alpha * layer.beta / n_window, dt))
        np.testing.assert_allclose(dx, bottom[0].diff, **tol)
        checks += 2
    return checks


def check_softmax_loss(host, dt, rng, tol):
    lib = host.raw(g_sl, dt)
    outer, channels, inner = 3, 5, 4
    prob = rng.uniform(0, 1, (outer, channels, inner)).astype(dt)
    prob[0, :, 0] = 0  # clipped at FLT_MIN
    index = rng.integers(0, channels, (outer, inner)).astype(np.int64)
    valid = rng.uniform(size=(outer, inner)) > 0.3
    picked = np.take_along_axis(prob, index[:, None, :], axis=1)[:, 0, :]
    expected = np.where(valid, np.log(np.maximum(picked, dt(g_sl.FLT_MIN))), 0)
    log_p = np.empty((outer, inner), dt)
    lib.softmax_loss_log_prob(ptr(prob), ptr(index), ptr(valid), ptr(log_p), i32(outer * inner),
                              i32(channels), i32(inner), scalar(g_sl.FLT_MIN, dt))
    np.testing.assert_allclose(log_p, expected, **tol)
    onehot = (np.arange(channels)[None, :, None] == index[:, None, :]).astype(dt)
    scale = np.array([0.25], dt)
    dx = np.empty_like(prob)
    lib.softmax_loss_backward(ptr(prob), ptr(index), ptr(valid), ptr(scale), ptr(dx),
                              i32(prob.size), i32(channels), i32(inner))
    np.testing.assert_allclose(dx, (prob - onehot) * valid[:, None, :] * scale[0], **tol)
    return 2


RULES = {
    "SGD": 'type: "SGD" base_lr: 0.1 momentum: 0.9 weight_decay: 0.01',
    "Nesterov": 'type: "Nesterov" base_lr: 0.1 momentum: 0.9 weight_decay: 0.01 '
                'regularization_type: "L1"',
    "AdaGrad": 'type: "AdaGrad" base_lr: 0.1 delta: 1e-6 iter_size: 2',
    "RMSProp": 'type: "RMSProp" base_lr: 0.05 rms_decay: 0.9 delta: 1e-6 weight_decay: 0.002',
    "AdaDelta": 'type: "AdaDelta" base_lr: 1 momentum: 0.95 delta: 1e-6 weight_decay: 0.001',
    "Adam": 'type: "Adam" base_lr: 0.01 momentum: 0.9 momentum2: 0.999 delta: 1e-8 '
            'weight_decay: 0.01 regularization_type: "L1"',
}


class HostCuPy:
    """Just enough of CuPy for ops/gpu, running the kernels as host C++: RawModule /
    get_function (arguments checked: contiguous arrays and NumPy scalars of the C types),
    ElementwiseKernel (a loop over the elements), and NumPy for the array functions."""

    C_TYPES = {np.dtype(np.int32): ctypes.c_int, np.dtype(np.float32): ctypes.c_float,
               np.dtype(np.float64): ctypes.c_double}

    def __init__(self, host):
        self.host = host
        self.cuda = type("cuda", (), {"runtime": type("runtime", (), {
            "getDevice": staticmethod(lambda: 0)})})
        for name in ("empty", "empty_like", "asarray", "ascontiguousarray", "zeros"):
            setattr(self, name, getattr(np, name))

    def _arg(self, a):
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous:
                raise AssertionError("a RawKernel got a non-contiguous array")
            return ptr(a)
        if isinstance(a, np.generic) and a.dtype in self.C_TYPES:
            return self.C_TYPES[a.dtype](a.item())
        raise AssertionError("a kernel argument of type %s: RawKernels need NumPy scalars of "
                             "the exact C type" % type(a).__name__)

    def RawModule(self, code, options=()):  # noqa: N802 (CuPy's name)
        lib = self.host.compile(("shim", str(abs(hash(code)))), PRELUDE + code)
        shim = self

        class Module:
            def get_function(self, name):
                fn = getattr(lib, name)

                def call(grid, block, args, **kwargs):
                    assert isinstance(grid, tuple) and isinstance(block, tuple)
                    fn(*[shim._arg(a) for a in args])
                return call
        return Module()

    def ElementwiseKernel(self, in_params, out_params, operation, name):  # noqa: N802
        ins = [p.split() for p in in_params.split(",")]
        outs = [p.split() for p in out_params.split(",")]
        dtypes = {}

        def kernel(*args):
            assert len(args) == len(ins) + len(outs), "argument count"
            arrays = [a for a in args if isinstance(a, np.ndarray)]
            dt = arrays[0].dtype.type
            lib = self._elementwise(ins, outs, operation, name, dt, dtypes)
            n = arrays[0].size
            lib.run(i32(n), *[self._arg(a) for a in args])
        return kernel

    def _elementwise(self, ins, outs, operation, name, dt, cache):
        lib = cache.get(dt)
        if lib is None:
            params, decls = [], []
            for (t, pname), value in zip(ins, [None] * len(ins)):
                if pname == "data":
                    params.append("const T* data_")
                    decls.append("const T data = data_[i];")
                else:
                    params.append("%s %s" % ("int" if t == "int32" else "T", pname))
            for _, pname in outs:
                params.append("T* %s_" % pname)
                decls.append("T& %s = %s_[i];" % (pname, pname))
            source = (PRELUDE + "typedef %s T;\nextern \"C\" void run(int n, %s) {\n"
                      "  for (int i = 0; i < n; ++i) {\n    %s\n%s\n  }\n}\n"
                      % (CTYPES[dt], ", ".join(params), "\n    ".join(decls), operation))
            lib = cache[dt] = self.host.compile(("ew", name, CTYPES[dt]), source)
        return lib


def install_shim(host):
    """CuPy replaced by HostCuPy, and NumPy arrays taken for CuPy arrays, in ops/gpu."""
    from pycaffe_lite.ops.gpu import _util

    shim = HostCuPy(host)
    saved = []
    for module in (_util, g_im2col, g_pool, g_lrn, g_sl, g_su):
        for name, value in (("cupy", lambda: shim), ("on_gpu", lambda *a: True)):
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, value)
    for kernel in g_su.KERNELS.values():
        kernel._kernel = None  # rebuilt through the shim

    def restore():
        for module, name, value in saved:
            setattr(module, name, value)
        for kernel in g_su.KERNELS.values():
            kernel._kernel = None
    return restore


def check_solver_rules(host):
    """The solvers' fused path (g_su.update and the ElementwiseKernels) against the NumPy
    steps, for every rule."""
    from helpers.solver import batches, feed, solver_param, tiny_net_text

    from pycaffe_lite.solvers import get_solver

    def train(rule, fused):
        param = solver_param(RULES[rule] + ' lr_policy: "fixed" random_seed: 1 max_iter: 10 '
                             'display: 0', tiny_net_text())
        solver = get_solver(param)
        feed(solver.net, batches(4))
        restore = install_shim(host) if fused else (lambda: None)
        try:
            solver.step(5)
        finally:
            restore()
        return [p.data.copy() for p in solver.net.learnable_params] + \
            [np.array(h) for h in solver.history]

    for rule in RULES:
        for a, b in zip(train(rule, False), train(rule, True)):
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7, err_msg=rule)
    print("shim: the fused update of %d solver rules matches the NumPy steps" % len(RULES))


LAYER_CASES = [
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2 '
     'group: 2 dilation: 2 weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } '
     'engine: CAFFE }', [(2, 4, 9, 8)], [True]),
    ('type: "Deconvolution" convolution_param { num_output: 3 kernel_size: 3 stride: 2 '
     'weight_filler { type: "gaussian" } }', [(2, 2, 4, 5)], [True]),
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }',
     [(2, 3, 7, 6)], [True]),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }',
     [(2, 3, 7, 6)], [True]),
    ('type: "LRN" lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 }', [(2, 7, 3, 4)], [True]),
    ('type: "LRN" lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL }', [(2, 3, 5, 4)],
     [True]),
    ('type: "SoftmaxWithLoss" loss_param { ignore_label: 1 }', [(4, 5, 3), "labels"],
     [True, False]),
]


def check_layers_through_dispatch(host):
    """Layers whose hot paths dispatch to ops/gpu, run with the kernels (shim) and without."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing import make_layer, random_blobs

    def run(text, shapes, down, fused):
        backend.set_random_seed(7)  # the same filled weights in both runs
        rng = np.random.default_rng(7)
        arrays = [rng.integers(0, 5, (4, 3)).astype(np.float32) if s == "labels" else
                  rng.normal(size=s).astype(np.float32) for s in shapes]
        layer = make_layer(text, np.float32)
        bottom = random_blobs(arrays, dtype=np.float32)
        top = random_blobs([np.zeros(1)], dtype=np.float32)
        restore = install_shim(host) if fused else (lambda: None)
        try:
            layer.SetUp(bottom, top)
            layer.Forward(bottom, top)
            if not layer.loss(0):
                top[0].diff[...] = rng.normal(size=top[0].shape)
            layer.Backward(top, down, bottom)
        finally:
            restore()
        return [top[0].data.copy()] + [b.diff.copy() for b, d in zip(bottom, down) if d] + \
            [p.diff.copy() for p in layer.blobs]

    for text, shapes, down in LAYER_CASES:
        for a, b in zip(run(text, shapes, down, False), run(text, shapes, down, True)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=text)
    print("shim: %d layers give the same results through the kernels as without"
          % len(LAYER_CASES))


def main():
    workdir = tempfile.mkdtemp(prefix="pcl_kernels_")
    try:
        failures = check_nvcc(workdir)
        host = Host(workdir)
        check_raw_kernels(host)
        check_solver_rules(host)
        check_layers_through_dispatch(host)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
