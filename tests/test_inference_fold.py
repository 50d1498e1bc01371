"""Inference-time folding (pycaffe_lite.net_fold): a TEST net built with weights folds
BatchNorm / Scale into the Convolution or InnerProduct before them and runs a following ReLU on
the producer's output.

Bound: folded and unfolded outputs agree to ``|a - b| <= 1e-5 * max|b| + 1e-6`` (float32
rounding of the folded weights; the nets here agree to about 1e-6 relative). Independent
references: a NumPy hand computation of InnerProduct + BatchNorm + Scale + ReLU, and OpenCV's
cv2.dnn on the zoo ResNet-50.
"""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import net_fold

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RTOL = 1e-5


def close(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    bound = RTOL * np.abs(b).max() + 1e-6
    err = np.abs(a - b).max()
    assert err <= bound, "max |folded - reference| %g > %g" % (err, bound)


def seed_params(net, seed=0, loc=0.1):
    """Random weights (mean ``loc``); BatchNorm statistics as running sums with a scale factor
    of 3."""
    rng = np.random.default_rng(seed)
    for name, blobs in net.params.items():
        if net.layer_dict[name].type == "BatchNorm":
            c = blobs[0].count
            blobs[0].data[...] = 3 * rng.normal(0, 0.5, c)
            blobs[1].data[...] = 3 * rng.uniform(0.2, 2.0, c)
            blobs[2].data[...] = 3
            continue
        for blob in blobs:
            fan_in = max(1, blob.count // blob.shape[0])
            blob.data[...] = rng.normal(loc, 1 / np.sqrt(fan_in), blob.shape)


def write(tmp_path, text, name="net"):
    proto = tmp_path / (name + ".prototxt")
    proto.write_text(text)
    return str(proto)


def weights_for(tmp_path, proto, seed=0, name="w", loc=0.1):
    net = caffe.Net(proto, caffe.TEST)
    seed_params(net, seed, loc)
    path = str(tmp_path / (name + ".caffemodel"))
    net.save(path)
    return path


def build(tmp_path, text, **kwargs):
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    return proto, weights, caffe.Net(proto, weights, caffe.TEST, **kwargs)


def run_both(proto, weights, x, **kwargs):
    """The net folded (by default also its chains that are not in place) and unfolded."""
    kwargs.setdefault("keep_intermediates", False)
    folded = caffe.Net(proto, weights, caffe.TEST, **kwargs)
    plain = caffe.Net(proto, weights, caffe.TEST, fold=False)
    assert plain.folding is None
    return folded, folded.forward(data=x), plain, plain.forward(data=x)


def absorbed(net):
    """{producer layer name: [absorbed layer names]}."""
    names = net.layer_names
    return {names[c.producer]: [names[i] for i in c.absorbed]
            for c in (net.folding.chains if net.folding else [])}


def data(shape, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: %s } } }\n'


def conv(name, bottom, top, n, k=3, pad=1, group=1, bias=True):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param '
            '{ num_output: %d kernel_size: %d pad: %d group: %d bias_term: %s } }\n'
            % (name, bottom, top, n, k, pad, group, "true" if bias else "false"))


def bn(name, bottom, top, eps=None):
    extra = " batch_norm_param { eps: %g }" % eps if eps is not None else ""
    return ('layer { name: "%s" type: "BatchNorm" bottom: "%s" top: "%s"%s }\n'
            % (name, bottom, top, extra))


def scale(name, bottom, top, bias=True):
    return ('layer { name: "%s" type: "Scale" bottom: "%s" top: "%s" scale_param { bias_term: '
            '%s } }\n' % (name, bottom, top, "true" if bias else "false"))


def relu(name, bottom, top):
    return 'layer { name: "%s" type: "ReLU" bottom: "%s" top: "%s" }\n' % (name, bottom, top)


RESNET_BLOCK = (
    INPUT % "2 dim: 8 dim: 9 dim: 9"
    + conv("conv1", "data", "conv1", 8, bias=False) + bn("bn1", "conv1", "conv1")
    + scale("sc1", "conv1", "conv1") + relu("relu1", "conv1", "conv1")
    + conv("conv2", "conv1", "conv2", 8, bias=False) + bn("bn2", "conv2", "conv2", eps=1e-3)
    + scale("sc2", "conv2", "conv2")
    + 'layer { name: "sum" type: "Eltwise" bottom: "data" bottom: "conv2" top: "sum" }\n'
    + relu("relu_sum", "sum", "sum"))


def test_resnet_block_in_place(tmp_path):
    proto = write(tmp_path, RESNET_BLOCK)
    weights = weights_for(tmp_path, proto)
    folded, out, plain, ref = run_both(proto, weights, data((2, 8, 9, 9)))
    assert absorbed(folded) == {"conv1": ["bn1", "sc1", "relu1"], "conv2": ["bn2", "sc2"]}
    close(out["sum"], ref["sum"])
    # in place: Caffe too shows only the chain's last value in these blobs
    assert list(folded.blobs) == list(plain.blobs)
    close(folded.blobs["conv1"].data, plain.blobs["conv1"].data)
    close(folded.blobs["conv2"].data, plain.blobs["conv2"].data)
    assert (folded.blobs["conv1"].data >= 0).all()
    # a forward that ends or starts inside a chain runs layer by layer: Caffe's values there
    folded.forward(data=data((2, 8, 9, 9), seed=3), end="bn1")
    plain.forward(data=data((2, 8, 9, 9), seed=3), end="bn1")
    close(folded.blobs["conv1"].data, plain.blobs["conv1"].data)
    assert (folded.blobs["conv1"].data < 0).any()  # after BatchNorm, before the ReLU
    folded.forward(start="sc1")
    plain.forward(start="sc1")
    close(folded.blobs["sum"].data, plain.blobs["sum"].data)
    # the user-visible params are the original ones
    np.testing.assert_array_equal(folded.params["conv1"][0].data, plain.params["conv1"][0].data)
    assert len(folded.params["conv1"]) == 1


def test_chain_not_in_place_drops_intermediates(tmp_path):
    text = (INPUT % "2 dim: 3 dim: 7 dim: 7" + conv("conv1", "data", "c1", 6, group=1)
            + bn("bn1", "c1", "b1") + scale("sc1", "b1", "s1") + relu("relu1", "s1", "r1")
            + conv("conv2", "r1", "out", 4))
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    x = data((2, 3, 7, 7))
    kept = caffe.Net(proto, weights, caffe.TEST)
    assert absorbed(kept) == {}  # the default folds only links computed in place
    kept.forward(data=x)
    assert "c1" in kept.blobs and "b1" in kept.blobs
    folded, out, plain, ref = run_both(proto, weights, x, keep_intermediates=False)
    assert absorbed(folded) == {"conv1": ["bn1", "sc1", "relu1"]}
    close(out["out"], ref["out"])
    close(folded.blobs["r1"].data, plain.blobs["r1"].data)
    for name in ("c1", "b1", "s1"):
        assert name not in folded.blobs
        with pytest.raises(net_fold.FoldedBlobError, match="'%s'.*folded into layer 'conv1'"
                           % name):
            folded.blobs[name]
    with pytest.raises(KeyError):
        folded.blobs["no_such_blob"]
    # an intermediate is never computed, so never allocated
    assert folded._blobs[folded.blob_names.index("b1")]._data.head == "uninitialized"
    folded.forward(start="conv1", end="relu1")
    close(folded.blobs["r1"].data, plain.blobs["r1"].data)


def test_keep_intermediates_folds_only_in_place_links(tmp_path):
    text = (INPUT % "1 dim: 3 dim: 6 dim: 6" + conv("conv1", "data", "c1", 5)
            + bn("bn1", "c1", "c1") + scale("sc1", "c1", "s1") + relu("relu1", "s1", "s1")
            + conv("conv2", "s1", "c2", 4) + bn("bn2", "c2", "b2"))
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    x = data((1, 3, 6, 6))
    folded, out, plain, ref = run_both(proto, weights, x, keep_intermediates=True)
    assert absorbed(folded) == {"conv1": ["bn1"]}
    assert list(folded.blobs) == list(plain.blobs)
    for name in plain.blobs:
        close(folded.blobs[name].data, plain.blobs[name].data)
    dropped = caffe.Net(proto, weights, caffe.TEST, keep_intermediates=False)
    assert absorbed(dropped) == {"conv1": ["bn1", "sc1", "relu1"], "conv2": ["bn2"]}
    dropped.forward(data=x)
    assert list(dropped.blobs) == ["data", "s1", "b2"]
    close(dropped.blobs["b2"].data, plain.blobs["b2"].data)


def ip_net(transpose=False, scale_bias=True, use_bn=True, use_scale=True):
    text = INPUT % "4 dim: 3 dim: 2 dim: 2"
    text += ('layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
             'inner_product_param { num_output: 5 transpose: %s } }\n'
             % ("true" if transpose else "false"))
    if use_bn:
        text += bn("bn", "ip", "ip", eps=1e-4)
    if use_scale:
        text += scale("sc", "ip", "ip", bias=scale_bias)
    return text + relu("relu", "ip", "ip")


@pytest.mark.parametrize("transpose,scale_bias,use_bn,use_scale", [
    (False, True, True, True), (True, True, True, True), (False, False, True, True),
    (False, True, True, False), (False, True, False, True), (False, False, False, True),
    (False, True, False, False)])
def test_inner_product_against_hand_computation(tmp_path, transpose, scale_bias, use_bn,
                                                use_scale):
    proto = write(tmp_path, ip_net(transpose, scale_bias, use_bn, use_scale))
    weights = weights_for(tmp_path, proto)
    x = data((4, 3, 2, 2))
    folded, out, plain, ref = run_both(proto, weights, x)
    expected_chain = (["bn"] if use_bn else []) + (["sc"] if use_scale else []) + ["relu"]
    assert absorbed(folded) == {"ip": expected_chain}
    p = {k: [b.data.astype(np.float64) for b in v] for k, v in plain.params.items()}
    w = p["ip"][0].T if transpose else p["ip"][0]
    y = x.reshape(4, -1).astype(np.float64) @ w.T + p["ip"][1]
    if use_bn:
        mean, var = p["bn"][0] / p["bn"][2][0], p["bn"][1] / p["bn"][2][0]
        y = (y - mean) / np.sqrt(var + 1e-4)
    if use_scale:
        y = y * p["sc"][0] + (p["sc"][1] if scale_bias else 0)
    y = np.maximum(y, 0)
    close(out["ip"], y)
    close(ref["ip"], y)


def test_grouped_and_depthwise_convolution(tmp_path):
    text = (INPUT % "1 dim: 4 dim: 8 dim: 8" + conv("g", "data", "g", 8, group=2, bias=False)
            + bn("bn_g", "g", "g") + scale("sc_g", "g", "g") + relu("relu_g", "g", "g")
            + 'layer { name: "dw" type: "ConvolutionDepthwise" bottom: "g" top: "dw" '
              'convolution_param { kernel_size: 3 pad: 1 stride: 2 } }\n'
            + bn("bn_dw", "dw", "dw") + scale("sc_dw", "dw", "dw") + relu("relu_dw", "dw", "dw"))
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    folded, out, plain, ref = run_both(proto, weights, data((1, 4, 8, 8)))
    assert set(absorbed(folded)) == {"g", "dw"}
    close(out["dw"], ref["dw"])


def test_shared_values_are_not_folded(tmp_path):
    # conv1's output is read by bn1 and by the Eltwise: bn1 must not fold into conv1.
    # bn2's output is read by sc2 and by the Eltwise: bn2 folds into conv2, sc2 does not.
    text = (INPUT % "1 dim: 4 dim: 5 dim: 5" + conv("conv1", "data", "c1", 4)
            + bn("bn1", "c1", "b1")
            + 'layer { name: "sum1" type: "Eltwise" bottom: "c1" bottom: "b1" top: "sum1" }\n'
            + conv("conv2", "sum1", "c2", 4) + bn("bn2", "c2", "b2") + scale("sc2", "b2", "s2")
            + 'layer { name: "sum2" type: "Eltwise" bottom: "b2" bottom: "s2" top: "sum2" }\n')
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    folded, out, plain, ref = run_both(proto, weights, data((1, 4, 5, 5)))
    assert absorbed(folded) == {"conv2": ["bn2"]}
    close(out["sum2"], ref["sum2"])
    close(folded.blobs["sum1"].data, plain.blobs["sum1"].data)


def test_leaky_relu_and_batch_statistics_are_not_folded(tmp_path):
    text = (INPUT % "2 dim: 2 dim: 4 dim: 4" + conv("conv1", "data", "c1", 3)
            + 'layer { name: "r" type: "ReLU" bottom: "c1" top: "c1" '
              'relu_param { negative_slope: 0.1 } }\n'
            + conv("conv2", "c1", "c2", 3)
            + 'layer { name: "bn" type: "BatchNorm" bottom: "c2" top: "c2" '
              'batch_norm_param { use_global_stats: false } }\n')
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    folded, out, plain, ref = run_both(proto, weights, data((2, 2, 4, 4)))
    assert absorbed(folded) == {}
    close(out["c2"], ref["c2"])


def test_train_and_force_backward_nets_are_never_rewritten(tmp_path):
    proto = write(tmp_path, RESNET_BLOCK)
    weights = weights_for(tmp_path, proto)
    train = caffe.Net(proto, weights, caffe.TRAIN)
    assert train.folding is None and not train._fused
    assert train.fold() == [] and train.folding is None
    text = "force_backward: true\n" + RESNET_BLOCK
    forced = caffe.Net(write(tmp_path, text, "forced"), weights, caffe.TEST)
    assert forced.folding is None
    no_weights = caffe.Net(proto, caffe.TEST)
    assert no_weights.folding is None


def test_switches(tmp_path, monkeypatch):
    proto = write(tmp_path, RESNET_BLOCK)
    weights = weights_for(tmp_path, proto)
    assert caffe.Net(proto, weights, caffe.TEST).folding is not None
    assert caffe.Net(proto, weights, caffe.TEST, fold=False).folding is None
    monkeypatch.setenv("PYCAFFE_LITE_FOLD", "0")
    assert caffe.Net(proto, weights, caffe.TEST).folding is None
    assert caffe.Net(proto, weights, caffe.TEST, fold=True).folding is not None


SURGERY = [
    ("conv1", 0, lambda a, v: a.__setitem__(Ellipsis, v)),
    ("bn1", 0, lambda a, v: a.__setitem__((slice(None, 3),), v[:3])),
    ("sc1", 1, lambda a, v: np.copyto(a, v)),
    ("conv2", 0, lambda a, v: setattr(a, "flat", v.ravel())),
    ("sc2", 0, lambda a, v: np.multiply(a, 0, out=a).__iadd__(v)),
    ("bn2", 1, lambda a, v: a[:].fill(v.ravel()[0] * 10)),
]


@pytest.mark.parametrize("layer, i, edit", SURGERY, ids=[c[0] for c in SURGERY])
def test_surgery_on_a_folded_net_unfolds_it_and_uses_the_edit(tmp_path, caplog, layer, i,
                                                              edit):
    # BVLC's net surgery (net.params[name][i].data[...] = w and the like) works on a net
    # loaded with weights: the first write unfolds it, and its outputs are those of a net
    # never folded with the same edit
    proto = write(tmp_path, RESNET_BLOCK)
    weights = weights_for(tmp_path, proto, seed=0)
    x = data((2, 8, 9, 9))
    net = caffe.Net(proto, weights, caffe.TEST)
    plain = caffe.Net(proto, weights, caffe.TEST, fold=False)
    before = net.forward(data=x)["sum"].copy()
    assert net.folding is not None
    target = net.params[layer][i].data
    assert not target.flags.writeable and type(target * 2) is np.ndarray
    value = data(target.shape, seed=7) + 2
    edit(target, value)
    assert net.folding is None
    assert "'%s' param %d is written while the net is folded" % (layer, i) \
        in caplog.text
    edit(plain.params[layer][i].data, value)
    np.testing.assert_array_equal(net.params[layer][i].data, plain.params[layer][i].data)
    out = net.forward(data=x)["sum"]
    np.testing.assert_array_equal(out, plain.forward(data=x)["sum"])
    assert np.abs(out - before).max() > 1e-3


def test_a_view_kept_across_a_fold_unfolds_again(tmp_path):
    proto = write(tmp_path, RESNET_BLOCK)
    weights = weights_for(tmp_path, proto, seed=0)
    x = data((2, 8, 9, 9))
    net = caffe.Net(proto, weights, caffe.TEST)
    w = net.params["conv2"][0].data
    w[...] *= -1  # unfolds
    net.fold()
    assert net.folding is not None and not net.params["conv2"][0].data.flags.writeable
    w[0] = 0  # the view taken before the fold: unfolds again, so the edit is used
    assert net.folding is None
    plain = caffe.Net(proto, weights, caffe.TEST, fold=False)
    plain.params["conv2"][0].data[...] *= -1
    plain.params["conv2"][0].data[0] = 0
    np.testing.assert_array_equal(net.forward(data=x)["sum"], plain.forward(data=x)["sum"])
    net.params["bn1"][2].data = 4.0  # the setter, on an unfolded net: a plain write
    assert net.folding is None and net.params["bn1"][2].data == 4.0


def test_weight_safety_surgery_unfold_and_copy_from(tmp_path):
    proto = write(tmp_path, RESNET_BLOCK)
    weights = weights_for(tmp_path, proto, seed=0)
    other = weights_for(tmp_path, proto, seed=5, name="other")
    x = data((2, 8, 9, 9))
    net = caffe.Net(proto, weights, caffe.TEST)
    before = net.forward(data=x)["sum"].copy()
    # reading a folded blob leaves the net folded; a write by a path that bypasses the
    # blob's data (a plain view) still meets NumPy's read-only error, never a stale copy
    assert net.params["conv1"][0].data.sum() != 0 and net.folding is not None
    w = net.params["conv1"][0].data
    both = np.concatenate([w.ravel(), np.stack([w, w]).ravel()])  # NumPy functions read it
    assert type(both) is np.ndarray and both.size == 3 * w.size and net.folding is not None
    both[:] = 0  # a new array: writing it is no surgery
    assert net.folding is not None
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(net.params["conv1"][0].data)[...] = 0
    np.testing.assert_array_equal(net.forward(data=x)["sum"], before)
    # unfold, edit, fold again: the edit is used
    net.unfold()
    assert net.folding is None
    net.params["sc1"][0].data[...] *= 2
    net.params["conv2"][0].data[...] *= -1
    unfolded_out = net.forward(data=x)["sum"].copy()
    net.fold()
    assert absorbed(net) == {"conv1": ["bn1", "sc1", "relu1"], "conv2": ["bn2", "sc2"]}
    close(net.forward(data=x)["sum"], unfolded_out)
    assert np.abs(unfolded_out - before).max() > 0.1
    # copy_from on a folded net folds the new weights
    net.copy_from(other)
    assert net.folding is not None
    fresh = caffe.Net(proto, other, caffe.TEST, fold=False)
    close(net.forward(data=x)["sum"], fresh.forward(data=x)["sum"])
    # share_with unfolds for good: the shared blobs may change under the net
    train = caffe.Net(proto, caffe.TRAIN)
    seed_params(train, 9)
    net.share_with(train)
    assert net.folding is None
    train.params["conv1"][0].data[...] *= 0.5
    ref = caffe.Net(proto, caffe.TEST)
    for name, blobs in train.params.items():
        for src, dst in zip(blobs, ref.params[name]):
            dst.data[...] = src.data
    close(net.forward(data=x)["sum"], ref.forward(data=x)["sum"])


@pytest.mark.slow
@pytest.mark.parametrize("key,chains", [("resnet50", 53), ("mobilenet", 27)])
def test_zoo_folded_matches_opencv(tmp_path, key, chains):
    cv2 = pytest.importorskip("cv2")
    proto = os.path.join(ROOT, "models", "zoo", "%s_deploy.prototxt" % key)
    weights = weights_for(tmp_path, proto, loc=0.0)
    net = caffe.Net(proto, weights, caffe.TEST)
    # every convolution carries a BatchNorm + Scale (+ ReLU) chain
    assert len(net.folding.chains) == chains
    last = net.layer_names[-2]  # the classifier, before the softmax
    x = data(net.blobs["data"].shape)
    ours = net.forward(data=x)
    reader = cv2.dnn.readNetFromCaffe(proto, weights)
    reader.setInput(x)
    ref = np.asarray(reader.forward(last)).reshape(1, 1000)
    got = net.blobs[last].data.reshape(1, 1000)
    assert np.abs(ref).max() > 1e-2
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    assert ours["prob"].argmax() == ref.argmax()


def test_max_pooling_runs_without_window_choices_in_a_folded_net(tmp_path, monkeypatch):
    """MAX pooling in a folded TEST net records no window choices (inference_forward): the
    same top as the unfolded net, its backward then asks for a forward first, and a force_backward
    net keeps the ordinary forward (its backward works). (On NCHW: the channel-blocked layout,
    tests/test_net_blocked.py, pools on its own.)"""
    monkeypatch.setenv("PYCAFFE_LITE_BLOCKED", "0")
    text = (INPUT % "2 dim: 3 dim: 9 dim: 9" + conv("conv1", "data", "c1", 4)
            + 'layer { name: "pool" type: "Pooling" bottom: "c1" top: "p" '
              'pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }\n'
            + 'layer { name: "avg" type: "Pooling" bottom: "p" top: "a" '
              'pooling_param { pool: AVE kernel_size: 2 stride: 2 } }\n')
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    x = data((2, 3, 9, 9))
    folded, out, plain, ref = run_both(proto, weights, x)
    pool = folded.layer_names.index("pool")
    assert folded.folding is not None and pool in folded._fused
    np.testing.assert_array_equal(folded.blobs["p"].data, plain.blobs["p"].data)
    np.testing.assert_array_equal(out["a"], ref["a"])
    layer, top = folded.records[pool].layer, folded.records[pool].tops
    top[0].diff[...] = 1
    with pytest.raises(caffe.CaffeError, match="forward pass first"):
        layer.Backward(top, [True], folded.records[pool].bottoms)
    folded.unfold()
    assert pool not in folded._fused
    folded.forward(data=x)
    layer.Backward(top, [True], folded.records[pool].bottoms)  # choices recorded again
    assert folded.records[pool].bottoms[0].diff.sum() == top[0].count
    forced = caffe.Net(write(tmp_path, "force_backward: true\n" + text, "forced"), weights,
                       caffe.TEST)
    assert forced.folding is None and not forced._fused


def test_split_does_nothing_while_its_tops_share_the_bottom(tmp_path, monkeypatch):
    """A blob read by two layers gets a Split; in a folded net its inference_forward skips
    the re-sharing while the tops share the bottom's data, and shares again after the input
    is reshaped (new storage): the outputs equal the unfolded net's at both sizes (bit for
    bit: on NCHW, as the channel-blocked convolutions sum in another order)."""
    monkeypatch.setenv("PYCAFFE_LITE_BLOCKED", "0")
    text = (INPUT % "1 dim: 2 dim: 5 dim: 5" + conv("conv1", "data", "c1", 3)
            + 'layer { name: "relu" type: "ReLU" bottom: "c1" top: "c1" }\n'
            + conv("left", "c1", "l", 2) + conv("right", "c1", "r", 2)
            + 'layer { name: "cat" type: "Concat" bottom: "l" bottom: "r" top: "cat" }\n')
    proto = write(tmp_path, text)
    weights = weights_for(tmp_path, proto)
    folded = caffe.Net(proto, weights, caffe.TEST)
    plain = caffe.Net(proto, weights, caffe.TEST, fold=False)
    split = [i for i, layer in enumerate(folded.layers) if layer.type == "Split"]
    assert len(split) == 1 and split[0] in folded._fused
    for shape in ((1, 2, 5, 5), (2, 2, 9, 7)):
        x = data(shape)
        for net in (folded, plain):
            net.blobs["data"].reshape(shape)
            net.reshape()
        np.testing.assert_array_equal(folded.forward(data=x)["cat"],
                                      plain.forward(data=x)["cat"])
        tops = folded.records[split[0]].tops
        assert all(t.shares_data_with(folded.records[split[0]].bottoms[0]) for t in tops)


def test_a_pooling_layer_with_a_loss_weight_keeps_its_forward(tmp_path):
    """A top with a loss weight makes the layer a loss: its Forward (the loss and the top's
    diff) runs, not the inference forward; the net's loss is Caffe's sum of the top."""
    text = (INPUT % "1 dim: 2 dim: 4 dim: 4"
            + 'layer { name: "pool" type: "Pooling" bottom: "data" top: "p" loss_weight: 2 '
              'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n'
            + 'layer { name: "sink" type: "Pooling" bottom: "data" top: "q" '
              'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n')
    proto = write(tmp_path, text)
    net = caffe.Net(proto, weights_for(tmp_path, proto), caffe.TEST)
    x = data((1, 2, 4, 4))
    assert net.layer_names.index("pool") not in net._fused
    assert net.layer_names.index("sink") in net._fused
    net.blobs["data"].data[...] = x
    loss = net.forward_prefilled()
    expect = 2 * x.reshape(2, 2, 2, 2, 2).max(axis=(2, 4)).sum()
    assert np.isclose(loss, expect, rtol=1e-6)
