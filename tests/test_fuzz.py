"""Fuzzing: random nets, valid and invalid, and random mutations of a valid prototxt.

Building a net from any of them and running it forward and backward either works or raises
our CaffeError; any other exception (a NumPy, protobuf or Python error from deep inside) or a
hang fails the test, and Hypothesis then shrinks the input to a minimal example.

The runs are bounded (``max_examples``, and a watchdog alarm that turns a hang into a failure;
no per-example deadline, so a slow machine does not fail) and
reproducible (``derandomize=True``: the same examples on every run). The figures of the last run are
printed at the end (``pytest -s``).
"""

import os
import signal
from contextlib import contextmanager

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.weights import copy_trained_layers_from_param

pytest.importorskip("hypothesis", reason="hypothesis (the fuzzing) is a test dependency")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# Longer local runs: PYCAFFE_LITE_FUZZ_SCALE=10 (ten times the examples) and
# PYCAFFE_LITE_FUZZ_RANDOM=1 (new examples on each run instead of CI's fixed ones).
SCALE = float(os.environ.get("PYCAFFE_LITE_FUZZ_SCALE", "1"))
NET_EXAMPLES = int(1500 * SCALE)
MUTATION_EXAMPLES = int(1500 * SCALE)
BINARY_EXAMPLES = int(500 * SCALE)
WATCHDOG_SECONDS = 600  # a guard against endless loops, far above any example's run time

FUZZ = settings(derandomize=os.environ.get("PYCAFFE_LITE_FUZZ_RANDOM") != "1", database=None,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
                print_blob=True)

# NumPy's warnings on degenerate inputs (the mean of an empty batch, say) are not failures
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

RUNS = {"nets": 0, "built": 0, "mutations": 0, "mutations_built": 0, "binary": 0,
        "binary_loaded": 0}


class Hang(Exception):
    pass


@contextmanager
def watchdog(seconds=WATCHDOG_SECONDS):
    """A hang (an endless loop in Python code) fails the example instead of the whole run."""
    def alarm(signum, frame):
        raise Hang("no result after %d s" % seconds)

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def exercise(net_source, phase):
    """Build, run forward and backward, and round-trip the weights; True when it all worked,
    False when it stopped with a CaffeError. Anything else propagates (and fails the test)."""
    with watchdog(), np.errstate(all="ignore"):
        try:
            net = caffe.Net(net_source, phase)
            rng = np.random.default_rng(0)
            for name in net.inputs:
                blob = net.blobs[name]
                if "label" in name:
                    blob.data[...] = rng.integers(0, 3, blob.shape)
                else:
                    blob.data[...] = rng.normal(size=blob.shape)
            net.forward()
            net.backward()
            weights = caffe_pb2.NetParameter.FromString(net.to_proto().SerializeToString())
            copy_trained_layers_from_param(net, weights)
            net.reshape()
            net.forward()
        except CaffeError:
            return False
    return True


# ---- random nets -----------------------------------------------------------------------------
small = st.integers(min_value=0, max_value=4)
signed = st.integers(min_value=-3, max_value=4)
ratio = st.sampled_from([-0.5, 0.0, 0.3, 0.5, 1.0, 1.5])
real = st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0])


def conv_param(draw, p):
    p.num_output = draw(st.integers(0, 6))
    for _ in range(draw(st.integers(0, 2))):
        p.kernel_size.append(draw(st.integers(0, 4)))
    if draw(st.booleans()):
        p.stride.append(draw(st.integers(0, 2)))
    if draw(st.booleans()):
        p.pad.append(draw(st.integers(0, 3)))
    if draw(st.booleans()):
        p.dilation.append(draw(st.integers(0, 2)))
    if draw(st.booleans()):
        p.group = draw(st.integers(0, 3))
    if draw(st.booleans()):
        p.axis = draw(signed)
    p.bias_term = draw(st.booleans())


def pooling_param(draw, p):
    p.pool = draw(st.sampled_from([0, 1, 2]))
    if draw(st.booleans()):
        p.kernel_size = draw(small)
    if draw(st.booleans()):
        p.stride = draw(st.integers(0, 3))
    if draw(st.booleans()):
        p.pad = draw(st.integers(0, 3))
    p.global_pooling = draw(st.booleans())
    if draw(st.booleans()):
        p.ceil_mode = draw(st.booleans())


def layer_params(draw, lp):
    t = lp.type
    if t in ("Convolution", "Deconvolution", "Im2col", "ConvolutionDepthwise",
             "DepthwiseConvolution"):
        conv_param(draw, lp.convolution_param)
    elif t == "Pooling":
        pooling_param(draw, lp.pooling_param)
    elif t == "SPP":
        lp.spp_param.pyramid_height = draw(st.integers(0, 3))
        lp.spp_param.pool = draw(st.sampled_from([0, 1]))
    elif t in ("InnerProduct", "Embed"):
        p = lp.inner_product_param if t == "InnerProduct" else lp.embed_param
        p.num_output = draw(st.integers(0, 6))
        p.bias_term = draw(st.booleans())
        if t == "InnerProduct":
            if draw(st.booleans()):
                p.axis = draw(signed)
            p.transpose = draw(st.booleans())
        else:
            p.input_dim = draw(st.integers(0, 5))
    elif t == "Dropout":
        lp.dropout_param.dropout_ratio = draw(ratio)
        lp.dropout_param.scale_train = draw(st.booleans())
    elif t in ("Softmax", "SoftmaxWithLoss"):
        if draw(st.booleans()):
            lp.softmax_param.axis = draw(signed)
        if draw(st.booleans()):
            lp.loss_param.ignore_label = draw(st.integers(-1, 3))
    elif t == "LRN":
        lp.lrn_param.local_size = draw(st.integers(0, 6))
        lp.lrn_param.norm_region = draw(st.sampled_from([0, 1]))
        lp.lrn_param.beta = draw(real)
    elif t in ("Concat", "Slice", "Flatten", "Softmax", "ArgMax", "Tile", "Crop", "Bias",
               "Scale", "Reduction"):
        axis = draw(signed)
        if t == "Concat":
            lp.concat_param.axis = axis
        elif t == "Slice":
            lp.slice_param.axis = axis
            for _ in range(draw(st.integers(0, 3))):
                lp.slice_param.slice_point.append(draw(small))
        elif t == "Flatten":
            lp.flatten_param.axis = axis
            lp.flatten_param.end_axis = draw(signed)
        elif t == "ArgMax":
            lp.argmax_param.top_k = draw(st.integers(0, 3))
            lp.argmax_param.out_max_val = draw(st.booleans())
            if draw(st.booleans()):
                lp.argmax_param.axis = axis
        elif t == "Tile":
            lp.tile_param.axis = axis
            lp.tile_param.tiles = draw(st.integers(0, 3))
        elif t == "Crop":
            lp.crop_param.axis = axis
            for _ in range(draw(st.integers(0, 2))):
                lp.crop_param.offset.append(draw(small))
        elif t == "Bias":
            lp.bias_param.axis = axis
            lp.bias_param.num_axes = draw(st.integers(-2, 3))
        elif t == "Scale":
            lp.scale_param.axis = axis
            lp.scale_param.num_axes = draw(st.integers(-2, 3))
            lp.scale_param.bias_term = draw(st.booleans())
        else:
            lp.reduction_param.axis = axis
            lp.reduction_param.operation = draw(st.sampled_from([1, 2, 3, 4]))
    elif t == "Eltwise":
        lp.eltwise_param.operation = draw(st.sampled_from([0, 1, 2]))
        for _ in range(draw(st.integers(0, 3))):
            lp.eltwise_param.coeff.append(draw(real))
    elif t == "Reshape":
        for _ in range(draw(st.integers(0, 4))):
            lp.reshape_param.shape.dim.append(draw(st.integers(-2, 4)))
        if draw(st.booleans()):
            lp.reshape_param.axis = draw(signed)
        if draw(st.booleans()):
            lp.reshape_param.num_axes = draw(st.integers(-2, 3))
    elif t == "BatchNorm":
        lp.batch_norm_param.use_global_stats = draw(st.booleans())
        lp.batch_norm_param.eps = draw(st.sampled_from([0.0, 1e-5, 1.0]))
        lp.batch_norm_param.scale_bias = draw(st.booleans())
    elif t == "MVN":
        lp.mvn_param.normalize_variance = draw(st.booleans())
        lp.mvn_param.across_channels = draw(st.booleans())
    elif t == "Power":
        lp.power_param.power = draw(real)
        lp.power_param.scale = draw(real)
        lp.power_param.shift = draw(real)
    elif t in ("Exp", "Log"):
        p = lp.exp_param if t == "Exp" else lp.log_param
        p.base = draw(st.sampled_from([-1.0, -2.0, 0.0, 2.0]))
        p.scale = draw(real)
        p.shift = draw(real)
    elif t == "Clip":
        lp.clip_param.min = draw(real)
        lp.clip_param.max = draw(real)
    elif t == "ELU":
        lp.elu_param.alpha = draw(real)
    elif t == "ReLU":
        lp.relu_param.negative_slope = draw(real)
    elif t == "PReLU":
        lp.prelu_param.channel_shared = draw(st.booleans())
    elif t == "Accuracy":
        lp.accuracy_param.top_k = draw(st.integers(0, 3))
        if draw(st.booleans()):
            lp.accuracy_param.axis = draw(signed)
    elif t == "Parameter":
        for _ in range(draw(st.integers(0, 3))):
            lp.parameter_param.shape.dim.append(draw(st.integers(-1, 4)))
    elif t == "DummyData":
        for _ in range(draw(st.integers(0, 2))):
            shape = lp.dummy_data_param.shape.add()
            for _ in range(draw(st.integers(0, 3))):
                shape.dim.append(draw(st.integers(-1, 4)))
    elif t in ("RNN", "LSTM"):
        lp.recurrent_param.num_output = draw(st.integers(0, 4))
        lp.recurrent_param.expose_hidden = draw(st.booleans())
    elif t == "Upsample":
        lp.upsample_param.scale = draw(st.integers(0, 3))
    elif t == "BN":  # SegNet's or PSPNet's, by the fields set
        if draw(st.booleans()):
            lp.bn_param.bn_mode = draw(st.sampled_from([0, 1]))
        else:
            lp.bn_param.frozen = draw(st.booleans())
            lp.bn_param.momentum = draw(st.sampled_from([0.0, 0.5, 0.95]))
    elif t == "Reorg":
        if draw(st.booleans()):
            lp.reorg_param.stride = draw(st.integers(0, 3))
        lp.reorg_param.reverse = draw(st.booleans())
    elif t == "Reverse":
        lp.reverse_param.axis = draw(st.integers(-1, 4))
    elif t == "Transpose":
        lp.transpose_param.dim.extend(draw(st.permutations(range(draw(st.integers(0, 4))))))
    elif t == "Lstm":
        lp.lstm_param.num_output = draw(st.integers(0, 3))
    elif t == "PSROIPooling":
        p = lp.psroi_pooling_param
        for field, values in (("spatial_scale", [0.0, 0.25, 1.0]), ("output_dim", [0, 1, 2]),
                              ("group_size", [0, 1, 2])):
            if draw(st.booleans()):
                setattr(p, field, draw(st.sampled_from(values)))
    elif t == "ContrastiveLoss":
        lp.contrastive_loss_param.margin = draw(real)
    elif t == "Normalize":
        lp.norm_param.across_spatial = draw(st.booleans())
        lp.norm_param.channel_shared = draw(st.booleans())
    elif t == "Permute":
        lp.permute_param.order.extend(draw(st.lists(st.integers(0, 4), max_size=4)))
    elif t == "PriorBox":
        lp.prior_box_param.min_size.append(draw(st.integers(-2, 8)))
        if draw(st.booleans()):
            lp.prior_box_param.max_size.append(draw(st.integers(-2, 12)))
        lp.prior_box_param.aspect_ratio.extend(draw(st.lists(real, max_size=2)))
        lp.prior_box_param.clip = draw(st.booleans())
    elif t == "DetectionOutput":
        lp.detection_output_param.num_classes = draw(st.integers(1, 4))
        lp.detection_output_param.keep_top_k = draw(st.integers(-1, 3))
    elif t == "MultiBoxLoss":
        lp.multibox_loss_param.num_classes = draw(st.integers(1, 4))
        lp.multibox_loss_param.mining_type = draw(st.sampled_from([0, 1, 2]))
    elif t == "DetectionEvaluate":
        lp.detection_evaluate_param.num_classes = draw(st.integers(1, 4))
    elif t == "SmoothL1Loss":
        lp.smooth_l1_loss_param.sigma = draw(st.sampled_from([0.0, 1.0, 3.0]))
    elif t == "EvalDetection":
        p = lp.eval_detection_param
        p.side, p.num_class, p.num_object = (draw(st.integers(0, 2)) for _ in range(3))
        p.nms = draw(st.sampled_from([-1.0, 0.45]))
        p.biases.extend(draw(st.lists(real, max_size=4)))
    elif t == "ROIPooling":
        lp.roi_pooling_param.pooled_h = draw(st.integers(0, 3))
        lp.roi_pooling_param.pooled_w = draw(st.integers(0, 3))
        lp.roi_pooling_param.spatial_scale = draw(st.sampled_from([0.0, 0.25, 1.0, -1.0]))
    elif t == "ShuffleChannel":
        lp.shuffle_channel_param.group = draw(st.integers(0, 3))
    elif t == "Interp":
        p = lp.interp_param
        for field in ("zoom_factor", "shrink_factor", "height", "width", "pad_beg", "pad_end"):
            if draw(st.booleans()):
                setattr(p, field, draw(st.integers(-2, 4)))
    elif t in ("Region", "Yolo"):
        p = lp.region_param if t == "Region" else lp.yolo_param
        p.classes = draw(st.integers(0, 3))
        p.num = draw(st.integers(0, 3))
        for _ in range(draw(st.integers(0, 6))):
            p.anchors.append(draw(real))
        if t == "Region":
            p.coords = draw(st.integers(0, 5))
            p.softmax = draw(st.booleans())
        else:
            for _ in range(draw(st.integers(0, 3))):
                p.mask.append(draw(st.integers(0, 3)))
    if draw(st.integers(0, 9)) == 0:
        lp.loss_weight.append(draw(real))
    if draw(st.integers(0, 19)) == 0:
        lp.param.add().lr_mult = draw(real)


# type: (min bottoms, max bottoms, tops)
PALETTE = {
    "Convolution": (1, 1, 1), "Deconvolution": (1, 1, 1), "Im2col": (1, 1, 1),
    "Pooling": (1, 1, 1), "SPP": (1, 1, 1), "InnerProduct": (1, 1, 1), "Embed": (1, 1, 1),
    "ReLU": (1, 1, 1), "Sigmoid": (1, 1, 1), "TanH": (1, 1, 1), "AbsVal": (1, 1, 1),
    "BNLL": (1, 1, 1), "ELU": (1, 1, 1), "Exp": (1, 1, 1), "Log": (1, 1, 1),
    "Power": (1, 1, 1), "Threshold": (1, 1, 1), "Clip": (1, 1, 1), "Swish": (1, 1, 1),
    "GELU": (1, 1, 1),
    "Mish": (1, 1, 1), "ReLU6": (1, 1, 1), "Dropout": (1, 1, 1), "PReLU": (1, 1, 1),
    "Softmax": (1, 1, 1), "LRN": (1, 1, 1), "BatchNorm": (1, 1, 1), "MVN": (1, 1, 1),
    "Flatten": (1, 1, 1), "Reshape": (1, 1, 1), "ArgMax": (1, 1, 1), "Tile": (1, 1, 1),
    "Reduction": (1, 1, 1), "Upsample": (1, 2, 1), "Interp": (1, 1, 1),
    "BN": (1, 1, 1), "Reorg": (1, 1, 1), "Reverse": (1, 1, 1), "Transpose": (1, 1, 1),
    "Lstm": (1, 2, 1), "PSROIPooling": (2, 2, 1),
    "ShuffleChannel": (1, 1, 1), "ConvolutionDepthwise": (1, 1, 1),
    "DepthwiseConvolution": (1, 1, 1), "ROIPooling": (2, 2, 1), "Axpy": (3, 3, 1),
    "Concat": (1, 3, 1), "Eltwise": (2, 3, 1), "Slice": (1, 1, 2), "Split": (1, 1, 2),
    "Scale": (1, 2, 1), "Bias": (1, 2, 1), "Crop": (2, 2, 1), "Filter": (2, 3, 1),
    "BatchReindex": (2, 2, 1), "Silence": (1, 2, 0),
    "SoftmaxWithLoss": (2, 2, 1), "EuclideanLoss": (2, 2, 1), "HingeLoss": (2, 2, 1),
    "SigmoidCrossEntropyLoss": (2, 2, 1), "MultinomialLogisticLoss": (2, 2, 1),
    "InfogainLoss": (3, 3, 1), "ContrastiveLoss": (3, 3, 1), "Accuracy": (2, 2, 1),
    "LSTM": (2, 3, 1), "RNN": (2, 3, 1), "LSTMUnit": (3, 3, 3),
    "Parameter": (0, 0, 1), "DummyData": (0, 0, 1), "Region": (1, 1, 1), "Yolo": (1, 1, 1),
    "Bogus": (1, 1, 1),
    "Normalize": (1, 1, 1), "Permute": (1, 1, 1), "PriorBox": (2, 2, 1),
    "DetectionOutput": (3, 3, 1), "MultiBoxLoss": (4, 4, 1), "DetectionEvaluate": (2, 2, 1),
    "SmoothL1Loss": (2, 4, 1), "EvalDetection": (2, 2, 1),
}

# Built-in layer types the random nets leave out, and why. Every other registered type must be
# in PALETTE (test_every_built_in_layer_type_is_in_the_palette): a new layer type joins the
# palette, with its parameters drawn in layer_params, or this list with a reason.
NOT_IN_PALETTE = {
    "Input": "every random net starts with one (net_params)",
    "Data": "reads a database from disk; its checks are in tests/layers/test_data_layer.py",
    "AnnotatedData": "reads a database of AnnotatedDatum records from disk; checked in "
                     "tests/test_annotated_data.py",
    "ImageData": "reads an image list from disk; checked in its own tests",
    "DenseImageData": "reads image and label-image files from disk; checked in "
                      "tests/layers/test_dense_image_data_layer.py",
    "WindowData": "reads a window file and images from disk; checked in its own tests",
    "ImageSegData": "reads an image list and label images from disk; checked in "
                    "tests/test_fork_deeplab.py",
    "MatWrite": "writes .mat files to disk; checked in tests/test_fork_deeplab.py",
    "SegAccuracy": "needs labels in [0, C) or ignored, C the scores' channels; checked in "
                   "tests/test_fork_deeplab.py",
    "DenseCRF": "not supported: refused when a net is built (tests/test_fork_deeplab.py)",
    "HDF5Data": "reads HDF5 files from disk; checked in its own tests",
    "HDF5Output": "writes HDF5 files to disk; checked in its own tests",
    "MemoryData": "needs arrays handed over from Python (set_input_arrays) before forward",
    "Python": "imports a user module named in its parameters",
    "Proposal": "needs RPN scores and deltas of 2A and 4A channels for its anchors and an "
                "im_info bottom; its top's row count depends on the values; checked in "
                "tests/test_proposal_layer_cpp.py",
    "YoloDetectionOutput": "a detection head: its input must be a YOLO head's channels and "
                           "its top's row count depends on the values; checked in "
                           "tests/layers/test_yolo_port_layers.py",
    "Yolov3DetectionOutput": "as YoloDetectionOutput (one bottom per head, mask_group_num of "
                             "them); checked in tests/layers/test_yolo_port_layers.py",
}


@st.composite
def net_params(draw):
    net = caffe_pb2.NetParameter()
    net.name = "fuzz"
    blobs = []
    inputs = net.layer.add(name="input", type="Input")
    for k in range(draw(st.integers(1, 2))):
        name = ("data", "label")[k]
        inputs.top.append(name)
        shape = inputs.input_param.shape.add()
        ndim = draw(st.integers(1, 4))
        if name == "label":
            ndim = draw(st.integers(1, 2))
        for _ in range(ndim):
            shape.dim.append(draw(st.integers(-1, 5)) if draw(st.integers(0, 19)) == 0
                             else draw(st.integers(1, 5)))
        blobs.append(name)
    for i in range(draw(st.integers(1, 5))):
        t = draw(st.sampled_from(sorted(PALETTE)))
        lo, hi, n_tops = PALETTE[t]
        lp = net.layer.add(name="l%d" % i, type=t)
        n_bottoms = draw(st.integers(lo, hi))
        if draw(st.integers(0, 19)) == 0:
            n_bottoms = draw(st.integers(0, 3))  # a wrong count
        for _ in range(n_bottoms):
            if draw(st.integers(0, 59)) == 0:
                lp.bottom.append("nowhere")
            else:
                lp.bottom.append(draw(st.sampled_from(blobs)))
        for j in range(n_tops):
            choice = draw(st.integers(0, 24))
            if choice < 3 and lp.bottom:
                lp.top.append(lp.bottom[0])  # in place
            elif choice == 3:
                lp.top.append(draw(st.sampled_from(blobs)))  # maybe a duplicate
            else:
                lp.top.append("b%d_%d" % (i, j))
        if draw(st.integers(0, 29)) == 0:
            lp.propagate_down.append(draw(st.booleans()))
        layer_params(draw, lp)
        blobs.extend(n for n in lp.top if n not in blobs)
    net.force_backward = draw(st.booleans())
    return net


@settings(FUZZ, max_examples=NET_EXAMPLES)
@given(param=net_params(), phase=st.sampled_from([caffe.TRAIN, caffe.TEST]),
       as_text=st.booleans())
def fuzz_random_nets(param, phase, as_text):
    source = text_format.MessageToString(param) if as_text else param
    RUNS["nets"] += 1
    RUNS["built"] += exercise(source, phase)


def fuzz(run, examples, ran_key, ok_key, what, capsys, **kwargs):
    """Run a Hypothesis fuzzer; check it ran every example and that a share of them got past
    the checks (so that it tests more than the first one); print the figures."""
    before = dict(RUNS)
    run(**kwargs)
    ran, ok = RUNS[ran_key] - before[ran_key], RUNS[ok_key] - before[ok_key]
    with capsys.disabled():
        print("\nfuzz: %d %s, %d of them worked, the others raised a CaffeError"
              % (ran, what, ok))
    assert ran >= examples  # (examples that overran Hypothesis's buffer are drawn again)
    return ok / ran


def test_every_built_in_layer_type_is_in_the_palette():
    from pycaffe_lite.layers import load_all
    from pycaffe_lite.registry import LAYERS

    load_all()
    builtin = {name for name, cls in LAYERS.items()
               if cls.__module__.startswith("pycaffe_lite.layers.")}  # not tests' own types
    missing = sorted(builtin - set(PALETTE) - set(NOT_IN_PALETTE))
    assert not missing, "layer types missing from the fuzz palette (add them to PALETTE, " \
        "or to NOT_IN_PALETTE with a reason): %s" % missing
    stale = sorted(set(NOT_IN_PALETTE) - builtin)
    assert not stale, "NOT_IN_PALETTE names types that are not registered: %s" % stale


@pytest.mark.slow
def test_random_nets_work_or_raise_our_error(capsys):
    assert fuzz(fuzz_random_nets, NET_EXAMPLES, "nets", "built", "random nets", capsys) > 0.04


# ---- prototxt mutations -------------------------------------------------------------------
VALID = """\
name: "mutant"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 1 dim: 12 dim: 12 } shape { dim: 2 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        param { lr_mult: 1 } param { lr_mult: 2 }
        convolution_param { num_output: 4 kernel_size: 5 stride: 1 pad: 0
                            weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "drop1" type: "Dropout" bottom: "pool1" top: "pool1"
        dropout_param { dropout_ratio: 0.5 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "ip1" bottom: "label" top: "acc"
        include { phase: TEST } }
"""

NUMBERS = ["-1", "0", "1", "2", "3", "5", "17", "999", "2.5", "-3", "1e-3", "nan", "inf"]
SNIPPETS = ["{", "}", "layer {", 'bottom: "data"', 'top: "conv1"', "name:", ":", '"',
            "kernel_size: 3", "pool: AVE", "phase: TRAIN", "# comment", "\n", "\x00", "\xff"]


def tokens(text):
    import re
    return [(m.start(), m.end()) for m in re.finditer(r"[A-Za-z_][A-Za-z_0-9]*|-?\d+(\.\d+)?",
                                                     text)]


@st.composite
def mutants(draw):
    text = VALID
    vocabulary = sorted({VALID[a:b] for a, b in tokens(VALID)})
    for _ in range(draw(st.integers(1, 3))):
        lines = text.split("\n")
        kind = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 5, 5, 6, 7]))  # numbers: the deep ones
        if kind == 0 and len(lines) > 1:
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "\n".join(lines)
        elif kind == 1:
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif kind == 2 and len(lines) > 1:
            i, j = (draw(st.integers(0, len(lines) - 1)) for _ in range(2))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif kind == 3 and text:
            i = draw(st.integers(0, len(text) - 1))
            text = text[:i] + draw(st.characters(max_codepoint=0x2ff)) + text[i + 1:]
        elif kind == 4:
            text = text[:draw(st.integers(0, len(text)))]
        elif kind in (5, 6):
            spans = tokens(text)
            if spans:
                a, b = draw(st.sampled_from(spans))
                new = draw(st.sampled_from(NUMBERS if kind == 5 else vocabulary))
                text = text[:a] + new + text[b:]
        else:
            i = draw(st.integers(0, len(text)))
            text = text[:i] + " " + draw(st.sampled_from(SNIPPETS)) + " " + text[i:]
    return text


@settings(FUZZ, max_examples=MUTATION_EXAMPLES)
@given(text=mutants(), phase=st.sampled_from([caffe.TRAIN, caffe.TEST]))
def fuzz_prototxt_mutations(folder, text, phase):
    path = folder / "mutant.prototxt"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    RUNS["mutations"] += 1
    RUNS["mutations_built"] += exercise(str(path), phase)


@pytest.mark.slow
def test_prototxt_mutations_work_or_raise_our_error(tmp_path, capsys):
    assert fuzz(fuzz_prototxt_mutations, MUTATION_EXAMPLES, "mutations", "mutations_built",
                "prototxt mutations", capsys, folder=tmp_path) > 0.04


def test_the_valid_starting_points_work():
    """The fuzzers start from nets that work (so the mutations test more than parsing)."""
    assert exercise(VALID, caffe.TRAIN) and exercise(VALID, caffe.TEST)
    assert exercise(text_format.Parse(VALID, caffe_pb2.NetParameter()), caffe.TRAIN)


# ---- corrupt weights and solver states --------------------------------------------------------
@pytest.fixture(scope="module")
def snapshot_files(tmp_path_factory):
    """A .caffemodel of VALID and a .solverstate (with its .caffemodel) of a trained solver."""
    folder = tmp_path_factory.mktemp("binary")
    caffe.Net(VALID, caffe.TRAIN).save(str(folder / "valid.caffemodel"))
    param = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.1 lr_policy: "fixed" momentum: 0.9 type: "Adam" '
                      'snapshot_prefix: "%s"' % (folder / "snap"), param)
    text_format.Merge(VALID, param.net_param)
    solver = get_solver(param)
    rng = np.random.default_rng(1)
    solver.net.blobs["data"].data[...] = rng.normal(size=(2, 1, 12, 12))
    solver.step(2)
    solver.snapshot()
    return folder, param


@st.composite
def corruptions(draw, data):
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 4))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == 0 and data:
            data[i] = draw(st.integers(0, 255))
        elif kind == 1:
            del data[draw(st.integers(0, len(data))):]
        elif kind == 2:
            del data[i:i + draw(st.integers(1, 64))]
        elif kind == 3:
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:
            j = draw(st.integers(0, max(0, len(data) - 1)))
            data[i:i] = data[j:j + draw(st.integers(1, 64))]
    return bytes(data)


def _corrupt(folder, name, data, draw):
    path = folder / ("corrupt_" + name)
    path.write_bytes(draw(corruptions(data)))
    return str(path)


@settings(FUZZ, max_examples=BINARY_EXAMPLES)
@given(draw=st.data(), which=st.sampled_from(["weights", "state"]))
def fuzz_corrupt_files(snapshot_files, draw, which):
    folder, param = snapshot_files
    RUNS["binary"] += 1
    with watchdog(), np.errstate(all="ignore"):
        try:
            if which == "weights":
                data = (folder / "valid.caffemodel").read_bytes()
                net = caffe.Net(VALID, caffe.TEST)
                net.copy_from(_corrupt(folder, "valid.caffemodel", data, draw.draw))
                net.forward()
            else:
                data = (folder / "snap_iter_2.solverstate").read_bytes()
                solver = get_solver(param)
                solver.restore(_corrupt(folder, "snap_iter_2.solverstate", data, draw.draw))
                solver.step(1)
            RUNS["binary_loaded"] += 1
        except CaffeError:
            pass


@pytest.mark.slow
def test_corrupt_weights_and_states_load_or_raise_our_error(snapshot_files, capsys):
    assert fuzz(fuzz_corrupt_files, BINARY_EXAMPLES, "binary", "binary_loaded",
                "corrupt .caffemodel/.solverstate files", capsys,
                snapshot_files=snapshot_files) > 0.02
