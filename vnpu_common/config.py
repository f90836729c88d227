"""Every ``VNPU_*`` environment variable of the project: one table, and the accessors that parse it.

Each :class:`Variable` says what its value means, what it accepts, its default and which doc explains
the feature it sets. ``VARIABLE.get()`` reads and parses the variable from the environment (or a
mapping given), so a bad value is one :class:`ConfigError` naming the variable and what it accepts
(``VNPU_SHIM_CORES='two': expected a positive integer``). An empty value is the same as an unset one.

Variables read in C (``getenv`` in a ``.c`` file) are in the table too, marked with their reader, so
the table is the one list: tests/tools/test_config.py checks that every ``VNPU_*`` variable the tree
reads or sets is here and that every entry is read somewhere, and that docs/configuration.md shows
:func:`markdown_table` (``python -m vnpu_common.config`` prints it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A ``VNPU_*`` variable holds a value it does not accept."""


class Audience(Enum):
    """Who sets a variable: its users, or the test harness and the suites."""

    USER = "user"
    TESTS = "tests"  # the suites and the QEMU harness (which sets some of them in the guest)


# --- parsers: each raises ValueError for a value it does not accept ----------------------------

_FLAGS = {"1": True, "true": True, "0": False, "false": False}
FLAG_ACCEPTS = "1, true, 0 or false"


def parse_flag(raw: str) -> bool:
    """A switch: ``1``/``true`` or ``0``/``false`` (any case)."""
    try:
        return _FLAGS[raw.strip().lower()]
    except KeyError:
        raise ValueError(raw) from None


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


def _natural(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(raw)
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError(raw)
    return value


def _text(raw: str) -> str:
    return raw


def _path(raw: str) -> Path:
    return Path(raw)


def _words(raw: str) -> list[str]:
    return raw.split()


def _choice(*names: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in names:
            raise ValueError(raw)
        return value

    return parse


def _choices(*names: str) -> Callable[[str], list[str]]:
    """A comma list of ``names`` (at least one)."""

    def parse(raw: str) -> list[str]:
        values = [v.strip().lower() for v in raw.split(",") if v.strip()]
        if not values or any(v not in names for v in values):
            raise ValueError(raw)
        return values

    return parse


@dataclass(frozen=True)
class Variable(Generic[T]):
    """One environment variable: its name, how its value is parsed, its default and meaning."""

    name: str
    parse: Callable[[str], T]
    accepts: str  # what ConfigError says the variable accepts
    default: T | None  # what get() gives when it is unset; None: the reader decides (see default_doc)
    default_doc: str  # the default as docs/configuration.md says it
    meaning: str  # one line
    doc: str  # the doc that explains the feature, relative to docs/
    reader: str  # the module that reads it; "C: path" for a variable read by getenv in C
    audience: Audience = Audience.USER

    def get(self, environ: Mapping[str, str] | None = None) -> T | None:
        """The variable's parsed value in ``environ`` (default: the process's), else its default."""
        raw = self.raw(environ)
        if raw == "":
            return self.default
        return self.parse_value(raw)

    def raw(self, environ: Mapping[str, str] | None = None) -> str:
        """The variable's value as set, unparsed ("" when unset): a cache key for a reader that parses
        it once per value."""
        return (os.environ if environ is None else environ).get(self.name, "")

    def parse_value(self, raw: str) -> T:
        """``raw`` parsed as this variable's value; :class:`ConfigError` if it does not accept it."""
        try:
            return self.parse(raw)
        except ValueError:
            raise ConfigError(f"{self.name}={raw!r}: expected {self.accepts}") from None

    @property
    def read_in_c(self) -> bool:
        return self.reader.startswith("C: ")


_FLAG_KW = {"parse": parse_flag, "accepts": FLAG_ACCEPTS}
_NODE = "'shim', 'kernel' or a device node path (/dev/accel/accelN)"
LOG_LEVELS = ("quiet", "info", "verbose")
MAC_ARRAY_MODES = ("auto", "numpy", "c", "generic", "avx2", "avx512vnni")
_BACKENDS = ("shim", "kernel")

# --- what users set -------------------------------------------------------------------------------

DEVICE: Variable[str] = Variable(
    "VNPU_DEVICE", _text, _NODE, None,
    "the first vnpu kernel device, else the shim",
    "the device every tool, the delegate and the LiteRT/ONNX integrations open when they are not "
    "given one",
    "tools.md", "libaccel.discovery",
)  # fmt: skip
CACHE_DIR: Variable[Path] = Variable(
    "VNPU_CACHE_DIR", _path, "a directory", None,
    "`$XDG_CACHE_HOME/vnpu`, else `~/.cache/vnpu`",
    "the cache root: libteflon.so, the MAC array, the compile cache, the harness's downloads",
    "install.md", "vnpu_common.cache",
)  # fmt: skip
COMPILE_CACHE: Variable[Path] = Variable(
    "VNPU_COMPILE_CACHE", _path, "a directory", None,
    "`compile/` in the cache root",
    "where compiled partitions are kept",
    "compiler.md", "libaccel.compiler.cache",
)  # fmt: skip
STRICT_PLACEMENT: Variable[bool] = Variable(
    "VNPU_STRICT_PLACEMENT", **_FLAG_KW, default=False, default_doc="0",
    meaning="a planner error fails the model instead of leaving the node on the CPU (the delegate's "
    "`strict` option, the ONNX runner, the LiteRT plugin)",
    doc="delegate.md", reader="libaccel.compiler.partition",
)  # fmt: skip
DELEGATE_LOG_LEVEL: Variable[str] = Variable(
    "VNPU_DELEGATE_LOG_LEVEL", _choice(*LOG_LEVELS), ", ".join(LOG_LEVELS), None,
    "`verbose` if `$TEFLON_DEBUG` has `verbose`, else `info`",
    "the delegate's log level where its `log_level` option is not given",
    "delegate.md", "delegate_teflon.options",
)  # fmt: skip
MAC_ARRAY: Variable[str] = Variable(
    "VNPU_MAC_ARRAY", _choice(*MAC_ARRAY_MODES), ", ".join(MAC_ARRAY_MODES), "auto",
    "auto",
    "the device model's MAC array: the best C variant the CPU runs, numpy, or at most a named C "
    "variant (read at each job: in a process no CLI started, a bad value is warned about once and "
    "`auto` used)",
    "device_model.md", "device_model.mac_array",
)  # fmt: skip
SHIM_FIRMWARE: Variable[Path] = Variable(
    "VNPU_SHIM_FIRMWARE", _path, "a firmware image file", None,
    "`firmware/vnpu/vnpu_fw.bin`",
    "the firmware image the shim's device boots",
    "uapi.md", "libaccel.backends.shim.device",
)  # fmt: skip
SHIM_JOB_TIMEOUT_MS: Variable[int] = Variable(
    "VNPU_SHIM_JOB_TIMEOUT_MS", _positive_int, "a positive integer", None,
    "vnpu.ko's (`uapi/driver_limits.py` `JOB_TIMEOUT_MS`)",
    "the shim's job timeout in ms (vnpu.ko's `job_timeout_ms` module parameter)",
    "uapi.md", "libaccel.backends.shim.device",
)  # fmt: skip
SHIM_CORES: Variable[int] = Variable(
    "VNPU_SHIM_CORES", _positive_int, "a positive integer", None,
    "the device model's (`device_model/npu.py` `DEFAULT_CORES`)",
    "NPU cores of the shim's device (at most `MAX_CORES`)",
    "uapi.md", "libaccel.backends.shim.device",
)  # fmt: skip
SHIM_AUTOSUSPEND_MS: Variable[int] = Variable(
    "VNPU_SHIM_AUTOSUSPEND_MS", _natural, "a non-negative integer", None,
    "vnpu.ko's (`uapi/hw_layout.py` `AUTOSUSPEND_DELAY_MS`)",
    "how long the shim's idle device stays powered, in ms (vnpu.ko's "
    "`power/autosuspend_delay_ms`)",
    "kernel.md", "libaccel.backends.shim.device",
)  # fmt: skip
SHIM_CORE_PROCESSES: Variable[bool] = Variable(
    "VNPU_SHIM_CORE_PROCESSES", **_FLAG_KW, default=False, default_doc="0",
    meaning="each of the shim's NPU cores runs its jobs in a worker process, so that several files' "
    "model jobs use several host CPUs (a hand-off per job: for model-heavy work with CPUs to spare)",
    doc="device_model.md", reader="libaccel.backends.shim.device",
)  # fmt: skip
DEBUGFS: Variable[Path] = Variable(
    "VNPU_DEBUGFS", _path, "a directory", Path("/sys/kernel/debug"),
    "`/sys/kernel/debug`",
    "where debugfs is mounted, for `accel state`, `accel top` and `accel coredump`",
    "tools.md", "libaccel.tools.debugfs",
)  # fmt: skip
LITERT_REPORT: Variable[bool] = Variable(
    "VNPU_LITERT_REPORT", **_FLAG_KW, default=False, default_doc="0",
    meaning="the LiteRT compiler plugin prints its placement report on stderr",
    doc="litert.md", reader="litert_vendor.compiler_plugin",
)  # fmt: skip
TRACE_SOCKET: Variable[str] = Variable(
    "VNPU_TRACE_SOCKET", _text, "a Unix socket path", None,
    "unset: the preload library traces nothing",
    "where `accel trace`'s preload library sends the ioctls it sees (`accel trace` sets it)",
    "tools.md", "C: libaccel/tools/trace_preload.c",
)  # fmt: skip
KERNEL: Variable[str] = Variable(
    "VNPU_KERNEL", _text, "a kernel spec (a release, `debug`, `sid`, or a path)", None,
    "the newest installed generic 6.12 kernel",
    "the kernel `python -m qemu_tests` boots where `--kernel` is not given",
    "qemu_tests.md", "qemu_tests.preflight",
)  # fmt: skip

# --- what the suites and the harness set ------------------------------------------------------------

_T = Audience.TESTS
TEST_DEVICE: Variable[str] = Variable(
    "VNPU_TEST_DEVICE", _text, _NODE, "shim", "shim (`kernel` in the QEMU guest)",
    "the device of the device-agnostic suites (the compiler's op grid, networks, the delegate's)",
    "qemu_tests.md", "tests", _T,
)  # fmt: skip
CONFORMANCE_BACKENDS: Variable[list[str]] = Variable(
    "VNPU_CONFORMANCE_BACKENDS", _choices(*_BACKENDS), "a comma list of shim, kernel", ["shim"],
    "shim", "the backends tests/conformance runs on (`--backend` wins)",
    "qemu_tests.md", "tests", _T,
)  # fmt: skip
GUEST: Variable[bool] = Variable(
    "VNPU_GUEST", **_FLAG_KW, default=False, default_doc="0 (the harness sets 1 in the guest)",
    meaning="the process runs in the QEMU guest the harness booted",
    doc="qemu_tests.md", reader="tests, bench.jobs", audience=_T,
)  # fmt: skip
MODULE: Variable[Path] = Variable(
    "VNPU_MODULE", _path, "a vnpu.ko file", Path("kernel/drivers_accel_stub/vnpu.ko"),
    "`kernel/drivers_accel_stub/vnpu.ko` (the harness sets the one it loaded)",
    "the vnpu.ko the guest's tests reload",
    "qemu_tests.md", "tests, qemu_tests.fault_inject", _T,
)  # fmt: skip
MODULE_PARAMS: Variable[list[str]] = Variable(
    "VNPU_MODULE_PARAMS", _words, "module parameters separated by spaces", [],
    "none (the harness sets the ones it loaded vnpu.ko with)",
    "the parameters the guest's tests reload vnpu.ko with",
    "qemu_tests.md", "tests", _T,
)  # fmt: skip
TIMEOUT_SCALE: Variable[float] = Variable(
    "VNPU_TIMEOUT_SCALE", _positive_float, "a positive number", 1.0,
    "1 (the harness sets more on a debug kernel)",
    "what the guest's tests multiply their subprocess time limits by",
    "qemu_tests.md", "tests", _T,
)  # fmt: skip
FUZZ_SCALE: Variable[int] = Variable(
    "VNPU_FUZZ_SCALE", _positive_int, "a positive integer", 1, "1",
    "what the fuzz suites multiply their example counts by",
    "reliability.md", "tests", _T,
)  # fmt: skip
FUZZ_SECONDS: Variable[int] = Variable(
    "VNPU_FUZZ_SECONDS", _positive_int, "a positive integer", 30, "30",
    "how long the in-guest ioctl fuzzer runs",
    "reliability.md", "tests", _T,
)  # fmt: skip
STRESS_SECONDS: Variable[int] = Variable(
    "VNPU_STRESS_SECONDS", _positive_int, "a positive integer", 20, "20",
    "how long the in-guest stress test runs",
    "reliability.md", "tests", _T,
)  # fmt: skip

VARIABLES: tuple[Variable, ...] = tuple(v for v in globals().values() if isinstance(v, Variable))
BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Parse every variable set in ``environ`` (default: the process's): :class:`ConfigError` for the
    first bad one. A CLI calls it at start-up (:func:`vnpu_common.cli.cli_main`), so a bad value is
    one line before any work, whichever part of the stack would read it later."""
    for v in VARIABLES:
        v.get(environ)


def markdown_table() -> str:
    """The table docs/configuration.md shows: one row per variable, users' first."""
    rows = [
        "| variable | accepts | default | meaning | read by | see |",
        "|---|---|---|---|---|---|",
    ]
    for audience in Audience:
        for v in VARIABLES:
            if v.audience is audience:
                reader = f"`{v.reader.removeprefix('C: ')}` (C)" if v.read_in_c else f"`{v.reader}`"
                cells = (f"`{v.name}`", v.accepts, v.default_doc, v.meaning, reader, f"[{v.doc}]({v.doc})")
                rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    # The CLI conventions import this module: their import stays out of the module's own.
    from vnpu_common.cli import OneLineArgumentParser, cli_main

    @cli_main("python -m vnpu_common.config")
    def main(argv: Sequence[str] | None = None) -> int:
        """``python -m vnpu_common.config``: print :func:`markdown_table`."""
        parser = OneLineArgumentParser(
            prog="python -m vnpu_common.config", description=__doc__.splitlines()[0]
        )
        parser.parse_args(argv)
        sys.stdout.write(markdown_table())
        return 0

    sys.exit(main())
