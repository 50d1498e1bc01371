"""AnnotatedData (SSD fork): batches of images with their boxes from a database of
AnnotatedDatum records."""

import logging

import numpy as np

from ...data import anno_transform as at
from ...data import sampler
from ...data.annotation import Boxes, boxes_of, read_label_map
from ...data.datum import RECORD_FIELDS_REPORTED, DataError, decode_image, raw_shape
from ...data.mean import load_mean
from ...errors import ProtoError
from ...proto import caffe_pb2, protoio
from ...registry import register_layer
from .base_data_layer import default_threads
from .data_layer import DataLayer

log = logging.getLogger("pycaffe_lite")

RP = caffe_pb2.ResizeParameter


def parse_annotated(value, where):
    anno = caffe_pb2.AnnotatedDatum()
    try:
        protoio.parse_binary(value, anno, where, RECORD_FIELDS_REPORTED)
    except ProtoError as exc:
        raise DataError("%s is not an AnnotatedDatum record (was the database written by "
                        "convert_annoset?): %s" % (where, exc.reason)) from None
    if not anno.HasField("datum"):
        raise DataError("%s is not an AnnotatedDatum record: it has no datum (was the "
                        "database written by convert_annoset?)" % where)
    return anno


@register_layer("AnnotatedData")
class AnnotatedDataLayer(DataLayer):
    """Reads AnnotatedDatum records (SSD fork) and augments images and boxes together.

    Bottoms: none.
    Tops: data (batch_size x C x H x W: each batch takes the size of its first record, as
    in the fork, so batches of one record may differ in size) and optionally label. With an
    annotation type (in the records or ``annotated_data_param.anno_type``) the label is
    ``1 x 1 x num_boxes x 8``, one row per box of the whole batch: ``[item_id, group_label,
    instance_id, xmin, ymin, xmax, ymax, difficult]`` (normalized coordinates); a batch
    without any box gives one row of -1. Without an annotation type the label is each
    record's ``datum.label`` (``batch_size``).
    Params: ``data_param { source, batch_size, backend, rand_skip, prefetch }``,
    ``annotated_data_param { batch_sampler, label_map_file, anno_type }`` and
    ``transform_param`` with the fork's ``resize_param`` (WARP), ``distort_param``,
    ``expand_param``, ``emit_constraint`` besides ``crop_size``/``crop_h``/``crop_w``,
    ``mirror``, ``mean_value``/``mean_file``, ``scale``, ``force_color``/``force_gray``.
    See :mod:`pycaffe_lite.data.anno_transform` for the order and the formulas.

    With ``label_map_file``, a box whose label the map does not list is an error naming the
    record and the label.

    As in the fork, the batch samplers, distortion and expansion apply in whichever phase
    lists them (test nets normally list none); the random crop is TRAIN-only (centred in
    TEST). All randomness of a batch comes from one generator seeded from the layer's own,
    so batches are reproducible under the solver's ``random_seed`` whatever the number of
    loading threads.
    """

    transform_applied_here = ("resize_param", "distort_param", "expand_param",
                              "emit_constraint", "crop_h", "crop_w")

    def _setup_from_first(self, p):
        if not self.cursor.valid:
            raise DataError("database '%s' (%s) is empty: there are no records to read"
                            % (self.source, self.backend.upper()))
        ap = self.layer_param.annotated_data_param
        tp = self.layer_param.transform_param
        self.tparam = tp
        self.known_labels = None
        if ap.label_map_file:
            self.known_labels = {int(i.label) for i in read_label_map(ap.label_map_file).item}
        self.samplers = list(ap.batch_sampler)
        for i, bs in enumerate(self.samplers):
            sampler.check_sampler(bs, "annotated_data_param.batch_sampler[%d]" % i)
        if tp.HasField("resize_param"):
            at.check_resize(tp.resize_param, "transform_param")
        if tp.crop_size and (tp.crop_h or tp.crop_w):
            raise DataError("transform_param: set crop_size or crop_h/crop_w, not both")
        self.mean = None
        if tp.HasField("mean_file"):
            self.mean = load_mean(tp.mean_file).astype(np.float32)
        elif len(tp.mean_value):
            self.mean = np.asarray(tp.mean_value, np.float32).reshape(-1, 1, 1)
        self.position = 0
        where = self._where(0, self.cursor.key())
        first = parse_annotated(self.cursor.value(), where)
        self.has_anno_type = first.HasField("type") or ap.HasField("anno_type")
        self.anno_type = ap.anno_type if ap.HasField("anno_type") else first.type
        if ap.HasField("anno_type") and first.HasField("type"):
            log.warning("layer '%s': anno_type of annotated_data_param overrides the type "
                        "stored in the records", self.name)
        if self.has_anno_type and self.anno_type != caffe_pb2.AnnotatedDatum.BBOX:
            raise DataError("unknown annotation type %d (only BBOX is defined)"
                            % self.anno_type)
        img = self._image(first.datum, where)
        self.channels = img.shape[2]
        self.out_hw = at.output_size(tp, img.shape[0], img.shape[1])
        self._check_mean(where)
        if p.rand_skip:
            skip = int(self.rng.integers(0, p.rand_skip))
            log.info("layer '%s': skipping first %d data points", self.name, skip)
            self._advance(skip)
        self.prefetch_count = int(p.prefetch)
        self.prefetch_threads = default_threads(bool(first.datum.encoded))
        out = (self.batch_size, self.channels) + tuple(self.out_hw)
        log.info("layer '%s': output data size: %s", self.name, ",".join(map(str, out)))
        if self.has_anno_type:
            n = sum(len(g.annotation) for g in first.annotation_group)
            label = (1, 1, max(n, 1), 8)
        else:
            label = (self.batch_size,)
        return [out, label]

    def _check_mean(self, where):
        m = self.mean
        if m is not None and m.shape[0] not in (1, self.channels):
            raise DataError("the mean has %d channels but %s has %d"
                            % (m.shape[0], where, self.channels))

    def _image(self, datum, where):
        """The record's image as (H, W, C) uint8."""
        if datum.encoded:
            return decode_image(datum.data, self.transformer.decode_color, where)
        c, h, w = raw_shape(datum, where)
        if datum.data:
            return np.frombuffer(datum.data, np.uint8).reshape(c, h, w).transpose(1, 2, 0)
        values = np.asarray(datum.float_data, np.float32).reshape(c, h, w)
        return _saturate_float(values, where).transpose(1, 2, 0)

    def plan_batch(self):
        records = []
        for _ in range(self.batch_size):
            records.append((self.position, self.cursor.key(), self.cursor.value()))
            self._next()
        return records, self._batch_seed(True)

    def augment(self, anno, img, where, rng, out):
        """One record (its image ``img``, H x W x C) through the fork's pipeline into ``out``
        (C, h, w); returns its boxes."""
        tp = self.tparam
        if img.shape[2] != self.channels:
            raise DataError("%s has %d channels, the first record %d"
                            % (where, img.shape[2], self.channels))
        boxes = boxes_of(anno) if self.has_anno_type else Boxes.empty()
        if self.known_labels is not None and len(boxes):
            unknown = sorted(set(boxes.labels.tolist()) - self.known_labels)
            if unknown:
                raise DataError("%s has boxes of label %s, which label_map_file '%s' does not "
                                "list" % (where, ", ".join(map(str, unknown)),
                                          self.layer_param.annotated_data_param.label_map_file))
        emit = tp.emit_constraint if tp.HasField("emit_constraint") else None
        if tp.HasField("distort_param"):
            img = at.distort(img, tp.distort_param, rng)
        if tp.HasField("expand_param"):
            # the canvas takes the mean values, rounded to pixels (a mean_file cannot fit
            # a canvas of random size: 0 then)
            fill = 0 if self.mean is None or self.mean.shape[1:] != (1, 1) else \
                np.clip(np.rint(np.broadcast_to(self.mean.reshape(-1), (self.channels,))),
                        0, 255)
            img, boxes = at.expand(img, boxes, tp.expand_param, fill, rng, emit)
        if self.samplers:
            patches = sampler.generate_samples(boxes.boxes, self.samplers, rng)
            if patches:
                patch = patches[int(rng.integers(len(patches)))]
                img, boxes = at.crop_to(img, boxes, patch, emit)
        h, w = at.output_size(tp, img.shape[0], img.shape[1])
        if (h, w) != out.shape[1:]:
            raise DataError("%s becomes %dx%d but the batch (as its first record) is %dx%d: "
                            "use resize_param or batches of records of one size"
                            % (where, h, w, *out.shape[1:]))
        return at.final_transform(img, boxes, tp, self.phase, self.mean, rng, out)

    def fill_batch(self, plan, blobs):
        records, seed = plan
        rng = np.random.default_rng(seed)
        n = len(records)
        data = blobs[0]
        rows = []
        labels = []
        for item, (pos, key, value) in enumerate(records):
            where = self._where(pos, key)
            anno = parse_annotated(value, where)
            if self.has_anno_type and not anno.HasField("type") and \
                    not self.layer_param.annotated_data_param.HasField("anno_type"):
                raise DataError("%s has no annotation type but the first record has one"
                                % where)
            img = self._image(anno.datum, where)
            if item == 0:
                # as the fork: the batch takes the shape of its first record's image, so
                # batches (of one record, say) may differ in size
                shape = (n, self.channels) + tuple(
                    at.output_size(self.tparam, img.shape[0], img.shape[1]))
                if data.shape != shape:
                    data.reshape(shape)
            boxes = self.augment(anno, img, where, rng, data.data[item])
            if self.has_anno_type:
                for j in range(len(boxes)):
                    rows.append((item, boxes.labels[j], boxes.instance[j], *boxes.boxes[j],
                                 float(boxes.difficult[j])))
            else:
                labels.append(anno.datum.label)
        if len(blobs) < 2:
            return
        label = blobs[1]
        if not self.has_anno_type:
            label.data[...] = labels
            return
        table = np.asarray(rows, np.float64).reshape(-1, 8) if rows else \
            -np.ones((1, 8), np.float64)
        label.reshape((1, 1, len(table), 8))
        label.data[...] = table.reshape(1, 1, -1, 8)


def _saturate_float(values, where):
    if values.min(initial=0) < 0 or values.max(initial=0) > 255:
        raise DataError("%s holds float_data outside [0, 255]: AnnotatedData augments 8-bit "
                        "images" % where)
    return np.rint(values).astype(np.uint8)
