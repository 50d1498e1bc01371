"""``pycaffe-lite evaluate`` and :func:`pycaffe_lite.evaluate.evaluate` on small HDF5 test sets
whose scores are chosen by hand (an identity InnerProduct or 1x1 Convolution passes them
through), against confusion matrices, accuracies, IoUs and APs worked out by hand."""

import json

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.evaluate import evaluate

h5py = pytest.importorskip("h5py", reason="the test sets are HDF5 files")

# classification: 8 samples, 6 classes; the score rows are the predictions
LABELS = [0, 0, 1, 1, 2, 2, 3, 5]
SCORES = [[5, 1, 0, 0, 0, 0],   # 0 -> 0
          [1, 5, 0, 0, 0, 0],   # 0 -> 1 (label second: top-5)
          [0, 5, 1, 0, 0, 0],   # 1 -> 1
          [0, 1, 5, 0, 0, 0],   # 1 -> 2 (top-5)
          [0, 0, 5, 0, 0, 0],   # 2 -> 2
          [9, 8, 0, 7, 6, 5],   # 2 -> 0 (five classes above the label: not even top-5)
          [0, 0, 0, 5, 0, 0],   # 3 -> 3
          [0, 0, 0, 0, 5, 1]]   # 5 -> 4 (top-5)
CONFUSION = [[1, 1, 0, 0, 0, 0],
             [0, 1, 1, 0, 0, 0],
             [1, 0, 1, 0, 0, 0],
             [0, 0, 0, 1, 0, 0],
             [0, 0, 0, 0, 0, 0],
             [0, 0, 0, 0, 1, 0]]

CLASSIFY = """
name: "classify"
layer { name: "data" type: "HDF5Data" top: "x" top: "label"
        hdf5_data_param { source: "%(source)s" batch_size: 4 } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "scores"
        inner_product_param { num_output: 6 } }
layer { name: "acc" type: "Accuracy" bottom: "scores" bottom: "label" top: "accuracy" }
"""

SEGMENT = """
name: "segment"
layer { name: "data" type: "HDF5Data" top: "x" top: "label"
        hdf5_data_param { source: "%(source)s" batch_size: 2 } }
layer { name: "score" type: "Convolution" bottom: "x" top: "score"
        convolution_param { num_output: 3 kernel_size: 1 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss"
        loss_param { ignore_label: 255 } }
"""

DETECT = """
name: "detect"
layer { name: "data" type: "HDF5Data" top: "det" top: "gt"
        hdf5_data_param { source: "%(source)s" batch_size: 1 } }
layer { name: "eval" type: "DetectionEvaluate" bottom: "det" bottom: "gt" top: "eval"
        detection_evaluate_param { num_classes: 3 background_label_id: 0
                                   overlap_threshold: 0.5 } }
"""


def write_set(folder, arrays, net_text, identity=None):
    """An HDF5 test set, the net reading it, and (with ``identity``: the layer to make an
    identity map) weights: (prototxt, caffemodel or None)."""
    folder.mkdir(parents=True, exist_ok=True)
    with h5py.File(folder / "set.h5", "w") as f:
        for name, array in arrays.items():
            f[name] = np.asarray(array, np.float32)
    (folder / "list.txt").write_text(str(folder / "set.h5") + "\n")
    model = folder / "net.prototxt"
    model.write_text(net_text % dict(source=folder / "list.txt"))
    if identity is None:
        return model, None
    net = caffe.Net(str(model), caffe.TEST)
    w, b = net.params[identity]
    w.data[...] = np.eye(w.data.shape[0]).reshape(w.data.shape)
    b.data[...] = 0
    weights = folder / "identity.caffemodel"
    net.save(str(weights))
    net.close()
    return model, weights


def test_classification_report_from_the_command_line(tmp_path, capsys):
    model, weights = write_set(tmp_path, {"x": SCORES, "label": LABELS}, CLASSIFY, "ip")
    names = ["cat", "dog", "fox", "owl", "elk", "bee"]
    (tmp_path / "labels.txt").write_text("\n".join(names) + "\n")
    out_json, png = tmp_path / "report.json", tmp_path / "confusion.png"
    assert cli.main(["evaluate", "--model", str(model), "--weights", str(weights),
                     "--iterations", "2", "--labels", str(tmp_path / "labels.txt"),
                     "--json", str(out_json), "--confusion_png", str(png)]) == 0
    report = json.loads(out_json.read_text())
    assert report["kind"] == "classification" and report["samples"] == 8
    assert report["top1"] == 4 / 8 and report["top5"] == 7 / 8
    assert report["confusion_matrix"] == CONFUSION
    assert report["per_class_accuracy"] == {"cat": 0.5, "dog": 0.5, "fox": 0.5, "owl": 1.0,
                                            "elk": None, "bee": 0.0}
    text = capsys.readouterr().out
    assert "top-1 = 0.5000  top-5 = 0.8750" in text and "elk: -" in text
    assert "2: 1 0 1 0 0 0" in text  # the matrix's row of class 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_segmentation_pixel_accuracy_and_mean_iou(tmp_path):
    true = np.array([[[0, 1], [1, 2]], [[2, 255], [0, 0]]])
    predicted = np.array([[[0, 1], [2, 2]], [[2, 0], [1, 0]]])
    scores = 5.0 * np.moveaxis(np.eye(3)[predicted], -1, 1)  # N x C x H x W, one-hot
    model, weights = write_set(tmp_path, {"x": scores, "label": true[:, None]}, SEGMENT,
                               "score")
    report = evaluate(str(model), str(weights), iterations=1)
    # 7 labelled pixels (one is 255, ignored); rows: true class
    assert report["confusion_matrix"] == [[2, 1, 0], [0, 1, 1], [0, 0, 2]]
    assert report["kind"] == "segmentation" and report["pixels"] == 7
    assert report["pixel_accuracy"] == pytest.approx(5 / 7)
    iou = report["iou_per_class"]
    assert [iou[k] for k in "012"] == pytest.approx([2 / 3, 1 / 3, 2 / 3])
    assert report["mean_iou"] == pytest.approx(5 / 9)


def test_detection_map_per_class(tmp_path):
    a, b, c = [0.1, 0.1, 0.3, 0.3], [0.5, 0.5, 0.7, 0.7], [0.2, 0.6, 0.4, 0.8]
    det = [[0, 1, 0.9, 0.8, 0.8, 0.9, 0.9],  # class 1, best score, overlaps nothing: FP
           [0, 1, 0.8] + a, [0, 1, 0.7] + b, [0, 2, 0.6] + c]
    gt = [[0, 1, 0] + a + [0], [0, 1, 1] + b + [0], [0, 2, 0] + c + [0]]
    model, _ = write_set(tmp_path, {"det": [[det]], "gt": [[gt]]}, DETECT)
    report = evaluate(str(model), iterations=1, labels=["background", "car", "person"])
    out = report["outputs"]["eval"]
    # class 1: precision 0, 1/2, 2/3 at recall 0, 1/2, 1 -> 1/2 * 1/2 + 2/3 * 1/2
    assert out["ap_per_class"] == pytest.approx({"car": 7 / 12, "person": 1.0})
    assert out["map"] == pytest.approx((7 / 12 + 1) / 2)
    eleven = evaluate(str(model), iterations=1, ap_version="11point")["outputs"]["eval"]
    assert eleven["ap_per_class"] == pytest.approx({"1": 2 / 3, "2": 1.0})


def test_bad_input_names_what_is_wrong(tmp_path, capsys):
    model, weights = write_set(tmp_path, {"x": SCORES, "label": LABELS}, CLASSIFY, "ip")
    (tmp_path / "labels.txt").write_text("a\nb\n")
    with pytest.raises(CaffeError, match="names 2 classes but the scores have 6"):
        evaluate(str(model), str(weights), 2, str(tmp_path / "labels.txt"))
    with pytest.raises(CaffeError, match="no blob 'nope'"):
        evaluate(str(model), str(weights), 1, scores_blob="nope")
    assert cli.main(["evaluate", "--model", str(model)]) == 1
    assert "--weights" in capsys.readouterr().err


def test_by_default_the_test_source_is_covered_once_even_when_batches_do_not_divide_it(
        tmp_path):
    # 8 samples in batches of 3: three batches, the last one's wrapped sample left out
    model, weights = write_set(tmp_path, {"x": SCORES, "label": LABELS},
                               CLASSIFY.replace("batch_size: 4", "batch_size: 3"), "ip")
    report = evaluate(str(model), str(weights))
    assert report["samples"] == 8 and report["iterations"] == 3
    assert report["source_records"] == 8
    assert report["confusion_matrix"] == CONFUSION
    assert report["top1"] == 4 / 8 and report["top5"] == 7 / 8


def test_iterations_that_wrap_the_source_warn(tmp_path, caplog):
    model, weights = write_set(tmp_path, {"x": SCORES, "label": LABELS}, CLASSIFY, "ip")
    with caplog.at_level("WARNING", logger="pycaffe_lite"):
        report = evaluate(str(model), str(weights), iterations=5)
    assert report["samples"] == 20  # what was asked for: each sample 2.5 times
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["evaluate: 5 iterations of batch 4 (20 samples) wrap the 8 records of "
                        "layer 'data''s source: each record is counted about 2.5 times; leave "
                        "iterations (--iterations) out to cover the source once"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="pycaffe_lite"):
        assert evaluate(str(model), str(weights), iterations=2)["samples"] == 8
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_lenet_test_digits_are_counted_once_and_the_json_names_the_nets_blobs(
        tmp_path, lenet_dir, mnist_lmdbs, capsys):
    """LeNet's TEST net over the 1,000 test digits (batch 100), from the command line: each
    digit once, the confusion matrix's rows summing to the labels file's counts, and the
    report naming ip2 and label (the net file's names, not the Splits' copies)."""
    import os

    from pycaffe_lite.data.mnist import read_idx_labels

    text = open(os.path.join(lenet_dir, "lenet_train_test.prototxt")).read()
    text = text.replace("models/lenet/mnist_train_lmdb", str(mnist_lmdbs[0]))
    text = text.replace("models/lenet/mnist_test_lmdb", str(mnist_lmdbs[1]))
    model = tmp_path / "lenet.prototxt"
    model.write_text(text)
    net = caffe.Net(str(model), caffe.TEST)
    assert "ip2_ip2_0_split_0" in net.blobs  # ip2 feeds both Accuracy and the loss
    net.save(str(tmp_path / "random.caffemodel"))
    net.close()
    out = tmp_path / "report.json"
    assert cli.main(["evaluate", "--model", str(model), "--weights",
                     str(tmp_path / "random.caffemodel"), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    labels = read_idx_labels(os.path.join(lenet_dir, "mnist5k", "t10k-labels-idx1-ubyte.gz"))
    assert report["samples"] == len(labels) == 1000 and report["iterations"] == 10
    assert np.array(report["confusion_matrix"]).sum(axis=1).tolist() == \
        np.bincount(labels, minlength=10).tolist()
    assert (report["scores"], report["label"]) == ("ip2", "label")
    assert "samples: 1000" in capsys.readouterr().out


def test_confusion_png_without_matplotlib_fails_before_the_run(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    # the model does not even exist: the check comes first, before anything is read or run
    assert cli.main(["evaluate", "--model", str(tmp_path / "nowhere.prototxt"), "--weights",
                     str(tmp_path / "w.caffemodel"), "--confusion_png",
                     str(tmp_path / "cm.png")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pycaffe-lite evaluate: error: --confusion_png needs matplotlib, which is "
                   "not installed: pip install matplotlib (or the plot extra: pip install "
                   "'.[plot]' in pycaffe-lite's source tree)"]


@pytest.mark.parametrize("flag", ["--json", "--confusion_png"])
def test_an_output_in_a_missing_folder_fails_before_the_run(tmp_path, capsys, flag):
    model, weights = write_set(tmp_path, {"x": SCORES, "label": LABELS}, CLASSIFY, "ip")
    out = tmp_path / "no_such_folder" / "out.file"
    assert cli.main(["evaluate", "--model", str(model), "--weights", str(weights),
                     "--iterations", "2", flag, str(out)]) == 1
    captured = capsys.readouterr()
    assert "samples:" not in captured.out  # nothing was run
    assert captured.err.strip() == (
        "pycaffe-lite evaluate: error: %s %s: the folder '%s' does not exist; create it or "
        "write elsewhere" % (flag, out, tmp_path / "no_such_folder"))
