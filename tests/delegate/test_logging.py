"""The delegate's log level from the environment (VNPU_DELEGATE_LOG_LEVEL, Mesa's TEFLON_DEBUG)."""

from __future__ import annotations

from typing import Any

import pytest

import modelgen as gen
from delegate_teflon.context_reader import KNOWN_OPS
from delegate_teflon.options import OptionError, default_log_level, parse_options


@pytest.mark.parametrize(
    ("environ", "level"),
    [
        ({}, "info"),
        ({"VNPU_DELEGATE_LOG_LEVEL": "quiet"}, "quiet"),
        ({"TEFLON_DEBUG": "verbose"}, "verbose"),
        ({"TEFLON_DEBUG": "other,verbose"}, "verbose"),
        ({"TEFLON_DEBUG": "other"}, "info"),
        ({"TEFLON_DEBUG": "verbose", "VNPU_DELEGATE_LOG_LEVEL": "quiet"}, "quiet"),
    ],
)
def test_level_from_the_environment(environ: dict[str, str], level: str) -> None:
    assert default_log_level(environ) == level
    assert parse_options([], KNOWN_OPS, environ).log_level == level
    # The option, when given, wins over the environment.
    assert parse_options([("log_level", "info")], KNOWN_OPS, environ).log_level == "info"


def test_bad_level_in_the_environment() -> None:
    with pytest.raises(OptionError, match="VNPU_DELEGATE_LOG_LEVEL='loud'"):
        parse_options([], KNOWN_OPS, {"VNPU_DELEGATE_LOG_LEVEL": "loud"})


def test_teflon_debug_makes_the_delegate_verbose(
    runtime: str,
    interp_mod: Any,
    lib_path: str,
    capfd: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VNPU_DELEGATE_LOG_LEVEL", raising=False)
    monkeypatch.setenv("TEFLON_DEBUG", "verbose")
    model = gen.fully_connected_model(1, 16, 4, seed=3)
    delegate = interp_mod.load_delegate(lib_path, {"device": "shim"})
    interp = gen.reference_interpreter(model, runtime, [delegate])
    interp.invoke()
    interp.invoke()
    err = capfd.readouterr().err
    assert "vnpu delegate: placement" in err
    assert err.count(": invoke ") == 2 and "invoke 2 took" in err
