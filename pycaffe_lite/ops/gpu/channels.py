"""Per-channel kernels for BatchNorm and Scale on the GPU: the statistics and gradient sums of an
``(outer, C, inner)`` array in one pass each, and each elementwise step in one pass.

The NumPy code of :class:`~pycaffe_lite.layers.common.batch_norm_layer.BatchNormLayer` and
:class:`~pycaffe_lite.layers.common.scale_layer.ScaleLayer` makes several passes (and
temporaries) per step; these kernels compute the same values, with the sums accumulated in
double precision per block and the blocks' partial sums added in a fixed order (the results do
not depend on timing). Every function takes contiguous CuPy arrays and writes into the arrays
it is given; nothing synchronises with the host.
"""

import numpy as np

from ._util import BLOCK, RawModuleCache, cupy, i32, kernel_dtype, launch

# Blocks per channel for the sums: enough blocks to fill the device, each at least this many
# elements.
MIN_PER_BLOCK = 4096
TARGET_BLOCKS = 512
MAX_SPLITS = 64

_SOURCE = r"""
__device__ double block_sum(double v, double* shared) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : 0.0;
    if (warp == 0)
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    __syncthreads();
    return v;
}

// mode 0: s1 = sum a;  mode 1: s1 = sum (a - mean[c])^2;  mode 2: s1 = sum a, s2 = sum a * b
extern "C" __global__ void channel_sums(const T* a, const T* b, const T* mean, int mode,
                                        int outer, int channels, int inner, int splits,
                                        double* p1, double* p2) {
    __shared__ double shared[32];
    int c = blockIdx.x, split = blockIdx.y;
    long long count = (long long)outer * inner;
    double s1 = 0.0, s2 = 0.0;
    double m = (mode == 1) ? (double)mean[c] : 0.0;
    for (long long j = (long long)split * blockDim.x + threadIdx.x; j < count;
         j += (long long)splits * blockDim.x) {
        long long o = j / inner, i = j - o * inner;
        long long at = (o * channels + c) * inner + i;
        double v = (double)a[at];
        if (mode == 1) { v -= m; s1 += v * v; }
        else { s1 += v; if (mode == 2) s2 += v * (double)b[at]; }
    }
    s1 = block_sum(s1, shared);
    if (mode == 2) s2 = block_sum(s2, shared);
    if (threadIdx.x == 0) {
        p1[c * splits + split] = s1;
        if (mode == 2) p2[c * splits + split] = s2;
    }
}

// out[c] = (accumulate ? out[c] : 0) + scale * sum of the partial sums of channel c
extern "C" __global__ void finish_sums(const double* p, int splits, double scale, int channels,
                                       int accumulate, T* out) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double s = 0.0;
    for (int k = 0; k < splits; ++k) s += p[c * splits + k];
    out[c] = (T)((accumulate ? (double)out[c] : 0.0) + scale * s);
}

// Caffe's running sums (s = s f + 1, mean_sum = mean_sum f + mean, var_sum = var_sum f +
// correction var) and std = sqrt(var + eps), one thread per channel
extern "C" __global__ void bn_running(const T* mean, const T* var, T* mean_sum, T* var_sum,
                                      T* weight, double f, double correction, double eps,
                                      int channels, T* std) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    mean_sum[c] = (T)((double)mean_sum[c] * f + (double)mean[c]);
    var_sum[c] = (T)((double)var_sum[c] * f + correction * (double)var[c]);
    std[c] = (T)sqrt((double)var[c] + eps);
    if (c == 0) weight[0] = (T)((double)weight[0] * f + 1.0);
}

// the global statistics: mean = mean_sum / s, std = sqrt(var_sum / s + eps) (0 when s is 0)
extern "C" __global__ void bn_global(const T* mean_sum, const T* var_sum, const T* weight,
                                     double eps, int channels, T* mean, T* std) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    T s = weight[0];
    T factor = (s == (T)0) ? (T)0 : (T)1 / s;
    T m = mean_sum[c] * factor, v = var_sum[c] * factor;
    mean[c] = m;
    std[c] = (T)sqrt((double)(v + (T)eps));
}

// x_norm = (x - mean[c]) / std[c]; y = x_norm
extern "C" __global__ void bn_apply(const T* x, const T* mean, const T* std, int channels,
                                    int inner, long long n, T* x_norm, T* y) {
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (long long)gridDim.x * blockDim.x) {
        int c = (int)((j / inner) % channels);
        T v = (x[j] - mean[c]) / std[c];
        x_norm[j] = v;
        y[j] = v;
    }
}

// dx = (dy - sum_dy[c] / m - x_norm * sum_dy_xn[c] / m) / std[c]  (global stats: dy / std)
extern "C" __global__ void bn_backward(const T* dy, const T* x_norm, const T* mean_dy,
                                       const T* mean_dy_xn, const T* std, int global_stats,
                                       int channels, int inner, long long n, T* dx) {
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (long long)gridDim.x * blockDim.x) {
        int c = (int)((j / inner) % channels);
        T g = dy[j];
        if (!global_stats) g = g - mean_dy[c] - mean_dy_xn[c] * x_norm[j];
        dx[j] = g / std[c];
    }
}

// y = x * s[c] (+ b[c])
extern "C" __global__ void scale_apply(const T* x, const T* s, const T* b, int channels,
                                       int inner, long long n, T* y) {
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (long long)gridDim.x * blockDim.x) {
        int c = (int)((j / inner) % channels);
        T v = x[j] * s[c];
        if (b) v += b[c];
        y[j] = v;
    }
}
"""

_MODULE = RawModuleCache(_SOURCE, ["channel_sums", "finish_sums", "bn_running", "bn_global",
                                   "bn_apply", "bn_backward", "scale_apply"])


def splits_for(outer, channels, inner):
    """Blocks per channel: the device filled, each block at least MIN_PER_BLOCK elements."""
    per_channel = int(outer) * int(inner)
    by_size = max(1, per_channel // MIN_PER_BLOCK)
    by_device = max(1, -(-TARGET_BLOCKS // max(int(channels), 1)))
    return int(max(1, min(MAX_SPLITS, by_size, by_device)))


def channel_sums(a, mode, out1, out2=None, b=None, mean=None, scale=1.0, accumulate=False):
    """Per-channel sums of ``a`` ``(outer, C, inner)``: mode 0 ``out1 = scale * sum a``; mode 1
    ``out1 = scale * sum (a - mean[c])^2``; mode 2 also ``out2 = scale * sum a * b``. With
    ``accumulate`` the sums are added to ``out1`` / ``out2``."""
    cp = cupy()
    outer, channels, inner = a.shape
    splits = splits_for(outer, channels, inner)
    p1 = cp.empty(channels * splits, dtype=np.float64)
    p2 = cp.empty(channels * splits, dtype=np.float64) if mode == 2 else p1
    t = kernel_dtype(a)
    fn = _MODULE.function("channel_sums", t)
    fn((channels, splits), (BLOCK,),
       (a, b if b is not None else a, mean if mean is not None else a, i32(mode), i32(outer),
        i32(channels), i32(inner), i32(splits), p1, p2))
    finish = _MODULE.function("finish_sums", t)
    flag = i32(1 if accumulate else 0)
    launch(finish, channels, (p1, i32(splits), np.float64(scale), i32(channels), flag, out1))
    if mode == 2 and out2 is not None:
        launch(finish, channels, (p2, i32(splits), np.float64(scale), i32(channels), flag,
                                  out2))


def bn_statistics(x, mean, var):
    """``mean``, ``var`` (biased) per channel of ``x`` ``(N, C, S)``: two passes over x."""
    n = x.shape[0] * x.shape[2]
    inv = 1.0 / n if n else 0.0
    channel_sums(x, 0, mean, scale=inv)
    channel_sums(x, 1, var, mean=mean, scale=inv)


def bn_running(mean, var, mean_sum, var_sum, weight, fraction, correction, eps, std):
    launch(_MODULE.function("bn_running", kernel_dtype(mean)), mean.size,
           (mean, var, mean_sum, var_sum, weight, np.float64(fraction),
            np.float64(correction), np.float64(eps), i32(mean.size), std))


def bn_global(mean_sum, var_sum, weight, eps, mean, std):
    launch(_MODULE.function("bn_global", kernel_dtype(mean)), mean.size,
           (mean_sum, var_sum, weight, np.float64(eps), i32(mean.size), mean, std))


def bn_apply(x, mean, std, x_norm, y):
    outer, channels, inner = x.shape
    launch(_MODULE.function("bn_apply", kernel_dtype(x)), x.size,
           (x, mean, std, i32(channels), i32(inner), np.int64(x.size), x_norm, y))


def bn_backward(dy, x_norm, std, global_stats, dx, mean_dy=None, mean_dy_xn=None):
    """The BatchNorm gradient (batch statistics: the two means computed here first)."""
    outer, channels, inner = dy.shape
    if not global_stats:
        cp = cupy()
        mean_dy = cp.empty(channels, dtype=dy.dtype)
        mean_dy_xn = cp.empty(channels, dtype=dy.dtype)
        count = outer * inner
        channel_sums(dy, 2, mean_dy, mean_dy_xn, b=x_norm, scale=1.0 / count if count else 0.0)
    else:
        mean_dy = mean_dy_xn = std
    launch(_MODULE.function("bn_backward", kernel_dtype(dy)), dy.size,
           (dy, x_norm, mean_dy, mean_dy_xn, std, i32(1 if global_stats else 0),
            i32(channels), i32(inner), np.int64(dy.size), dx))


def scale_apply(x, s, b, y):
    """``y = x * s[c] (+ b[c])`` over ``(outer, C, inner)``."""
    outer, channels, inner = x.shape
    launch(_MODULE.function("scale_apply", kernel_dtype(x)), x.size,
           (x, s, b if b is not None else np.uint64(0), i32(channels), i32(inner),
            np.int64(x.size), y))
