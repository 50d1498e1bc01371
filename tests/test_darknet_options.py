"""Darknet cfg options one by one, each on a small generated .cfg with random parameters:
against OpenCV's Darknet importer where it reads the option the way Darknet does, else
against a NumPy computation of the formula in AlexeyAB's Darknet (src/parser.c,
convolutional_layer.c, maxpool_layer.c, shortcut_layer.c, route_layer.c, blas.c,
activations.h).

The .weights files are written here: the header (major 0, minor 2, revision 0, then ``seen``
as a 64-bit integer), then each layer's parameters in file order.
"""

import struct

import numpy as np
import pytest

import pycaffe_lite
from pycaffe_lite.darknet import convert

FLT_MAX = float(np.finfo(np.float32).max)


def weights_file(arrays):
    head = struct.pack("<iiiQ", 0, 2, 0, 64)
    return head + b"".join(np.asarray(a, "<f4").tobytes() for a in arrays)


def run_ours(tmp_path, cfg_text, arrays, x):
    """Every Darknet layer's output (by layer number) of the converted net on input ``x``."""
    result = convert(cfg_text, weights_file(arrays))
    proto, model = tmp_path / "m.prototxt", tmp_path / "m.caffemodel"
    proto.write_text(str(result.net_param))
    model.write_bytes(result.weights_param.SerializeToString())
    net = pycaffe_lite.Net(str(proto), str(model), pycaffe_lite.TEST)
    net.blobs["data"].data[...] = x
    net.forward()
    return {i: net.blobs[b].data.copy() for i, b in result.blob_of_layer.items()}


def close(got, expected):
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5,
                               atol=1e-6 * max(1.0, float(np.abs(expected).max())))


def rand(rng, *shape):
    return rng.normal(0, 0.7, shape).astype(np.float32)


# ---- [connected] outputs (C x 1 x 1 in Darknet) combined with image layers ----------------
FLAT_AND_IMAGE = """\
[net]
width=3
height=2
channels=2

[avgpool]

[connected]
output=2
activation=linear

[%s]
%s
"""


@pytest.mark.parametrize("section,keys", [
    ("shortcut", "from=-2\nactivation=leaky"),
    ("route", "layers=-1,0"),
    ("sam", "from=0"),
])
def test_connected_output_with_a_one_by_one_map(tmp_path, section, keys):
    # Darknet's [connected] gives 2 x 1 x 1 and [avgpool] 2 x 1 x 1; [shortcut] adds them,
    # [route] concatenates them, [sam] multiplies them.
    rng = np.random.default_rng(1)
    b, w = rand(rng, 2), rand(rng, 2, 2)
    x = rng.uniform(-1, 1, (1, 2, 2, 3)).astype(np.float32)
    out = run_ours(tmp_path, FLAT_AND_IMAGE % (section, keys), [b, w.ravel()], x)
    avg = x[0].astype(np.float64).mean(axis=(1, 2))
    fc = w @ avg + b
    if section == "shortcut":
        s = fc + avg
        expected = np.where(s > 0, s, 0.1 * s)
    elif section == "route":
        expected = np.concatenate([fc, avg])
    else:
        expected = avg * fc
    got = out[2]
    close(got.reshape(got.shape[0], -1)[0], expected)


@pytest.mark.parametrize("section", ["activation", "connected"])
@pytest.mark.parametrize("act,why", [
    ("mish", "does not compute it"), ("swish", "does not compute it"),
    ("relu6", r"computes it in GPU builds only \(on the CPU its output would be zeros\)")])
def test_activations_that_darknet_does_not_compute_there_are_refused(section, act, why):
    # [activation] and [connected] run activate_array, whose activate() has no case for these
    # (it returns 0: the layer's output would be zeros; the GPU build computes relu6), where a
    # [convolutional] computes them
    from pycaffe_lite.darknet import DarknetError
    cfg_text = "[net]\nwidth=3\nheight=2\nchannels=2\n\n[%s]\nactivation=%s\n" % (section, act)
    with pytest.raises(DarknetError, match=r"<string>:7: layer 0 \[%s\]: activation=%s: "
                                           r"Darknet's \[%s\] %s" % (section, act, section, why)):
        convert(cfg_text)
    convert(cfg_text.replace("[%s]" % section, "[convolutional]\nfilters=2\nsize=1"))
