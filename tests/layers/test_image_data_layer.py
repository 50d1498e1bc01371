"""The ImageData layer over a hand-made folder of PNG images and a list file."""

import pickle

import numpy as np
import pytest
from PIL import Image

import pycaffe_lite
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import empty_blobs, make_layer

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def _folder(tmp_path, n=5, size=(4, 6), names=None):
    """n RGB PNGs (pixel values known) and a list file 'name label'."""
    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    root.mkdir(exist_ok=True)
    rgbs = rng.integers(0, 256, (n,) + size + (3,), dtype=np.uint8)
    names = names or ["img %d.png" % i for i in range(n)]  # names with spaces
    for name, rgb in zip(names, rgbs):
        Image.fromarray(rgb).save(root / name)
    listing = tmp_path / "list.txt"
    listing.write_text("".join("%s %d\n" % (nm, 100 + i) for i, nm in enumerate(names)))
    return str(root) + "/", str(listing), rgbs


def _layer(root, listing, batch, params="", transform="", phase=TRAIN, tops=2):
    text = ('name: "img" type: "ImageData" image_data_param { source: "%s" root_folder: "%s" '
            'batch_size: %d %s } transform_param { %s }' % (listing, root, batch, params,
                                                            transform))
    layer = make_layer(text, dtype=np.float32, phase=phase)
    top = empty_blobs(tops, np.float32)
    layer.SetUp([], top)
    return layer, top


def _bgr_chw(rgb):
    return rgb[..., ::-1].transpose(0, 3, 1, 2).astype(np.float32)


def test_images_and_labels_in_list_order_with_wraparound(tmp_path):
    root, listing, rgbs = _folder(tmp_path)
    layer, top = _layer(root, listing, 3, transform="scale: 2")
    assert top[0].shape == (3, 3, 4, 6) and top[1].shape == (3,)
    for idx in ([0, 1, 2], [3, 4, 0]):
        layer.Forward([], top)
        np.testing.assert_array_equal(top[0].data, _bgr_chw(rgbs[idx]) * 2)
        assert top[1].data.tolist() == [100 + i for i in idx]
    layer.close()


def test_resize_grey_and_crop(tmp_path):
    cv2 = pytest.importorskip("cv2")
    root, listing, rgbs = _folder(tmp_path, size=(8, 12))
    layer, top = _layer(root, listing, 2, "new_height: 5 new_width: 7 is_color: false",
                        "crop_size: 3", TEST)
    assert top[0].shape == (2, 1, 3, 3)
    layer.Forward([], top)
    for i in range(2):
        # Caffe reads is_color false with OpenCV's IMREAD_GRAYSCALE
        grey = cv2.imread(root + "img %d.png" % i, cv2.IMREAD_GRAYSCALE)
        small = cv2.resize(grey, (7, 5), interpolation=cv2.INTER_LINEAR)
        np.testing.assert_array_equal(top[0].data[i, 0], small[1:4, 2:5])  # centre crop
    layer.close()


def test_shuffle_visits_every_image_once_per_pass_and_resumes(tmp_path):
    root, listing, rgbs = _folder(tmp_path, n=6)
    pycaffe_lite.set_random_seed(2)
    layer, top = _layer(root, listing, 3, "shuffle: true")
    labels = []
    for _ in range(4):
        layer.Forward([], top)
        labels.extend(top[1].data.tolist())
    assert sorted(labels[:6]) == sorted(labels[6:]) == [100 + i for i in range(6)]
    assert labels[:6] != [100 + i for i in range(6)] or labels[6:] != labels[:6]
    layer.close()

    pycaffe_lite.set_random_seed(2)
    a, top = _layer(root, listing, 3, "shuffle: true")
    a.Forward([], top)
    state = pickle.loads(pickle.dumps(a.get_state()))
    a.close()
    b, top = _layer(root, listing, 3, "shuffle: true")
    b.set_state(state)
    rest = []
    for _ in range(3):
        b.Forward([], top)
        rest.extend(top[1].data.tolist())
    assert rest == labels[3:]
    b.close()


def test_rand_skip(tmp_path):
    root, listing, _ = _folder(tmp_path)
    pycaffe_lite.set_random_seed(0)
    firsts = set()
    for _ in range(10):
        layer, top = _layer(root, listing, 1, "rand_skip: 4")
        layer.Forward([], top)
        firsts.add(int(top[1].data[0]) - 100)
        layer.close()
    assert firsts <= {0, 1, 2, 3} and len(firsts) > 1


def test_errors_name_the_list_file_and_image(tmp_path):
    root, listing, _ = _folder(tmp_path)
    with pytest.raises(LayerError, match=r"list file '.*missing.txt' not found"):
        _layer(root, str(tmp_path / "missing.txt"), 1)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(LayerError, match="list file '.*empty.txt' is empty"):
        _layer(root, str(empty), 1)
    bad = tmp_path / "bad.txt"
    bad.write_text("img 0.png 1\nimg 1.png\n")
    with pytest.raises(LayerError, match=r"line 2 of list file '.*bad.txt': label '1.png' is "
                                         r"not an integer"):
        _layer(root, str(bad), 1)
    partly = tmp_path / "partly.txt"
    partly.write_text("img 0.png 1\nimg 1.png 2\nghost.png 3\n")
    layer, top = _layer(root, str(partly), 1)
    layer.Forward([], top)
    layer.Forward([], top)
    with pytest.raises(LayerError, match=r"image file '.*ghost.png' not found"):
        layer.Forward([], top)
    layer.close()
    (tmp_path / "imgs" / "broken.png").write_bytes(b"\x89PNG broken")
    broken = tmp_path / "broken.txt"
    broken.write_text("broken.png 0\n")
    with pytest.raises(LayerError, match=r"cannot decode image '.*broken.png' \(line 1 of "
                                         r"'.*broken.txt'\)"):
        _layer(root, str(broken), 1)
    with pytest.raises(LayerError, match="new_height and new_width must be set together"):
        _layer(root, listing, 1, "new_height: 5")


def test_images_of_different_sizes_need_resize_or_crop(tmp_path):
    root, listing, _ = _folder(tmp_path, n=2)
    Image.fromarray(np.zeros((5, 5, 3), np.uint8)).save(tmp_path / "imgs" / "img 1.png")
    layer, top = _layer(root, listing, 2)
    with pytest.raises(LayerError, match=r"image '.*img 1.png' \(line 2 of '.*list.txt'\) is "
                                         r"3x5x5 .* first image .* is 3x4x6"):
        layer.Forward([], top)
    layer.close()
    layer, top = _layer(root, listing, 2, transform="crop_size: 4")
    layer.Forward([], top)
    assert top[0].shape == (2, 3, 4, 4)
    layer.close()
