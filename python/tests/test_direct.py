"""matmul(a, b) with nothing else given goes straight to the library's direct path (the host's
kernel on the calling thread, no worker thread): numpy's results for matrices, vectors and views;
anything else (mixed dtypes, other arguments) takes the general path with the same answers; a long
call in place is cut into short steps, so Ctrl-C raises KeyboardInterrupt soon."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import tilestream
from conftest import check, random


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_shortcut_gives_numpys_results(rng, dtype):
    base = random(rng, (40, 50), dtype)
    cases = [
        (random(rng, (1, 1), dtype), random(rng, (1, 1), dtype)),
        (random(rng, (7, 5), dtype), random(rng, (5, 3), dtype)),
        (random(rng, (5,), dtype), random(rng, (5, 9), dtype)),        # vector @ matrix
        (random(rng, (9, 5), dtype), random(rng, (5,), dtype)),        # matrix @ vector
        (base.T[:13, :7], base[3:10, 2:19]),                           # transposed and sliced views
        (np.asfortranarray(random(rng, (33, 17), dtype)), random(rng, (17, 2), dtype)),
        (base[0, ::3], base[:17, :4]),                                 # a strided vector
        (random(rng, (3, 0), dtype), random(rng, (0, 4), dtype)),      # k = 0: zeros
    ]
    for a, b in cases:
        r = tilestream.matmul(a, b)
        want = np.matmul(a, b)
        assert r.shape == want.shape and r.dtype == want.dtype, (a.shape, b.shape)
        if r.size:
            if a.shape[-1] == 0:
                assert not r.any()
            else:
                check(r, a, b, dtype=dtype)


def test_small_calls_run_directly_and_explain_shows_the_crossover(rng):
    ctx = tilestream.Context("cpu")
    a, b = random(rng, (30, 20)), random(rng, (20, 10))
    r, text = ctx.matmul(a, b, explain=True)
    check(r, a, b)
    assert "strategy        direct" in text and "crossover" in text, text
    assert ctx.plan(a, b)["strategy"] == "direct"


def test_other_arguments_take_the_general_path_with_the_same_answer(rng):
    a, b = random(rng, (11, 6)), random(rng, (6, 5), np.float32)  # mixed dtypes: float64
    check(tilestream.matmul(a, b), a, b, dtype=np.float64)
    out = np.full((11, 5), np.nan)
    assert tilestream.matmul(a, b, out) is out
    check(out, a, b)
    check(tilestream.matmul(a, b.astype(np.float64), alpha=2.0), a, b, alpha=2.0)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        tilestream.matmul(random(rng, (3, 4)), random(rng, (5, 3)))


def test_ctrl_c_ends_a_long_in_place_call_soon(rng):
    """A product of seconds runs in steps of about 0.2 s: SIGINT during it raises KeyboardInterrupt
    within a step or two, and the context stays usable."""
    ctx = tilestream.Context("cpu")
    n = 2500
    a, b = random(rng, (n, n)), random(rng, (n, n))
    plan = ctx.plan(a, b)
    assert plan["strategy"] == "zero-copy" and plan["steps"] > 1, plan["text"]
    started = threading.Event()
    sent = []

    def interrupt():
        started.wait(30)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        ctx.matmul(a, b, progress=lambda d, t: started.set())
        time.sleep(5)  # the run ended before the signal: it still lands here (the test then fails below)
    raised = time.perf_counter()
    sender.join()
    # 0.5 s is the goal on a quiet machine; CI's loaded 2 cores stretch a 0.2 s step (one whole
    # product: 9 s at n = 2500 without steps).
    assert raised - sent[0] < 1.5, f"KeyboardInterrupt {raised - sent[0]:.2f} s after SIGINT"
    small = random(rng, (20, 20))
    check(ctx.matmul(small, small), small, small)
