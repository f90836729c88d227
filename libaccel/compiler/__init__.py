"""libaccel.compiler: lowers int8/uint8 TFLite graphs to vnpu command streams."""
