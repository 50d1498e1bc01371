"""Every layer type BVLC Caffe registers is registered here, and every registered type can be
created from a minimal LayerParameter."""

import pytest

import pycaffe_lite as caffe
from pycaffe_lite.layers import create_layer
from pycaffe_lite.proto import caffe_pb2

# The 61 types BVLC Caffe's final layer factory registers.
BVLC_TYPES = """
AbsVal Accuracy ArgMax BatchNorm BatchReindex Bias BNLL Clip Concat ContrastiveLoss
Convolution Crop Data Deconvolution Dropout DummyData Eltwise ELU Embed EuclideanLoss Exp
Filter Flatten HDF5Data HDF5Output HingeLoss Im2col ImageData InfogainLoss InnerProduct Input
Log LRN LSTM LSTMUnit MemoryData MultinomialLogisticLoss MVN Parameter Pooling Power PReLU
Python Reduction ReLU Reshape RNN Scale Sigmoid SigmoidCrossEntropyLoss Silence Slice Softmax
SoftmaxWithLoss Split SPP Swish TanH Threshold Tile WindowData
""".split()


def test_all_bvlc_types_are_registered():
    assert len(BVLC_TYPES) == 61
    missing = sorted(set(BVLC_TYPES) - set(caffe.layer_type_list()))
    assert missing == []


USER_MODULE = '''
import pycaffe_lite as caffe


class Identity(caffe.Layer):
    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data
'''


@pytest.mark.parametrize("type_name", caffe.layer_type_list())
def test_create_every_registered_type(type_name, tmp_path, monkeypatch):
    param = caffe_pb2.LayerParameter(name="l_" + type_name.lower(), type=type_name)
    if type_name == "Python":
        (tmp_path / "factory_user_layer.py").write_text(USER_MODULE)
        monkeypatch.syspath_prepend(str(tmp_path))
        param.python_param.module = "factory_user_layer"
        param.python_param.layer = "Identity"
    layer = create_layer(param)
    assert isinstance(layer, caffe.Layer)
    assert layer.type == type_name and layer.name == param.name
