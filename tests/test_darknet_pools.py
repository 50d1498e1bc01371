"""AlexeyAB's ``[local_avgpool]`` and ``[maxpool] maxpool_depth`` against AlexeyAB's Darknet.

OpenCV's Darknet importer does not read ``[local_avgpool]`` ("Unknown layer type") and
ignores ``maxpool_depth`` (it pools the plane instead), so the references under
tests/fixtures/darknet_pools are Darknet's own CPU outputs (``tools/darknet_pool_reference.py``
with libdarknet built from AlexeyAB/darknet's source), and the small cases below are computed
by hand from ``forward_local_avgpool_layer`` and ``forward_maxpool_layer`` (src/maxpool_layer.c):
local_avgpool's window ``(i, j)`` starts at ``(i stride_y - padding / 2, j stride_x - padding /
2)`` and its sum over the cells inside the input is divided by their count; with
maxpool_depth output channel ``g`` is the maximum over input channels ``g, g + out_channels,
...``; without maxpool_depth ``out_channels`` is read and not used.
"""

import glob
import os

import numpy as np
import pytest

import pycaffe_lite
from pycaffe_lite.darknet import DarknetError, convert

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures",
                        "darknet_pools")
CASES = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(FIXTURES, "*.npz")))


def run(cfg_text, x):
    result = convert(cfg_text)
    net = pycaffe_lite.Net(result.net_param, pycaffe_lite.TEST)
    net.blobs["data"].data[...] = x
    net.forward()
    return net.blobs[result.blob_of_layer[0]].data.copy(), result


def net(w, h, c):
    return "[net]\nwidth=%d\nheight=%d\nchannels=%d\n\n" % (w, h, c)


def test_the_darknet_cases_are_there():
    # (a moved fixture folder would leave the next test nothing to run)
    assert len(CASES) == 14 and sum(c.startswith("avg_") for c in CASES) == 8, CASES


@pytest.mark.parametrize("case", CASES)
def test_darknets_outputs(case):
    with open(os.path.join(FIXTURES, case + ".cfg")) as f:
        cfg_text = f.read()
    with np.load(os.path.join(FIXTURES, case + ".npz")) as ref:
        x, y = ref["x"], ref["y"]
    got, _ = run(cfg_text, x)
    assert got.shape == y.shape
    if case.startswith(("depth_", "max_")):
        np.testing.assert_array_equal(got, y)  # a maximum: Darknet's values themselves
    else:
        # Caffe's average times (its divisor / Darknet's count): one rounding more
        np.testing.assert_allclose(got, y, rtol=3e-7, atol=0)


def test_local_avgpool_by_hand():
    # size 2, stride 1, padding 1 (size - 1): windows start at (i, j) (offset -1 / 2 = 0 in
    # C) and hang past the last row and column, where Darknet divides by the cells inside
    # (Caffe's AVE would divide by 4: 9 / 4 in the corner)
    x = np.arange(1, 10, dtype=np.float32).reshape(1, 1, 3, 3)
    got, result = run(net(3, 3, 1) + "[local_avgpool]\nsize=2\nstride=1\n", x)
    want = [[(1 + 2 + 4 + 5) / 4, (2 + 3 + 5 + 6) / 4, (3 + 6) / 2],
            [(4 + 5 + 7 + 8) / 4, (5 + 6 + 8 + 9) / 4, (6 + 9) / 2],
            [(7 + 8) / 2, (8 + 9) / 2, 9 / 1]]
    np.testing.assert_array_equal(got[0, 0], np.array(want, np.float32))
    assert result.blob_of_layer[0] == "local_avgpool0"


def test_local_avgpool_stride_two_by_hand():
    # size 3 stride 2 on 5 x 5 (padding 2: offset -1): rows (and columns) -1..1, 1..3 and
    # 3..5, of which 2, 3 and 2 lie inside; each output the mean of the cells it covers
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    got, _ = run(net(5, 5, 1) + "[local_avgpool]\nsize=3\nstride=2\n", x)
    spans = [(0, 2), (1, 4), (3, 5)]  # rows -1..1, 1..3, 3..5 clipped to 0..4
    want = [[x[0, 0, r0:r1, c0:c1].mean() for c0, c1 in spans] for r0, r1 in spans]
    np.testing.assert_allclose(got[0, 0], np.array(want, np.float32), rtol=3e-7)


def test_maxpool_depth_by_hand():
    # 5 channels, out_channels 2: output 0 is the max of channels 0, 2, 4; output 1 of 1, 3
    planes = [[[1, -5]], [[7, 0]], [[3, 9]], [[-2, 4]], [[8, -1]]]
    x = np.array([planes], np.float32)  # (1, 5, 1, 2)
    got, result = run(net(2, 1, 5) + "[maxpool]\nmaxpool_depth=1\nout_channels=2\n", x)
    np.testing.assert_array_equal(got, [[[[8, 9]], [[7, 4]]]])
    assert result.blob_of_layer[0] == "maxpool0"


@pytest.mark.parametrize("keys,where,words", [
    ("maxpool_depth=1\nout_channels=5\n", ":8:", "out_channels=5 with maxpool_depth is more "
     "than the input's 4 channels"),
    ("maxpool_depth=1\nout_channels=0\n", ":8:", "out_channels=0 with maxpool_depth: "
     "Darknet's output would have no channels"),
])
def test_maxpool_depth_out_channels_out_of_range_names_the_line(keys, where, words):
    with pytest.raises(DarknetError) as info:
        convert(net(4, 4, 4) + "[maxpool]\n" + keys)
    assert where in str(info.value) and words in str(info.value), str(info.value)


def test_local_avgpool_windows_caffe_cannot_place_are_refused_naming_the_line():
    # padding 3 with size 2: the first window starts at -1 and the last lies past the input
    # (Darknet divides 0 by 0 there); Caffe would need a pad of the window's size
    with pytest.raises(DarknetError, match=r":9: layer 0 \[local_avgpool\]: size=2 stride=1 "
                                           r"padding=3 over an input height of 3: .*a pad "
                                           r"smaller than the window"):
        convert(net(3, 3, 1) + "[local_avgpool]\nsize=2\nstride=1\npadding=3\n")
