import pickle

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


class EndOfData(Exception):
    """A Python layer's own exception, with a constructor of its own and an attribute."""

    def __init__(self, epoch):
        super().__init__("epoch %d is over" % epoch)
        self.epoch = epoch


@pytest.mark.parametrize("error", [RuntimeError, AssertionError, KeyError,
                                   NotImplementedError, EndOfData])
def test_a_layers_error_is_still_caught_by_its_own_type(error, tmp_path):
    # pycaffe hands a Python layer's exception to the caller as it is (BVLC's
    # test_python_layer.py expects RuntimeError from a layer raising RuntimeError in setup),
    # so scripts catch it by its type: the LayerError naming the layer is also one
    @register_layer("TestOnlyRaising")
    class Raising(Layer):
        def setup(self, bottom, top):
            if self.layer_param.name == "early":
                raise error(3)

        def reshape(self, bottom, top):
            top[0].reshape(bottom[0].shape)

        def forward(self, bottom, top):
            raise error(3)

    try:
        text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }\n'
                'layer { name: "%s" type: "TestOnlyRaising" bottom: "x" top: "y" }')
        path = tmp_path / "net.prototxt"
        path.write_text(text % "late")
        net = caffe.Net(str(path), caffe.TEST)
        with pytest.raises(error) as info:
            net.forward()
        assert isinstance(info.value, LayerError) and info.value.layer == "late"
        assert "layer 'late' (type TestOnlyRaising): forward failed" in str(info.value)
        assert type(info.value.__cause__) is error
        if error is EndOfData:
            assert info.value.epoch == 3
        copy = pickle.loads(pickle.dumps(info.value))
        assert isinstance(copy, error) and isinstance(copy, LayerError)
        assert str(copy) == str(info.value)
        path.write_text(text % "early")
        with pytest.raises(error, match="layer 'early' .*setup failed"):
            caffe.Net(str(path), caffe.TEST)
    finally:
        LAYERS.unregister("TestOnlyRaising")
