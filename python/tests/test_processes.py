"""The module in forked children and over many settings: a child made by os.fork() or
multiprocessing after the parent used tilestream computes (the library starts its CPU threads again
there) instead of hanging; a fork while another thread runs a call waits for it; the module-level
calls keep a bounded number of contexts (and so of threads) whatever the number of settings."""

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

import tilestream
from conftest import check, random

CHILD_SECONDS = 60  # a hung child fails the test after this


def threads_now():
    return len(os.listdir("/proc/self/task"))


def product_error(seed, devices="cpu:2", memory_budget="64KiB"):
    """Runs in a child: the largest error of tilestream.matmul against numpy (module-level call)."""
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, (97, 61)), rng.uniform(-1, 1, (61, 43))
    c = tilestream.matmul(a, b, devices=devices, memory_budget=memory_budget)
    return float(np.abs(c - a @ b).max())


def wait_child(pid):
    """The exit code of child `pid`; kills it (by its pid) and fails when it runs past the deadline."""
    deadline = time.monotonic() + CHILD_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child was still running after {CHILD_SECONDS} s (hung)")


@pytest.mark.parametrize("method", sorted({"fork", multiprocessing.get_start_method()}))
def test_multiprocessing_children_compute_after_the_parent_did(rng, method):
    # The parent uses both a module-level context and its own, so both were made before the fork.
    assert product_error(1) < 1e-12
    ctx = tilestream.Context("cpu:2", memory_budget="64KiB", cpu_threads=2)
    a, b = random(rng, (80, 70)), random(rng, (70, 50))
    check(ctx.matmul(a, b), a, b)
    with multiprocessing.get_context(method).Pool(2) as pool:
        errors = pool.map_async(product_error, range(4)).get(timeout=CHILD_SECONDS)
    assert max(errors) < 1e-12
    check(ctx.matmul(a, b), a, b)  # and the parent still computes


def test_os_fork_child_uses_the_parents_context(rng):
    ctx = tilestream.Context("cpu:2", memory_budget="64KiB", cpu_threads=2)
    a, b = random(rng, (90, 75)), random(rng, (75, 40))
    check(ctx.matmul(a, b), a, b)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only when both calls give the right product
        try:
            ok = all(np.allclose(ctx.matmul(a, b), a @ b, rtol=0, atol=1e-12) for _ in range(2))
            field = tilestream.jacobi(20, 16, iters=5, devices="cpu:2", memory_budget="64KiB")
            os._exit(0 if ok and np.isfinite(field).all() else 1)
        except BaseException:
            os._exit(2)
    assert wait_child(pid) == 0
    check(ctx.matmul(a, b), a, b)


def test_fork_while_another_thread_runs_a_call_waits_for_it(rng):
    ctx = tilestream.Context("cpu", memory_budget="64KiB", cpu_threads=1)
    a, b = random(rng, (1200, 1000)), random(rng, (1000, 800))  # about a second on one thread
    running, results = threading.Event(), []

    def worker():
        results.append(ctx.matmul(a, b, progress=lambda done, total: done and running.set()))

    t = threading.Thread(target=worker)
    t.start()
    assert running.wait(CHILD_SECONDS)  # units are done: the call holds the context now
    try:
        pid = os.fork()
    except BaseException:
        t.join()
        raise
    if pid == 0:
        try:
            small_a, small_b = a[:50, :40], b[:40, :30]
            os._exit(0 if np.allclose(ctx.matmul(small_a, small_b), small_a @ small_b, rtol=0, atol=1e-12) else 1)
        except BaseException:
            os._exit(2)
    assert wait_child(pid) == 0
    t.join()
    check(results[0], a, b)


def test_module_level_contexts_stay_bounded_over_300_settings(rng):
    a, b = random(rng, (12, 9)), random(rng, (9, 7))
    tilestream.matmul(a, b, devices="cpu", memory_budget=1 << 20)
    before = threads_now()
    for i in range(300):
        check(tilestream.matmul(a, b, devices="cpu", memory_budget=(1 << 20) + i), a, b)
    assert len(tilestream._contexts) <= tilestream.MAX_CONTEXTS
    # Each context holds a CPU device's workers (and its streams' threads once used).
    assert threads_now() <= before + 8 * tilestream.MAX_CONTEXTS, threads_now()
    # A context still in use by a caller stays valid after it leaves the cache.
    ctx = tilestream._context("cpu", 12345, "vendor")
    for i in range(2 * tilestream.MAX_CONTEXTS):
        tilestream._context("cpu", 20000 + i, "vendor")
    check(ctx.matmul(a, b), a, b)
    assert tilestream._context("cpu", 12345, "vendor") is not ctx  # evicted: a new one was opened
