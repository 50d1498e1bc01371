#!/usr/bin/env sh
# Generate the synthetic shapes set (seeded) and build its LMDBs with convert_annoset.
# Usage: models/ssd_shapes/create_data.sh [--train N] [--test N] [--seed K]
set -e
cd "$(dirname "$0")/../.."

if command -v pycaffe-lite >/dev/null 2>&1; then
  CAFFE="pycaffe-lite"
else
  CAFFE="${PYTHON:-python3} -m pycaffe_lite.cli"
fi

DATA=models/ssd_shapes/data
rm -rf "$DATA/train_lmdb" "$DATA/test_lmdb"
${PYTHON:-python3} models/ssd_shapes/generate_shapes.py "$DATA" "$@"
for split in train test; do
  $CAFFE convert_annoset --anno_type=detection --label_type=xml \
    --label_map_file="$DATA/labelmap.prototxt" --encoded --encode_type=png \
    --check_label "$DATA/" "$DATA/$split.txt" "$DATA/${split}_lmdb"
done
