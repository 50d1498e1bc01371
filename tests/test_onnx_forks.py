"""ONNX export of the forks' layers, one layer at a time: a one-layer net with random weights,
exported and run by onnxruntime, equals our forward to 1e-5 relative (DetectionOutput: the
same rows in the same order); every export passes ``onnx.checker.check_model(full_check=
True)``."""

import numpy as np
import pytest

from helpers.onnx_runtime import (assert_close, fill_random, input_layers, net_from_text, onnx,
                          run_ort)
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

X4 = {"data": (2, 4, 7, 7)}


def one(type_, params="", shapes=None, bottoms=("data",)):
    shapes = shapes or X4
    text = input_layers(shapes) + '\nlayer { name: "layer" type: "%s" %s top: "out" %s }' % (
        type_, " ".join('bottom: "%s"' % b for b in bottoms), params)
    return text, shapes


def prior_box(params):
    return one("PriorBox", "prior_box_param { %s }" % params,
               {"feat": (2, 3, 5, 6), "img": (2, 3, 40, 48)}, ("feat", "img"))


def roi_pooling(params, rois_shape=(7, 5)):
    return one("ROIPooling", "roi_pooling_param { %s }" % params,
               {"data": (2, 3, 9, 11), "rois": rois_shape}, ("data", "rois"))


CASES = {
    "permute_nhwc": one("Permute", "permute_param { order: 0 order: 2 order: 3 order: 1 }"),
    "permute_partial_order": one("Permute", "permute_param { order: 1 order: 0 }"),
    "normalize_ssd": one("Normalize", "norm_param { across_spatial: false "
                         "channel_shared: false }"),
    "normalize_across_shared": one("Normalize", "norm_param { across_spatial: true "
                                   "channel_shared: true eps: 0.01 }"),
    "normalize_across_per_channel": one("Normalize", "norm_param { across_spatial: true "
                                        "channel_shared: false }"),
    "prior_box_ssd": prior_box("min_size: 10 max_size: 25 aspect_ratio: 2 aspect_ratio: 3 "
                               "flip: true clip: false variance: 0.1 variance: 0.1 "
                               "variance: 0.2 variance: 0.2 step: 8 offset: 0.5"),
    "prior_box_clip_img_size": prior_box("min_size: 12 min_size: 20 aspect_ratio: 2 "
                                         "clip: true img_h: 50 img_w: 30 step_h: 9 "
                                         "step_w: 5 offset: 0.25 variance: 0.2"),
    "interp_zoom": one("Interp", "interp_param { zoom_factor: 3 }"),
    "interp_shrink": one("Interp", "interp_param { shrink_factor: 2 }"),
    "interp_shrink_zoom": one("Interp", "interp_param { shrink_factor: 3 zoom_factor: 4 }"),
    "interp_size_cropped": one("Interp", "interp_param { height: 11 width: 4 pad_beg: -1 "
                               "pad_end: -2 }"),
    "interp_single_row": one("Interp", "interp_param { height: 1 width: 9 }"),
    "interp_same_size": one("Interp", "interp_param { height: 7 width: 7 }"),
    "shuffle_channel": one("ShuffleChannel", "shuffle_channel_param { group: 2 }",
                           {"data": (2, 6, 3, 4)}),
    "shuffle_channel_2d": one("ShuffleChannel", "shuffle_channel_param { group: 3 }",
                              {"data": (2, 12)}),
    "roi_pooling": roi_pooling("pooled_h: 3 pooled_w: 2 spatial_scale: 0.5"),
    "roi_pooling_4d_rois": roi_pooling("pooled_h: 2 pooled_w: 4", (7, 5, 1, 1)),
    "conv_depthwise": one("ConvolutionDepthwise", "convolution_param { kernel_size: 3 pad: 1 "
                          "stride: 2 }"),
    "depthwise_conv_multiplier": one("DepthwiseConvolution", "convolution_param { "
                                     "num_output: 8 kernel_size: 3 dilation: 2 "
                                     "bias_term: false }"),
    "axpy": one("Axpy", "", {"a": (2, 4, 1, 1), "x": (2, 4, 5, 3), "y": (2, 4, 5, 3)},
                ("a", "x", "y")),
    "axpy_2d_scale": one("Axpy", "", {"a": (2, 4), "x": (2, 4, 5, 3), "y": (2, 4, 5, 3)},
                         ("a", "x", "y")),
    "bn_pspnet": one("BN", "bn_param { frozen: true eps: 0.001 }"),
    "bn_segnet_inference": one("BN", "bn_param { bn_mode: INFERENCE }"),
    "bn_segnet_learn": one("BN", "bn_param { bn_mode: LEARN }"),
    "reorg": one("Reorg", "reorg_param { stride: 2 }", {"data": (2, 8, 6, 4)}),
    "reorg_reverse": one("Reorg", "reorg_param { stride: 2 reverse: true }",
                         {"data": (2, 8, 3, 5)}),
}

# regions of interest: ends at exact halves after scaling (C's rounding sends them away from
# zero), outside the map, inverted, a single cell, negative corners
ROIS = np.array([[0, 1, 3, 9, 13], [1, 0, 0, 21, 17], [1, 5, 5, 5, 5], [0, 15, 3, 25, 30],
                 [1, 7, 9, 3, 1], [0, -3, -5, 3, 3], [1, 2.5, 1.5, 14.5, 11]], np.float32)


def feeds_for(shapes, rng):
    feeds = {}
    for name, shape in shapes.items():
        if name == "rois":
            feeds[name] = ROIS.reshape(shape)
        else:
            feeds[name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    return feeds


def export_and_run(net, feeds, tmp_path, key, opset=None):
    ours = {k: v.copy() for k, v in net.forward(**feeds).items()}
    path = tmp_path / (key + ".onnx")
    model, report = caffe_onnx.export(net, str(path), opset=opset)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert sorted(report["outputs"]) == sorted(ours)
    return ours, run_ort(model, feeds), model


@pytest.mark.parametrize("key", sorted(CASES))
def test_fork_layer_exports_with_caffe_numbers(key, tmp_path):
    text, shapes = CASES[key]
    net = net_from_text(text)
    rng = fill_random(net, seed=sum(map(ord, key)))
    ours, theirs, model = export_and_run(net, feeds_for(shapes, rng), tmp_path, key)
    for name, value in ours.items():
        assert_close(value, theirs[name], "%s: %s" % (key, name))
    assert any(n.name.startswith("layer") for n in model.graph.node) or key.startswith(
        "prior_box")


def test_prior_box_is_a_constant_for_every_batch(tmp_path):
    text, shapes = CASES["prior_box_ssd"]
    net = net_from_text(text)
    rng = fill_random(net)
    model, _ = caffe_onnx.export(net, None)
    assert not model.graph.input          # the priors read no input: a constant
    out = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in out] == [1, 2, 5 * 6 * 6 * 4]
    ours = net.forward(**feeds_for(shapes, rng))["out"]
    assert_close(ours, run_ort(model, {})["out"], "priors")


def test_interp_with_dynamic_batch(tmp_path):
    text, shapes = CASES["interp_size_cropped"]
    net = net_from_text(text)
    rng = fill_random(net)
    model, _ = caffe_onnx.export(net, None)
    x = rng.uniform(-1, 1, (3, 4, 7, 7)).astype(np.float32)
    net.blobs["data"].reshape(*x.shape)
    net.reshape()
    assert_close(net.forward(data=x)["out"], run_ort(model, {"data": x})["out"], "batch 3")


# ---- DetectionOutput ------------------------------------------------------------------

DET = ("share_location: true background_label_id: 0 nms_param { nms_threshold: 0.45 "
       "top_k: 50 } code_type: CENTER_SIZE keep_top_k: 30 confidence_threshold: 0.3")


def detection_problem(params, num=2, P=60, C=4, shared=True, loc_scale=0.5, ties=False,
                      seed=3, prior_images=1):
    """A DetectionOutput net and its inputs: random priors inside the image, offsets, and
    softmax scores (or scores on a coarse grid, so that many are equal). ``prior_images`` > 1:
    the prior blob holds that many images' priors (``N x 2 x 4P``), the first one's used, the
    others shifted away from it."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 0.8, (P, 2))
    prior = np.concatenate([xy, xy + rng.uniform(0.1, 0.3, (P, 2))], axis=1)
    var = np.tile([0.1, 0.1, 0.2, 0.2], (P, 1))
    L = 1 if shared else C
    loc = rng.normal(0, loc_scale, (num, P * L * 4)).astype(np.float32)
    if ties:
        conf = np.round(rng.uniform(0, 1, (num, P, C)) * 4) / 4
    else:
        z = rng.normal(0, 1.5, (num, P, C))
        conf = np.exp(z) / np.exp(z).sum(axis=2, keepdims=True)
    priors = np.stack([np.stack([prior.ravel() + 0.05 * i, var.ravel() * (i + 1)])
                       for i in range(prior_images)])
    feeds = {"loc": loc, "conf": conf.reshape(num, -1).astype(np.float32),
             "prior": priors.astype(np.float32)}
    text = input_layers({k: v.shape for k, v in feeds.items()}) + (
        'layer { name: "det" type: "DetectionOutput" bottom: "loc" bottom: "conf" '
        'bottom: "prior" top: "det" detection_output_param { num_classes: %d %s } }'
        % (C, params))
    return net_from_text(text), feeds


def inverted(rows):
    return int(((rows[:, 5] < rows[:, 3]) | (rows[:, 6] < rows[:, 4])).sum())


DET_CASES = {
    "center_size": (DET, {}),
    "keep_top_k_cuts": (DET.replace("keep_top_k: 30", "keep_top_k: 8"), {}),
    "corner": (DET.replace("CENTER_SIZE", "CORNER"), {}),
    "corner_size": (DET.replace("CENTER_SIZE", "CORNER_SIZE"), {}),
    "variance_in_target": (DET + " variance_encoded_in_target: true", {}),
    "clip": (DET + " clip: true", {"loc_scale": 3.0}),
    "background_2": (DET.replace("background_label_id: 0", "background_label_id: 2"), {}),
    "no_background": (DET.replace("background_label_id: 0", "background_label_id: -1"), {}),
    "per_class_locations": (DET.replace("share_location: true", "share_location: false"),
                            {"shared": False}),
    "no_threshold_no_limits": ("nms_param { nms_threshold: 0.3 }", {}),
    "one_image": (DET, {"num": 1}),
    # SSD's own test feeds N x 2 x 4P priors: the first image's are used
    "batched_priors": (DET, {"prior_images": 2}),
    # the layer's inverted boxes overlap nothing; ONNX would reorder their corners
    "corner_inverted_boxes": ("nms_param { nms_threshold: 0.3 top_k: 10 } code_type: CORNER "
                              "keep_top_k: 12 confidence_threshold: 0.1",
                              {"C": 3, "P": 40, "loc_scale": 2.0, "seed": 5}),
    # equal scores: TopK and the stable sorts break ties by prior, then by row order
    "ties": ("nms_param { nms_threshold: 0.3 top_k: 10 } code_type: CENTER_SIZE "
             "keep_top_k: 7", {"C": 3, "P": 40, "ties": True, "seed": 5}),
    "ties_threshold": ("nms_param { nms_threshold: 0.5 } keep_top_k: 9 "
                       "confidence_threshold: 0.5", {"C": 3, "P": 40, "ties": True}),
    "nothing_detected": (DET.replace("confidence_threshold: 0.3",
                                     "confidence_threshold: 0.99"), {}),
    "keep_none": ("nms_param { nms_threshold: 0.5 } keep_top_k: 0", {}),
    "no_candidates": (DET.replace("top_k: 50", "top_k: 0"), {}),
    # a threshold above 1 suppresses nothing (ONNX accepts thresholds up to 1)
    "threshold_above_one": (DET.replace("nms_threshold: 0.45", "nms_threshold: 1.5"), {}),
}


@pytest.mark.parametrize("key", sorted(DET_CASES))
def test_detection_output_exports_with_the_layers_rows(key, tmp_path):
    params, options = DET_CASES[key]
    net, feeds = detection_problem(params, **options)
    ours, theirs, model = export_and_run(net, feeds, tmp_path, key)
    ours, theirs = ours["det"], theirs["det"]
    rows = ours.reshape(-1, 7)
    if key in ("nothing_detected", "keep_none", "no_candidates"):
        num = feeds["loc"].shape[0]
        np.testing.assert_array_equal(rows[:, 0], np.arange(num))
        assert (rows[:, 1:] == -1).all()
    else:
        assert len(rows) >= 7 and (rows[:, 1] >= 0).all()
    if key == "corner_inverted_boxes":
        assert inverted(rows) >= 5
    if key.startswith("ties"):
        assert len(set(rows[:, 2])) < len(rows) / 2
    # the same rows in the same order (images, classes ascending, scores descending)
    assert ours.shape == theirs.shape
    np.testing.assert_array_equal(theirs[..., :2], ours[..., :2])
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-6)


def test_detection_output_output_shape_is_declared_variable(tmp_path):
    net, feeds = detection_problem(DET)
    model, _ = caffe_onnx.export(net, None)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value or d.dim_param for d in dims] == [1, 1, "det_detections", 7]


def test_detection_output_other_batch_sizes(tmp_path):
    net, _ = detection_problem(DET, num=2)
    model, _ = caffe_onnx.export(net, None)
    for num in (1, 3):
        _, feeds = detection_problem(DET, num=num, seed=num)
        for name in ("loc", "conf"):
            net.blobs[name].reshape(*feeds[name].shape)
        net.reshape()
        ours = net.forward(**feeds)["det"].copy()
        assert set(ours[0, 0, :, 0]) == set(range(num))
        np.testing.assert_allclose(run_ort(model, feeds)["det"], ours, rtol=1e-5, atol=1e-6)


def test_detection_output_oldest_opset(tmp_path):
    net, feeds = detection_problem(DET.replace("keep_top_k: 30", "keep_top_k: 8"))
    ours, theirs, model = export_and_run(net, feeds, tmp_path, "opset13", opset=13)
    assert model.opset_import[0].version == 13
    np.testing.assert_allclose(theirs["det"], ours["det"], rtol=1e-5, atol=1e-6)


def test_adaptive_eta_is_an_export_error():
    net, _ = detection_problem(DET.replace("nms_threshold: 0.45", "nms_threshold: 0.6 eta: 0.9"))
    with pytest.raises(CaffeError, match=r"layer 'det' \(type DetectionOutput\): nms_param "
                                         r"eta 0.9 with nms_threshold 0.6 .*no ONNX equivalent"):
        caffe_onnx.export(net, None)


def test_eta_that_never_acts_exports(tmp_path):
    """eta lowers the threshold only while it is above 0.5: at 0.45 the layer's suppression
    is the plain greedy one."""
    net, feeds = detection_problem(DET.replace("top_k: 50", "top_k: 50 eta: 0.7"))
    ours, theirs, _ = export_and_run(net, feeds, tmp_path, "eta")
    np.testing.assert_allclose(theirs["det"], ours["det"], rtol=1e-5, atol=1e-6)


def test_every_fork_converter_is_covered():
    covered = {text.split('type: "')[-1].split('"')[0] for text, _ in CASES.values()}
    covered.add("DetectionOutput")
    own = {t for t, fn in caffe_onnx.CONVERTERS.items()
           if fn.__module__.rsplit(".", 1)[-1] in ("ops_forks", "ops_detection")}
    assert own == covered, own ^ covered
