"""The WindowData layer over hand-made images and a window file."""

import numpy as np
import pytest
from PIL import Image

import pycaffe_lite
from pycaffe_lite.proto import protoio
from pycaffe_lite.data.mean import mean_to_blobproto
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import empty_blobs, make_layer

cv2 = pytest.importorskip("cv2")


def _setup(tmp_path, windows0, windows1):
    rng = np.random.default_rng(0)
    rgbs = rng.integers(0, 256, (2, 20, 24, 3), dtype=np.uint8)
    lines = []
    for i, (rgb, wins) in enumerate(zip(rgbs, (windows0, windows1))):
        Image.fromarray(rgb).save(tmp_path / ("im%d.png" % i))
        lines += ["# %d" % i, "im%d.png" % i, "3", "20", "24", str(len(wins))]
        lines += [" ".join(str(v) for v in w) for w in wins]
    (tmp_path / "windows.txt").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "windows.txt"), rgbs[..., ::-1]  # BGR


def _layer(tmp_path, source, batch=4, params="", transform="crop_size: 8"):
    text = ('name: "win" type: "WindowData" top: "data" top: "label" window_data_param { '
            'source: "%s" root_folder: "%s/" batch_size: %d fg_fraction: 0.5 %s } '
            'transform_param { %s }' % (source, tmp_path, batch, params, transform))
    layer = make_layer(text, dtype=np.float32)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    return layer, top


# label overlap x1 y1 x2 y2 (inclusive pixel corners)
FG = (3, 0.9, 2, 3, 13, 10)
BG = (5, 0.1, 10, 4, 21, 17)


def test_windows_are_warped_and_labelled(tmp_path):
    # overlap 0.3 is neither foreground (>= 0.5) nor background (< 0.2): never used
    source, bgr = _setup(tmp_path, [FG], [BG, (1, 0.3, 0, 0, 5, 5)])
    layer, top = _layer(tmp_path, source, params="scale: 0.5 bg_threshold: 0.2",
                        transform="crop_size: 8 "
                        "mean_value: 10 mean_value: 20 mean_value: 30")
    assert top[0].shape == (4, 3, 8, 8) and top[1].shape == (4,)
    layer.Forward([], top)
    mean = np.array([10, 20, 30], np.float32).reshape(3, 1, 1)

    def expected(img, box):
        x1, y1, x2, y2 = box
        warped = cv2.resize(np.ascontiguousarray(img[y1:y2 + 1, x1:x2 + 1]), (8, 8),
                            interpolation=cv2.INTER_LINEAR)
        return (warped.transpose(2, 0, 1).astype(np.float32) - mean) * np.float32(0.5)

    assert top[1].data.tolist() == [0, 0, 3, 3]  # background first; its label forced to 0
    for i in (0, 1):
        np.testing.assert_array_equal(top[0].data[i], expected(bgr[1], BG[2:]))
    for i in (2, 3):
        np.testing.assert_array_equal(top[0].data[i], expected(bgr[0], FG[2:]))
    layer.close()


def test_context_padding_leaves_zeros_around_the_window(tmp_path):
    whole = (1, 1.0, 0, 0, 23, 19)  # the whole 24 x 20 image
    source, bgr = _setup(tmp_path, [whole], [BG])
    layer, top = _layer(tmp_path, source, batch=2,
                        params="context_pad: 2 fg_fraction: 1 cache_images: true",
                        transform="crop_size: 14")
    layer.Forward([], top)
    # By hand, Caffe's arithmetic: context_scale = 14 / 10 = 1.4.
    # x: centre 12, half 12 -> x1 = round(-4.8) = -5, x2 = round(28.8) = 29 (35 wide), clipped
    #    to 0..23 with 5 and 6 pixels cut; scale 14/35 = 0.4 -> width round(9.6) = 10, left
    #    pad round(2.0) = 2.
    # y: centre 10, half 10 -> y1 = -4, y2 = 24 (29 high), clipped to 0..19 (4 cut above);
    #    scale 14/29 -> height round(9.66) = 10, top pad round(1.93) = 2.
    out = top[0].data[0]
    ref = cv2.resize(np.ascontiguousarray(bgr[0]), (10, 10), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(out[:, 2:12, 2:12], ref.transpose(2, 0, 1))
    mask = np.ones((14, 14), bool)
    mask[2:12, 2:12] = False
    assert (out[:, mask] == 0).all()
    layer.close()


def test_mirror_and_mean_file(tmp_path):
    source, bgr = _setup(tmp_path, [FG], [BG])
    mean = np.random.default_rng(1).uniform(0, 50, (3, 10, 10)).astype(np.float32)
    path = str(tmp_path / "mean.binaryproto")
    protoio.write_binary(mean_to_blobproto(mean), path)
    pycaffe_lite.set_random_seed(0)
    layer, top = _layer(tmp_path, source, batch=16,
                        transform='crop_size: 8 mirror: true mean_file: "%s"' % path)
    layer.Forward([], top)
    x1, y1, x2, y2 = FG[2:]
    warped = cv2.resize(np.ascontiguousarray(bgr[0][y1:y2 + 1, x1:x2 + 1]), (8, 8))
    plain = warped.transpose(2, 0, 1).astype(np.float32)
    flipped = plain[:, :, ::-1]
    m = mean[:, 1:9, 1:9]  # the centre of the mean (mean_off = (10 - 8) // 2)
    kinds = []
    for item in top[0].data[8:]:
        if np.array_equal(item, plain - m):
            kinds.append("plain")
        else:
            np.testing.assert_array_equal(item, flipped - m)
            kinds.append("mirrored")
    assert set(kinds) == {"plain", "mirrored"}
    layer.close()


def test_errors(tmp_path):
    with pytest.raises(LayerError, match="window file '.*nothing.txt' not found"):
        _layer(tmp_path, str(tmp_path / "nothing.txt"))
    source, _ = _setup(tmp_path, [(0, 0.9, 0, 0, 3, 3)], [BG])
    with pytest.raises(LayerError, match="foreground window .* has label 0; foreground labels "
                                         "must be > 0"):
        _layer(tmp_path, source)
    source, _ = _setup(tmp_path, [FG], [BG])
    with pytest.raises(LayerError, match="needs transform_param.crop_size"):
        _layer(tmp_path, source, transform="")
    (tmp_path / "im1.png").unlink()
    layer, top = _layer(tmp_path, source)
    with pytest.raises(LayerError, match="image file '.*im1.png' not found"):
        layer.Forward([], top)
    layer.close()
