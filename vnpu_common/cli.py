"""The project's CLIs report a bad command line in one line and exit 2, never argparse's usage block."""

from __future__ import annotations

import argparse
from typing import NoReturn


class CommandLineError(Exception):
    """A command line argparse refused; the message is one line."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse that raises :attr:`usage_error` (one line) instead of printing usage and exiting.

    A CLI subclasses it to raise its own usage exception, and passes the subclass as the
    subparsers' ``parser_class`` too; its ``main`` prints the message and returns 2. An argument's
    own newline is shown as ``\\n`` so the message stays on its line."""

    usage_error: type[Exception] = CommandLineError
    prefix_prog = False  # start the message with the (sub)command's name: "accel bo create: ..."

    def error(self, message: str) -> NoReturn:
        one_line = message.replace("\n", "\\n")
        raise self.usage_error(f"{self.prog}: {one_line}" if self.prefix_prog else one_line)
