import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError, LayerError, NetError, ProtoError, ShapeError
from pycaffe_lite.net import Net
from pycaffe_lite.net_graph import insert_splits
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.proto import protoio

IP_NET = """
name: "ipnet"
layer { name: "data" type: "Input" top: "x" top: "y"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""


def write(tmp_path, text, name="net.prototxt"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_forward_backward_against_numpy(tmp_path):
    caffe.set_random_seed(3)
    net = Net(write(tmp_path, IP_NET), caffe.TRAIN)
    assert net.inputs == ["x", "y"] and net.outputs == ["loss"]
    assert list(net.params) == ["ip"] and net.params["ip"][0].shape == (2, 3)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    out = net.forward(x=x, y=y)
    W, b = net.params["ip"][0].data.astype(np.float64), net.params["ip"][1].data
    np.testing.assert_allclose(b, 0.1)
    z = x @ W.T + b
    loss = ((z - y) ** 2).sum() / 4 / 2
    np.testing.assert_allclose(out["loss"], loss, rtol=1e-5)
    net.clear_param_diffs()
    net.backward()
    dz = (z - y) / 4
    np.testing.assert_allclose(net.params["ip"][0].diff, dz.T @ x, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(net.params["ip"][1].diff, dz.sum(0), rtol=1e-4, atol=1e-6)
    assert net.params_lr == [1, 2] and net.params_weight_decay == [1, 0]


def test_constructor_forms_and_phase(tmp_path):
    path = write(tmp_path, IP_NET)
    net = Net(path, caffe.TEST)
    weights = str(tmp_path / "w.caffemodel")
    net.params["ip"][0].data[...] = 7
    net.save(weights)
    for other in (Net(path, weights, caffe.TEST), Net(path, caffe.TEST, weights=weights)):
        assert (other.params["ip"][0].data == 7).all()
    with pytest.raises(CaffeError, match="and a phase"):
        Net(path)
    # pycaffe's keywords (BVLC's Net_Init: network_file, phase, level, stages=None, weights)
    other = Net(network_file=path, phase=caffe.TEST, level=0, stages=None, weights=weights)
    assert (other.params["ip"][0].data == 7).all() and other.phase == caffe.TEST
    with pytest.raises(CaffeError, match="needs a net definition"):
        Net(phase=caffe.TEST)


STATE_NET = """
layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }
layer { name: "train_only" type: "ReLU" bottom: "x" top: "a" include { phase: TRAIN } }
layer { name: "test_only" type: "ReLU" bottom: "x" top: "b" include { phase: TEST } }
layer { name: "not_test" type: "ReLU" bottom: "x" top: "c" exclude { phase: TEST } }
layer { name: "staged" type: "ReLU" bottom: "x" top: "d" include { stage: "deploy" } }
layer { name: "leveled" type: "ReLU" bottom: "x" top: "e" include { min_level: 2 } }
layer { name: "not_staged" type: "ReLU" bottom: "x" top: "f" include { not_stage: "deploy" } }
"""


def test_include_exclude_by_phase_stage_level():
    names = lambda net: [n for n in net.layer_names if "split" not in n]  # noqa: E731
    assert names(Net(STATE_NET, caffe.TRAIN)) == ["data", "train_only", "not_test",
                                                  "not_staged"]
    assert names(Net(STATE_NET, caffe.TEST)) == ["data", "test_only", "not_staged"]
    assert names(Net(STATE_NET, caffe.TEST, stages=["deploy"], level=3)) == \
        ["data", "test_only", "staged", "leveled"]


def test_split_insertion_names_and_sharing():
    text = """
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r1" type: "ReLU" bottom: "data" top: "a" }
layer { name: "r2" type: "ReLU" bottom: "data" top: "b" }
layer { name: "loss" type: "EuclideanLoss" bottom: "a" bottom: "b" top: "loss" }
"""
    net = Net(text, caffe.TRAIN, )
    # Caffe's names: the blob's, then its producer's
    assert net.layer_names == ["in", "data_in_0_split", "r1", "r2", "loss"]
    assert net.top_names["data_in_0_split"] == ["data_in_0_split_0", "data_in_0_split_1"]
    assert net.bottom_names["r1"] == ["data_in_0_split_0"]
    assert net.bottom_names["r2"] == ["data_in_0_split_1"]
    x = np.array([[1.0, -2, 3], [-1, 0, 2]])
    net.forward(data=x)
    np.testing.assert_array_equal(net.blobs["a"].data, np.maximum(x, 0))


def test_split_for_a_loss_top_that_is_also_consumed():
    param = protoio.parse_text("""
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "l" type: "EuclideanLoss" bottom: "x" bottom: "x" top: "loss" loss_weight: 2 }
layer { name: "r" type: "ReLU" bottom: "loss" top: "r" }
""", caffe_pb2.NetParameter())
    out = insert_splits(param)
    split = [lp for lp in out.layer if lp.type == "Split" and lp.bottom[0] == "loss"][0]
    assert split.name == "loss_l_0_split"
    assert list(split.top) == ["loss_l_0_split_0", "loss_l_0_split_1"]
    assert list(split.loss_weight) == [2, 0]
    assert not [lp for lp in out.layer if lp.name == "l"][0].loss_weight
    assert [lp for lp in out.layer if lp.name == "r"][0].bottom[0] == "loss_l_0_split_1"


def test_in_place_and_backward_need():
    text = """
force_backward: false
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 3 } }
layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
layer { name: "side" type: "ReLU" bottom: "h" top: "unused" }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "t" top: "loss" }
"""
    net = Net(text, caffe.TRAIN)
    need = {rec.name: rec.need_backward for rec in net.records}
    assert need["ip"] and need["relu"] and need["loss"]
    assert not need["side"] and not need["in"]
    assert net.blobs["h"] is net.records[net.layer_index("relu")].tops[0]  # in place
    # the input needs no gradient
    assert net.records[net.layer_index("ip")].bottom_need_backward == [False]
    forced = Net(text.replace("force_backward: false", "force_backward: true"), caffe.TRAIN)
    assert forced.records[forced.layer_index("ip")].bottom_need_backward == [True]
    assert all(rec.need_backward for rec in forced.records)



def test_a_layer_that_changes_its_blobs_shape_cannot_run_in_place():
    """A Pooling of stride 2 in place on a convolution's top would reshape the blob under its
    own input: the net refuses it at setup, naming the layer, the blob and both shapes (it ran
    and gave -FLT_MAX and garbage, or failed later on the input's shape)."""
    text = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "pool" type: "Pooling" bottom: "c" top: "c"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
"""
    with pytest.raises(NetError, match=r"layer 'pool' \(type Pooling\) cannot run in place on "
                                       r"blob 'c': its top has shape \(2, 4, 3, 3\), its bottom "
                                       r"\(2, 4, 6, 6\)"):
        Net(text, caffe.TEST)
    # a stride-1 pooling that keeps the shape may run in place
    kept = Net(text.replace("kernel_size: 2 stride: 2", "kernel_size: 3 stride: 1 pad: 1"),
               caffe.TEST)
    assert kept.blobs["c"].shape == (2, 4, 6, 6)

def test_propagate_down_and_lr_mult_zero():
    text = """
layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h" param { lr_mult: 0 }
        param { lr_mult: 0 } inner_product_param { num_output: 3 } }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "z"
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "t" top: "loss"
        propagate_down: true propagate_down: false }
"""
    net = Net(text.replace("dim: 3 } } }", "dim: 3 } shape { dim: 2 dim: 2 } } }"), caffe.TRAIN)
    need = {rec.name: rec.need_backward for rec in net.records}
    assert need["ip2"] and not need["ip1"]
    assert net.layer_dict["ip1"].param_propagate_down == [False, False]
    assert net.records[net.layer_index("loss")].bottom_need_backward == [True, False]


def test_shared_params_by_name():
    text = """
layer { name: "in" type: "Input" top: "a" top: "b" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "a" top: "ya" param { name: "w" }
        inner_product_param { num_output: 4 bias_term: false
        weight_filler { type: "gaussian" } } }
layer { name: "ip2" type: "InnerProduct" bottom: "b" top: "yb" param { name: "w" }
        inner_product_param { num_output: 4 bias_term: false } }
"""
    net = Net(text, caffe.TRAIN)
    w1, w2 = net.params["ip1"][0], net.params["ip2"][0]
    np.testing.assert_array_equal(w1.data, w2.data)
    w1.data[0, 0] = 42
    assert w2.data[0, 0] == 42
    assert len(net.learnable_params) == 1 and net.param_owners == [-1, 0]
    bad = text.replace("num_output: 4 bias_term: false }", "num_output: 5 bias_term: false }")
    with pytest.raises(ShapeError, match="cannot share param 'w'"):
        Net(bad, caffe.TRAIN)


def test_forward_range_and_inputs(tmp_path):
    net = Net(write(tmp_path, IP_NET), caffe.TEST)
    x = np.ones((4, 3), np.float32)
    out = net.forward(end="ip", x=x, y=np.zeros((4, 2)))
    assert set(out) == {"z"}
    z = out["z"].copy()
    net.blobs["z"].data[...] = 0
    net.forward(start="loss")
    assert net.blobs["loss"].data == pytest.approx(0.0)
    net.forward(start="ip", end="ip")
    np.testing.assert_array_equal(net.blobs["z"].data, z)
    with pytest.raises(ShapeError, match="input 'x' has shape"):
        net.forward(x=np.ones((5, 3)))
    with pytest.raises(NetError, match="not a blob"):
        net.forward(nope=x)


def test_reshape_propagates(tmp_path):
    net = Net(write(tmp_path, IP_NET), caffe.TEST)
    net.blobs["x"].reshape(7, 3)
    net.blobs["y"].reshape(7, 2)
    net.reshape()
    assert net.blobs["z"].shape == (7, 2)
    net.forward()


def test_legacy_input_fields_become_input_layer():
    text = 'input: "data" input_dim: 2 input_dim: 3 input_dim: 4 input_dim: 5\n' \
           'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }'
    net = Net(text, caffe.TEST)
    assert net.inputs == ["data"] and net.blobs["data"].shape == (2, 3, 4, 5)


def test_save_load_caffemodel_and_hdf5(tmp_path):
    pytest.importorskip("h5py")
    path = write(tmp_path, IP_NET)
    caffe.set_random_seed(1)
    a = Net(path, caffe.TEST)
    a.params["ip"][1].data[...] = [3, 4]
    for name in ("w.caffemodel", "w.h5"):
        a.save(str(tmp_path / name))
        b = Net(path, caffe.TEST)
        b.copy_from(str(tmp_path / name))
        for pa, pb in zip(a.params["ip"], b.params["ip"]):
            np.testing.assert_array_equal(pa.data, pb.data)
    saved = protoio.read_binary(str(tmp_path / "w.caffemodel"), caffe_pb2.NetParameter())
    ip = [lp for lp in saved.layer if lp.name == "ip"][0]
    assert list(ip.blobs[0].shape.dim) == [2, 3] and list(ip.blobs[1].data) == [3, 4]


def test_copy_from_shape_mismatch_names_layer_and_shapes(tmp_path):
    a = Net(write(tmp_path, IP_NET), caffe.TEST)
    a.save(str(tmp_path / "w.caffemodel"))
    other = IP_NET.replace("num_output: 2", "num_output: 5")
    other = other.replace("dim: 4 dim: 2", "dim: 4 dim: 5")
    b = Net(write(tmp_path, other, "other.prototxt"), caffe.TEST)
    with pytest.raises(ShapeError) as err:
        b.copy_from(str(tmp_path / "w.caffemodel"))
    msg = str(err.value)
    assert "w.caffemodel" in msg and "layer 'ip'" in msg
    assert "2 3 (6)" in msg and "5 3 (15)" in msg


def test_truncated_caffemodel(tmp_path):
    a = Net(write(tmp_path, IP_NET), caffe.TEST)
    a.save(str(tmp_path / "w.caffemodel"))
    data = (tmp_path / "w.caffemodel").read_bytes()
    (tmp_path / "cut.caffemodel").write_bytes(data[: len(data) - 7])
    with pytest.raises(ProtoError, match="cut.caffemodel.*truncated"):
        a.copy_from(str(tmp_path / "cut.caffemodel"))
    with pytest.raises(ProtoError, match="not found"):
        a.copy_from(str(tmp_path / "missing.caffemodel"))


def test_bad_nets_give_clear_errors(tmp_path):
    bad_text = write(tmp_path, 'layer { name: "a" type: "Input" top: "x"\n'
                               '  input_param { shap {} } }', "bad.prototxt")
    with pytest.raises(ProtoError, match=r"bad.prototxt:2:\d+.*shap"):
        Net(bad_text, caffe.TEST)
    with pytest.raises(NetError, match="unknown bottom blob 'nope'.*layer 'r'|layer 'r'.*nope"):
        Net('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
            'layer { name: "r" type: "ReLU" bottom: "nope" top: "y" }', caffe.TEST)
    with pytest.raises(NetError, match="'x' is produced by more than one layer"):
        Net('layer { name: "a" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
            'layer { name: "b" type: "Input" top: "x" input_param { shape { dim: 1 } } }',
            caffe.TEST)
    with pytest.raises(CaffeError, match="unknown layer type 'Relu'.*did you mean 'ReLU'"):
        Net('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
            'layer { name: "r" type: "Relu" bottom: "x" top: "y" }', caffe.TEST)
    with pytest.raises(LayerError, match="layer 'loss'"):
        Net('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
            'layer { name: "loss" type: "EuclideanLoss" bottom: "x" top: "y" }', caffe.TEST)
    with pytest.raises(ProtoError, match="not found"):
        Net(str(tmp_path / "missing.prototxt"), caffe.TEST)
    assert not os.path.exists(tmp_path / "missing.prototxt")


def test_to_proto_round_trip(tmp_path):
    a = Net(write(tmp_path, IP_NET), caffe.TEST)
    p = a.to_proto()
    assert [lp.name for lp in p.layer] == a.layer_names
    b = Net(p, caffe.TEST)
    np.testing.assert_array_equal(b.params["ip"][0].data, a.params["ip"][0].data)


def test_to_proto_writes_each_layer_into_the_nets_own_entry(tmp_path):
    """Net.to_proto has each layer write itself into its entry of the NetParameter
    (Layer.to_proto's ``proto``), the weights copied once: the entries are the layers' own
    LayerParameters, blobs and diffs included."""
    net = Net(write(tmp_path, IP_NET), caffe.TRAIN)
    net.params["ip"][0].diff[...] = [[0.5, -1.0, 2.0], [3.0, 0.25, -4.0]]
    for write_diff in (False, True):
        param = net.to_proto(write_diff)
        assert len(param.layer) == len(net.layers)
        for entry, layer in zip(param.layer, net.layers):
            assert entry == layer.to_proto(write_diff)
        ip = param.layer[net.layer_names.index("ip")]
        np.testing.assert_array_equal(ip.blobs[0].data, net.params["ip"][0].data.ravel())
        assert list(ip.blobs[0].diff) == ([0.5, -1.0, 2.0, 3.0, 0.25, -4.0] if write_diff
                                          else [])
    layer = net.layers[net.layer_names.index("ip")]
    mine = caffe_pb2.LayerParameter(name="stale", blobs=[caffe_pb2.BlobProto(data=[9.0])])
    assert layer.to_proto(proto=mine) is mine
    assert mine == layer.to_proto() and mine.name == "ip" and len(mine.blobs) == 2


def test_copy_from_v1_caffemodel(tmp_path):
    """A weights file in the V1 format (``layers {}`` with legacy 4-D blobs) loads by name."""
    net = Net(write(tmp_path, IP_NET), caffe.TEST)
    old = caffe_pb2.NetParameter()
    v1 = old.layers.add()
    v1.name = "ip"
    v1.type = caffe_pb2.V1LayerParameter.INNER_PRODUCT
    w = v1.blobs.add(num=1, channels=1, height=2, width=3)
    w.data.extend([1, 2, 3, 4, 5, 6])
    b = v1.blobs.add(num=1, channels=1, height=1, width=2)
    b.data.extend([7, 8])
    (tmp_path / "old.caffemodel").write_bytes(old.SerializeToString())
    net.copy_from(str(tmp_path / "old.caffemodel"))
    np.testing.assert_array_equal(net.params["ip"][0].data, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(net.params["ip"][1].data, [7, 8])


def test_float64_net_for_gradient_work(tmp_path):
    net = Net(write(tmp_path, IP_NET), caffe.TRAIN, dtype=np.float64)
    assert net.blobs["z"].data.dtype == np.float64
    assert net.params["ip"][0].data.dtype == np.float64


def test_forward_all_batches_and_unpads(tmp_path):
    net = Net(write(tmp_path, IP_NET), caffe.TEST)
    W = net.params["ip"][0].data.astype(np.float64)
    b = net.params["ip"][1].data
    x = np.random.default_rng(1).standard_normal((10, 3))  # batch size 4: 4 + 4 + 2 (padded)
    out = net.forward_all(blobs=["z"], x=x, y=np.zeros((10, 2)))
    assert out["z"].shape == (10, 2) and out["loss"].shape == (3,)
    np.testing.assert_allclose(out["z"], x @ W.T + b, rtol=1e-5, atol=1e-6)


def test_forward_backward_all_and_hooks(tmp_path):
    text = IP_NET.replace('name: "ipnet"', 'name: "ipnet" force_backward: true')
    net = Net(write(tmp_path, text), caffe.TRAIN)
    seen = []
    net.before_forward(lambda i: seen.append(("f", net.layer_names[i])))
    net.after_backward(lambda i: seen.append(("b", net.layer_names[i])))
    x = np.random.default_rng(2).standard_normal((8, 3))
    y = np.zeros((8, 2))
    outs, diffs = net.forward_backward_all(x=x, y=y)
    W = net.params["ip"][0].data.astype(np.float64)
    z = x @ W.T + net.params["ip"][1].data
    # d loss / d x for a batch of 4: (z - y) / 4 @ W
    np.testing.assert_allclose(diffs["x"], (z - y) / 4 @ W, rtol=1e-4, atol=1e-6)
    assert outs["loss"].shape == (2,)
    assert seen[:3] == [("f", "data"), ("f", "ip"), ("f", "loss")]
    assert ("b", "ip") in seen


def test_batchnorm_statistics_are_not_learnable():
    net = Net("""
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: 2 dim: 2 } } }
layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" }
""", caffe.TRAIN)
    assert net.params_lr == [0, 0, 0]
    assert net.layer_dict["bn"].param_propagate_down == [False, False, False]


TWO_OUTPUTS = """
name: "two_outputs"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 5 } } }
layer { name: "feat" type: "InnerProduct" bottom: "data" top: "zfeat"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "split" type: "Split" bottom: "zfeat" top: "zfeat_a" top: "Zfeat_b" }
layer { name: "prob" type: "Softmax" bottom: "zfeat_a" top: "prob" }
"""


def test_outputs_are_in_name_order_as_caffe_keeps_them(tmp_path):
    # Caffe's Net::Init lists the blobs no layer consumes from a std::set<string>: byte
    # order of the names ("Z" < "p" < "z"), not the order the layers made them
    net = Net(write(tmp_path, TWO_OUTPUTS), caffe.TEST)
    assert net.outputs == ["Zfeat_b", "prob"]
    out = net.forward(data=np.ones((2, 5), np.float32))
    assert list(out) == ["Zfeat_b", "prob"]
    np.testing.assert_allclose(out["prob"].sum(1), 1, rtol=1e-6)


def test_pycaffe_index_lists(tmp_path):
    # BVLC's pycaffe derives inputs, outputs, top_names and bottom_names from these
    net = Net(write(tmp_path, TWO_OUTPUTS), caffe.TEST)
    names = net._blob_names
    assert [names[i] for i in net._inputs] == net.inputs == ["data"]
    assert [names[i] for i in net._outputs] == net.outputs
    for i, layer in enumerate(net._layer_names):
        assert [names[j] for j in net._top_ids(i)] == net.top_names[layer]
        assert [names[j] for j in net._bottom_ids(i)] == net.bottom_names[layer]
    assert net._top_ids(2) == [names.index("zfeat_a"), names.index("Zfeat_b")]
    with pytest.raises(NetError, match="invalid layer id 4: net 'two_outputs' has layers 0 "
                                       "to 3"):
        net._top_ids(4)


def test_a_weights_file_given_as_the_net_definition_is_named(tmp_path):
    # a .caffemodel is a binary NetParameter with blobs: given as the model, it is named
    # when its net cannot be built (here its Input layer is a TRAIN-phase one)
    text = IP_NET.replace('layer { name: "data" type: "Input" top: "x" top: "y"',
                          'layer { name: "data" type: "Input" top: "x" top: "y" '
                          'include { phase: TRAIN }')
    weights = str(tmp_path / "ip.caffemodel")
    Net(write(tmp_path, text), caffe.TRAIN).save(weights)
    with pytest.raises(CaffeError, match="ip.caffemodel is a weights file \\(a binary "
                                         "NetParameter whose layers hold blobs\\), not a net "
                                         "definition: give the net's prototxt as the model"
                                         ".*unknown bottom blob 'x'"):
        Net(weights, weights, caffe.TEST)
    # a binary net definition without blobs that fails to build keeps its own error
    param = protoio.read_net_param(write(tmp_path, text, "def.prototxt"))
    binary = tmp_path / "net.binaryproto"
    binary.write_bytes(param.SerializeToString())
    with pytest.raises(CaffeError) as info:
        Net(str(binary), caffe.TEST)
    assert "unknown bottom blob 'x'" in str(info.value)
    assert "weights file" not in str(info.value)


TWO_IP_NET = """
name: "twoip"
layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h" param { name: "w1" }
        inner_product_param { num_output: 3 bias_term: false
                              weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "ip3" type: "InnerProduct" bottom: "h" top: "t" param { name: "w1" }
        inner_product_param { num_output: 3 bias_term: false
                              weight_filler { type: "gaussian" std: 0.5 } } }
"""


def test_a_deploy_net_whose_layer_is_missing_from_the_weights_file_warns(tmp_path, caplog):
    """Caffe copies by layer name and leaves a layer the file does not name at its filler
    values, silently: a renamed layer in a deploy net then runs on random weights. A TEST
    net built with its weights warns, naming the layer; ip3, which shares ip1's weights,
    is filled through ip1 and not named."""
    trained = Net(write(tmp_path, TWO_IP_NET), caffe.TEST)
    trained.save(str(tmp_path / "w.caffemodel"))
    renamed = write(tmp_path, TWO_IP_NET.replace('"ip2"', '"fc_new"'), "renamed.prototxt")
    with caplog.at_level("WARNING", logger="pycaffe_lite"):
        net = Net(renamed, str(tmp_path / "w.caffemodel"), caffe.TEST)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "no weights for layer 'fc_new' of net 'twoip'" in warned[0]
    assert "w.caffemodel" in warned[0] and "ip3" not in warned[0]
    np.testing.assert_array_equal(net.params["ip1"][0].data, trained.params["ip1"][0].data)
    caplog.clear()
    with caplog.at_level("WARNING", logger="pycaffe_lite"):
        Net(write(tmp_path, TWO_IP_NET, "same.prototxt"), str(tmp_path / "w.caffemodel"),
            caffe.TEST)  # every layer in the file
        Net(renamed, caffe.TRAIN).copy_from(str(tmp_path / "w.caffemodel"))  # fine-tuning
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
