"""engine/backends/llama/chunks.py: the prompt chunk a step may carry beside generating rows,
from the step times it was told (bench/fairness.py measures the result on the real model).

The steps here are simulated: a machine whose step of n tokens takes a + b·n seconds (a CPU:
dear tokens; a GPU: nearly free ones), or one where any step of more than one token takes far
longer (a loaded CPU, where llama.cpp's batch threads wait on each other). The sizer is driven
as `Batcher.step()` drives it, and what is checked is what it is for: the generating row's
pace beside a prefill, against its pace alone, and that the prefill still progresses.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.backends.llama.chunks import FAIR_STEP, MIN_CHUNK, ChunkSizer


def linear(a: float, b: float) -> Callable[[int], float]:
    return lambda n: a + b * n


def run(sizer: ChunkSizer, step_s: Callable[[int], float], prompt: int,
        generating: int = 1, warm: int = 3) -> tuple[float, int, list[int]]:
    """`warm` steps of the generating rows alone, then a prefill of `prompt` tokens beside
    them, step by step as Batcher.step() does. Returns (the rows' time per step beside the
    prefill / alone, steps the prefill took, the chunks)."""
    for _ in range(warm):
        sizer.observe(generating, 0, step_s(generating))
    left, total, steps, chunks = prompt, 0.0, 0, []
    while left > 0:
        k = min(sizer.cap(), left)
        seconds = step_s(generating + k)
        sizer.observe(generating, k, seconds)
        left -= k
        total += seconds
        steps += 1
        chunks.append(k)
    return total / steps / step_s(generating), steps, chunks


@pytest.mark.parametrize("generating", [1, 3])
def test_on_a_cpu_the_rows_keep_their_pace_and_the_chunk_is_small(generating):
    # The default model on 2 cores, roughly: a step 20 ms, a token 1.5 ms.
    slower, steps, chunks = run(ChunkSizer(256), linear(0.020, 0.0015), 4000, generating)
    assert slower <= FAIR_STEP * 1.02
    assert MIN_CHUNK <= max(chunks[3:]) < 64  # the old 256 would make a step 20x slower
    assert steps < 4000 / MIN_CHUNK


def test_on_a_gpu_the_whole_chunk_fits():
    # A step of 256 tokens costs little more than a step of one.
    slower, steps, chunks = run(ChunkSizer(256), linear(0.008, 0.00001), 4096)
    assert max(chunks) == 256 and slower <= FAIR_STEP
    assert steps <= 4096 // 256 + 2  # the probe step, and the first one


def test_on_a_loaded_cpu_chunk_steps_are_paid_back_by_steps_without_one():
    # Any batch of several tokens takes 40 times a lone step: even MIN_CHUNK tokens are dear,
    # so most steps carry none and the row keeps its pace on average.
    def loaded(n: int) -> float:
        return 0.025 if n == 1 else 1.0 + 0.001 * n

    slower, _steps, chunks = run(ChunkSizer(256), loaded, 400)
    assert slower <= FAIR_STEP * 1.05
    assert sum(k == 0 for k in chunks) > 10 * sum(k > 0 for k in chunks)
    assert sum(chunks) == 400  # it progresses still


def test_the_first_step_beside_the_rows_times_them_alone():
    sizer = ChunkSizer(256)
    assert sizer.cap() == 0  # nothing timed yet
    sizer.observe(1, 0, 0.020)
    assert sizer.t_gen == 0.020 and sizer.cap() == MIN_CHUNK  # one size timed: no line yet
    sizer.observe(1, 256, 0.020 + 256 * 0.0015)  # far over: paid back first
    assert sizer.cap() == 0
    for _ in range(40):
        sizer.observe(1, 0, 0.020)
    assert 0 < sizer.cap() < 256


def test_fair_none_is_the_fixed_chunk():
    sizer = ChunkSizer(256, fair=None)
    assert sizer.cap() == 256
    slower, _, chunks = run(sizer, linear(0.020, 0.0015), 1024)
    assert set(chunks) == {256} and slower > 10  # what issue 24 measured


def test_the_line_follows_the_machine_when_it_changes():
    # Load comes: every step takes three times as long. The recent steps weigh most.
    sizer = ChunkSizer(256)
    for n in [1, 257] * 20:
        sizer.observe(1, n - 1, 0.020 + 0.0015 * n)
    assert sizer.line() == pytest.approx((0.020, 0.0015))
    for n in [1, 30, 512] * 100:
        sizer.observe(1, n - 1, 0.060 + 0.0045 * n)
    a, b = sizer.line()
    assert a == pytest.approx(0.060, rel=0.05) and b == pytest.approx(0.0045, rel=0.05)
