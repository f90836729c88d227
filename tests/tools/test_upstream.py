"""tools/upstream.py: the upstream patch series, made against a small synthetic kernel tree.

The series must apply, carry the driver, its uapi headers, documentation, build hooks and
MAINTAINERS entry where a Linux tree keeps them, carry one drm_sched_init() form (no
VNPU_SCHED_INIT_ARGS), pass checkpatch --strict with no finding but the "does MAINTAINERS need
updating?" notice, and pull in only kernel-doc that is warning-free. The full in-tree build
(W=1 C=1) is the heavy check: python -m tools.upstream --check-build (docs/kernel.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from qemu_tests import preflight
from tests.kernel_style.test_checkpatch import _checkpatch
from tests.qemu_tests.test_workflow import _module_argv
from tools import upstream

KCONFIG = """\
# SPDX-License-Identifier: GPL-2.0-only
if DRM

menuconfig DRM_ACCEL
	bool "Compute Acceleration Framework"

source "drivers/accel/habanalabs/Kconfig"
source "drivers/accel/ivpu/Kconfig"
source "drivers/accel/qaic/Kconfig"

endif
"""
MAKEFILE = """\
# SPDX-License-Identifier: GPL-2.0-only

obj-$(CONFIG_DRM_ACCEL_HABANALABS)	+= habanalabs/
obj-$(CONFIG_DRM_ACCEL_IVPU)		+= ivpu/
obj-$(CONFIG_DRM_ACCEL_QAIC)		+= qaic/
"""
DOC_INDEX = """\
.. SPDX-License-Identifier: GPL-2.0

====================
Compute Accelerators
====================

.. toctree::
   :maxdepth: 1

   introduction
   qaic/index

.. only::  subproject and html

   Indices
   =======

   * :ref:`genindex`
"""
# Sorted, except one entry out of place (as in the real file), which must not mislead the insertion.
MAINTAINERS = """\
List of maintainers
===================

Maintainers List
----------------

.. note:: Keep the entries in alphabetical order.

3C59X NETWORK DRIVER
M:	A Maintainer <a@example.org>
S:	Odd Fixes
F:	drivers/net/ethernet/3com/3c59x.c

ARM/LPC32XX SOC SUPPORT
S:	Orphan
F:	drivers/soc/lpc32xx/

LPC32XX DMAMUX SUPPORT
S:	Orphan
F:	drivers/dma/lpc32xx-dmamux.c

DRM ACCEL DRIVERS FOR INTEL VPU
M:	B Maintainer <b@example.org>
L:	dri-devel@lists.freedesktop.org
S:	Supported
F:	drivers/accel/ivpu/
F:	include/uapi/drm/ivpu_accel.h

DRM COMPUTE ACCELERATORS DRIVERS AND FRAMEWORK
M:	C Maintainer <c@example.org>
L:	dri-devel@lists.freedesktop.org
S:	Maintained
F:	Documentation/accel/
F:	drivers/accel/

THE REST
M:	D Maintainer <d@example.org>
S:	Buried alive in reporters
F:	*
"""
SCHED_WITH_ARGS = """\
struct drm_sched_init_args {
	const struct drm_sched_backend_ops *ops;
};

int drm_sched_init(struct drm_gpu_scheduler *sched, const struct drm_sched_init_args *args);
"""
SCHED_POSITIONAL = (
    "int drm_sched_init(struct drm_gpu_scheduler *sched,\n"
    "\t\t   const struct drm_sched_backend_ops *ops,\n"
    "\t\t   struct workqueue_struct *submit_wq,\n"
    "\t\t   u32 num_rqs, u32 credit_limit, unsigned int hang_limit,\n"
    "\t\t   long timeout, struct workqueue_struct *timeout_wq,\n"
    "\t\t   atomic_t *score, const char *name, struct device *dev);\n"
)
SIGNOFF = "Jane Developer <jane@example.org>"
# The other probed headers in their new (Linux 7.2) and old (Debian's 6.12) forms.
NEW_APIS = {
    "include/linux/module.h": "#define MODULE_IMPORT_NS(ns)\tMODULE_INFO(import_ns, ns)\n",
    "include/drm/drm_file.h": "\tstruct xarray syncobj_xa;\n",
    "include/linux/workqueue.h": "\tWQ_PERCPU\t\t= 1 << 8,\n",
    "include/linux/dma-fence.h": "static inline spinlock_t *dma_fence_spinlock(struct dma_fence *fence)\n",
    "include/linux/slab.h": "#define kzalloc_obj(P, ...) \\\n",
}
OLD_APIS = {
    "include/linux/module.h": "#define MODULE_IMPORT_NS(ns)\tMODULE_INFO(import_ns, __stringify(ns))\n",
    "include/drm/drm_file.h": "\tstruct idr syncobj_idr;\n",
    "include/linux/workqueue.h": "\tWQ_UNBOUND\t\t= 1 << 1,\n",
    "include/linux/dma-fence.h": "\tspinlock_t *lock;\n",
    "include/linux/slab.h": "static inline void *kzalloc(size_t size, gfp_t flags)\n",
}


def _base(root: Path, sched_args: bool) -> Path:
    """A small tree: the sched-args form with the newest other APIs (as 7.2), positional with the old."""
    sched = SCHED_WITH_ARGS + "\tDRM_GPU_SCHED_STAT_NO_HANG,\n" if sched_args else SCHED_POSITIONAL
    files = {
        "Makefile": "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 117\n",
        "MAINTAINERS": MAINTAINERS,
        "drivers/accel/Kconfig": KCONFIG,
        "drivers/accel/Makefile": MAKEFILE,
        "Documentation/accel/index.rst": DOC_INDEX,
        upstream.SCHED_HEADER: sched,
        **(NEW_APIS if sched_args else OLD_APIS),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _patch_files(patch: Path) -> list[str]:
    return re.findall(r"^diff --git a/(\S+) b/", patch.read_text(), re.M)


def _quiet(msg: str) -> None:
    pass


@pytest.fixture(scope="module", params=[True, False], ids=["sched-args", "sched-positional"])
def series(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[bool, Path, list[Path]]:
    """(sched_args, the base tree with the series applied, the patch files)."""
    sched_args: bool = request.param
    root = tmp_path_factory.mktemp("upstream")
    base = _base(root / "base", sched_args)
    opts = upstream.Options(signoff=SIGNOFF, maintainer=SIGNOFF)
    paths = upstream.write_series(root / "out", base, opts, say=_quiet)
    applied = root / "applied"
    shutil.copytree(base, applied)
    for p in paths[1:]:
        subprocess.run(["git", "apply", str(p)], cwd=applied, check=True, capture_output=True)
    return sched_args, applied, paths


PATCHES = 4 + len(upstream.DRIVER_PARTS)


def test_the_series_has_a_cover_letter_and_its_patches(series: tuple[bool, Path, list[Path]]) -> None:
    _, _, paths = series
    assert [p.name[:4] for p in paths] == [f"{n:04}" for n in range(PATCHES + 1)]
    subjects = [re.search(r"^Subject: (.*)$", p.read_text(), re.M)[1] for p in paths]
    assert subjects[0] == f"[PATCH 00/{PATCHES}] accel/vnpu: Add a driver for the vnpu NPU"
    for n, s in enumerate(subjects[1:], 1):
        assert re.fullmatch(rf"\[PATCH {n:02}/{PATCHES}\] (accel/vnpu|MAINTAINERS): [A-Z]\w+ .+", s), s
    for p in paths[1:]:
        text = p.read_text()
        assert f"\nSigned-off-by: {SIGNOFF}\n" in text
        assert f"From: {SIGNOFF}" in text
        body = text.split("\n\n", 1)[1].split("Signed-off-by:")[0]
        assert len(body.split()) >= 8, f"{p.name}: no commit message body"


def test_each_patch_holds_its_files(series: tuple[bool, Path, list[Path]]) -> None:
    _, _, paths = series
    uapi, *parts, hooks, docs, maintainers = (_patch_files(p) for p in paths[1:])
    assert uapi == ["include/uapi/drm/vnpu_accel.h", "include/uapi/drm/vnpu_isa.h"]
    assert len(parts) == len(upstream.DRIVER_PARTS)
    added: list[str] = []
    for n, (files, part) in enumerate(zip(parts, upstream.DRIVER_PARTS, strict=True)):
        assert all(f.startswith("drivers/accel/vnpu/") for f in files)
        names = sorted(Path(f).name for f in files)
        assert names == sorted([*part.files, "Makefile", *(["Kconfig"] if n == 0 else [])])
        added += part.files
    sources = sorted(p.name for p in upstream.driver_sources())
    assert sorted(added) == sources  # every source in exactly one patch
    assert hooks == ["drivers/accel/Kconfig", "drivers/accel/Makefile"]
    assert sorted(docs) == [
        "Documentation/accel/index.rst",
        "Documentation/accel/vnpu/index.rst",
        "Documentation/accel/vnpu/internals.rst",
        "Documentation/accel/vnpu/uapi.rst",
    ]
    assert maintainers == ["MAINTAINERS"]


def test_each_driver_patch_s_makefile_builds_what_it_has_added(tmp_path: Path) -> None:
    patches, _ = upstream.plan(_base(tmp_path, True), upstream.Options(signoff=SIGNOFF, maintainer=SIGNOFF))
    added: list[str] = []
    for patch, part in zip(patches[1 : 1 + len(upstream.DRIVER_PARTS)], upstream.DRIVER_PARTS, strict=True):
        added += part.files
        objects = re.findall(r"^\t(\w+)\.o", patch.files["drivers/accel/vnpu/Makefile"], re.M)
        assert set(objects) == {f[:-2] for f in added if f.endswith(".c")}, part.subject


def test_the_driver_is_in_tree_form(series: tuple[bool, Path, list[Path]]) -> None:
    sched_args, tree, _ = series
    vnpu = tree / "drivers" / "accel" / "vnpu"
    texts = {p.name: p.read_text() for p in vnpu.iterdir()}
    for name, text in texts.items():
        for probe in upstream.PROBES:
            assert probe.macro not in text, name
        assert '#include "vnpu_accel.h"' not in text and '#include "vnpu_isa.h"' not in text, name
    assert "#include <drm/vnpu_accel.h>" in texts["vnpu_drv.h"]
    assert "#include <drm/vnpu_isa.h>" in texts["vnpu_validate.c"]
    job = texts["vnpu_job.c"]
    assert ("&args)" in job) == sched_args
    assert ("DRM_GPU_SCHED_STAT_NO_HANG" in job) == sched_args
    assert ('MODULE_IMPORT_NS("DMA_BUF")' in texts["vnpu_gem.c"]) == sched_args
    assert ("syncobj_xa" in texts["vnpu_debugfs.c"]) == sched_args
    assert ("dma_fence_spinlock(fence)" in job) == sched_args
    # kzalloc_obj() everywhere; the fallback definition only for a tree without it.
    assert ("#define kzalloc_obj" in texts["vnpu_drv.h"]) == (not sched_args)
    assert not any(re.search(r"\bkzalloc\(sizeof", t) for n, t in texts.items() if n.endswith(".c"))
    assert ("drm_sched_init(&core->sched, &vnpu_sched_ops" in job) == (not sched_args)
    # Only the sched conditionals went: everything else is the project's source, byte for byte.
    assert texts["Kconfig"] == (upstream.DRIVER_DIR / "Kconfig").read_text()
    assert texts["vnpu_mmu.c"] == (upstream.DRIVER_DIR / "vnpu_mmu.c").read_text()
    makefile = texts["Makefile"]
    assert "obj-$(CONFIG_DRM_ACCEL_VNPU) := vnpu.o" in makefile
    assert "ccflags" not in makefile and upstream.SCHED_MACRO not in makefile
    for c in (n for n in texts if n.endswith(".c")):
        assert f"{c[:-2]}.o" in makefile


def test_the_hooks_and_maintainers_entry_sit_in_order(series: tuple[bool, Path, list[Path]]) -> None:
    _, tree, _ = series
    kconfig = (tree / "drivers/accel/Kconfig").read_text()
    assert 'source "drivers/accel/qaic/Kconfig"\nsource "drivers/accel/vnpu/Kconfig"\n\nendif' in kconfig
    makefile = (tree / "drivers/accel/Makefile").read_text()
    assert makefile.endswith(
        "obj-$(CONFIG_DRM_ACCEL_QAIC)\t\t+= qaic/\nobj-$(CONFIG_DRM_ACCEL_VNPU)\t\t+= vnpu/\n"
    )
    index = (tree / "Documentation/accel/index.rst").read_text()
    assert "   qaic/index\n   vnpu/index\n\n.. only::" in index
    maintainers = (tree / "MAINTAINERS").read_text()
    entry = (
        "\nDRM ACCEL DRIVER FOR VNPU\n"
        f"M:\t{SIGNOFF}\n"
        "L:\tdri-devel@lists.freedesktop.org\n"
        "S:\tMaintained\n"
        "F:\tDocumentation/accel/vnpu/\n"
        "F:\tdrivers/accel/vnpu/\n"
        "F:\tinclude/uapi/drm/vnpu_accel.h\n"
        "F:\tinclude/uapi/drm/vnpu_isa.h\n"
        "\nDRM ACCEL DRIVERS FOR INTEL VPU\n"
    )
    assert entry in maintainers


def test_checkpatch_strict_finds_nothing_but_the_maintainers_notice(
    series: tuple[bool, Path, list[Path]],
) -> None:
    sched_args, _, paths = series
    # The two forms differ only in the driver patch: check the whole series once.
    patches = paths[1:] if sched_args else paths[2 : 2 + len(upstream.DRIVER_PARTS)]
    out, findings = upstream.run_checkpatch(_checkpatch(), patches)
    assert findings == [], out
    # The notice appears only for the patches that add files before the MAINTAINERS entry.
    assert "ERROR" not in out


def test_the_documentation_pulls_warning_free_kernel_doc(series: tuple[bool, Path, list[Path]]) -> None:
    _, tree, _ = series
    pages = {p.relative_to(tree).as_posix(): p.read_text() for p in (tree / upstream.DOC_DIR).glob("*.rst")}
    pulled = upstream.kernel_doc_sources(pages)
    assert "include/uapi/drm/vnpu_accel.h" in pulled and "drivers/accel/vnpu/vnpu_job.c" in pulled
    kernel_doc = _checkpatch().with_name("kernel-doc")
    assert upstream.run_kernel_doc(kernel_doc, [tree / p for p in pulled]) == ""
    for p in pulled:  # every pulled file documents something (else Sphinx warns)
        r = subprocess.run(["perl", str(kernel_doc), "-rst", str(tree / p)], capture_output=True, text=True)
        assert r.stdout.strip(), p
    index = pages[f"{upstream.DOC_DIR}/index.rst"]
    for name, _ in upstream.module_parameters([(upstream.DRIVER_DIR / "vnpu_drv.c").read_text()]):
        assert f"``{name}``" in index
    for text in pages.values():
        lines = text.split("\n")
        for i, line in enumerate(lines[1:-1], 1):  # section adornments as long as their titles
            if line and set(line) <= set("=-") and lines[i - 1] and not set(lines[i - 1]) <= set("=-"):
                assert len(line) >= len(lines[i - 1].rstrip()), lines[i - 1]


def _sid_tree() -> Path:
    from qemu_tests import sid_kernel

    prepared = sid_kernel.prepared_releases(upstream.BASE_SERIES)
    if not prepared:
        pytest.skip(f"no prepared {upstream.BASE_SERIES} tree (python -m qemu_tests.sid_kernel 7.2)")
    return sid_kernel.SidKernel(prepared[-1], upstream.BASE_SERIES).source


def test_the_series_applies_to_linux_7_2_and_passes_its_checkpatch(tmp_path: Path) -> None:
    """The default base: Debian's prepared linux-source-7.2. Every probe holds there, so the series
    has no conditional but include guards and the uapi headers' C++ guard, and 7.2's own
    checkpatch --strict finds nothing but the MAINTAINERS notice (it asks for kzalloc_obj())."""
    tree = _sid_tree()
    base, desc = upstream.default_base(say=_quiet)
    assert base == tree and "linux-source-7.2" in desc
    opts = upstream.Options(signoff=SIGNOFF, maintainer=SIGNOFF)
    paths = upstream.write_series(tmp_path / "out", base, opts, say=_quiet, base_desc=desc)
    applied = tmp_path / "tree"
    for rel in upstream.BASE_FILES:
        (applied / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base / rel, applied / rel)
    for p in paths[1:]:
        subprocess.run(["git", "apply", str(p)], cwd=applied, check=True, capture_output=True)
    assert "linux-source-7.2" in paths[0].read_text()
    for p in paths[1:]:
        for line in re.findall(r"^\+#\s*if.*$", p.read_text(), re.M):
            assert re.fullmatch(r"\+#ifndef __VNPU_\w+_H__|\+#if defined\(__cplusplus\)", line), (
                p.name,
                line,
            )
    out, findings = upstream.run_checkpatch(tree / "scripts" / "checkpatch.pl", paths[1:], cwd=tree)
    assert findings == [], out
    assert "kzalloc_obj" not in out


# --- the pieces ------------------------------------------------------------------

SCHED_SOURCE = """\
static int f(void)
{
#ifdef CONFIG_X
	x();
#endif
#ifdef VNPU_SCHED_INIT_ARGS
	a();
#ifdef CONFIG_Y
	y();
#else
	z();
#endif
#else
	b();
#endif /* VNPU_SCHED_INIT_ARGS */
#ifndef VNPU_SCHED_INIT_ARGS
	c();
#endif
#if !defined(VNPU_SCHED_INIT_ARGS)
	d();
#else
	e();
#endif
	return 0;
}
"""


@pytest.mark.parametrize("defined", [True, False])
def test_resolve_macro(defined: bool) -> None:
    got = upstream.resolve_macro(SCHED_SOURCE, "VNPU_SCHED_INIT_ARGS", defined)
    assert "VNPU_SCHED_INIT_ARGS" not in got
    assert "#ifdef CONFIG_X\n\tx();\n#endif\n" in got
    if defined:
        assert "\ta();\n#ifdef CONFIG_Y\n\ty();\n#else\n\tz();\n#endif\n\te();\n" in got
        assert "b();" not in got and "c();" not in got and "d();" not in got
    else:
        assert "\tb();\n\tc();\n\td();\n\treturn" in got
        assert "a();" not in got and "y();" not in got and "e();" not in got


def test_resolve_macro_keeps_the_blank_line_after_declarations() -> None:
    text = "{\n\tint a = 1;\n#ifdef M\n\tint b = a;\n\n\tf(b);\n#else\n\tg(a);\n#endif\n}\n"
    assert upstream.resolve_macro(text, "M", False) == "{\n\tint a = 1;\n\tg(a);\n}\n"  # as unifdef
    assert upstream.resolve_macro(text, "M", False, spacing=True) == "{\n\tint a = 1;\n\n\tg(a);\n}\n"
    kept = "{\n\tint a = 1;\n\tint b = a;\n\n\tf(b);\n}\n"
    assert upstream.resolve_macro(text, "M", True, spacing=True) == kept


@pytest.mark.skipif(shutil.which("unifdef") is None, reason="unifdef (Debian's unifdef) not installed")
@pytest.mark.parametrize("defined", [True, False])
def test_resolve_macro_agrees_with_unifdef(defined: bool, tmp_path: Path) -> None:
    for text in (SCHED_SOURCE, (upstream.DRIVER_DIR / "vnpu_job.c").read_text()):
        src = tmp_path / "in.c"
        src.write_text(text)
        flag = "-DVNPU_SCHED_INIT_ARGS" if defined else "-UVNPU_SCHED_INIT_ARGS"
        r = subprocess.run(["unifdef", flag, str(src)], capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stderr
        assert upstream.resolve_macro(text, "VNPU_SCHED_INIT_ARGS", defined) == r.stdout


@pytest.mark.parametrize(
    "text",
    [
        "#ifdef M\n#elif defined(N)\n#endif\n",
        "#if defined(M) && defined(N)\n#endif\n",
        "#ifdef M\n",
        "#endif\n",
    ],
)
def test_resolve_macro_refuses_what_it_cannot_simplify(text: str) -> None:
    with pytest.raises(upstream.UnsupportedConditional):
        upstream.resolve_macro(text, "M", True)


def test_the_comment_sentence_naming_the_macro_goes() -> None:
    text = "/*\n * First sentence.\n * Second names\n * M here.\n * Third.\n */\n"
    assert upstream.drop_comment_sentences(text, "M") == "/*\n * First sentence.\n * Third.\n */\n"
    with pytest.raises(upstream.SeriesError):
        upstream.drop_comment_sentences("/*\n * One. Two names M.\n */\n", "M")


def test_uapi_includes_join_the_drm_block() -> None:
    text = (
        '#include <linux/a.h>\n\n#include <drm/b.h>\n#include <drm/z.h>\n\n#include "u.h"\n#include "w.h"\n'
    )
    got = upstream.rewrite_uapi_includes(text, ["u.h"])
    drm = "#include <drm/b.h>\n#include <drm/u.h>\n#include <drm/z.h>\n"
    assert got == f'#include <linux/a.h>\n\n{drm}\n#include "w.h"\n'
    alone = '#include <drm/b.h>\n\n#include "u.h"\n\nint x;\n'
    assert (
        upstream.rewrite_uapi_includes(alone, ["u.h"]) == "#include <drm/b.h>\n#include <drm/u.h>\n\nint x;\n"
    )
    no_block = '#include <linux/a.h>\n\n#include "u.h"\n'
    assert upstream.rewrite_uapi_includes(no_block, ["u.h"]) == "#include <linux/a.h>\n\n#include <drm/u.h>\n"


def test_the_probes_are_kbuild_s() -> None:
    kbuild = (upstream.DRIVER_DIR / "Kbuild").read_text()
    probes = upstream.kbuild_probes(kbuild)
    assert [p.macro for p in probes] == [p.macro for p in upstream.PROBES]
    assert len(probes) == kbuild.count("$(call vnpu_probe,") >= 5
    (sched,) = [p for p in probes if p.macro == upstream.SCHED_MACRO]
    assert sched == upstream.Probe(
        upstream.SCHED_HEADER, "struct drm_sched_init_args {", upstream.SCHED_MACRO
    )
    (ns,) = [p for p in probes if p.macro == "VNPU_IMPORT_NS_STRING"]
    assert ns.line == "MODULE_INFO(import_ns, ns)"  # a comma inside the parentheses stays in the line
    assert set(upstream.BASE_FILES) >= {p.header for p in probes}


def test_a_probe_override_wins_over_the_tree(tmp_path: Path) -> None:
    base = _base(tmp_path / "base", sched_args=False)
    macros = upstream.probe_macros(base, {"VNPU_SYNCOBJ_XA": True})
    assert macros["VNPU_SYNCOBJ_XA"] and not macros["VNPU_IMPORT_NS_STRING"]
    (base / "include/linux/module.h").unlink()
    with pytest.raises(upstream.SeriesError, match="--probe VNPU_IMPORT_NS_STRING=y"):
        upstream.probe_macros(base, {})


def test_the_sched_form_comes_from_the_tree(tmp_path: Path) -> None:
    assert upstream.sched_init_takes_args(SCHED_WITH_ARGS)
    assert not upstream.sched_init_takes_args(SCHED_POSITIONAL)
    with pytest.raises(upstream.SeriesError, match="--sched-init"):
        upstream.plan(tmp_path, upstream.Options(signoff=SIGNOFF, maintainer=SIGNOFF))


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _base(tmp_path / "base", sched_args=False)
    out = tmp_path / "out"
    argv = [
        "--out",
        str(out),
        "--base-tree",
        str(base),
        "--signoff",
        SIGNOFF,
        "--tree-url",
        "https://example.org/v.git",
    ]
    assert upstream.main(argv) == 0
    err = capsys.readouterr().err
    assert "upstream: drm_sched_init() form: positional" in err and f"{PATCHES + 1} files in" in err
    assert "+T:\tgit https://example.org/v.git\n" in next(out.glob(f"{PATCHES:04}-*")).read_text()
    assert "Linux 6.12.117" in next(out.glob("0000-*")).read_text()
    assert upstream.main(["--out", str(out), "--base-tree", str(base), "--signoff", "no address"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "python -m tools.upstream: 'no address': expected 'Name <email>'", line


def test_the_workflow_runs_the_heavy_check(capsys: pytest.CaptureFixture[str]) -> None:
    """.github/workflows/upstream-series.yml: its commands parse with the real parsers."""
    workflow = upstream.ROOT / ".github" / "workflows" / "upstream-series.yml"
    data = yaml.safe_load(workflow.read_text())
    assert data.get("on", data.get(True)) is not None, "the workflow has no triggers"
    (job,) = data["jobs"].values()
    runs = [step["run"] for step in job["steps"] if "run" in step]
    parsed = [upstream.build_parser().parse_args(argv) for argv in _module_argv(runs, "tools.upstream")]
    assert sorted(a.check_build for a in parsed) == sorted(upstream.CHECK_SERIES)  # every kernel
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    uploaded = {line.rstrip("/") for line in upload["with"]["path"].split()}
    for args in parsed:
        assert args.base_tree is None and args.out is not None and not args.out.is_absolute()
        assert str(args.out) in uploaded
    assert upload.get("if") == "always()"
    packages: set[str] = set()
    for pre in _module_argv(runs, "qemu_tests.preflight"):
        assert preflight.main(pre) == 0
        packages |= set(capsys.readouterr().out.split())
    needed = {"sparse", "gcc", "make", "flex", "bison", "bc", "libelf-dev", "libssl-dev", "linux-source-6.12"}
    assert needed <= packages
    assert any(p.startswith("linux-headers-6.12.") for p in packages)  # Module.symvers
    assert any(p.startswith("linux-image-6.12.") for p in packages)  # /boot/config-*
