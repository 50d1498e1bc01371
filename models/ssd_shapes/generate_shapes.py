#!/usr/bin/env python
"""A small synthetic detection set: coloured circles, squares and triangles on clutter.

``python generate_shapes.py OUT_DIR [--train N] [--test N] [--size S] [--seed K]`` writes
``OUT_DIR/images/*.png``, one PASCAL VOC XML file per image in ``OUT_DIR/annotations/``,
the lists ``train.txt`` and ``test.txt`` (``images/x.png annotations/x.xml`` lines, as
``convert_annoset --anno_type=detection`` reads them) and ``labelmap.prototxt``. The same
seed gives the same files.

Each image has a textured background (a colour gradient, noise, thin lines and specks
smaller than any object) and 1 to 3 objects of 14 to 40% of the image side, each in a
random saturated colour. Objects overlap each other by at most 10% (intersection over
union), so every box is visible.
"""

import argparse
import os
import sys

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("circle", "square", "triangle")


def _colour(rng):
    """A saturated colour far from grey, as RGB."""
    hue = rng.uniform(0, 6)
    x = 1 - abs(hue % 2 - 1)
    r, g, b = [(1, x, 0), (x, 1, 0), (0, 1, x), (0, x, 1), (x, 0, 1), (1, 0, x)][int(hue)]
    v = rng.uniform(0.7, 1.0)
    return tuple(int(255 * v * c) for c in (r, g, b))


def _background(rng, size):
    yy, xx = np.mgrid[0:size, 0:size] / float(size)
    a, b = rng.uniform(40, 160, 3), rng.uniform(-50, 50, 3)
    angle = rng.uniform(0, 2 * np.pi)
    t = np.cos(angle) * xx + np.sin(angle) * yy
    img = a[None, None, :] + b[None, None, :] * t[:, :, None]
    img += rng.normal(0, 12, (size, size, 3))
    img = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 9))):
        pts = [tuple(rng.uniform(0, size, 2)) for _ in range(2)]
        draw.line(pts, fill=tuple(int(v) for v in rng.uniform(0, 255, 3)), width=1)
    for _ in range(int(rng.integers(5, 15))):
        x, y = rng.uniform(0, size, 2)
        r = rng.uniform(0.5, 2)
        draw.ellipse([x - r, y - r, x + r, y + r],
                     fill=tuple(int(v) for v in rng.uniform(0, 255, 3)))
    return img, draw


def _iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _draw(draw, kind, box, colour):
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse([x0, y0, x1 - 1, y1 - 1], fill=colour)
    elif kind == "square":
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], fill=colour)
    else:
        draw.polygon([((x0 + x1 - 1) / 2.0, y0), (x1 - 1, y1 - 1), (x0, y1 - 1)], fill=colour)


def make_image(rng, size):
    """(PIL image, [(class name, (xmin, ymin, xmax, ymax))]) with integer pixel boxes."""
    img, draw = _background(rng, size)
    objects = []
    for _ in range(int(rng.integers(1, 4))):
        for _attempt in range(20):
            kind = CLASSES[int(rng.integers(len(CLASSES)))]
            side = int(rng.uniform(0.14, 0.40) * size)
            x0 = int(rng.integers(0, size - side + 1))
            y0 = int(rng.integers(0, size - side + 1))
            box = (x0, y0, x0 + side, y0 + side)
            if all(_iou(box, b) <= 0.1 for _, b in objects):
                objects.append((kind, box))
                _draw(draw, kind, box, _colour(rng))
                break
    return img, objects


def voc_xml(filename, size, objects):
    rows = ["<annotation>", "  <filename>%s</filename>" % filename,
            "  <size><width>%d</width><height>%d</height><depth>3</depth></size>"
            % (size, size)]
    for kind, (x0, y0, x1, y1) in objects:
        rows += ["  <object>", "    <name>%s</name>" % kind, "    <difficult>0</difficult>",
                 "    <bndbox><xmin>%d</xmin><ymin>%d</ymin><xmax>%d</xmax><ymax>%d</ymax>"
                 "</bndbox>" % (x0, y0, x1, y1), "  </object>"]
    rows.append("</annotation>")
    return "\n".join(rows) + "\n"


def label_map():
    items = ['item {\n  name: "none_of_the_above"\n  label: 0\n  display_name: "background"\n}']
    for i, name in enumerate(CLASSES, 1):
        items.append('item {\n  name: "%s"\n  label: %d\n  display_name: "%s"\n}'
                     % (name, i, name))
    return "\n".join(items) + "\n"


def generate(out_dir, train=3000, test=300, size=96, seed=1):
    rng = np.random.default_rng(seed)
    for sub in ("images", "annotations"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    with open(os.path.join(out_dir, "labelmap.prototxt"), "w") as f:
        f.write(label_map())
    for split, count in (("train", train), ("test", test)):
        lines = []
        for i in range(count):
            stem = "%s_%05d" % (split, i)
            img, objects = make_image(rng, size)
            img.save(os.path.join(out_dir, "images", stem + ".png"))
            with open(os.path.join(out_dir, "annotations", stem + ".xml"), "w") as f:
                f.write(voc_xml(stem + ".png", size, objects))
            lines.append("images/%s.png annotations/%s.xml\n" % (stem, stem))
        with open(os.path.join(out_dir, split + ".txt"), "w") as f:
            f.writelines(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=3000)
    p.add_argument("--test", type=int, default=300)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    generate(a.out_dir, a.train, a.test, a.size, a.seed)
    print("wrote %d training and %d test images to %s" % (a.train, a.test, a.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
