"""Write the real-model corpus: ordinary Keras models, int8 through the TensorFlow converter.

Every model is full-integer post-training quantized from a representative dataset, the way
users make int8 models: ``optimizations=[DEFAULT]``, ``supported_ops=[TFLITE_BUILTINS_INT8]``
and int8 (or uint8, or float) inputs and outputs. Weights are random (seeded), and batch-norm
statistics are set from data (one training-mode pass with momentum 0 per batch-norm layer) so
that activations are not degenerate. The outputs are committed under ``tests/corpus/models`` so
the tests need no TensorFlow.

Needs TensorFlow: ``pip install -e '.[convert]'`` in a separate venv (TensorFlow pins its own
numpy and protobuf)::

    python3 -m venv .venv-convert && .venv-convert/bin/pip install -e '.[convert]'
    .venv-convert/bin/python -m tools.convert.make_corpus tests/corpus/models
    .venv-convert/bin/python -m tools.convert.make_corpus tests/corpus/models --only unet
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from vnpu_common.cli import OneLineArgumentParser, cli_main

SEED = 20261123
REPRESENTATIVE_SAMPLES = 24


@dataclass(frozen=True)
class CorpusModel:
    """One corpus entry: how it is built and what it exercises."""

    name: str
    source: str
    exercises: str
    io: str = "int8"  # int8, uint8 or float: the converter's inference input/output type
    build: Callable[[], Any] | None = None


def _keras():
    import keras

    keras.utils.set_random_seed(SEED)
    return keras


def mobilenet() -> Any:
    keras = _keras()
    return keras.applications.MobileNet(input_shape=(96, 96, 3), alpha=0.25, weights=None, classes=10)


def mobilenet_v2() -> Any:
    keras = _keras()
    return keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=10)


def mobilenet_v3_small() -> Any:
    keras = _keras()
    return keras.applications.MobileNetV3Small(
        input_shape=(96, 96, 3), alpha=0.75, weights=None, classes=10, include_preprocessing=False
    )


def mobilenet_v3_large() -> Any:
    keras = _keras()
    return keras.applications.MobileNetV3Large(
        input_shape=(96, 96, 3), alpha=0.75, weights=None, classes=10, include_preprocessing=False
    )


def efficientnet_b0() -> Any:
    keras = _keras()
    return keras.applications.EfficientNetB0(input_shape=(64, 64, 3), weights=None, classes=10)


def _conv_bn(keras: Any, x: Any, filters: int, kernel: int = 3, strides: int = 1, act: str = "relu") -> Any:
    L = keras.layers
    x = L.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False)(x)
    x = L.BatchNormalization()(x)
    return L.Activation(act)(x) if act else x


def resnet_small() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((64, 64, 3))
    x = _conv_bn(keras, inp, 16, 3, 2)
    for filters, strides in ((16, 1), (32, 2), (32, 1), (64, 2)):
        shortcut = x
        y = _conv_bn(keras, x, filters, 3, strides)
        y = _conv_bn(keras, y, filters, 3, 1, act="")
        if strides != 1 or shortcut.shape[-1] != filters:
            shortcut = _conv_bn(keras, x, filters, 1, strides, act="")
        x = L.Activation("relu")(L.Add()([y, shortcut]))
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(10)(x), name="resnet_small")


def densenet_small() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((48, 48, 3))
    x = _conv_bn(keras, inp, 16, 3, 2)
    for block in range(2):
        for _ in range(3):
            y = L.Activation("relu")(L.BatchNormalization()(x))
            y = L.Conv2D(12, 3, padding="same", use_bias=False)(y)
            x = L.Concatenate()([x, y])
        if block == 0:
            x = _conv_bn(keras, x, x.shape[-1] // 2, 1)
            x = L.AveragePooling2D(2)(x)
    x = L.GlobalAveragePooling2D()(L.Activation("relu")(L.BatchNormalization()(x)))
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="densenet_small")


def unet() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((64, 64, 3))
    e1 = _conv_bn(keras, inp, 16)
    e2 = _conv_bn(keras, L.MaxPooling2D()(e1), 32)
    e3 = _conv_bn(keras, L.MaxPooling2D()(e2), 64)
    d2 = L.Conv2DTranspose(32, 3, strides=2, padding="same")(e3)
    d2 = _conv_bn(keras, L.Concatenate()([d2, e2]), 32)
    d1 = L.UpSampling2D(interpolation="bilinear")(d2)
    d1 = _conv_bn(keras, L.Concatenate()([d1, e1]), 16)
    return keras.Model(inp, L.Conv2D(3, 1, activation="sigmoid")(d1), name="unet")


def ssd_head() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((64, 64, 3))
    x = _conv_bn(keras, inp, 16, 3, 2)
    x = _conv_bn(keras, x, 32, 3, 2)
    boxes, scores = [], []
    anchors, classes = 3, 5
    for i in range(3):
        x = _conv_bn(keras, x, 32 + 16 * i, 3, 2 if i else 1)
        b = L.Conv2D(anchors * 4, 3, padding="same")(x)
        s = L.Conv2D(anchors * classes, 3, padding="same")(x)
        boxes.append(L.Reshape((-1, 4))(b))
        scores.append(L.Reshape((-1, classes))(s))
    box = L.Concatenate(axis=1, name="boxes")(boxes)
    score = L.Activation("sigmoid", name="scores")(L.Concatenate(axis=1)(scores))
    return keras.Model(inp, [box, score], name="ssd_head")


def ds_cnn_kws() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((49, 10, 1))
    x = _conv_bn(keras, inp, 32, 3, 2)
    for _ in range(3):
        x = L.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
        x = L.Activation("relu")(L.BatchNormalization()(x))
        x = _conv_bn(keras, x, 32, 1)
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inp, L.Dense(12, activation="softmax")(x), name="ds_cnn_kws")


def transformer_block() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((16, 32))
    att = L.MultiHeadAttention(num_heads=2, key_dim=16)(inp, inp)
    x = L.LayerNormalization()(L.Add()([inp, att]))
    ff = L.Dense(32)(L.Dense(64, activation="relu")(x))
    x = L.LayerNormalization()(L.Add()([x, ff]))
    x = L.GlobalAveragePooling1D()(x)
    return keras.Model(inp, L.Dense(4)(x), name="transformer_block")


def dilated_concat() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((48, 48, 8))
    a = L.Conv2D(16, 3, padding="same", activation="relu")(inp)
    b = L.Conv2D(16, 3, padding="same", dilation_rate=2, activation="relu")(inp)
    c = L.DepthwiseConv2D(3, padding="same", dilation_rate=3, activation="relu")(inp)
    x = L.Concatenate()([a, b, c])
    x = L.Conv2D(16, 1, activation="relu")(x)
    x = L.MaxPooling2D()(x)
    x = L.Flatten()(x)
    return keras.Model(inp, L.Dense(10)(x), name="dilated_concat")


def small_cnn_uint8() -> Any:
    keras = _keras()
    L = keras.layers
    inp = keras.Input((32, 32, 3))
    x = _conv_bn(keras, inp, 16, 3, 2)
    x = L.DepthwiseConv2D(3, padding="same")(x)
    x = _conv_bn(keras, x, 32, 1)
    x = L.AveragePooling2D(2)(x)
    x = L.Flatten()(x)
    return keras.Model(inp, L.Dense(10)(x), name="small_cnn_uint8")


CORPUS: list[CorpusModel] = [
    CorpusModel(
        "mobilenet",
        "keras.applications.MobileNet 96x96 alpha 0.25",
        "conv, depthwise, GAP, reshape, softmax",
        build=mobilenet,
    ),
    CorpusModel(
        "mobilenet_v2",
        "keras.applications.MobileNetV2 96x96 alpha 0.35",
        "inverted residuals, ADD, RELU6, GAP",
        build=mobilenet_v2,
    ),
    CorpusModel(
        "mobilenet_v3_small",
        "keras.applications.MobileNetV3Small 96x96 alpha 0.75",
        "hard-swish, squeeze-excite, shape subgraph",
        build=mobilenet_v3_small,
    ),
    CorpusModel(
        "mobilenet_v3_large",
        "keras.applications.MobileNetV3Large 96x96 alpha 0.75",
        "hard-swish, squeeze-excite, shape subgraph",
        build=mobilenet_v3_large,
    ),
    CorpusModel(
        "efficientnet_b0",
        "keras.applications.EfficientNetB0 64x64",
        "swish (LOGISTIC*MUL), squeeze-excite, rescaling",
        build=efficientnet_b0,
    ),
    CorpusModel(
        "resnet_small",
        "four residual blocks 64x64",
        "ADD, projection shortcuts, GAP, dense",
        build=resnet_small,
    ),
    CorpusModel(
        "densenet_small",
        "two dense blocks 48x48",
        "concat growth, transition avg-pool, softmax",
        build=densenet_small,
    ),
    CorpusModel(
        "unet", "two-level U-Net 64x64", "TRANSPOSE_CONV, RESIZE_BILINEAR, skip concats, sigmoid", build=unet
    ),
    CorpusModel(
        "ssd_head",
        "three-scale SSD-style detector head 64x64",
        "reshape + concat of box/class outputs, two outputs",
        build=ssd_head,
    ),
    CorpusModel(
        "ds_cnn_kws",
        "DS-CNN keyword spotter 49x10 MFCC",
        "depthwise-separable blocks, softmax",
        build=ds_cnn_kws,
    ),
    CorpusModel(
        "transformer_block",
        "one-block transformer encoder, 16 tokens x 32",
        "BATCH_MATMUL attention, softmax, layer norm",
        build=transformer_block,
    ),
    CorpusModel(
        "dilated_concat",
        "dilated conv + concat CNN 48x48",
        "SPACE_TO_BATCH_ND dilated conv, concat, flatten",
        build=dilated_concat,
    ),
    CorpusModel(
        "mobilenet_v2_float_io",
        "keras.applications.MobileNetV2 96x96 alpha 0.35, float I/O",
        "QUANTIZE/DEQUANTIZE at the edges",
        io="float",
        build=mobilenet_v2,
    ),
    CorpusModel(
        "small_cnn_uint8",
        "small CNN 32x32, uint8 I/O",
        "uint8 input and output (QUANTIZE uint8<->int8)",
        io="uint8",
        build=small_cnn_uint8,
    ),
]


def _set_batchnorm_from_data(model: Any, batch: np.ndarray) -> None:
    """Batch-norm moving statistics from one data batch, so activations are not degenerate."""
    import keras

    bns = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in bns:
        layer.momentum = 0.0
    model(batch, training=True)


def _data(model: Any, n: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(d) for d in t.shape[1:]) for t in model.inputs]
    return [[rng.uniform(-1.0, 1.0, size=(1, *s)).astype(np.float32) for s in shapes] for _ in range(n)]


def convert(entry: CorpusModel) -> bytes:
    import tensorflow as tf

    assert entry.build is not None
    model = entry.build()
    samples = _data(model, REPRESENTATIVE_SAMPLES, SEED)
    if any(
        isinstance(layer, tf.keras.layers.BatchNormalization) or "batch_normalization" in layer.name
        for layer in model._flatten_layers()
    ):
        batch = [np.concatenate([s[i] for s in samples]) for i in range(len(model.inputs))]
        _set_batchnorm_from_data(model, batch[0] if len(batch) == 1 else batch)

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: iter(samples)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if entry.io != "float":
        io_type = {"int8": tf.int8, "uint8": tf.uint8}[entry.io]
        converter.inference_input_type = io_type
        converter.inference_output_type = io_type
    # Keras prints every captured variable of the exported function to stdout: hundreds of lines.
    with contextlib.redirect_stdout(io.StringIO()):
        return converter.convert()


def io_signature(model: bytes) -> dict[str, list[dict[str, Any]]]:
    """The model's input and output tensors as the manifest records them (shape, dtype)."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_content=model)

    def describe(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"shape": [int(d) for d in t["shape"]], "dtype": np.dtype(t["dtype"]).name} for t in details]

    return {"inputs": describe(interp.get_input_details()), "outputs": describe(interp.get_output_details())}


@cli_main("python -m tools.convert.make_corpus")
def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m tools.convert.make_corpus",
        description="Write the real-model corpus (TensorFlow converter, int8)",
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--only", action="append", help="model name (repeatable); default: all")
    args = parser.parse_args(argv)
    try:
        import tensorflow as tf
    except ImportError:
        print(
            "make_corpus: TensorFlow is missing; run: pip install -e '.[convert]' (in its own venv)",
            file=sys.stderr,
        )
        return 2
    names = {m.name for m in CORPUS}
    for name in args.only or []:
        if name not in names:
            print(f"make_corpus: unknown model {name!r}; known: {', '.join(sorted(names))}", file=sys.stderr)
            return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for entry in CORPUS:
        if args.only and entry.name not in args.only:
            continue
        t0 = time.monotonic()
        print(f"[{entry.name}] building and converting ...", flush=True)
        data = convert(entry)
        (args.out_dir / f"{entry.name}.tflite").write_bytes(data)
        record = {k: v for k, v in asdict(entry).items() if k != "build"}
        record.update(io_signature(data), bytes=len(data), tensorflow=tf.__version__)
        manifest[entry.name] = record
        print(f"[{entry.name}] {len(data) / 1e6:.2f} MB in {time.monotonic() - t0:.1f} s", flush=True)
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    total = sum(m["bytes"] for m in manifest.values())
    print(f"corpus: {len(manifest)} models, {total / 1e6:.2f} MB in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
