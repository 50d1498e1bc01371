"""DetectionOutput's save_output_param: the SSD fork's VOC, COCO and ILSVRC result files.

The expected files are written out here by hand from known detections and the fork's rules
(weiliu89/caffe, detection_output_layer.cpp and bbox_util.cpp's OutputBBox): boxes clipped
to [0, 1] and scaled to the image size of name_size_file in float; x, y, width, height rounded
to hundredths; VOC and ILSVRC corners as integers (xmax = int(x) + int(width)), scores with 6
significant digits; COCO as Boost's property tree writes JSON (4-space indents, floats with 9
significant digits, numbers unquoted). Files are written after num_test_image images.
"""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

LABEL_MAP = """
item { name: "none_of_the_above" label: 0 display_name: "background" }
item { name: "cat" label: 1 display_name: "Cat" }
item { name: "dog" label: 2 display_name: "Dog" }
"""
NAME_SIZE = "000001 375 500\n000002 200 300\n000003 100 100\n"

# Three priors; CORNER offsets of 0 with the variance in the target decode to the priors.
PRIORS = np.array([[0.1, 0.2, 0.5, 0.8], [0.5, 0.5, 0.9, 0.9], [-0.1, 0.0, 0.2, 0.3]])
# Scores (background, cat, dog) per prior for the three images.
CONF = {
    # cat: prior 0 (0.75), prior 1 (0.25); dog: prior 2 (0.8), prior 1 (0.25)
    "000001": [[0.1, 0.75, 0.15], [0.5, 0.25, 0.25], [0.2, 0.0, 0.8]],
    # dog: prior 0 (0.9)
    "000002": [[0.05, 0.05, 0.9], [0.9, 0.05, 0.05], [0.9, 0.05, 0.05]],
    # nothing
    "000003": [[1, 0, 0], [1, 0, 0], [1, 0, 0]],
}

# The detections in pixels of their image (computed by hand, see each line):
# 000001 is 500 x 375: prior 0 -> x 0.1*500 = 50, y 0.2*375 = 75, to 250, 300 (floats round
#   to these exactly); prior 1 -> 250, 187.5, to 0.9*500 = 450 and 0.9*375 = 337.5; prior 2
#   clipped to (0, 0, 0.2, 0.3) -> 0, 0, 100, 0.3f*375 = 112.500008 (height 112.5 once
#   rounded to hundredths).
# 000002 is 300 x 200: prior 0 -> 30, 40, 150, 160.
VOC_CAT = ("000001 0.75 50 75 250 300\n"
           "000001 0.25 250 187 450 337\n")           # int(187.5) = 187, 187 + int(150)
VOC_DOG = ("000001 0.8 0 0 100 112\n"
           "000001 0.25 250 187 450 337\n"
           "000002 0.9 30 40 150 160\n")
ILSVRC = ("000001 1 0.75 50 75 250 300\n"
          "000001 1 0.25 250 187 450 337\n"
          "000001 2 0.8 0 0 100 112\n"
          "000001 2 0.25 250 187 450 337\n"
          "000002 2 0.9 30 40 150 160\n")


def coco_item(image, category, bbox, score):
    """One detection as Boost writes it, then unquoted where the fork's regex unquotes."""
    return ("        {\n"
            "            \"image_id\": %s,\n"
            "            \"category_id\": %s,\n"
            "            \"bbox\": [\n"
            "                %s,\n"
            "                %s,\n"
            "                %s,\n"
            "                %s\n"
            "            ],\n"
            "            \"score\": %s\n"
            "        }" % ((image, category) + tuple(bbox) + (score,)))


# float 0.8 is 0.800000011920929 and float 0.9 is 0.899999976158142: 9 significant digits
COCO = ("[\n" + ",\n".join([
    coco_item("000001", '"cat"', ["50", "75", "200", "225"], "0.75"),
    coco_item("000001", '"cat"', ["250", "187.5", "200", "150"], "0.25"),
    coco_item("000001", '"dog"', ["0", "0", "100", "112.5"], "0.800000012"),
    coco_item("000001", '"dog"', ["250", "187.5", "200", "150"], "0.25"),
    coco_item("000002", '"dog"', ["30", "40", "120", "120"], "0.899999976"),
]) + "\n    \n]\n")


def write_inputs(tmp_path):
    (tmp_path / "labelmap.prototxt").write_text(LABEL_MAP)
    (tmp_path / "name_size.txt").write_text(NAME_SIZE)
    return str(tmp_path / "labelmap.prototxt"), str(tmp_path / "name_size.txt")


def layer_text(out_dir, label_map, name_size, fmt, extra=""):
    return ('name: "det" type: "DetectionOutput" detection_output_param { num_classes: 3 '
            'code_type: CORNER variance_encoded_in_target: true confidence_threshold: 0.2 '
            'nms_param { nms_threshold: 0.45 } save_output_param { output_directory: "%s" '
            'output_name_prefix: "comp4_det_test_" output_format: "%s" label_map_file: "%s" '
            'name_size_file: "%s" %s } }' % (out_dir, fmt, label_map, name_size, extra))


def run_batches(text, batches, priors=PRIORS):
    """Forward passes of the layer (float), one per list of image names; after each, the
    result directory's files."""
    layer = make_layer(text, dtype=np.float32)
    prior = np.stack([priors.reshape(-1), np.full(priors.size, 0.1)])[None]
    top = empty_blobs(1)
    for i, names in enumerate(batches):
        conf = np.array([CONF[n] for n in names]).reshape(len(names), -1)
        bottom = random_blobs([np.zeros((len(names), priors.size)), conf, prior],
                              dtype=np.float32)
        if i == 0:
            layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        yield top[0].data.copy()


def files(directory):
    return {f: open(os.path.join(directory, f)).read() for f in sorted(os.listdir(directory))}


def test_voc_files_are_emptied_then_written_after_num_test_image_images(tmp_path):
    label_map, name_size = write_inputs(tmp_path)
    out = tmp_path / "results" / "Main"
    layer = make_layer(layer_text(out, label_map, name_size, "VOC"), dtype=np.float32)
    bottom = random_blobs([np.zeros((1, 12)), np.zeros((1, 9)), np.zeros((1, 2, 12))],
                          dtype=np.float32)
    layer.SetUp(bottom, empty_blobs(1))               # the fork's Reshape creates them
    assert files(out) == {"comp4_det_test_cat.txt": "", "comp4_det_test_dog.txt": ""}
    runs = run_batches(layer_text(out, label_map, name_size, "VOC"),
                       [["000001", "000002"], ["000003"], ["000001"]])
    top = next(runs)
    assert top.shape == (1, 1, 5, 7)                  # the top is unchanged by saving
    # two images of three: the round has begun, the class files are there and empty
    assert files(out) == {"comp4_det_test_cat.txt": "", "comp4_det_test_dog.txt": ""}
    next(runs)
    assert files(out) == {"comp4_det_test_cat.txt": VOC_CAT, "comp4_det_test_dog.txt": VOC_DOG}
    next(runs)                                       # a new round: emptied again
    assert files(out) == {"comp4_det_test_cat.txt": "", "comp4_det_test_dog.txt": ""}


def test_coco_json(tmp_path):
    label_map, name_size = write_inputs(tmp_path)
    out = tmp_path / "coco"
    list(run_batches(layer_text(out, label_map, name_size, "COCO"),
                     [["000001"], ["000002", "000003"]]))
    assert files(out) == {"comp4_det_test_.json": COCO}


def test_ilsvrc_text(tmp_path):
    label_map, name_size = write_inputs(tmp_path)
    out = tmp_path / "ilsvrc"
    list(run_batches(layer_text(out, label_map, name_size, "ILSVRC"),
                     [["000001", "000002", "000003"]]))
    assert files(out) == {"comp4_det_test_.txt": ILSVRC}


def test_num_test_image_rounds(tmp_path):
    """num_test_image 1: every image is a round of its own, and every round starts again at
    the first name of name_size_file (the fork's count goes back to 0): the second image's
    dog (prior 0) is written as 000001's, in 000001's pixels."""
    label_map, name_size = write_inputs(tmp_path)
    out = tmp_path / "each"
    runs = run_batches(layer_text(out, label_map, name_size, "ILSVRC", "num_test_image: 1"),
                       [["000001"], ["000002"], ["000003"]])
    next(runs)
    assert files(out) == {"comp4_det_test_.txt": ILSVRC[:ILSVRC.index("000002")]}
    next(runs)
    assert files(out) == {"comp4_det_test_.txt": "000001 2 0.9 50 75 250 300\n"}
    next(runs)
    assert files(out) == {"comp4_det_test_.txt": ""}


def test_fit_large_size_and_pad_maps_boxes_back_through_the_padding(tmp_path):
    """A 500 x 375 image letterboxed into 300 x 300: the image spans y 0.125 .. 0.875 of the
    input (padding (300 - 300 / (500/375)) / 2 = 37.5 rows). The box (0.25, 0.25, 0.75,
    0.75) of the input is x 0.25 .. 0.75, y (0.25 - 0.125) / 0.75 = 1/6 .. 5/6 of the
    image: 125, 62.5, 375, 312.5 pixels."""
    label_map, name_size = write_inputs(tmp_path)
    out = tmp_path / "pad"
    priors = np.array([[0.25, 0.25, 0.75, 0.75], [0.0, 0.0, 0.01, 0.01], [0.0, 0.0, 0.01, 0.01]])
    text = layer_text(out, label_map, name_size, "ILSVRC",
                      "num_test_image: 1 resize_param { resize_mode: FIT_LARGE_SIZE_AND_PAD "
                      "height: 300 width: 300 }")
    global CONF
    saved = CONF
    CONF = dict(saved, x=[[0.1, 0.9, 0.0], [1, 0, 0], [1, 0, 0]])
    try:
        list(run_batches(text, [["x"]], priors))
    finally:
        CONF = saved
    assert files(out) == {"comp4_det_test_.txt": "000001 1 0.9 125 62 375 312\n"}


def test_an_ssd_deploy_net_with_save_output_param_runs(tmp_path):
    """As the fork's generated deploy nets: only output_directory (no label map nor name
    list) runs and writes nothing; with them, a Net writes the files."""
    label_map, name_size = write_inputs(tmp_path)
    base = """
    input: "loc" input_shape { dim: 1 dim: 12 }
    input: "conf" input_shape { dim: 1 dim: 9 }
    input: "prior" input_shape { dim: 1 dim: 2 dim: 12 }
    layer { name: "detection_out" type: "DetectionOutput" bottom: "loc" bottom: "conf"
      bottom: "prior" top: "detection_out"
      detection_output_param { num_classes: 3 share_location: true background_label_id: 0
        nms_param { nms_threshold: 0.45 top_k: 400 } code_type: CORNER
        variance_encoded_in_target: true keep_top_k: 200 confidence_threshold: 0.2
        save_output_param { %s } } }
    """
    inputs = {"loc": np.zeros((1, 12), np.float32),
              "conf": np.array(CONF["000001"], np.float32).reshape(1, 9),
              "prior": np.stack([PRIORS.reshape(-1), np.full(12, 0.1)])[None].astype(np.float32)}
    only_dir = tmp_path / "only_dir"
    path = tmp_path / "deploy.prototxt"
    path.write_text(base % ('output_directory: "%s"' % only_dir))
    out = caffe.Net(str(path), caffe.TEST).forward(**inputs)["detection_out"]
    assert out.shape == (1, 1, 4, 7)
    assert not only_dir.exists()
    full = tmp_path / "full"
    path.write_text(base % ('output_directory: "%s" output_name_prefix: "comp4_det_test_" '
                            'output_format: "VOC" label_map_file: "%s" name_size_file: "%s" '
                            'num_test_image: 1' % (full, label_map, name_size)))
    caffe.Net(str(path), caffe.TEST).forward(**inputs)
    assert files(full) == {"comp4_det_test_cat.txt": VOC_CAT,
                           "comp4_det_test_dog.txt": VOC_DOG[:VOC_DOG.index("000002")]}


@pytest.mark.parametrize("change,match", [
    ({"label_map": "missing.prototxt"}, r"label_map_file.*missing\.prototxt"),
    ({"name_size": "missing.txt"}, r"name_size_file 'missing\.txt' cannot be read"),
    ({"extra": "num_test_image: 4"}, r"num_test_image is 4, but name_size_file .* lists 3"),
    ({"fmt": "PASCAL"}, r"output_format 'PASCAL' is not one of VOC, COCO, ILSVRC"),
    ({"labels": 'item { name: "bg" label: 0 } item { name: "cat" label: 1 }'},
     r"has no name for label\(s\) \[2\]"),
    ({"labels": 'item { name: "a" label: 1 } item { name: "b" label: 1 }'},
     r"lists label 1 more than once"),
    # a short line: the fork stops reading there and writes later images under wrong names
    ({"sizes": "000001 375 500\n000002 200\n000003 100 100\n"},
     r"name_size_file '.*name_size.txt' line 2: expected 'name height width', got "
     r"'000002 200'"),
    ({"sizes": "000001 375 wide\n"}, r"line 1: expected 'name height width'"),
])
def test_bad_save_output_param_is_a_clear_error(tmp_path, monkeypatch, change, match):
    monkeypatch.chdir(tmp_path)
    label_map, name_size = write_inputs(tmp_path)
    if "labels" in change:
        (tmp_path / "labelmap.prototxt").write_text(change["labels"])
    if "sizes" in change:
        (tmp_path / "name_size.txt").write_text(change["sizes"])
    text = layer_text(tmp_path / "out", change.get("label_map", label_map),
                      change.get("name_size", name_size), change.get("fmt", "VOC"),
                      change.get("extra", ""))
    with pytest.raises(CaffeError, match=r"layer 'det' \(type DetectionOutput\).*" + match):
        list(run_batches(text, [["000001"]]))
