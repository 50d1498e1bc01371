"""GPU mode on the simulated device for the modes of the fork ports that the one-case-per-type
parity sweep (tests/test_gpu_simulated.py) does not reach: RefineDet's DetectionOutput (4 and
5 bottoms), OpenCV's on pixel boxes, the C++ Proposal with an image scale, PSPNet's BN at
batch > 1, SegAccuracy accumulating, and the layer patterns the importers write (Scale with two
bottoms over axis 0, Reduction, a 6-axis Permute, grown and fixed Deconvolutions, HardSwish's
Power/ReLU6/Power, replicate padding by Slice/Concat).

References: the same layer, net or training run in CPU mode (NumPy, float32), and for captured
runs the same run layer by layer. Layers that read device values on the host (Proposal,
DetectionOutput, SegAccuracy) and types outside the capturable ones keep a net layer by layer:
``cuda_graphs.why_not`` / ``TrainGraph.why_not`` name the layer and nothing is captured.
"""

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.gpu_cases import SSD_PRIORS, TEST, TRAIN, _labels, _ssd_probs, _u, case, run_case
from PIL import Image

from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.net import Net
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import simulated_device

RTOL, ATOL = 1e-5, 1e-6


def _why(name, kind):
    """cuda_graphs.why_not's reason for a layer whose type a graph does not capture."""
    return ("layer '%s' (%s) is not of a type known to run on the device alone"
            " (cuda_graphs.CAPTURABLE)" % (name, kind))


def _probs(n, priors, classes, seed):
    z = _u((n, priors, classes), seed, -3, 3)
    e = np.exp(z - z.max(axis=2, keepdims=True))
    return (e / e.sum(axis=2, keepdims=True)).reshape(n, priors * classes)


_XY = _u((16, 2), 3, 0, 40)
PIXEL_PRIORS = np.concatenate([_XY, _XY + _u((16, 2), 4, 5, 20)], axis=1).reshape(1, 1, 64)
DET = ('type: "DetectionOutput" detection_output_param { num_classes: 3 nms_param { '
       'nms_threshold: 0.45 top_k: 10 } code_type: CENTER_SIZE keep_top_k: 6 '
       'confidence_threshold: 0.1 %s }')
MODES = [
    case("DetectionOutput", DET % "objectness_score: 0.3",
         [_u((2, 64), 1, -0.5, 0.5), _ssd_probs(2), SSD_PRIORS, _probs(2, 16, 2, 7)],
         down=[False] * 4, host_io=True),
    case("DetectionOutput", DET % "objectness_score: 0.3",
         [_u((2, 64), 1, -0.5, 0.5), _ssd_probs(2), SSD_PRIORS, _probs(2, 16, 2, 7),
          _u((2, 64), 8, -0.3, 0.3)], down=[False] * 5, host_io=True),
    case("DetectionOutput", DET % "normalized_bbox: false variance_encoded_in_target: true "
         "share_location: false", [_u((3, 192), 1, -0.5, 0.5), _probs(3, 16, 3, 3),
                                   PIXEL_PRIORS], down=[False] * 3, host_io=True),
    case("DetectionOutput", DET % "normalized_bbox: false clip: true",
         [_u((2, 64), 1, -0.5, 0.5), _probs(2, 16, 3, 3),
          np.concatenate([PIXEL_PRIORS, np.full((1, 1, 64), 0.1, np.float32)], axis=2),
          _u((2, 3, 30, 40))], down=[False] * 4, host_io=True),
    case("Proposal", 'type: "Proposal" proposal_param { ratio: 0.5 ratio: 1 scale: 2 scale: 4 '
         'feat_stride: 8 min_size: 4 pre_nms_topn: 30 post_nms_topn: 20 nms_thresh: 0.6 }',
         [_u((1, 8, 3, 4), 0, 0, 1), _u((1, 16, 3, 4), 1, -0.3, 0.3),
          np.array([[50, 70, 1.5, 0.75]], np.float32)], down=[False] * 3, tops=2,
         host_io=True),
    case("Scale", 'type: "Scale" scale_param { axis: 0 }', [_u((3, 4, 2, 5)), _u((3, 4), 1)]),
    case("Scale", 'type: "Scale" scale_param { axis: 0 bias_term: true }',
         [_u((3, 4, 2, 5)), _u((3, 4), 1)]),
    case("Reduction", 'type: "Reduction" reduction_param { operation: MEAN axis: 2 }',
         [_u((2, 3, 4, 5))]),
    case("Permute", 'type: "Permute" permute_param { order: [0, 3, 5, 1, 2, 4] }',
         [_u((2, 3, 2, 2, 3, 2))]),
    case("Deconvolution", 'type: "Deconvolution" convolution_param { num_output: 4 group: 2 '
         'kernel_h: 5 kernel_w: 7 stride_h: 2 stride_w: 4 pad_h: 1 weight_filler { type: '
         '"gaussian" } bias_filler { type: "gaussian" } }', [_u((3, 2, 3, 4))]),
    case("Deconvolution", 'type: "Deconvolution" param { lr_mult: 0 decay_mult: 0 } '
         'convolution_param { num_output: 3 group: 3 kernel_size: 2 stride: 2 bias_term: false '
         'weight_filler { type: "constant" value: 1 } }', [_u((2, 3, 3, 4))]),
    case("BN", 'type: "BN" bn_param { slope_filler { type: "uniform" } bias_filler { type: '
         '"uniform" } momentum: 0.8 }', [_u((3, 3, 5, 2), 4, -2, 3)]),
    case("BN", 'type: "BN" bn_param { slope_filler { type: "uniform" } bias_filler { type: '
         '"uniform" } frozen: true }', [_u((3, 3, 5, 2))], phase=TRAIN),
    case("BN", 'type: "BN" bn_param { slope_filler { type: "uniform" } bias_filler { type: '
         '"uniform" } }', [_u((3, 3, 5, 2))], phase=TEST),
    case("BN", 'type: "BN" bn_param { slope_filler { type: "uniform" } }', [_u((5, 3))]),
    case("SegAccuracy", 'type: "SegAccuracy" seg_accuracy_param { ignore_label: 255 '
         'reset: false }', [_u((3, 3, 4, 5)), np.array([0, 1, 2, 255, 1, 1] * 10, np.float32)
                            .reshape(3, 1, 4, 5)], down=[False, False], host_io=True),
]


NO_SOURCES = {"h5out": "%s"}  # these cases read no file


@pytest.mark.parametrize("c", MODES, ids=["%s-%d" % (c.type, i) for i, c in enumerate(MODES)])
def test_a_layer_mode_gives_the_cpu_results_in_gpu_mode(c):
    expected = run_case(c, NO_SOURCES, gpu=False)
    with simulated_device() as dev:
        got = run_case(c, NO_SOURCES, gpu=True, forbid=lambda: dev.forbid("to_host"), tag="gpu")
    for what, want, have in zip(("top", "bottom diff"), expected[:2], got[:2]):
        for i, (a, b) in enumerate(zip(want, have)):
            if a is not None:
                assert a.shape == b.shape, "%s %d" % (what, i)
                np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg="%s %d" % (what, i))
    for i, ((da, ga), (db, gb)) in enumerate(zip(expected[2], got[2])):
        np.testing.assert_allclose(db, da, rtol=RTOL, atol=ATOL, err_msg="param %d data" % i)
        np.testing.assert_allclose(gb, ga, rtol=RTOL, atol=ATOL, err_msg="param %d diff" % i)


# ---- nets: training runs, TEST forwards over new shapes, snapshots --------------------------
def in_gpu_mode(work, graphs=True):
    """``work(device)`` in GPU mode on a fresh simulated device, CUDA graphs on or off."""
    old = cuda_graphs.set_enabled(graphs)
    try:
        with simulated_device() as dev:
            backend.set_mode_gpu()
            try:
                return work(dev)
            finally:
                backend.set_mode_cpu()
    finally:
        cuda_graphs.set_enabled(old)


CONV = """
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param {
  num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "xavier" }
  bias_filler { type: "constant" value: 0.1 } } }
"""
# what the ONNX importer writes for HardSwish, a squeeze-excitation gate, a replicate pad and a
# nearest upsampling (a Deconvolution of fixed weights)
IMPORTED = CONV + """
layer { name: "hs/a" type: "Power" bottom: "conv" top: "hs/a" power_param { shift: 3 } }
layer { name: "hs/b" type: "ReLU6" bottom: "hs/a" top: "hs/a" }
layer { name: "hs/c" type: "Power" bottom: "hs/a" top: "hs/c" power_param { scale: 0.16666667 } }
layer { name: "hs" type: "Eltwise" bottom: "conv" bottom: "hs/c" top: "hs"
  eltwise_param { operation: PROD } }
layer { name: "gap" type: "Pooling" bottom: "hs" top: "gap"
  pooling_param { pool: AVE global_pooling: true } }
layer { name: "se" type: "Convolution" bottom: "gap" top: "se"
  convolution_param { num_output: 4 kernel_size: 1 weight_filler { type: "xavier" } } }
layer { name: "sig" type: "Sigmoid" bottom: "se" top: "se" }
layer { name: "gate" type: "Reshape" bottom: "se" top: "gate"
  reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "scale" type: "Scale" bottom: "hs" bottom: "gate" top: "scaled"
  scale_param { axis: 0 } }
layer { name: "edge" type: "Slice" bottom: "scaled" top: "first" top: "inner" top: "last"
  slice_param { axis: 3 slice_point: 1 slice_point: 5 } }
layer { name: "edge/inner" type: "Silence" bottom: "inner" }
layer { name: "pad" type: "Concat" bottom: "first" bottom: "scaled" bottom: "last" top: "padded"
  concat_param { axis: 3 } }
layer { name: "up" type: "Deconvolution" bottom: "padded" top: "up" param { lr_mult: 0 }
  convolution_param { num_output: 4 group: 4 kernel_size: 2 stride: 2 bias_term: false
  weight_filler { type: "constant" value: 1 } } }
"""
PSPNET = CONV + """
layer { name: "bn" type: "BN" bottom: "conv" top: "conv" bn_param { momentum: 0.9
  slope_filler { type: "constant" value: 1 } bias_filler { type: "constant" value: 0 } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "up" type: "Pooling" bottom: "conv" top: "up"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
"""
MEMORY = """
layer { name: "data" type: "MemoryData" top: "data" top: "label"
  memory_data_param { batch_size: 4 channels: 3 height: 6 width: 6 } }
"""
HEAD = """
layer { name: "ip" type: "InnerProduct" bottom: "up" top: "ip"
  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
FLOAT16 = ("default_forward_type: FLOAT16 default_backward_type: FLOAT16 "
           "default_forward_math: FLOAT default_backward_math: FLOAT global_grad_scale: 64\n")
IMAGES, LABELS = _u((16, 3, 6, 6), 3), _labels(16, 5, 4)
SOLVER = ('base_lr: 0.05 lr_policy: "fixed" type: "%s" momentum: 0.9 weight_decay: 0.001 '
          'random_seed: 5 display: 0 max_iter: 100 snapshot_after_train: false '
          'snapshot_prefix: "%s" snapshot_format: %s')


def _solver(net, rule="SGD", prefix="", fmt="BINARYPROTO"):
    param = caffe_pb2.SolverParameter()
    text_format.Merge(SOLVER % (rule, prefix, fmt), param)
    text_format.Merge(net, param.net_param)
    solver = get_solver(param)
    if solver.net.layers[0].type == "MemoryData":
        solver.net.set_input_arrays(IMAGES, LABELS)
    return solver


def _state(solver):
    """Every param blob (PSPNet's BN: slope, bias, running mean and variance) and the history."""
    return [np.array(b.data, np.float32) for blobs in solver.net.params.values()
            for b in blobs] + [backend.to_host(h).copy() for h in solver.history]


def _train(net, rule, steps=5):
    solver = _solver(net, rule)
    solver.step(steps)
    return solver, _state(solver)


@pytest.mark.parametrize("rule", ["SGD", "Adam"])
@pytest.mark.parametrize("net", [IMPORTED, PSPNET], ids=["import_patterns", "pspnet_bn"])
def test_a_training_run_is_cpu_modes_captured_or_layer_by_layer(net, rule):
    """The import patterns and PSPNet's BN (TRAIN: batch statistics, running averages
    written on the device at each forward) train captured (one capture, then replays), bit
    for bit as layer by layer, and give CPU mode's run."""
    _, cpu = _train(MEMORY + net + HEAD, rule)

    def run(dev):
        solver, state = _train(MEMORY + net + HEAD, rule)
        return state, dev.graph_captures, dev.graph_launches, solver.train_graph.why_not()

    eager = in_gpu_mode(run, graphs=False)[0]
    state, captures, launches, reason = in_gpu_mode(run)
    assert reason == ""
    assert (captures, launches) == (1, 4)
    for a, b, c in zip(cpu, eager, state):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)
        np.testing.assert_array_equal(c, b)


@pytest.mark.parametrize("net", [IMPORTED, PSPNET], ids=["import_patterns", "pspnet_bn"])
def test_a_float16_training_run_replays_as_it_runs_layer_by_layer(net):
    """float16 nets: the Scale over two bottoms, the fixed Deconvolution (no master update),
    PSPNet's BN in place on a float16 blob (its running averages in float16, written by the
    forward: the captured update's masters take them first, as layer by layer)."""
    def run(dev):
        return _train(FLOAT16 + MEMORY + net + HEAD, "SGD")[1], dev.graph_captures

    eager = in_gpu_mode(run, graphs=False)[0]
    state, captures = in_gpu_mode(run)
    assert captures == 1
    for a, b in zip(eager, state):
        np.testing.assert_array_equal(b, a)
    _, cpu = _train(MEMORY + net + HEAD, "SGD")
    for a, b in zip(cpu, eager):
        np.testing.assert_allclose(b, a, rtol=0.02, atol=2e-3)


INPUT = """
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
"""
PROPOSAL = INPUT.replace("dim: 2", "dim: 1") + """
layer { name: "info" type: "Input" top: "im_info" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "cls" type: "Convolution" bottom: "data" top: "cls"
  convolution_param { num_output: 8 kernel_size: 1 weight_filler { type: "gaussian" std: 1 } } }
layer { name: "prob" type: "Sigmoid" bottom: "cls" top: "cls" }
layer { name: "bbox" type: "Convolution" bottom: "data" top: "bbox"
  convolution_param { num_output: 16 kernel_size: 1 weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "proposal" type: "Proposal" bottom: "cls" bottom: "bbox" bottom: "im_info"
  top: "rois" top: "scores" proposal_param { feat_stride: 8 min_size: 2 ratio: 0.5 ratio: 1
  scale: 1 scale: 2 pre_nms_topn: 50 post_nms_topn: 10 } }
"""
REFINEDET = INPUT + """
layer { name: "prior" type: "Input" top: "prior" input_param { shape { dim: 1 dim: 2 dim: 64 } } }
""" + "".join("""
layer { name: "%s" type: "Convolution" bottom: "data" top: "%s" convolution_param {
  num_output: %d kernel_size: 3 stride: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "%s/f" type: "Flatten" bottom: "%s" top: "%s/f" }""" % ((n, n, c) + (n,) * 3)
              for n, c in (("loc", 16), ("conf", 12), ("arm", 8), ("arm_loc", 16))) + """
layer { name: "conf/s" type: "Sigmoid" bottom: "conf/f" top: "conf/f" }
layer { name: "arm/s" type: "Sigmoid" bottom: "arm/f" top: "arm/f" }
layer { name: "det" type: "DetectionOutput" bottom: "loc/f" bottom: "conf/f" bottom: "prior"
  bottom: "arm/f" bottom: "arm_loc/f" top: "det" detection_output_param { num_classes: 3
  nms_param { nms_threshold: 0.45 top_k: 10 } keep_top_k: 5 confidence_threshold: 0.05
  objectness_score: 0.4 code_type: CENTER_SIZE } }
"""
NETS = {"import_patterns": (INPUT + IMPORTED, ""), "pspnet_bn": (INPUT + PSPNET, ""),
        "proposal": (PROPOSAL, "proposal"), "refinedet": (REFINEDET, "det")}
BATCHES = [2, 2, 2, 2, 3, 3, 3, 1]


def _feeds(name, k, n):
    if name == "proposal":
        return {"data": _u((1, 3, 4 + k % 3, 5), k), "im_info": np.array(
            [[30 + k, 40, 1 + 0.25 * k]], np.float32)}
    feeds = {"data": _u((n, 3, 6, 6), 10 + k)}
    if name == "refinedet":
        feeds["prior"] = SSD_PRIORS
    return feeds


@pytest.mark.parametrize("name", sorted(NETS))
def test_a_test_net_over_new_shapes_gives_the_cpu_outputs(name, tmp_path):
    """TEST forwards over batch sizes 2, 3, 1 (each new shape: once layer by layer, then
    captured and replayed where the net may be captured). Proposal and DetectionOutput read
    their bottoms on the host: such nets run layer by layer, naming the layer."""
    text, blocker = NETS[name]
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    backend.set_random_seed(3)
    net = Net(str(path), caffe_pb2.TEST)
    if "bn" in net.params:  # running statistics of its own
        net.params["bn"][2].data[...] = _u((1, 4, 1, 1), 7, -0.2, 0.2)
        net.params["bn"][3].data[...] = _u((1, 4, 1, 1), 8, 0.5, 2)
    net.save(str(tmp_path / "w.caffemodel"))

    def forwards(dev=None):
        net = Net(str(path), caffe_pb2.TEST, weights=str(tmp_path / "w.caffemodel"))
        outputs = []
        for k, n in enumerate(BATCHES):
            for blob, value in _feeds(name, k, n).items():
                net.blobs[blob].reshape(*value.shape)
                net.blobs[blob].data[...] = value
            net.forward()
            outputs.append([np.array(net.blobs[b].data) for b in net.outputs])
        if dev is None:
            return outputs
        return outputs, dev.graph_captures, cuda_graphs.why_not(net, 0, len(net.layers) - 1)

    cpu = forwards()
    gpu, captures, why = in_gpu_mode(forwards)
    if blocker:
        assert captures == 0 and why.startswith("layer '%s' (" % blocker), why
    else:
        assert captures == 2 and why == ""  # batch 2 and batch 3; batch 1 ran once
    for k, (want, got) in enumerate(zip(cpu, gpu)):
        for a, b in zip(want, got):
            assert a.shape == b.shape, "forward %d" % k
            np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg="forward %d" % k)


# ---- DeepLab's files: ImageSegData in both nets, SegAccuracy in the TEST net ----------------
SEG_DATA = """
layer { name: "data" type: "ImageSegData" top: "data" top: "label" top: "data_dim"
  include { phase: %(phase)s } image_data_param { source: "%(root)s/list.txt"
  root_folder: "%(root)s/" batch_size: 2 label_type: PIXEL shuffle: %(train)s }
  transform_param { crop_size: 8 mirror: %(train)s mean_value: 100 scale: 0.01 } }
"""
SEG = """
layer { name: "dim" type: "Silence" bottom: "data_dim" }
%s
layer { name: "score" type: "Convolution" bottom: "conv" top: "score"
  convolution_param { num_output: 3 kernel_size: 1 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss"
  loss_param { ignore_label: 255 } include { phase: TRAIN } }
layer { name: "acc" type: "SegAccuracy" bottom: "score" bottom: "label" top: "acc"
  seg_accuracy_param { ignore_label: 255 %s } include { phase: TEST } }
"""


def _seg_files(root):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(
            root / ("im%d.png" % i))
        Image.fromarray(rng.choice(np.array([0, 1, 2, 255], np.uint8), (10, 12))).save(
            root / ("lb%d.png" % i))
        lines.append("im%d.png lb%d.png" % (i, i))
    (root / "list.txt").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("reset", ["", "reset: false"], ids=["reset", "accumulating"])
@pytest.mark.parametrize("body", ["conv", "pspnet_bn"])
def test_seg_accuracy_in_the_test_net_scores_as_in_cpu_mode(body, reset, tmp_path):
    """The TEST net's SegAccuracy counts its confusion matrix on the host: the test net runs
    layer by layer, naming it, while the train net is captured (PSPNet's BN included);
    scores and weights (running averages included) are CPU mode's."""
    _seg_files(tmp_path)
    data = "".join(SEG_DATA % dict(phase=phase, root=tmp_path, train=train)
                   for phase, train in (("TRAIN", "true"), ("TEST", "false")))
    layers = (PSPNET if body == "pspnet_bn" else CONV).split('layer { name: "up"')[0]
    net = data + SEG % (layers, reset)

    def run(dev=None):
        param = caffe_pb2.SolverParameter()
        text_format.Merge('base_lr: 0.05 lr_policy: "fixed" type: "SGD" momentum: 0.9 '
                          'random_seed: 5 display: 0 max_iter: 100 test_iter: 3 '
                          'test_interval: 2 test_initialization: true', param)
        text_format.Merge(net, param.net_param)
        solver = get_solver(param)
        scores = []
        for _ in range(6):
            solver.step(1)
            scores.append(list(solver.test_scores[0]))
        result = scores, _state(solver)
        if dev is None:
            return result
        test = solver.test_nets[0]
        return result + (dev.graph_captures, solver.train_graph.why_not(),
                         cuda_graphs.why_not(test, 0, len(test.layers) - 1))

    scores, state = run()
    assert len(scores[-1]) == 3 and 0 < scores[-1][0][1] < 1
    got, got_state, captures, train_why, test_why = in_gpu_mode(run)
    assert test_why == _why("acc", "SegAccuracy")
    assert (captures, train_why) == (1, "")
    assert got == scores
    for a, b in zip(state, got_state):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)


# ---- snapshots of PSPNet's BN in GPU mode -----------------------------------------------------
@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
@pytest.mark.parametrize("graphs", [True, False], ids=["captured", "layer_by_layer"])
def test_a_gpu_snapshot_restores_pspnet_bn_and_continues_the_run(fmt, graphs, tmp_path):
    """Slope, bias, running mean and variance (updated by each TRAIN forward, on the device)
    and the solver's history come back exactly, in GPU mode and in CPU mode, and the restored
    runs continue as the uninterrupted one."""
    net = MEMORY + PSPNET + HEAD

    def first(dev):
        solver = _solver(net, "Adam", tmp_path / "snap", fmt)
        solver.step(3)
        solver.snapshot()
        saved = _state(solver)
        solver.step(3)
        return solver.last_snapshot, saved, _state(solver)

    def resumed(dev=None):
        solver = _solver(net, "Adam", tmp_path / "again", fmt)
        solver.restore(snapshot)
        restored = _state(solver)
        solver.step(3)
        return restored, _state(solver)

    snapshot, saved, uninterrupted = in_gpu_mode(first, graphs)
    assert any(np.any(b != 0) for b in saved[4:6])  # the running averages moved
    for restored, continued in (in_gpu_mode(resumed, graphs), resumed()):
        for a, b in zip(saved, restored):
            np.testing.assert_array_equal(b, a)
        for a, b in zip(uninterrupted, continued):
            np.testing.assert_array_equal(b, a)
