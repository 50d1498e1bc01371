"""BVLC Caffe's net-construction cases (src/caffe/test/test_net.cpp, test_split_layer.cpp)
checked against pycaffe-lite: the nets, names, backward flags and values BVLC expects, where
tests/test_net.py does not already hold them."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import NetError
from pycaffe_lite.net import Net
from pycaffe_lite.net_graph import filter_net, insert_splits
from pycaffe_lite.proto import caffe_pb2, protoio

# BVLC's cases as a reference table: the slow tier (CI), not the everyday one
pytestmark = pytest.mark.slow


def param(text):
    return protoio.parse_text(text, caffe_pb2.NetParameter())


# ---- InsertSplits: BVLC's input nets and the nets it expects --------------------------------
def layers(*specs):
    """'name type bottoms>tops [extra]' -> layer text; bottoms/tops comma separated."""
    out = []
    for spec in specs:
        head, _, extra = spec.partition(" | ")
        name, kind, wires = head.split()
        bottoms, tops = wires.split(">")
        out.append("layer { name: '%s' type: '%s' %s %s %s }" % (
            name, kind, " ".join("bottom: '%s'" % b for b in bottoms.split(",") if b),
            " ".join("top: '%s'" % t for t in tops.split(",") if t), extra))
    return "\n".join(out)


SPLIT_CASES = {
    # BVLC test_split_layer.cpp TestInsertionTwoTop: both tops of 'data' are split, the second
    # one's names carry its top index 1
    "two_top": (
        layers("data Data >data,label", "innerprod1 InnerProduct data>innerprod1",
               "innerprod2 InnerProduct label>innerprod2",
               "innerprod3 InnerProduct data>innerprod3",
               "innerprod4 InnerProduct label>innerprod4",
               "loss1 EuclideanLoss innerprod1,innerprod3>",
               "loss2 EuclideanLoss innerprod2,innerprod4>"),
        layers("data Data >data,label",
               "data_data_0_split Split data>data_data_0_split_0,data_data_0_split_1",
               "label_data_1_split Split label>label_data_1_split_0,label_data_1_split_1",
               "innerprod1 InnerProduct data_data_0_split_0>innerprod1",
               "innerprod2 InnerProduct label_data_1_split_0>innerprod2",
               "innerprod3 InnerProduct data_data_0_split_1>innerprod3",
               "innerprod4 InnerProduct label_data_1_split_1>innerprod4",
               "loss1 EuclideanLoss innerprod1,innerprod3>",
               "loss2 EuclideanLoss innerprod2,innerprod4>")),
    # BVLC TestWithInPlace: the split of an in-place blob is named after the in-place layer
    # (relu1), and comes right after it
    "in_place": (
        layers("data Data >data,label", "innerprod1 InnerProduct data>innerprod1",
               "relu1 ReLU innerprod1>innerprod1", "innerprod2 InnerProduct innerprod1>innerprod2",
               "loss1 EuclideanLoss innerprod1,label>", "loss2 EuclideanLoss innerprod2,data>"),
        layers("data Data >data,label",
               "data_data_0_split Split data>data_data_0_split_0,data_data_0_split_1",
               "innerprod1 InnerProduct data_data_0_split_0>innerprod1",
               "relu1 ReLU innerprod1>innerprod1",
               "innerprod1_relu1_0_split Split innerprod1>innerprod1_relu1_0_split_0,"
               "innerprod1_relu1_0_split_1",
               "innerprod2 InnerProduct innerprod1_relu1_0_split_0>innerprod2",
               "loss1 EuclideanLoss innerprod1_relu1_0_split_1,label>",
               "loss2 EuclideanLoss innerprod2,data_data_0_split_1>")),
    # BVLC TestLossInsertion: a loss_weight counts as a consumer; the split's first top takes
    # the weight, the producer loses it
    "loss": (
        layers("data DummyData >data", "innerproduct1 InnerProduct data>innerproduct1 | "
               "loss_weight: 2.5", "innerproduct2 InnerProduct data>innerproduct2",
               "loss EuclideanLoss innerproduct1,innerproduct2>"),
        layers("data DummyData >data",
               "data_data_0_split Split data>data_data_0_split_0,data_data_0_split_1",
               "innerproduct1 InnerProduct data_data_0_split_0>innerproduct1",
               "innerproduct1_innerproduct1_0_split Split innerproduct1>"
               "innerproduct1_innerproduct1_0_split_0,innerproduct1_innerproduct1_0_split_1 | "
               "loss_weight: 2.5 loss_weight: 0",
               "innerproduct2 InnerProduct data_data_0_split_1>innerproduct2",
               "loss EuclideanLoss innerproduct1_innerproduct1_0_split_1,innerproduct2>")),
    # BVLC TestNoInsertion2: a net that already holds its Split layer is left as it is
    "already_split": (
        layers("data Data >data,label", "data_split Split data>data_split_0,data_split_1",
               "innerprod1 InnerProduct data_split_0>innerprod1",
               "innerprod2 InnerProduct data_split_1>innerprod2",
               "loss EuclideanLoss innerprod1,innerprod2>"),
        None),
}


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_insert_splits_gives_bvlcs_expected_net(case):
    given, expected = SPLIT_CASES[case]
    out = insert_splits(param("name: 'TestNetwork' " + given))
    assert out == param("name: 'TestNetwork' " + (expected or given))
    assert insert_splits(out) == out  # BVLC's RunInsertionTest: idempotent


# ---- FilterNet: which layers a NetState keeps ------------------------------------------------
RULED = "name: 'TestNetwork' " + layers(
    "data Data >data,label", "innerprod InnerProduct data>innerprod | INNERPROD",
    "loss SoftmaxWithLoss innerprod,label> | LOSS")


@pytest.mark.parametrize("state,innerprod,loss,kept", [
    # BVLC test_net.cpp TestFilterOutByMultipleStage: a rule needs all of its stages
    ("stage: 'mystage'", "include: { stage: 'mystage' stage: 'myotherstage' }",
     "include: { stage: 'mystage' }", ["data", "loss"]),
    # TestFilterInByMultipleStage: any one of several include rules is enough
    ("stage: 'mystage'", "include: { stage: 'myotherstage' } include: { stage: 'mystage' }",
     "include: { stage: 'mystage' }", ["data", "innerprod", "loss"]),
    # TestFilterInByMultipleStage2
    ("stage: 'mystage' stage: 'myotherstage'",
     "include: { stage: 'mystage' stage: 'myotherstage' }", "include: { stage: 'mystage' }",
     ["data", "innerprod", "loss"]),
    # TestFilterOutByNotStage / TestFilterInByNotStage
    ("stage: 'mystage'", "include: { not_stage: 'mystage' }",
     "include: { not_stage: 'mystage' }", ["data"]),
    ("stage: 'mystage'", "include: { not_stage: 'myotherstage' }",
     "include: { not_stage: 'myotherstage' }", ["data", "innerprod", "loss"]),
    # TestFilterInByStage2: an exclude rule the state does not meet keeps the layer
    ("", "exclude: { stage: 'mystage' }", "", ["data", "innerprod", "loss"]),
    # TestFilterOutByMaxLevel / TestFilterInByMaxLevel2 / TestFilterInByMinLevel2
    ("", "include: { max_level: -3 }", "", ["data", "loss"]),
    ("level: -7", "include: { max_level: -3 }", "", ["data", "innerprod", "loss"]),
    ("level: 7", "include: { min_level: 3 }", "", ["data", "innerprod", "loss"]),
    # TestFilterInOutByIncludeMultiRule
    ("level: 4 phase: TRAIN", "include: { min_level: 2 phase: TRAIN }",
     "include: { min_level: 2 phase: TEST }", ["data", "innerprod"]),
    ("level: 4 phase: TEST", "include: { min_level: 2 phase: TRAIN }",
     "include: { min_level: 2 phase: TEST }", ["data", "loss"]),
    # TestFilterInByIncludeMultiRule
    ("level: 2 phase: TEST", "include: { min_level: 2 phase: TRAIN } include: { phase: TEST }",
     "include: { min_level: 2 phase: TEST } include: { phase: TRAIN }",
     ["data", "innerprod", "loss"]),
    # TestFilterInOutByExcludeMultiRule
    ("level: 4 phase: TRAIN", "exclude: { min_level: 2 phase: TRAIN }",
     "exclude: { min_level: 2 phase: TEST }", ["data", "loss"]),
    ("level: 4 phase: TEST", "exclude: { min_level: 2 phase: TRAIN }",
     "exclude: { min_level: 2 phase: TEST }", ["data", "innerprod"]),
])
def test_filter_net_keeps_the_layers_bvlc_keeps(state, innerprod, loss, kept):
    given = param("state: { %s } " % state + RULED.replace("INNERPROD", innerprod)
                  .replace("LOSS", loss))
    out = filter_net(given)
    assert [lp.name for lp in out.layer] == kept
    assert out.state == given.state
    assert [lp for lp in out.layer] == [lp for lp in given.layer if lp.name in kept]
    assert filter_net(out) == out


def test_all_in_one_net_train_val_deploy(tmp_path):
    # BVLC test_net.cpp TestAllInOneNetTrain/Val/Deploy: one file, three nets by phase and stage
    model = tmp_path / "all.prototxt"
    model.write_text("""name: 'All-in-one Network'
layer { name: 'train-data' type: 'DummyData' top: 'data' top: 'label'
  dummy_data_param { shape { dim: 1 dim: 10 } shape { dim: 1 dim: 1 } }
  include { phase: TRAIN stage: 'train' } }
layer { name: 'val-data' type: 'DummyData' top: 'data' top: 'label'
  dummy_data_param { shape { dim: 1 dim: 10 } shape { dim: 1 dim: 1 } }
  include { phase: TEST stage: 'val' } }
layer { name: 'deploy-data' type: 'Input' top: 'data' input_param { shape { dim: 1 dim: 10 } }
  include { phase: TEST stage: 'deploy' } }
layer { name: 'ip' type: 'InnerProduct' bottom: 'data' top: 'ip'
  inner_product_param { num_output: 2 } }
layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'ip' bottom: 'label' top: 'loss'
  include { phase: TRAIN stage: 'train' } include { phase: TEST stage: 'val' } }
""")
    for phase, stage, names in ((caffe.TRAIN, "train", ["train-data", "ip", "loss"]),
                                (caffe.TEST, "val", ["val-data", "ip", "loss"]),
                                (caffe.TEST, "deploy", ["deploy-data", "ip"])):
        assert Net(str(model), phase, level=0, stages=[stage]).layer_names == names


# ---- which layers and bottoms need backward -------------------------------------------------
DUMMY_2 = """layer { name: 'data' type: 'DummyData' top: 'data' top: 'label'
  dummy_data_param { num: 5 channels: 2 height: 3 width: 4 num: 5 channels: 1 height: 1 width: 1
                     data_filler { type: 'gaussian' std: 0.01 } } }
"""
IP = """layer { name: '%s' type: 'InnerProduct' bottom: '%s' top: '%s'
  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
  inner_product_param { num_output: %d weight_filler { type: 'gaussian' std: 0.01 } } }
"""


def flags(net):
    return {r.name: (r.need_backward, list(r.bottom_need_backward)) for r in net.records}


def test_bottom_need_backward_of_the_tricky_net():
    # BVLC test_net.cpp TestBottomNeedBackwardTricky (two layers named 'innerproduct'): the
    # label input of the loss "needs backward" since a layer with weights is under it
    net = Net.from_param(param(DUMMY_2 + IP % ("innerproduct", "data", "transformed_data", 1000)
                               + IP % ("innerproduct", "label", "transformed_label", 1) +
                               "layer { name: 'loss' type: 'SoftmaxWithLoss' "
                               "bottom: 'transformed_data' bottom: 'transformed_label' }"))
    assert [list(r.bottom_need_backward) for r in net.records] == \
        [[], [False], [False], [True, True]]


def test_euclidean_force_backward_reaches_both_bottoms():
    # BVLC TestBottomNeedBackwardEuclideanForce: EuclideanLoss allows force_backward to its
    # second bottom (SoftmaxWithLoss does not: tests/test_net.py)
    net = Net.from_param(param("force_backward: true " + DUMMY_2 +
                               IP % ("innerproduct", "data", "innerproduct", 1) +
                               "layer { name: 'loss' type: 'EuclideanLoss' "
                               "bottom: 'innerproduct' bottom: 'label' }"))
    assert [list(r.bottom_need_backward) for r in net.records] == [[], [True], [True, True]]


SKIP_PROP = """layer { name: 'data' type: 'DummyData' top: 'data' top: 'label'
  dummy_data_param { shape { dim: 5 dim: 2 dim: 3 dim: 4 }
                     data_filler { type: 'gaussian' std: 0.01 }
                     shape { dim: 5 } data_filler { type: 'constant' value: 0 } } }
layer { name: 'silence' type: 'Silence' bottom: 'label' }
""" + IP % ("innerproduct", "data", "innerproduct", 1) + """
layer { name: 'ip_fake_labels' type: 'InnerProduct' bottom: 'data' top: 'fake_labels'
  inner_product_param { num_output: 1 weight_filler { type: 'gaussian' std: 0.01 } } }
layer { name: 'argmax' type: 'ArgMax' bottom: 'fake_labels' top: 'label_argmax' }
layer { name: 'loss' type: 'SigmoidCrossEntropyLoss' bottom: 'innerproduct' bottom: 'label_argmax'
  propagate_down: true propagate_down: LABEL top: 'cross_entropy_loss' loss_weight: 0.1 }
"""


@pytest.mark.parametrize("label,needing", [
    ("true", {"innerproduct", "ip_fake_labels", "argmax", "loss"}),
    ("false", {"innerproduct", "loss"}),
])
def test_skip_propagate_down_prunes_the_branch_under_the_label(label, needing):
    # BVLC test_net.cpp TestSkipPropagateDown
    net = Net.from_param(param(SKIP_PROP.replace("LABEL", label)))
    got = flags(net)
    assert {name for name, (need, _) in got.items() if need} == needing
    assert got["loss"][1] == [True, label == "true"]
    assert "data_data_0_split" in got  # 'data' feeds three layers


@pytest.mark.parametrize("propagate,data_needs", [("", False), ("propagate_down: true", True)])
def test_propagate_down_forces_a_gradient_to_data(propagate, data_needs):
    # BVLC test_net.cpp TestForcePropagateDown
    net = Net.from_param(param("""
layer { name: 'data' type: 'DummyData' top: 'data' top: 'label'
  dummy_data_param { shape { dim: 5 dim: 2 dim: 3 dim: 4 } shape { dim: 5 } } }
layer { name: 'innerproduct' type: 'InnerProduct' bottom: 'data' top: 'innerproduct' %s
  inner_product_param { num_output: 1 } }
layer { name: 'loss' type: 'SigmoidCrossEntropyLoss' bottom: 'innerproduct' bottom: 'label'
  top: 'cross_entropy_loss' }""" % propagate))
    assert flags(net) == {"data": (False, []), "innerproduct": (True, [data_needs]),
                          "loss": (True, [True, False])}


# ---- loss weights: BVLC's UnsharedWeightsNetwork -------------------------------------------
def unshared_net(loss_weight=None, midnet_loss_weight=None, bias=False, lrs=(1, 2, 1, 2),
                 force_backward=True):
    """BVLC test_net.cpp InitUnsharedWeightsNet; lrs = (w1, b1, w2, b2) lr_mults."""
    def ip(i, lr_w, lr_b, extra):
        return ("layer { name: 'innerproduct%d' type: 'InnerProduct' bottom: 'data' "
                "top: 'innerproduct%d' param { name: 'unsharedweights%d' lr_mult: %g } %s %s "
                "inner_product_param { num_output: 10 bias_term: %s "
                "weight_filler { type: 'gaussian' std: 10 } } }\n"
                % (i, i, i, lr_w, "param { lr_mult: %g }" % lr_b if bias else "", extra,
                   "true" if bias else "false"))
    weight = lambda w: "" if w is None else "loss_weight: %g" % w  # noqa: E731
    caffe.set_random_seed(1701)
    return Net.from_param(param(
        ("force_backward: true " if force_backward else "") +
        "layer { name: 'data' type: 'DummyData' top: 'data' dummy_data_param { num: 5 "
        "channels: 2 height: 3 width: 4 data_filler { type: 'gaussian' std: 0.01 } } }\n" +
        ip(1, lrs[0], lrs[1], weight(midnet_loss_weight)) + ip(2, lrs[2], lrs[3], "") +
        "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'innerproduct1' "
        "bottom: 'innerproduct2' %s }" % weight(loss_weight)))


@pytest.mark.parametrize("loss_weight,midnet_loss_weight", [
    (None, None), (2, None), (-2.5, None),        # BVLC TestLossWeight (default weight 1)
    (0, 3.7), (0, -1),                            # TestLossWeightMidNet
    (3, 1), (1, 3),                               # TestComboLossWeight
])
def test_loss_weights_scale_the_loss_and_the_gradients(loss_weight, midnet_loss_weight):
    net = unshared_net(loss_weight, midnet_loss_weight)
    loss = net.forward_backward()
    w = 1.0 if loss_weight is None else loss_weight
    m = 0.0 if midnet_loss_weight is None else midnet_loss_weight
    x = net.blobs["data"].data.reshape(5, -1).astype(np.float64)
    W1, W2 = (net.params["innerproduct%d" % i][0].data.astype(np.float64) for i in (1, 2))
    d = x @ W1.T - x @ W2.T
    # EuclideanLoss: sum of squares / (2 num); a loss_weight m on a plain top adds m * sum(top)
    want = w * (d ** 2).sum() / 10 + m * (x @ W1.T).sum()
    assert loss == pytest.approx(want, rel=1e-4)
    grad_x = w * d @ (W1 - W2) / 5 + m * W1.sum(axis=0)
    np.testing.assert_allclose(net.blobs["data"].diff.reshape(5, -1), grad_x, rtol=1e-3,
                               atol=1e-6 * np.abs(grad_x).max())
    np.testing.assert_allclose(net.params["innerproduct2"][0].diff, -w * d.T @ x / 5,
                               rtol=1e-3, atol=1e-9)
    if midnet_loss_weight is not None:
        # BVLC TestComboLossWeight's blob names; the weighted split top's diff is its weight
        assert net.blob_names == ["data", "data_data_0_split_0", "data_data_0_split_1",
                                  "innerproduct1", "innerproduct1_innerproduct1_0_split_0",
                                  "innerproduct1_innerproduct1_0_split_1", "innerproduct2",
                                  "(automatic)"]
        np.testing.assert_array_equal(
            net.blobs["innerproduct1_innerproduct1_0_split_0"].diff, np.float32(m))


def test_param_propagate_down_follows_lr_mult():
    # BVLC test_net.cpp TestParamPropagateDown: doubled lr_mults give the same gradients, a
    # zero lr_mult gives none for that param only
    def grad_sums(lrs):
        net = unshared_net(bias=True, lrs=lrs, force_backward=False)
        net.forward_backward()
        return [np.abs(p.diff).sum() for p in net.param_blobs]
    base = grad_sums((1, 2, 1, 2))
    assert min(base) > 1e-3
    np.testing.assert_array_equal(grad_sums((2, 4, 2, 4)), base)
    np.testing.assert_array_equal(grad_sums((1, 0, 0, 1)), [base[0], 0, 0, base[3]])
    np.testing.assert_array_equal(grad_sums((0, 1, 1, 0)), [0, base[1], base[2], 0])


# ---- shared weights -------------------------------------------------------------------------
def diff_data_net(shared):
    """BVLC test_net.cpp InitDiffDataSharedWeightsNet / InitDiffDataUnsharedWeightsNet."""
    names = ("sharedweights",) * 2 if shared else ("unsharedweights1", "unsharedweights2")
    caffe.set_random_seed(1701)
    return Net.from_param(param("""
layer { name: 'data' type: 'DummyData' top: 'data1' top: 'data2'
  dummy_data_param { num: 10 channels: 10 height: 1 width: 1 num: 10 channels: 10 height: 1
                     width: 1 data_filler { type: 'gaussian' std: 10 } } }
layer { name: 'innerproduct1' type: 'InnerProduct' bottom: 'data1' top: 'innerproduct1'
  param { name: '%s' } inner_product_param { num_output: 10 bias_term: false
  weight_filler { type: 'constant' value: 0.5 } } }
layer { name: 'innerproduct2' type: 'InnerProduct' bottom: 'innerproduct1' top: 'innerproduct2'
  param { name: '%s' } inner_product_param { num_output: 10 bias_term: false
  weight_filler { type: 'constant' value: 0.5 } } }
layer { name: 'loss' type: 'EuclideanLoss' bottom: 'data2' bottom: 'innerproduct2' }""" % names))


def test_shared_weights_update_and_resume(tmp_path):
    # BVLC test_net.cpp TestSharedWeightsUpdate: one blob, both diffs summed into it, and
    # Update() is data - diff
    net = diff_data_net(shared=True)
    w1, w2 = net.layers[1].blobs[0], net.layers[2].blobs[0]
    assert np.shares_memory(w1.data, w2.data) and np.shares_memory(w1.diff, w2.diff)
    net.forward_backward()
    x1, x2 = (net.blobs[n].data.reshape(10, 10).astype(np.float64) for n in ("data1", "data2"))
    W = w1.data.astype(np.float64)
    h = x1 @ W.T
    dy = (h @ W.T - x2) / 10  # EuclideanLoss' gradient for its second bottom, num 10
    shared_diff = dy.T @ h + (dy @ W).T @ x1
    np.testing.assert_allclose(w1.diff, shared_diff, rtol=1e-4, atol=1e-4)
    assert (w1.diff != 0).all()
    want = w1.data - w1.diff
    net.update()
    np.testing.assert_array_equal(w1.data, want)
    assert np.shares_memory(w1.data, w2.data)

    # the same net with its weights unshared: two diffs that sum to the shared one
    other = diff_data_net(shared=False)
    u1, u2 = other.layers[1].blobs[0], other.layers[2].blobs[0]
    assert not np.shares_memory(u1.data, u2.data)
    other.forward_backward()
    assert (u1.diff != u2.diff).all()
    np.testing.assert_allclose(u1.diff + u2.diff, shared_diff, rtol=1e-4, atol=1e-4)
    want1, want2 = u1.data - u1.diff, u2.data - u2.diff
    other.update()
    np.testing.assert_array_equal(u1.data, want1)
    np.testing.assert_array_equal(u2.data, want2)

    # BVLC TestSharedWeightsResume: saved and read back, the weights are still one blob
    saved = str(tmp_path / "shared.caffemodel")
    net.save(saved)
    resumed = diff_data_net(shared=True)
    resumed.copy_from(saved)
    r1, r2 = resumed.layers[1].blobs[0], resumed.layers[2].blobs[0]
    assert r1 is not r2 and np.shares_memory(r1.data, r2.data)
    assert np.shares_memory(r1.diff, r2.diff)
    np.testing.assert_array_equal(r1.data, w1.data)


# ---- partial forward and backward, reshaping ------------------------------------------------
def test_backward_in_pieces_gives_the_whole_backwards_diff():
    # BVLC test_net.cpp TestFromTo (the backward half; forward ranges: tests/test_net.py)
    net = _tiny_net()
    net.forward_from_to()
    net.backward_from_to()
    whole = net.blobs["data"].diff.copy()
    assert np.abs(whole).sum() > 0
    last = len(net.layers) - 1
    for i in range(1, last + 1):
        net.blobs["data"].diff[...] = 0
        net.backward_from_to(last, i)
        net.backward_from_to(i - 1, 0)
        np.testing.assert_array_equal(net.blobs["data"].diff, whole)


@pytest.mark.parametrize("call,message", [
    (lambda net: net._forward(-1, 2), r"forward from layer -1 to 2: net 'TinyTestNetwork' has "
                                      r"layers 0 to 2"),
    (lambda net: net._forward(0, 3), "forward from layer 0 to 3"),
    (lambda net: net.forward_from_to(1, 5), "forward from layer 1 to 5"),
    (lambda net: net._backward(3, 0), "backward from layer 3 to 0"),
    (lambda net: net.backward_from_to(2, -1), "backward from layer 2 to -1"),
    (lambda net: net._forward(0, 1.5), "layer indices must be integers"),
], ids=["negative_start", "end_past_last", "forward_from_to", "start_past_last",
        "negative_end", "float_end"])
def test_a_layer_range_outside_the_net_is_refused(call, message):
    """BVLC's ForwardFromTo checks start >= 0 and end < the number of layers, BackwardFromTo
    end >= 0 and start < it (pycaffe's _forward / _backward): a negative index ran the last
    layer first (Python's index from the end), one past the end ran part of the net and
    stopped on a bare IndexError."""
    net = _tiny_net()
    ran = []
    net.before_forward(ran.append)
    net.before_backward(ran.append)
    with pytest.raises(NetError, match=message):
        call(net)
    assert ran == []  # refused before any layer ran
    assert net._forward(2, 1) == 0 and ran == []  # a start past the end runs nothing


def _tiny_net():
    """BVLC test_net.cpp InitTinyNet, with force_backward so that the data gets a diff."""
    caffe.set_random_seed(1701)
    return Net.from_param(param("""name: 'TinyTestNetwork' force_backward: true
layer { name: 'data' type: 'DummyData' top: 'data' top: 'label'
  dummy_data_param { shape { dim: 5 dim: 2 dim: 3 dim: 4 }
                     data_filler { type: 'gaussian' std: 0.01 }
                     shape { dim: 5 } data_filler { type: 'constant' value: 0 } } }
""" + IP % ("innerproduct", "data", "innerproduct", 1000) + """
layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'innerproduct' bottom: 'label'
  top: 'top_loss' }"""))


def test_reshaping_back_and_forth_gives_the_same_outputs():
    # BVLC test_net.cpp TestReshape: an input blob reshaped between two sizes (no
    # Net.reshape() call: each layer's forward reshapes), outputs equal for equal inputs
    caffe.set_random_seed(1701)
    net = Net.from_param(param("""
layer { name: 'data' type: 'Input' top: 'data'
  input_param { shape: { dim: 1 dim: 3 dim: 100 dim: 100 } } }
layer { name: 'conv1' type: 'Convolution' bottom: 'data' top: 'conv1'
  convolution_param { num_output: 5 kernel_size: 3 stride: 2
    weight_filler { type: 'gaussian' std: 0.01 } bias_filler { type: 'constant' value: 0.2 } } }
layer { name: 'relu1' type: 'ReLU' bottom: 'conv1' top: 'conv1' }
layer { name: 'pool1' type: 'Pooling' bottom: 'conv1' top: 'pool1'
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: 'norm1' type: 'LRN' bottom: 'pool1' top: 'norm1' lrn_param { local_size: 3 } }
layer { name: 'softmax' type: 'Softmax' bottom: 'norm1' top: 'softmax' }"""))
    rng = np.random.default_rng(1701)
    small, large = rng.standard_normal((2, 3, 12, 10)), rng.standard_normal((4, 3, 9, 11))

    def run(x):
        net.blobs["data"].reshape(*x.shape)
        net.blobs["data"].data[...] = x
        net.forward_from_to()
        net.backward_from_to()
        return net.blobs["softmax"].data.copy()
    out_small, out_large = run(small), run(large)
    assert out_small.shape == (2, 5, 3, 2) and out_large.shape == (4, 5, 2, 3)
    np.testing.assert_array_equal(run(small), out_small)
    np.testing.assert_array_equal(run(large), out_large)
