"""convert_annoset (SSD fork): VOC XML and COCO-style JSON annotations with a label map to an
LMDB of AnnotatedDatum; the readers against hand-normalized boxes."""

import json
import logging
import os
import subprocess
import sys

import lmdb
import numpy as np
import pytest
from PIL import Image

from pycaffe_lite.cli import main
from pycaffe_lite.data.annoset import convert_annoset, dim_scale
from pycaffe_lite.data.annotation import name_to_label, read_coco_json, read_voc_xml
from pycaffe_lite.data.datum import DataError, decode_image
from pycaffe_lite.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LABELMAP = """item { name: "none_of_the_above" label: 0 display_name: "background" }
item { name: "cat" label: 1 display_name: "Cat" }
item { name: "dog" label: 2 display_name: "Dog" }
"""

XML = """<annotation>
  <size><width>40</width><height>20</height><depth>3</depth></size>
  <object><name>dog</name><difficult>0</difficult>
    <bndbox><xmin>4</xmin><ymin>2</ymin><xmax>20</xmax><ymax>10</ymax></bndbox></object>
  <object><name>cat</name><difficult>1</difficult>
    <bndbox><xmin>0</xmin><ymin>0</ymin><xmax>10</xmax><ymax>5</ymax></bndbox></object>
  <object><name>dog</name><difficult>0</difficult>
    <bndbox><xmin>30</xmin><ymin>15</ymin><xmax>40</xmax><ymax>20</ymax></bndbox></object>
</annotation>
"""


def _records(path):
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        out = [(k, caffe_pb2.AnnotatedDatum.FromString(v)) for k, v in txn.cursor()]
    env.close()
    return out


def _rows(anno):
    return [(g.group_label, a.instance_id, round(a.bbox.xmin, 6), round(a.bbox.ymin, 6),
             round(a.bbox.xmax, 6), round(a.bbox.ymax, 6), a.bbox.difficult)
            for g in anno.annotation_group for a in g.annotation]


@pytest.fixture
def annoset(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "img").mkdir()
    (tmp_path / "ann").mkdir()
    lines = []
    for i in range(3):
        arr = rng.integers(0, 256, (20, 40, 3)).astype(np.uint8)
        Image.fromarray(arr).save(tmp_path / "img" / ("%d.png" % i))
        (tmp_path / "ann" / ("%d.xml" % i)).write_text(XML)
        lines.append("img/%d.png ann/%d.xml\n" % (i, i))
    (tmp_path / "list.txt").write_text("".join(lines))
    (tmp_path / "labelmap.prototxt").write_text(LABELMAP)
    return tmp_path


EXPECTED = [(2, 0, 0.1, 0.1, 0.5, 0.5, False), (2, 1, 0.75, 0.75, 1.0, 1.0, False),
            (1, 0, 0.0, 0.0, 0.25, 0.25, True)]


def test_voc_xml_reader_groups_and_normalizes(tmp_path):
    anno = caffe_pb2.AnnotatedDatum()
    names = name_to_label(caffe_pb2.LabelMap(item=[caffe_pb2.LabelMapItem(name="cat", label=1),
                                                    caffe_pb2.LabelMapItem(name="dog", label=2)]))
    path = tmp_path / "a.xml"
    path.write_text(XML)
    read_voc_xml(str(path), 20, 40, names, anno)
    # groups in order of first appearance, instances numbered per group, x / 40, y / 20
    assert _rows(anno) == EXPECTED


def test_coco_json_reader(tmp_path):
    doc = {"image": {"height": 20, "width": 40},
           "annotation": [{"category_id": 18, "bbox": [4, 2, 16, 8], "iscrowd": 0},
                          {"category_id": 17, "bbox": [0, 0, 10, 5], "iscrowd": 1}]}
    path = tmp_path / "a.json"
    path.write_text(json.dumps(doc))
    anno = caffe_pb2.AnnotatedDatum()
    read_coco_json(str(path), 20, 40, {"17": 1, "18": 2}, anno)
    assert _rows(anno) == [EXPECTED[0], EXPECTED[2]]
    with pytest.raises(DataError, match=r"a\.json.*unknown category_id '18'"):
        read_coco_json(str(path), 20, 40, {"17": 1}, caffe_pb2.AnnotatedDatum())


def test_cli_detection_lmdb(annoset, caplog):
    db = annoset / "lmdb"
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        assert main(["convert_annoset", "--anno_type=detection", "--label_map_file",
                     str(annoset / "labelmap.prototxt"), "--encoded", "--encode_type=png",
                     str(annoset) + "/", str(annoset / "list.txt"), str(db)]) == 0
    assert "Processed 3 files" in caplog.text
    records = _records(db)
    assert [k for k, _ in records] == [b"00000000_img/0.png", b"00000001_img/1.png",
                                       b"00000002_img/2.png"]
    for i, (_, a) in enumerate(records):
        assert a.type == a.BBOX
        assert a.datum.encoded
        img = decode_image(a.datum.data, True)
        ref = np.asarray(Image.open(annoset / "img" / ("%d.png" % i)))[:, :, ::-1]
        np.testing.assert_array_equal(img, ref)
        assert _rows(a) == EXPECTED


def test_cli_raw_resized_and_shuffled(annoset):
    db = annoset / "lmdb"
    assert main(["convert_annoset", "-anno_type", "detection", "-label_map_file",
                 str(annoset / "labelmap.prototxt"), "-resize_width", "8",
                 "-resize_height", "6", "-shuffle", "-check_size", str(annoset) + "/",
                 str(annoset / "list.txt"), str(db)]) == 0
    records = _records(db)
    assert sorted(k.split(b"_", 1)[1] for k, _ in records) == [b"img/0.png", b"img/1.png",
                                                               b"img/2.png"]
    d = records[0][1].datum
    assert (d.channels, d.height, d.width, d.encoded) == (3, 6, 8, False)
    assert _rows(records[0][1]) == EXPECTED  # normalized boxes do not change


def test_unknown_label_names_the_file_and_the_label(annoset, capsys):
    (annoset / "ann" / "1.xml").write_text(XML.replace("<name>cat</name>", "<name>cow</name>"))
    rc = main(["convert_annoset", "--anno_type=detection", "--label_map_file",
               str(annoset / "labelmap.prototxt"), str(annoset) + "/",
               str(annoset / "list.txt"), str(annoset / "lmdb")])
    err = capsys.readouterr().err
    assert rc == 1
    assert "1.xml" in err and "unknown label 'cow'" in err


def test_check_label_rejects_duplicate_names(annoset, capsys):
    (annoset / "labelmap.prototxt").write_text(LABELMAP + 'item { name: "cat" label: 3 }\n')
    args = ["convert_annoset", "--anno_type=detection", "--label_map_file",
            str(annoset / "labelmap.prototxt"), str(annoset) + "/", str(annoset / "list.txt")]
    assert main(args + [str(annoset / "a"), "--check_label"]) == 1
    assert "'cat' more than once" in capsys.readouterr().err
    # without the check the last entry wins, as in the fork
    assert main(args + [str(annoset / "b")]) == 0
    assert _records(annoset / "b")[0][1].annotation_group[1].group_label == 3


def test_classification_list_and_min_max_dim(annoset):
    (annoset / "cls.txt").write_text("img/0.png 4\nimg/1.png 7\n")
    written, skipped = convert_annoset(str(annoset) + "/", str(annoset / "cls.txt"),
                                       str(annoset / "c"), min_dim=30, progress=False)
    assert (written, skipped) == (2, [])
    recs = _records(annoset / "c")
    # short side 20 -> 30: factor 1.5, 40x20 -> 60x30
    assert [(a.datum.label, a.datum.height, a.datum.width, a.HasField("type"))
            for _, a in recs] == [(4, 30, 60, False), (7, 30, 60, False)]
    assert dim_scale(20, 40, 30, 50) == pytest.approx(50 / 40)  # capped by max_dim
    assert dim_scale(20, 40, 0, 0) == 1


def test_missing_image_is_skipped(annoset):
    with open(annoset / "list.txt", "a") as f:
        f.write("img/missing.png ann/0.xml\n")
    written, skipped = convert_annoset(
        str(annoset) + "/", str(annoset / "list.txt"), str(annoset / "m"), "detection",
        label_map_file=str(annoset / "labelmap.prototxt"), progress=False)
    assert written == 3 and skipped[0][0] == "img/missing.png"


def test_tool_script(annoset):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "convert_annoset.py"),
                          "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--label_map_file" in out.stdout


def test_label_out_of_range_and_bad_encode_type_leave_no_database(annoset, capsys):
    (annoset / "big.txt").write_text("img/0.png 1\nimg/1.png 99999999999\n")
    db = annoset / "db"
    rc = main(["convert_annoset", str(annoset) + "/", str(annoset / "big.txt"), str(db)])
    assert rc == 1
    assert ("line 2 of list file '%s': label 99999999999 is out of range"
            % (annoset / "big.txt")) in capsys.readouterr().err
    assert not db.exists()
    (annoset / "cls.txt").write_text("img/0.png 1\n")
    rc = main(["convert_annoset", "--encode_type=gif", str(annoset) + "/",
               str(annoset / "cls.txt"), str(db)])
    assert rc == 1
    assert "--encode_type 'gif' is not an image encoding" in capsys.readouterr().err
    assert not db.exists()
