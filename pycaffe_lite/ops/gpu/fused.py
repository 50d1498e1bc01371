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

Indices are 32-bit unsigned (fast division): the callers take arrays of fewer than 2**30
elements (``_util.fits``), so an index never passes 2**31 even with the grid's stride. Block
sums are a tree in shared memory (any power-of-two block, one thread included) and the
blocks' partial sums are added by one thread per channel in a fixed order: the results never
depend on timing. Nothing here reads device memory on the host: the chains can be captured in a
CUDA graph. Every function takes contiguous CuPy arrays (``None`` where a pointer is optional).
"""

import numpy as np

from . import channels
from ._util import BLOCK, RawModuleCache, i32, kernel_dtype, launch

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
    double shift = (mode == 0) ? (double)a[(unsigned int)c * in] : 0.0;
    double s1 = 0.0, s2 = 0.0;
    for (unsigned int j = (unsigned int)split * blockDim.x + threadIdx.x; j < count;
         j += (unsigned int)splits * blockDim.x) {
        unsigned int o = j / in, i = j - o * in;
        unsigned int at = (o * (unsigned int)channels + (unsigned int)c) * in + i;
        if (mode == 0) {
            double v = (double)a[at] - shift;
            s1 += v;
            s2 += v * v;
        } else {
            T g = a[at];
            if (relu) g = g * (T)(y[at] > (T)0);
            s1 += (double)g;
            s2 += (double)g * (double)xhat[at];
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
                                       T* mean, T* var, T* std, T* mean_sum, T* var_sum,
                                       T* weight) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double s1, s2;
    channel_totals(p1, p2, splits, c, &s1, &s2);
    double count = (double)outer * (double)inner;
    double d = s1 / count;
    double v = s2 / count - d * d;
    T m = (T)((double)x[(unsigned int)c * (unsigned int)inner] + d);
    T vt = (T)(v > 0.0 ? v : 0.0);
    mean[c] = m;
    var[c] = vt;
    std[c] = (T)sqrt((double)(vt + (T)eps));
    mean_sum[c] = (T)((double)mean_sum[c] * fraction + (double)m);
    var_sum[c] = (T)((double)var_sum[c] * fraction + correction * (double)vt);
    if (c == 0) weight[0] = (T)((double)weight[0] * fraction + 1.0);
}

// xhat = (x - mean[c]) / std[c]; y = xhat (* gamma[c]) (+ beta[c]), then max(., 0) with relu
// (x and y may be one array)
extern "C" __global__ void chain_apply(const T* x, const T* mean, const T* std, const T* gamma,
                                       const T* beta, int relu, int channels, int inner,
                                       long long n, T* xhat, T* y) {
    unsigned int count = (unsigned int)n, in = (unsigned int)inner, ch = (unsigned int)channels;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        unsigned int c = (j / in) % ch;
        T v = (x[j] - mean[c]) / std[c];
        xhat[j] = v;
        if (gamma) v = v * gamma[c];
        if (beta) v = v + beta[c];
        if (relu && v <= (T)0) v = (T)0;
        y[j] = v;
    }
}

// One thread per channel, from chain_sums' mode 1: the Scale's diffs accumulated (dbeta +=
// sum dz, dgamma += sum dz xhat) and the means of BatchNorm's input gradient dxh = dz gamma
// and of dxh xhat.
extern "C" __global__ void chain_grad_sums(const double* p1, const double* p2, int splits,
                                           double inv_count, const T* gamma, int channels,
                                           T* dgamma, T* dbeta, T* mean_dxh, T* mean_dxh_xhat) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double s1, s2;
    channel_totals(p1, p2, splits, c, &s1, &s2);
    if (dbeta) dbeta[c] = (T)((double)dbeta[c] + s1);
    if (dgamma) dgamma[c] = (T)((double)dgamma[c] + s2);
    double g = gamma ? (double)gamma[c] : 1.0;
    mean_dxh[c] = (T)(g * s1 * inv_count);
    mean_dxh_xhat[c] = (T)(g * s2 * inv_count);
}

// dxh = dy (* (y > 0)) (* gamma[c]); dtop = dxh when keep; dx = (dxh - mean_dxh[c]
// - xhat mean_dxh_xhat[c]) / std[c] (global statistics: dxh / std[c]). dx, dtop and dy may be
// one array.
extern "C" __global__ void chain_backward(const T* dy, const T* y, const T* xhat, const T* gamma,
                                          const T* std, const T* mean_dxh,
                                          const T* mean_dxh_xhat, int relu, int global_stats,
                                          int keep, int channels, int inner, long long n,
                                          T* dx, T* dtop) {
    unsigned int count = (unsigned int)n, in = (unsigned int)inner, ch = (unsigned int)channels;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        unsigned int c = (j / in) % ch;
        T g = dy[j];
        if (relu) g = g * (T)(y[j] > (T)0);
        if (gamma) g = g * gamma[c];
        if (keep) dtop[j] = g;
        if (!global_stats) g = g - mean_dxh[c] - mean_dxh_xhat[c] * xhat[j];
        dx[j] = g / std[c];
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
        T v = (T)c0 * a0[j];
        v += (T)c1 * a1[j];
        if (k > 2) v += (T)c2 * a2[j];
        if (k > 3) v += (T)c3 * a3[j];
        if (relu && v <= (T)0) v = (T)0;
        y[j] = v;
    }
}

// dz = dy (* (y > 0), written back into dy with relu); d_i = c_i dz for each d_i given
extern "C" __global__ void sum_backward(T* dy, const T* y, double c0, double c1, double c2,
                                        double c3, int relu, long long n, T* d0, T* d1, T* d2,
                                        T* d3) {
    unsigned int count = (unsigned int)n;
    for (unsigned int j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        T g = dy[j];
        if (relu) {
            g = g * (T)(y[j] > (T)0);
            dy[j] = g;
        }
        if (d0) d0[j] = (T)c0 * g;
        if (d1) d1[j] = (T)c1 * g;
        if (d2) d2[j] = (T)c2 * g;
        if (d3) d3[j] = (T)c3 * g;
    }
}
"""

_MODULE = RawModuleCache(_SOURCE, ["chain_sums", "chain_stats", "chain_apply",
                                   "chain_grad_sums", "chain_backward", "sum_forward",
                                   "sum_backward"])

_NULL = np.uint64(0)


def _ptr(a):
    return _NULL if a is None else a


def _splits(outer, channels_, inner):
    return channels.splits_for(outer, channels_, inner)


def _sums(a, y, xhat, mode, relu, p1, p2):
    outer, c, inner = a.shape
    splits = _splits(outer, c, inner)
    fn = _MODULE.function("chain_sums", kernel_dtype(a))
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
    launch(_MODULE.function("chain_stats", kernel_dtype(x)), c,
           (p1, p2, i32(splits), x, i32(outer), i32(c), i32(inner), np.float64(eps),
            np.float64(fraction), np.float64(correction), mean, var, std, mean_sum, var_sum,
            weight))


def global_statistics(mean_sum, var_sum, weight, eps, mean, std):
    """``mean``, ``std`` from the stored running sums (one launch)."""
    channels.bn_global(mean_sum, var_sum, weight, eps, mean, std)


def chain_apply(x, mean, std, gamma, beta, relu, xhat, y):
    """``xhat = (x - mean) / std``, ``y = relu(xhat * gamma + beta)`` over ``(N, C, S)``."""
    outer, c, inner = x.shape
    launch(_MODULE.function("chain_apply", kernel_dtype(x)), x.size,
           (x, mean, std, _ptr(gamma), _ptr(beta), i32(1 if relu else 0), i32(c), i32(inner),
            np.int64(x.size), xhat, y))


def chain_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, dtop, global_stats, relu,
                   mean_dxh, mean_dxh_xhat, p1, p2):
    """The chain's backward over ``(N, C, S)`` (see the module doc): the sums pass when the
    batch statistics or the Scale's diffs need it, then one elementwise pass."""
    outer, c, inner = dy.shape
    t = kernel_dtype(dy)
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
    launch(_MODULE.function("sum_forward", kernel_dtype(y)), y.size,
           tuple(args) + (i32(len(xs)), i32(1 if relu else 0), np.int64(y.size), y))


def sum_backward(dy, y, coeffs, dxs, relu):
    """``dz = dy * (y > 0)`` (into ``dy``) with ``relu``, else ``dy``; ``dxs[i] = coeffs[i] *
    dz`` for each ``dxs[i]`` not None (up to 4)."""
    args = [dy, y] + [np.float64(c) for c in _four(coeffs, 0.0)] + \
        [i32(1 if relu else 0), np.int64(dy.size)] + [_ptr(d) for d in _four(dxs, None)]
    launch(_MODULE.function("sum_backward", kernel_dtype(dy)), dy.size, tuple(args))

