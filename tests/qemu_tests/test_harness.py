"""The QEMU harness's command lines: what it asks vng and QEMU for."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import delegate_teflon
from device_model.qemu_server import parse_size
from qemu_tests import guest_run, harness, preflight
from uapi import hw_layout
from vnpu_common import cache


def _qemu_options(opts: str) -> list[tuple[str, str, dict[str, str]]]:
    """``-flag kind,key=value,...`` pairs of a QEMU command line: (flag, kind, {key: value})."""
    words = shlex.split(opts)
    out = []
    for flag, value in zip(words[::2], words[1::2], strict=True):
        assert flag.startswith("-"), f"not a QEMU option: {flag!r}"
        kind, _, rest = value.partition(",") if "=" not in value.split(",")[0] else ("", "", value)
        props = dict(p.split("=", 1) if "=" in p else (p, "") for p in rest.split(",") if p)
        out.append((flag, kind, props))
    return out


def _mounts(script: str) -> dict[str, dict[str, str]]:
    """mount tag -> {"target": ..., "options": ...} of the guest script's 9p mounts."""
    out = {}
    for part in script.split(";"):
        words = [w for w in shlex.split(part) if not w.startswith("2>")]
        if words[:3] == ["mount", "-t", "9p"]:
            out[words[-2]] = {"target": words[-1], "options": words[words.index("-o") + 1]}
    return out


def test_vng_command_is_tcg_with_shared_ram_and_ivshmem() -> None:
    kernel = Path("/boot/vmlinuz-6.12.117+deb12-amd64")
    cmd = harness.vng_command(["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, kernel)
    assert cmd[cmd.index("--run") + 1] == str(kernel)
    assert "--disable-kvm" in cmd and "-enable-kvm" not in " ".join(cmd)
    assert cmd[cmd.index("--memory") + 1] == harness.GUEST_RAM
    assert cmd[cmd.index("--rwdir") + 1] == f"{harness.GUEST_OUT}=/tmp/o"
    (opts,) = [c.removeprefix("--qemu-opts=") for c in cmd if c.startswith("--qemu-opts=")]
    options = _qemu_options(opts)
    by_id = {p.get("id"): (flag, kind, p) for flag, kind, p in options if "id" in p}
    # Guest RAM is a shared file the device model maps: it reads and writes guest memory directly.
    flag, kind, ram = by_id["vnpu-ram"]
    assert (flag, kind) == ("-object", "memory-backend-file")
    assert ram == {"id": "vnpu-ram", "size": harness.GUEST_RAM, "share": "on", "mem-path": "/dev/shm/r"}
    assert ("-machine", "", {"memory-backend": "vnpu-ram"}) in options
    # The NPU: an ivshmem-doorbell device on the device model's socket, two MSI-X vectors.
    assert by_id["vnpu-ivs"] == ("-chardev", "socket", {"path": "/tmp/s.sock", "id": "vnpu-ivs"})
    (npu,) = [p for flag, kind, p in options if (flag, kind) == ("-device", "ivshmem-doorbell")]
    assert npu == {"chardev": "vnpu-ivs", "vectors": str(hw_layout.NUM_VECTORS)}
    # The repo (and its venv) is re-mounted read-only with a page cache: imports under TCG are slow.
    flag, kind, fs0 = by_id["vnpu-fs0"]
    assert (flag, kind) == ("-fsdev", "local")
    assert fs0["path"] == str(harness.REPO) and fs0["readonly"] == "on" and fs0["security_model"] == "none"
    assert cmd[-2] == "--exec" and cmd[-1].endswith("; exec true")
    mount = _mounts(cmd[-1])["vnpu-fs0"]
    assert mount["target"] == str(harness.REPO)
    assert {"cache=loose", "ro"} <= set(mount["options"].split(","))


def test_guest_command_uses_the_venv_python_by_absolute_path() -> None:
    args = harness.build_parser().parse_args(["--exec", "accel info"])
    cmd = harness.guest_command(args)
    assert Path(cmd[0]).is_absolute() and cmd[1:3] == ["-m", "qemu_tests.guest_run"]
    assert cmd[-2:] == ["--exec", "accel info"]
    args = harness.build_parser().parse_args([])
    cmd = harness.guest_command(args)
    assert cmd[cmd.index("--suites") + 1 :] == list(harness.DEFAULT_SUITES)


@pytest.mark.parametrize(
    ("text", "value"), [("1G", 1 << 30), ("512M", 512 << 20), ("4096", 4096), ("8k", 8192)]
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "1T", "-1G", "x"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_sigterm_to_the_harness_takes_the_guest_down(tmp_path: Path) -> None:
    """A guest (here a stand-in shell) runs in its own session: SIGTERM to the harness must end it too."""
    pidfile = tmp_path / "guest.pid"
    code = (
        "from pathlib import Path; from qemu_tests import harness; "
        f"harness.boot(['sh', '-c', 'echo $$ > {pidfile}; exec sleep 60'], 120, "
        f"harness.Clock(quiet=True), Path('{tmp_path / 'console.log'}'))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=harness.REPO)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    guest = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    # Gone, or a zombie nobody has reaped yet (the harness, its parent, has exited; in a container
    # the PID 1 that inherits it may never reap): either way it no longer runs.
    deadline = time.monotonic() + 10
    while _runs(guest) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _runs(guest), f"the guest stand-in {guest} still runs after the harness took SIGTERM"


def _runs(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_isolated_pass_collects_only_the_modules_that_have_isolated_tests(tmp_path: Path) -> None:
    from qemu_tests import guest_run

    (tmp_path / "test_a.py").write_text("import pytest\n\n@pytest.mark.isolated\ndef test_x(): pass\n")
    (tmp_path / "test_b.py").write_text("def test_y(): pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_c.py").write_text("import pytest\npytestmark = pytest.mark.isolated\n")
    one = str(tmp_path / "test_b.py")
    assert guest_run.isolated_modules([str(tmp_path), one]) == [
        str(tmp_path / "sub" / "test_c.py"),
        str(tmp_path / "test_a.py"),
        one,
    ]
    # The repository's own: every module with an isolated test, and no other.
    kernel = guest_run.isolated_modules([str(harness.REPO / "tests" / "kernel")])
    assert kernel and all("mark.isolated" in Path(m).read_text() for m in kernel)


def test_guest_run_reads_its_arguments_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness writes guest_run's arguments to the results directory and passes only the file on
    the kernel command line (virtme-ng's virtme.exec=, 2048 bytes in all)."""
    from qemu_tests import guest_run

    seen = []
    monkeypatch.setattr(guest_run.argparse.ArgumentParser, "parse_args", lambda self, argv: seen.append(argv))
    args = tmp_path / harness.GUEST_ARGS
    args.write_text(json.dumps(["--out", "/tmp/o", "--repo", "/r", "--suites", "tests/kernel"]))
    with pytest.raises(AttributeError):  # parse_args returned None: enough to see what it was given
        guest_run.main(["--args-file", str(args)])
    assert seen == [["--out", "/tmp/o", "--repo", "/r", "--suites", "tests/kernel"]]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HOME": "/tmp/somehome"}, "/tmp/somehome/.cache/vnpu"),
        ({"HOME": "/tmp/somehome", "XDG_CACHE_HOME": "/srv/xdg"}, "/srv/xdg/vnpu"),
        ({"HOME": "/tmp/somehome", "XDG_CACHE_HOME": "/srv/xdg", "VNPU_CACHE_DIR": "/srv/c"}, "/srv/c"),
    ],
)
def test_the_guest_uses_the_hosts_cache_whatever_home(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    for name in ("HOME", "XDG_CACHE_HOME", "VNPU_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kernel = Path("/boot/vmlinuz-6.12.117+deb12-amd64")
    cmd = harness.vng_command(["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, kernel)
    # The host's cache root appears read-only at one place in the guest (its /tmp is a tmpfs, its
    # HOME root's), and guest_run is told where.
    assert f"--rodir={harness.GUEST_CACHE}={expected}" in cmd
    guest = harness.guest_command(harness.build_parser().parse_args(["--exec", "true"]))
    assert guest[guest.index("--cache-dir") + 1] == harness.GUEST_CACHE
    # In the guest: every cache_root() (libteflon.so's, the MAC array's) is that directory, whatever
    # the guest's HOME; the compile cache stays writable in the guest's /tmp.
    guest_env = {"HOME": "/root"}
    guest_run.set_environment(guest_env, Path("/venv/bin"), Path("/m/vnpu.ko"), Path(harness.GUEST_CACHE))
    monkeypatch.setattr(os, "environ", guest_env)
    assert cache.cache_root() == Path(harness.GUEST_CACHE)
    assert guest_env["VNPU_COMPILE_CACHE"] == "/tmp/vnpu-compile-cache"
    assert delegate_teflon.default_build_dir().parent == Path(harness.GUEST_CACHE)


def test_a_cache_path_qemu_would_split_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VNPU_CACHE_DIR", "/srv/a,b")
    kernel = Path("/boot/vmlinuz-6.12.117+deb12-amd64")
    with pytest.raises(harness.HarnessError, match="VNPU_CACHE_DIR"):
        harness.vng_command(["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, kernel)


def test_outside_a_checkout_main_says_so_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(harness, "CHECKOUT_FILES", (tmp_path / "kernel" / "drivers_accel_stub" / "Makefile",))

    def must_not_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("the harness went on outside a checkout")

    for name in ("install", "results_dir", "run_kernel", "run_matrix"):
        monkeypatch.setattr(harness, name, must_not_run)
    assert harness.main([]) == preflight.EXIT_MISSING
    err = capsys.readouterr().err
    assert err.startswith("python -m qemu_tests needs a checkout of vnpu (") and err.count("\n") == 1
    assert harness.checkout_missing() is not None
    monkeypatch.undo()
    assert harness.checkout_missing() is None  # this checkout has them


def test_a_silent_guest_command_is_said_to_be_alive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A guest line resets the count; silence longer than ``alive_every`` gets one line per period."""
    cmd = ["sh", "-c", "sleep 1.6; echo one; sleep 0.3; echo two"]
    booted = harness.boot(cmd, 60, harness.Clock(), tmp_path / "console.log", alive_every=0.5)
    assert booted == harness.BootResult(0, False)
    out = capsys.readouterr().out.splitlines()
    alive = [line for line in out if "guest: still running, " in line]
    assert 2 <= len(alive) <= 4, out
    assert re.fullmatch(r"\[host +[\d.]+s\] guest: still running, \d+ s \(no output for \d+ s\)", alive[0])
    assert out.index("one") > out.index(alive[-1]) and out[-1] == "two"  # none after "one": 0.3 s < 0.5 s
