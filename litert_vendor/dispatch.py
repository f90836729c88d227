"""placeholder"""
def install(ffi, lib): pass
