"""BVLC Caffe's examples/ folder, run as a Caffe user would: its Python layers, tools and
nets on small local data, checked against hand computations and Caffe's documented
behaviour."""

import sys

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import plugins

# A loss layer written for BVLC's pycaffe, as examples/pycaffe/layers/pyloss.py is: it imports
# `caffe` (not pycaffe_lite) and subclasses caffe.Layer.
PYCAFFE_LOSS = '''
import caffe
import numpy as np
from caffe.proto import caffe_pb2

PB2 = caffe_pb2


class HalfSquaredDistance(caffe.Layer):
    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("two bottoms")

    def reshape(self, bottom, top):
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = np.sum(self.diff ** 2) / bottom[0].num / 2.0

    def backward(self, top, propagate_down, bottom):
        for i, sign in enumerate((1, -1)):
            if propagate_down[i]:
                bottom[i].diff[...] = sign * self.diff / bottom[i].num
'''

# examples/pycaffe/linreg.prototxt's shape: two DummyData inputs, an InnerProduct on each, the
# Python loss between them (loss_weight 1, as a Python layer is not known to be a loss).
LINREG = '''
name: "linreg"
layer { name: "x" type: "DummyData" top: "x"
  dummy_data_param { shape { dim: 4 dim: 3 dim: 2 } data_filler { type: "gaussian" } } }
layer { name: "y" type: "DummyData" top: "y"
  dummy_data_param { shape { dim: 4 dim: 3 dim: 2 } data_filler { type: "gaussian" } } }
layer { name: "ipx" type: "InnerProduct" bottom: "x" top: "ipx"
  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "ipy" type: "InnerProduct" bottom: "y" top: "ipy"
  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "Python" bottom: "ipx" bottom: "ipy" top: "loss"
  python_param { module: "%s" layer: "HalfSquaredDistance" } loss_weight: 1 }
'''


@pytest.fixture
def caffe_alias_undone(monkeypatch):
    """Whatever a test does to 'caffe' (the alias of pycaffe_lite), undone afterwards."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(plugins, "_aliased", [], raising=False)
    before = {k for k in sys.modules if k == "caffe" or k.startswith("caffe.")}
    yield
    for name in [k for k in sys.modules if k == "caffe" or k.startswith("caffe.")]:
        if name not in before:
            del sys.modules[name]


def test_pycaffe_python_layer_that_imports_caffe_runs(tmp_path, monkeypatch, caffe_alias_undone):
    module = "bvlc_style_pyloss_%d" % id(tmp_path)
    (tmp_path / (module + ".py")).write_text(PYCAFFE_LOSS)
    monkeypatch.syspath_prepend(str(tmp_path))
    model = tmp_path / "linreg.prototxt"
    model.write_text(LINREG % module)

    net = caffe.Net(str(model), caffe.TRAIN)
    loss = net.forward()["loss"]
    ipx, ipy = net.blobs["ipx"].data.copy(), net.blobs["ipy"].data.copy()
    # the Euclidean loss by hand: sum of squared differences / (2 N), N = 4
    assert loss.shape == (1,)
    np.testing.assert_allclose(loss[0], np.sum((ipx - ipy) ** 2) / 4 / 2, rtol=1e-5)
    net.backward()
    np.testing.assert_allclose(net.blobs["ipx"].diff, (ipx - ipy) / 4, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(net.blobs["ipy"].diff, (ipy - ipx) / 4, rtol=1e-5, atol=1e-7)
    # 'caffe' is pycaffe_lite itself: one Layer class, one generated schema module
    user = sys.modules[module]
    assert user.caffe is caffe and user.PB2 is caffe.caffe_pb2
    net.close()
