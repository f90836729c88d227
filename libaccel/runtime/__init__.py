"""The model runner: a whole .onnx or .tflite file on the NPU, partitioned against the CPU.

``model`` runs a model file (``libaccel.run_model`` is its entry point) and its reference for
comparison; ``onnx_backend`` is ONNX's backend interface over it (for ONNX's own backend tests);
``inputs`` draws the random inputs every runner uses.
"""
