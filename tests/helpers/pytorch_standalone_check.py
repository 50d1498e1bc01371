"""Run exported PyTorch modules without pycaffe-lite: for each folder given, import its
model.py, load() it (weights.pt), feed inputs.npz (by the forward's argument order in
inputs.npz's ``__order__``) and compare with expected.npz. Importing pycaffe_lite is made
impossible first. Prints one JSON line: {folder: {output: [abs, rel]}}."""

import importlib.abc
import importlib.util
import json
import os
import sys


class NoPycaffeLite(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pycaffe_lite" or name.startswith("pycaffe_lite."):
            raise ImportError("the exported module must not import pycaffe_lite")
        return None


def main(folders):
    sys.meta_path.insert(0, NoPycaffeLite())
    import numpy as np
    import torch

    results = {}
    for k, folder in enumerate(folders):
        spec = importlib.util.spec_from_file_location("exported_%d" % k,
                                                      os.path.join(folder, "model.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = module.load()
        assert not model.training
        inputs = np.load(os.path.join(folder, "inputs.npz"))
        order = [str(n) for n in inputs["__order__"]]
        with torch.no_grad():
            out = model(*[torch.from_numpy(inputs[n]) for n in order])
        expected = np.load(os.path.join(folder, "expected.npz"))
        if not isinstance(out, dict):
            out = {expected.files[0]: out}
        diffs = {}
        for name in expected.files:
            ours = expected[name].astype(np.float64)
            theirs = out[name].numpy().astype(np.float64)
            if ours.shape != theirs.shape:
                diffs[name] = ["shape %s" % (theirs.shape,), None]
                continue
            d = float(np.abs(ours - theirs).max()) if ours.size else 0.0
            diffs[name] = [d, d / max(float(np.abs(ours).max()), 1e-30)]
        results[folder] = diffs
    assert not any(m == "pycaffe_lite" or m.startswith("pycaffe_lite.") for m in sys.modules)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
