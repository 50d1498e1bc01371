#!/usr/bin/env python
"""Check the CUDA kernels of ``pycaffe_lite.ops.gpu`` on a machine without a GPU.

    python tools/check_gpu_kernels.py [--no-nvcc]

1. ``nvcc -ptx`` (when nvcc is on the PATH) compiles every kernel source of ``ops/gpu`` (each
   RawModuleCache's variants: float, double, half where it has one; and the ElementwiseKernels
   of ``cudnn.py`` as kernels of their own): syntax and types as the GPU compiler sees them.
2. The same sources, compiled as C++ with ``g++`` and run on the host with CUDA's blocks and
   threads emulated (``tools/gpu_host.py``: a launch runs its whole grid; kernels with barriers
   or warp shuffles run each block's threads as host threads), on random inputs, must give what
   the NumPy code they replace gives: im2col/col2im, MAX/AVE pooling forward and backward, LRN
   forward and backward, SoftmaxWithLoss's gather and gradient, BatchNorm's and Scale's
   per-channel kernels, the fused training chains, the convolutions' bias + ReLU pass.
3. With CuPy replaced by a host shim (``RawModule`` and ``ElementwiseKernel`` build the same
   code for the host; every kernel argument is checked against the kernel's C signature) the
   Python side runs for real (``tools/gpu_kernel_shim_checks.py``): the solvers' one-launch
   update of every rule (its tables built by ``ops/gpu/solver_updates.py``, with host
   pointers) against the NumPy solvers, and the layers whose hot paths dispatch to the kernels
   against the same layers without them.

This checks the kernels' arithmetic and indexing and the Python glue, not CuPy itself: that is
``tests/test_gpu_cupy.py`` on a real GPU. Exit status 1 on a mismatch or a compile error.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tools")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from gpu_host import Host  # noqa: E402
from pycaffe_lite import ops  # noqa: E402
from pycaffe_lite.ops.gpu import im2col as g_im2col  # noqa: E402
from pycaffe_lite.ops.gpu import lrn as g_lrn  # noqa: E402
from pycaffe_lite.ops.gpu import pooling as g_pool  # noqa: E402
from pycaffe_lite.ops.gpu import softmax_loss as g_sl  # noqa: E402

CTYPES = {np.float32: "float", np.float64: "double"}
DTYPES = (np.float32, np.float64)


def i32(v):
    return np.int32(v)


def kernels(host, module, dt):
    """``module``'s RawModuleCache, variant ``dt``, built for the host: ``{name: kernel}``."""
    cache = module._module if hasattr(module, "_module") else module._MODULE
    return host.cache(cache, CTYPES[dt], module.__name__.rsplit(".", 1)[1])


def run(kernel, *args, grid=(3,), block=(32,)):
    """A launch of a few blocks of a few threads: a grid-stride loop must still cover
    everything."""
    kernel(grid, block, args)


def elementwise_kernels():
    """``[(in_params, out_params, operation, name)]`` of the package's ElementwiseKernels."""
    from pycaffe_lite.ops.gpu import cudnn

    class Capture:
        def ElementwiseKernel(self, *args):  # noqa: N802 (CuPy's name)
            return args
    return [cudnn._bias_act._build(Capture()), cudnn._relu._build(Capture())]


def elementwise_as_kernel(in_params, out_params, operation, name, ctype):
    """An ElementwiseKernel as the ``__global__`` grid-stride loop CuPy makes of it."""
    params, refs = [], []
    for p in in_params.split(","):
        words = p.split()
        t, pname = words[-2], words[-1]
        if t != "T":
            params.append("%s %s" % ({"int32": "int", "bool": "bool"}[t], pname))
        elif words[0] == "raw":
            params.append("const T* %s" % pname)
        else:
            params.append("const T* %s_" % pname)
            refs.append("const T %s = %s_[i];" % (pname, pname))
    for p in out_params.split(","):
        pname = p.split()[-1]
        params.append("T* %s_" % pname)
        refs.append("T& %s = %s_[i];" % (pname, pname))
    return ("typedef %s T;\nextern \"C\" __global__ void %s(long long n, %s) {\n"
            "  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
            "       i += (long long)gridDim.x * blockDim.x) {\n    %s\n    %s\n  }\n}\n"
            % (ctype, name, ", ".join(params), "\n    ".join(refs), operation))


def nvcc_sources():
    """``[(file stem, CUDA source)]``: every RawModuleCache variant of ops/gpu, and each
    ElementwiseKernel as a kernel of its own."""
    from check_cuda_sources import find_sources

    out = []
    for module, attr, cache in find_sources():
        for ctype in cache.ctypes:
            out.append(("%s_%s_%s" % (module.rsplit(".", 1)[1], attr, ctype),
                        cache.code(ctype)))
    for args in elementwise_kernels():
        for ctype in CTYPES.values():
            out.append(("%s_%s" % (args[3], ctype), elementwise_as_kernel(*args, ctype)))
    return out


def check_nvcc(workdir):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc: not on the PATH, PTX compilation not checked")
        return 0
    failures = 0
    sources = nvcc_sources()
    for stem, code in sources:
        path = os.path.join(workdir, stem + ".cu")
        with open(path, "w") as f:
            f.write(code)
        r = subprocess.run([nvcc, "-ptx", "--std=c++11", "-arch=compute_90", path, "-o",
                            path + ".ptx"], capture_output=True, text=True)
        if r.returncode:
            failures += 1
            print("nvcc FAILED on %s:\n%s" % (os.path.basename(path), r.stderr))
    print("nvcc: %d sources compiled to PTX, %d failures" % (len(sources), failures))
    return failures


def check_raw_kernels(host):
    rng = np.random.default_rng(0)
    checks = 0
    for dt in DTYPES:
        tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-13)
        kern = kernels(host, g_im2col, dt)
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
            run(kern["im2col_2d"], x, out, i32(nc * nb * oh * ow), *geo)
            np.testing.assert_array_equal(out, cols, err_msg="im2col %s" % (shape,))
            dcol = rng.normal(size=cols.shape).astype(dt)
            img = np.empty(shape, dt)
            run(kern["col2im_2d"], dcol, img, i32(x.size), *geo)
            np.testing.assert_allclose(img, ops.col2im(dcol, shape, k, p, s, d), **tol)
            checks += 2
        kern = kernels(host, g_pool, dt)
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
            run(kern["max_pool_forward"], x, gtop, garg, i32(top.size), *geo,
                                 dt(-g_pool.FLT_MAX))
            np.testing.assert_array_equal(gtop, top)
            np.testing.assert_array_equal(garg, arg)
            dy = rng.normal(size=top.shape).astype(dt)
            dx, gdx = np.empty_like(x), np.empty_like(x)
            ops.max_pool_backward(dy, arg, k, p, s, pooled, dx)
            run(kern["max_pool_backward"], dy, arg, gdx, i32(x.size), *geo)
            np.testing.assert_allclose(gdx, dx, **tol)
            x = np.nan_to_num(x)
            div = ops.pool_divisors(h, w, k, p, s, pooled, dtype=dt)
            ops.ave_pool_forward(x, k, p, s, pooled, top, div)
            run(kern["ave_pool_forward"], x, div, gtop, i32(top.size), *geo)
            np.testing.assert_allclose(gtop, top, **tol)
            ops.ave_pool_backward(dy, k, p, s, pooled, div, dx)
            run(kern["ave_pool_backward"], dy, div, gdx, i32(x.size), *geo)
            np.testing.assert_allclose(gdx, dx, **tol)
            checks += 4
        checks += check_lrn(host, dt, rng)
        checks += check_softmax_loss(host, dt, rng, tol)
    return checks


def check_lrn(host, dt, rng):
    from pycaffe_lite.testing import make_layer, random_blobs

    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-10, atol=1e-12)
    kern = kernels(host, g_lrn, dt)
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
        run(kern["lrn_square"], x, squares, i32(x.size))
        run(kern["lrn_forward"], x, squares, scale, y, i32(x.size), i32(c), i32(h),
                        i32(w), i32(size), i32(across), dt(div), dt(coeff),
                        dt(offset), dt(-layer.beta))
        np.testing.assert_allclose(y, top[0].data, **tol)
        np.testing.assert_allclose(scale, layer.scale, **tol)
        ratio, dx = np.empty_like(x), np.empty_like(x)
        run(kern["lrn_ratio"], dy, y, scale, ratio, i32(x.size))
        n_window = size if across else size * size
        run(kern["lrn_backward"], x, dy, scale, ratio, dx, i32(x.size), i32(c),
                         i32(h), i32(w), i32(size), i32(across), dt(-layer.beta),
                         dt(2.0 * layer.alpha * layer.beta / n_window))
        np.testing.assert_allclose(dx, bottom[0].diff, **tol)
        checks += 2
    return checks


def check_softmax_loss(host, dt, rng, tol):
    kern = kernels(host, g_sl, dt)
    outer, channels, inner = 3, 5, 4
    prob = rng.uniform(0, 1, (outer, channels, inner)).astype(dt)
    prob[0, :, 0] = 0  # clipped at FLT_MIN
    index = rng.integers(0, channels, (outer, inner)).astype(np.int64)
    valid = rng.uniform(size=(outer, inner)) > 0.3
    picked = np.take_along_axis(prob, index[:, None, :], axis=1)[:, 0, :]
    expected = np.where(valid, np.log(np.maximum(picked, dt(g_sl.FLT_MIN))), 0)
    log_p = np.empty((outer, inner), dt)
    run(kern["softmax_loss_log_prob"], prob, index, valid, log_p, i32(outer * inner),
                              i32(channels), i32(inner), dt(g_sl.FLT_MIN))
    np.testing.assert_allclose(log_p, expected, **tol)
    onehot = (np.arange(channels)[None, :, None] == index[:, None, :]).astype(dt)
    scale = np.array([0.25], dt)
    dx = np.empty_like(prob)
    run(kern["softmax_loss_backward"], prob, index, valid, scale, dx,
                              i32(prob.size), i32(channels), i32(inner))
    np.testing.assert_allclose(dx, (prob - onehot) * valid[:, None, :] * scale[0], **tol)
    return 2




def check_bias_relu(host):
    """cudnn.py's ElementwiseKernels (the bias + ReLU pass, the in-place ReLU) against NumPy."""
    from gpu_host import HostCuPy

    from pycaffe_lite.ops.gpu import cudnn

    rng = np.random.default_rng(3)
    shim = HostCuPy(host)
    bias_act, relu = cudnn._bias_act._build(shim), cudnn._relu._build(shim)
    checks = 0
    for dt in DTYPES:
        for on in (False, True):
            y = rng.normal(size=(2, 5, 3, 4)).astype(dt)
            b = rng.normal(size=5).astype(dt)
            want = y + b[None, :, None, None]
            if on:
                want = np.maximum(want, 0)
            bias_act(b, 12, 5, on, y)
            np.testing.assert_array_equal(y, want, err_msg="bias_act relu=%s" % on)
            checks += 1
        x = rng.normal(size=(3, 7)).astype(dt)
        want = np.maximum(x, 0)
        relu(x, x)
        np.testing.assert_array_equal(x, want, err_msg="relu")
        checks += 1
    return checks


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    import gpu_kernel_shim_checks as shim_checks

    workdir = tempfile.mkdtemp(prefix="pcl_kernels_")
    try:
        failures = 0 if "--no-nvcc" in argv else check_nvcc(workdir)
        host = Host(workdir)
        checks = check_raw_kernels(host)
        checks += shim_checks.check_channels(host)
        checks += shim_checks.check_fused(host)
        checks += check_bias_relu(host)
        print("host C++: %d kernel checks against NumPy passed" % checks)
        shim_checks.check_solver_tables(host)
        shim_checks.check_solver_rules(host)
        shim_checks.check_layers_through_dispatch(host)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
