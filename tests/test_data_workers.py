"""ThreadMap, the dataset tools' threaded map: order, errors, closing, Ctrl-C in a real
process."""

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from pycaffe_lite.data.workers import ThreadMap
from helpers.process import as_at_a_terminal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_results_come_in_the_order_of_the_items_whatever_finishes_first():
    first_may_finish = threading.Event()

    def fn(k):
        if k == 0:
            first_may_finish.wait()  # item 0 ends only after item 5 has been computed
        if k == 5:
            first_may_finish.set()
        return k * k

    with ThreadMap(fn, 3) as workers:
        assert list(workers.map(range(10))) == [k * k for k in range(10)]
        assert list(workers.map([3, 1])) == [9, 1]  # the same threads, a second map


def test_an_error_reaches_the_caller_at_its_item():
    def fn(k):
        if k == 4:
            raise ValueError("item %d is bad" % k)
        return k

    got = []
    with ThreadMap(fn, 2) as workers:
        with pytest.raises(ValueError, match="item 4 is bad"):
            for value in workers.map(range(8)):
                got.append(value)
        assert list(workers.map([7])) == [7]  # an abandoned map does not leak into the next
    assert got == [0, 1, 2, 3]


def test_leaving_the_block_on_an_exception_joins_the_threads():
    started = threading.Event()
    with pytest.raises(KeyboardInterrupt):
        with ThreadMap(lambda k: started.set() or k, 2) as workers:
            threads = list(workers._threads)
            for _ in workers.map(range(1000)):
                raise KeyboardInterrupt  # as Ctrl-C in the consumer would
    assert started.is_set()
    # the map's own threads (a count of every thread would also see other tests' threads
    # ending meanwhile)
    assert len(threads) == 2 and not any(t.is_alive() for t in threads)
    assert not any(t in threading.enumerate() for t in threads)


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_during_a_map_ends_the_process_by_the_interrupt(tmp_path):
    script = tmp_path / "convert.py"
    script.write_text(textwrap.dedent("""
        import time
        from pycaffe_lite.data.workers import ThreadMap

        def load(k):
            time.sleep(0.002)
            return k

        with ThreadMap(load, 2) as workers:
            for i, k in enumerate(workers.map(range(10 ** 5))):
                if i == 10:
                    print("READY", flush=True)
    """))
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                preexec_fn=as_at_a_terminal)
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)  # a guard against a hang only
        assert proc.returncode == -signal.SIGINT, err
        assert "KeyboardInterrupt" in err and "Fatal Python error" not in err
