"""The kernel matrix: one harness run per kernel, summed up as one table and a JSON summary.

    python -m qemu_tests --matrix 6.12.107+deb12-amd64,6.12.117+deb12-rt-amd64,/src/linux
    python -m qemu_tests --matrix 6.12.117+deb12-amd64,7.2     # bookworm's 6.12 and sid's 7.2
    python -m qemu_tests --matrix '6.12.117+deb12-amd64,6.12.117+deb12-amd64[swiotlb=65536,force]'

An entry is a kernel spec, optionally followed by extra kernel command-line
arguments in brackets (``parse_entries``). The harness (harness.run_matrix)
runs each entry into its own results subdirectory; this module turns those
directories into ``KernelResult`` rows (JUnit counts, splats in the guest's
dmesg), the table and the summary. docs/qemu_tests.md shows a run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from qemu_tests import kernel_args, ktap, preflight

# What a kernel run's build column says; only "ok" reached the boot.
BUILD_OK = "ok"
BUILD_FAILED = "FAILED"  # make failed
BUILD_MISSING = "missing"  # a host requirement (the kernel's image or headers, ...) is missing
BUILD_SKIPPED = "skipped"  # --no-build or --no-module
# The exit code of a run whose guest was killed at --timeout (timeout(1)'s).
EXIT_TIMEOUT = 124

# Kernel splats in dmesg, one per report: a report's first line names it, so each
# pattern matches that line only (not "Call Trace:", which every report has).
# The first matching kind wins: lockdep and KASAN reports start with WARNING: or BUG:.
SPLATS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "lockdep",
        re.compile(
            r"WARNING: (possible (circular|recursive) locking|inconsistent lock state|suspicious RCU usage)"
            r"|INFO: possible irq lock inversion|DEBUG_LOCKS_WARN_ON"
        ),
    ),
    ("KASAN", re.compile(r"BUG: KASAN:")),
    ("UBSAN", re.compile(r"UBSAN: ")),
    ("refcount", re.compile(r"refcount_t: ")),
    ("debugobjects", re.compile(r"ODEBUG: ")),
    ("list", re.compile(r"list_(add|del) corruption")),
    # kmemleak's own line after a scan (guest_run scans at the end); the objects are in kmemleak.txt
    ("kmemleak", re.compile(r"kmemleak: \d+ new suspected memory leaks")),
    ("Oops", re.compile(r"Oops: |general protection fault")),
    ("BUG", re.compile(r"\bBUG: |kernel BUG at ")),
    ("WARN", re.compile(r"\bWARNING: ")),
)
# WARN(1, "ODEBUG: ...") and friends print their message, then "WARNING: CPU: ..." on the next line:
# a WARNING line this close after another kind's first line belongs to that report.
_WARN_FOLLOWS = 2
# A quoted report ends at the kernel's end marker, or after this many lines.
QUOTE_LINES = 40
_CUT_HERE = "------------[ cut here ]------------"
_REPORT_END = re.compile(r"---\[ end trace|={20,}$")


@dataclass(frozen=True)
class Splat:
    """One report in a kernel log: its kind and the index of its first line."""

    kind: str
    line: int


def find_splats(dmesg: str) -> list[Splat]:
    """Every report in a kernel log, in order."""
    splats: list[Splat] = []
    last = Splat("", -_WARN_FOLLOWS - 1)  # the last line that matched, merged or not
    for i, line in enumerate(dmesg.splitlines()):
        kind = next((k for k, pattern in SPLATS if pattern.search(line)), None)
        if kind is None:
            continue
        merged = kind == "WARN" and last.kind not in ("", "WARN") and i - last.line <= _WARN_FOLLOWS
        if not merged:
            splats.append(Splat(kind, i))
        last = Splat(kind, i)
    return splats


def count_splats(dmesg: str) -> dict[str, int]:
    """Splats per kind (only kinds that occur) in a kernel log."""
    counts: dict[str, int] = {}
    for s in find_splats(dmesg):
        counts[s.kind] = counts.get(s.kind, 0) + 1
    return counts


def quote_splats(dmesg: str, kmemleak: str = "") -> str:
    """The reports themselves, for the run's output: each from its first line to its end marker.

    ``kmemleak``: the guest's /sys/kernel/debug/kmemleak after its final scan (the objects
    and their allocation stacks, which the kernel log does not carry).
    """
    lines = dmesg.splitlines()
    splats = find_splats(dmesg)
    out: list[str] = []
    for n, s in enumerate(splats):
        stop = min(len(lines), s.line + QUOTE_LINES)
        if n + 1 < len(splats):
            stop = min(stop, splats[n + 1].line)
        end = next((j + 1 for j in range(s.line + 1, stop) if _REPORT_END.search(lines[j])), stop)
        # WARN(1, fmt) prints its message (which says what went wrong) between "cut here" and WARNING:
        start = next((j for j in range(s.line - 1, max(s.line - 4, -1), -1) if _CUT_HERE in lines[j]), s.line)
        out.append(f"--- {s.kind} (dmesg line {s.line + 1}) ---")
        out += lines[start:end]
        if s.kind == "kmemleak" and kmemleak.strip():
            report = kmemleak.strip().splitlines()
            out += report[: QUOTE_LINES * 2]
            if len(report) > QUOTE_LINES * 2:
                out.append(f"... ({len(report) - QUOTE_LINES * 2} more lines in kmemleak.txt)")
    return "\n".join(out) + "\n" if out else ""


@dataclass(frozen=True)
class Entry:
    """One matrix entry: a kernel spec and the extra arguments for its command line."""

    spec: str
    kernel_args: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The entry as ``--matrix`` takes it: ``SPEC`` or ``SPEC[ARGS]``."""
        return f"{self.spec}[{kernel_args.join(self.kernel_args)}]" if self.kernel_args else self.spec

    def subdir_base(self, release: str) -> str:
        """The base of its results subdirectory's name: the release, then the arguments."""
        return "_".join([release, *self.kernel_args])


def _split_entries(text: str) -> list[str]:
    """``text`` split at the commas outside brackets (kernel arguments have commas of their own)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{text!r}: a ']' without its '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"{text!r}: a '[' without its ']'")
    return [*parts, text[start:]]


def parse_entry(text: str) -> Entry:
    """``SPEC`` or ``SPEC[ARGS]``: a kernel spec, and extra kernel arguments in brackets."""
    spec, bracket, rest = text.partition("[")
    spec = spec.strip()
    words: tuple[str, ...] = ()
    if bracket:
        inner, _, after = rest.rpartition("]")
        if after.strip() or "[" in inner:
            raise ValueError(f"{text!r}: write a matrix entry as SPEC or SPEC[KERNEL ARGS]")
        words = kernel_args.parse(inner)
        if not words:
            raise ValueError(f"{text!r}: no kernel arguments in the brackets")
    try:
        preflight.kernel_spec(spec)
    except ValueError as e:
        hint = "; kernel arguments go in brackets: SPEC[ARGS]" if ":" in spec or "=" in spec else ""
        raise ValueError(f"{e}{hint}") from None
    return Entry(spec, words)


def parse_entries(text: str) -> list[Entry]:
    """``--matrix``'s value: entries separated by commas (outside brackets), at least one."""
    entries = [parse_entry(t) for t in _split_entries(text) if t.strip()]
    if not entries:
        raise ValueError("name at least one kernel")
    return entries


@dataclass(frozen=True)
class KernelResult:
    """One kernel's row: what the harness reached and what the guest reported."""

    kernel: str  # the entry as given (a release or path, and its kernel arguments in brackets)
    release: str
    build: str  # BUILD_*
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    splats: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    rc: int = 0  # the single-kernel run's exit code
    results: str = ""  # its results directory
    kernel_args: tuple[str, ...] = ()  # the extra kernel command-line arguments it booted with

    @property
    def ok(self) -> bool:
        """Built, booted, every test passed or skipped, and a clean kernel log."""
        return (
            self.rc == 0 and self.build in (BUILD_OK, BUILD_SKIPPED) and not self.failed and not self.splats
        )


def collect(
    kernel: str,
    release: str,
    build: str,
    rc: int,
    outdir: Path,
    seconds: float,
    kernel_args: tuple[str, ...] = (),
) -> KernelResult:
    """A row from a kernel's results directory (its JUnit files and dmesg.txt)."""
    cases = [
        c for f in sorted(outdir.glob("junit*.xml")) for s in ktap.parse_junit(f.read_text()) for c in s.cases
    ]
    dmesg = outdir / "dmesg.txt"
    return KernelResult(
        kernel=kernel,
        release=release,
        build=build,
        passed=sum(c.outcome == "pass" for c in cases),
        failed=sum(c.failed for c in cases),
        skipped=sum(c.outcome == "skip" for c in cases),
        splats=count_splats(dmesg.read_text(errors="replace")) if dmesg.exists() else {},
        seconds=seconds,
        rc=rc,
        results=str(outdir),
        kernel_args=tuple(kernel_args),
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _splat_text(splats: dict[str, int]) -> str:
    total = sum(splats.values())
    return f"{total} ({', '.join(f'{k} {n}' for k, n in splats.items())})" if total else "0"


def _verdict(r: KernelResult) -> str:
    if r.ok:
        return "ok"
    return "FAIL (timeout)" if r.rc == EXIT_TIMEOUT else f"FAIL (exit {r.rc})"


def table(results: Sequence[KernelResult]) -> str:
    """The matrix as a Markdown table (readable on a terminal, pasteable into docs)."""
    header = ("kernel", "build", "passed", "failed", "skipped", "dmesg splats", "time", "result")
    rows = [
        (
            r.kernel,
            r.build,
            str(r.passed),
            str(r.failed),
            str(r.skipped),
            _splat_text(r.splats),
            _duration(r.seconds),
            _verdict(r),
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), line("-" * w for w in widths), *map(line, rows)]) + "\n"


def summary(results: Sequence[KernelResult]) -> dict[str, object]:
    """The JSON summary: every row plus its verdict, and the matrix's."""
    return {
        "ok": all(r.ok for r in results),
        "kernels": [{**asdict(r), "ok": r.ok} for r in results],
    }


def write_summary(path: Path, results: Sequence[KernelResult]) -> None:
    path.write_text(json.dumps(summary(results), indent=2) + "\n")


def exit_code(results: Sequence[KernelResult], missing_code: int) -> int:
    """0 when every kernel is ok; ``missing_code`` when the only failures are missing requirements; else 1."""
    bad = [r for r in results if not r.ok]
    if not bad:
        return 0
    return missing_code if all(r.build == BUILD_MISSING for r in bad) else 1


def subdir_name(release: str, taken: Iterable[str]) -> str:
    """A results subdirectory name for a kernel: its release, made unique among ``taken``. Only
    ``[\\w.+-]`` survive: vng's ``--rwdir HOST=GUEST`` cannot take a path with ``=`` or ``,``."""
    base = re.sub(r"[^\w.+-]", "_", release) or "kernel"
    taken = set(taken)
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name
