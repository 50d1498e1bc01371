"""The channel-blocked inference path of a folded TEST net (pycaffe_lite.net_blocked).

References: OpenCV's cv2.dnn (an independent Caffe importer) on the zoo nets, and the same net
built with ``fold=False`` (layer by layer on NCHW, itself checked against OpenCV and Caffe's
figures elsewhere) for every blob of the small nets. The blocked kernels sum in another order
than im2col + GEMM: outputs agree to ``1e-4`` of each blob's largest magnitude (about 1e-6 in
practice). Both block sizes run (16: the AVX-512 kernels, 8: AVX2 + FMA) where the CPU has them.
"""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import net_blocked
from pycaffe_lite.ops.cpu import blocked as kernels
from test_model_zoo import fill_random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "models", "zoo")
RTOL = 1e-4

pytestmark = pytest.mark.skipif(kernels.block_size() is None,
                                reason="the compiled kernels offer no blocked layout here "
                                       "(no AVX2 + FMA, or no C compiler at install)")


@pytest.fixture(params=["avx512", "avx2"])
def isa(request):
    old = kernels.set_isa(request.param)
    if kernels.block_size() is None:
        kernels.set_isa(old)
        pytest.skip("this CPU has no %s" % request.param)
    yield kernels.block_size()
    kernels.set_isa(old)


def weights_for(tmp_path, proto, seed=0):
    net = caffe.Net(proto, caffe.TEST)
    fill_random(net, seed)
    path = str(tmp_path / "w.caffemodel")
    net.save(path)
    return path


def close(ours, ref, what):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, what
    bound = RTOL * np.abs(ref).max() + 1e-7
    err = np.abs(ours - ref).max()
    assert err <= bound, "%s: max |blocked - reference| %g > %g" % (what, err, bound)


def compare_every_blob(net, ref, x):
    """Forward both nets on ``x``; every blob both list agrees (read through net.blobs, which
    converts from the blocked layout)."""
    net.forward(data=x)
    ref.forward(data=x)
    names = [n for n in ref.blobs if n in net.blobs]
    assert len(names) > 3
    for name in names:
        close(net.blobs[name].data, ref.blobs[name].data, name)
    return names


INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: %s } } }\n'


def conv(name, bottom, top, n, k=3, pad=1, stride=1, group=1, dilation=1):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param '
            '{ num_output: %d kernel_size: %d pad: %d stride: %d group: %d dilation: %d } }\n'
            % (name, bottom, top, n, k, pad, stride, group, dilation))


def layer(name, kind, bottoms, tops, extra=""):
    b = "".join(' bottom: "%s"' % x for x in bottoms)
    t = "".join(' top: "%s"' % x for x in tops)
    return 'layer { name: "%s" type: "%s"%s%s %s }\n' % (name, kind, b, t, extra)


def relu(name, blob, slope=0.0):
    extra = "relu_param { negative_slope: %g }" % slope if slope else ""
    return layer(name, "ReLU", [blob], [blob], extra)


# A net with every kind of layer the path runs, and some it does not, between them: a 3-channel
# stem read as NCHW, ragged channel counts (20, 36: not whole blocks), BatchNorm + Scale + ReLU
# folded, MAX pooling rounding up, AVE pooling with pad, a grouped and a depthwise convolution,
# a dilated one, a Concat of whole blocks (written in place) and one that is not (copied on
# NCHW), Eltwise SUM with coefficients, PROD and MAX, a leaky ReLU, LRN (NCHW),
# a Split, test-time Dropout (in place, and scaled as the Fast R-CNN fork's scale_train: false
# asks), and an InnerProduct reading the last blocked blob.
MIXED = (
    INPUT % "2 dim: 3 dim: 23 dim: 21"
    + conv("stem", "data", "stem", 32, k=5, pad=2, stride=2)
    + layer("stem_bn", "BatchNorm", ["stem"], ["stem"])
    + layer("stem_scale", "Scale", ["stem"], ["stem"], "scale_param { bias_term: true }")
    + relu("stem_relu", "stem")
    + layer("pool1", "Pooling", ["stem"], ["pool1"],
            "pooling_param { pool: MAX kernel_size: 3 stride: 2 }")
    + conv("a1", "pool1", "a1", 32, k=1, pad=0) + relu("a1_relu", "a1")
    + conv("a3", "pool1", "a3", 32, k=3) + relu("a3_relu", "a3")
    + layer("cat_blocks", "Concat", ["a1", "a3"], ["cat_blocks"])
    + conv("g2", "cat_blocks", "g2", 32, k=3, group=2)
    + conv("dw", "g2", "dw", 32, k=3, group=32)
    + conv("r20", "dw", "r20", 20, k=3, dilation=2, pad=2)
    + relu("r20_leaky", "r20", slope=0.1)
    + conv("r36", "dw", "r36", 36, k=1, pad=0)
    + layer("cat_ragged", "Concat", ["r20", "r36"], ["cat_ragged"])
    + conv("p", "cat_ragged", "p", 24, k=3)
    + conv("q", "cat_ragged", "q", 24, k=1, pad=0)
    + layer("sum", "Eltwise", ["p", "q"], ["sum"], "eltwise_param { operation: SUM coeff: 0.5 "
            "coeff: -2 }")
    + layer("prod", "Eltwise", ["sum", "q"], ["prod"], "eltwise_param { operation: PROD }")
    + layer("max", "Eltwise", ["prod", "p", "sum"], ["max"],
            "eltwise_param { operation: MAX }")
    + relu("max_relu", "max")
    + layer("norm", "LRN", ["max"], ["norm"], "lrn_param { local_size: 3 }")
    + conv("after_norm", "norm", "after_norm", 16, k=3)
    + layer("ave", "Pooling", ["after_norm"], ["ave"],
            "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }")
    + layer("drop", "Dropout", ["ave"], ["ave"])
    + layer("drop2", "Dropout", ["ave"], ["ave2"], "dropout_param { dropout_ratio: 0.25 "
            "scale_train: false }")
    + conv("last", "ave2", "last", 16, k=2, pad=0)
    + layer("fc", "InnerProduct", ["last"], ["fc"], "inner_product_param { num_output: 7 }"))


def test_mixed_net_every_blob_matches_layer_by_layer(tmp_path, isa):
    proto = tmp_path / "mixed.prototxt"
    proto.write_text(MIXED)
    weights = weights_for(tmp_path, str(proto))
    net = caffe.Net(str(proto), weights, caffe.TEST)
    ref = caffe.Net(str(proto), weights, caffe.TEST, fold=False)
    plan = net.folding.blocked
    assert plan is not None and plan.B == isa
    steps = {net.layer_names[i]: type(s).__name__ for i, s in plan.steps.items()}
    for name in ("stem", "pool1", "a1", "a3", "cat_blocks", "g2", "dw", "r20", "r20_leaky",
                 "r36", "p", "q", "sum", "prod", "max", "after_norm", "ave", "drop", "drop2",
                 "last"):
        assert name in steps, name
    # the in-place ReLU after an Eltwise runs in the Eltwise's step
    assert [net.layer_names[p.absorbed[0]] for p in plan.pairs] == ["max_relu"]
    for name in ("cat_ragged", "norm", "fc"):  # run on NCHW
        assert name not in steps, name
    # cat_blocks' inputs are written into its buffer: no copy
    assert len(plan.views) == 2
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 23, 21)).astype(np.float32)
    compare_every_blob(net, ref, x)
    # a second forward (buffers reused) and another batch size (buffers reallocated)
    x1 = np.random.default_rng(2).uniform(-1, 1, (1, 3, 23, 21)).astype(np.float32)
    for n in (net, ref):
        n.blobs["data"].reshape(1, 3, 23, 21)
        n.reshape()
    compare_every_blob(net, ref, x1)


@pytest.mark.opencv
@pytest.mark.parametrize("key", ["squeezenet1.1", "googlenet", "resnet50", "mobilenet"])
def test_zoo_net_matches_opencv(tmp_path, key):
    """Whole zoo nets in the blocked layout against OpenCV's importer, and the blobs
    (GoogLeNet's Concats written in place) against the layer-by-layer net."""
    cv2 = pytest.importorskip("cv2")
    proto = os.path.join(ZOO, "%s_deploy.prototxt" % key)
    weights = weights_for(tmp_path, proto, seed=5)
    net = caffe.Net(proto, weights, caffe.TEST)
    plan = net.folding.blocked
    assert plan is not None and len(plan.steps) > 10
    if key == "googlenet":
        assert len(plan.views) == 36  # every input of the 9 inception Concats
    x = np.random.default_rng(3).uniform(-1, 1, net.blobs["data"].shape).astype(np.float32)
    net.forward(data=x)
    last = net.layer_names[-2]
    reader = cv2.dnn.readNetFromCaffe(proto, weights)
    reader.setInput(x)
    ref = np.asarray(reader.forward(last)).reshape(net.blobs[last].shape)
    assert np.abs(ref).max() > 1e-2
    close(net.blobs[last].data, ref, "%s %s vs OpenCV" % (key, last))


def test_reading_and_writing_blobs_between_forwards(tmp_path):
    """A blob read from Python is NCHW; one written from Python is what the next layer reads
    (forward(start=...)); net surgery on a packed convolution's weights is seen."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(INPUT % "1 dim: 3 dim: 12 dim: 12"
                     + conv("c1", "data", "c1", 16) + relu("r1", "c1")
                     + conv("c2", "c1", "c2", 24) + relu("r2", "c2")
                     + conv("c3", "c2", "c3", 8))
    weights = weights_for(tmp_path, str(proto))
    net = caffe.Net(str(proto), weights, caffe.TEST)
    ref = caffe.Net(str(proto), weights, caffe.TEST, fold=False)
    assert sorted(net.folding.blocked.steps) == [1, 3, 5]
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)
    compare_every_blob(net, ref, x)
    assert net.blobs["c2"].data.shape == (1, 24, 12, 12)
    # an array kept from an earlier read follows every forward, as Caffe's CPU blobs do
    kept = net.blobs["c2"].data
    x2 = np.random.default_rng(10).uniform(-1, 1, (1, 3, 12, 12)).astype(np.float32)
    net.forward(data=x2)
    ref.forward(data=x2)
    close(kept, ref.blobs["c2"].data, "c2 through an array kept across forwards")
    compare_every_blob(net, ref, x)
    close(kept, ref.blobs["c2"].data, "c2 kept, again")
    # write an intermediate blob, run from the next layer
    new = np.random.default_rng(5).uniform(-1, 1, (1, 24, 12, 12)).astype(np.float32)
    net.blobs["c2"].data[...] = new
    ref.blobs["c2"].data[...] = new
    close(net.forward(start="c3")["c3"], ref.forward(start="c3")["c3"], "from c2")
    # surgery: the packed weights follow the params, also through an array kept from before
    w = net.params["c2"][0].data
    w *= -0.5
    ref.params["c2"][0].data[...] *= -0.5
    compare_every_blob(net, ref, x)
    w[...] = 0.25  # written through the same array after the forward
    ref.params["c2"][0].data[...] = 0.25
    compare_every_blob(net, ref, x)


def test_switch_and_gpu_free_fallback(tmp_path, monkeypatch):
    proto = tmp_path / "net.prototxt"
    proto.write_text(INPUT % "1 dim: 3 dim: 8 dim: 8" + conv("c1", "data", "c1", 16))
    weights = weights_for(tmp_path, str(proto))
    old = net_blocked.set_enabled(False)
    try:
        net = caffe.Net(str(proto), weights, caffe.TEST)
        assert net.folding is None or net.folding.blocked is None
    finally:
        net_blocked.set_enabled(old)
    monkeypatch.setenv("PYCAFFE_LITE_BLOCKED", "0")
    net = caffe.Net(str(proto), weights, caffe.TEST)
    assert net.folding is None or net.folding.blocked is None
    monkeypatch.delenv("PYCAFFE_LITE_BLOCKED")
    net = caffe.Net(str(proto), weights, caffe.TEST)
    assert net.folding.blocked is not None
    # unfold: layer by layer again, the blocked values still read correctly
    x = np.random.default_rng(6).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    before = net.forward(data=x)["c1"].copy()
    net.unfold()
    close(net.forward(data=x)["c1"], before, "unfolded")


def test_train_nets_and_nets_without_weights_are_not_blocked(tmp_path):
    proto = tmp_path / "net.prototxt"
    proto.write_text(INPUT % "1 dim: 3 dim: 8 dim: 8" + conv("c1", "data", "c1", 16))
    weights = weights_for(tmp_path, str(proto))
    assert caffe.Net(str(proto), caffe.TEST).folding is None
    assert caffe.Net(str(proto), weights, caffe.TRAIN).folding is None


def test_relu_after_eltwise_runs_in_its_pass_and_a_forward_can_stop_between(tmp_path):
    """ResNet's Eltwise + in-place ReLU run as one step; forward(end=the Eltwise) still leaves
    the sum before the ReLU, as Caffe does."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(INPUT % "1 dim: 16 dim: 6 dim: 6"
                     + conv("a", "data", "a", 16) + conv("b", "data", "b", 16)
                     + layer("sum", "Eltwise", ["a", "b"], ["sum"])
                     + relu("sum_relu", "sum") + conv("c", "sum", "c", 16))
    weights = weights_for(tmp_path, str(proto))
    net = caffe.Net(str(proto), weights, caffe.TEST)
    ref = caffe.Net(str(proto), weights, caffe.TEST, fold=False)
    plan = net.folding.blocked
    names = net.layer_names
    assert [(names[p.producer], names[p.absorbed[0]]) for p in plan.pairs] == [
        ("sum", "sum_relu")]
    x = np.random.default_rng(7).uniform(-1, 1, (1, 16, 6, 6)).astype(np.float32)
    compare_every_blob(net, ref, x)
    assert (net.blobs["sum"].data >= 0).all()
    got = net.forward(data=x, end="sum")["sum"]
    want = ref.forward(data=x, end="sum")["sum"]
    assert (want < 0).any()
    close(got, want, "sum before its ReLU")


def test_residual_sum_in_the_convolution_store_without_intermediates(tmp_path):
    """keep_intermediates=False: ResNet's Eltwise SUM and its ReLU run in the store of the
    branch's last convolution (BatchNorm + Scale folded); that branch's blob is then not
    computed; the block's output matches the layer-by-layer net, and a forward that stops at
    the Eltwise still gives its value before the ReLU."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(INPUT % "2 dim: 16 dim: 7 dim: 5"
                     + conv("short", "data", "short", 32, k=1, pad=0)
                     + conv("b1", "data", "b1", 16) + relu("b1_relu", "b1")
                     + conv("b2", "b1", "b2", 32)
                     + layer("b2_bn", "BatchNorm", ["b2"], ["b2"])
                     + layer("b2_scale", "Scale", ["b2"], ["b2"], "scale_param { bias_term: true }")
                     + layer("res", "Eltwise", ["short", "b2"], ["res"])
                     + relu("res_relu", "res") + conv("after", "res", "after", 8))
    weights = weights_for(tmp_path, str(proto))
    net = caffe.Net(str(proto), weights, caffe.TEST, keep_intermediates=False)
    ref = caffe.Net(str(proto), weights, caffe.TEST, fold=False)
    plan = net.folding.blocked
    names = net.layer_names
    assert [(names[p.producer], [names[i] for i in p.absorbed]) for p in plan.pairs] == [
        ("b2", ["b2_bn", "b2_scale", "res", "res_relu"])]
    assert "b2" not in net.blobs
    with pytest.raises(KeyError, match="b2"):
        net.blobs["b2"]
    x = np.random.default_rng(8).uniform(-1, 1, (2, 16, 7, 5)).astype(np.float32)
    compare_every_blob(net, ref, x)
    got = net.forward(data=x, end="res")["res"]
    want = ref.forward(data=x, end="res")["res"]
    assert (want < 0).any()
    close(got, want, "res before its ReLU")


def test_wide_3x3_convolution_stays_on_winograd(tmp_path):
    """A 3x3 layer that Winograd's F(4x4, 3x3) takes on NCHW (64 channels on a 50 x 50 map)
    stays there between blocked layers; the blobs around it convert both ways."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(INPUT % "1 dim: 3 dim: 50 dim: 50"
                     + conv("c1", "data", "c1", 64) + relu("r1", "c1")
                     + conv("wide", "c1", "wide", 64) + relu("r2", "wide")
                     + layer("pool", "Pooling", ["wide"], ["pool"],
                             "pooling_param { pool: MAX kernel_size: 2 stride: 2 }")
                     + conv("c3", "pool", "c3", 16))
    weights = weights_for(tmp_path, str(proto))
    net = caffe.Net(str(proto), weights, caffe.TEST)
    ref = caffe.Net(str(proto), weights, caffe.TEST, fold=False)
    steps = {net.layer_names[i] for i in net.folding.blocked.steps}
    wide = net.layers[net.layer_names.index("wide")]
    if wide.plan.winograd_tile == 4:
        assert steps == {"c1", "c3"}  # the pooling reads NCHW: it stays there too
    else:  # Winograd switched off (PYCAFFE_LITE_WINOGRAD=0): every layer blocked
        assert steps == {"c1", "wide", "pool", "c3"}
    x = np.random.default_rng(9).uniform(-1, 1, (1, 3, 50, 50)).astype(np.float32)
    compare_every_blob(net, ref, x)


def test_pooling_and_convolution_in_place_match_opencv(tmp_path):
    """A stride-1 pooling and a shape-keeping convolution in place on their bottom (a blocked
    blob): the pooling's blocked kernel read the store it was writing (off by tens), the
    convolution's refused to run; both now run as their layers."""
    cv2 = pytest.importorskip("cv2")

    def text(c3_top):
        return (INPUT % "2 dim: 3 dim: 12 dim: 12"
                + conv("c1", "data", "c1", 16) + relu("r1", "c1")
                + conv("c2", "c1", "x", 16) + relu("r2", "x")
                + layer("pool", "Pooling", ["x"], ["x"],
                        "pooling_param { pool: MAX kernel_size: 3 stride: 1 pad: 1 }")
                + layer("ave", "Pooling", ["x"], ["x"],
                        "pooling_param { pool: AVE kernel_size: 3 stride: 1 pad: 1 }")
                + conv("c3", "x", c3_top, 16) + relu("r3", c3_top)
                + conv("c4", c3_top, "out", 8))

    proto = tmp_path / "net.prototxt"
    proto.write_text(text("x"))
    weights = weights_for(tmp_path, str(proto))
    net = caffe.Net(str(proto), weights, caffe.TEST)
    assert net.folding.blocked.steps  # the blocked path runs the other layers
    x = np.random.default_rng(6).uniform(-1, 1, (2, 3, 12, 12)).astype(np.float32)
    ours = net.forward(data=x)["out"]
    # OpenCV takes no convolution in place after an in-place layer: it reads c3 out of place
    apart = tmp_path / "apart.prototxt"
    apart.write_text(text("y"))
    reader = cv2.dnn.readNetFromCaffe(str(apart), weights)
    reader.setInput(x)
    close(ours, reader.forward("out"), "out")
