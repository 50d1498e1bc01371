"""Ranks that do not train the same model (one host with an edited net or solver, a resume
from another snapshot) stop at the start with an error naming the rank, its host and what
differs: never a failure deep inside MPI, a wait until the collective timeout, or silently
wrong training. Real ``mpiexec`` jobs whose ranks get different files (MPMD ``:``), and the
description and its comparison in one process."""

import os
import socket
import subprocess
import sys

import pytest

from pycaffe_lite import ranks
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.parallel import consistency, reducer
from pycaffe_lite.solvers import get_solver

from helpers.mpi import GUARD_S, _env, make_lmdb, mpi_available, mpiexec, tiny_project


@pytest.fixture(autouse=True)
def single_solver():
    ranks.reset()
    yield
    ranks.reset()


def _edited(folder, db, net_edit=None, solver_edit=None, **kw):
    solver = tiny_project(folder, db, **kw)
    net = folder / "solver_net.prototxt"
    if net_edit:
        net.write_text(net_edit(net.read_text()))
    if solver_edit:
        solver.write_text(solver_edit(solver.read_text()))
    return solver


def _run_mpmd(cwd, per_rank, *flags):
    """One mpiexec job whose rank r runs ``train --solver per_rank[r]`` (+ its extra args).
    ``(exit code, output)``; the guard only catches a hang."""
    command = [mpiexec()]
    for r, (solver, extra) in enumerate(per_rank):
        if r:
            command.append(":")
        command += ["-n", "1", sys.executable, "-m", "pycaffe_lite.cli", "train", "--solver",
                    str(solver)] + list(flags) + list(extra)
    proc = subprocess.run(command, cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=GUARD_S, env=_env({}))
    return proc.returncode, proc.stdout


def _ip1_7(text):
    return text.replace("num_output: 6", "num_output: 7", 1)


def _dropout(text):
    return text.replace('layer { name: "ip2"', 'layer { name: "drop" type: "Dropout" '
                        'bottom: "ip1" top: "ip1" }\nlayer { name: "ip2"', 1)


CASES = {
    # a different param count: MPI's broadcast used to fail with "message sizes do not match"
    "num_output": (dict(net_edit=_ip1_7),
                   "layer 'ip1' (InnerProduct): inner_product_param.num_output is 7 on rank 1, "
                   "6 on rank 0"),
    # no param changes: used to train silently with dropout on one rank only
    "extra layer": (dict(net_edit=_dropout),
                    "layer 'drop' (Dropout) is in rank 1's train net only"),
    # used to train silently with another learning rate and rule on one rank
    "solver": (dict(solver_edit=lambda t: t.replace("base_lr: 0.1", 'base_lr: 0.2\ntype: '
                                                    '"Adam"')),
               "solver field base_lr is 0.2 on rank 1, 0.1 on rank 0"),
    # used to wait in rank 1's allreduce of iteration 10 for a rank 0 that had finished
    "max_iter": (dict(max_iter=12), "solver field max_iter is 12 on rank 1, 10 on rank 0"),
    # one collective per iteration either way: used to train silently wrong
    "iter_size": (dict(solver_edit=lambda t: t + "iter_size: 2\n"),
                  "solver field iter_size is 2 on rank 1, 1 (the default) on rank 0"),
}


@pytest.mark.mpi
@pytest.mark.slow  # real mpiexec jobs
@pytest.mark.skipif(not mpi_available(), reason="needs mpi4py and mpiexec (pip install "
                    "'.[mpi]')")
@pytest.mark.parametrize("case", sorted(CASES))
def test_ranks_with_different_models_stop_at_once_naming_the_rank_and_the_difference(
        tmp_path, case):
    edits, expected = CASES[case]
    db = make_lmdb(tmp_path / "db", n=24)
    same = _edited(tmp_path / "a", db, max_iter=10, snapshot=5)
    other = _edited(tmp_path / "b", db, **dict(dict(max_iter=10, snapshot=5), **edits))
    # a long timeout: the error must come from the check, not from a stalled collective
    rc, out = _run_mpmd(tmp_path, [(same, []), (other, [])], "--collective_timeout", "100")
    assert rc != 0, out
    errors = [line for line in out.splitlines() if "do not train the same model" in line]
    assert errors, out
    assert expected in errors[0], errors[0]
    host = socket.gethostname()
    assert "rank 1 (host %s, pid " % host in errors[0] and str(other) in errors[0], errors[0]
    assert "differs from rank 0 (host %s, pid " % host in errors[0], errors[0]
    assert str(same) in errors[0], errors[0]
    assert "Iteration 0, loss" not in out  # stopped before training
    assert not os.listdir(tmp_path / "a" / "snaps") and not os.listdir(tmp_path / "b" / "snaps")


@pytest.mark.mpi
@pytest.mark.slow  # a real mpiexec job
@pytest.mark.skipif(not mpi_available(), reason="needs mpi4py and mpiexec (pip install "
                    "'.[mpi]')")
def test_the_third_rank_resuming_another_snapshot_is_named(tmp_path):
    db = make_lmdb(tmp_path / "db", n=24)
    solver = _edited(tmp_path / "a", db, max_iter=4, snapshot=2)
    rc, out = _run_mpmd(tmp_path, [(solver, [])], "--collective_timeout", "100")
    assert rc == 0, out
    snap = tmp_path / "a" / "snaps" / "solver_iter_2.solverstate"
    rc, out = _run_mpmd(tmp_path, [(solver, []), (solver, []), (solver, ["--snapshot",
                                                                         str(snap)])],
                        "--collective_timeout", "100")
    assert rc != 0, out
    errors = [line for line in out.splitlines() if "do not train the same model" in line]
    assert errors, out
    assert "rank 2 (host %s, pid " % socket.gethostname() in errors[0]
    assert "rank 1 (" not in errors[0]  # rank 1 is rank 0's twin
    assert "the solver's iter is 2 on rank 2, 0 on rank 0" in errors[0], errors[0]


# ---- the description and its comparison, in one process --------------------------------
def _solver(folder, db, **edits):
    return get_solver(str(_edited(folder, db, **edits)))


@pytest.fixture
def db(tmp_path):
    return make_lmdb(tmp_path / "db", n=12)


def test_the_same_model_in_other_folders_describes_the_same(tmp_path, db):
    """Paths (the net file, data, snapshot prefix) and what only rank 0 uses may differ."""
    other_db = make_lmdb(tmp_path / "db2", n=12)
    a = _solver(tmp_path / "a", db)
    b = _solver(tmp_path / "b", other_db, solver_edit=lambda t: t.replace(
        "display: 5", "display: 7\ntest_interval: 3\ndevice_id: 1\niter_size: 1"))
    assert consistency.describe(a) == consistency.describe(b)
    assert consistency.digest(consistency.describe(a)) == \
        consistency.digest(consistency.describe(b))


def test_file_paths_inside_layers_are_set_aside_and_nothing_else():
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2

    def layer(text):
        return text_format.Parse(text, caffe_pb2.LayerParameter())
    a = layer('name: "d" type: "ImageData" image_data_param { source: "/a/list.txt" '
              'root_folder: "/a/img/" batch_size: 4 } transform_param { mean_file: "/a/m" } '
              'annotated_data_param { label_map_file: "/a/labels.prototxt" }')
    b = layer('name: "d" type: "ImageData" image_data_param { source: "/b/l.txt" '
              'root_folder: "/b/" batch_size: 4 } transform_param { mean_file: "/b/m" } '
              'annotated_data_param { label_map_file: "/b/labels.prototxt" }')
    assert consistency.flatten(consistency._paths_aside(a)) == \
        consistency.flatten(consistency._paths_aside(b))
    b.image_data_param.batch_size = 5
    assert ("image_data_param.batch_size", "5", "1") in \
        consistency.flatten(consistency._paths_aside(b))


def _differences(tmp_path, db, **edits):
    a = consistency.describe(_solver(tmp_path / "a", db))
    b = consistency.describe(_solver(tmp_path / "b", db, **edits))
    assert consistency.digest(a) != consistency.digest(b)
    return consistency.differences(a, b, 1)


def test_params_of_another_shape_are_named(tmp_path, db):
    """The same layer fields on data of another shape: ip1's weights differ in shape."""
    wide = make_lmdb(tmp_path / "wide", n=12, shape=(1, 4, 5))
    a = consistency.describe(_solver(tmp_path / "a", db))
    b = consistency.describe(_solver(tmp_path / "b", wide))
    assert consistency.differences(a, b, 1) == [
        "layer 'ip1' (InnerProduct): its params are 6x20, 6 on rank 1, 6x16, 6 on rank 0"]


def test_layers_in_another_order_are_named(tmp_path, db):
    two = ('layer { name: "ipA" type: "InnerProduct" bottom: "ip1" top: "ipA" '
           'inner_product_param { num_output: 2 } }\n'
           'layer { name: "ipB" type: "InnerProduct" bottom: "ip1" top: "ipB" '
           'inner_product_param { num_output: 2 } }\n'
           'layer { name: "sum" type: "Eltwise" bottom: "ipA" bottom: "ipB" top: "s" }\n'
           'layer { name: "silence" type: "Silence" bottom: "s" }')
    swapped = two.split("\n")
    swapped[0], swapped[1] = swapped[1], swapped[0]
    a = consistency.describe(_solver(tmp_path / "a", db, extra_layers=two))
    b = consistency.describe(_solver(tmp_path / "b", db, extra_layers="\n".join(swapped)))
    found = consistency.differences(a, b, 1)
    assert "rank 1's train net runs layer 'ipB' where rank 0's runs 'ipA' (the layers come " \
        "in another order)" in found, found


def test_a_layer_missing_and_a_changed_type_are_named(tmp_path, db):
    found = _differences(tmp_path, db, net_edit=lambda t: t.replace(
        'layer { name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }',
        'layer { name: "relu" type: "TanH" bottom: "ip1" top: "ip1" }'))
    assert found == ["layer 'relu' (ReLU) is a TanH on rank 1"]
    found = _differences(tmp_path / "2", db, net_edit=lambda t: t.replace(
        'layer { name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }', ""))
    assert found == ["layer 'relu' (ReLU) is missing from rank 1's train net"]


def test_the_message_names_every_differing_rank_and_only_those(tmp_path, db):
    a = consistency.describe(_solver(tmp_path / "a", db))
    b = consistency.describe(_solver(tmp_path / "b", db, solver_edit=lambda t: t.replace(
        "momentum: 0.9", "momentum: 0.8")))
    where = [(1, "h1", 11, "a.prototxt"), (1, "h1", 12, "a.prototxt"),
             (2, "h2", 13, "b.prototxt")]
    message = consistency.mismatch_message(where, [a, a, b])
    assert ("rank 2 (host h2, pid 13, solver b.prototxt) differs from rank 0 (host h1, pid "
            "11, solver a.prototxt): solver field momentum is 0.8 on rank 2, 0.9 on rank 0; "
            "every rank must run") in message, message
    assert "rank 1 (" not in message


class _TwoRanks:
    """Rank 0 of two, for a communicator without MPI (pycaffe's caffe.NCCL): ``agree`` is the
    maximum with the other rank's value, whose digest is ``other``."""

    rank, size, on_device, name = 0, 2, False, "two"

    def __init__(self, other):
        self.other = other

    def agree(self, code):
        return max(code, self.other if code >= 0 else -self.other)

    def bcast(self, buf, root=0):
        pass


def test_without_mpi_the_digests_are_compared_through_agree(tmp_path, db):
    solver = _solver(tmp_path / "a", db)
    mine = consistency.digest(consistency.describe(solver))
    consistency.check_same_training(solver, _TwoRanks(mine))  # the same: no error
    for other in (mine + 1, mine - 1):
        with pytest.raises(CaffeError, match="the 2 ranks do not train the same model"):
            consistency.check_same_training(solver, _TwoRanks(other))
    # DataParallel checks before its first broadcast
    with pytest.raises(CaffeError, match="do not train the same model"):
        reducer.DataParallel(solver, _TwoRanks(mine + 1)).attach()
    reducer.DataParallel(solver, _TwoRanks(mine)).attach()
