"""The Darknet .weights reader: header versions, parameter order, files too short or too long."""

import struct

import numpy as np
import pytest
from helpers.darknet import random_params, weights_bytes

from pycaffe_lite.darknet import DarknetError, DarknetWeights, convert, read_weights

CFG = """\
[net]
width=4
height=4
channels=2

[convolutional]
batch_normalize=1
filters=3
size=3
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
filters=2
size=1
activation=linear

[connected]
batch_normalize=1
output=4
activation=linear
"""


@pytest.mark.parametrize("major,minor,seen_bits,transpose", [
    (0, 2, 64, False), (0, 1, 32, False), (1, 0, 64, False), (0, 0, 32, False),
    (0, 1001, 32, True), (1001, 0, 32, True),
])
def test_header_versions(major, minor, seen_bits, transpose):
    seen = 2 ** 33 + 5 if seen_bits == 64 else 123456
    data = struct.pack("<3i", major, minor, 7) + \
        struct.pack("<Q" if seen_bits == 64 else "<I", seen) + struct.pack("<2f", 1.5, -2)
    w = DarknetWeights(data, "m.weights")
    assert (w.major, w.minor, w.revision, w.seen) == (major, minor, 7, seen)
    assert w.seen_bytes * 8 == seen_bits and w.transpose == transpose
    np.testing.assert_array_equal(w.take(2, "biases", "layer 0"), [1.5, -2])
    w.finish()


def test_parameter_order_conv_and_connected():
    """conv: biases, scales, mean, variance, weights; connected: biases, weights, then the
    batch-norm statistics."""
    arrays = random_params(CFG, seed=1)
    result = convert(CFG, weights_bytes(arrays))
    layers = {lp.name: lp for lp in result.weights_param.layer}
    b, s, m, v, w = arrays[:5]
    np.testing.assert_array_equal(layers["conv0_scale"].blobs[0].data, s)
    np.testing.assert_array_equal(layers["conv0_scale"].blobs[1].data, b)
    np.testing.assert_array_equal(layers["conv0_bn"].blobs[0].data, m)
    np.testing.assert_allclose(layers["conv0_bn"].blobs[1].data,
                               v + 2e-6 * np.sqrt(v.astype(np.float64)), rtol=1e-7)
    np.testing.assert_array_equal(np.reshape(layers["conv0"].blobs[0].data, (3, 2, 3, 3)),
                                  w.reshape(3, 2, 3, 3))
    b2, w2 = arrays[5:7]
    np.testing.assert_array_equal(layers["conv2"].blobs[1].data, b2)
    np.testing.assert_array_equal(layers["conv2"].blobs[0].data, w2)
    fb, fw, fs, fm, fv = arrays[7:]
    assert list(layers["fc3"].blobs[0].shape.dim) == [4, 8]
    np.testing.assert_array_equal(layers["fc3"].blobs[0].data, fw)
    np.testing.assert_array_equal(layers["fc3_scale"].blobs[0].data, fs)
    np.testing.assert_array_equal(layers["fc3_scale"].blobs[1].data, fb)
    np.testing.assert_array_equal(layers["fc3_bn"].blobs[0].data, fm)


def test_file_too_short_names_the_layer(tmp_path):
    data = weights_bytes(random_params(CFG))
    path = tmp_path / "m.weights"
    path.write_bytes(data[:-4 * 6])   # the variance (4 values) and half the mean missing
    with pytest.raises(DarknetError, match=r"m.weights: the file ends early: layer 3 "
                                           r"\[connected\] at <string>:22 needs 4 values \(16 "
                                           r"bytes\) for its rolling mean at "
                                           r"byte \d+, but only 8 bytes remain"):
        convert(CFG, str(path))


def test_file_too_long_names_the_last_layer(tmp_path):
    path = tmp_path / "m.weights"
    path.write_bytes(weights_bytes(random_params(CFG)) + b"\0" * 12)
    with pytest.raises(DarknetError, match=r"m.weights: 12 bytes \(3 values\) are left over after "
                                           r"the last layer with parameters, layer 3 "
                                           r"\[connected\] at <string>:22"):
        convert(CFG, str(path))


def test_file_with_partial_value(tmp_path):
    path = tmp_path / "m.weights"
    path.write_bytes(weights_bytes(random_params(CFG)) + b"\0\0")
    with pytest.raises(DarknetError, match=r"2 bytes \(not a whole number of float32 values\) "
                                           r"are left over"):
        convert(CFG, str(path))


def test_truncated_header(tmp_path):
    path = tmp_path / "m.weights"
    path.write_bytes(struct.pack("<3i", 0, 2, 0) + b"\0\0\0\0")
    with pytest.raises(DarknetError, match=r"m.weights: 16 bytes: too short for Darknet's header "
                                           r"\(version 0.2.0 needs a 64-bit seen count"):
        read_weights(str(path))
    path.write_bytes(b"\0" * 8)
    with pytest.raises(DarknetError, match="too short for Darknet's header"):
        read_weights(str(path))


def test_weights_for_a_cfg_without_parameters():
    cfg = "[net]\nwidth=2\nheight=2\nchannels=1\n\n[maxpool]\nsize=2\nstride=2\n"
    convert(cfg, weights_bytes([]))
    with pytest.raises(DarknetError, match="left over after the header, but the .cfg has no "
                                           "layer with parameters"):
        convert(cfg, weights_bytes([[1.0]]))


def test_missing_weights_file():
    with pytest.raises(DarknetError, match="nope.weights: file not found"):
        read_weights("nope.weights")
