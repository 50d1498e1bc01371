"""im2col / col2im over a batch of images, for convolution as a matrix product.

Layout. For images ``x`` of shape ``(B, C, *spatial)`` and a kernel of ``K = prod(kernel)``
offsets, the column matrix has shape ``(C * K, B * P)`` with ``P = prod(out_spatial)``: row
``c * K + k`` (``k`` the row-major kernel offset) and column ``b * P + p``. With ``B == 1`` this
is exactly Caffe's per-image column buffer, so a weight matrix ``(M, C * K)`` multiplies it
directly; with ``B > 1`` one matrix product covers the whole batch.

Both directions loop over the ``K`` kernel offsets only; each step moves one strided slice of
the whole batch. Padding is handled by a zero-padded copy of the input (im2col) or a padded
accumulator (col2im). There is a 2-D path and a general N-D path (any number of spatial axes,
also used for 2-D when ``force_nd`` is set).
"""

import itertools

from ..backend import get_array_module
from . import cpu as _cpu
from .gpu import im2col as _gpu


def conv_output_shape(input_shape, kernel, pad, stride, dilation):
    """Caffe's output size per spatial axis: ``(in + 2p - (d*(k-1)+1)) // s + 1``.

    The caller must make sure the dilated kernel fits the padded input (the numerator is
    non-negative); this function does not check.
    """
    return tuple((i + 2 * p - (d * (k - 1) + 1)) // s + 1
                 for i, k, p, s, d in zip(input_shape, kernel, pad, stride, dilation))


def prod(values):
    """The product of ``values`` as a Python int (1 for none)."""
    n = 1
    for v in values:
        n *= int(v)
    return n


def _check_buffer(arr, shape, what):
    if tuple(arr.shape) != tuple(shape) and arr.size != prod(shape):
        raise ValueError("%s has shape %s, expected %s" % (what, tuple(arr.shape), tuple(shape)))
    if not arr.flags.c_contiguous:
        raise ValueError("%s must be C-contiguous" % what)


def _normalize_args(spatial, kernel, pad, stride, dilation, out_spatial):
    """``kernel``, ``pad``, ``stride``, ``dilation`` and ``out_spatial`` as tuples of ints
    (``out_spatial`` computed from the input ``spatial`` shape when None)."""
    kernel, pad, stride, dilation = (tuple(int(v) for v in a)
                                     for a in (kernel, pad, stride, dilation))
    if out_spatial is None:
        out_spatial = conv_output_shape(spatial, kernel, pad, stride, dilation)
    return kernel, pad, stride, dilation, tuple(out_spatial)


def _output(out, shape, dtype, xp):
    """``out`` checked (see :func:`_check_buffer`) and viewed as ``shape``, or a new array."""
    if out is None:
        return xp.empty(shape, dtype=dtype)
    _check_buffer(out, shape, "im2col output")
    return out.reshape(shape)


def _padded_input(x, pad):
    """``x`` itself when there is no padding, else a zero-padded copy."""
    if not any(pad):
        return x
    xp = get_array_module(x)
    nb, nc = x.shape[:2]
    shape = (nb, nc) + tuple(n + 2 * p for n, p in zip(x.shape[2:], pad))
    buf = xp.zeros(shape, dtype=x.dtype)
    inner = (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(pad, x.shape[2:]))
    buf[inner] = x
    return buf


def _window_slices(offset, stride, dilation, out_spatial):
    """Slices (one per spatial axis) of the padded input read by kernel offset ``offset``."""
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                 for o, s, d, n in zip(offset, stride, dilation, out_spatial))


def im2col(x, kernel, pad, stride, dilation, out=None, out_spatial=None, force_nd=False):
    """Unfold ``x`` ``(B, C, *spatial)`` into columns ``(C * K, B * P)`` (see module doc).

    ``out``: a C-contiguous array of ``C * K * B * P`` elements to write into (reused between
    calls by the convolution layers); ``out_spatial``: the output spatial shape when the caller
    already knows it. Returns the ``(C * K, B * P)`` array.
    """
    if _gpu.supported(x.shape, kernel, x, out):  # CuPy arrays: the CUDA kernel (ops/gpu)
        return _gpu.im2col(x, kernel, pad, stride, dilation, out, out_spatial, force_nd)
    xp = get_array_module(x)
    nb, nc = x.shape[:2]
    spatial = tuple(x.shape[2:])
    kernel, pad, stride, dilation, out_spatial = _normalize_args(
        spatial, kernel, pad, stride, dilation, out_spatial)
    nk, npix = prod(kernel), prod(out_spatial)
    shape = (nc * nk, nb * npix)
    out = _output(out, shape, x.dtype, xp)
    if len(spatial) == 2 and not force_nd and _cpu.supported(x, out):  # compiled (ops/cpu)
        return _cpu.im2col_batch_first(x, kernel, pad, stride, dilation, out_spatial, out)
    src = _padded_input(x, pad)
    # (C, *kernel, B, *out_spatial): column block of kernel offset k is cols[:, k...]
    cols = out.reshape((nc,) + kernel + (nb,) + out_spatial)
    if len(spatial) == 2 and not force_nd:
        kh, kw = kernel
        sh, sw = stride
        dh, dw = dilation
        oh, ow = out_spatial
        for i in range(kh):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            for j in range(kw):
                columns = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                cols[:, i, j] = src[:, :, rows, columns].swapaxes(0, 1)
    else:
        whole = (slice(None), slice(None))
        for offset in itertools.product(*(range(k) for k in kernel)):
            window = _window_slices(offset, stride, dilation, out_spatial)
            cols[(slice(None),) + offset] = src[whole + window].swapaxes(0, 1)
    return out


def col2im(col, image_shape, kernel, pad, stride, dilation, out=None, out_spatial=None,
           force_nd=False):
    """Fold columns ``(C * K, B * P)`` back into images ``image_shape = (B, C, *spatial)``,
    summing the contributions of overlapping windows (the adjoint of :func:`im2col`).

    ``out`` (same shape as the images, C-contiguous) is overwritten; returns it.
    """
    if _gpu.supported(image_shape, kernel, col, out):  # CuPy arrays: the CUDA kernel
        return _gpu.col2im(col, image_shape, kernel, pad, stride, dilation, out, out_spatial)
    xp = get_array_module(col)
    image_shape = tuple(int(v) for v in image_shape)
    nb, nc = image_shape[:2]
    spatial = image_shape[2:]
    kernel, pad, stride, dilation, out_spatial = _normalize_args(
        spatial, kernel, pad, stride, dilation, out_spatial)
    nk, npix = prod(kernel), prod(out_spatial)
    _check_buffer(col, (nc * nk, nb * npix), "col2im input")
    if out is None:
        out = xp.empty(image_shape, dtype=col.dtype)
    if len(spatial) == 2 and not force_nd and _cpu.supported(col, out):  # compiled (ops/cpu)
        return _cpu.col2im_batch_first(col, image_shape, kernel, pad, stride, dilation,
                                       out_spatial, out)
    cols = col.reshape((nc,) + kernel + (nb,) + out_spatial)
    padded = any(pad)
    if padded:
        acc = xp.zeros((nb, nc) + tuple(n + 2 * p for n, p in zip(spatial, pad)),
                       dtype=col.dtype)
    else:
        out[...] = 0
        acc = out
    if len(spatial) == 2 and not force_nd:
        kh, kw = kernel
        sh, sw = stride
        dh, dw = dilation
        oh, ow = out_spatial
        for i in range(kh):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            for j in range(kw):
                columns = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                acc[:, :, rows, columns] += cols[:, i, j].swapaxes(0, 1)
    else:
        whole = (slice(None), slice(None))
        for offset in itertools.product(*(range(k) for k in kernel)):
            window = _window_slices(offset, stride, dilation, out_spatial)
            acc[whole + window] += cols[(slice(None),) + offset].swapaxes(0, 1)
    if padded:
        inner = (slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in zip(pad, spatial))
        out[...] = acc[inner]
    return out


# ---- batch-last layout (host) ---------------------------------------------------------------
def im2col_batch_last(x, kernel, pad, stride, dilation, out=None, out_spatial=None):
    """:func:`im2col` with the columns ordered ``(P, B)`` instead of ``(B, P)``: the matrix is
    ``(C * K, P * B)``, column ``p * B + b``.

    The image index is the innermost axis of every copy, so each kernel offset moves runs of
    ``out_w * B`` contiguous values instead of ``out_w``: about twice as fast in NumPy for
    batches. The input is first laid out as ``(C, *padded_spatial, B)`` (one copy that also
    does the padding).
    """
    xp = get_array_module(x)
    nb, nc = x.shape[:2]
    spatial = tuple(x.shape[2:])
    kernel, pad, stride, dilation, out_spatial = _normalize_args(
        spatial, kernel, pad, stride, dilation, out_spatial)
    shape = (nc * prod(kernel), prod(out_spatial) * nb)
    out = _output(out, shape, x.dtype, xp)
    src = xp.zeros((nc,) + tuple(n + 2 * p for n, p in zip(spatial, pad)) + (nb,), x.dtype) \
        if any(pad) else xp.empty((nc,) + spatial + (nb,), x.dtype)
    inner = (slice(None),) + tuple(slice(p, p + n) for p, n in zip(pad, spatial))
    src[inner] = xp.moveaxis(x, 0, -1)
    cols = out.reshape((nc,) + kernel + out_spatial + (nb,))
    for offset in itertools.product(*(range(k) for k in kernel)):
        window = _window_slices(offset, stride, dilation, out_spatial)
        cols[(slice(None),) + offset] = src[(slice(None),) + window]
    return out


def col2im_batch_last(col, image_shape, kernel, pad, stride, dilation, out=None,
                      out_spatial=None):
    """The adjoint of :func:`im2col_batch_last`: fold ``(C * K, P * B)`` columns back into
    images ``image_shape = (B, C, *spatial)``, summing overlaps (``out`` is overwritten)."""
    xp = get_array_module(col)
    image_shape = tuple(int(v) for v in image_shape)
    nb, nc = image_shape[:2]
    spatial = image_shape[2:]
    kernel, pad, stride, dilation, out_spatial = _normalize_args(
        spatial, kernel, pad, stride, dilation, out_spatial)
    _check_buffer(col, (nc * prod(kernel), prod(out_spatial) * nb), "col2im input")
    if out is None:
        out = xp.empty(image_shape, dtype=col.dtype)
    cols = col.reshape((nc,) + kernel + out_spatial + (nb,))
    acc = xp.zeros((nc,) + tuple(n + 2 * p for n, p in zip(spatial, pad)) + (nb,), col.dtype)
    for offset in itertools.product(*(range(k) for k in kernel)):
        window = _window_slices(offset, stride, dilation, out_spatial)
        acc[(slice(None),) + window] += cols[(slice(None),) + offset]
    inner = (slice(None),) + tuple(slice(p, p + n) for p, n in zip(pad, spatial))
    out[...] = xp.moveaxis(acc[inner], -1, 0)
    return out
