"""Extra arguments for the guest kernel's command line: ``--append`` and a matrix entry's ``[ARGS]``.

    python -m qemu_tests --append 'swiotlb=65536,force' --suites tests/kernel

The harness passes them to ``vng --append``, which hands each word to
virtme-run as a ``--kopt``; virtme-ng puts them after its own arguments.
The guest saves its ``/proc/cmdline`` in the results directory
(``cmdline.txt``), and the harness checks that every word arrived (the
kernel silently cuts a command line longer than its limit).
docs/qemu_tests.md describes the option.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

# virtme-ng sets these itself: the root filesystem, the init that runs the harness's command, and
# the console the harness reads. Changing them would boot a guest the harness cannot reach.
RESERVED = ("root", "rootfstype", "rootflags", "init", "rdinit", "console")
RESERVED_PREFIXES = ("virtme_", "virtme.")
# x86's COMMAND_LINE_SIZE is 2048 bytes, and virtme-ng's own arguments (mounts, consoles, the base64
# of the guest command) take most of it: about 1100 bytes (the guest command's own arguments travel
# in a file, harness.GUEST_ARGS), and the harness's module blacklist 215 more
# (harness.GUEST_MODULE_BLACKLIST). The extra arguments get what is left, with a margin.
MAX_BYTES = 256


def _check_word(word: str) -> None:
    if not word.isascii() or not word.isprintable():
        raise ValueError(f"kernel argument {word!r}: only printable ASCII goes on a kernel command line")
    if word.startswith("-"):
        raise ValueError(
            f"kernel argument {word!r}: a kernel parameter does not start with '-' "
            "(what follows '--' goes to init)"
        )
    if '"' in word:
        raise ValueError(f"kernel argument {word!r}: virtme-ng cannot pass a '\"' to the kernel")
    key = word.split("=", 1)[0]
    if key in RESERVED or key.startswith(RESERVED_PREFIXES):
        raise ValueError(
            f"kernel argument {word!r}: virtme-ng sets {key} itself (the harness boots through it)"
        )


def parse(text: str) -> tuple[str, ...]:
    """The words of ``text`` (shell-style quoting), each checked; ValueError says what is unusable.

    An empty string is no arguments.
    """
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:
        raise ValueError(f"kernel arguments {text!r}: {e}") from None
    for word in words:
        _check_word(word)
    size = len(" ".join(words))
    if size > MAX_BYTES:
        raise ValueError(
            f"kernel arguments: {size} bytes, more than the {MAX_BYTES} left beside virtme-ng's own"
        )
    return words


def join(words: Iterable[str]) -> str:
    """The words as one string that ``parse`` reads back (``swiotlb=65536,force nokaslr``)."""
    return shlex.join(words)


def split_cmdline(cmdline: str) -> list[str]:
    """A kernel command line (``/proc/cmdline``) in words, as the kernel reads it: spaces split,
    double quotes group and are dropped."""
    words: list[str] = []
    word: list[str] = []
    quoted = started = False
    for ch in cmdline:
        if ch == '"':
            quoted, started = not quoted, True
        elif ch.isspace() and not quoted:
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(ch)
            started = True
    if started:
        words.append("".join(word))
    return words


def missing(words: Sequence[str], cmdline: str) -> list[str]:
    """The words that are not on ``cmdline``."""
    present = set(split_cmdline(cmdline))
    return [w for w in words if w not in present]
