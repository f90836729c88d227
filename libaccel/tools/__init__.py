"""The ``accel`` debugging tools, on top of the driver: the CLI and its commands.

``cli`` is the ``accel`` command (``session``, ``cache_cli`` and ``run_cli`` its subcommands);
``trace`` and ``trace_attach`` record a program's DRM ioctls (``trace_preload.c`` is the
LD_PRELOAD interposer); ``top`` and ``fdinfo`` read the DRM usage statistics; ``debugfs`` and
``coredump`` read vnpu.ko's state and a failed job's device coredump; ``decode`` names the uapi's
ioctls, flags and parameters for all of them. ``man/accel.1`` is generated from ``cli``'s parsers.
The driver (``libaccel``'s own modules) never imports this package.
"""
