"""Camera to NPU with no copy: V4L2 frames imported as dma-bufs, read in place by an NPU job, checked.

Each captured RGB24 frame's buffer is exported by the V4L2 driver (``VIDIOC_EXPBUF``) and imported
into vnpu (``Device.import_dmabuf``): the job's input tensor is the frame itself, at its device VA,
with the driver's line stride. One job per frame downscales it by 4 (AVGPOOL 4x4, stride 4) and
classifies each downscaled pixel by its dominant colour channel (ARG_MAX over R, G, B). The outputs
are compared with the same computation in numpy on the CPU's view of the frame (TFLite's reference
rounding: the window's sum plus half its size, divided by its size; the first maximum wins a tie).

In the QEMU guest, with Linux's virtual camera ``vivid``::

    python -m qemu_tests --exec \
        'modprobe vivid node_types=0x1 && python -m libaccel.demos.camera_demo --frames 5'

Exit status 0 when every frame's outputs match, 1 otherwise, 2 when there is no camera or NPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

import numpy as np

from libaccel import BufferObject, Device, Job, JobBo
from libaccel.demos.v4l2 import Capture, Frame, PixFormat, V4l2Error, capture_nodes
from libaccel.errors import AccelError
from uapi import isa
from vnpu_common.cli import (
    CliError,
    CommandLineError,
    ExitCode,
    OneLineArgumentParser,
    add_version,
    cli_main,
    non_negative_int,
)

UINT8 = isa.SPEC.dtypes["UINT8"].code
INT32 = isa.SPEC.dtypes["INT32"].code
SCALE = 4  # the downscale factor: AVGPOOL's window and stride


def reference(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline on the CPU: ([h, w, 3] uint8 downscaled, [h, w] int32 dominant channel)."""
    h, w = frame.shape[0] // SCALE, frame.shape[1] // SCALE
    windows = frame[: h * SCALE, : w * SCALE].astype(np.int64).reshape(h, SCALE, w, SCALE, 3)
    count = SCALE * SCALE
    small = ((windows.sum(axis=(1, 3)) + count // 2) // count).astype(np.uint8)
    return small, np.argmax(small, axis=2).astype(np.int32)


def frame_pixels(frame: Frame, fmt: PixFormat) -> np.ndarray:
    """The CPU's view of a captured RGB24 frame as [height, width, 3], line padding dropped."""
    lines = np.frombuffer(frame.view, np.uint8, fmt.bytesperline * fmt.height).reshape(fmt.height, -1)
    return lines[:, : fmt.width * 3].reshape(fmt.height, fmt.width, 3)


def pipeline_stream(frame_va: int, fmt: PixFormat, small_va: int, classes_va: int) -> bytes:
    """TENSOR the frame in place (its line stride), AVGPOOL into ``small``, ARG_MAX into ``classes``."""
    h, w = fmt.height // SCALE, fmt.width // SCALE
    enc = isa.encode
    return b"".join(
        [
            enc("TENSOR", slot=0, dtype=UINT8, va=frame_va, n=1, h=h * SCALE, w=w * SCALE, c=3,
                stride_n=fmt.sizeimage, stride_h=fmt.bytesperline, stride_w=3, stride_c=1),
            enc("TENSOR", slot=1, dtype=UINT8, va=small_va, n=1, h=h, w=w, c=3,
                stride_n=h * w * 3, stride_h=w * 3, stride_w=3, stride_c=1),
            enc("TENSOR", slot=2, dtype=INT32, va=classes_va, n=1, h=h, w=w, c=1,
                stride_n=h * w * 4, stride_h=w * 4, stride_w=4, stride_c=4),
            enc("AVGPOOL", input=0, output=1, filter_h=SCALE, filter_w=SCALE, stride_h=SCALE,
                stride_w=SCALE, act_min=0, act_max=255),
            enc("ARG_MAX", input=1, output=2),
            enc("END"),
        ]
    )  # fmt: skip


def run(dev: Device, cap: Capture, frames: int) -> int:
    fmt = cap.format
    h, w = fmt.height // SCALE, fmt.width // SCALE
    small, classes = dev.create_bo(h * w * 3), dev.create_bo(h * w * 4)
    imported: dict[int, BufferObject] = {}  # one import per V4L2 buffer: the driver reuses them
    bad = 0
    for _ in range(frames):
        frame = cap.next_frame()
        src = imported.get(frame.index)
        if src is None:
            src = imported[frame.index] = dev.import_dmabuf(frame.dmabuf_fd)
        stream = pipeline_stream(src.va, fmt, small.va, classes.va)
        t0 = time.perf_counter()
        dev.submit(
            Job(dev.create_bo_with(stream, read_only=True), len(stream),
                [JobBo(src), JobBo(small, write=True), JobBo(classes, write=True)])
        )  # fmt: skip
        status = classes.wait(timeout=30)
        ms = (time.perf_counter() - t0) * 1e3
        want_small, want_classes = reference(frame_pixels(frame, fmt))
        got_small = small.array(np.uint8, (h, w, 3))
        got_classes = classes.array(np.int32, (h, w))
        wrong = int((got_small != want_small).sum() + (got_classes != want_classes).sum())
        counts = np.bincount(got_classes.ravel(), minlength=3)
        print(
            f"frame {frame.sequence}: {fmt.width}x{fmt.height} RGB24 read in place at VA {src.va:#x} "
            f"(dma-buf of buffer {frame.index}); job status {status.status}, {ms:.1f} ms; "
            f"dominant R/G/B {counts[0]}/{counts[1]}/{counts[2]}; {wrong} values differ from the CPU"
        )
        bad += wrong != 0 or status.status != 0
        cap.requeue(frame)
    return bad


def _device_error(e: Exception) -> tuple[int, str] | None:
    return (ExitCode.DEVICE, str(e)) if isinstance(e, (AccelError, V4l2Error)) else None


@cli_main("python -m libaccel.demos.camera_demo", _device_error)
def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineArgumentParser(
        prog="python -m libaccel.demos.camera_demo", description=__doc__.split("\n\n")[0]
    )
    add_version(p)
    p.add_argument("--video", help="the V4L2 capture node (default: the first vivid one, else the first)")
    p.add_argument("--frames", type=non_negative_int, default=5)
    p.add_argument("--size", default="320x240", help="WIDTHxHEIGHT, multiples of 4")
    args = p.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.split("x"))
    except ValueError:
        raise CommandLineError(f"--size {args.size!r} is not WIDTHxHEIGHT") from None
    nodes = [args.video] if args.video else (capture_nodes("vivid") or capture_nodes())
    if not nodes:
        raise CliError(
            "no V4L2 capture node; load a camera driver (modprobe vivid node_types=0x1)", ExitCode.DEVICE
        )
    with Device.open("kernel") as dev, Capture(nodes[0], width, height) as cap:
        bad = run(dev, cap, args.frames)
    print(f"camera_demo: {args.frames - bad} of {args.frames} frames exact")
    return ExitCode.DIFFERENT if bad else ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
