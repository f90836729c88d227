"""The main-job demo: one int8 CONV2D on the NPU through libaccel, checked bit for bit.

Assembles a 1x16x16x8 -> 16-channel 3x3 convolution with per-channel
requantization (TFLite's int8 scheme), runs it on the chosen device (the
kernel device if one exists, else the in-process shim, saying so), and
compares the output with a reference convolution written here in plain numpy
(one matrix product per kernel tap, TFLite's per-channel requantization from
``uapi.fixed_point``): it shares no code with the device model's GEMM and
padding paths. Exit status 1 on mismatch.

    python -m libaccel.demos.demo [--device PATH|shim] [--seed N]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from libaccel import Device, Job, JobBo
from libaccel.discovery import DEVICE_HELP
from libaccel.errors import AccelError
from uapi import isa
from uapi.fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from vnpu_common.cli import ExitCode, OneLineArgumentParser, add_version, cli_main

INT8 = isa.SPEC.dtypes["INT8"].code
INT32 = isa.SPEC.dtypes["INT32"].code


def reference_conv2d(
    x: np.ndarray,  # [N,H,W,Cin] int8
    w: np.ndarray,  # [Cout,KH,KW,Cin] int8
    bias: np.ndarray,  # [Cout] int32
    in_zp: int,
    out_zp: int,
    mult: np.ndarray,
    shift: np.ndarray,
    stride: int,
    pad: int,
    out_hw: tuple[int, int],
    act: tuple[int, int] = (-128, 127),
) -> np.ndarray:
    """TFLite reference_integer_ops::ConvPerChannel (symmetric filter, zero-point-skipping padding)."""
    n = x.shape[0]
    cout, kh, kw, _ = w.shape
    oh, ow = out_hw
    # Positions outside the input are skipped, which in the zero-point-corrected
    # domain is the same as adding zeros: pad (x - in_zp) with zeros.
    xs = np.pad(x.astype(np.int64) - in_zp, ((0, 0), (pad, pad + stride), (pad, pad + stride), (0, 0)))
    acc = np.zeros((n, oh, ow, cout), dtype=np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xs[:, ky : ky + oh * stride : stride, kx : kx + ow * stride : stride, :]
            acc += patch @ w[:, ky, kx, :].astype(np.int64).T
    acc += bias.astype(np.int64)
    out = multiply_by_quantized_multiplier(acc, mult, shift) + out_zp
    return np.clip(out, *act).astype(np.int8)


# --- building and running the job ------------------------------------------------------
def tensor(slot: int, va: int, shape: tuple[int, int, int, int], dtype: int, zp: int = 0) -> isa.Instruction:
    """A dense NHWC tensor descriptor."""
    esize = 4 if dtype == INT32 else 1
    n, h, w, c = shape
    return isa.Instruction(
        "TENSOR",
        dict(slot=slot, dtype=dtype, va=va, n=n, h=h, w=w, c=c, stride_n=h * w * c * esize,
             stride_h=w * c * esize, stride_w=c * esize, stride_c=esize, zero_point=zp),
    )  # fmt: skip


@dataclass
class ConvProblem:
    x: np.ndarray
    w: np.ndarray
    bias: np.ndarray
    in_zp: int
    out_zp: int
    mult: np.ndarray
    shift: np.ndarray
    stride: int = 1
    pad: int = 1

    @property
    def out_hw(self) -> tuple[int, int]:
        _, h, w, _ = self.x.shape
        _, kh, kw, _ = self.w.shape
        return (h + 2 * self.pad - kh) // self.stride + 1, (w + 2 * self.pad - kw) // self.stride + 1

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.x.shape[0], *self.out_hw, self.w.shape[0])


def make_problem(
    seed: int = 0, shape: tuple[int, int, int, int] = (1, 16, 16, 8), cout: int = 16
) -> ConvProblem:
    """Random int8 data with realistic per-channel scales."""
    rng = np.random.default_rng(seed)
    cin = shape[3]
    x = rng.integers(-128, 128, size=shape, dtype=np.int8)
    w = rng.integers(-127, 128, size=(cout, 3, 3, cin), dtype=np.int8)
    bias = rng.integers(-2000, 2000, size=cout, dtype=np.int32)
    in_scale, out_scale = 0.02, 0.05
    w_scales = rng.uniform(0.002, 0.02, size=cout)
    qm = [quantize_multiplier(in_scale * s / out_scale) for s in w_scales]
    mult = np.array([m for m, _ in qm], dtype=np.int32)
    shift = np.array([s for _, s in qm], dtype=np.int32)
    return ConvProblem(x, w, bias, in_zp=int(rng.integers(-10, 10)), out_zp=int(rng.integers(-10, 10)),
                       mult=mult, shift=shift)  # fmt: skip


@dataclass
class ConvRun:
    output: np.ndarray
    latency_s: float


def run_conv(dev: Device, p: ConvProblem) -> ConvRun:
    """Upload, assemble, submit, wait; the output and the submit-to-done latency."""
    cout = p.w.shape[0]
    x_bo = dev.create_bo(p.x.nbytes)
    w_bo = dev.create_bo(p.w.nbytes, read_only=True)
    b_bo = dev.create_bo(p.bias.nbytes, read_only=True)
    q_bo = dev.create_bo(cout * 8, read_only=True)
    out_shape = p.out_shape
    o_bo = dev.create_bo(int(np.prod(out_shape)))
    x_bo.array(np.int8, p.x.shape)[:] = p.x
    w_bo.array(np.int8, p.w.shape)[:] = p.w
    b_bo.array(np.int32, cout)[:] = p.bias
    q_bo.array(np.int32, (cout, 2))[:] = np.stack([p.mult, p.shift], axis=1)
    flags = isa.SPEC.flags["HAS_BIAS"] | isa.SPEC.flags["PER_CHANNEL"]
    stream = isa.assemble(
        [
            tensor(0, x_bo.va, p.x.shape, INT8, p.in_zp),
            tensor(1, w_bo.va, p.w.shape, INT8, 0),
            tensor(2, b_bo.va, (1, 1, 1, cout), INT32),
            tensor(3, q_bo.va, (1, 1, cout, 2), INT32),
            tensor(4, o_bo.va, out_shape, INT8, p.out_zp),
            isa.Instruction(
                "CONV2D",
                dict(
                    flags=flags,
                    input=0,
                    filter=1,
                    bias=2,
                    quant=3,
                    output=4,
                    stride_h=p.stride,
                    stride_w=p.stride,
                    dilation_h=1,
                    dilation_w=1,
                    pad_top=p.pad,
                    pad_left=p.pad,
                    act_min=-128,
                    act_max=127,
                ),
            ),  # fmt: skip
            isa.Instruction("END", {}),
        ]
    )
    cmd = dev.create_bo_with(stream, read_only=True)
    bos = [JobBo(x_bo), JobBo(w_bo), JobBo(b_bo), JobBo(q_bo), JobBo(o_bo, read=False, write=True)]
    t0 = time.perf_counter()
    dev.submit(Job(cmd, len(stream), bos))
    o_bo.wait(timeout=30).raise_for_status()
    latency = time.perf_counter() - t0
    out = o_bo.array(np.int8, out_shape).copy()
    for bo in (x_bo, w_bo, b_bo, q_bo, o_bo, cmd):
        bo.close()
    return ConvRun(out, latency)


def _device_error(e: Exception) -> tuple[int, str] | None:
    return (ExitCode.DEVICE, str(e)) if isinstance(e, AccelError) else None


@cli_main("python -m libaccel.demos.demo", _device_error)
def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineArgumentParser(prog="python -m libaccel.demos.demo", description=__doc__.splitlines()[0])
    add_version(ap)
    ap.add_argument("--device", help=DEVICE_HELP)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    dev = Device.open(args.device)
    with dev:
        print(f"using the {dev.kind} device {dev.path}")
        info = dict(dev.params.describe())
        print(f"device: id {info['device_id']}, firmware {info['fw_version']}, ISA {info['isa_version']}")
        p = make_problem(args.seed)
        print(f"CONV2D int8: input {list(p.x.shape)} -> output {list(p.out_shape)}, 3x3, per-channel quant")
        run = run_conv(dev, p)
    ref = reference_conv2d(p.x, p.w, p.bias, p.in_zp, p.out_zp, p.mult, p.shift, p.stride, p.pad, p.out_hw)
    print(f"placement: NPU ({dev.kind} backend)")
    print(f"latency: {run.latency_s * 1e3:.2f} ms (submit to completion)")
    mismatches = int(np.count_nonzero(run.output != ref))
    if mismatches:
        print(f"output: MISMATCH in {mismatches} of {ref.size} values vs the TFLite-formula reference")
        return ExitCode.DIFFERENT
    print(f"output: bit-identical to the TFLite-formula reference ({ref.size} values)")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
