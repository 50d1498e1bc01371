#!/usr/bin/env python
"""Caffe's tools/upgrade_net_proto_text, as a script: same as ``pycaffe-lite upgrade_net_proto_text ...``."""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["upgrade_net_proto_text"] + sys.argv[1:]))
