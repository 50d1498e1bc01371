"""DenseImageData: images and their label images (SegNet's and ENet's data layer)."""

import numpy as np

from ...data.datum import DataError, read_file, read_image, resize_nearest
from ...data.imageset import join_root
from ...data.transformer import DataTransformer
from ...registry import register_layer
from .base_data_layer import check_pairs, check_source, default_threads
from .image_data_layer import ImageDataLayer


def read_pair_list(path):
    """``[(line number, image path, label path), ...]`` from a list of whitespace-separated
    pairs (the forks read the file word by word)."""
    text = read_file(path, "list file").decode("utf-8", errors="surrogateescape")
    words = []
    for number, line in enumerate(text.splitlines(), 1):
        words.extend((number, word) for word in line.split())
    if len(words) % 2:
        raise DataError("list file '%s': line %d names an image without its label image (each "
                        "line is '<image path> <label image path>')" % (path, words[-1][0]))
    return [(words[i][0], words[i][1], words[i + 1][1]) for i in range(0, len(words), 2)]


@register_layer("DenseImageData")
class DenseImageDataLayer(ImageDataLayer):
    """Reads image and label-image pairs from a list file, in order, wrapping around: the
    data layer of SegNet (alexgkendall/caffe-segnet) and ENet (TimoSaemann/caffe-enet).

    Each image is read (BGR, or grey with ``is_color: false``) and resized bilinearly to
    ``new_height x new_width`` when given; its label image is read as grey and resized with
    nearest neighbours to ``new_height / label_divide_factor`` by ``new_width /
    label_divide_factor`` (or the image's size over the factor). With ``mirror`` both are
    flipped left-right together at random; with ``crop_height``/``crop_width`` both are cut
    to the same random window. The image then goes through ``transform_param`` (``scale``,
    ``mean_value``, ``mean_file``); the label's grey levels become the label values.

    Bottoms: none.
    Tops: data ``(batch_size, C, H, W)``; label ``(batch_size, 1, H', W')``.
    Params: ``dense_image_data_param { source batch_size root_folder shuffle new_height
    new_width is_color (true) mirror crop_height crop_width rand_skip label_divide_factor (1)
    mean_file (not read: use transform_param's) }``. ``transform_param``'s ``crop_size``
    and ``mirror`` are refused (they would move the image without its label): use the
    layer's own crop and mirror.
    """

    def data_setup(self, top):
        p = self.layer_param.dense_image_data_param
        check_source("dense_image_data_param", p, "the list file")
        check_pairs("dense_image_data_param", p,
                    (("new_height", "new_width"), ("crop_height", "crop_width")))
        if p.label_divide_factor < 1:
            raise DataError("dense_image_data_param.label_divide_factor must be >= 1")
        tp = self.layer_param.transform_param
        if tp.crop_size or tp.mirror:
            raise DataError("transform_param crop_size and mirror would move the image without "
                            "its label: use dense_image_data_param's crop_height, crop_width "
                            "and mirror")
        self._take_list_params(p)
        self.crop = (int(p.crop_height), int(p.crop_width))
        self.factor = int(p.label_divide_factor)
        self.mirror = bool(p.mirror)
        self.transformer = DataTransformer(tp, self.phase,
                                           "transform_param of layer '%s'" % self.name)
        self.lines = read_pair_list(self.source)
        if not self.lines:
            raise DataError("list file '%s' is empty: it should hold '<image> <label image>' "
                            "lines" % self.source)
        self._start(p.rand_skip)
        img, lab = self._load(int(self.order[self.position]))
        if self.crop[0]:
            img, lab = img[:, :self.crop[0], :self.crop[1]], lab[:self.crop[0], :self.crop[1]]
        out = self.transformer.output_shape(img.shape, self._where(0))
        self.prefetch_count = 4
        self.prefetch_threads = default_threads(True)
        return [(self.batch_size,) + tuple(out), (self.batch_size, 1) + lab.shape]

    def _where(self, index, which=1):
        number, image, label = self.lines[index]
        return "%s '%s' (line %d of '%s')" % ("image" if which == 1 else "label image",
                                              join_root(self.root, (image, label)[which - 1]),
                                              number, self.source)

    def _load(self, index):
        """The image (C, H, W) and its label image (H', W'), resized."""
        _, image, label = self.lines[index]
        h, w = self.new_size
        img = read_image(join_root(self.root, image), h, w, self.is_color, self._where(index))
        lab = read_image(join_root(self.root, label), 0, 0, False, self._where(index, 2))[:, :, 0]
        size = (h // self.factor, w // self.factor) if h else \
            (img.shape[0] // self.factor, img.shape[1] // self.factor)
        if lab.shape != size:
            lab = resize_nearest(lab, *size)
        return img.transpose(2, 0, 1), lab

    def _draws_random(self):
        return self.mirror or self.crop[0] > 0 or self.transformer.needs_random

    def fill_batch(self, plan, blobs):
        indices, seed = plan
        rng = self._batch_rng(seed)
        images, labels = [], []
        for i in indices:
            img, lab = self._load(i)
            if self.mirror and rng.integers(0, 2):
                img, lab = img[:, :, ::-1], lab[:, ::-1]
            if self.crop[0]:
                ch, cw = self.crop
                if img.shape[1] < ch or img.shape[2] < cw or lab.shape[0] < ch or \
                        lab.shape[1] < cw:
                    raise DataError("%s is smaller than crop_height x crop_width %d x %d"
                                    % (self._where(i), ch, cw))
                y = int(rng.integers(0, img.shape[1] - ch + 1))
                x = int(rng.integers(0, img.shape[2] - cw + 1))
                img, lab = img[:, y:y + ch, x:x + cw], lab[y:y + ch, x:x + cw]
            if images and img.shape != images[0].shape:
                raise DataError("%s is %s (CxHxW) but the batch's first image is %s: set "
                                "new_height/new_width" % (self._where(i), img.shape,
                                                          images[0].shape))
            images.append(np.ascontiguousarray(img))
            labels.append(lab)
        out_shape = self.transformer.output_shape(images[0].shape, self._where(indices[0]))
        data = blobs[0]
        if data.shape != (len(images),) + out_shape:
            data.reshape((len(images),) + out_shape)
        self.transformer.transform(images, data.data, rng)
        if len(blobs) > 1:
            label = np.stack(labels)[:, None]
            if blobs[1].shape != label.shape:
                blobs[1].reshape(label.shape)
            blobs[1].data[...] = label
