"""CUDA kernels for a training net's fused chains (:mod:`pycaffe_lite.ops.train_fused`):
BatchNorm -> Scale -> ReLU and Eltwise SUM -> ReLU.

BatchNorm -> Scale -> ReLU on an ``(N, C, S)`` array, batch statistics:

- forward: ``chain_sums`` (one pass: per channel, per block, the sums of ``x - K`` and
  ``(x - K)^2`` in double, ``K`` the channel's first value, so that the variance loses no
  digits to a large mean), ``chain_stats`` (one thread per channel: the blocks' sums in a
  fixed order, mean, variance, std, Caffe's running sums), ``chain_apply`` (one pass:
  ``x_hat``, kept for the backward, and ``y = relu(x_hat * gamma + beta)``);
- backward: ``chain_sums`` again (the sums of ``dz`` and ``dz * x_hat``, ``dz`` the gradient
  through the ReLU's mask), ``chain_grad_sums`` (one thread per channel: the Scale's parameter
  diffs accumulated, the two means BatchNorm's gradient subtracts), ``chain_backward`` (one
  pass: the bottom's diff, and the top's diff as the Scale's in-place backward leaves it when
  BatchNorm is not in place).

With global statistics the forward is :func:`channels.bn_global` and ``chain_apply``, the
backward ``chain_backward`` alone (and the sums when the Scale learns).

Eltwise SUM -> ReLU: ``sum_forward`` (the coefficient-weighted sum of up to four bottoms in
Caffe's order, then the ReLU) and ``sum_backward`` (the ReLU's mask written into the top's diff,
as the in-place ReLU leaves it, and every bottom's diff ``coeff * dz``), one pass each.

Element types: the source is compiled per storage type ``T`` (``_prelude``), with ``S`` the
type of the per-channel statistics (mean, variance, std, BatchNorm's running sums, the two
backward means) and ``M`` the type of the elementwise math; ``load``/``store`` convert between
``T`` and ``M``. ``float`` and ``double``: all three are that type (the loads and stores do
nothing). ``half`` (NVCaffe's float16 layers): ``T`` is ``__half`` (``cuda_fp16.h``; loads
``__half2float``, stores ``__float2half_rn``), ``S`` and ``M`` float: the data, the Scale's
``gamma``/``beta`` and their diffs are float16, BatchNorm's statistics blobs and the buffers
float32, every value computed in float and rounded once when stored. The sums are doubles in
every variant. :func:`pycaffe_lite.ops.gpu._util.storage_and_wide` tells which arrays a variant
takes; global statistics (float32 for ``half``) go through :func:`channels.bn_global`.

Indices are 32-bit unsigned (fast division): the callers take arrays of fewer than 2**30
elements (``_util.fits``), so an index never passes 2**31 even with the grid's stride. Block
sums are a tree in shared memory (any power-of-two block, one thread included) and the
blocks' partial sums are added by one thread per channel in a fixed order: the results never
depend on timing. Nothing here reads device memory on the host: the chains can be captured in a
CUDA graph. Every function takes contiguous CuPy arrays (``None`` where a pointer is optional).
"""

import numpy as np

from . import channels
from ._util import BLOCK, RawModuleCache, i32, launch, storage_ctype

#: bottoms one ``sum_forward`` / ``sum_backward`` call takes (more: the generic code)
MAX_SUM_BOTTOMS = 4

_SOURCE = r"""
// the sum of v over the block (blockDim.x a power of two; shared holds blockDim.x doubles)
__device__ double tree_sum(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int half = blockDim.x >> 1; half > 0; half >>= 1) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    double total = shared[0];
    __syncthreads();
    return total;
}

// Channel c's totals of chain_sums' partial sums (p1, p2: splits per channel), added in block
// order.
__device__ void channel_totals(const double* p1, const double* p2, int splits, int c,
                               double* s1, double* s2) {
    double t1 = 0.0, t2 = 0.0;
    for (int k = 0; k < splits; ++k) {
        t1 += p1[c * splits + k];
        t2 += p2[c * splits + k];
    }
    *s1 = t1;
    *s2 = t2;
}

// Per channel c and block `split`, over the elements of c that the block strides through:
// mode 0: s1 = sum (a - K), s2 = sum (a - K)^2, K = a[first element of c];
// mode 1: dz = a (* (y > 0) with relu), s1 = sum dz, s2 = sum dz * xhat.
extern "C" __global__ void chain_sums(const T* a, const T* y, const T* xhat, int mode, int relu,
                                      int outer, int channels, int inner, int splits,
                                      double* p1, double* p2) {
    __shared__ double shared[1024];
    int c = blockIdx.x, split = blockIdx.y;
    unsigned int count = (unsigned int)outer * (unsigned int)inner, in = (unsigned int)inner;
    double shift = (mode == 0) ? (double)load(a[(unsigned int)c * in]) : 0.0;
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int j = (unsigned int)split * blockDim.x + threadIdx.x; j < count;
         j += (unsigned int)splits * blockDim.x) {
        unsigned int o = j / in, i = j - o * in;
        unsigned int at = (o * (unsigned int)channels + (unsigned int)c) * in + i;
        if (mode == 0) {
            double v = (double)load(a[at]) - shift;
            s1 += v;
            s2 += v * v;
        } else {
            M g = load(a[at]);
            if (relu) g = g * (M)(load(y[at]) > (M)0);
            s1 += (double)g;
            s2 += (double)g * (double)load(xhat[at]);
        }
    }
    s1 = tree_sum(s1, shared);
    s2 = tree_sum(s2, shared);
    if (threadIdx.x == 0) {
        p1[c * splits + split] = s1;
        p2[c * splits + split] = s2;
    }
}

// One thread per channel: the batch's mean and (biased) variance from chain_sums' mode 0,
// std = sqrt(var + eps), and Caffe's running sums (s = s f + 1, mean_sum = mean_sum f + mean,
// var_sum = var_sum f + correction var).
extern "C" __global__ void chain_stats(const double* p1, const double* p2, int splits,
                                       const T* x, int outer, int channels, int inner,
                                       double eps, double fraction, double correction,
                                       S* mean, S* var, S* std, S* mean_sum, S* var_sum,
                                       S* weight) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double s1, s2;
    channel_totals(p1, p2, splits, c, &s1, &s2);
    double count = (double)outer * (double)inner;
    double d = s1 / count;
    double v = s2 / count - d * d;
    S m = (S)((double)load(x[(unsigned int)c * (unsigned int)inner]) + d);
    S vt = (S)(v > 0.0 ? v : 0.0);
    mean[c] = m;
    var[c] = vt;
    std[c] = (S)sqrt((double)(vt + (S)eps));
    mean_sum[c] = (S)((double)mean_sum[c] * fraction + (double)m);
    var_sum[c] = (S)((double)var_sum[c] * fraction + correction * (double)vt);
    if (c == 0) weight[0] = (S)((double)weight[0] * fraction + 1.0);
}

// xhat = (x - mean[c]) / std[c]; y = xhat (* gamma[c]) (+ beta[c]), then max(., 0) with relu
// (x and y may be one array)
extern "C" __global__ void chain_apply(const T* x, const S* mean, const S* std, const T* gamma,
                                       const T* beta, int relu, int channels, int inner,
                                       long long n, T* xhat, T* y) {
    unsigned int count = (unsigned int)n, in = (unsigned int)inner, ch = (unsigned int)channels;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        unsigned int c = (j / in) % ch;
        M v = (load(x[j]) - (M)mean[c]) / (M)std[c];
        xhat[j] = store(v);
        if (gamma) v = v * load(gamma[c]);
        if (beta) v = v + load(beta[c]);
        if (relu && v <= (M)0) v = (M)0;
        y[j] = store(v);
    }
}

// One thread per channel, from chain_sums' mode 1: the Scale's diffs accumulated (dbeta +=
// sum dz, dgamma += sum dz xhat) and the means of BatchNorm's input gradient dxh = dz gamma
// and of dxh xhat.
extern "C" __global__ void chain_grad_sums(const double* p1, const double* p2, int splits,
                                           double inv_count, const T* gamma, int channels,
                                           T* dgamma, T* dbeta, S* mean_dxh, S* mean_dxh_xhat) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double s1, s2;
    channel_totals(p1, p2, splits, c, &s1, &s2);
    if (dbeta) dbeta[c] = store((M)((double)load(dbeta[c]) + s1));
    if (dgamma) dgamma[c] = store((M)((double)load(dgamma[c]) + s2));
    double g = gamma ? (double)load(gamma[c]) : 1.0;
    mean_dxh[c] = (S)(g * s1 * inv_count);
    mean_dxh_xhat[c] = (S)(g * s2 * inv_count);
}

// dxh = dy (* (y > 0)) (* gamma[c]); dtop = dxh when keep; dx = (dxh - mean_dxh[c]
// - xhat mean_dxh_xhat[c]) / std[c] (global statistics: dxh / std[c]). dx, dtop and dy may be
// one array.
extern "C" __global__ void chain_backward(const T* dy, const T* y, const T* xhat, const T* gamma,
                                          const S* std, const S* mean_dxh,
                                          const S* mean_dxh_xhat, int relu, int global_stats,
                                          int keep, int channels, int inner, long long n,
                                          T* dx, T* dtop) {
    unsigned int count = (unsigned int)n, in = (unsigned int)inner, ch = (unsigned int)channels;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        unsigned int c = (j / in) % ch;
        M g = load(dy[j]);
        if (relu) g = g * (M)(load(y[j]) > (M)0);
        if (gamma) g = g * load(gamma[c]);
        if (keep) dtop[j] = store(g);
        if (!global_stats) g = g - (M)mean_dxh[c] - (M)mean_dxh_xhat[c] * load(xhat[j]);
        dx[j] = store(g / (M)std[c]);
    }
}

// y = c0 a0 + c1 a1 (+ c2 a2 + c3 a3) in Caffe's order (a coefficient of 1 multiplies
// exactly), then max(y, 0) with relu
extern "C" __global__ void sum_forward(const T* a0, const T* a1, const T* a2, const T* a3,
                                       double c0, double c1, double c2, double c3, int k,
                                       int relu, long long n, T* y) {
    unsigned int count = (unsigned int)n;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        M v = (M)c0 * load(a0[j]);
        v += (M)c1 * load(a1[j]);
        if (k > 2) v += (M)c2 * load(a2[j]);
        if (k > 3) v += (M)c3 * load(a3[j]);
        if (relu && v <= (M)0) v = (M)0;
        y[j] = store(v);
    }
}

// dz = dy (* (y > 0), written back into dy with relu); d_i = c_i dz for each d_i given
extern "C" __global__ void sum_backward(T* dy, const T* y, double c0, double c1, double c2,
                                        double c3, int relu, long long n, T* d0, T* d1, T* d2,
                                        T* d3) {
    unsigned int count = (unsigned int)n;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        M g = load(dy[j]);
        if (relu) {
            g = g * (M)(load(y[j]) > (M)0);
            dy[j] = store(g);
        }
        if (d0) d0[j] = store((M)c0 * g);
        if (d1) d1[j] = store((M)c1 * g);
        if (d2) d2[j] = store((M)c2 * g);
        if (d3) d3[j] = store((M)c3 * g);
    }
}
"""

_ACCESS = r"""
__device__ inline M load(T v) { return v; }
__device__ inline T store(M v) { return v; }
"""
_HALF_ACCESS = r"""
#include <cuda_fp16.h>
typedef __half T;
typedef float S;
typedef float M;
__device__ inline float load(__half v) { return __half2float(v); }
__device__ inline __half store(float v) { return __float2half_rn(v); }
"""


def _prelude(ctype):
    """The types the source is compiled with (see the module doc): ``float`` and ``double``
    keep everything in that type; ``half`` stores ``__half``, with float statistics and math."""
    if ctype == "half":
        return _HALF_ACCESS
    return "typedef %s T;\ntypedef %s S;\ntypedef %s M;\n%s" % (ctype, ctype, ctype, _ACCESS)


_MODULE = RawModuleCache(_SOURCE, ["chain_sums", "chain_stats", "chain_apply",
                                   "chain_grad_sums", "chain_backward", "sum_forward",
                                   "sum_backward"], prelude=_prelude,
                         ctypes=("float", "double", "half"))

_NULL = np.uint64(0)


def compiles(ctype):
    """Whether the kernels' ``ctype`` variant compiled on this GPU (see
    :meth:`RawModuleCache.compiles`)."""
    return _MODULE.compiles(ctype)


def _ptr(a):
    return _NULL if a is None else a


def _splits(outer, channels_, inner):
    return channels.splits_for(outer, channels_, inner)


def _sums(a, y, xhat, mode, relu, p1, p2):
    outer, c, inner = a.shape
    splits = _splits(outer, c, inner)
    fn = _MODULE.function("chain_sums", storage_ctype(a))
    fn((c, splits), (BLOCK,), (a, a if y is None else y, a if xhat is None else xhat,
                               i32(mode), i32(1 if relu else 0), i32(outer), i32(c),
                               i32(inner), i32(splits), p1, p2))
    return splits


def batch_statistics(x, mean, var, std, mean_sum, var_sum, weight, eps, fraction, correction,
                     p1, p2):
    """``mean``, ``var`` (biased), ``std = sqrt(var + eps)`` of ``x`` ``(N, C, S)`` per channel,
    and Caffe's running sums updated: two launches."""
    outer, c, inner = x.shape
    splits = _sums(x, None, None, 0, False, p1, p2)
    launch(_MODULE.function("chain_stats", storage_ctype(x)), c,
           (p1, p2, i32(splits), x, i32(outer), i32(c), i32(inner), np.float64(eps),
            np.float64(fraction), np.float64(correction), mean, var, std, mean_sum, var_sum,
            weight))


def global_statistics(mean_sum, var_sum, weight, eps, mean, std):
    """``mean``, ``std`` from the stored running sums (one launch)."""
    channels.bn_global(mean_sum, var_sum, weight, eps, mean, std)


def chain_apply(x, mean, std, gamma, beta, relu, xhat, y):
    """``xhat = (x - mean) / std``, ``y = relu(xhat * gamma + beta)`` over ``(N, C, S)``."""
    outer, c, inner = x.shape
    launch(_MODULE.function("chain_apply", storage_ctype(x)), x.size,
           (x, mean, std, _ptr(gamma), _ptr(beta), i32(1 if relu else 0), i32(c), i32(inner),
            np.int64(x.size), xhat, y))


def chain_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, dtop, global_stats, relu,
                   mean_dxh, mean_dxh_xhat, p1, p2):
    """The chain's backward over ``(N, C, S)`` (see the module doc): the sums pass when the
    batch statistics or the Scale's diffs need it, then one elementwise pass."""
    outer, c, inner = dy.shape
    t = storage_ctype(dy)
    if not global_stats or dgamma is not None or dbeta is not None:
        splits = _sums(dy, y if relu else None, xhat, 1, relu, p1, p2)
        count = outer * inner
        launch(_MODULE.function("chain_grad_sums", t), c,
               (p1, p2, i32(splits), np.float64(1.0 / count if count else 0.0), _ptr(gamma),
                i32(c), _ptr(dgamma), _ptr(dbeta), mean_dxh, mean_dxh_xhat))
    launch(_MODULE.function("chain_backward", t), dy.size,
           (dy, y, xhat, _ptr(gamma), std, mean_dxh, mean_dxh_xhat, i32(1 if relu else 0),
            i32(1 if global_stats else 0), i32(1 if dtop is not None else 0), i32(c),
            i32(inner), np.int64(dy.size), dx, dtop if dtop is not None else dx))


def _four(values, fill):
    values = list(values)
    return values + [fill] * (MAX_SUM_BOTTOMS - len(values))


def sum_forward(xs, coeffs, y, relu):
    """``y = sum coeffs[i] * xs[i]`` (2 to 4 arrays of ``y``'s size), then the ReLU."""
    args = _four(xs, xs[0]) + [np.float64(c) for c in _four(coeffs, 0.0)]
    launch(_MODULE.function("sum_forward", storage_ctype(y)), y.size,
           tuple(args) + (i32(len(xs)), i32(1 if relu else 0), np.int64(y.size), y))


def sum_backward(dy, y, coeffs, dxs, relu):
    """``dz = dy * (y > 0)`` (into ``dy``) with ``relu``, else ``dy``; ``dxs[i] = coeffs[i] *
    dz`` for each ``dxs[i]`` not None (up to 4)."""
    args = [dy, y] + [np.float64(c) for c in _four(coeffs, 0.0)] + \
        [i32(1 if relu else 0), np.int64(dy.size)] + [_ptr(d) for d in _four(dxs, None)]
    launch(_MODULE.function("sum_backward", storage_ctype(dy)), dy.size, tuple(args))

