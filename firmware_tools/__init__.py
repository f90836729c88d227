"""Tools for NPU firmware and compiler people: firmware images and command-stream assembly."""
