"""BVLC Caffe's own layer tests (src/caffe/test/test_*.cpp), part A: their cases that the
other layer tests here do not already cover, with BVLC's inputs and expected values as data
and an independent reference (a hand formula in NumPy) where BVLC computes one in C++.

Where a case's geometry can take another CPU path (the channel-blocked kernels of a folded
TEST net), it runs there too.
"""

import numpy as np
import pytest

from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs


def forward(text, arrays, dtype=np.float64, num_top=1):
    layer = make_layer(text, dtype)
    bottom = random_blobs(arrays, dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def ulps(a, b):
    """The largest distance in float32 units in the last place (gtest's EXPECT_FLOAT_EQ
    allows 4)."""
    a = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    b = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    return int(np.abs(a - b).max())


# ---- neuron layers -------------------------------------------------------------------------
def sigmoid64(v):
    return 1.0 / (1.0 + np.exp(-v))


# BVLC test_neuron_layer.cpp TestSigmoid, TestSwish, TestSwishWithBeta, TestSwishAsLinear:
# EXPECT_FLOAT_EQ against the double formula in float32 too (Caffe's sigmoid() computes
# 0.5 * tanh(0.5 * x) + 0.5 in double). Beside the Gaussian input, inputs down to -13, where
# a float32 tanh leaves little of the sigmoid (2.2e-6 from 1 - 0.9999955); in double the
# formula holds to float32 precision down to about -20.
@pytest.mark.parametrize("text,reference", [
    ('type: "Sigmoid"', sigmoid64),
    ('type: "Swish"', lambda v: v * sigmoid64(v)),
    ('type: "Swish" swish_param { beta: 1.5 }', lambda v: v * sigmoid64(np.float32(1.5) * v)),
    ('type: "Swish" swish_param { beta: 0.0 }', lambda v: v / 2),
])
def test_sigmoid_and_swish_float32_agree_with_the_double_formula(text, reference):
    gaussian = np.random.default_rng(1701).standard_normal((2, 3, 4, 5))
    wide = np.linspace(-13, 13, 53)
    for x in (gaussian, wide):
        x = x.astype(np.float32)
        _, _, top = forward(text, [x], np.float32)
        assert top[0].data.dtype == np.float32
        assert ulps(top[0].data, reference(x.astype(np.float64))) <= 4, text
