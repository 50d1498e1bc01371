#!/usr/bin/env sh
# Train LeNet on the bundled 4,000/1,000 MNIST subset (Caffe's examples/mnist/train_lenet.sh).
# Creates models/lenet/mnist_{train,test}_lmdb on first use; extra arguments go to
# `pycaffe-lite train` (e.g. --gpu 0, --snapshot models/lenet/lenet_iter_1000.solverstate).
set -e
cd "$(dirname "$0")/../.."

if command -v pycaffe-lite >/dev/null 2>&1; then
  CAFFE="pycaffe-lite"
else
  CAFFE="${PYTHON:-python3} -m pycaffe_lite.cli"
fi

DATA=models/lenet/mnist5k
for part in train t10k; do
  case $part in train) db=models/lenet/mnist_train_lmdb ;; *) db=models/lenet/mnist_test_lmdb ;; esac
  if [ ! -d "$db" ]; then
    echo "Creating $db"
    $CAFFE convert_mnist "$DATA/$part-images-idx3-ubyte.gz" "$DATA/$part-labels-idx1-ubyte.gz" "$db"
  fi
done

exec $CAFFE train --solver models/lenet/lenet_solver.prototxt "$@"
