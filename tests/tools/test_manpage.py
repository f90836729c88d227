"""accel's help a wheel user can read: every command says what it does with examples, and the man
page generated from the same parsers is committed current and ships in the wheel."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from libaccel.tools import cli

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "generate_manpage.py"
MAN_PAGE = ROOT / "libaccel" / "tools" / "man" / "accel.1"


def _generator() -> ModuleType:
    """The tool as a module, to point it at a private copy of the page."""
    spec = importlib.util.spec_from_file_location("generate_manpage", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_the_committed_man_page_is_current() -> None:
    r = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_check_mode_names_a_stale_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = _generator()
    page = tmp_path / "accel.1"
    page.write_text(gen.render().replace("strace of the device", "strace of the devise"))
    monkeypatch.setattr(gen, "MAN_PAGE", page)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert capsys.readouterr().err == "stale generated man page: accel.1; run tools/generate_manpage.py\n"
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0 and page.read_text() == gen.render()


def test_every_command_says_what_it_does_with_examples() -> None:
    commands = _commands()
    assert set(cli.COMMAND_HELP) == set(commands)  # a new command gets its description and examples
    for name, p in commands.items():
        text = p.format_help()
        assert "\nexamples:\n  accel " in text or "\nexamples:\n  sudo accel " in text, name
        for line in text.split("\nexamples:\n")[1].splitlines():
            assert line.startswith("  accel ") or line.startswith("  sudo accel "), (name, line)


def test_accel_help_points_at_the_manual_a_wheel_user_has() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "libaccel.tools.cli", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0
    flat = " ".join(r.stdout.split())
    assert "accel COMMAND --help" in flat and "man accel" in flat and "share/man/man1" in flat
    assert "examples: accel list accel info --device shim" in flat


def test_the_page_covers_every_command_and_option_and_renders_cleanly() -> None:
    page = MAN_PAGE.read_text()
    for name, p in _commands().items():
        assert f".SS accel {name}\n" in page
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings:
                escaped = option.replace("-", "\\-")
                assert f"\\fB{escaped}\\fR" in page, (name, option)
    assert ".SH EXIT STATUS" in page and "\\fB141\\fR" in page
    if shutil.which("groff") is None:
        pytest.skip("groff is not installed: the page's syntax is not checked")
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(MAN_PAGE)],
                       capture_output=True, text=True)  # fmt: skip
    assert (r.returncode, r.stderr) == (0, "")
