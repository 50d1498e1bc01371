#!/usr/bin/env python
"""Caffe's ``convert_imageset`` tool, as a script: the same as
``pycaffe-lite convert_imageset ...`` (same arguments)."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["convert_imageset"] + sys.argv[1:]))
