import sys
import textwrap

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, make_layer

MODULE = "pcl_user_mult_layer"

USER_CODE = '''
import numpy as np
import pycaffe_lite as caffe


class MultLayer(caffe.Layer):
    """y = a * x with a learnable scalar a, initialised from param_str."""

    def setup(self, bottom, top):
        if len(bottom) != 1:
            raise Exception("MultLayer takes one bottom")
        self.seen_phase = self.phase
        self.seen_param_str = self.param_str
        if not len(self.blobs):  # a saved net brings its own
            self.blobs.add_blob(1)
            self.blobs[0].data[...] = float(self.param_str)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data * self.blobs[0].data[0]

    def backward(self, top, propagate_down, bottom):
        if self.param_propagate_down[0]:
            self.blobs[0].diff[0] += (top[0].diff * bottom[0].data).sum()
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * self.blobs[0].data[0]


class OwnInit(caffe.Layer):
    """An __init__ of its own taking the LayerParameter only, as pycaffe constructs layers."""

    def __init__(self, param):
        super().__init__(param)
        self.factor = float(param.python_param.param_str)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.factor * bottom[0].data


class NotALayer:
    pass


def not_a_class(param):
    return None
'''

NET = '''
name: "pynet"
force_backward: true
layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "mult" type: "Python" bottom: "x" top: "y"
        python_param { module: "%s" layer: "MultLayer" param_str: "2.5" } }
layer { name: "loss" type: "Reduction" bottom: "y" top: "loss"
        reduction_param { operation: SUMSQ } loss_weight: 0.5 }
''' % MODULE


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A working directory holding the user's layer module (not on sys.path beforehand)."""
    (tmp_path / (MODULE + ".py")).write_text(textwrap.dedent(USER_CODE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != ""])  # restored afterwards
    yield tmp_path
    sys.modules.pop(MODULE, None)


def test_python_layer_in_a_net(user_dir):
    net = caffe.Net(NET, caffe.TRAIN)
    layer = net.layer_dict["mult"]
    assert type(layer).__name__ == "MultLayer" and isinstance(layer, caffe.Layer)
    assert layer.type == "Python"
    assert layer.seen_param_str == "2.5" and layer.param_str == "2.5"
    assert layer.seen_phase == caffe.TRAIN
    # its param is a net param and a learnable one
    a = net.params["mult"][0]
    assert a.shape == (1,) and a.data[0] == 2.5
    assert any(b is a for b in net.learnable_params)

    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], np.float32)
    net.blobs["x"].data[...] = x
    sumsq = net.forward()["loss"]  # the blob holds the unweighted sum of squares
    np.testing.assert_allclose(net.blobs["y"].data, 2.5 * x)
    assert float(sumsq) == pytest.approx(((2.5 * x) ** 2).sum(), rel=1e-6)
    net.clear_param_diffs()
    net.backward()
    # d loss / dy = y; dx = 2.5 * y; da = sum(x * y)
    np.testing.assert_allclose(net.blobs["x"].diff, 2.5 * 2.5 * x, rtol=1e-6)
    np.testing.assert_allclose(a.diff, [(x * 2.5 * x).sum()], rtol=1e-6)

    # a solver step changes it, and a snapshot saves and restores it
    a.diff[...] = 0.5
    net.update()
    assert a.data[0] == 2.0
    net.save(str(user_dir / "snap.caffemodel"))
    restored = caffe.Net(NET, str(user_dir / "snap.caffemodel"), caffe.TEST)
    assert restored.params["mult"][0].data[0] == 2.0
    assert len(restored.params["mult"]) == 1
    assert restored.layer_dict["mult"].seen_phase == caffe.TEST


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_python_layer_with_an_init_taking_the_layer_parameter_only(user_dir, dtype):
    text = NET.replace('layer: "MultLayer" param_str: "2.5"', 'layer: "OwnInit" param_str: "4"')
    net = caffe.Net(text, caffe.TEST, dtype=dtype)
    layer = net.layer_dict["mult"]
    assert type(layer).__name__ == "OwnInit" and layer.param_str == "4"
    assert layer.dtype == dtype
    y = net.forward(x=np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]]), blobs=["y"])["y"]
    np.testing.assert_array_equal(y, [[4.0, -8.0, 2.0], [12.0, 0.0, -4.0]])
    assert y.dtype == dtype


def test_python_layer_gradient_check(user_dir):
    text = ('name: "m" type: "Python" python_param { module: "%s" layer: "MultLayer" '
            'param_str: "-1.5" }' % MODULE)
    layer, bottom, top = check_layer(text, [(2, 3, 4)])
    np.testing.assert_allclose(top[0].data, -1.5 * bottom[0].data, rtol=1e-12)


def python_text(module, cls):
    return ('name: "pylayer" type: "Python" python_param { module: "%s" layer: "%s" }'
            % (module, cls))


def test_python_layer_module_not_importable(user_dir):
    with pytest.raises(LayerError, match=r"layer 'pylayer' \(type Python\): cannot import "
                                         r"python_param.module 'pcl_no_such_module_zz'"):
        make_layer(python_text("pcl_no_such_module_zz", "MultLayer"))


def test_python_layer_class_missing(user_dir):
    with pytest.raises(LayerError, match=r"layer 'pylayer' \(type Python\): module '%s' .* has "
                                         r"no class 'Missing'" % MODULE):
        make_layer(python_text(MODULE, "Missing"))


@pytest.mark.parametrize("name", ["NotALayer", "not_a_class"])
def test_python_layer_class_not_a_layer(user_dir, name):
    with pytest.raises(LayerError, match=r"layer 'pylayer' \(type Python\): python_param.layer "
                                         r"'%s' in module '%s' is .* not a subclass of "
                                         r"pycaffe_lite.Layer" % (name, MODULE)):
        make_layer(python_text(MODULE, name))


def test_python_layer_error_through_a_net(user_dir):
    bad = NET.replace('layer: "MultLayer"', 'layer: "Nope"')
    with pytest.raises(LayerError, match=r"layer 'mult' \(type Python\): module .* has no "
                                         r"class 'Nope'"):
        caffe.Net(bad, caffe.TRAIN)


def test_python_layer_failure_names_the_line_of_the_users_module(user_dir):
    """A Python layer's set-up or forward that raises: the one-line error names the layer and
    the line of the user's file it failed at (setup: float('') on the line that reads
    param_str; forward: a top of another shape than its bottom, on the line that writes it)."""
    lines = textwrap.dedent(USER_CODE).splitlines()
    setup_line = 1 + next(i for i, t in enumerate(lines) if "float(self.param_str)" in t)
    forward_line = 1 + next(i for i, t in enumerate(lines) if "top[0].data[...] =" in t)
    path = str(user_dir / (MODULE + ".py"))
    with pytest.raises(LayerError) as err:
        caffe.Net(NET.replace('param_str: "2.5"', 'param_str: ""'), caffe.TRAIN)
    assert str(err.value).startswith("layer 'mult' (type Python): setup failed")
    assert str(err.value).endswith("(at %s, line %d)" % (path, setup_line))
    net = caffe.Net(NET, caffe.TRAIN)
    net.layers[1].reshape = lambda bottom, top: top[0].reshape(5)  # forward then broadcasts
    with pytest.raises(LayerError) as err:
        net.forward()
    assert str(err.value).startswith("layer 'mult' (type Python): forward failed")
    assert str(err.value).endswith("(at %s, line %d)" % (path, forward_line))
