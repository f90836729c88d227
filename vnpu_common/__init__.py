"""What every layer of the stack shares and none owns: the cache directory and the build-once into it
(:mod:`.cache`), and the command-line conventions of the project's CLIs (:mod:`.cli`).

This package imports nothing else of the project, so any layer may import it (tests/test_imports.py).
"""
