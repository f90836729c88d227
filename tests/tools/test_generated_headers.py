"""The generated C headers are current and agree with the Python contracts they derive from."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from uapi import hw_layout
from uapi.isa import SPEC

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "generate_headers.py"
KDIR = ROOT / "kernel" / "drivers_accel_stub"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to compile the headers")


def _hw_constants() -> dict[str, int]:
    return {
        k: v
        for k, v in vars(hw_layout).items()
        if k.isupper() and isinstance(v, int) and not isinstance(v, bool)
    }


def test_generated_headers_are_current() -> None:
    r = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_check_mode_names_a_stale_file(tmp_path: Path) -> None:
    # A private copy of the inputs and outputs, so the real tree is never touched.
    for rel in (
        "tools/generate_headers.py",
        "tools/generated_files.py",
        "uapi",
        "kernel/drivers_accel_stub/vnpu_isa_table.h",
        "kernel/drivers_accel_stub/vnpu_hw.h",
        "kernel/drivers_accel_stub/vnpu_limits.h",
    ):
        src = ROOT / rel
        dst = tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.ko"))
        else:
            shutil.copy(src, dst)
    gen = tmp_path / "tools" / "generate_headers.py"
    assert subprocess.run([sys.executable, str(gen), "--check"], capture_output=True).returncode == 0
    table = tmp_path / "kernel/drivers_accel_stub/vnpu_isa_table.h"
    table.write_text(table.read_text().replace(".size = 8,", ".size = 16,", 1))
    (tmp_path / "uapi/drm/vnpu_isa.h").unlink()
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 1
    assert "vnpu_isa_table.h" in r.stderr and "vnpu_isa.h" in r.stderr and "vnpu_hw.h" not in r.stderr
    # Regenerating repairs both.
    assert subprocess.run([sys.executable, str(gen)], capture_output=True).returncode == 0
    assert subprocess.run([sys.executable, str(gen), "--check"], capture_output=True).returncode == 0


def _c_program() -> tuple[str, dict[str, int]]:
    """A C program printing `key value` lines, and the values Python expects for each key."""
    expect: dict[str, int] = {}
    body: list[str] = []

    def emit(key: str, c_expr: str, value: int) -> None:
        body.append(f'\tprintf("{key} %lld\\n", (long long)({c_expr}));')
        expect[key] = value

    emit("version_major", "VNPU_ISA_VERSION_MAJOR", SPEC.version_major)
    emit("version_minor", "VNPU_ISA_VERSION_MINOR", SPEC.version_minor)
    emit("version", "VNPU_ISA_VERSION", SPEC.version)
    emit("slots", "VNPU_ISA_SLOTS", SPEC.slots)
    emit("align", "VNPU_ISA_ALIGN", SPEC.align)
    emit("header", "VNPU_ISA_HEADER(VNPU_OP_TENSOR, VNPU_ISA_SIZE_TENSOR)", 0x08 | (64 << 16))
    emit("header_op", "VNPU_ISA_HEADER_OPCODE(0x00401234u)", 0x34)
    emit("header_size", "VNPU_ISA_HEADER_INSN_SIZE(0x00401234u)", 0x40)
    for d in SPEC.dtypes.values():
        emit(f"dtype.{d.name}", f"VNPU_DTYPE_{d.name}", d.code)
        emit(f"dtype_size.{d.name}", f"VNPU_DTYPE_{d.name}_SIZE", d.size)
        emit(f"table.dtype_size.{d.name}", f"vnpu_isa_dtype_size[{d.code}]", d.size)
    for name, mask in SPEC.flags.items():
        emit(f"flag.{name}", f"VNPU_FLAG_{name}", mask)
    n_table = max(i.opcode for i in SPEC.instructions) + 1
    emit("table.len", "sizeof(vnpu_isa_ops) / sizeof(vnpu_isa_ops[0])", n_table)
    defined = {i.opcode for i in SPEC.instructions}
    for op in range(n_table):
        if op not in defined:
            emit(f"table.{op}.size", f"vnpu_isa_ops[{op}].size", 0)
    for ins in SPEC.instructions:
        s = f"struct vnpu_isa_{ins.name.lower()}"
        emit(f"op.{ins.name}", f"VNPU_OP_{ins.name}", ins.opcode)
        emit(f"sizeof.{ins.name}", f"sizeof({s})", ins.size)
        emit(f"size_macro.{ins.name}", f"VNPU_ISA_SIZE_{ins.name}", ins.size)
        for f in ins.fields:
            emit(f"offsetof.{ins.name}.{f.name}", f"offsetof({s}, {f.name})", f.offset)
            emit(f"sizeof.{ins.name}.{f.name}", f"sizeof((({s} *)0)->{f.name})", f.size)
            # _Generic does not evaluate its operand: the C type of the field, as a code.
            ctype = f"_Generic((({s} *)0)->{f.name}, __s32: 1, __u32: 2, __u64: 3, default: 0)"
            emit(f"ctype.{ins.name}.{f.name}", ctype, {"i32": 1, "u64": 3}.get(f.type, 2))
        # The kernel validator's table entry.
        t = f"vnpu_isa_ops[{ins.opcode}]"
        flags = [f for f in ins.fields if f.type == "flags"]
        allowed = sum(SPEC.flags[a] for a in flags[0].allowed) if flags else 0
        emit(f"table.{ins.name}.size", f"{t}.size", ins.size)
        emit(f"table.{ins.name}.flags_offset", f"{t}.flags_offset", flags[0].offset if flags else -1)
        emit(f"table.{ins.name}.flags_allowed", f"{t}.flags_allowed", allowed)
        emit(f"table.{ins.name}.num_operands", f"{t}.num_operands", len(ins.operands))
        used = {0} | {w for f in ins.fields for w in range(f.offset // 4, (f.offset + f.size) // 4)}
        reserved = sum(1 << w for w in range(ins.size // 4) if w not in used)
        emit(f"table.{ins.name}.reserved_words", f"{t}.reserved_words", reserved)
        for k, f in enumerate(ins.operands):
            emit(f"table.{ins.name}.{f.name}.offset", f"{t}.operands[{k}].offset", f.offset)
            emit(
                f"table.{ins.name}.{f.name}.dir",
                f"{t}.operands[{k}].dir == VNPU_ISA_DIR_OUT",
                int(f.type == "out"),
            )
            emit(
                f"table.{ins.name}.{f.name}.when",
                f"{t}.operands[{k}].when",
                SPEC.flags[f.when] if f.when else 0,
            )
    for f in SPEC.by_name("TENSOR").fields:
        emit(f"tensor.{f.name}", f"VNPU_ISA_TENSOR_{f.name.upper()}", f.offset)
    for name, value in _hw_constants().items():
        body.append(f'\tprintf("hw.{name} %llu\\n", (unsigned long long)(VNPU_{name}));')
        expect[f"hw.{name}"] = value
    src = "\n".join(
        [
            "#include <stddef.h>",
            "#include <stdio.h>",
            "#include <linux/types.h>",
            '#include "vnpu_isa.h"',
            "/* vnpu_isa_table.h is kernel code: give it the kernel's type names. */",
            "typedef __u8 u8;",
            "typedef __u16 u16;",
            "typedef __u32 u32;",
            "typedef __u64 u64;",
            "typedef __s8 s8;",
            "#pragma GCC diagnostic push",
            '#pragma GCC diagnostic ignored "-Wpadded"',
            f'#include "{KDIR}/vnpu_isa_table.h"',
            "#pragma GCC diagnostic pop",
            f'#include "{KDIR}/vnpu_hw.h"',
            "int main(void)",
            "{",
            *body,
            "\treturn 0;",
            "}",
        ]
    )
    return src + "\n", expect


def test_c_headers_agree_with_python(tmp_path: Path) -> None:
    src, expect = _c_program()
    (tmp_path / "t.c").write_text(src)
    exe = tmp_path / "t"
    cc = subprocess.run(
        [
            "gcc",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpadded",  # no implicit padding: every hole is an explicit reserved member
            "-Werror",
            "-Wno-unused-const-variable",
            f"-I{ROOT / 'uapi' / 'drm'}",
            "-o",
            str(exe),
            str(tmp_path / "t.c"),
        ],
        capture_output=True,
        text=True,
    )
    assert cc.returncode == 0, cc.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    got = {k: int(v) for k, v in (line.split() for line in out.splitlines())}
    mismatches = {k: (got.get(k), v) for k, v in expect.items() if got.get(k) != v}
    assert not mismatches, f"C (got) vs Python (expected): {mismatches}"


def test_hw_header_has_every_constant_once() -> None:
    text = (KDIR / "vnpu_hw.h").read_text()
    for name in _hw_constants():
        assert text.count(f"#define VNPU_{name}\t") == 1, name
