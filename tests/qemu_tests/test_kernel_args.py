"""Extra guest kernel arguments (--append): parsing, what vng gets, and what the results record."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qemu_tests import harness, kernel_args, ktap, preflight

SWIOTLB = "swiotlb=65536,force"
KERNEL = preflight.Kernel(
    "6.12.117+deb12-amd64",
    Path("/boot/vmlinuz-6.12.117+deb12-amd64"),
    Path("/lib/modules/6.12.117+deb12-amd64/build"),
)
# A guest's /proc/cmdline, shortened: virtme-ng's arguments, then the extra ones, then init.
CMDLINE = (
    "virtme_hostname=virtme-ng console=ttyS0 quiet loglevel=0 panic=-1 virtme.exec=`Y2QgL3dvcms=` "
    f'virtme_root_user=1 quiet loglevel=1 {SWIOTLB} "dyndbg=module vnpu +p" init=/usr/bin/virtme-ng-init\n'
)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (SWIOTLB, (SWIOTLB,)),
        (f"  {SWIOTLB}   nokaslr ", (SWIOTLB, "nokaslr")),
        ("'dyndbg=module vnpu +p' iommu.strict=1", ("dyndbg=module vnpu +p", "iommu.strict=1")),
        ("", ()),
    ],
)
def test_arguments_are_words_shell_style(text: str, words: tuple[str, ...]) -> None:
    assert kernel_args.parse(text) == words
    assert kernel_args.parse(kernel_args.join(words)) == words  # join reads back


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("swiotlb='65536,force", "No closing quotation"),
        ("--", "does not start with '-'"),
        ("-s", "does not start with '-'"),
        ("""'a="b c"'""", "cannot pass a '\"'"),
        ("init=/bin/sh", "virtme-ng sets init itself"),
        ("root=/dev/vda", "virtme-ng sets root itself"),
        ("console=tty0", "virtme-ng sets console itself"),
        ("virtme_user=nobody", "virtme-ng sets virtme_user itself"),
        ("virtme.exec=x", "virtme-ng sets virtme.exec itself"),
        ("'a\tb'", "printable ASCII"),
        ("mem=1G\u00a0", "printable ASCII"),
        ("x=" + "y" * kernel_args.MAX_BYTES, f"more than the {kernel_args.MAX_BYTES}"),
    ],
)
def test_unusable_arguments_are_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="kernel argument") as e:
        kernel_args.parse(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_kernel_reads_a_command_line_in_words() -> None:
    words = kernel_args.split_cmdline(CMDLINE)
    assert SWIOTLB in words and "dyndbg=module vnpu +p" in words and words[-1].startswith("init=")
    assert kernel_args.split_cmdline('  a "" b="c d"e ') == ["a", "", "b=c de"]
    assert kernel_args.missing([SWIOTLB, "dyndbg=module vnpu +p"], CMDLINE) == []
    assert kernel_args.missing([SWIOTLB, "nokaslr"], CMDLINE) == ["nokaslr"]
    assert kernel_args.missing(["swiotlb=force"], CMDLINE) == ["swiotlb=force"]  # whole words only


def test_append_is_repeatable_and_defaults_to_nothing() -> None:
    p = harness.build_parser()
    assert p.parse_args([]).kernel_args == []
    args = p.parse_args(["--append", SWIOTLB, "--append=nokaslr 'dyndbg=module vnpu +p'"])
    assert args.kernel_args == [SWIOTLB, "nokaslr", "dyndbg=module vnpu +p"]


@pytest.mark.parametrize("value", ["init=/bin/sh", "'unclosed", "nokaslr -s"])
def test_a_bad_append_is_a_one_line_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert harness.main([f"--append={value}", "--check"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m qemu_tests: argument --append/--cmdline: kernel argument"), line


def test_vng_gets_the_arguments_as_one_append_word() -> None:
    common = (["true"], Path("/tmp/s.sock"), Path("/dev/shm/r"), Path("/tmp/o"), 2, KERNEL.image, None)
    blacklist = f"modprobe.blacklist={','.join(harness.GUEST_MODULE_BLACKLIST)}"
    (plain,) = [c for c in harness.vng_command(*common) if c.startswith("--append")]
    assert shlex.split(plain.removeprefix("--append=")) == [blacklist]
    words = [SWIOTLB, "dyndbg=module vnpu +p"]
    cmd = harness.vng_command(*common, words)
    (append,) = [c for c in cmd if c.startswith("--append")]
    # vng splits the value shell-style and passes each word to virtme-run as a --kopt; the harness's
    # module blacklist first, the extra arguments after it.
    assert shlex.split(append.removeprefix("--append=")) == [blacklist, *words]
    assert cmd.index(append) < cmd.index("--exec")


def test_the_blacklist_leaves_the_modules_the_suites_load() -> None:
    """Only boot-time autoloads are kept out: the guest's own modprobes name their modules."""
    loaded_by_name = {"drm", "drm_shmem_helper", "gpu_sched", "vivid", "udmabuf"}
    assert not loaded_by_name & set(harness.GUEST_MODULE_BLACKLIST)
    # What the extra arguments may take is what is left beside it and virtme-ng's own arguments.
    word = f"modprobe.blacklist={','.join(harness.GUEST_MODULE_BLACKLIST)}"
    assert len(word) + kernel_args.MAX_BYTES <= 512


def test_check_names_the_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(preflight, "check_host", lambda **_: [preflight.Requirement("qemu", True, "/x")])
    assert harness.main(["--check", "--append", SWIOTLB]) == 0
    out = capsys.readouterr().out
    assert f"preflight: ok       kernel arguments: {SWIOTLB} (vng --append)" in out.splitlines()
    assert harness.main(["--check"]) == 0
    assert "kernel arguments" not in capsys.readouterr().out


def test_the_boot_record_names_the_kernel_and_its_command_line(tmp_path: Path) -> None:
    (tmp_path / harness.CMDLINE).write_text(CMDLINE)
    assert harness.record_boot(tmp_path, KERNEL.release, KERNEL, [SWIOTLB]) == []
    info = json.loads((tmp_path / harness.BOOT_INFO).read_text())
    assert info == {
        "kernel": KERNEL.release,
        "release": KERNEL.release,
        "image": str(KERNEL.image),
        "kernel_args": [SWIOTLB],
        "cmdline": CMDLINE.strip(),
    }
    # An argument that did not reach the guest is reported, so the run cannot claim it.
    assert harness.record_boot(tmp_path, None, KERNEL, [SWIOTLB, "nokaslr"]) == ["nokaslr"]
    # A guest that saved no command line (it failed early): recorded as unknown, nothing to compare.
    (tmp_path / harness.CMDLINE).unlink()
    assert harness.record_boot(tmp_path, None, KERNEL, [SWIOTLB]) == []
    assert json.loads((tmp_path / harness.BOOT_INFO).read_text())["cmdline"] is None


def test_junit_files_carry_the_kernel_and_its_arguments(tmp_path: Path) -> None:
    (tmp_path / "junit.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        '<testcase classname="tests.kernel.test_hang" name="test_timeout"/></testsuite></testsuites>'
    )
    (tmp_path / "junit-isolated.xml").write_text(
        '<testsuite name="pytest"><properties><property name="x" value="1"/></properties>'
        '<testcase classname="tests.kernel.test_lifecycle" name="test_reload"/></testsuite>'
    )
    props = {"kernel.release": KERNEL.release, "kernel.args": SWIOTLB, "kernel.cmdline": CMDLINE.strip()}
    harness.add_junit_properties(tmp_path, props)
    for name, before in (("junit.xml", {}), ("junit-isolated.xml", {"x": "1"})):
        root = ET.parse(tmp_path / name).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        assert suite is not None and suite[0].tag == "properties"  # the schema's place: first
        got = {p.get("name"): p.get("value") for p in suite[0].iter("property")}
        assert got == {**before, **props}
        # The results still read as before.
        (s,) = ktap.parse_junit((tmp_path / name).read_text())
        assert [c.outcome for c in s.cases] == ["pass"]
