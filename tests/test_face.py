"""``import pycaffe_lite as caffe`` offers pycaffe's names, and stays light."""

import subprocess
import sys

import pycaffe_lite as caffe


def test_pycaffe_names_are_exported():
    for name in ["Net", "TRAIN", "TEST", "Layer", "set_mode_cpu", "set_mode_gpu", "set_device",
                 "set_random_seed", "layer_type_list", "io", "NetSpec", "layers", "params",
                 "to_proto", "Classifier", "Detector", "draw", "SGDSolver", "NesterovSolver",
                 "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver", "AdamSolver", "get_solver"]:
        assert hasattr(caffe, name), name
        assert name in caffe.__all__ or name == "draw", name
    assert (caffe.TRAIN, caffe.TEST) == (0, 1)
    assert caffe.io.Transformer is not None and caffe.io.load_image is not None
    assert caffe.draw.draw_net_to_file is not None
    assert caffe.params.Pooling.MAX == caffe.caffe_pb2.PoolingParameter.MAX


def test_import_loads_no_optional_package():
    code = ("import sys, pycaffe_lite; "
            "print(','.join(m for m in ('cv2', 'matplotlib', 'h5py', 'PIL', 'scipy', 'pydot') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == ""
