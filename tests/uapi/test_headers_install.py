"""The uapi headers are shipped as ``make headers_install`` makes them, and compile that way.

``tools/headers_install.py`` is the kernel's scripts/headers_install.sh in Python; where a
kernel source tree with that script is at hand (the checkpatch test unpacks Debian's
linux-source into the cache) both are run over the kernel's DRM uapi headers and must agree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vnpu_common.cache import cache_root

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import headers_install  # noqa: E402

CACHE = cache_root() / "checkpatch"
KERNEL_SOURCE = CACHE / "linux-source-6.12"


def test_every_shipped_header_is_installed_form() -> None:
    assert headers_install.check() == []
    assert headers_install.main(["--check"]) == 0


def test_vendored_headers_match_a_kernel_tree() -> None:
    tree = headers_install._newest_kernel_tree()
    if tree is None:
        pytest.skip(f"no kernel headers tree ({headers_install.KERNEL_TREES})")
    for name in headers_install.VENDORED:
        src = (tree / "include" / "uapi" / "drm" / name).read_text()
        assert headers_install.headers_install(src) == (ROOT / "uapi" / "drm" / name).read_text(), name


def test_sanitizer_rules() -> None:
    src = "\n".join(
        [
            "#ifndef _UAPI_X_H",
            "#define _UAPI_X_H",
            "#include <linux/compiler.h>",
            "#if defined(__KERNEL__)",
            "int kernel_only;",
            "#elif defined(__linux__)",
            "struct s { char __user *p; } __packed;",
            "#else /* BSD */",
            "int bsd;",
            "#endif",
            "#ifndef __KERNEL__",
            "static inline int f(void) { return 0; }",
            "#endif",
            "#ifdef __EXPORTED_HEADERS__",
            "int exported;",
            "#else",
            "int not_exported;",
            "#endif",
            "#endif /* _UAPI_X_H */",
        ]
    )
    assert headers_install.headers_install(src).split("\n") == [
        "#ifndef _X_H",
        "#define _X_H",
        "",
        "#if   defined(__linux__)",
        "struct s { char *p; } __attribute__((packed));",
        "#else /* BSD */",
        "int bsd;",
        "#endif",
        "static __inline__ int f(void) { return 0; }",
        "int exported;",
        "#endif /* _X_H */",
    ]
    with pytest.raises(headers_install.UnsupportedConditional):
        headers_install.headers_install("#if defined(__KERNEL__) || defined(FOO)\n#endif\n")


def test_agrees_with_the_kernels_headers_install_sh(tmp_path: Path) -> None:
    script = KERNEL_SOURCE / "scripts" / "headers_install.sh"
    unifdef_c = KERNEL_SOURCE / "scripts" / "unifdef.c"
    tree = headers_install._newest_kernel_tree()
    if not script.exists() or not unifdef_c.exists() or tree is None or shutil.which("gcc") is None:
        pytest.skip("needs the kernel source's scripts/ (tests/kernel_style unpacks them), headers, gcc")
    (tmp_path / "scripts").mkdir()
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / "scripts" / "unifdef"), str(unifdef_c)], check=True)
    headers = sorted((tree / "include" / "uapi" / "drm").glob("*.h"))
    assert len(headers) > 10
    for src in headers:
        out = tmp_path / src.name
        subprocess.run(["sh", str(script), str(src), str(out)], cwd=tmp_path, check=True, capture_output=True)
        assert headers_install.headers_install(src.read_text()) == out.read_text(), src.name


@pytest.mark.parametrize("compiler, flags", [("gcc", ["-std=c11", "-pedantic"]), ("g++", ["-std=c++11"])])
def test_plain_include_compiles(tmp_path: Path, compiler: str, flags: list[str]) -> None:
    cc = shutil.which(compiler)
    if cc is None:
        pytest.skip(f"{compiler} is not installed")
    src = ROOT / "tests" / "c" / "plain_include.c"
    language = ["-x", "c++"] if compiler == "g++" else []
    cmd = [cc, "-Wall", "-Wextra", "-Werror", *flags, "-I", str(ROOT / "uapi"), "-c", *language, str(src)]
    res = subprocess.run([*cmd, "-o", str(tmp_path / "t.o")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
