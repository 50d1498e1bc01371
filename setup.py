"""Build hook: compile proto/caffe.proto into pycaffe_lite/proto/caffe_pb2.py.

The message module is always produced from the schema by protoc (grpcio-tools), both for
regular and editable installs, so the two can never drift apart.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def compile_schema():
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        "-I" + os.path.join(HERE, "proto"),
        "--python_out=" + os.path.join(HERE, "pycaffe_lite", "proto"),
        os.path.join(HERE, "proto", "caffe.proto"),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed to compile proto/caffe.proto")


class BuildPyWithSchema(build_py):
    def run(self):
        compile_schema()
        super().run()


setup(cmdclass={"build_py": BuildPyWithSchema})
