import math
import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def roi_text(pooled_h=2, pooled_w=2, scale=None):
    extra = " spatial_scale: %r" % scale if scale is not None else ""
    return ('type: "ROIPooling" roi_pooling_param { pooled_h: %d pooled_w: %d%s }'
            % (pooled_h, pooled_w, extra))


def c_round(v):
    return math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5)


def naive_roi_pool(x, rois, ph_n, pw_n, scale, dtype=np.float32):
    """The fork's forward, one output at a time (bin sizes in the blob's precision)."""
    n_rois = rois.shape[0]
    _, c_n, h_n, w_n = x.shape
    y = np.zeros((n_rois, c_n, ph_n, pw_n))
    arg = np.full(y.shape, -1)
    for r in range(n_rois):
        b = int(rois[r, 0])
        sw, sh, ew, eh = (c_round(float(dtype(rois[r, k]) * dtype(scale))) for k in (1, 2, 3, 4))
        bin_h = dtype(max(eh - sh + 1, 1)) / dtype(ph_n)
        bin_w = dtype(max(ew - sw + 1, 1)) / dtype(pw_n)
        for c in range(c_n):
            for ph in range(ph_n):
                for pw in range(pw_n):
                    hs = min(max(int(math.floor(dtype(ph) * bin_h)) + sh, 0), h_n)
                    he = min(max(int(math.ceil(dtype(ph + 1) * bin_h)) + sh, 0), h_n)
                    ws = min(max(int(math.floor(dtype(pw) * bin_w)) + sw, 0), w_n)
                    we = min(max(int(math.ceil(dtype(pw + 1) * bin_w)) + sw, 0), w_n)
                    if he <= hs or we <= ws:
                        continue
                    best, where = -np.inf, -1
                    for h in range(hs, he):
                        for w in range(ws, we):
                            if x[b, c, h, w] > best:
                                best, where = x[b, c, h, w], h * w_n + w
                    y[r, c, ph, pw], arg[r, c, ph, pw] = best, where
    return y, arg


def run(text, x, rois, dtype=np.float32):
    layer = make_layer(text, dtype)
    bottom, top = random_blobs([x, rois], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def test_schema_field_numbers_are_the_forks():
    assert caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name[
        "roi_pooling_param"].number == 8266711
    p = caffe_pb2.ROIPoolingParameter()
    assert (p.pooled_h, p.pooled_w, p.spatial_scale) == (0, 0, 1.0)


def test_hand_example():
    # a 6 x 6 map holding 0..35 per channel (+36 in channel 1); spatial_scale 0.5
    x = np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6)
    rois = np.array([[0, 0, 0, 7, 7],     # cells 0..round(3.5)=4: 5 x 5, bins of 2.5 cells
                     [0, 2, 2, 10, 6]], np.float32)  # columns 1..5, rows 1..3
    layer, bottom, top = run(roi_text(2, 2, 0.5), x, rois)
    # region 0: rows [0, 3) and [2, 5), same columns: maxima at (2, 2), (2, 4), (4, 2), (4, 4)
    np.testing.assert_array_equal(top[0].data[0, 0], [[14, 16], [26, 28]])
    np.testing.assert_array_equal(top[0].data[0, 1], [[50, 52], [62, 64]])
    # region 1: 3 rows -> bins [1, 3), [2, 4); 5 columns -> bins [1, 4), [3, 6)
    np.testing.assert_array_equal(top[0].data[1, 0], [[15, 17], [21, 23]])
    # backward: each output's gradient lands on the element it took
    top[0].diff[...] = 1
    bottom[0].diff[...] = 9  # overwritten
    layer.Backward(top, [True, False], bottom)
    expect = np.zeros((6, 6))
    for v in (14, 16, 26, 28, 15, 17, 21, 23):
        expect.flat[v] += 1
    np.testing.assert_array_equal(bottom[0].diff[0, 0], expect)
    np.testing.assert_array_equal(bottom[0].diff[0, 1], expect)


def test_empty_bins_are_zero_and_take_no_gradient():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 100  # all negative
    rois = np.array([[0, 2, 2, 12, 12]], np.float32)  # columns and rows 2..12 on a 4 x 4 map
    layer, bottom, top = run(roi_text(), x, rois)
    # 11 cells -> bins [2, 8) and [7, 13) clipped to [2, 4) and [4, 4) (empty)
    np.testing.assert_array_equal(top[0].data[0, 0], [[15 - 100, 0], [0, 0]])
    np.testing.assert_array_equal(layer.argmax[0, 0], [[15, -1], [-1, -1]])
    top[0].diff[...] = 1
    layer.Backward(top, [True, True], bottom)
    assert bottom[0].diff.sum() == 1 and bottom[0].diff[0, 0, 3, 3] == 1
    assert (bottom[1].diff == 0).all()  # the regions get no gradient


def test_c_rounding_of_halves():
    # 2.5 rounds to 3 in C (NumPy would give 2): the region starts at column 3
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8)
    rois = np.array([[0, 5, 0, 13, 0]], np.float32)  # * 0.5 -> 2.5 .. 6.5 -> 3 .. 7
    _, _, top = run(roi_text(1, 5, 0.5), x, rois)
    np.testing.assert_array_equal(top[0].data.ravel(), [3, 4, 5, 6, 7])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_matches_the_forks_loops(dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, (2, 3, 9, 11)).astype(dtype)  # many ties: the first max wins
    rois = np.column_stack([rng.integers(0, 2, 40), rng.uniform(-8, 50, (40, 4))])
    rois[::7, 3:] = rois[::7, 1:3] - 3  # inverted corners: one-cell regions
    rois[1] = [1, 5, 5, 5, 5]  # a single cell
    _layer = make_layer(roi_text(3, 4, 0.25), dtype)
    bottom, top = random_blobs([x, rois], dtype=dtype), empty_blobs(1, dtype)
    _layer.SetUp(bottom, top)
    _layer.Forward(bottom, top)
    y, arg = naive_roi_pool(x, bottom[1].data, 3, 4, 0.25, dtype)
    np.testing.assert_array_equal(top[0].data, y)
    np.testing.assert_array_equal(_layer.argmax, arg)


def test_regions_in_several_chunks(monkeypatch):
    """Large batches of regions go in chunks (sorted by height): the same results."""
    from pycaffe_lite.layers.detection import roi_pooling_layer

    monkeypatch.setattr(roi_pooling_layer, "_CHUNK_ELEMENTS", 200)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.column_stack([rng.integers(0, 2, 30), rng.uniform(-8, 50, (30, 4))])
    layer, bottom, top = run(roi_text(3, 2, 0.25), x, rois.astype(np.float32))
    y, arg = naive_roi_pool(x, bottom[1].data, 3, 2, 0.25)
    np.testing.assert_array_equal(top[0].data, y)
    np.testing.assert_array_equal(layer.argmax, arg)


def test_gradient():
    rng = np.random.default_rng(0)
    # distinct values 0.1 apart: the maxima do not switch under the checker's steps
    x = rng.permutation(2 * 3 * 7 * 8).reshape(2, 3, 7, 8) * 0.1
    rois = np.array([[0, 1, 1, 9, 11], [1, 0, 0, 15, 13], [1, 6, 4, 3, 2],
                     [0, 12, 12, 30, 30], [1, -5, -5, 2, 3], [0, 3, 3, 9, 9]], float)
    check_layer(roi_text(3, 2, 0.5), random_blobs([x, rois]), check_bottom=[0],
                reshape_batch=False)


def test_regions_may_be_4_axes_and_reshape():
    x = np.arange(32, dtype=np.float32).reshape(2, 1, 4, 4)
    rois = np.array([[1, 0, 0, 3, 3]], np.float32).reshape(1, 5, 1, 1)
    layer, bottom, top = run(roi_text(1, 1), x, rois)
    assert top[0].data.ravel().tolist() == [31]
    more = Blob((3, 5), np.float32)
    more.data[...] = [[0, 0, 0, 1, 1], [1, 0, 0, 0, 0], [0, 3, 3, 3, 3]]
    layer.Forward([bottom[0], more], top)
    assert top[0].shape == (3, 1, 1, 1)
    assert top[0].data.ravel().tolist() == [5, 16, 15]


@pytest.mark.parametrize("text,shapes,message", [
    (roi_text(0, 2), [(1, 1, 4, 4), (1, 5)], "pooled_h and pooled_w must be > 0, got "
                                              "pooled_h 0, pooled_w 2"),
    (roi_text(), [(1, 1, 4, 4), (2, 4)], "must be R x 5 (batch index, x1, y1, x2, y2 per row), "
                                         "got shape (2, 4)"),
    (roi_text(), [(1, 1, 4, 4), (2, 5, 2)], "got shape (2, 5, 2)"),
    (roi_text(), [(1, 4, 4), (2, 5)], "must have 4 axes"),
])
def test_invalid_usage(text, shapes, message):
    layer = make_layer(text)
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
    assert "ROIPooling" in str(info.value)


def test_batch_index_out_of_range():
    x = np.zeros((2, 1, 4, 4))
    rois = np.array([[0, 0, 0, 1, 1], [2, 0, 0, 1, 1]], float)
    layer = make_layer(roi_text())
    bottom, top = random_blobs([x, rois]), empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match=re.escape(
            "region 1 has batch index 2.0, outside the 2 image(s) of bottom 0 (expected "
            "0 <= index < 2)")):
        layer.Forward(bottom, top)


def test_a_nan_never_wins():
    # Caffe's scan keeps the first strictly greater value: NaN compares false and is passed
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = x[0, 0, 3, 3] = np.nan
    layer, _, top = run(roi_text(1, 1), x, np.array([[0, 0, 0, 3, 3]], np.float32))
    assert top[0].data.ravel().tolist() == [14] and layer.argmax.ravel().tolist() == [14]
