#!/usr/bin/env python
"""Caffe's ``compute_image_mean`` tool, as a script: the same as
``pycaffe-lite compute_image_mean ...`` (same arguments)."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["compute_image_mean"] + sys.argv[1:]))
