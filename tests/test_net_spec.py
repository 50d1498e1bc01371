"""NetSpec (pycaffe's net_spec): the LeNet tutorial net field by field, naming rules, parameter
routing, and a generated net that runs."""

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import layers as L
from pycaffe_lite import params as P
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2


def lenet(lmdb, batch_size):
    # as written in Caffe's LeNet tutorial notebook (01-learning-lenet)
    n = caffe.NetSpec()
    n.data, n.label = L.Data(batch_size=batch_size, backend=P.Data.LMDB, source=lmdb,
                             transform_param=dict(scale=1. / 255), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20,
                            weight_filler=dict(type='xavier'))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.conv2 = L.Convolution(n.pool1, kernel_size=5, num_output=50,
                            weight_filler=dict(type='xavier'))
    n.pool2 = L.Pooling(n.conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.fc1 = L.InnerProduct(n.pool2, num_output=500, weight_filler=dict(type='xavier'))
    n.relu1 = L.ReLU(n.fc1, in_place=True)
    n.score = L.InnerProduct(n.relu1, num_output=10, weight_filler=dict(type='xavier'))
    n.loss = L.SoftmaxWithLoss(n.score, n.label)
    return n.to_proto()


# What Caffe's tutorial writes to lenet_auto_train.prototxt, typed out independently.
LENET_TEXT = """
layer { name: "data" type: "Data" top: "data" top: "label"
        transform_param { scale: 0.00392156862745 }
        data_param { source: "mnist/mnist_train_lmdb" batch_size: 64 backend: LMDB } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "fc1" type: "InnerProduct" bottom: "pool2" top: "fc1"
        inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "fc1" top: "fc1" }
layer { name: "score" type: "InnerProduct" bottom: "fc1" top: "score"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
"""


def test_lenet_field_by_field():
    net = lenet("mnist/mnist_train_lmdb", 64)
    assert [lp.name for lp in net.layer] == ["data", "conv1", "pool1", "conv2", "pool2", "fc1",
                                              "relu1", "score", "loss"]
    data = net.layer[0]
    assert data.type == "Data"
    assert list(data.top) == ["data", "label"] and not data.bottom
    assert data.data_param.source == "mnist/mnist_train_lmdb"
    assert data.data_param.batch_size == 64
    assert data.data_param.backend == caffe_pb2.DataParameter.LMDB
    assert data.transform_param.scale == pytest.approx(1 / 255.0, rel=1e-7)

    conv1 = net.layer[1]
    assert (conv1.type, list(conv1.bottom), list(conv1.top)) == ("Convolution", ["data"],
                                                                 ["conv1"])
    assert list(conv1.convolution_param.kernel_size) == [5]  # repeated field from a scalar
    assert conv1.convolution_param.num_output == 20
    assert conv1.convolution_param.weight_filler.type == "xavier"
    assert not conv1.HasField("inner_product_param")

    pool1 = net.layer[2]
    assert pool1.pooling_param.pool == caffe_pb2.PoolingParameter.MAX
    assert (pool1.pooling_param.kernel_size, pool1.pooling_param.stride) == (2, 2)
    assert list(pool1.bottom) == ["conv1"]

    assert net.layer[3].convolution_param.num_output == 50
    assert list(net.layer[3].bottom) == ["pool1"]
    fc1 = net.layer[5]
    assert fc1.inner_product_param.num_output == 500 and list(fc1.bottom) == ["pool2"]
    relu = net.layer[6]
    assert (relu.type, list(relu.bottom), list(relu.top)) == ("ReLU", ["fc1"], ["fc1"])
    score = net.layer[7]
    assert list(score.bottom) == ["fc1"] and score.inner_product_param.num_output == 10
    loss = net.layer[8]
    assert (loss.type, list(loss.bottom), list(loss.top)) == ("SoftmaxWithLoss",
                                                              ["score", "label"], ["loss"])

    expected = text_format.Parse(LENET_TEXT, caffe_pb2.NetParameter())
    assert net == expected


def test_generated_text_parses_back():
    net = lenet("train_lmdb", 32)
    again = text_format.Parse(str(net), caffe_pb2.NetParameter())
    assert again == net


def test_automatic_names_with_to_proto():
    data = L.Input(shape=dict(dim=[1, 4]))
    ip = L.InnerProduct(data, num_output=3)
    out = L.InnerProduct(L.ReLU(ip), num_output=2)
    net = caffe.to_proto(out)
    assert [(lp.name, lp.type, list(lp.bottom), list(lp.top)) for lp in net.layer] == [
        ("Input1", "Input", [], ["Input1"]),
        ("InnerProduct1", "InnerProduct", ["Input1"], ["InnerProduct1"]),
        ("ReLU1", "ReLU", ["InnerProduct1"], ["ReLU1"]),
        ("InnerProduct2", "InnerProduct", ["ReLU1"], ["InnerProduct2"]),
    ]
    assert out.to_proto() == net
    assert list(net.layer[0].input_param.shape[0].dim) == [1, 4]


def test_multiple_tops_ntop_zero_and_layer_level_params():
    n = caffe.NetSpec()
    n.data = L.Input(shape=[dict(dim=[2, 6])])
    n.a, n.b, n.c = L.Slice(n.data, slice_point=[1, 3], axis=1, ntop=3)
    n.silence = L.Silence(n.b, n.c, ntop=0)
    n.ip = L.InnerProduct(n.a, num_output=2,
                          param=[dict(lr_mult=1, decay_mult=1), dict(lr_mult=2, decay_mult=0)],
                          include=dict(phase=caffe.TRAIN), loss_weight=0.5)
    net = n.to_proto()
    by_name = {lp.name: lp for lp in net.layer}
    sl = by_name["a"]  # a layer is named after its first top
    assert list(sl.top) == ["a", "b", "c"]
    assert list(sl.slice_param.slice_point) == [1, 3] and sl.slice_param.axis == 1
    assert list(by_name["silence"].bottom) == ["b", "c"] and not by_name["silence"].top
    ip = by_name["ip"]
    assert [(s.lr_mult, s.decay_mult) for s in ip.param] == [(1, 1), (2, 0)]
    assert len(ip.include) == 1 and ip.include[0].phase == caffe.TRAIN
    assert list(ip.loss_weight) == [0.5]
    assert n.keys() == ["data", "a", "b", "c", "silence", "ip"]


def test_enum_values_by_name_and_by_params():
    assert P.Pooling.MAX == caffe_pb2.PoolingParameter.MAX
    assert P.Pooling.AVE == 1
    assert P.Eltwise.SUM == caffe_pb2.EltwiseParameter.SUM
    assert P.Data.LMDB == caffe_pb2.DataParameter.LMDB
    x = L.Input(shape=dict(dim=[1, 1, 4, 4]))
    net = L.Pooling(x, pool="AVE", kernel_size=2).to_proto()
    assert net.layer[1].pooling_param.pool == caffe_pb2.PoolingParameter.AVE


def test_in_place_layer_keeps_blob_name_and_takes_the_attribute_name():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 3]))
    n.fc = L.InnerProduct(n.data, num_output=3)
    n.act = L.TanH(n.fc, in_place=True)
    n.out = L.InnerProduct(n.act, num_output=1)
    net = n.to_proto()
    assert [(lp.name, list(lp.bottom), list(lp.top)) for lp in net.layer] == [
        ("data", [], ["data"]), ("fc", ["data"], ["fc"]), ("act", ["fc"], ["fc"]),
        ("out", ["fc"], ["out"])]


def test_errors_name_what_was_received():
    x = L.Input(shape=dict(dim=[1, 2]))
    with pytest.raises(CaffeError, match="unknown parameter 'kernel'.*ConvolutionParameter"):
        L.Convolution(x, kernel=3).to_proto()
    with pytest.raises(AttributeError):  # pycaffe raises AttributeError here; so do we
        L.Convolution(x, kernel=3).to_proto()
    with pytest.raises(CaffeError, match="'MAXIMUM' is not a value of enum PoolMethod"):
        L.Pooling(x, pool="MAXIMUM").to_proto()
    with pytest.raises(CaffeError, match="num_output: cannot take 'ten'"):
        L.InnerProduct(x, num_output="ten").to_proto()
    with pytest.raises(CaffeError, match="input 0 is not a Top"):
        L.ReLU(np.zeros(3))
    with pytest.raises(TypeError):  # pycaffe's exception type
        L.ReLU(x, "x")
    with pytest.raises(CaffeError, match="has no enum value 'MEDIAN'"):
        P.Pooling.MEDIAN
    n = caffe.NetSpec()
    with pytest.raises(CaffeError, match="no top named 'nothing'"):
        n.nothing


def test_generated_input_net_runs(tmp_path):
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 3]))
    n.ip = L.InnerProduct(n.data, num_output=2,
                          weight_filler=dict(type="constant", value=1.0),
                          bias_filler=dict(type="constant", value=0.5))
    n.relu = L.ReLU(n.ip, in_place=True)
    n.squashed = L.TanH(n.ip)
    proto = n.to_proto()
    proto.name = "generated"
    path = tmp_path / "net.prototxt"
    path.write_text(str(proto))
    net = caffe.Net(str(path), caffe.TEST)
    assert net.inputs == ["data"] and net.outputs == ["squashed"]
    x = np.array([[0.1, 0.2, -0.3], [-4.0, 0.5, 0.25]], dtype=np.float32)
    out = net.forward(data=x)["squashed"]
    # ip: every weight 1, bias 0.5 -> row sums 0.5 and -2.75; ReLU; tanh
    expected = np.tanh(np.array([0.5, 0.0]))[:, None]
    np.testing.assert_allclose(out, np.repeat(expected, 2, axis=1), rtol=1e-6)
    # the same net from the message itself
    net2 = caffe.Net(proto, caffe.TEST)
    np.testing.assert_allclose(net2.forward(data=x)["squashed"], out)


def test_pycaffe_face_exports():
    assert caffe.layers.Convolution is not None
    assert caffe.net_spec.layers is not None
    assert caffe.NetSpec is caffe.net_spec.NetSpec
    # the built-in layers' package stays reachable through ``caffe.layers``
    assert callable(caffe.layers.create_layer)
    assert "Convolution" in caffe.layer_type_list()
