"""Detection annotations as the SSD fork stores them: label maps, VOC XML and COCO-style JSON
files, and ``AnnotatedDatum`` records.

An ``AnnotatedDatum`` holds a ``Datum`` (the image) and its boxes, grouped by label: one
``AnnotationGroup`` per label in order of first appearance, each with its ``Annotation``s
(``instance_id`` counting from 0 within the group) whose ``bbox`` is a ``NormalizedBBox`` in
[0, 1] image coordinates. VOC pixel corners are divided by the image's width and height as
they are (no -1 offset), as the fork does.
"""

import json
import logging
import os
import xml.etree.ElementTree as ET

import numpy as np

from ..proto import protoio
from ..proto import caffe_pb2
from .datum import DataError

log = logging.getLogger("pycaffe_lite")

BBOX = caffe_pb2.AnnotatedDatum.BBOX


def read_label_map(path):
    """A ``LabelMap`` prototxt file (``item { name: "cat" label: 8 display_name: "cat" }``)."""
    return protoio.read_text(path, caffe_pb2.LabelMap())


def name_to_label(label_map, strict=False, where="the label map"):
    """``{name: label}``; with ``strict`` a name listed twice is an error (the fork's
    ``--check_label``), otherwise the last one wins."""
    out = {}
    for item in label_map.item:
        if strict and item.name in out:
            raise DataError("%s lists the name '%s' more than once (check_label)"
                            % (where, item.name))
        out[item.name] = int(item.label)
    return out


def label_to_display_name(label_map):
    return {int(item.label): item.display_name or item.name for item in label_map.item}


class BoxList:
    """Collects boxes into an AnnotatedDatum's groups, numbering instances per label."""

    def __init__(self, anno_datum):
        self.anno = anno_datum
        self.groups = {g.group_label: g for g in anno_datum.annotation_group}

    def add(self, label, xmin, ymin, xmax, ymax, difficult=False):
        group = self.groups.get(label)
        if group is None:
            group = self.anno.annotation_group.add()
            group.group_label = label
            self.groups[label] = group
        instance = group.annotation[-1].instance_id + 1 if len(group.annotation) else 0
        a = group.annotation.add()
        a.instance_id = instance
        b = a.bbox
        b.xmin, b.ymin, b.xmax, b.ymax = xmin, ymin, xmax, ymax
        b.difficult = bool(difficult)
        return a


def _lookup(names, name, path, what="label"):
    if name not in names:
        known = ", ".join(sorted(names)[:12])
        raise DataError("annotation file '%s': unknown %s '%s' (not in the label map; known: "
                        "%s)" % (path, what, name, known))
    return names[name]


def _check_box(path, box, width, height):
    xmin, ymin, xmax, ymax = box
    if min(xmin, ymin, xmax, ymax) < 0 or xmin > width or xmax > width or ymin > height \
            or ymax > height:
        log.warning("%s: bounding box %s exceeds the image boundary (%dx%d)", path,
                    [float(v) for v in box], width, height)
    if xmin > xmax or ymin > ymax:
        log.warning("%s: bounding box %s is irregular (min > max)", path,
                    [float(v) for v in box])


def _image_size(path, size, img_height, img_width):
    height, width = size
    if not height or not width:
        height, width = img_height, img_width
    if height != img_height:
        log.warning("%s: inconsistent image height (%d in the file, the image has %d)",
                    path, height, img_height)
    if width != img_width:
        log.warning("%s: inconsistent image width (%d in the file, the image has %d)",
                    path, width, img_width)
    if not width or not height:
        raise DataError("annotation file '%s' has no valid image width/height" % path)
    return height, width


def _int_text(node, tag, default=0):
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        return default
    text = child.text.strip()
    try:
        return int(text)
    except ValueError:
        # the fork reads integers; VOC files written by some tools carry "12.0"
        return int(float(text))


def read_voc_xml(path, img_height, img_width, names, anno_datum):
    """Add the ``<object>`` boxes of a PASCAL VOC XML file to ``anno_datum`` (the fork's
    ``ReadXMLToAnnotatedDatum``). ``names`` maps object names to labels."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise DataError("annotation file '%s' is not valid XML: %s" % (path, exc)) from None
    except OSError as exc:
        raise DataError("cannot read annotation file '%s': %s"
                        % (path, exc.strerror or exc)) from None
    if root.tag != "annotation":
        raise DataError("annotation file '%s': the root element is <%s>, expected "
                        "<annotation>" % (path, root.tag))
    size = root.find("size")
    hw = (0, 0)
    if size is not None:
        hw = (_int_text(size, "height"), _int_text(size, "width"))
    height, width = _image_size(path, hw, img_height, img_width)
    boxes = BoxList(anno_datum)
    for obj in root.findall("object"):
        name = obj.find("name")
        if name is None or name.text is None:
            raise DataError("annotation file '%s': an <object> has no <name>" % path)
        label = _lookup(names, name.text.strip(), path)
        diff = obj.find("difficult")
        difficult = diff is not None and (diff.text or "").strip() == "1"
        bnd = obj.find("bndbox")
        if bnd is None:
            raise DataError("annotation file '%s': object '%s' has no <bndbox>"
                            % (path, name.text.strip()))
        box = [_int_text(bnd, t) for t in ("xmin", "ymin", "xmax", "ymax")]
        _check_box(path, box, width, height)
        boxes.add(label, box[0] / width, box[1] / height, box[2] / width, box[3] / height,
                  difficult)
    return anno_datum


def read_coco_json(path, img_height, img_width, names, anno_datum):
    """Add the boxes of a per-image COCO-style JSON file (``{"image": {"height", "width"},
    "annotation": [{"category_id", "bbox": [x, y, w, h], "iscrowd"}]}``) to ``anno_datum``
    (the fork's ``ReadJSONToAnnotatedDatum``). ``category_id`` is looked up in ``names`` as
    text; ``iscrowd`` becomes ``difficult``."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as exc:
        raise DataError("annotation file '%s' is not valid JSON: %s" % (path, exc)) from None
    except OSError as exc:
        raise DataError("cannot read annotation file '%s': %s"
                        % (path, exc.strerror or exc)) from None
    image = doc.get("image") or {}
    hw = (int(image.get("height", 0) or 0), int(image.get("width", 0) or 0))
    height, width = _image_size(path, hw, img_height, img_width)
    boxes = BoxList(anno_datum)
    for i, obj in enumerate(doc.get("annotation", [])):
        if "category_id" not in obj:
            raise DataError("annotation file '%s': annotation %d has no category_id"
                            % (path, i))
        label = _lookup(names, str(obj["category_id"]), path, "category_id")
        bbox = obj.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise DataError("annotation file '%s': annotation %d needs a bbox of 4 numbers "
                            "[x, y, width, height], got %r" % (path, i, bbox))
        x, y, w, h = (float(v) for v in bbox)
        box = [x, y, x + w, y + h]
        _check_box(path, box, width, height)
        boxes.add(label, box[0] / width, box[1] / height, box[2] / width, box[3] / height,
                  bool(int(obj.get("iscrowd", 0))))
    return anno_datum


def read_txt_boxes(path, img_height, img_width, anno_datum):
    """Add the boxes of a text file of ``label xmin ymin xmax ymax`` lines (pixels)."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            tokens = f.read().split()
    except OSError as exc:
        raise DataError("cannot read annotation file '%s': %s"
                        % (path, exc.strerror or exc)) from None
    boxes = BoxList(anno_datum)
    for start in range(0, len(tokens) - len(tokens) % 5, 5):
        try:
            label = int(tokens[start])
            box = [float(v) for v in tokens[start + 1:start + 5]]
        except ValueError:
            raise DataError("annotation file '%s': box %d is not 'label xmin ymin xmax ymax'"
                            % (path, start // 5)) from None
        _check_box(path, box, img_width, img_height)
        boxes.add(label, box[0] / img_width, box[1] / img_height, box[2] / img_width,
                  box[3] / img_height)
    return anno_datum


LABEL_READERS = {"xml": read_voc_xml, "json": read_coco_json}


def read_annotations(path, label_type, img_height, img_width, names, anno_datum):
    """Fill ``anno_datum``'s groups from ``path`` (a missing file leaves it without boxes, as
    in the fork)."""
    anno_datum.ClearField("annotation_group")
    anno_datum.type = BBOX
    if not os.path.exists(path):
        return anno_datum
    if label_type == "txt":
        return read_txt_boxes(path, img_height, img_width, anno_datum)
    reader = LABEL_READERS.get(label_type)
    if reader is None:
        raise DataError("unknown label_type '%s' (use xml, json or txt)" % label_type)
    return reader(path, img_height, img_width, names, anno_datum)


def boxes_of(anno_datum):
    """The boxes of an AnnotatedDatum as arrays in group order: ``labels`` (n,) int,
    ``instance`` (n,) int, ``boxes`` (n, 4) float64 xmin, ymin, xmax, ymax, ``difficult``
    (n,) bool."""
    labels, instance, boxes, difficult = [], [], [], []
    for g in anno_datum.annotation_group:
        for a in g.annotation:
            b = a.bbox
            labels.append(g.group_label)
            instance.append(a.instance_id)
            boxes.append((b.xmin, b.ymin, b.xmax, b.ymax))
            difficult.append(b.difficult)
    return Boxes(np.asarray(labels, np.int64), np.asarray(instance, np.int64),
                 np.asarray(boxes, np.float64).reshape(-1, 4),
                 np.asarray(difficult, bool))


class Boxes:
    """Boxes of one image as parallel arrays (see :func:`boxes_of`)."""

    __slots__ = ("labels", "instance", "boxes", "difficult")

    def __init__(self, labels, instance, boxes, difficult):
        self.labels = labels
        self.instance = instance
        self.boxes = boxes
        self.difficult = difficult

    def __len__(self):
        return len(self.labels)

    def take(self, keep, boxes):
        """The boxes selected by the boolean/int index ``keep``, with new coordinates."""
        return Boxes(self.labels[keep], self.instance[keep], boxes,
                     self.difficult[keep])

    @classmethod
    def empty(cls):
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 4)),
                   np.zeros(0, bool))
