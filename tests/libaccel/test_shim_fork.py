"""The shim after fork(): one device per process. A forked child's copies of the parent's files
refuse every call with a clear error, and the shim the child opens is its own, reading the
child's memory (the parent's /proc/self/mem, inherited, would read the parent's)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from bench.clients import EmptyJob
from libaccel.errors import DeviceClosed


def _in_child(body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``body``'s result, run in a forked child (its exceptions become {"error": ...})."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            try:
                result = body()
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                result = {"error": f"{type(e).__name__}: {e}"}
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_a_forked_child_gets_its_own_shim_and_the_parents_files_refuse() -> None:
    parent = EmptyJob("shim")
    try:
        parent.submit()
        parent.wait()  # the parent's user-memory reads are set up

        def child() -> dict[str, Any]:
            out: dict[str, Any] = {}
            try:
                parent.submit()
            except DeviceClosed as e:
                out["inherited"] = str(e)
            own = EmptyJob("shim")
            for _ in range(5):
                own.submit()
                own.wait()
            out["own_device"] = own.dev.backend.dev is not parent.dev.backend.dev
            out["round_trips"] = 5
            return out

        result = _in_child(child)
        assert "error" not in result, result["error"]
        assert "belongs to the parent process" in result["inherited"]
        assert result["own_device"] and result["round_trips"] == 5
        for _ in range(3):  # and the parent's file goes on
            parent.submit()
            parent.wait()
    finally:
        parent.close()
