"""Real int8 models from the TensorFlow converter: the project's real-model test corpus."""
