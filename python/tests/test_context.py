"""devices(), contexts opened once and reused, progress reports, the GIL released during a run,
concurrent callers, and Ctrl-C (SIGINT from another thread) during a run."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import tilestream
from conftest import check, random


def test_devices_lists_dicts():
    devs = tilestream.devices()
    assert devs and all(isinstance(d, dict) for d in devs)
    cpu = [d for d in devs if d["kind"] == "cpu"]
    assert cpu and cpu[0]["id"] == "cpu:0" and cpu[0]["threads"] >= 1 and cpu[0]["memory_bytes"] > 0
    assert {"id", "kind", "name", "memory_bytes", "budget_bytes", "threads"} <= set(cpu[0])


def test_context_mirrors_its_spec():
    ctx = tilestream.Context(["cpu:2@1MiB"], cpu_threads=1)
    assert ctx.device_names == "cpu:0,cpu:1"
    assert [d["id"] for d in ctx.devices] == ["cpu:0", "cpu:1"]
    assert ctx.memory_budget <= 1 << 20
    assert "cpu:0,cpu:1" in repr(ctx)


def test_module_calls_reuse_one_context_per_setting(rng):
    a, b = random(rng, (20, 30)), random(rng, (30, 10))
    before = dict(tilestream._contexts)
    tilestream.matmul(a, b, devices="cpu", memory_budget="96KiB")
    ctx = tilestream._context("cpu", 96 * 1024, "vendor")  # the same key: int bytes or the string
    tilestream.matmul(a, b, devices="cpu", memory_budget=96 * 1024)
    tilestream.jacobi(10, 10, iters=2, devices="cpu", memory_budget="96KiB")
    assert len(tilestream._contexts) == len(before) + 1
    assert tilestream._context("cpu", "96KiB", "vendor") is ctx
    tilestream.matmul(a, b, devices="cpu", memory_budget="96KiB", kernel="tiled")
    assert len(tilestream._contexts) == len(before) + 2


def test_progress_callable_sees_every_unit(rng):
    ctx = tilestream.Context("cpu", memory_budget="64KiB", cpu_threads=1)
    a, b = random(rng, (300, 250)), random(rng, (250, 200))
    units = ctx.plan(a, b)["units"]
    assert units > 4
    calls = []
    check(ctx.matmul(a, b, progress=lambda done, total: calls.append((done, total))), a, b)
    assert calls[-1] == (units, units)
    assert all(t == units for _, t in calls) and all(x[0] <= y[0] for x, y in zip(calls, calls[1:]))


def test_progress_bar_on_stderr(rng, capsys):
    a, b = random(rng, (50, 40)), random(rng, (40, 30))
    check(tilestream.matmul(a, b, devices="cpu", memory_budget="64KiB", progress=True), a, b)
    err = capsys.readouterr().err
    assert "tilestream matmul: [" in err and "100%" in err and err.endswith("\n")


def test_the_gil_is_released_during_a_run(rng):
    """Another Python thread keeps running while matmul computes."""
    ctx = tilestream.Context("cpu", memory_budget="256KiB", cpu_threads=1)
    a, b = random(rng, (960, 960)), random(rng, (960, 960))  # about 0.1 s on one thread
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    result = ctx.matmul(a, b)
    t1 = time.perf_counter()
    stop.set()
    counter.join()
    during = [t for t in ticks if t0 < t < t1]
    # with the GIL held for the whole run, no tick would fall inside it (the counter sleeps 1 ms
    # between ticks; a loaded machine may delay it, so a few are enough)
    assert len(during) >= 3, (len(during), t1 - t0)
    check(result, a, b)


def test_concurrent_callers_share_a_context(rng):
    ctx = tilestream.Context("cpu:2", memory_budget="64KiB", cpu_threads=1)
    problems = [(random(rng, (70 + i, 50)), random(rng, (50, 40 + i))) for i in range(4)]
    results = [None] * len(problems)

    def work(i):
        results[i] = ctx.matmul(*problems[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(problems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (a, b), r in zip(problems, results):
        check(r, a, b)


def test_ctrl_c_during_a_run_raises_keyboard_interrupt_and_leaves_the_context_usable(rng):
    """SIGINT from another thread once the run is under way: KeyboardInterrupt, after the run
    stopped (cancel_supported) or finished, never with the run still writing."""
    ctx = tilestream.Context("cpu", memory_budget="64KiB", cpu_threads=1)
    a, b = random(rng, (512, 512)), random(rng, (512, 512))
    plan = ctx.plan(a, b, strategy="tiles-3d", tile=16)  # 1024 units, about 0.6 s on one core
    started = threading.Event()

    def interrupt():
        started.wait(10)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    sender.start()
    done = []
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        ctx.matmul(a, b, strategy="tiles-3d", tile=16,
                   progress=lambda d, t: (done.append(d), started.set()))
        time.sleep(1)  # the signal may land just after a run shorter than one wait: still raised here
    interrupted_after = time.perf_counter() - t0
    sender.join()
    assert done and done[0] < plan["units"]  # the signal came while units were left
    if tilestream.cancel_supported:
        t0 = time.perf_counter()
        ctx.matmul(a, b, strategy="tiles-3d", tile=16)
        assert interrupted_after < time.perf_counter() - t0  # stopped before finishing
    check(ctx.matmul(a, b), a, b)


def test_kept_arrays_are_not_copied_again(rng):
    """Context.keep: a second call reuses the kept arrays' tiles (the explain text says how many);
    after changed() the new values are read."""
    ctx = tilestream.Context("cpu", memory_budget="1MiB", cpu_threads=1)
    a, b = random(rng, (61, 53)), random(rng, (53, 47), order="F")
    with ctx.keep(a) as ka, ctx.keep(b):
        r1, text1 = ctx.matmul(a, b, strategy="in-core", explain=True)
        r2, text2 = ctx.matmul(a, b, strategy="in-core", explain=True)
        check(r1, a, b)
        check(r2, a, b)
        assert "kept:" not in text1
        assert f"kept: 2 tiles of kept operands reused from earlier calls ({a.nbytes + b.nbytes} bytes" in text2
        a[:] = random(rng, a.shape)
        ka.changed()
        r3, text3 = ctx.matmul(a, b, strategy="in-core", explain=True)
        check(r3, a, b)
        assert "kept: 1 tiles" in text3  # B's tile only
    assert not ka.active
    with pytest.raises(TypeError, match="float32, float64, complex64 or complex128"):
        ctx.keep(np.ones((3, 3), np.int32))
    unaligned = np.frombuffer(bytearray(8 * 9 + 1), np.float64, 9, offset=1).reshape(3, 3)
    with pytest.raises(ValueError, match="not aligned.*keep an aligned copy"):
        ctx.keep(unaligned)
