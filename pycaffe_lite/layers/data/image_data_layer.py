"""ImageData: batches of image files named in a list file."""

import logging

import numpy as np

from ...data.datum import DataError, read_image
from ...data.imageset import join_root, read_list_file
from ...data.transformer import DataTransformer
from ...registry import register_layer
from .base_data_layer import (BasePrefetchingDataLayer, check_pairs, check_source,
                              default_threads)

log = logging.getLogger("pycaffe_lite")


@register_layer("ImageData")
class ImageDataLayer(BasePrefetchingDataLayer):
    """Reads the images of a list file (``<path> <label>`` per line) in order, wrapping around.

    Bottoms: none.
    Tops: data (batch_size x C x H x W after transformation), and optionally label
    (batch_size,).
    Params: ``image_data_param { source (the list file), batch_size (1), root_folder
    (prefixed to each path), shuffle (reshuffled at every pass), new_height and new_width
    (resize, bilinear, both or neither), is_color (true: BGR; false: grey), rand_skip }`` and
    ``transform_param``. Images are loaded ahead by background threads (4 batches).
    """

    def data_setup(self, top):
        p = self.layer_param.image_data_param
        check_source("image_data_param", p, "the list file to read")
        check_pairs("image_data_param", p, (("new_height", "new_width"),))
        self._take_list_params(p)
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase,
                                           "transform_param of layer '%s'" % self.name)
        self.lines = read_list_file(self.source, numbered=True)
        if not self.lines:
            raise DataError("list file '%s' is empty: it should hold '<path> <label>' lines"
                            % self.source)
        self._start(p.rand_skip)
        img = self._load(int(self.order[self.position]))
        out = self.transformer.output_shape(img.shape, self._where(int(self.order[0])))
        self.prefetch_count = 4
        self.prefetch_threads = default_threads(True)
        return [(self.batch_size,) + tuple(out), (self.batch_size,)]

    def _take_list_params(self, p):
        """The fields ``image_data_param`` shares with the forks' image-list layers' messages:
        the list file, batch size, root folder, resize, colour and shuffling."""
        self.source = p.source
        self.batch_size = int(p.batch_size)
        self.root = p.root_folder
        self.new_size = (int(p.new_height), int(p.new_width))
        self.is_color = bool(p.is_color)
        self.shuffle = bool(p.shuffle)

    def source_records(self):
        return len(self.lines)

    def _start(self, rand_skip):
        """The reading order (shuffled when asked) and the first position (``rand_skip``)."""
        log.info("layer '%s': a total of %d images", self.name, len(self.lines))
        self.order = np.arange(len(self.lines))
        if self.shuffle:
            self.order = self.rng.permutation(len(self.lines))
        self.position = 0
        if rand_skip:
            skip = int(self.rng.integers(0, rand_skip))
            if skip >= len(self.lines):
                raise DataError("rand_skip %d: cannot skip %d of the %d images of '%s'"
                                % (rand_skip, skip, len(self.lines), self.source))
            log.info("layer '%s': skipping first %d data points", self.name, skip)
            self.position = skip

    def _draws_random(self):
        """Whether a batch needs its own random generator."""
        return self.transformer.needs_random

    def _where(self, index):
        number, name, _ = self.lines[index]
        return "image '%s' (line %d of '%s')" % (join_root(self.root, name), number,
                                                  self.source)

    def _load(self, index):
        _, name, _ = self.lines[index]
        h, w = self.new_size
        img = read_image(join_root(self.root, name), h, w, self.is_color, self._where(index))
        return img.transpose(2, 0, 1)

    def read_state(self):
        return {"source": self.source, "position": self.position, "order": self.order.copy(),
                "rng": self._rng_state()}

    def write_state(self, state):
        order = np.asarray(state["order"])
        if len(order) != len(self.lines):
            raise DataError("the state is for a list of %d images, '%s' has %d"
                            % (len(order), self.source, len(self.lines)))
        self.order = order.copy()
        self.position = int(state["position"])
        self.rng.bit_generator.state = state["rng"]

    def plan_batch(self):
        indices = []
        for _ in range(self.batch_size):
            indices.append(int(self.order[self.position]))
            self.position += 1
            if self.position >= len(self.lines):
                self.position = 0
                if self.shuffle:
                    self.order = self.rng.permutation(len(self.lines))
        return indices, self._batch_seed(self._draws_random())

    def fill_batch(self, plan, blobs):
        indices, seed = plan
        tf = self.transformer
        images = [self._load(i) for i in indices]
        first = images[0].shape
        for i, im in zip(indices, images):
            if im.shape != first:
                if im.shape[0] != first[0] or not tf.crop:
                    raise DataError("%s is %s (CxHxW) but the batch's first image (%s) is %s: "
                                    "set new_height/new_width or crop_size"
                                    % (self._where(i), "x".join(map(str, im.shape)),
                                       self._where(indices[0]), "x".join(map(str, first))))
                tf.check_input(im.shape, self._where(i))
        out_shape = tf.output_shape(first, self._where(indices[0]))
        data = blobs[0]
        if data.shape != (len(images),) + out_shape:
            data.reshape((len(images),) + out_shape)
        tf.transform(images, data.data, self._batch_rng(seed))
        if len(blobs) > 1:
            blobs[1].data[...] = [self.lines[i][2] for i in indices]
