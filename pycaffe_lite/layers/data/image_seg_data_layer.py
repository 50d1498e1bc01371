"""ImageSegData: images with their label images, or one label per image (DeepLab v2)."""

import numpy as np

from ...data.datum import DataError, read_file, read_image
from ...data.imageset import join_root
from ...proto import caffe_pb2
from ...registry import register_layer
from .base_data_layer import check_pairs, check_source, default_threads
from .dense_image_data_layer import DenseImageDataLayer
from .image_data_layer import ImageDataLayer

P = caffe_pb2.ImageDataParameter
LABEL_TYPES = {P.NONE: "NONE", P.IMAGE: "IMAGE", P.PIXEL: "PIXEL"}


def read_seg_list(path, label_type):
    """``[(line number, image path, second word or ''), ...]``: one image per non-empty line,
    followed by its label image (PIXEL) or label (IMAGE); NONE reads the first word only."""
    text = read_file(path, "list file").decode("utf-8", errors="surrogateescape")
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if label_type == P.NONE:
            lines.append((number, words[0], ""))
            continue
        if len(words) < 2:
            raise DataError("list file '%s': line %d names an image without its %s (label_type "
                            "%s: each line is '<image> <%s>'; label_type NONE reads images "
                            "alone)" % (path, number, "label image" if label_type == P.PIXEL
                                        else "label", LABEL_TYPES[label_type],
                                        "label image" if label_type == P.PIXEL else "label"))
        if label_type == P.IMAGE:
            try:
                int(words[1])
            except ValueError:
                raise DataError("list file '%s': line %d: label '%s' is not an integer "
                                "(label_type IMAGE)" % (path, number, words[1])) from None
        lines.append((number, words[0], words[1]))
    return lines


@register_layer("ImageSegData")
class ImageSegDataLayer(ImageDataLayer):
    """The data layer of DeepLab v2: images listed in a file, each with a label image
    (``label_type: PIXEL``), a label for all its pixels (``IMAGE``, the default) or none
    (``NONE``: every label is ``ignore_label``), in order, wrapping around.

    Each image is read (BGR, or grey with ``is_color: false``) and resized bilinearly to
    ``new_height x new_width`` when given; a label image is read as grey and resized the same
    way (bilinear, as the fork does). Then, as the fork's ``TransformImgAndSeg``: where the
    image is smaller than the crop it is padded at the bottom and right with the mean values
    (0 after the mean is taken off) and the label with ``ignore_label``; both are cut to the
    crop (a random window in TRAIN, the centre one, ``(H - crop) / 2``, in TEST); with
    ``mirror`` both are flipped left-right at random (any phase); the image becomes
    ``(pixel - mean_value) * scale``. Labels are 8-bit: ``ignore_label`` and IMAGE labels are
    clipped to [0, 255].

    Bottoms: none.
    Tops: data ``(batch_size, C, H, W)``; optionally label ``(batch_size, 1, H, W)`` and
    data_dim ``(batch_size, 1, 1, 2)``: each image's height and width after the resize, at
    most the data's (H, W).
    Params: ``image_data_param { source batch_size root_folder shuffle rand_skip new_height
    new_width is_color label_type ignore_label (255) }``; ``transform_param { scale mirror
    mean_value crop_size | crop_height crop_width }``. ``mean_file`` is refused (as the fork
    does). Without a crop every image must be the first one's size.
    """

    max_num_top_blobs = 3

    def data_setup(self, top):
        p = self.layer_param.image_data_param
        check_source("image_data_param", p, "the list file")
        check_pairs("image_data_param", p, (("new_height", "new_width"),))
        tp = self.layer_param.transform_param
        if tp.HasField("mean_file"):
            raise DataError("ImageSegData does not take transform_param.mean_file: give the "
                            "mean as mean_value")
        if tp.HasField("crop_height") != tp.HasField("crop_width") or (
                tp.HasField("crop_size") and tp.HasField("crop_height")):
            raise DataError("transform_param: give either crop_size or both crop_height and "
                            "crop_width")
        if tp.HasField("crop_height"):
            self.crop = (int(tp.crop_height), int(tp.crop_width))
        else:
            self.crop = (int(tp.crop_size),) * 2
        self._take_list_params(p)
        self.label_type = int(p.label_type)
        self.ignore_label = int(np.clip(p.ignore_label, 0, 255))
        self.mirror = bool(tp.mirror)
        self.scale = np.float64(tp.scale)
        self.train = self.phase == caffe_pb2.TRAIN
        self.lines = read_seg_list(self.source, self.label_type)
        if not self.lines:
            raise DataError("list file '%s' is empty: it should hold '<image> <label>' lines"
                            % self.source)
        self._start(p.rand_skip)
        img = self._load(int(self.order[self.position]))
        channels = img.shape[2]
        mean = np.asarray(tp.mean_value, np.float64)
        if len(mean) not in (0, 1, channels):
            raise DataError("transform_param: give 1 mean_value or one per channel (%d), got %d"
                            % (channels, len(mean)))
        self.mean = np.broadcast_to(mean if len(mean) else np.zeros(1), (channels,)).copy()
        self.out_size = self.crop if self.crop[0] > 0 else img.shape[:2]
        self.prefetch_count = 4
        self.prefetch_threads = default_threads(True)
        n = self.batch_size
        return [(n, channels) + tuple(self.out_size), (n, 1) + tuple(self.out_size),
                (n, 1, 1, 2)]

    _where = DenseImageDataLayer._where  # lines of (number, image, label) both ways

    def _load(self, index):
        _, image, _ = self.lines[index]
        h, w = self.new_size
        return read_image(join_root(self.root, image), h, w, self.is_color, self._where(index))

    def _label(self, index, shape):
        """The (H, W) uint8 label of line ``index`` for an image of (H, W) ``shape``."""
        _, _, second = self.lines[index]
        if self.label_type == P.PIXEL:
            h, w = self.new_size
            lab = read_image(join_root(self.root, second), h, w, False,
                             self._where(index, 2))[:, :, 0]
            if lab.shape != shape:
                raise DataError("%s is %dx%d but its image is %dx%d (HxW)"
                                % ((self._where(index, 2),) + lab.shape + shape))
            return lab
        value = int(np.clip(int(second), 0, 255)) if self.label_type == P.IMAGE \
            else self.ignore_label
        return np.full(shape, value, np.uint8)

    def _draws_random(self):
        return self.mirror or (self.train and self.crop[0] > 0)

    def _transform(self, img, lab, rng, index):
        """The fork's TransformImgAndSeg for one (H, W, C) image and its (H, W) label:
        (C, h, w) float64 data and (h, w) label."""
        do_mirror = self.mirror and bool(rng.integers(0, 2))
        img = img.astype(np.float64)
        ch, cw = self.crop
        if ch > 0:
            ph, pw = max(ch - img.shape[0], 0), max(cw - img.shape[1], 0)
            if ph or pw:
                img = np.concatenate([img, np.broadcast_to(
                    self.mean, (img.shape[0], pw, img.shape[2]))], axis=1)
                img = np.concatenate([img, np.broadcast_to(
                    self.mean, (ph, img.shape[1], img.shape[2]))], axis=0)
                lab = np.pad(lab, ((0, ph), (0, pw)), constant_values=self.ignore_label)
            if self.train:
                y = int(rng.integers(0, img.shape[0] - ch + 1))
                x = int(rng.integers(0, img.shape[1] - cw + 1))
            else:
                y, x = (img.shape[0] - ch) // 2, (img.shape[1] - cw) // 2
            img, lab = img[y:y + ch, x:x + cw], lab[y:y + ch, x:x + cw]
        elif img.shape[:2] != tuple(self.out_size):
            raise DataError("%s is %dx%d (HxW) but the first image is %dx%d: set new_height/"
                            "new_width or a crop" % ((self._where(index),) + img.shape[:2] +
                                                     tuple(self.out_size)))
        if do_mirror:
            img, lab = img[:, ::-1], lab[:, ::-1]
        data = ((img - self.mean) * self.scale).transpose(2, 0, 1)
        return data, lab

    def fill_batch(self, plan, blobs):
        indices, seed = plan
        rng = self._batch_rng(seed)
        max_h, max_w = self.out_size
        for j, i in enumerate(indices):
            img = self._load(i)
            dims = (min(max_h, img.shape[0]), min(max_w, img.shape[1]))
            data, lab = self._transform(img, self._label(i, img.shape[:2]), rng, i)
            blobs[0].data[j] = data
            if len(blobs) > 1:
                blobs[1].data[j, 0] = lab
            if len(blobs) > 2:
                blobs[2].data[j, 0, 0] = dims
