import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError, LayerError
from pycaffe_lite.layer import Layer
from pycaffe_lite.layers import create_layer
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import LAYERS, Registry, UnknownTypeError, register_layer


def test_duplicate_registration_refused():
    r = Registry("thing")
    r.register("A", object)
    with pytest.raises(CaffeError, match="'A' is already registered"):
        r.register("A", int)


def test_unknown_type_names_closest_and_known():
    with pytest.raises(UnknownTypeError) as err:
        create_layer(caffe_pb2.LayerParameter(name="c1", type="Convolutoin"))
    msg = str(err.value)
    assert "unknown layer type 'Convolutoin'" in msg and "layer 'c1'" in msg
    assert "did you mean 'Convolution'" in msg and "Known types:" in msg
    with pytest.raises(UnknownTypeError, match="did you mean 'ReLU'"):
        create_layer(caffe_pb2.LayerParameter(name="r", type="relu"))


def test_user_layer_registration_and_creation():
    @register_layer("TestOnlyDouble")
    class Double(Layer):
        def reshape(self, bottom, top):
            top[0].reshape(bottom[0].shape)

        def forward(self, bottom, top):
            top[0].data[...] = 2 * bottom[0].data

    try:
        layer = create_layer(caffe_pb2.LayerParameter(name="d", type="TestOnlyDouble"))
        assert isinstance(layer, Double) and layer.type == "TestOnlyDouble"
        assert "TestOnlyDouble" in caffe.layer_type_list()
    finally:
        LAYERS.unregister("TestOnlyDouble")


@pytest.mark.parametrize("error", [RuntimeError, AttributeError, AssertionError, OSError,
                                   NotImplementedError, ValueError])
def test_any_error_of_a_layer_of_ones_own_names_the_layer(error, tmp_path):
    # a user's layer (registered, or a Python layer) that fails for any reason: the error
    # names the layer, the step and the bottom shapes, and keeps the original as its cause
    @register_layer("TestOnlyFailing")
    class Failing(Layer):
        def reshape(self, bottom, top):
            top[0].reshape(bottom[0].shape)

        def forward(self, bottom, top):
            raise error("the user's message")

    try:
        path = tmp_path / "net.prototxt"
        path.write_text('layer { name: "in" type: "Input" top: "x" input_param { shape { '
                        'dim: 2 dim: 3 } } }\nlayer { name: "mine" type: "TestOnlyFailing" '
                        'bottom: "x" top: "y" }')
        net = caffe.Net(str(path), caffe.TEST)
        with pytest.raises(LayerError, match="layer 'mine' \\(type TestOnlyFailing\\): forward "
                                             "failed with bottom shapes \\[\\(2, 3\\)\\]: %s: "
                                             "the user's message" % error.__name__) as info:
            net.forward()
        assert type(info.value.__cause__) is error
    finally:
        LAYERS.unregister("TestOnlyFailing")
