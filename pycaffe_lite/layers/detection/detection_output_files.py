"""DetectionOutput's result files (``save_output_param``), as the SSD fork writes them.

The fork (weiliu89/caffe, ``detection_output_layer.cpp``) saves only when ``output_directory``,
``label_map_file`` and ``name_size_file`` are all given. ``name_size_file`` lists ``name
height width`` for every test image, in the order the images come; the layer counts images
and, after every ``num_test_image`` of them (default: all the names), writes that round's
detections, then starts a new round:

- boxes are clipped to [0, 1] and scaled to the image's size from ``name_size_file`` (or
  mapped back through ``resize_param``: WARP, FIT_SMALL_SIZE, FIT_LARGE_SIZE_AND_PAD), in
  single precision; x, y, width and height are rounded to hundredths (halves away from 0);
- ``VOC``: one file ``<output_name_prefix><name>.txt`` per class of the label map (the
  background aside, by ``name``), emptied when a round begins (the layer's set-up included)
  and rewritten when it ends,
  one line per detection: ``image score xmin ymin xmax ymax`` with the corners as integers
  (the rounded values truncated; xmax = xmin + width) and the score with 6 significant digits;
- ``COCO``: ``<output_name_prefix>.json``, the detections array as Boost's property tree
  writes it (4-space indents; every value a string but numbers, true, false and null, which
  go unquoted; floats with 9 significant digits), ``category_id`` the label's ``name``;
- ``ILSVRC``: ``<output_name_prefix>.txt``, lines ``image label score xmin ymin xmax ymax``.

The fork deletes ``output_directory`` with everything in it when the layer is set up; here
the directory is created if needed and only the files named above are replaced.
"""

import logging
import math
import os
import re

import numpy as np

from ...data.annotation import read_label_map
from ...errors import CaffeError
from ...proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")

_RESIZE = caffe_pb2.ResizeParameter
FORMATS = ("VOC", "COCO", "ILSVRC")
# Boost's JSON writer output has every value quoted; the fork unquotes these.
_UNQUOTE = re.compile(r'"(null|true|false|-?[0-9]+(\.[0-9]+)?)"')


def read_name_sizes(layer, path):
    """``[(name, height, width)]`` of a name_size_file (DetectionOutput's and
    DetectionEvaluate's), one ``name height width`` line per image (blank lines skipped); a
    line that is not that is an error naming it (the fork's ``infile >> name >> h >> w`` stops
    there, writing the later images under wrong names)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise layer.error("name_size_file '%s' cannot be read: %s"
                          % (path, e.strerror or e)) from None
    out = []
    for number, line in enumerate(lines, 1):
        tokens = line.split()
        if not tokens:
            continue
        try:
            if len(tokens) != 3:
                raise ValueError
            out.append((tokens[0], int(tokens[1]), int(tokens[2])))
        except ValueError:
            raise layer.error("name_size_file '%s' line %d: expected "
                              "'name height width', got %r" % (path, number, line.strip())
                              ) from None
    return out


def _f32(v):
    return np.float32(v)


def _clip(v, high=np.float32(1)):
    """std::max(std::min(v, high), 0.f): a -0.0 stays -0.0, as in the fork."""
    v = high if high < v else v
    return _f32(0) if v < 0 else v


def _scale(box, height, width):
    return [_f32(box[0] * _f32(width)), _f32(box[1] * _f32(height)),
            _f32(box[2] * _f32(width)), _f32(box[3] * _f32(height))]


def _project(source, box):
    """ProjectBBox: ``box`` in the coordinates of ``source``, clipped; None when they do not
    overlap."""
    if box[0] >= source[2] or box[2] <= source[0] or box[1] >= source[3] or \
            box[3] <= source[1]:
        return None
    w, h = _f32(source[2] - source[0]), _f32(source[3] - source[1])
    return [_clip(_f32(_f32(box[0] - source[0]) / w)), _clip(_f32(_f32(box[1] - source[1]) / h)),
            _clip(_f32(_f32(box[2] - source[0]) / w)), _clip(_f32(_f32(box[3] - source[1]) / h))]


def output_box(box, height, width, resize=None):
    """The fork's OutputBBox: a normalised box (4 float32) in the original image's pixels."""
    box = [_f32(v) for v in box]
    mode = resize.resize_mode if resize is not None else 0
    if mode == _RESIZE.FIT_LARGE_SIZE_AND_PAD:
        rh, rw = _f32(resize.height), _f32(resize.width)
        resize_aspect = _f32(rw / rh)
        aspect = _f32(_f32(width) / _f32(height))
        if aspect > resize_aspect:
            pad = _f32(_f32(rh - _f32(rw / aspect)) / _f32(2))
            source = [_f32(0), _f32(pad / rh), _f32(1), _f32(1.0 - float(_f32(pad / rh)))]
        else:
            pad = _f32(_f32(rw - _f32(rh * aspect)) / _f32(2))
            source = [_f32(pad / rw), _f32(0), _f32(1.0 - float(_f32(pad / rw))), _f32(1)]
        projected = _project(source, box)
        box = [_clip(v) for v in (projected if projected is not None else box)]
        return _scale(box, height, width)
    if mode == _RESIZE.FIT_SMALL_SIZE and resize.height_scale and resize.width_scale:
        out = _scale(box, resize.height_scale, resize.width_scale)
        return [_clip(out[0], _f32(width)), _clip(out[1], _f32(height)),
                _clip(out[2], _f32(width)), _clip(out[3], _f32(height))]
    return _scale([_clip(v) for v in box], height, width)


def _hundredths(v):
    """round(v * 100) / 100. stored as a float (C's round: halves away from zero)."""
    p = float(_f32(v * _f32(100)))
    return _f32(math.copysign(math.floor(abs(p) + 0.5), p) / 100.0)


def _g(v, digits):
    return "%.*g" % (digits, float(v))


def _json_string(s):
    """Boost's create_escapes: quote, backslash and slash escaped, control characters as
    \\b \\f \\n \\r \\t or \\u00XX."""
    named = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
             "\r": "\\r", "\t": "\\t"}
    out = []
    for ch in s:
        if ch in named:
            out.append(named[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class ResultFiles:
    """The state of one DetectionOutput's saving: its settings, the images counted in the
    current round and their detections."""

    def __init__(self, layer, param, num_classes, background_label_id):
        self.directory = param.output_directory
        self.prefix = param.output_name_prefix
        self.format = param.output_format
        self.background = background_label_id
        self.num_classes = num_classes
        self.resize = param.resize_param if param.HasField("resize_param") else None
        self.enabled = self._check_files(layer, param)
        if not self.enabled:
            return
        if self.format not in FORMATS:
            raise layer.error("save_output_param output_format '%s' is not one of %s"
                              % (self.format, ", ".join(FORMATS)))
        if self.resize is not None and not (self.resize.height > 0 and self.resize.width > 0):
            raise layer.error("save_output_param resize_param needs a positive height and "
                              "width (the size the images were resized to)")
        self.names = self._label_names(layer, param.label_map_file)
        sizes = read_name_sizes(layer, param.name_size_file)
        self.images = sizes
        self.num_test_image = int(param.num_test_image) if param.HasField("num_test_image") \
            else len(sizes)
        if not 0 < self.num_test_image <= len(sizes):
            raise layer.error("save_output_param num_test_image is %d, but name_size_file "
                              "'%s' lists %d images (it must be 1 .. %d)"
                              % (self.num_test_image, param.name_size_file, len(sizes),
                                 len(sizes)))
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            raise layer.error("save_output_param output_directory '%s' cannot be created: %s"
                              % (self.directory, e.strerror or e)) from None
        self.count = 0
        self.detections = []

    @staticmethod
    def _check_files(layer, param):
        """Whether results are saved: the fork saves only with an output directory, a label
        map and a name/size list (an empty label_map_file or name_size_file: a warning)."""
        if not param.output_directory:
            return False
        for field in ("label_map_file", "name_size_file"):
            if not param.HasField(field):
                log.warning("layer '%s': save_output_param has no %s; no result files are "
                            "written", layer.layer_param.name, field)
                return False
            if not getattr(param, field):
                log.warning("layer '%s': save_output_param %s is empty; no result files are "
                            "written", layer.layer_param.name, field)
                return False
        return True

    def _label_names(self, layer, path):
        try:
            label_map = read_label_map(path)
        except CaffeError as e:
            raise layer.error("save_output_param label_map_file: %s" % e) from None
        except OSError as e:
            raise layer.error("save_output_param label_map_file '%s' cannot be read: %s"
                              % (path, e.strerror or e)) from None
        names = {}
        for item in label_map.item:
            if int(item.label) in names:
                raise layer.error("label_map_file '%s' lists label %d more than once"
                                  % (path, item.label))
            names[int(item.label)] = item.name
        missing = [c for c in range(self.num_classes)
                   if c != self.background and c not in names]
        if missing:
            raise layer.error("label_map_file '%s' has no name for label(s) %s of the %d "
                              "classes" % (path, missing, self.num_classes))
        return names

    def _path(self, name):
        return os.path.join(self.directory, self.prefix + name)

    def begin(self):
        """When the layer is reshaped (set up, and before each forward pass, as the fork's
        Reshape): at the start of a round, VOC's class files are emptied (created)."""
        if self.enabled and self.count == 0 and self.format == "VOC":
            for label, name in sorted(self.names.items()):
                if label != self.background:
                    open(self._path(name + ".txt"), "w").close()

    def add_image(self, rows):
        """One image's detections, ``(K, 7)`` rows in the top's order; at the end of a
        round the files are written."""
        if not self.enabled:
            return
        name, height, width = self.images[self.count]
        for row in rows:
            label = int(row[1])
            x0, y0, x1, y1 = output_box(row[3:7], height, width, self.resize)
            xmin, ymin = _hundredths(x0), _hundredths(y0)
            w, h = _hundredths(_f32(x1 - x0)), _hundredths(_f32(y1 - y0))
            self.detections.append((name, label, _f32(row[2]), (xmin, ymin, w, h)))
        self.count += 1
        if self.count % self.num_test_image == 0:
            getattr(self, "_write_" + self.format.lower())()
            self.count = 0
            self.detections = []

    @staticmethod
    def _corners(box):
        x, y, w, h = (int(v) for v in box)        # static_cast<int>: toward zero
        return "%d %d %d %d" % (x, y, x + w, y + h)

    def _write_voc(self):
        lines = {c: [] for c in range(self.num_classes) if c != self.background}
        for name, label, score, box in self.detections:
            lines[label].append("%s %s %s\n" % (name, _g(score, 6), self._corners(box)))
        for c, text in lines.items():
            with open(self._path(self.names[c] + ".txt"), "w") as f:
                f.write("".join(text))

    def _write_ilsvrc(self):
        with open(self._path(".txt"), "w") as f:
            for name, label, score, box in self.detections:
                f.write("%s %d %s %s\n" % (name, label, _g(score, 6), self._corners(box)))

    def _write_coco(self):
        items = []
        for name, label, score, box in self.detections:
            bbox = ",\n".join(" " * 16 + '"%s"' % _g(v, 9) for v in box)
            items.append(" " * 8 + "{\n" +
                         " " * 12 + '"image_id": %s,\n' % _json_string(name) +
                         " " * 12 + '"category_id": %s,\n' % _json_string(self.names[label]) +
                         " " * 12 + '"bbox": [\n' + bbox + "\n" + " " * 12 + "],\n" +
                         " " * 12 + '"score": "%s"\n' % _g(score, 9) +
                         " " * 8 + "}")
        if items:
            text = _UNQUOTE.sub(r"\1", "[\n" + ",\n".join(items) + "\n    ")
        else:
            text = "["                   # the fork fails on an empty round; an empty array
        with open(self._path(".json"), "w") as f:
            f.write(text + "\n]\n")
