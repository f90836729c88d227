"""Delegate options: the ``{key: value}`` strings ``load_delegate(path, options)`` passes in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from libaccel.compiler import partition
from vnpu_common import config

LOG_LEVELS = config.LOG_LEVELS
#: The log level when the ``log_level`` option is absent (for hosts whose options you cannot change).
LOG_LEVEL_ENV = config.DELEGATE_LOG_LEVEL.name
#: Mesa Teflon's switch, honoured too: a comma list of flags of which ``verbose`` counts here.
TEFLON_DEBUG_ENV = "TEFLON_DEBUG"

OPTION_HELP = {
    "device": "the NPU: a device node path (/dev/accel/accel0), 'shim' (in-process), or 'kernel' "
    "(the first kernel device); default: $VNPU_DEVICE, else the first kernel device, else the shim",
    "cache_dir": "directory of the compile cache (default: $VNPU_COMPILE_CACHE, else ~/.cache/vnpu/compile)",
    "log_level": f"quiet | info | verbose (verbose prints the placement report); default ${LOG_LEVEL_ENV}, "
    f"else verbose when ${TEFLON_DEBUG_ENV} has 'verbose', else info",
    "allow_ops": "comma list of TFLite op names; only these may run on the NPU",
    "deny_ops": "comma list of TFLite op names that stay on the CPU",
    "strict": "true | false: a planner or compile error fails the delegate's Prepare (the interpreter is "
    f"not created) instead of leaving those nodes on the CPU; for tests; default ${partition.STRICT_ENV}, "
    "else false",
    "placement_file": "file the placement is written to as JSON at every Prepare (node, op, npu, reason), "
    "for tools that run a model and report where its nodes ran; its directory must exist",
}


class OptionError(ValueError):
    """An unknown option or a bad value; the message is what the runtime reports."""


@dataclass(frozen=True)
class DelegateOptions:
    device: str | None = None
    cache_dir: Path | None = None
    log_level: str = "info"
    allow_ops: frozenset[str] | None = None
    deny_ops: frozenset[str] = field(default_factory=frozenset)
    placement_file: Path | None = None
    strict: bool = False

    @property
    def verbose(self) -> bool:
        return self.log_level == "verbose"

    @property
    def quiet(self) -> bool:
        return self.log_level == "quiet"


def _op_list(key: str, value: str, known_ops: frozenset[str]) -> frozenset[str]:
    names = [n.strip().upper() for n in value.split(",") if n.strip()]
    if not names:
        raise OptionError(f"vnpu delegate: option {key!r} is empty; give a comma list of TFLite op names")
    unknown = sorted(n for n in names if n not in known_ops)
    if unknown:
        raise OptionError(
            f"vnpu delegate: option {key!r}: unknown TFLite op name(s) {', '.join(unknown)} "
            f"(names as in the TFLite schema, e.g. CONV_2D,ADD)"
        )
    return frozenset(names)


def default_log_level(environ: Mapping[str, str] = os.environ) -> str:
    """The log level the environment asks for: $VNPU_DELEGATE_LOG_LEVEL, then $TEFLON_DEBUG, else info."""
    try:
        level = config.DELEGATE_LOG_LEVEL.get(environ)
    except config.ConfigError as e:
        raise OptionError(f"vnpu delegate: {e}") from None
    if level is not None:
        return level
    flags = {f.strip() for f in environ.get(TEFLON_DEBUG_ENV, "").split(",")}
    return "verbose" if "verbose" in flags else "info"


def parse_options(
    pairs: list[tuple[str, str]], known_ops: frozenset[str], environ: Mapping[str, str] = os.environ
) -> DelegateOptions:
    """Validate ``pairs`` (in the order given) into :class:`DelegateOptions`; :class:`OptionError` if bad.

    An absent ``log_level`` comes from the environment (:func:`default_log_level`)."""
    values: dict[str, object] = {}
    for key, value in pairs:
        if key not in OPTION_HELP:
            raise OptionError(
                f"vnpu delegate: unknown option {key!r}; known options: " + ", ".join(sorted(OPTION_HELP))
            )
        if key in values:
            raise OptionError(f"vnpu delegate: option {key!r} given twice")
        if key == "device":
            if not value:
                raise OptionError("vnpu delegate: option 'device' is empty; give a node path, shim or kernel")
            if value not in ("shim", "kernel") and not value.startswith("/"):
                raise OptionError(
                    f"vnpu delegate: option 'device' = {value!r}: expected an absolute device "
                    "node path (/dev/accel/accelN), 'shim' or 'kernel'"
                )
            values[key] = value
        elif key == "cache_dir":
            if not value:
                raise OptionError("vnpu delegate: option 'cache_dir' is empty")
            path = Path(value).expanduser()
            if path.exists() and not path.is_dir():
                raise OptionError(f"vnpu delegate: option 'cache_dir' = {value!r} is not a directory")
            values[key] = path
        elif key == "placement_file":
            if not value:
                raise OptionError("vnpu delegate: option 'placement_file' is empty")
            path = Path(value).expanduser()
            if not path.parent.is_dir():
                raise OptionError(f"vnpu delegate: option 'placement_file' = {value!r}: no such directory")
            values[key] = path
        elif key == "strict":
            try:
                values[key] = partition.parse_strict(value, "option 'strict'")
            except ValueError as e:
                raise OptionError(f"vnpu delegate: {e}") from None
        elif key == "log_level":
            if value not in LOG_LEVELS:
                raise OptionError(
                    f"vnpu delegate: option 'log_level' = {value!r}: expected one of " + ", ".join(LOG_LEVELS)
                )
            values[key] = value
        else:
            values[key] = _op_list(key, value, known_ops)
    if "log_level" not in values:
        values["log_level"] = default_log_level(environ)
    if "strict" not in values:
        try:
            values["strict"] = partition.strict_default(environ)
        except ValueError as e:
            raise OptionError(f"vnpu delegate: {e}") from None
    opts = DelegateOptions(**values)  # type: ignore[arg-type]
    if opts.allow_ops is not None and opts.allow_ops & opts.deny_ops:
        both = ", ".join(sorted(opts.allow_ops & opts.deny_ops))
        raise OptionError(f"vnpu delegate: op(s) {both} are in both allow_ops and deny_ops")
    return opts
