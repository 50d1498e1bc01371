#!/usr/bin/env sh
# Train the small SSD of models/ssd_shapes and report its test mAP.
# Builds the synthetic data set and its LMDBs on first use (create_data.sh); extra arguments
# go to `pycaffe-lite train` (e.g. --gpu 0).
set -e
cd "$(dirname "$0")/../.."

if command -v pycaffe-lite >/dev/null 2>&1; then
  CAFFE="pycaffe-lite"
else
  CAFFE="${PYTHON:-python3} -m pycaffe_lite.cli"
fi

if [ ! -d models/ssd_shapes/data/train_lmdb ] || [ ! -d models/ssd_shapes/data/test_lmdb ]; then
  models/ssd_shapes/create_data.sh
fi

$CAFFE train --solver models/ssd_shapes/ssd_shapes_solver.prototxt "$@"
# the final weights, through the test net's DetectionEvaluate (all 300 test images)
${PYTHON:-python3} models/ssd_shapes/evaluate_map.py models/ssd_shapes/ssd_shapes_iter_2000.caffemodel
