#!/usr/bin/env python
"""Darknet to Caffe conversion: the same as ``pycaffe-lite darknet2caffe`` (same arguments)."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["darknet2caffe"] + sys.argv[1:]))
