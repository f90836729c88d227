"""Option parsing and the runtime layout table (pure functions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate_teflon.context_reader import KNOWN_OPS
from delegate_teflon.options import DelegateOptions, OptionError, parse_options
from delegate_teflon.runtime_abi import layout_for


def test_defaults() -> None:
    """No options and an empty environment: every value is the documented default, spelled out here
    (not read back from the dataclass) and independent of the caller's environment."""
    opts = parse_options([], KNOWN_OPS, environ={})
    assert opts.device is None and opts.cache_dir is None
    assert opts.log_level == "info" and not opts.verbose and not opts.quiet
    assert opts.allow_ops is None and opts.deny_ops == frozenset() and opts.placement_file is None
    assert opts == DelegateOptions()


def test_defaults_ignore_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit environment wins over os.environ (TEFLON_DEBUG set by the caller does not leak in)."""
    monkeypatch.setenv("TEFLON_DEBUG", "verbose")
    monkeypatch.setenv("VNPU_DELEGATE_LOG_LEVEL", "quiet")
    assert parse_options([], KNOWN_OPS, environ={}).log_level == "info"


def test_all_options(tmp_path: Path) -> None:
    opts = parse_options(
        [
            ("device", "shim"),
            ("cache_dir", str(tmp_path)),
            ("log_level", "verbose"),
            ("allow_ops", "conv_2d, ADD"),
            ("deny_ops", "MUL"),
            ("placement_file", str(tmp_path / "p.json")),
        ],
        KNOWN_OPS,
    )
    assert opts.device == "shim" and opts.cache_dir == tmp_path and opts.verbose
    assert opts.allow_ops == {"CONV_2D", "ADD"} and opts.deny_ops == {"MUL"}
    assert opts.placement_file == tmp_path / "p.json"


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("colour", "red")], "unknown option 'colour'"),
        ([("log_level", "loud")], "'log_level' = 'loud'"),
        ([("device", "accel0")], "'device' = 'accel0'"),
        ([("device", "")], "'device' is empty"),
        ([("allow_ops", "CONV_2D,NOT_AN_OP")], "NOT_AN_OP"),
        ([("deny_ops", " , ")], "'deny_ops' is empty"),
        ([("allow_ops", "ADD"), ("deny_ops", "ADD")], "both allow_ops and deny_ops"),
        ([("device", "shim"), ("device", "shim")], "given twice"),
        ([("placement_file", "")], "'placement_file' is empty"),
        ([("placement_file", "/no/such/dir/p.json")], "no such directory"),
    ],
)
def test_bad_options(pairs: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options(pairs, KNOWN_OPS)


def test_cache_dir_must_be_a_directory(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(OptionError, match="not a directory"):
        parse_options([("cache_dir", str(f))], KNOWN_OPS)


@pytest.mark.parametrize(
    ("dist", "version", "registration", "float_array"),
    [
        ("tflite-runtime", "2.14.0", 4, "inline"),
        ("tflite-runtime", "2.12.0", 3, "inline"),
        ("tflite-runtime", "2.9.1", 1, "inline"),
        ("ai-edge-litert", "2.3.0", 4, "inline"),
        ("tensorflow", "2.21.0", 4, "detect"),
        ("unknown", "?", 4, "detect"),
    ],
)
def test_layout_table(dist: str, version: str, registration: int, float_array: str) -> None:
    layout = layout_for(dist, version, "/x/lib.so")
    assert (layout.registration, layout.float_array) == (registration, float_array)
