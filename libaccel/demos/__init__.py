"""Demos of the driver, each a ``python -m`` program that checks its result on the CPU.

``demo``: one int8 CONV2D through the driver, bit for bit against numpy; ``camera_demo``: V4L2
frames imported as dma-bufs and read in place by an NPU job (``v4l2`` is its capture side).
"""
