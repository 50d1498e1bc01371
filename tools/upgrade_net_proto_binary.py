#!/usr/bin/env python
"""Caffe's tools/upgrade_net_proto_binary, as a script.

Same as ``pycaffe-lite upgrade_net_proto_binary IN OUT``.
"""

import sys

from pycaffe_lite.cli import main

if __name__ == "__main__":
    sys.exit(main(["upgrade_net_proto_binary"] + sys.argv[1:]))
