"""The on-disk compile cache: compiled partitions keyed by content hash + compiler + ISA version."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from libaccel.compiler.compiled import COMPILER_VERSION, CompiledPartition
from libaccel.compiler.graph import Graph
from libaccel.compiler.lower import compile_partition
from vnpu_common import config
from vnpu_common.cache import cache_root

ENV_CACHE_DIR = config.COMPILE_CACHE.name


def default_cache_dir() -> Path:
    """$VNPU_COMPILE_CACHE, else ``compile`` in the project's cache (:func:`vnpu_common.cache.cache_root`)."""
    return config.COMPILE_CACHE.get() or cache_root() / "compile"


def cache_key(
    graph: Graph, node_indices: Sequence[int], isa_version: int, outputs: Sequence[int] | None = None
) -> str:
    """SHA-256 over the partition's content, the requested outputs, the compiler and ISA versions."""
    h = hashlib.sha256()
    h.update(graph.content_hash(tuple(node_indices)).encode())
    h.update(repr((tuple(outputs) if outputs is not None else None, COMPILER_VERSION, isa_version)).encode())
    return h.hexdigest()


def model_key(graph: Graph, isa_version: int) -> str:
    """SHA-256 over a whole graph's content (every node, tensor and constant byte), the compiler and
    ISA versions: one pass over the model, from which :func:`partition_key` derives every partition's
    key without hashing the constants again."""
    h = hashlib.sha256(b"vnpu-model\0")
    h.update(graph.content_hash().encode())
    h.update(repr((COMPILER_VERSION, isa_version)).encode())
    return h.hexdigest()


def partition_key(model: str, node_indices: Sequence[int], outputs: Sequence[int] | None = None) -> str:
    """The key of the partition of ``node_indices`` (with ``outputs``) of the model keyed ``model``
    (:func:`model_key`). The model key covers the whole graph, so it covers any part of it."""
    h = hashlib.sha256(b"vnpu-partition\0")
    h.update(repr((model, tuple(node_indices), tuple(outputs) if outputs is not None else None)).encode())
    return h.hexdigest()


class CompileCache:
    """A directory of compiled partitions, one file per key (written atomically)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.vnpucp"

    def get(self, key: str, weights_in_file: bool = False) -> CompiledPartition | None:
        """The cached partition, or None (missing, or unreadable: a stale or torn file is ignored).

        ``weights_in_file``: leave the weights in the file (:class:`WeightsFile`), for a
        :class:`PartitionRunner` to read straight into its BO."""
        try:
            if weights_in_file:
                return CompiledPartition.from_file(self.path(key))
            return CompiledPartition.from_bytes(self.path(key).read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, compiled: CompiledPartition) -> None:
        self._write(self.path(key), *compiled.to_chunks())

    def support_path(self, key: str) -> Path:
        return self.directory / f"{key}.vnpusup"

    def get_support(self, key: str) -> dict[int, tuple[bool, str]]:
        """The support-check results cached for the model keyed ``key`` (:func:`model_key`): node
        index -> (runs on the NPU, why not). Empty when missing or unreadable."""
        try:
            doc = json.loads(self.support_path(key).read_bytes())
            if doc.get("compiler_version") != COMPILER_VERSION:
                return {}
            return {int(n): (bool(ok), str(why)) for n, (ok, why) in doc["nodes"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def put_support(self, key: str, results: dict[int, tuple[bool, str]]) -> None:
        doc = {
            "compiler_version": COMPILER_VERSION,
            "nodes": {str(n): [ok, why] for n, (ok, why) in sorted(results.items())},
        }
        self._write(self.support_path(key), json.dumps(doc).encode())

    def _write(self, path: Path, *chunks: bytes | bytearray | memoryview) -> None:
        """Write ``chunks`` to ``path`` atomically (a reader sees the old file or the whole new one)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def compile_cached(
    graph: Graph,
    node_indices: Sequence[int],
    isa_version: int,
    cache: CompileCache | None = None,
    outputs: Sequence[int] | None = None,
    key: str | None = None,
    weights_in_file: bool = False,
) -> tuple[CompiledPartition, bool]:
    """compile_partition through ``cache`` (default directory if None); returns (partition, cache_hit).

    ``key`` is the cache key when the caller has one (:func:`partition_key` of a :func:`model_key`);
    by default :func:`cache_key` hashes the partition. ``weights_in_file``: the returned
    partition's weights stay in the cache file (:class:`WeightsFile`) when it has one.
    """
    cache = cache if cache is not None else CompileCache()
    if key is None:
        key = cache_key(graph, node_indices, isa_version, outputs)
    hit = cache.get(key, weights_in_file)
    if hit is not None:
        return hit, True
    compiled = compile_partition(graph, node_indices, isa_version, outputs)
    try:
        cache.put(key, compiled)
    except OSError as e:
        # The cache only saves time: a read-only or full disk must not fail the compile.
        warnings.warn(
            f"compile cache {cache.directory} not written ({e}); set ${ENV_CACHE_DIR}", stacklevel=2
        )
        return compiled, False
    if weights_in_file:
        # Drop the compiler's copy of the weights now: the upload reads them back from the file
        # (page cache), so they are never in memory twice.
        stored = cache.get(key, weights_in_file=True)
        if stored is not None:
            return stored, False
    return compiled, False
