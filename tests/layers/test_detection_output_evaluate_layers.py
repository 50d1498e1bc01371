import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import empty_blobs, make_layer

from helpers.ssd import blob_of, gt_rows

# four priors (boxes then variances, PriorBox's layout); zero offsets decode to the priors
PRIORS = np.array([[0.1, 0.1, 0.5, 0.5], [0.12, 0.1, 0.52, 0.5], [0.6, 0.6, 0.9, 0.9],
                   [0.0, 0.5, 0.4, 1.0]])
VARIANCE = np.full((4, 4), 0.1)


def prior_blob(priors=PRIORS, variance=VARIANCE):
    return blob_of(np.stack([priors.reshape(-1), variance.reshape(-1)])[None])


def detect(text, loc, conf, priors=None):
    layer = make_layer('name: "det" type: "DetectionOutput" detection_output_param { %s }'
                       % text)
    bottom = [blob_of(loc), blob_of(conf), priors or prior_blob()]
    top = empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return top[0].data


# class scores per prior (3 classes, background 0)
CONF = np.array([[[0.1, 0.8, 0.1], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4], [0.5, 0.05, 0.45]],
                 [[0.9, 0.05, 0.05], [0.9, 0.05, 0.05], [0.9, 0.05, 0.05],
                  [0.1, 0.1, 0.8]]])


def test_detection_output_by_hand():
    out = detect("num_classes: 3 nms_param { nms_threshold: 0.5 } code_type: CORNER "
                 "confidence_threshold: 0.2", np.zeros((2, 16)), CONF.reshape(2, 12))
    assert out.shape == (1, 1, 5, 7)
    # image 0, class 1: prior 1 (0.7) overlaps prior 0 (0.8) by 0.905 -> suppressed;
    # class 2: priors 3 (0.45) and 2 (0.4) do not overlap (prior 0's 0.1 is below the
    # threshold). Image 1: only prior 3, class 2.
    want = [[0, 1, 0.8] + list(PRIORS[0]), [0, 1, 0.3] + list(PRIORS[2]),
            [0, 2, 0.45] + list(PRIORS[3]), [0, 2, 0.4] + list(PRIORS[2]),
            [1, 2, 0.8] + list(PRIORS[3])]
    np.testing.assert_allclose(out[0, 0], want, rtol=1e-12)


def test_detection_output_keep_top_k_keeps_the_best_per_image_in_class_order():
    out = detect("num_classes: 3 nms_param { nms_threshold: 0.5 } code_type: CORNER "
                 "confidence_threshold: 0.2 keep_top_k: 3", np.zeros((2, 16)),
                 CONF.reshape(2, 12))
    np.testing.assert_allclose(out[0, 0, :, :3], [[0, 1, 0.8], [0, 2, 0.45], [0, 2, 0.4],
                                                  [1, 2, 0.8]], rtol=1e-12)


def test_detection_output_decodes_center_size_offsets():
    loc = np.zeros((1, 16))
    loc[0, 8:12] = [1.0, -2.0, 0.5, 0.0]          # prior 2, scaled by the variance 0.1
    conf = np.zeros((1, 4, 2))
    conf[0, 2, 1] = 0.9
    out = detect("num_classes: 2 code_type: CENTER_SIZE", loc, conf.reshape(1, 8))
    cx, cy = 0.75 + 0.1 * 1.0 * 0.3, 0.75 + 0.1 * -2.0 * 0.3
    w, h = 0.3 * np.exp(0.1 * 0.5), 0.3
    row = out[0, 0][out[0, 0, :, 2] == np.max(out[0, 0, :, 2])][0]
    np.testing.assert_allclose(row[3:], [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2],
                               rtol=1e-12)


def test_detection_output_per_class_locations_and_no_background():
    loc = np.zeros((1, 4, 2, 4))
    loc[0, :, 1] = 0.5                             # class 1 boxes shifted by 0.05
    conf = np.zeros((1, 4, 2))
    conf[0, 0] = [0.6, 0.7]
    out = detect("num_classes: 2 share_location: false background_label_id: -1 "
                 "code_type: CORNER confidence_threshold: 0.5", loc.reshape(1, 32),
                 conf.reshape(1, 8))
    np.testing.assert_allclose(out[0, 0], [[0, 0, 0.6] + list(PRIORS[0]),
                                           [0, 1, 0.7] + list(PRIORS[0] + 0.05)], rtol=1e-12)


def test_detection_output_with_nothing_above_threshold_writes_the_placeholder_rows():
    out = detect("num_classes: 3 confidence_threshold: 0.95", np.zeros((2, 16)),
                 CONF.reshape(2, 12))
    np.testing.assert_array_equal(out[0, 0], [[0, -1, -1, -1, -1, -1, -1],
                                              [1, -1, -1, -1, -1, -1, -1]])


def test_detection_output_clip():
    loc = np.zeros((1, 16))
    loc[0, 12:16] = [-5, 0, 0, 5]                   # prior 3 pushed outside the image
    conf = np.zeros((1, 4, 2))
    conf[0, 3, 1] = 0.9
    out = detect("num_classes: 2 code_type: CORNER confidence_threshold: 0.5 clip: true",
                 loc, conf.reshape(1, 8))
    np.testing.assert_allclose(out[0, 0, 0, 3:], [0, 0.5, 0.4, 1.0], rtol=1e-12)


@pytest.mark.parametrize("loc_n,conf_n,pattern", [
    (12, 12, r"loc has 12 values per image; 4 priors x 1 location classes x 4 = 16 expected"),
    (16, 10, r"conf has 10 values per image; 4 priors x 3 classes = 12 expected"),
])
def test_detection_output_count_mismatch(loc_n, conf_n, pattern):
    with pytest.raises(LayerError, match=r"layer 'det' \(type DetectionOutput\): " + pattern):
        detect("num_classes: 3", np.zeros((1, loc_n)), np.zeros((1, conf_n)))


def evaluate(text, det, gt):
    layer = make_layer('name: "ev" type: "DetectionEvaluate" detection_evaluate_param { %s }'
                       % text)
    bottom = [blob_of(np.asarray(det, dtype=float).reshape(1, 1, -1, 7)), gt_rows(gt)]
    top = empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return top[0].data[0, 0]


GT2 = [(0, 1, 0.1, 0.1, 0.5, 0.5), (0, 1, 0.6, 0.6, 0.9, 0.9), (0, 2, 0.0, 0.5, 0.4, 1.0, 1),
       (1, 1, 0.2, 0.2, 0.4, 0.4)]


def test_detection_evaluate_by_hand():
    det = [[0, 1, 0.5, 0.12, 0.1, 0.5, 0.5],     # second on gt 0 -> false positive
           [0, 1, 0.9, 0.1, 0.1, 0.5, 0.52],     # best on gt 0 -> true positive
           [0, 1, 0.3, 0.6, 0.6, 0.7, 0.7],      # overlap 1/9 with gt 1 -> false
           [0, 2, 0.8, 0.0, 0.5, 0.4, 1.0],      # a difficult box, counted
           [1, 2, 0.6, 0.2, 0.2, 0.4, 0.4]]      # no class-2 box in image 1
    out = evaluate("num_classes: 3", det, GT2)
    np.testing.assert_allclose(out, [[-1, 1, 3, -1, -1], [-1, 2, 1, -1, -1],
                                     [0, 1, 0.9, 1, 0], [0, 1, 0.5, 0, 1], [0, 1, 0.3, 0, 1],
                                     [0, 2, 0.8, 1, 0], [1, 2, 0.6, 0, 1]], rtol=1e-12)
    out = evaluate("num_classes: 3 evaluate_difficult_gt: false", det, GT2)
    np.testing.assert_allclose(out[1], [-1, 2, 0, -1, -1])
    np.testing.assert_allclose(out[5], [0, 2, 0.8, 0, 0])   # matched a difficult box


def test_detection_evaluate_skips_placeholder_rows_and_scales_to_pixels(tmp_path):
    det = [[0, -1, -1, -1, -1, -1, -1], [1, 1, 0.7, 0.2, 0.2, 0.4, 0.4]]
    out = evaluate("num_classes: 2", det, [(1, 1, 0.2, 0.2, 0.4, 0.41)])
    np.testing.assert_allclose(out, [[-1, 1, 1, -1, -1], [1, 1, 0.7, 1, 0]])
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("a 10 10\n")
    gt = [(1, 1, 0.2, 0.2, 0.4, 0.41)]
    # normalised: 0.04 / 0.042 = 0.952; in 10 x 10 pixels with the fork's +1 extents:
    # 3 x 3 over 3 x 3.1 gives 9 / 9.3 = 0.968
    out = evaluate("num_classes: 2 overlap_threshold: 0.96", det, gt)
    np.testing.assert_allclose(out[1], [1, 1, 0.7, 0, 1])
    out = evaluate('num_classes: 2 overlap_threshold: 0.96 name_size_file: "%s"' % sizes,
                   det, gt)
    np.testing.assert_allclose(out[1], [1, 1, 0.7, 1, 0])
    # the same reader as DetectionOutput's result files: a bad line is named
    sizes.write_text("a 10 10\nb 10\n")
    with pytest.raises(LayerError, match="name_size_file '.*sizes.txt' line 2: expected "
                                         "'name height width', got 'b 10'"):
        evaluate('num_classes: 2 name_size_file: "%s"' % sizes, det, gt)


def test_detection_evaluate_errors():
    with pytest.raises(LayerError, match=r"layer 'ev' \(type DetectionEvaluate\): the ground "
                       r"truth holds the background label 0"):
        evaluate("num_classes: 2", [[0, 1, 0.7, 0.2, 0.2, 0.4, 0.4]],
                 [(0, 0, 0.2, 0.2, 0.4, 0.4)])
