"""Signals during delegated invokes: a handler runs in the caller's frame once ``invoke()`` has
returned, as it does without the delegate, so Ctrl-C is a ``KeyboardInterrupt`` from ``invoke()``
(not tracebacks and ``RuntimeError: Node number N (vnpu) failed to invoke.``), the job is not
broken off midway, and the device serves the next invoke exactly.

Each case is a subprocess running a delegated loop on the shim (a fresh process, so its signal
handlers and its main thread are its own).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The child: an ADD on the NPU and the same model on TFLite's reference kernels.
PRELUDE = """
import sys
import numpy as np
import delegate_teflon
import modelgen as gen
from {runtime}.interpreter import Interpreter, OpResolverType, load_delegate

MODEL = gen.elementwise_model("ADD", (1, 32, 32, 16), None, "RELU", 21)
ref = OpResolverType.BUILTIN_REF
delegate = load_delegate(delegate_teflon.library_path(), {{"device": "shim"}})
npu = Interpreter(model_content=MODEL, experimental_op_resolver_type=ref, experimental_delegates=[delegate])
cpu = Interpreter(model_content=MODEL, experimental_op_resolver_type=ref)
rng = np.random.default_rng(5)
for interp in (npu, cpu):
    interp.allocate_tensors()


def feed():
    for d in npu.get_input_details():
        x = rng.integers(-128, 128, d["shape"], dtype=np.int8)
        npu.set_tensor(d["index"], x)
        cpu.set_tensor(d["index"], x)


def check():
    feed()
    npu.invoke()
    cpu.invoke()
    out = npu.get_output_details()[0]["index"]
    assert np.array_equal(npu.get_tensor(out), cpu.get_tensor(out)), "outputs differ after the signal"
"""

# Ctrl-C during the loop: the KeyboardInterrupt comes out of invoke(), the next invoke is exact,
# then the interrupt goes on to end the process as Python's does.
CTRL_C = """
feed()
print("started", flush=True)
invokes = 0
try:
    while True:
        npu.invoke()
        invokes += 1
except KeyboardInterrupt as e:
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    where = "invoke" if "invoke" in frames else "the loop"
    print("KeyboardInterrupt from", where, "after", invokes, "invokes", flush=True)
    check()
    print("exact after the interrupt", flush=True)
    raise
"""

# A handler of the program's own (SIGALRM every millisecond) raising its own exception while the
# program is in invoke(): it lands at every point of an invoke in turn, and each time comes out of
# invoke() as itself. (Armed only around the call: the loop's own lines are not what is tested.)
ALARMS = """
import signal

class Tick(Exception):
    pass

ticks = 0
armed = False

def on_alarm(signum, frame):
    global ticks
    ticks += 1
    if armed and ticks % 7 == 0:
        raise Tick(ticks)

signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
raised = 0
feed()
while raised < 40:
    try:
        armed = True
        npu.invoke()
        armed = False
    except Tick:
        armed = False
        raised += 1
signal.setitimer(signal.ITIMER_REAL, 0, 0)
check()
print("raised", raised, "times, exact after", flush=True)
"""


def _child(runtime: str, body: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE.format(runtime=runtime) + body],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        # A child of a shell without job control would inherit SIGINT ignored: Python then keeps it so.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("runtime", ["tflite_runtime", "ai_edge_litert"])
def test_ctrl_c_is_a_keyboard_interrupt_from_invoke(runtime: str, lib_path: str) -> None:
    child = _child(runtime, CTRL_C)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "started", child.communicate()[1]
    time.sleep(1.0)  # well into the loop
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"the child did not end within 20 s of SIGINT: {child.communicate()}")
    took = time.monotonic() - sent
    assert child.returncode == -signal.SIGINT, (child.returncode, out, err)
    # From invoke() (the loop is almost all invoke), or, when the signal came between two
    # invokes, from the loop's line, as without the delegate.
    assert re.search(r"KeyboardInterrupt from (invoke|the loop) after \d+ invokes", out), (out, err)
    assert "exact after the interrupt" in out, (out, err)
    assert "RuntimeError" not in err and "cffi callback" not in err, err
    assert err.count("Traceback (most recent call last)") == 1, err
    assert err.rstrip().endswith("KeyboardInterrupt"), err
    assert took < 5, f"{took:.1f} s from SIGINT to exit"


def test_a_handlers_exception_comes_out_of_invoke_as_itself(lib_path: str) -> None:
    child = _child("ai_edge_litert", ALARMS)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, (out, err)
    assert "raised 40 times, exact after" in out, (out, err)
    assert "Traceback" not in err and "RuntimeError" not in err, err
