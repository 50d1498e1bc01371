"""Build hook: compile proto/caffe.proto into pycaffe_lite/proto/caffe_pb2.py.

The message module is always produced from the schema by protoc (grpcio-tools), for regular
and editable installs alike, so the two can never drift apart. Generated code only runs on a
protobuf runtime of the same major version and at least its own version, so the protobuf
requirement is derived from the module actually generated here (a user's older protobuf is
then upgraded by pip instead of failing at import).
"""

import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join(HERE, "pycaffe_lite", "proto", "caffe_pb2.py")


def compile_schema():
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        "-I" + os.path.join(HERE, "proto"),
        "--python_out=" + os.path.dirname(GENERATED),
        os.path.join(HERE, "proto", "caffe.proto"),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed to compile proto/caffe.proto")


def protobuf_requirement():
    """``protobuf>=X.Y.Z,<X+1`` for the gencode version written in the generated module."""
    with open(GENERATED) as f:
        m = re.search(r"Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", f.read())
    if not m:
        return "protobuf>=5.28"
    major, minor, patch = (int(v) for v in m.groups())
    return "protobuf>=%d.%d.%d,<%d" % (major, minor, patch, major + 1)


class BuildPyWithSchema(build_py):
    def run(self):
        compile_schema()
        super().run()


compile_schema()
setup(
    cmdclass={"build_py": BuildPyWithSchema},
    install_requires=["numpy>=1.23", protobuf_requirement(), "lmdb>=1.4", "Pillow>=9.0"],
)
