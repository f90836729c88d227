"""The wheel works outside the checkout, on a machine without a compiler: build the sdist and the
wheel, install the wheel into a new venv, and run the userspace stack's commands from a temporary
directory with gcc out of reach.

Offline and fast on a machine where ``./run.sh`` made ``.venv``:

- ``python -m build --no-isolation`` builds the sdist, then the wheel from the sdist, with this
  venv's setuptools, cffi and numpy (the dev extras carry ``build``, ``setuptools`` and ``twine``);
  setup.py compiles every shared library into it (libteflon.so, the MAC array, the LiteRT compiler
  plugin and dispatch library, the onnxruntime EP, accel trace's interposer, the kernel backend's
  prepared run), so it is a platform wheel;
- the new venv gets the wheel alone (``pip install --no-deps --no-index``) and finds the wheel's
  dependencies through one ``.pth`` line naming this venv's site-packages. A directory added that way
  is a plain ``sys.path`` entry: its own ``.pth`` files (the editable install's finder among them) do
  not run, so the project's packages can come only from the wheel, which the test checks, with the
  wheel's ``Requires-Dist`` against the versions that directory provides;
- the commands run with ``PATH`` holding the venv's ``bin/`` alone and ``CC=false`` (no gcc, no cc)
  and ``$VNPU_CACHE_DIR`` in an empty temporary directory: every library is the wheel's own build,
  and nothing is compiled into the cache. Only the C program ``accel trace`` traces gets gcc.

Every subprocess gets an environment without ``PYTHON*`` and ``VNPU_*`` variables, so a
``PYTHONPATH`` naming the checkout cannot put the checkout's packages in front of the wheel's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "uapi",
    "libaccel",
    "device_model",
    "firmware_tools",
    "delegate_teflon",
    "vnpu_ort_ep",
    "litert_vendor",
    "vnpu_common",
    "modelgen",
)
# Files beside the modules that the stack reads at run time.
DATA = (
    "uapi/abi_generated.json",
    "uapi/vnpu_isa.toml",
    "uapi/drm/vnpu_accel.h",
    "vnpu_ort_ep/vnpu_ort_abi.h",
    "vnpu_ort_ep/ort_ep_pin.c",
    "uapi/drm/vnpu_isa.h",
    "litert_vendor/include/vnpu_litert.h",
    "uapi/drm/drm.h",
    "uapi/firmware/vnpu/vnpu_fw.bin",
    "uapi/firmware/vnpu/vnpu_fw.toml",
    "uapi/firmware/keys/dev-ed25519.pub",
    "libaccel/tools/trace_preload.c",
    "libaccel/c/prepared_run.c",
    "libaccel/c/prepared_run.h",
    "libaccel/tools/man/accel.1",
    "device_model/mac_array/mac_array.c",
    "delegate_teflon/c/teflon_abi.h",
    "delegate_teflon/c/prepared_invoke.c",
    "delegate_teflon/c/embedding_host.c",
    "litert_vendor/c/vnpu_vendor.h",
    "litert_vendor/c/compiler_plugin.c",
    "litert_vendor/c/dispatch.c",
)
TFLITE_MODEL = ROOT / "tests" / "corpus" / "models" / "ds_cnn_kws.tflite"
ONNX_MODEL = ROOT / "tests" / "onnx" / "models" / "mobilenet_like_qdq.onnx"
TIMEOUT = 600.0  # one command, on a loaded 2-core machine
WHEEL_TAG = "cp311-cp311-linux_x86_64"
# What the wheel carries built, beside the modules that load it.
BUILT = (
    "delegate_teflon/libteflon.so",
    "device_model/mac_array/_vnpu_mac_array.cpython-311-x86_64-linux-gnu.so",
    "litert_vendor/lib/libLiteRtCompilerPlugin_Vnpu.so",
    "litert_vendor/lib/libLiteRtDispatch_Vnpu.so",
    "vnpu_ort_ep/libvnpu_ort_ep.so",
    "libaccel/tools/libvnpu_trace.so",
    "libaccel/libvnpu_run.so",
)
# The environment of every subprocess: this one without what would reach into the checkout.
CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("VNPU_", "PYTHON")) and k not in ("VIRTUAL_ENV", "LD_PRELOAD")
}


def _run(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        argv, cwd=cwd, env=CLEAN_ENV if env is None else env, input=input, capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    if r.returncode != 0:
        pytest.fail(f"{shlex.join(argv)} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    try:
        import build  # noqa: F401
    except ImportError:
        pytest.fail("the venv lacks the build frontend: ./run.sh reinstalls it (pyproject.toml's dev extras)")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)])
    (wheel,) = out.glob(f"vnpu-*-{WHEEL_TAG}.whl")
    (sdist,) = out.glob("vnpu-*.tar.gz")
    return Dists(wheel, sdist)


@dataclass(frozen=True)
class Venv:
    root: Path
    site: Path
    cwd: Path
    env: dict[str, str]  # no compiler on PATH

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def run(self, *argv: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return _run([*argv], cwd=self.cwd, env=self.env, input=input)

    def python(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin("python"), "-c", code, *args)

    def with_gcc(self) -> dict[str, str]:
        env = dict(self.env, PATH=f"{self.root / 'bin'}:/usr/local/bin:/usr/bin:/bin")
        del env["CC"]
        return env


@pytest.fixture(scope="module")
def venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    base = tmp_path_factory.mktemp("wheel-venv")
    root = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    python = root / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    )
    (site / "_vnpu_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index"]
        + ["--no-cache-dir", str(dists.wheel)]
    )
    cache = base / "cache"
    cache.mkdir()
    cwd = base / "work"
    cwd.mkdir()
    for model in (TFLITE_MODEL, ONNX_MODEL):
        shutil.copy(model, cwd / model.name)
    # No compiler: PATH is the venv's bin/ alone (no gcc, no cc), and CC names a command that fails.
    env = dict(CLEAN_ENV, PATH=str(root / "bin"), CC="false", VNPU_CACHE_DIR=str(cache))
    return Venv(root, site, cwd, env)


def test_the_wheel_is_a_platform_wheel_with_its_libraries_built(dists: Dists) -> None:
    names = set(zipfile.ZipFile(dists.wheel).namelist())
    assert set(BUILT) <= names
    wheel_meta = zipfile.ZipFile(dists.wheel).read("vnpu-0.1.0.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_meta and f"Tag: {WHEEL_TAG}" in wheel_meta
    with tarfile.open(dists.sdist) as tar:
        assert not [n for n in tar.getnames() if n.endswith(".so")], "a compiled library in the sdist"


def test_the_archives_carry_the_run_time_files_and_leave_out_keys_and_tests(dists: Dists) -> None:
    names = set(zipfile.ZipFile(dists.wheel).namelist())
    for pkg in PACKAGES:
        assert f"{pkg}/__init__.py" in names, pkg
    for path in DATA:
        assert path in names, path
    with tarfile.open(dists.sdist) as tar:
        sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert set(DATA) <= sdist and "LICENSE" in sdist
    for archive, files in (("wheel", names), ("sdist", sdist)):
        assert not [n for n in files if n.endswith(".key")], f"a private key in the {archive}"
        assert not [n for n in files if n.startswith(("tests/", "kernel/"))], (
            f"tests or kernel/ in the {archive}"
        )
    _run([sys.executable, "-m", "twine", "check", "--strict", str(dists.wheel), str(dists.sdist)])


CHECK_INSTALL = """
import importlib, importlib.metadata as md, json, sys
from packaging.requirements import Requirement
site, packages = sys.argv[1], sys.argv[2].split(",")
outside = [p for p in packages if not importlib.import_module(p).__file__.startswith(site)]
unmet = []
for text in md.requires("vnpu"):
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        version = None
    if version is None or version not in req.specifier:
        unmet.append(f"{req} (have {version})")
from device_model.mac_array.build import source_hash
from uapi import bindings
print(json.dumps({"outside": outside, "unmet": unmet, "mac_array": source_hash(),
                  "ioctls": len(bindings.IOCTLS), "dist": str(md.distribution("vnpu").locate_file(""))}))
"""


def test_the_packages_come_from_the_wheel_and_its_requirements_are_met(venv: Venv) -> None:
    from device_model.mac_array.build import source_hash

    r = json.loads(venv.python(CHECK_INSTALL, str(venv.site), ",".join(PACKAGES)).stdout)
    assert r["outside"] == [], "imported from outside the wheel"
    assert r["unmet"] == [], "the wheel's requirements"
    assert r["mac_array"] == source_hash()  # the wheel's mac_array.c is this checkout's
    assert r["ioctls"] > 0 and Path(r["dist"]) == venv.site
    assert (
        shutil.which("gcc", path=venv.env["PATH"]) is None
        and shutil.which("cc", path=venv.env["PATH"]) is None
    )


DELEGATE = """
import sys
import numpy as np
import delegate_teflon
from device_model import mac_array
from libaccel import prepared_run
from tflite_runtime.interpreter import Interpreter, OpResolverType, load_delegate

model = sys.argv[1]
delegate = load_delegate(delegate_teflon.library_path(), {"device": "shim"})
npu = Interpreter(model_path=model, experimental_delegates=[delegate],
                  experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
ref = Interpreter(model_path=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
outputs = []
for interp in (npu, ref):
    interp.allocate_tensors()
    (inp,) = interp.get_input_details()
    info = np.iinfo(inp["dtype"])
    x = np.random.default_rng(1).integers(info.min, info.max + 1, size=inp["shape"]).astype(inp["dtype"])
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    outputs.append([interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()])
diff = sum(int(np.count_nonzero(a.view(np.uint8) != b.view(np.uint8))) for a, b in zip(*outputs))
print("library", delegate_teflon.library_path())
print("mac array", mac_array.library().__file__, mac_array.build_failure())
prepared_run.library()  # loads: the kernel backend's run of a prepared job
print("prepared run", prepared_run.library_path())
print("differing bytes", diff)
"""


def test_the_delegate_runs_a_corpus_model_exactly(venv: Venv) -> None:
    out = venv.python(DELEGATE, TFLITE_MODEL.name).stdout
    assert "differing bytes 0" in out
    assert f"library {venv.site / BUILT[0]}\n" in out  # the wheel's build
    assert f"mac array {venv.site / BUILT[1]} None\n" in out  # the C kernels, no numpy fallback
    assert f"prepared run {venv.site / BUILT[6]}\n" in out
    r = venv.run(venv.bin("python"), "-m", "delegate_teflon.run", TFLITE_MODEL.name, "--device", "shim")
    assert "0 differing bytes" in r.stdout
    assert list(Path(venv.env["VNPU_CACHE_DIR"]).glob("*/*.so")) == []  # nothing compiled on first use


def test_the_onnxruntime_ep_registers_from_the_wheel_and_runs_exactly(venv: Venv) -> None:
    code = "import vnpu_ort_ep; print(vnpu_ort_ep.library_path())"
    assert venv.python(code).stdout == f"{venv.site / BUILT[4]}\n"
    # onnxruntime registers the wheel's library and runs the model on it; the CPU EP is the reference
    model = str(venv.cwd / ONNX_MODEL.name)  # measure runs onnxruntime in a child whose cwd is /
    r = venv.run(venv.bin("python"), "-m", "vnpu_ort_ep.measure", model, "--runs", "1")
    row = r.stdout.splitlines()[1].split()
    assert row[0] == ONNX_MODEL.stem and row[1] != "0" and row[-3] == "0", r.stdout  # "<n> of <m>"
    assert list(Path(venv.env["VNPU_CACHE_DIR"]).glob("*/*.so")) == []


LITERT_JIT = """
import sys
import litert_vendor
from litert_vendor.tools import run_compiled
from delegate_teflon.run import invoke, make_interpreter, random_inputs
from ai_edge_litert import interpreter

model = sys.argv[1]
ref = make_interpreter(interpreter, open(model, "rb").read(), [], None)  # BUILTIN_REF
inputs = random_inputs(ref.get_input_details(), seed=0)
outputs = run_compiled(model, inputs)
diff = sum(int((a.view("u1") != b.view("u1")).sum()) for a, b in zip(outputs, invoke(ref, inputs)))
print("libraries", litert_vendor.library_dir())
print("differing bytes", diff)
"""


def test_the_litert_vendor_libraries_compile_and_dispatch_from_the_wheel(venv: Venv) -> None:
    # The compiler plugin (JIT) and the dispatch library in LiteRT's CompiledModel, a Python host.
    out = venv.python(LITERT_JIT, TFLITE_MODEL.name).stdout
    assert f"libraries {venv.site / 'litert_vendor' / 'lib'}\n" in out and "differing bytes 0\n" in out
    # apply_plugin_main, a C host: the plugin starts Python and finds the wheel from its own path.
    code = "import sys; from litert_vendor import tools; tools.apply_plugin(sys.argv[1], sys.argv[2])"
    venv.python(code, TFLITE_MODEL.name, "npu.tflite")
    assert b"DISPATCH_OP" in (venv.cwd / "npu.tflite").read_bytes()
    assert list(Path(venv.env["VNPU_CACHE_DIR"]).glob("*/*.so")) == []


def test_the_man_page_is_installed_where_man_finds_it(venv: Venv) -> None:
    """``man accel`` for a venv on PATH: accel.1 under the prefix's share/man/man1, the committed page."""
    installed = venv.root / "share" / "man" / "man1" / "accel.1"
    assert installed.read_text() == (ROOT / "libaccel" / "tools" / "man" / "accel.1").read_text()
    if shutil.which("man") is not None:
        # No MANPATH: man-db finds bin/../share/man of every PATH entry.
        env = dict(venv.env, PATH=f"{venv.root / 'bin'}:/usr/bin:/bin", MANWIDTH="80")
        env.pop("MANPATH", None)
        r = _run(["man", "-P", "cat", "accel"], env=env)
        assert "accel trace" in r.stdout and "EXIT STATUS" in r.stdout


def test_accel_info_and_run(venv: Venv) -> None:
    info = json.loads(venv.run(venv.bin("accel"), "info", "--device", "shim", "--json").stdout)
    assert info["device"] == "shim" and info["driver"] == "vnpu"
    r = venv.run(venv.bin("accel"), "run", ONNX_MODEL.name, "--device", "shim", "--compare")
    assert "0 differing bytes" in r.stdout
    code = "import libaccel; r = libaccel.run_model({!r}, device='shim'); print(sorted(r.outputs))"
    assert venv.python(code.format(ONNX_MODEL.name)).stdout.strip().startswith("['")
    # --version from the installed distribution's metadata (a wheel carries no pyproject.toml)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert venv.run(venv.bin("accel"), "--version").stdout == f"accel {version}\n"


# A uapi program accel trace traces: one GET_PARAM, ENOTTY from /dev/null, exit status 7.
C_PROGRAM = ROOT / "tests" / "packaging" / "c" / "get_param_enotty.c"


def test_accel_trace_uses_the_wheels_interposer(venv: Venv) -> None:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required (apt-get install gcc)")
    cflags = venv.run(venv.bin("python"), "-m", "uapi", "cflags").stdout.strip()
    assert cflags == f"-I{venv.site / 'uapi'}"
    shutil.copy(C_PROGRAM, venv.cwd / "prog.c")
    _run(["gcc", "-Wall", "-Werror", cflags, "prog.c", "-o", "prog"], cwd=venv.cwd, env=venv.with_gcc())
    r = subprocess.run(
        [venv.bin("accel"), "trace", "--json", "-o", "trace.jsonl", "--", "./prog"],
        cwd=venv.cwd,
        env=venv.env,  # no compiler: the interposer is the wheel's
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 7, r.stderr  # the traced program's exit status
    events = [json.loads(line) for line in (venv.cwd / "trace.jsonl").read_text().splitlines()]
    assert [(e["ioctl"], e["errno"]) for e in events] == [("DRM_IOCTL_VNPU_GET_PARAM", "ENOTTY")]
    assert list(Path(venv.env["VNPU_CACHE_DIR"]).glob("trace-*")) == []


ASM = """\
TENSOR slot=0 dtype=INT8 va=0x100000 n=1 h=1 w=1 c=64 stride_c=1
TENSOR slot=1 dtype=INT8 va=0x200040 n=1 h=1 w=1 c=64 stride_c=1
COPY src=0 dst=1
END
"""


def test_firmware_and_stream_tools(venv: Venv) -> None:
    image = venv.site / "uapi" / "firmware" / "vnpu" / "vnpu_fw.bin"
    assert "signature valid" in venv.run(venv.bin("vnpu-fw"), "verify").stdout
    assert "signature valid" in venv.run(venv.bin("vnpu-fw"), "verify", str(image)).stdout
    rec = json.loads(venv.run(venv.bin("vnpu-fw"), "inspect", "--json").stdout)
    assert rec["signature"].startswith("Ed25519, valid")
    venv.run(venv.bin("vnpu-fw"), "install", "--dest", "lib-firmware")
    assert (venv.cwd / "lib-firmware" / "vnpu" / "vnpu_fw.bin").read_bytes() == image.read_bytes()
    venv.run(venv.bin("vnpu-asm"), "asm", "-", "-o", "a.bin", input=ASM)
    text = venv.run(venv.bin("vnpu-asm"), "disasm", "a.bin", "--no-annotate").stdout
    venv.run(venv.bin("vnpu-asm"), "asm", "-", "-o", "b.bin", input=text)
    assert (venv.cwd / "a.bin").read_bytes() == (venv.cwd / "b.bin").read_bytes()


def test_qemu_tests_outside_a_checkout_says_so_and_changes_nothing(venv: Venv) -> None:
    before = sorted(p.name for p in (venv.root / "bin").iterdir())
    r = subprocess.run(
        [venv.bin("python"), "-m", "qemu_tests"], cwd=venv.cwd, env=venv.env, capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert (
        r.stderr.startswith("python -m qemu_tests needs a checkout of vnpu (") and r.stderr.count("\n") == 1
    )
    assert not (venv.site / "build").exists()  # no results or module build beside the package
    assert sorted(p.name for p in (venv.root / "bin").iterdir()) == before  # no pip install of virtme-ng
