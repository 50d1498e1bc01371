"""The numba-compiled loops behind :mod:`pycaffe_lite.ops.cpu` (imported on first use).

Every kernel takes its arrays already shaped, then ``start, stop``: the range of channels,
or of ``(image, channel)`` planes, it handles, so that several threads can run one kernel
on disjoint parts of the output (``nogil``). Sums are taken in the order the NumPy code of
:mod:`pycaffe_lite.ops` takes them, so the results are identical.
"""

import numba
import numpy as np

_jit = numba.njit(nogil=True, cache=True, boundscheck=False)

FLT_MAX = float(np.finfo(np.float32).max)


@_jit
def im2col_batch_last(x, cols, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, start, stop):
    """``cols (C, kh, kw, OH, OW, B)`` from ``x (B, C, H, W)``, channels ``[start, stop)``.

    Each channel is first copied, batch last and zero-padded, into a small buffer; every
    column element is then a read of ``B`` contiguous values."""
    nb, _, h, w = x.shape
    _, kh, kw, oh, ow, _ = cols.shape
    buf = np.zeros((h + 2 * pad_h, w + 2 * pad_w, nb), x.dtype)
    for c in range(start, stop):
        for b in range(nb):
            for r in range(h):
                for q in range(w):
                    buf[r + pad_h, q + pad_w, b] = x[b, c, r, q]
        for i in range(kh):
            for j in range(kw):
                for y in range(oh):
                    r = y * stride_h + i * dil_h
                    for xo in range(ow):
                        q = xo * stride_w + j * dil_w
                        for b in range(nb):
                            cols[c, i, j, y, xo, b] = buf[r, q, b]


@_jit
def col2im_batch_last(cols, out, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w, start, stop):
    """``out (B, C, H, W)`` = the sum of ``cols (C, kh, kw, OH, OW, B)`` over overlapping
    windows (kernel offsets in row-major order), channels ``[start, stop)``."""
    nb, _, h, w = out.shape
    _, kh, kw, oh, ow, _ = cols.shape
    acc = np.empty((h + 2 * pad_h, w + 2 * pad_w, nb), out.dtype)
    for c in range(start, stop):
        acc[...] = 0
        for i in range(kh):
            for j in range(kw):
                for y in range(oh):
                    r = y * stride_h + i * dil_h
                    for xo in range(ow):
                        q = xo * stride_w + j * dil_w
                        for b in range(nb):
                            acc[r, q, b] += cols[c, i, j, y, xo, b]
        for b in range(nb):
            for r in range(h):
                for q in range(w):
                    out[b, c, r, q] = acc[r + pad_h, q + pad_w, b]


@_jit
def batch_to_first(dst, src, bias, start, stop):
    """``dst[b, c, p] = src[c, p, b] (+ bias[c] when bias is not empty)``, c in range."""
    _, npix, nb = src.shape
    has_bias = bias.size > 0
    for c in range(start, stop):
        add = bias[c] if has_bias else src[c, 0, 0] * 0
        for b in range(nb):
            for p in range(npix):
                if has_bias:
                    dst[b, c, p] = src[c, p, b] + add
                else:
                    dst[b, c, p] = src[c, p, b]


# ---- MAX pooling: compiled once per kernel size -----------------------------------------------
# The window loops are short (2 or 3 steps); with the kernel size a compile-time constant
# they unroll, and the choice is updated without a branch (random data makes the branch of
# ``if v > best`` a coin toss the processor keeps losing).
_pool_kernels = {}


def max_pool_kernels(kh, kw):
    """``(forward, backward)`` compiled for a ``kh x kw`` window (built on first use)."""
    key = (int(kh), int(kw))
    found = _pool_kernels.get(key)
    if found is None:
        found = _pool_kernels[key] = _make_max_pool(*key)
    return found


def _make_max_pool(kh, kw):
    jit = numba.njit(nogil=True, boundscheck=False)

    @jit
    def forward(x, top, argmax, floor, pad_h, pad_w, stride_h, stride_w, start, stop):
        """Per plane ``s`` in range: each window's first maximum in row-major order (strict
        ``>`` from ``floor``, -FLT_MAX in the arrays' type, so NaN never wins) and its
        kernel offset (-1 when none)."""
        _, h, w = x.shape
        _, ph, pw = top.shape
        for s in range(start, stop):
            for py in range(ph):
                hs = py * stride_h - pad_h
                for px in range(pw):
                    ws = px * stride_w - pad_w
                    best = floor
                    pick = -1
                    for i in range(kh):
                        r = hs + i
                        if r >= 0 and r < h:
                            for j in range(kw):
                                q = ws + j
                                if q >= 0 and q < w:
                                    v = x[s, r, q]
                                    pick += (i * kw + j - pick) * int(v > best)
                                    best = max(best, v)  # keeps ``best`` on ties and NaN
                    top[s, py, px] = best
                    argmax[s, py, px] = pick

    @jit
    def backward(top_diff, argmax, bottom_diff, pad_h, pad_w, stride_h, stride_w, start,
                 stop):
        """Per plane ``s`` in range: ``bottom_diff`` zeroed, then for each kernel offset in
        row-major order every window adds its gradient times (choice == offset) at that
        offset, as the NumPy code sums."""
        _, h, w = bottom_diff.shape
        _, ph, pw = top_diff.shape
        for s in range(start, stop):
            bottom_diff[s] = 0
            for i in range(kh):
                for j in range(kw):
                    k = i * kw + j
                    for py in range(ph):
                        r = py * stride_h - pad_h + i
                        if r >= 0 and r < h:
                            for px in range(pw):
                                q = px * stride_w - pad_w + j
                                if q >= 0 and q < w:
                                    bottom_diff[s, r, q] += \
                                        top_diff[s, py, px] * (argmax[s, py, px] == k)

    return forward, backward
