"""Every detection net of the suite runs inside a 4 GiB address space.

A child process that imports only pycaffe-lite (and NumPy) limits its own address space
(RLIMIT_AS) to 4 GiB, then builds and runs: the public SSD deploy nets of tests/fixtures/ssd
(OpenCV's ResNet-10 face detector, MobileNet-SSD), models/ssd_shapes' TEST net (its data
layer replaced by inputs; DetectionOutput and DetectionEvaluate), SSD's DetectionOutput over
30,000 priors at a low threshold, MobileNet-YOLO's Yolov3DetectionOutput (two heads of a
608 x 608 input, 20 classes, confidence_threshold 0.01, about 30,000 candidate boxes: an
N x N overlap matrix of them would need 7 GB) and YoloDetectionOutput, py-faster-rcnn's
proposal layer and an R-FCN head (Proposal + PSROIPooling), CTPN's text proposals, Intel
Caffe's EvalDetection and SSD's DetectionEvaluate.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SSD = os.path.join(ROOT, "tests", "fixtures", "ssd")
LIMIT = 4 << 30

CHILD = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (%d, %d))
    import numpy as np
    import pycaffe_lite as caffe

    report = {}
    for entry in json.load(open(sys.argv[1])):
        net = caffe.Net(entry["proto"], caffe.TEST)
        rng = np.random.default_rng(0)
        for name, blobs in net.params.items():
            for b in blobs:
                b.data[...] = rng.normal(0, 0.05, b.data.shape)
            if net.layer_dict[name].type == "BatchNorm":    # mean 0, variance 1, factor 1
                for b, v in zip(blobs, (0.0, 1.0, 1.0)):
                    b.data[...] = v
        inputs = {k: np.load(v) for k, v in entry["inputs"].items()}
        out = net.forward(**inputs)
        shapes = {k: list(v.shape) for k, v in out.items()}
        if "detection_out" in net.blobs:
            shapes["detection_out"] = list(net.blobs["detection_out"].data.shape)
        report[entry["name"]] = shapes
    print(json.dumps(report))
""" % (LIMIT, LIMIT))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def yolov3_heads(rng, classes=20, sides=(19, 38), share=0.28):
    """Two YOLOv3 heads (3 anchors each) where about ``share`` of the class scores pass
    0.01: objectness logit 3, class logits above logit(0.0105) with that probability."""
    heads = []
    for s in sides:
        x = rng.normal(0, 1, (1, 3, 5 + classes, s, s))
        x[:, :, 4] = 3.0
        passes = rng.uniform(0, 1, (1, 3, classes, s, s)) < share
        x[:, :, 5:] = np.where(passes, rng.uniform(-4.4, 2.0, passes.shape), -8.0)
        heads.append(x.reshape(1, 3 * (5 + classes), s, s).astype(np.float32))
    return heads


YOLOV3 = """
name: "yolov3_lite_head"
input: "h0" input_shape { dim: 1 dim: 75 dim: 19 dim: 19 }
input: "h1" input_shape { dim: 1 dim: 75 dim: 38 dim: 38 }
layer { name: "detection_out" type: "Yolov3DetectionOutput" bottom: "h0" bottom: "h1"
  top: "detection_out"
  yolov3_detection_output_param { confidence_threshold: 0.01 nms_threshold: 0.45
    num_classes: 20 biases: 10 biases: 14 biases: 23 biases: 27 biases: 37 biases: 58
    biases: 81 biases: 82 biases: 135 biases: 169 biases: 344 biases: 319
    mask: 3 mask: 4 mask: 5 mask: 0 mask: 1 mask: 2 anchors_scale: 32 anchors_scale: 16
    mask_group_num: 2 } }
"""

YOLOV2 = """
name: "yolov2_head"
input: "x" input_shape { dim: 1 dim: 125 dim: 13 dim: 13 }
layer { name: "detection_out" type: "YoloDetectionOutput" bottom: "x" top: "detection_out"
  yolo_detection_output_param { num_classes: 20 num_box: 5 confidence_threshold: 0.01
    nms_threshold: 0.45 biases: 1.08 biases: 1.19 biases: 3.42 biases: 4.41 biases: 6.63
    biases: 11.38 biases: 9.42 biases: 5.11 biases: 16.62 biases: 10.52 } }
"""

SSD_PRIORS = """
name: "ssd_output"
input: "loc" input_shape { dim: 1 dim: 120000 }
input: "conf" input_shape { dim: 1 dim: 60000 }
input: "prior" input_shape { dim: 1 dim: 2 dim: 120000 }
layer { name: "detection_out" type: "DetectionOutput" bottom: "loc" bottom: "conf"
  bottom: "prior" top: "detection_out"
  detection_output_param { num_classes: 2 background_label_id: 0 confidence_threshold: 0.01
    nms_param { nms_threshold: 0.45 } } }
"""

RFCN = """
name: "rfcn_head"
input: "scores" input_shape { dim: 1 dim: 18 dim: 38 dim: 50 }
input: "deltas" input_shape { dim: 1 dim: 36 dim: 38 dim: 50 }
input: "im_info" input_shape { dim: 1 dim: 3 }
input: "features" input_shape { dim: 1 dim: 441 dim: 38 dim: 50 }
layer { name: "proposal" type: "Python" bottom: "scores" bottom: "deltas" bottom: "im_info"
  top: "rois" python_param { module: "rpn.proposal_layer" layer: "ProposalLayer"
  param_str: "'feat_stride': 16" } }
layer { name: "psroi" type: "PSROIPooling" bottom: "features" bottom: "rois" top: "psroi"
  psroi_pooling_param { spatial_scale: 0.0625 output_dim: 9 group_size: 7 } }
"""

CTPN = """
name: "ctpn_head"
input: "scores" input_shape { dim: 1 dim: 20 dim: 38 dim: 50 }
input: "deltas" input_shape { dim: 1 dim: 20 dim: 38 dim: 50 }
input: "im_info" input_shape { dim: 1 dim: 3 }
layer { name: "proposal" type: "Python" bottom: "scores" bottom: "deltas" bottom: "im_info"
  top: "rois" top: "scores_out" python_param { module: "layers.text_proposal_layer"
  layer: "ProposalLayer" param_str: "'feat_stride': 16" } }
"""

EVAL = """
name: "eval_heads"
input: "region" input_shape { dim: 1 dim: 125 dim: 13 dim: 13 }
input: "label" input_shape { dim: 1 dim: 1 dim: 2 dim: 8 }
input: "det" input_shape { dim: 1 dim: 1 dim: 3000 dim: 7 }
input: "gt" input_shape { dim: 1 dim: 1 dim: 2 dim: 8 }
layer { name: "eval" type: "EvalDetection" bottom: "region" bottom: "label" top: "eval"
  eval_detection_param { side: 13 num_class: 20 num_object: 5 nms: 0.45 biases: 1.08
    biases: 1.19 biases: 3.42 biases: 4.41 biases: 6.63 biases: 11.38 biases: 9.42
    biases: 5.11 biases: 16.62 biases: 10.52 } }
layer { name: "map" type: "DetectionEvaluate" bottom: "det" bottom: "gt" top: "map"
  detection_evaluate_param { num_classes: 3 } }
"""


def ssd_shapes_test_net(tmp_path):
    """models/ssd_shapes' TEST net with its LMDB data layer replaced by inputs."""
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    with open(os.path.join(ROOT, "models", "ssd_shapes", "ssd_shapes.prototxt")) as f:
        text_format.Merge(f.read(), net)
    layers = [lp for lp in net.layer if lp.type != "AnnotatedData"]
    del net.layer[:]
    net.layer.extend(layers)
    for name, dims in (("data", (1, 3, 96, 96)), ("label", (1, 1, 2, 8))):
        net.input.append(name)
        net.input_shape.add().dim.extend(dims)
    path = tmp_path / "ssd_shapes_test.prototxt"
    path.write_text(text_format.MessageToString(net))
    return str(path)


def _nets(tmp_path):
    """[(name, prototxt path, {input: array})], and the Yolov3 case's candidate count."""
    rng = np.random.default_rng(1)
    nets = []

    def add(name, proto, inputs):
        path = tmp_path / (name + ".prototxt")
        if proto.endswith(".prototxt"):
            path = proto
        else:
            path.write_text(proto)
        nets.append((name, str(path), inputs))

    add("res10_face_ssd", os.path.join(SSD, "res10_deploy.prototxt"),
        {"data": rng.uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32)})
    add("mobilenet_ssd", os.path.join(SSD, "mobilenet_ssd_deploy.prototxt"),
        {"data": rng.uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32)})
    gt = np.array([[0, 1, 0, 0.1, 0.1, 0.3, 0.3, 0], [0, 2, 0, 0.5, 0.5, 0.7, 0.9, 0]])
    add("ssd_shapes", ssd_shapes_test_net(tmp_path),
        {"data": rng.uniform(-1, 1, (1, 3, 96, 96)).astype(np.float32),
         "label": gt.reshape(1, 1, 2, 8).astype(np.float32)})
    xy = rng.uniform(0, 0.95, (30000, 2))
    priors = np.concatenate([xy, xy + rng.uniform(0.01, 0.05, (30000, 2))], axis=1)
    fg = rng.uniform(0.02, 1.0, 30000)
    add("ssd_30000_priors", SSD_PRIORS, {
        "loc": rng.normal(0, 0.1, (1, 120000)).astype(np.float32),
        "conf": np.stack([1 - fg, fg], axis=1).reshape(1, -1).astype(np.float32),
        "prior": np.stack([priors.reshape(-1), np.full(120000, 0.1)])[None].astype(np.float32)})
    heads = yolov3_heads(rng)
    candidates = 0
    for x in heads:
        x = x.reshape(3, 25, *x.shape[2:]).astype(np.float64)
        candidates += int((_sigmoid(x[:, 5:]) * _sigmoid(x[:, 4:5]) > np.float32(0.01)).sum())
    add("yolov3_lite", YOLOV3, {"h0": heads[0], "h1": heads[1]})
    add("yolov2", YOLOV2, {"x": rng.normal(0, 1, (1, 125, 13, 13)).astype(np.float32)})
    logits = rng.normal(0, 2, (1, 2, 9, 38, 50))
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    add("rfcn", RFCN, {"scores": prob.reshape(1, 18, 38, 50).astype(np.float32),
                       "deltas": rng.normal(0, 0.3, (1, 36, 38, 50)).astype(np.float32),
                       "im_info": np.array([[600, 800, 1]], np.float32),
                       "features": rng.normal(0, 1, (1, 441, 38, 50)).astype(np.float32)})
    add("ctpn", CTPN, {"scores": rng.uniform(0, 1, (1, 20, 38, 50)).astype(np.float32),
                       "deltas": rng.normal(0, 0.2, (1, 20, 38, 50)).astype(np.float32),
                       "im_info": np.array([[600, 800, 1]], np.float32)})
    det = np.zeros((3000, 7))
    det[:, 1] = rng.integers(1, 3, 3000)
    det[:, 2] = rng.uniform(0, 1, 3000)
    det[:, 3:5] = rng.uniform(0, 0.8, (3000, 2))
    det[:, 5:7] = det[:, 3:5] + 0.1
    add("evaluation", EVAL, {"region": rng.normal(0, 1, (1, 125, 13, 13)).astype(np.float32),
                             "label": gt.reshape(1, 1, 2, 8).astype(np.float32),
                             "det": det.reshape(1, 1, 3000, 7).astype(np.float32),
                             "gt": gt.reshape(1, 1, 2, 8).astype(np.float32)})
    return nets, candidates


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")
def test_every_detection_net_runs_in_4_gib(tmp_path):
    nets, candidates = _nets(tmp_path)
    assert candidates > 25000          # the case an N x N overlap matrix cannot hold
    manifest = []
    for name, proto, inputs in nets:
        files = {}
        for k, v in inputs.items():
            files[k] = str(tmp_path / ("%s_%s.npy" % (name, k)))
            np.save(files[k], v)
        manifest.append({"name": name, "proto": proto, "inputs": files})
    (tmp_path / "nets.json").write_text(json.dumps(manifest))
    (tmp_path / "child.py").write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, str(tmp_path / "child.py"),
                          str(tmp_path / "nets.json")], capture_output=True, text=True,
                         env=env, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(report) == {name for name, _, _ in nets}
    # every detection output holds rows of 7; the low-threshold cases keep many boxes
    for name in ("res10_face_ssd", "mobilenet_ssd", "ssd_30000_priors", "yolov3_lite",
                 "yolov2", "ssd_shapes"):
        shape = report[name]["detection_out"]
        assert len(shape) == 4 and shape[3] == 7, (name, shape)
    assert report["yolov3_lite"]["detection_out"][2] > 1000
    assert report["ssd_30000_priors"]["detection_out"][2] > 1000
    assert report["ssd_shapes"]["detection_eval"][3] == 5
    assert report["rfcn"]["psroi"][0] == 300               # post_nms_topN (TEST)
    assert report["ctpn"]["rois"][1] == 4
