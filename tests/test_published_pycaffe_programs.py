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


# ---- py-faster-rcnn: its Python layers read self.param_str_ and str(self.phase) --------------

# As py-faster-rcnn's lib/rpn and lib/roi_data_layer layers do: the fork (caffe-fast-rcnn) sets
# `param_str_`, and the layers look their per-phase settings up by `str(self.phase)`.
FASTER_RCNN_STYLE = '''
import caffe
import numpy as np

CFG = {"TRAIN": {"PRE_NMS_TOP_N": 12000}, "TEST": {"PRE_NMS_TOP_N": 6000}}


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


class TopNByPhase(caffe.Layer):
    def setup(self, bottom, top):
        cfg_key = str(self.phase)
        self._top_n = CFG[cfg_key]["PRE_NMS_TOP_N"]

    def reshape(self, bottom, top):
        top[0].reshape(1)

    def forward(self, bottom, top):
        top[0].data[...] = self._top_n

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


def test_a_python_layers_phase_prints_as_train_or_test(tmp_path, user_modules):
    """caffe.TRAIN / caffe.TEST print their names, as pycaffe's Phase enum values do, and stay
    the ints 0 and 1; a layer picks its settings by str(self.phase) as py-faster-rcnn's do."""
    assert (str(caffe.TRAIN), str(caffe.TEST)) == ("TRAIN", "TEST")
    assert (caffe.TRAIN, caffe.TEST) == (0, 1) and "%d" % caffe.TEST == "1"
    module = user_modules("frcnn_style", FASTER_RCNN_STYLE)
    model = _python_net(tmp_path, module, "TopNByPhase")
    x = np.zeros((2, 3), np.float32)
    for phase, top_n in ((caffe.TRAIN, 12000), (caffe.TEST, 6000)):
        net = caffe.Net(model, phase)
        mine = net.layer_dict["mine"]
        assert mine.phase == phase and str(mine.phase) == str(phase)
        assert net.forward(x=x)["y"][0] == top_n
