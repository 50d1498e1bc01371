"""im2col / col2im against naive per-element loops (Caffe's per-image column layout)."""

import itertools

import numpy as np
import pytest

from pycaffe_lite.ops.im2col import col2im, conv_output_shape, im2col


def naive_im2col(img, kernel, pad, stride, dilation):
    """Caffe's column buffer of ONE image ``(C, *spatial)``: ``(C * K, P)``."""
    spatial = img.shape[1:]
    out_sp = [(n + 2 * p - (d * (k - 1) + 1)) // s + 1
              for n, k, p, s, d in zip(spatial, kernel, pad, stride, dilation)]
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    positions = list(itertools.product(*(range(o) for o in out_sp)))
    col = np.zeros((img.shape[0] * len(offsets), len(positions)), img.dtype)
    for c in range(img.shape[0]):
        for ki, koff in enumerate(offsets):
            for pi, opos in enumerate(positions):
                src = [o * s - p + k * d
                       for o, k, p, s, d in zip(opos, koff, pad, stride, dilation)]
                if all(0 <= v < n for v, n in zip(src, spatial)):
                    col[c * len(offsets) + ki, pi] = img[(c,) + tuple(src)]
    return col


def naive_col2im(col, image_shape, kernel, pad, stride, dilation):
    """Inverse scatter of :func:`naive_im2col` for ONE image, summing overlaps."""
    spatial = image_shape[1:]
    out_sp = [(n + 2 * p - (d * (k - 1) + 1)) // s + 1
              for n, k, p, s, d in zip(spatial, kernel, pad, stride, dilation)]
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    positions = list(itertools.product(*(range(o) for o in out_sp)))
    img = np.zeros(image_shape, col.dtype)
    for c in range(image_shape[0]):
        for ki, koff in enumerate(offsets):
            for pi, opos in enumerate(positions):
                src = [o * s - p + k * d
                       for o, k, p, s, d in zip(opos, koff, pad, stride, dilation)]
                if all(0 <= v < n for v, n in zip(src, spatial)):
                    img[(c,) + tuple(src)] += col[c * len(offsets) + ki, pi]
    return img


CASES = [
    # image (B, C, *spatial), kernel, pad, stride, dilation
    ((2, 3, 5, 6), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 2, 7, 6), (3, 2), (2, 0), (2, 3), (1, 1)),
    ((1, 2, 8, 7), (3, 3), (2, 1), (1, 2), (2, 3)),
    ((3, 1, 4, 4), (1, 1), (0, 0), (1, 1), (1, 1)),
    ((2, 2, 5, 5), (5, 5), (0, 0), (1, 1), (1, 1)),  # kernel covers the whole input
    ((2, 2, 4, 5, 6), (2, 3, 2), (1, 0, 1), (1, 2, 2), (2, 1, 1)),  # 3-D
    ((2, 3, 9), (3,), (1,), (2,), (2,)),  # 1-D
]


@pytest.mark.parametrize("shape,kernel,pad,stride,dilation", CASES)
@pytest.mark.parametrize("force_nd", [False, True])
def test_im2col_matches_naive_loop(shape, kernel, pad, stride, dilation, force_nd):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    col = im2col(x, kernel, pad, stride, dilation, force_nd=force_nd)
    assert col.dtype == np.float32
    npix = int(np.prod(conv_output_shape(shape[2:], kernel, pad, stride, dilation)))
    for b in range(shape[0]):
        expected = naive_im2col(x[b], kernel, pad, stride, dilation)
        np.testing.assert_array_equal(col[:, b * npix:(b + 1) * npix], expected)


@pytest.mark.parametrize("shape,kernel,pad,stride,dilation", CASES)
@pytest.mark.parametrize("force_nd", [False, True])
def test_col2im_matches_naive_loop(shape, kernel, pad, stride, dilation, force_nd):
    rng = np.random.default_rng(2)
    out_sp = conv_output_shape(shape[2:], kernel, pad, stride, dilation)
    npix = int(np.prod(out_sp))
    col = rng.standard_normal((shape[1] * int(np.prod(kernel)), shape[0] * npix))
    out = np.full(shape, np.nan)  # must be overwritten everywhere
    got = col2im(col, shape, kernel, pad, stride, dilation, out=out, force_nd=force_nd)
    assert got is out
    for b in range(shape[0]):
        expected = naive_col2im(col[:, b * npix:(b + 1) * npix], shape[1:], kernel, pad,
                                stride, dilation)
        np.testing.assert_allclose(out[b], expected, rtol=1e-12, atol=1e-12)


def test_col2im_is_the_adjoint_of_im2col():
    rng = np.random.default_rng(3)
    shape, kernel, pad, stride, dilation = (2, 3, 6, 7), (3, 2), (1, 2), (2, 1), (2, 1)
    x = rng.standard_normal(shape)
    col = im2col(x, kernel, pad, stride, dilation)
    c = rng.standard_normal(col.shape)
    lhs = float((col * c).sum())
    rhs = float((x * col2im(c, shape, kernel, pad, stride, dilation)).sum())
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_output_shape_formula():
    # (in + 2p - (d(k-1)+1)) // s + 1, per axis
    assert conv_output_shape((7, 10), (3, 3), (1, 0), (2, 3), (1, 2)) == (4, 2)
    assert conv_output_shape((5,), (5,), (0,), (1,), (1,)) == (1,)


def test_im2col_writes_into_a_reused_buffer():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    buf = np.full(2 * 9 * 2 * 25, np.nan, np.float32)
    col = im2col(x, (3, 3), (1, 1), (1, 1), (1, 1), out=buf)
    assert np.shares_memory(col, buf) and not np.isnan(buf).any()
    np.testing.assert_array_equal(col, im2col(x, (3, 3), (1, 1), (1, 1), (1, 1)))
    with pytest.raises(ValueError, match="expected"):
        im2col(x, (3, 3), (1, 1), (1, 1), (1, 1), out=np.empty(10, np.float32))


@pytest.mark.parametrize("shape,kernel,pad,stride,dilation", [
    ((3, 2, 7, 6), (3, 2), (1, 0), (2, 1), (1, 2)),
    ((4, 3, 5, 5, 4), (2, 3, 2), (1, 1, 0), (1, 2, 1), (1, 1, 2)),
    ((2, 1, 9, 9), (5, 5), (0, 0), (1, 1), (1, 1)),
])
def test_batch_last_layout_is_a_column_permutation(shape, kernel, pad, stride, dilation):
    """The host layout (columns ordered (P, B)) holds exactly the (B, P) columns, permuted,
    and its col2im is the same fold."""
    from pycaffe_lite.ops.im2col import col2im_batch_last, im2col_batch_last

    x = np.random.default_rng(5).standard_normal(shape)
    ref = im2col(x, kernel, pad, stride, dilation, force_nd=True)
    got = im2col_batch_last(x, kernel, pad, stride, dilation)
    nb = shape[0]
    npix = ref.shape[1] // nb
    np.testing.assert_array_equal(got, ref.reshape(-1, nb, npix).transpose(0, 2, 1)
                                  .reshape(ref.shape))
    np.testing.assert_allclose(col2im_batch_last(got, shape, kernel, pad, stride, dilation),
                               col2im(ref, shape, kernel, pad, stride, dilation, force_nd=True),
                               rtol=1e-12, atol=1e-12)
