import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import empty_blobs, make_layer
from pycaffe_lite.testing.gradient_check import GradientChecker

from helpers.ssd import blob_of, gt_rows, priors

GT = [(0, 1, 0.05, 0.1, 0.45, 0.5), (0, 2, 0.5, 0.4, 0.95, 0.95),
      (1, 1, 0.3, 0.3, 0.7, 0.8), (1, 1, 0.0, 0.6, 0.35, 1.0)]


def problem(num_classes=3, loc_classes=1, seed=0, num=2, gt=GT, size=3):
    prior = priors(size, size)
    P = prior.shape[2] // 4
    rng = np.random.default_rng(seed)
    loc = rng.normal(0, 0.5, (num, P * loc_classes * 4))
    conf = rng.normal(0, 1.0, (num, P * num_classes))
    return [blob_of(loc), blob_of(conf), blob_of(prior), gt_rows(gt)], P


def layer_text(extra="", loss=""):
    return ('name: "mbox_loss" type: "MultiBoxLoss" propagate_down: true propagate_down: true '
            'propagate_down: false propagate_down: false multibox_loss_param { num_classes: 3 '
            'overlap_threshold: 0.5 neg_pos_ratio: 3 neg_overlap: 0.5 code_type: CENTER_SIZE '
            '%s } %s' % (extra, loss))


def run(text, bottom):
    layer = make_layer(text)
    top = empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, float(top[0].data)


@pytest.mark.parametrize("extra,loss,loc_classes", [
    ("", "", 1),
    ("loc_loss_type: L2 conf_loss_type: LOGISTIC mining_type: NONE match_type: BIPARTITE",
     "", 1),
    ("mining_type: HARD_EXAMPLE sample_size: 6 loc_weight: 0.5", "", 1),
    ("mining_type: HARD_EXAMPLE sample_size: 8 nms_param { nms_threshold: 0.5 top_k: 20 }",
     "", 1),
    ("mining_type: NONE share_location: false", "loss_param { normalization: FULL }", 3),
    ("use_prior_for_matching: false code_type: CORNER_SIZE", "", 1),
    ("encode_variance_in_target: true code_type: CORNER", "loss_param { normalization: "
     "BATCH_SIZE }", 1),
    ("conf_loss_type: LOGISTIC neg_pos_ratio: 2", "loss_param { normalization: NONE }", 1),
])
def test_multibox_loss_gradient(extra, loss, loc_classes):
    bottom, _ = problem(loc_classes=loc_classes, size=2)
    layer, value = run(layer_text(extra, loss), bottom)
    assert value > 0
    assert layer.num_matches > 0
    checker = GradientChecker(1e-3, 2e-3)
    checker.check_gradient_exhaustive(make_layer(layer_text(extra, loss)), bottom,
                                      empty_blobs(1), check_bottom=[0, 1])


def _iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    area = lambda x: (x[2] - x[0]) * (x[3] - x[1])  # noqa: E731
    return iw * ih / (area(a) + area(b) - iw * ih)


def reference_loss(bottom, num_classes=3, thr=0.5, ratio=3.0, neg_overlap=0.5):
    """The SSD loss written out prior by prior: PER_PREDICTION matching against priors,
    CENTER_SIZE encoding, smooth L1, softmax, MAX_NEGATIVE mining, VALID normalisation."""
    loc, conf, prior, gt = (b.data for b in bottom)
    num = loc.shape[0]
    P = prior.shape[2] // 4
    boxes = prior[0, 0].reshape(P, 4)
    var = prior[0, 1].reshape(P, 4)
    loc = loc.reshape(num, P, 4)
    conf = conf.reshape(num, P, num_classes)
    rows = gt.reshape(-1, 8)
    loc_sum = conf_sum = 0.0
    matches = 0
    for i in range(num):
        g = [r for r in rows if int(r[0]) == i]
        ov = np.array([[_iou(boxes[p], r[3:7]) for r in g] for p in range(P)])
        match = -np.ones(P, dtype=int)
        work = np.where(ov > 1e-6, ov, -1.0)
        for _ in range(len(g)):               # bipartite, greedily
            p, j = np.unravel_index(np.argmax(work), work.shape)
            if work[p, j] < 0:
                break
            match[p] = j
            work[p, :] = -1
            work[:, j] = -1
        for p in range(P):                    # per prediction
            if match[p] == -1 and ov[p].max() >= thr:
                match[p] = int(np.argmax(ov[p]))
        best = ov.max(axis=1)
        logp = conf[i] - conf[i].max(axis=1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
        negs = [p for p in range(P) if match[p] == -1 and best[p] < neg_overlap]
        negs.sort(key=lambda p: -(-logp[p, 0]))
        npos = int((match > -1).sum())
        negs = negs[:int(npos * ratio)]
        for p in range(P):
            if match[p] < 0:
                continue
            matches += 1
            b, pr, v = g[match[p]][3:7], boxes[p], var[p]
            pw, ph = pr[2] - pr[0], pr[3] - pr[1]
            t = [((b[0] + b[2]) / 2 - (pr[0] + pr[2]) / 2) / pw / v[0],
                 ((b[1] + b[3]) / 2 - (pr[1] + pr[3]) / 2) / ph / v[1],
                 np.log((b[2] - b[0]) / pw) / v[2], np.log((b[3] - b[1]) / ph) / v[3]]
            for d in loc[i, p] - np.array(t):
                loc_sum += 0.5 * d * d if abs(d) < 1 else abs(d) - 0.5
            conf_sum -= logp[p, int(g[match[p]][1])]
        for p in negs:
            conf_sum -= logp[p, 0]
    return (loc_sum + conf_sum) / max(matches, 1), matches


def test_multibox_loss_matches_a_prior_by_prior_reference():
    bottom, _ = problem(seed=3)
    layer, value = run(layer_text(), bottom)
    want, matches = reference_loss(bottom)
    assert layer.num_matches == matches > 0
    assert layer.num_negatives > 0
    assert value == pytest.approx(want, rel=1e-6)


def test_multibox_loss_ignores_padding_rows_and_difficult_boxes():
    gt = GT + [(-1, 0, 0, 0, 0, 0)]
    bottom, _ = problem(gt=gt)
    _, with_pad = run(layer_text(), bottom)
    _, without = run(layer_text(), problem()[0])
    assert with_pad == without
    difficult = [GT[0], GT[1], GT[2], GT[3] + (1,)]
    _, used = run(layer_text(), problem(gt=difficult)[0])
    _, skipped = run(layer_text("use_difficult_gt: false"), problem(gt=difficult)[0])
    assert used == without and skipped != used


@pytest.mark.parametrize("gt,pattern", [
    ([(0, 0, 0.1, 0.1, 0.5, 0.5)], r"ground truth row 0 \(image 0\) has label 0; labels "
                                   r"must be in \[0, 3\) and not the background label 0"),
    ([(0, 5, 0.1, 0.1, 0.5, 0.5)], r"ground truth row 0 \(image 0\) has label 5"),
])
def test_multibox_loss_bad_labels(gt, pattern):
    bottom, _ = problem(gt=gt)
    with pytest.raises(LayerError, match=r"layer 'mbox_loss' \(type MultiBoxLoss\): " + pattern):
        run(layer_text(), bottom)


def test_multibox_loss_count_mismatch():
    bottom, P = problem()
    bottom[1] = blob_of(np.zeros((2, P * 3 + 3)))
    with pytest.raises(LayerError, match=r"conf has %d values per image; %d priors x 3 classes "
                       r"= %d expected" % (P * 3 + 3, P, P * 3)):
        run(layer_text(), bottom)
    bottom, P = problem()
    bottom[0] = blob_of(np.zeros((2, P * 4 - 4)))
    with pytest.raises(LayerError, match=r"loc has %d values per image; %d priors x 1 "
                       r"location classes x 4 = %d expected" % (P * 4 - 4, P, P * 4)):
        run(layer_text(), bottom)


def test_multibox_loss_refuses_gradient_to_priors():
    bottom, _ = problem()
    layer, _ = run(layer_text(), bottom)
    with pytest.raises(LayerError, match="propagate_down: true true false false"):
        layer.Backward(empty_blobs(1), [True, True, True, False], bottom)
