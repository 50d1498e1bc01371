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

# the solver tests every 250 iterations and at the end (eval_type "detection"): each test
# logs "Test net output #0: detection_eval = <mAP>" over the 300 test images
LOG=models/ssd_shapes/train.log
# POSIX sh has no pipefail: the training's exit status goes through a file past tee
STATUS=models/ssd_shapes/train.status
{ status=0; $CAFFE train --solver models/ssd_shapes/ssd_shapes_solver.prototxt "$@" 2>&1 \
    || status=$?; echo "$status" > "$STATUS"; } | tee "$LOG"
status=$(cat "$STATUS")
rm -f "$STATUS"
if [ "$status" != 0 ]; then
  echo "training failed (exit status $status): see $LOG" >&2
  exit "$status"
fi
echo "final test mAP (VOC 11-point):" \
  "$(grep 'Test net output #0: detection_eval' "$LOG" | tail -n 1 | sed 's/.*= //')"
