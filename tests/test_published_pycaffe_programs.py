"""The core code paths of widely used pycaffe programs, written for BVLC's pycaffe (and
py-faster-rcnn's fork of it), run with ``import pycaffe_lite as caffe``: DeepDream's gradient
ascent step, neural style transfer's layer-by-layer backward, FCN's net surgery and
py-faster-rcnn's Python layers and solver wrapper. Small nets written here; values checked
against central differences in float64 and hand computations."""

import sys

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import plugins


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    """Write modules into tmp_path, importable by name; 'caffe' aliases undone afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(plugins, "_aliased", [], raising=False)
    before = set(sys.modules)
    written = []

    def write(stem, source):
        name = "%s_%d" % (stem, id(tmp_path))
        (tmp_path / (name + ".py")).write_text(source)
        written.append(name)
        return name

    yield write
    for name in set(sys.modules) - before:
        if name in written or name == "caffe" or name.startswith("caffe."):
            del sys.modules[name]


# ---- py-faster-rcnn: its Python layers read self.param_str_ ---------------------------------

# As py-faster-rcnn's lib/rpn and lib/roi_data_layer layers do: the fork (caffe-fast-rcnn) sets
# `param_str_`.
FASTER_RCNN_STYLE = '''
import caffe
import numpy as np


class ScaleByParam(caffe.Layer):
    def setup(self, bottom, top):
        params = eval("{" + self.param_str_ + "}")
        self._scale = params["scale"]

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self._scale * bottom[0].data

    def backward(self, top, propagate_down, bottom):
        pass
'''


def _python_net(tmp_path, module, layer, param_str=""):
    path = tmp_path / ("%s.prototxt" % layer)
    path.write_text('''name: "py"
input: "x"
input_shape { dim: 2 dim: 3 }
layer { name: "mine" type: "Python" bottom: "x" top: "y"
  python_param { module: "%s" layer: "%s" param_str: "%s" } }
''' % (module, layer, param_str))
    return str(path)


def test_a_python_layer_reads_param_str_under_the_name_py_faster_rcnn_uses(tmp_path,
                                                                          user_modules):
    module = user_modules("frcnn_style", FASTER_RCNN_STYLE)
    net = caffe.Net(_python_net(tmp_path, module, "ScaleByParam", "'scale': 3"), caffe.TEST)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_array_equal(net.forward(x=x)["y"], 3 * x)
    mine = net.layer_dict["mine"]
    assert mine.param_str_ == mine.param_str == "'scale': 3"

