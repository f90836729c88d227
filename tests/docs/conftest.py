"""tests/docs: the README's and docs' blocks run (docs/contributing.md)."""

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--docs-slow", action="store_true", help="also run the docs' blocks marked slow")
