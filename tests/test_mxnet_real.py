"""Pieces of published MXNet models, imported, against MXNet 1.9.1's outputs.

The references under tests/fixtures/mxnet_real were written by MXNet 1.9.1
(``tools/mxnet_real_reference.py``, in a venv of its own): each model case is cut down from
the file its manifest entry names; its symbol and params files as MXNet writes them, an input
and MXNet's outputs. Outputs must match MXNet's to 1e-5 relative (with an absolute floor of
1e-5 times the output's largest magnitude).
"""

import json
import os

import numpy as np

from pycaffe_lite import mxnet

REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "mxnet_real")
with open(os.path.join(REAL, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
RTOL = 1e-5


def _case(case):
    entry = MANIFEST[case]
    shapes = {k: tuple(v["shape"]) for k, v in entry["inputs"].items()}
    net = mxnet.load(os.path.join(REAL, case + "-symbol.json"),
                     os.path.join(REAL, case + "-0000.params"), shapes)
    for name, v in entry["inputs"].items():
        net.blobs[name].data[...] = np.load(os.path.join(REAL, v["file"])).astype(np.float32)
    net.forward()
    _, outputs = mxnet.convert(os.path.join(REAL, case + "-symbol.json"),
                               os.path.join(REAL, case + "-0000.params"), shapes)
    refs = [np.load(os.path.join(REAL, f)) for f in entry["outputs"]]
    assert len(outputs) == len(refs)
    for i, (blob, ref) in enumerate(zip(outputs, refs)):
        got = net.blobs[blob].data
        assert got.shape == ref.shape, (case, i, got.shape, ref.shape)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * float(np.abs(ref).max()),
                                   err_msg="%s output %d (%s)" % (case, i, blob))
    return net


def test_gluon_prelu_with_one_slope_for_all_channels():
    """Gluon's nn.PReLU() (one slope of shape (1,), as InsightFace's fmnasnet and fdensenet
    export it) is Caffe's shared-slope PReLU, whose blob has no axes."""
    net = _case("gluon_prelu_shared")
    prelus = [layer for layer in net.layers if layer.type == "PReLU"]
    assert len(prelus) == 2
    assert all(tuple(layer.blobs[0].shape) == () for layer in prelus)
