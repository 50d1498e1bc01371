"""CUDA graphs of the forks' and importers' layer types on the simulated device: nets in the
style of SSD's head (Normalize, Permute, Flatten, PriorBox, Concat), PSPNet's pyramid (BN,
Interp), SegNet's unpooling (Pooling's mask, Upsample), FCN's score path (Deconvolution,
Crop), YOLO's passthrough (Reorg) and one net of the other device-only types are captured
(``cuda_graphs.why_not`` is empty, one capture, then replays); a replayed TEST forward equals
the layer-by-layer one bit for bit and CPU mode's to float32 rounding; a captured training
run equals the layer-by-layer run bit for bit (weights, BN's running averages, history).

The simulated capture and replay refuse every host crossing: a layer that writes a top's host
copy (work a real replay would not do again) fails the replay (checked here).
"""

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.layer import Layer
from pycaffe_lite.net import Net
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import register_layer
from pycaffe_lite.solvers import get_solver
from test_gpu_sim_new_layers import in_gpu_mode as _gpu

RTOL, ATOL = 1e-5, 1e-6


def _u(shape, seed, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def _input(name, *dims):
    return ('layer { name: "%s" type: "Input" top: "%s" input_param { shape { %s } } }\n'
            % (name, name, " ".join("dim: %d" % d for d in dims)))


def _conv(name, bottom, n, k=3, pad=1, stride=1):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param '
            '{ num_output: %d kernel_size: %d pad: %d stride: %d weight_filler { type: '
            '"gaussian" std: 0.3 } bias_filler { type: "uniform" min: -0.2 max: 0.2 } } }\n'
            % (name, bottom, name, n, k, pad, stride))


# SSD's head over two feature maps: conv4_3's Normalize, loc/conf convolutions permuted to
# NHWC and flattened, the priors of each map, everything concatenated; the deploy net's
# softmax over the classes
SSD = _input("data", 2, 3, 16, 16) + _conv("conv1", "data", 4, stride=2) + _conv(
    "conv2", "conv1", 4, stride=2) + """
layer { name: "norm" type: "Normalize" bottom: "conv1" top: "norm" norm_param {
  across_spatial: false channel_shared: false scale_filler { type: "constant" value: 2 } } }
""" + "".join(_conv("%s_%s" % (src, what), src, n) + """
layer { name: "%(s)s_%(w)s_perm" type: "Permute" bottom: "%(s)s_%(w)s" top: "%(s)s_%(w)s_perm"
  permute_param { order: 0 order: 2 order: 3 order: 1 } }
layer { name: "%(s)s_%(w)s_flat" type: "Flatten" bottom: "%(s)s_%(w)s_perm"
  top: "%(s)s_%(w)s_flat" }
""" % {"s": src, "w": what} for src in ("norm", "conv2") for what, n in (("loc", 12), ("conf", 9))
) + "".join("""
layer { name: "%s_prior" type: "PriorBox" bottom: "%s" bottom: "data" top: "%s_prior"
  prior_box_param { min_size: %d max_size: %d aspect_ratio: 2 flip: true clip: %s
  variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 } }
""" % (src, src, src, lo, hi, clip) for src, lo, hi, clip in (
    ("norm", 4, 8, "true"), ("conv2", 8, 14, "false"))) + """
layer { name: "loc" type: "Concat" bottom: "norm_loc_flat" bottom: "conv2_loc_flat" top: "loc" }
layer { name: "conf" type: "Concat" bottom: "norm_conf_flat" bottom: "conv2_conf_flat"
  top: "conf" }
layer { name: "priors" type: "Concat" bottom: "norm_prior" bottom: "conv2_prior" top: "priors"
  concat_param { axis: 2 } }
layer { name: "conf_r" type: "Reshape" bottom: "conf" top: "conf_r"
  reshape_param { shape { dim: 0 dim: -1 dim: 3 } } }
layer { name: "conf_s" type: "Softmax" bottom: "conf_r" top: "conf_s" softmax_param { axis: 2 } }
layer { name: "conf_f" type: "Flatten" bottom: "conf_s" top: "conf_f" }
"""

# PSPNet's pyramid pooling: bins of 1 and 2 (and the whole 4x4 map), each a 1x1 conv, BN,
# ReLU and Interp back to the map's size, concatenated; DeepLab's zoomed Interp of the scores
_PSP_BN = ('bn_param { slope_filler { type: "uniform" min: 0.5 max: 1.5 } bias_filler { type: '
           '"uniform" min: -0.2 max: 0.2 } momentum: 0.9 }')
PSPNET = _input("data", 2, 3, 8, 8) + _conv("conv", "data", 4, stride=2) + """
layer { name: "conv_bn" type: "BN" bottom: "conv" top: "conv" %s }
layer { name: "conv_relu" type: "ReLU" bottom: "conv" top: "conv" }
""" % _PSP_BN + "".join("""
layer { name: "pool%(b)d" type: "Pooling" bottom: "conv" top: "pool%(b)d"
  pooling_param { pool: AVE kernel_size: %(k)d stride: %(k)d } }
layer { name: "pool%(b)d_conv" type: "Convolution" bottom: "pool%(b)d" top: "pool%(b)d_conv"
  convolution_param { num_output: 2 kernel_size: 1 weight_filler { type: "gaussian" std: 0.3 }
  bias_term: false } }
layer { name: "pool%(b)d_bn" type: "BN" bottom: "pool%(b)d_conv" top: "pool%(b)d_conv" %(bn)s }
layer { name: "pool%(b)d_relu" type: "ReLU" bottom: "pool%(b)d_conv" top: "pool%(b)d_conv" }
layer { name: "pool%(b)d_interp" type: "Interp" bottom: "pool%(b)d_conv" top: "pool%(b)d_up"
  interp_param { height: 4 width: 4 } }
""" % {"b": b, "k": 4 // b, "bn": _PSP_BN} for b in (1, 2)) + """
layer { name: "cat" type: "Concat" bottom: "conv" bottom: "pool1_up" bottom: "pool2_up"
  top: "cat" }
""" + _conv("score", "cat", 3, k=1, pad=0) + """
layer { name: "zoom" type: "Interp" bottom: "score" top: "zoom" interp_param { zoom_factor: 2 } }
"""

# SegNet's encoder/decoder: max pooling with its mask, unpooled by Upsample
SEGNET = _input("data", 2, 3, 8, 8) + _conv("enc", "data", 4) + """
layer { name: "pool" type: "Pooling" bottom: "enc" top: "pool" top: "mask"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
""" + _conv("mid", "pool", 4) + """
layer { name: "unpool" type: "Upsample" bottom: "mid" bottom: "mask" top: "unpool"
  upsample_param { scale: 2 } }
""" + _conv("score", "unpool", 3)

# FCN's score path: a stride-2 score map upsampled by a Deconvolution, cropped to the image
FCN = _input("data", 2, 3, 9, 9) + _conv("conv", "data", 4, stride=2) + _conv(
    "score", "conv", 3, k=1, pad=0) + """
layer { name: "up" type: "Deconvolution" bottom: "score" top: "up" convolution_param {
  num_output: 3 kernel_size: 4 stride: 2 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "crop" type: "Crop" bottom: "up" bottom: "data" top: "crop"
  crop_param { axis: 2 offset: 1 } }
"""

# YOLOv2's passthrough: the finer map reorganised and concatenated with the coarser one
YOLO = _input("data", 2, 3, 8, 8) + _conv("fine", "data", 4) + _conv(
    "coarse", "fine", 4, stride=2) + """
layer { name: "reorg" type: "Reorg" bottom: "fine" top: "reorg" reorg_param { stride: 2 } }
layer { name: "cat" type: "Concat" bottom: "reorg" bottom: "coarse" top: "cat" }
""" + _conv("det", "cat", 5, k=1, pad=0)

# the other device-only types, in one net
# "sum" takes ASUM of MVN's output: its SUMSQ would be the same for any input (MVN leaves unit
# variance), so the conv's gradient would be float32 rounding noise, which Adam scales up to
# steps of base_lr that differ between NumPy builds
OTHERS = _input("data", 2, 4, 3, 3) + _input("words", 2, 4) + _conv("conv", "data", 4) + """
layer { name: "gate" type: "Pooling" bottom: "conv" top: "gate"
  pooling_param { pool: AVE global_pooling: true } }
layer { name: "axpy" type: "Axpy" bottom: "gate" bottom: "conv" bottom: "data" top: "axpy" }
layer { name: "shuffle" type: "ShuffleChannel" bottom: "axpy" top: "shuffle"
  shuffle_channel_param { group: 2 } }
layer { name: "bnll" type: "BNLL" bottom: "shuffle" top: "bnll" }
layer { name: "mvn" type: "MVN" bottom: "bnll" top: "mvn" }
layer { name: "tile" type: "Tile" bottom: "mvn" top: "tile" tile_param { axis: 3 tiles: 2 } }
layer { name: "sum" type: "Reduction" bottom: "tile" top: "sum"
  reduction_param { operation: ASUM axis: 2 coeff: 0.5 } }
layer { name: "param" type: "Parameter" top: "param" parameter_param { shape { dim: 2 dim: 4 } }
  param { lr_mult: 1 } }
layer { name: "embed" type: "Embed" bottom: "words" top: "embed" embed_param { num_output: 4
  input_dim: 6 weight_filler { type: "uniform" } bias_filler { type: "uniform" } } }
layer { name: "embed_sum" type: "Reduction" bottom: "embed" top: "embed_sum"
  reduction_param { operation: MEAN axis: 2 } }
layer { name: "mix" type: "Eltwise" bottom: "sum" bottom: "param" bottom: "embed_sum" top: "mix"
  eltwise_param { operation: SUM } }
layer { name: "argmax" type: "ArgMax" bottom: "mix" top: "argmax"
  argmax_param { top_k: 2 out_max_val: true } propagate_down: false }
layer { name: "step" type: "Threshold" bottom: "mix" top: "step" threshold_param { threshold: 0.1 }
  propagate_down: false }
"""
OTHERS_LOSSES = _input("target", 2, 4) + """
layer { name: "xent" type: "SigmoidCrossEntropyLoss" bottom: "mix" bottom: "target" top: "xent"
  loss_param { ignore_label: 2 normalization: VALID } }
layer { name: "l1" type: "SmoothL1Loss" bottom: "mix" bottom: "target" top: "l1"
  smooth_l1_loss_param { sigma: 2 } propagate_down: true propagate_down: false }
"""

NETS = {"ssd_head": SSD, "pspnet": PSPNET, "segnet": SEGNET, "fcn": FCN, "yolo": YOLO,
        "others": OTHERS}


def _feeds(net, k):
    """The inputs of forward ``k``: new values each time (integer word indices in [0, 6),
    targets 0, 1 or the ignored 2)."""
    rng = np.random.default_rng(100 + k)
    feeds = {}
    for name in net.inputs:
        shape = net.blobs[name].shape
        if name == "words":
            feeds[name] = rng.integers(0, 6, shape).astype(np.float32)
        elif name == "target":
            feeds[name] = rng.integers(0, 3, shape).astype(np.float32)
        else:
            feeds[name] = rng.uniform(-1, 1, shape).astype(np.float32)
    return feeds


def _weights(net):
    return [np.array(b.data) for blobs in net.params.values() for b in blobs]


def _set_weights(net, weights):
    for b, w in zip([b for blobs in net.params.values() for b in blobs], weights):
        b.data[...] = w


@pytest.mark.parametrize("name", sorted(NETS))
def test_a_test_net_of_these_layers_is_captured_and_replays_the_eager_forward(name, tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NETS[name])
    backend.set_random_seed(7)
    weights = _weights(Net(str(path), caffe_pb2.TEST))

    def forwards(dev=None):
        net = Net(str(path), caffe_pb2.TEST)
        _set_weights(net, weights)
        outs = []
        for k in range(4):  # eager; captured and replayed; replayed twice
            for blob, value in _feeds(net, k).items():
                net.blobs[blob].data[...] = value
            net.forward()
            outs.append([np.array(net.blobs[b].data) for b in net.outputs])
        if dev is None:
            return outs
        return outs, dev.graph_captures, dev.graph_launches, cuda_graphs.why_not(
            net, 0, len(net.layers) - 1)

    cpu = forwards()
    eager = _gpu(forwards, graphs=False)[0]
    replayed, captures, launches, why = _gpu(forwards)
    assert (why, captures, launches) == ("", 1, 3)
    for k, (want, layer_by_layer, got) in enumerate(zip(cpu, eager, replayed)):
        for a, b, c in zip(want, layer_by_layer, got):
            np.testing.assert_array_equal(c, b, err_msg="forward %d" % k)
            np.testing.assert_allclose(c, a, rtol=RTOL, atol=ATOL, err_msg="forward %d" % k)
    if name == "ssd_head":  # the priors (4 a cell) of the 8 x 8 and 4 x 4 maps
        priors = replayed[-1][2]
        assert priors.shape == (1, 2, (8 * 8 + 4 * 4) * 4 * 4)
        np.testing.assert_array_equal(priors[0, 1].reshape(-1, 4),
                                      np.tile(np.float32([0.1, 0.1, 0.2, 0.2]), (320, 1)))
        # the first cell of conv1's map: centre (1, 1) of the 16 x 16 image (step 2, offset
        # 0.5), a square of side 4 clipped to the image
        np.testing.assert_allclose(priors[0, 0, :4], [0, 0, 3 / 16, 3 / 16], atol=1e-7)


# training: each net with a loss (the sum of squares of its last top; SSD's boxes and scores
# against targets; OTHERS has its own two losses)
SOLVER = ('base_lr: 0.01 lr_policy: "step" gamma: 0.5 stepsize: 2 type: "%s" momentum: 0.9 '
          'weight_decay: 0.001 random_seed: 5 display: 0 max_iter: 100 '
          'snapshot_after_train: false')
LAST = {"pspnet": "zoom", "segnet": "score", "fcn": "crop", "yolo": "det"}


def _train_text(name):
    if name == "ssd_head":
        return SSD + _input("loc_t", 2, 960) + _input("conf_t", 2, 720) + """
layer { name: "l_loc" type: "SmoothL1Loss" bottom: "loc" bottom: "loc_t" top: "l_loc"
  propagate_down: true propagate_down: false }
layer { name: "l_conf" type: "EuclideanLoss" bottom: "conf_f" bottom: "conf_t" top: "l_conf" }
"""
    if name == "others":
        return OTHERS + OTHERS_LOSSES
    return NETS[name] + """
layer { name: "loss" type: "Reduction" bottom: "%s" top: "loss" loss_weight: 1
  reduction_param { operation: SUMSQ coeff: 0.01 } }
""" % LAST[name]


def _train(name, rule, dev=None):
    param = caffe_pb2.SolverParameter()
    text_format.Merge(SOLVER % rule, param)
    text_format.Merge(_train_text(name), param.net_param)
    solver = get_solver(param)
    for blob, value in _feeds(solver.net, 0).items():
        solver.net.blobs[blob].data[...] = value
    solver.step(5)
    state = _weights(solver.net) + [backend.to_host(h).copy() for h in solver.history]
    if dev is None:
        return state
    return state, dev.graph_captures, dev.graph_launches, solver.train_graph.why_not()


@pytest.mark.parametrize("rule", ["SGD", "Adam"])
@pytest.mark.parametrize("name", sorted(NETS))
def test_a_training_run_of_these_layers_is_captured_bit_for_bit(name, rule):
    """One capture, four replays; weights (PSPNet's BN running averages included) and the
    solver's history equal the layer-by-layer run's bits and CPU mode's values."""
    cpu = _train(name, rule)
    eager = _gpu(lambda dev: _train(name, rule), graphs=False)
    state, captures, launches, why = _gpu(lambda dev: _train(name, rule, dev))
    assert (why, captures, launches) == ("", 1, 4)
    assert all(np.isfinite(x).all() for x in state)
    for i, (a, b, c) in enumerate(zip(cpu, eager, state)):
        np.testing.assert_array_equal(c, b, err_msg="blob %d" % i)
        np.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-5, err_msg="blob %d" % i)


# ---- checks that read device values: deferred inside a replay, raised with their own error ----
EMBED = _input("words", 2, 3) + """
layer { name: "embed" type: "Embed" bottom: "words" top: "embed" embed_param { num_output: 2
  input_dim: 5 weight_filler { type: "uniform" } } }
"""
UNPOOL = _input("x", 1, 2, 2, 2) + _input("mask", 1, 2, 2, 2) + """
layer { name: "unpool" type: "Upsample" bottom: "x" bottom: "mask" top: "y"
  upsample_param { scale: 2 } }
"""


@pytest.mark.parametrize("text, feeds, bad, error", [
    (EMBED, {"words": np.float32([[0, 4, 2], [1, 1, 3]])}, {"words": (1, 2, 5.0)},
     "layer 'embed' (type Embed): bottom value 5.0 at flat position 5 is not an integer index"),
    (UNPOOL, {"x": _u((1, 2, 2, 2), 1), "mask": np.float32([0, 3, 9, 14] * 2).reshape(
        1, 2, 2, 2)}, {"mask": (0, 1, 1, 1, 16.0)},
     "layer 'unpool' (type Upsample): mask index 16 is outside the 4 x 4 top plane")],
    ids=["embed", "upsample_mask"])
def test_a_bad_index_in_a_replayed_forward_raises_the_layers_error(text, feeds, bad, error,
                                                                   tmp_path):
    """Embed's indices and Upsample's mask are checked on the device inside a capture: a bad
    value read after the replay raises the layer's own error, as layer by layer."""
    path = tmp_path / "net.prototxt"
    path.write_text(text)

    def run(dev):
        net = Net(str(path), caffe_pb2.TEST)
        for blob, value in feeds.items():
            net.blobs[blob].data[...] = value
        for _ in range(3):
            net.forward()
        (blob, spot), = bad.items()
        net.blobs[blob].data[spot[:-1]] = spot[-1]
        with pytest.raises(CaffeError) as info:
            net.forward()
        return str(info.value), dev.graph_captures, dev.graph_launches

    message, captures, launches = _gpu(run)
    assert (captures, launches) == (1, 3)
    assert error in message
    assert _gpu(run, graphs=False)[0] == message


# ---- the simulated device catches a layer working on a blob's host copy ------------------------
@register_layer("HostCopyForGraphTest")
class HostCopy(Layer):
    """Doubles its bottom on the host, as a pycaffe-style layer writes ``top.data`` (and as
    PriorBox wrote its boxes before it kept them on the device)."""

    host_only = True

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data * 2


def test_a_layer_writing_a_tops_host_copy_fails_the_simulated_replay(tmp_path, monkeypatch):
    """Both copies of every blob are current when the capture starts, so the capture of such
    a layer crosses nothing (nor would a real one); but a real replay does not run it again,
    and its top would keep its capture-time values. The simulated replay, which marks the
    graph's tops current on the device as a real one must, finds the host write there."""
    monkeypatch.setattr(cuda_graphs, "CAPTURABLE",
                        cuda_graphs.CAPTURABLE | {"HostCopyForGraphTest"})
    path = tmp_path / "net.prototxt"
    path.write_text(_input("data", 2, 3) + 'layer { name: "twice" type: "HostCopyForGraphTest" '
                    'bottom: "data" top: "twice" }\n')

    def run(dev):
        net = Net(str(path), caffe_pb2.TEST)
        net.blobs["data"].data[...] = _u((2, 3), 0)
        net.forward()  # layer by layer: the warm-up
        np.testing.assert_array_equal(net.blobs["twice"].data, _u((2, 3), 0) * 2)
        net.blobs["data"].data[...] = _u((2, 3), 1)
        with pytest.raises(CaffeError, match="HostTransferError: forbidden to_host"):
            net.forward()  # captured, then replayed
        return dev.graph_captures

    assert _gpu(run) == 1
