"""The QEMU harness: boots vnpu.ko against the device model under TCG and runs the in-guest suite."""
