"""EP context models: a fused node's compiled partition kept in an EPContext node, run again without
compiling.

With the session config entry ``ep.context_enable=1`` onnxruntime writes an EPContext model
(``ep.context_file_path``, default ``<model>_ctx.onnx``) in which each node the EP fused is one
``com.microsoft`` EPContext node that the EP made in Compile. vnpu's node carries:

``source``
    ``VnpuExecutionProvider``: the node is this EP's.
``ep_cache_context``
    The payload: the partition's :class:`~libaccel.compiler.compiled.CompiledPartition`
    serialization (the compile cache's file format: magic ``VNPUCP01``, the compiler's version in its
    header). ``embed_mode`` 1 (``ep.context_embed_mode=1``): the payload itself, base64-encoded
    (onnxruntime copies a string attribute up to its first NUL byte). ``embed_mode`` 0 (onnxruntime's
    default): the name of a file beside the EPContext model that holds the payload as is, exactly a
    compile-cache entry.
``notes``
    JSON: ``{"vnpu_ep_context": CONTEXT_VERSION, "inputs": [...], "outputs": [...]}``, how each of
    the node's inputs and outputs meets the partition (:class:`vnpu_ort_ep.plugin.Edge`).
``ep_sdk_version``, ``partition_name``, ``main_context`` (1), ``embed_mode``.

Loading such a model, GetCapability claims the EP's EPContext nodes and Compile loads each payload
into a runner: no front end, no compiler, no compile cache. A payload of another context version,
another compiler version or for another ISA is refused, naming both versions.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from libaccel.compiler.compiled import COMPILER_VERSION, CompiledPartition

CONTEXT_VERSION = 1
SDK_VERSION = f"vnpu compiler {COMPILER_VERSION}"
EP_CONTEXT_OP = "EPContext"
EP_CONTEXT_DOMAIN = "com.microsoft"
PAYLOAD_SUFFIX = ".vnpucp"  # the compile cache's format


class ContextError(ValueError):
    """An EPContext node the EP cannot run, and why."""


def context_model_path(model_path: str, configured: str) -> Path | None:
    """Where onnxruntime writes the EPContext model: ``ep.context_file_path``, else beside the
    model as ``<model>_ctx.onnx``; None when neither is known (a model given as bytes)."""
    if configured:
        return Path(configured)
    if not model_path:
        return None
    p = Path(model_path)
    return p.with_name(p.stem + "_ctx.onnx")


def make_attributes(
    ep_name: str,
    partition_name: str,
    compiled: CompiledPartition,
    inputs: list[Any],
    outputs: list[Any],
    embed: bool,
    ctx_path: Path | None,
) -> dict[str, str | int]:
    """The EPContext node's attributes for a compiled fused node; with ``embed`` False the payload is
    written now, beside ``ctx_path``."""
    payload = compiled.to_bytes()
    if embed:
        cache_context = base64.b64encode(payload).decode()
    else:
        if ctx_path is None:
            raise ContextError(
                "ep.context_embed_mode=0 needs the EPContext model's path: set ep.context_file_path "
                "(the model was not read from a file)"
            )
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in partition_name)
        file = ctx_path.with_name(f"{ctx_path.stem}_{safe}{PAYLOAD_SUFFIX}")
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(payload)
        cache_context = file.name
    notes = {
        "vnpu_ep_context": CONTEXT_VERSION,
        "inputs": [asdict(e) for e in inputs],
        "outputs": [asdict(e) for e in outputs],
    }
    return {
        "source": ep_name,
        "main_context": 1,
        "embed_mode": 1 if embed else 0,
        "ep_cache_context": cache_context,
        "ep_sdk_version": SDK_VERSION,
        "partition_name": partition_name,
        "notes": json.dumps(notes),
    }


def is_ours(node: Any, ep_name: str) -> bool:
    """Whether an onnx NodeProto is an EPContext node this EP made."""
    if node.op_type != EP_CONTEXT_OP or node.domain != EP_CONTEXT_DOMAIN:
        return False
    source = next((a.s for a in node.attribute if a.name == "source"), b"")
    return source.decode(errors="replace") == ep_name


def load(node: Any, model_path: str, isa_version: int) -> tuple[CompiledPartition, list[dict], list[dict]]:
    """(the compiled partition, input edges, output edges) of one of the EP's EPContext nodes (an
    onnx NodeProto), checked; :class:`ContextError` names what does not fit."""
    import onnx

    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    label = f"vnpu EP: EPContext node {node.name!r}"
    text = attrs.get("notes", b"")
    try:
        notes = json.loads(text.decode() if isinstance(text, bytes) else text)
        version = notes["vnpu_ep_context"]
        inputs, outputs = list(notes["inputs"]), list(notes["outputs"])
    except (ValueError, KeyError, TypeError):
        raise ContextError(f"{label}: its 'notes' are not a vnpu EP context description") from None
    if version != CONTEXT_VERSION:
        raise ContextError(
            f"{label}: EP context version {version}; this EP reads version {CONTEXT_VERSION}: "
            "compile the original model again (ep.context_enable=1)"
        )
    raw = attrs.get("ep_cache_context", b"")
    embed = int(attrs.get("embed_mode", 1))
    try:
        if embed == 1:
            payload = base64.b64decode(raw, validate=True)
        elif embed == 0:
            if not model_path:
                raise ContextError(f"{label}: its payload is a file, and the model has no path to find it by")
            name = raw.decode() if isinstance(raw, bytes) else raw
            file = Path(model_path).parent / name
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise ContextError(f"{label}: payload file {name!r} is not a name beside the model")
            try:
                payload = file.read_bytes()
            except OSError as e:
                raise ContextError(f"{label}: payload file {str(file)!r}: {e.strerror}") from None
        else:
            raise ContextError(f"{label}: embed_mode {embed}: expected 0 or 1")
        compiled = CompiledPartition.from_bytes(payload)
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        if isinstance(e, ContextError):
            raise
        raise ContextError(
            f"{label}: its payload does not load ({e}): compile the original model again "
            f"(ep.context_enable=1) with this EP ({SDK_VERSION})"
        ) from None
    if compiled.isa_version != isa_version:
        raise ContextError(
            f"{label}: compiled for ISA version {compiled.isa_version:#x}, the device runs "
            f"{isa_version:#x}: compile the original model again on this device"
        )
    return compiled, inputs, outputs
