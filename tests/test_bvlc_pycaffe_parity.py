"""What BVLC's own pycaffe tests and scripts (python/caffe/test/*.py, python/train.py,
python/classify.py, tools/extra/*) lean on without asserting it: the batched calls, the
Net's name maps, the io helpers. Values are worked out by hand from pycaffe.py's and
_caffe.cpp's definitions."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import NetError

# A net fed by a data layer (no inputs): data is all ones (batch 2 x 3), out = data @ W.T with
# W all ones (2 x 3), so out = 3 on every entry and d out / d data = out_diff @ W: each row of
# data's diff is the sum of that row's two out diffs, on all three columns.
DATA_FED = """
force_backward: true
layer { name: "d" type: "DummyData" top: "data"
        dummy_data_param { shape { dim: 2 dim: 3 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "out"
        inner_product_param { num_output: 2 bias_term: false
                              weight_filler { type: "constant" value: 1 } } }
"""


def _net(tmp_path, text, phase=caffe.TEST, name="net.prototxt"):
    path = tmp_path / name
    path.write_text(text)
    return caffe.Net(str(path), phase)


def test_forward_backward_all_batches_top_diffs_alone_on_a_data_fed_net(tmp_path):
    net = _net(tmp_path, DATA_FED)
    top_diffs = np.arange(10, dtype=np.float32).reshape(5, 2)  # 5 items: 2 + 2 + 1 (padded)
    outs, diffs = net.forward_backward_all(blobs=["data"], diffs=["data"], out=top_diffs)
    assert outs["out"].shape == (5, 2) and outs["data"].shape == (5, 3)
    np.testing.assert_array_equal(outs["out"], np.full((5, 2), 3.0))
    np.testing.assert_array_equal(outs["data"], np.ones((5, 3)))
    expected = np.repeat(top_diffs.sum(axis=1, keepdims=True), 3, axis=1)  # 1, 5, 9, 13, 17
    np.testing.assert_array_equal(diffs["data"], expected)


def test_forward_all_and_forward_backward_all_without_arrays_are_errors(tmp_path):
    net = _net(tmp_path, DATA_FED)
    with pytest.raises(NetError, match=r"forward_all\(\) needs arrays.*outputs: out"):
        net.forward_all()
    with pytest.raises(NetError, match=r"forward_backward_all\(\) needs arrays"):
        net.forward_backward_all(blobs=["data"])


def test_draw_has_pycaffes_pooling_types_dict_and_lr_mult_helpers():
    from pycaffe_lite import draw
    from pycaffe_lite.proto import caffe_pb2

    # caffe.proto: enum PoolMethod { MAX = 0; AVE = 1; STOCHASTIC = 2; }
    assert draw.get_pooling_types_dict() == {0: "MAX", 1: "AVE", 2: "STOCHASTIC"}
    layer = caffe_pb2.LayerParameter(name="c", type="Convolution")
    assert draw.get_layer_lr_mult(layer) == (1.0, 1.0)      # no param: ParamSpec's default 1
    layer.param.add(lr_mult=0.5)
    assert draw.get_layer_lr_mult(layer) == (0.5, 1.0)
    layer.param.add(lr_mult=2)
    assert draw.get_layer_lr_mult(layer) == (0.5, 2.0)
    layer.param.add(lr_mult=3)
    with pytest.raises(ValueError, match="layer 'c'.*3 param"):
        draw.get_layer_lr_mult(layer)
    with pytest.raises(ValueError, match="layer 'p': Pooling layers have no learning rate"):
        draw.get_layer_lr_mult(caffe_pb2.LayerParameter(name="p", type="Pooling"))
