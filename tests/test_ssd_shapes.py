"""models/ssd_shapes: the seeded generator, and a shortened training run from the command line
whose test mAP must rise far above chance."""

import importlib.util
import os

import numpy as np
import pytest
from PIL import Image

from pycaffe_lite.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "models", "ssd_shapes")


def _load(name):
    spec = importlib.util.spec_from_file_location("ssd_shapes_" + name,
                                                  os.path.join(EXAMPLE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _boxes_from_xml(path):
    import xml.etree.ElementTree as ET
    root = ET.parse(path).getroot()
    return [(o.find("name").text, [int(o.find("bndbox").find(t).text)
                                   for t in ("xmin", "ymin", "xmax", "ymax")])
            for o in root.findall("object")]


def test_generator_is_seeded_and_boxes_fit_the_shapes(tmp_path):
    gen = _load("generate_shapes")
    gen.generate(str(tmp_path / "a"), train=6, test=2, size=64, seed=5)
    gen.generate(str(tmp_path / "b"), train=6, test=2, size=64, seed=5)
    gen.generate(str(tmp_path / "c"), train=6, test=2, size=64, seed=6)
    for name in ("train.txt", "test.txt", "labelmap.prototxt", "annotations/train_00003.xml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    a = np.asarray(Image.open(tmp_path / "a" / "images" / "train_00004.png"))
    assert np.array_equal(a, np.asarray(Image.open(tmp_path / "b" / "images" /
                                                   "train_00004.png")))
    assert not np.array_equal(a, np.asarray(Image.open(tmp_path / "c" / "images" /
                                                       "train_00004.png")))
    assert (tmp_path / "a" / "train.txt").read_text().splitlines()[0] == \
        "images/train_00000.png annotations/train_00000.xml"
    for i in range(6):
        objects = _boxes_from_xml(tmp_path / "a" / "annotations" / ("train_%05d.xml" % i))
        assert 1 <= len(objects) <= 3
        for kind, (x0, y0, x1, y1) in objects:
            assert kind in gen.CLASSES
            assert 0 <= x0 < x1 <= 64 and 0 <= y0 < y1 <= 64
            assert x1 - x0 == y1 - y0 and 0.14 * 64 - 1 <= x1 - x0 <= 0.40 * 64


@pytest.mark.slow
def test_short_training_reaches_a_map_far_above_chance(tmp_path, monkeypatch):
    pytest.importorskip("pycaffe_lite.layers.detection.average_precision")
    gen = _load("generate_shapes")
    data = tmp_path / "data"
    gen.generate(str(data), train=400, test=100, size=96, seed=11)
    for split in ("train", "test"):
        assert main(["convert_annoset", "--anno_type=detection", "--label_map_file",
                     str(data / "labelmap.prototxt"), "--encoded", "--encode_type=png",
                     str(data) + "/", str(data / (split + ".txt")),
                     str(data / (split + "_lmdb"))]) == 0
    net = open(os.path.join(EXAMPLE, "ssd_shapes.prototxt")).read()
    net = net.replace("models/ssd_shapes/data", str(data))
    (tmp_path / "net.prototxt").write_text(net)
    solver = open(os.path.join(EXAMPLE, "ssd_shapes_solver.prototxt")).read()
    for old, new in (("models/ssd_shapes/ssd_shapes.prototxt", str(tmp_path / "net.prototxt")),
                     ("max_iter: 500", "max_iter: %d" % ITERS),
                     ("snapshot: 500", "snapshot: 0"), ("stepvalue: 400", "stepvalue: %d"
                                                        % (ITERS * 4 // 5)),
                     ("models/ssd_shapes/ssd_shapes\"", str(tmp_path / "shapes") + "\""),
                     ("test_interval: 250", "test_interval: %d" % (ITERS + 1))):
        assert old in solver
        solver = solver.replace(old, new)
    (tmp_path / "solver.prototxt").write_text(solver)
    assert main(["train", "--solver", str(tmp_path / "solver.prototxt")]) == 0
    weights = tmp_path / ("shapes_iter_%d.caffemodel" % ITERS)
    assert weights.exists()
    m, per_class = _load("evaluate_map").evaluate(str(weights), str(tmp_path / "net.prototxt"),
                                                  iters=4)
    # random boxes score an AP near 0 (few reach IoU 0.5 with an object of the right class);
    # 100 iterations on 400 images give about 0.43 here, 250 on 3,000 about 0.9
    assert sorted(per_class) == [1, 2, 3]
    assert m > MIN_MAP, per_class


# 100 iterations of 32 images: well under 60 s of training on two free cores
ITERS = 100
MIN_MAP = 0.25


def test_the_script_exits_with_the_trainings_status_when_training_fails(tmp_path):
    """train_ssd_shapes.sh pipes the training through tee: a training that fails (here a
    stand-in pycaffe-lite that exits 3) must fail the script, not print an empty mAP and exit
    0. The script runs in a copy of the example whose data folders exist (no generation)."""
    import shutil
    import subprocess

    example = tmp_path / "models" / "ssd_shapes"
    (example / "data" / "train_lmdb").mkdir(parents=True)
    (example / "data" / "test_lmdb").mkdir()
    shutil.copy(os.path.join(EXAMPLE, "train_ssd_shapes.sh"), example)
    fake = tmp_path / "bin" / "pycaffe-lite"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'pycaffe-lite train: error: no such solver' >&2\nexit 3\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=str(fake.parent) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(["sh", str(example / "train_ssd_shapes.sh")], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "training failed (exit status 3)" in proc.stderr
    assert "final test mAP" not in proc.stdout
    assert "no such solver" in (example / "train.log").read_text()
    assert not (example / "train.status").exists()
