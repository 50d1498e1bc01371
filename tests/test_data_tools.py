"""The dataset tools: convert_mnist, convert_imageset, compute_image_mean (functions, CLI
subcommands and tools/ scripts), and progress reporting."""

import gzip
import logging
import os
import struct
import subprocess
import sys

import lmdb
import numpy as np
import pytest
from PIL import Image

from pycaffe_lite.proto import protoio
from pycaffe_lite.blob import blobproto_to_array
from pycaffe_lite.cli import main
from pycaffe_lite.data import DataError, compute_image_mean, convert_imageset, convert_mnist
from pycaffe_lite.data.progress import Progress
from pycaffe_lite.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MNIST = os.path.join(ROOT, "models", "lenet", "mnist5k")
IMAGES = os.path.join(MNIST, "t10k-images-idx3-ubyte.gz")
LABELS = os.path.join(MNIST, "t10k-labels-idx1-ubyte.gz")


def _records(path):
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        out = [(k, caffe_pb2.Datum.FromString(v)) for k, v in txn.cursor()]
    env.close()
    return out


def _idx(path):
    """An independent IDX reader: big-endian header, then the bytes."""
    raw = gzip.open(path).read()
    magic, n = struct.unpack(">ii", raw[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">ii", raw[8:16])
        return np.frombuffer(raw[16:], np.uint8).reshape(n, rows, cols)
    return np.frombuffer(raw[8:], np.uint8)


def test_convert_mnist_cli_writes_every_item(tmp_path):
    db = tmp_path / "mnist_test_lmdb"
    assert main(["convert_mnist", IMAGES, LABELS, str(db), "-backend", "lmdb"]) == 0
    records = _records(db)
    images, labels = _idx(IMAGES), _idx(LABELS)
    assert len(records) == len(images) == 1000
    for i in (0, 1, 537, 999):
        key, d = records[i]
        assert key == b"%08d" % i
        assert (d.channels, d.height, d.width, d.encoded) == (1, 28, 28, False)
        assert d.data == images[i].tobytes() and d.label == labels[i]


def test_convert_mnist_checks_the_files(tmp_path):
    with pytest.raises(DataError, match="Incorrect image file magic in '.*labels.*': 2049"):
        convert_mnist(LABELS, IMAGES, str(tmp_path / "db"), progress=False)
    raw = tmp_path / "raw-images"
    raw.write_bytes(gzip.open(IMAGES).read()[:16 + 784 * 10])  # not gzipped, truncated
    with pytest.raises(DataError, match="'.*raw-images' is truncated: 1000 images"):
        convert_mnist(str(raw), LABELS, str(tmp_path / "db"), progress=False)
    ten = tmp_path / "ten"
    header = struct.pack(">iiii", 2051, 10, 28, 28)
    ten.write_bytes(header + gzip.open(IMAGES).read()[16:16 + 7840])
    with pytest.raises(DataError, match="holds 10 images but .* holds 1000 labels"):
        convert_mnist(str(ten), LABELS, str(tmp_path / "db"), progress=False)
    assert main(["convert_mnist", LABELS, IMAGES, str(tmp_path / "x")]) == 1


def test_convert_mnist_leveldb(tmp_path):
    plyvel = pytest.importorskip("plyvel")
    assert main(["convert_mnist", IMAGES, LABELS, str(tmp_path / "ldb"), "--backend",
                 "leveldb"]) == 0
    db = plyvel.DB(str(tmp_path / "ldb"))
    assert sum(1 for _ in db) == 1000
    db.close()


def _image_folder(tmp_path, sizes=((6, 8), (6, 8), (6, 8))):
    root = tmp_path / "pics"
    root.mkdir()
    rng = np.random.default_rng(0)
    rgbs = []
    lines = []
    for i, (h, w) in enumerate(sizes):
        rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(rgb).save(root / ("p %d.png" % i))
        rgbs.append(rgb)
        lines.append("p %d.png %d" % (i, i * 3))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    return str(root) + "/", str(tmp_path / "list.txt"), rgbs


def test_convert_imageset_raw(tmp_path):
    root, listing, rgbs = _image_folder(tmp_path)
    assert main(["convert_imageset", root, listing, str(tmp_path / "db")]) == 0
    records = _records(tmp_path / "db")
    assert [k for k, _ in records] == [b"00000000_p 0.png", b"00000001_p 1.png",
                                       b"00000002_p 2.png"]
    for (_, d), rgb, label in zip(records, rgbs, (0, 3, 6)):
        assert (d.channels, d.height, d.width, d.label) == (3, 6, 8, label)
        chw = np.frombuffer(d.data, np.uint8).reshape(3, 6, 8)
        np.testing.assert_array_equal(chw, rgb[:, :, ::-1].transpose(2, 0, 1))


def test_convert_imageset_flags(tmp_path):
    cv2 = pytest.importorskip("cv2")
    root, listing, rgbs = _image_folder(tmp_path)
    assert main(["convert_imageset", "-gray", "-resize_height=3", "-resize_width=4",
                 "-shuffle", root, listing, str(tmp_path / "db")]) == 0
    records = _records(tmp_path / "db")
    assert sorted(d.label for _, d in records) == [0, 3, 6]
    for key, d in records:
        i = d.label // 3
        assert key.endswith(b"p %d.png" % i)
        grey = cv2.imread(os.path.join(root, "p %d.png" % i), cv2.IMREAD_GRAYSCALE)
        small = cv2.resize(grey, (4, 3), interpolation=cv2.INTER_LINEAR)
        assert (d.channels, d.height, d.width) == (1, 3, 4)
        assert d.data == small.tobytes()
    # encoded: PNG files kept byte for byte; --encode_type=jpg re-encodes (implies --encoded)
    assert main(["convert_imageset", "--encoded", root, listing, str(tmp_path / "enc")]) == 0
    for (_, d), name in zip(_records(tmp_path / "enc"), ("p 0.png", "p 1.png", "p 2.png")):
        assert d.encoded and d.data == open(os.path.join(root, name), "rb").read()
    assert main(["convert_imageset", "--encode_type=jpg", root, listing,
                 str(tmp_path / "jpg")]) == 0
    _, d = _records(tmp_path / "jpg")[0]
    assert d.encoded and d.data[:2] == b"\xff\xd8"  # a JPEG
    assert main(["convert_imageset", root, listing, str(tmp_path / "jpg")]) == 1  # exists


def test_convert_imageset_skips_unreadable_images_and_checks_size(tmp_path, caplog):
    root, listing, _ = _image_folder(tmp_path, ((6, 8), (5, 8), (6, 8)))
    with open(listing, "a") as f:
        f.write("missing.png 1\n")
    with caplog.at_level(logging.ERROR, logger="pycaffe_lite"):
        written, skipped = convert_imageset(root, listing, str(tmp_path / "db"), progress=False)
    assert written == 3 and [name for name, _ in skipped] == ["missing.png"]
    assert "image file '%smissing.png' not found" % root in caplog.text
    with pytest.raises(DataError, match=r"image '.*p 1.png' \(line 2 of '.*list.txt'\) has 120 "
                                        r"bytes of data, the first image has 144 \(check_size\)"):
        convert_imageset(root, listing, str(tmp_path / "db2"), check_size=True, progress=False)


def test_convert_imageset_gray_equals_opencv(tmp_path):
    # Caffe reads with cv::imread(path, IMREAD_GRAYSCALE): libpng's rgb_to_gray for PNG,
    # libjpeg's luma for JPEG
    cv2 = pytest.importorskip("cv2")
    root = tmp_path / "pics"
    root.mkdir()
    rng = np.random.default_rng(4)
    names = []
    for i in range(4):
        bgr = rng.integers(0, 256, (13 + i, 17, 3), dtype=np.uint8)
        for ext in ("png", "jpg"):
            cv2.imwrite(str(root / ("c%d.%s" % (i, ext))), bgr)
            names.append("c%d.%s" % (i, ext))
    listing = tmp_path / "list.txt"
    listing.write_text("".join("%s %d\n" % (n, i) for i, n in enumerate(names)))
    assert main(["convert_imageset", "--gray", str(root) + "/", str(listing),
                 str(tmp_path / "db")]) == 0
    records = _records(tmp_path / "db")
    assert len(records) == len(names)
    differ = 0
    for (_, d), name in zip(records, names):
        ref = cv2.imread(str(root / name), cv2.IMREAD_GRAYSCALE)
        assert (d.channels, d.height, d.width) == (1,) + ref.shape
        assert d.data == ref.tobytes(), name
        rgb = cv2.imread(str(root / name))[:, :, ::-1]
        differ += int((np.asarray(Image.fromarray(rgb).convert("L")) != ref).sum())
    assert differ > 0  # Pillow's own grey is not what Caffe stores


def test_convert_imageset_label_out_of_int32_range(tmp_path, capsys):
    root, listing, _ = _image_folder(tmp_path)
    ok = "p 0.png 2147483647\np 1.png -2147483648\n"
    for bad in ("99999999999", "2147483648", "-2147483649"):
        with open(listing, "w") as f:
            f.write(ok + "p 2.png %s\n" % bad)
        db = tmp_path / "db"
        with pytest.raises(DataError, match=r"line 3 of list file '.*list.txt': label %s is out "
                                            r"of range: a Datum label is a 32-bit integer"
                                            % bad):
            convert_imageset(root, listing, str(db), progress=False)
        assert not db.exists()  # the list is checked before the database is created
        assert main(["convert_imageset", root, listing, str(db)]) == 1
        assert "line 3 of list file" in capsys.readouterr().err
        assert not db.exists()
    # the extremes of int32 are stored as they are
    with open(listing, "w") as f:
        f.write(ok)
    assert main(["convert_imageset", root, listing, str(tmp_path / "ok")]) == 0
    assert [d.label for _, d in _records(tmp_path / "ok")] == [2147483647, -2147483648]


def test_convert_imageset_refuses_an_unknown_encode_type(tmp_path, capsys):
    root, listing, _ = _image_folder(tmp_path)
    db = tmp_path / "db"
    assert main(["convert_imageset", "--encode_type", "gif", root, listing, str(db)]) == 1
    err = capsys.readouterr().err
    assert "--encode_type 'gif' is not an image encoding" in err
    assert "png" in err and "jpg" in err and "bmp" in err
    assert not db.exists()
    # refused before the list (here missing) or any image is read
    with pytest.raises(DataError, match="--encode_type 'xyz'"):
        convert_imageset(root, str(tmp_path / "no-list.txt"), str(db), encode_type="xyz",
                         progress=False)
    # OpenCV takes the extension in any case: PNG is png
    assert main(["convert_imageset", "--encode_type=PNG", root, listing, str(db)]) == 0
    _, d = _records(db)[0]
    assert d.encoded and d.data[:8] == b"\x89PNG\r\n\x1a\n"


def _write_db(path, arrays, encoded=False):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, arr in enumerate(arrays):
            if encoded:
                import io
                buf = io.BytesIO()
                Image.fromarray(arr[::-1].transpose(1, 2, 0)).save(buf, format="PNG")
                d = caffe_pb2.Datum(data=buf.getvalue(), encoded=True)
            else:
                d = caffe_pb2.Datum(channels=arr.shape[0], height=arr.shape[1],
                                    width=arr.shape[2], data=arr.tobytes())
            txn.put(b"%08d" % i, d.SerializeToString())
    env.close()
    return str(path)


def test_compute_image_mean(tmp_path, caplog):
    arrays = np.random.default_rng(3).integers(0, 256, (300, 3, 4, 5), dtype=np.uint8)
    src = _write_db(tmp_path / "db", arrays)
    out = str(tmp_path / "mean.binaryproto")
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        assert main(["compute_image_mean", "-backend", "lmdb", src, out]) == 0
    proto = protoio.read_binary(out, caffe_pb2.BlobProto())
    assert (proto.num, proto.channels, proto.height, proto.width) == (1, 3, 4, 5)
    expected = arrays.astype(np.float64).mean(axis=0).astype(np.float32)
    np.testing.assert_array_equal(blobproto_to_array(proto)[0], expected)
    assert "mean_value channel [2]: %g" % expected[2].mean(dtype=np.float64) in caplog.text
    # encoded records give the mean of the decoded pixels
    enc = _write_db(tmp_path / "enc", arrays[:10], encoded=True)
    np.testing.assert_allclose(compute_image_mean(enc, progress=False)[0],
                               arrays[:10].mean(axis=0), rtol=1e-6)


def test_compute_image_mean_errors(tmp_path):
    src = _write_db(tmp_path / "db", [np.zeros((1, 2, 2), np.uint8), np.zeros((1, 3, 2),
                                                                               np.uint8)])
    with pytest.raises(DataError, match=r"record 1 \(key b'00000001'\) of '.*db' has size 1x3x2 "
                                        r"but the first record has 1x2x2"):
        compute_image_mean(src, progress=False)
    empty = _write_db(tmp_path / "empty", [])
    with pytest.raises(DataError, match="database '.*empty' is empty"):
        compute_image_mean(empty, progress=False)


def test_progress_lines_show_count_rate_and_eta():
    now = [0.0]
    lines = []
    prog = Progress(total=10000, what="images", every=1000, sink=lines.append,
                    clock=lambda: now[0])
    for _ in range(25):
        now[0] += 0.125  # exact in binary
        prog.update(100)
    assert lines[0] == "Processed 1000 of 10000 images (800.0/s, ETA 0:00:11)"
    assert len(lines) == 2
    prog.done()
    assert lines[-1] == "Processed 2500 images in 0:00:03 (800.0/s)"
    unknown = []
    p2 = Progress(every=2, sink=unknown.append, clock=lambda: 1.0)
    p2.update(3)
    assert unknown == ["Processed 3 items"]


def test_tools_scripts_take_caffes_arguments(tmp_path):
    script = os.path.join(ROOT, "tools", "convert_mnist.py")
    db = str(tmp_path / "db")
    result = subprocess.run([sys.executable, script, IMAGES, LABELS, db, "-backend", "lmdb"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert len(_records(db)) == 1000
    mean = str(tmp_path / "m.binaryproto")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compute_image_mean.py"),
                             db, mean], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and os.path.exists(mean)
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "convert_imageset.py"),
                             str(tmp_path), str(tmp_path / "nolist.txt"), str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 1 and "list file '%s' not found" % (tmp_path / "nolist.txt") \
        in result.stderr
