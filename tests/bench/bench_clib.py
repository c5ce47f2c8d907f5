"""The C library through ctypes, for the benchmark programs beside this
file (python_bench.py, train_bench.py): a bag read with bc_bag_get_many,
as a C caller would, in the same process as the Python package."""

import ctypes
import os
import sys


class BcBuf(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("capacity", ctypes.c_size_t)]


BC_READER_OPTIONS_VERSION = 1


class BcReaderOptions(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("sharding_layout", ctypes.c_int),
        ("limits_placement", ctypes.c_int),
        ("limits_storage", ctypes.c_int),
        ("compression", ctypes.c_int),
        ("dictionary", ctypes.c_void_p),
        ("dictionary_size", ctypes.c_size_t),
        ("access_pattern", ctypes.c_int),
        ("cache_policy", ctypes.c_int),
        ("max_parallelism", ctypes.c_int),
        ("max_record_size", ctypes.c_uint64),
    ]


class CBag:
    """bc_bag_open / bc_bag_get_many / bc_bag_close through ctypes."""

    def __init__(self, lib_path, spec, parallelism):
        lib = ctypes.CDLL(lib_path)
        lib.bc_bag_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                    ctypes.POINTER(BcReaderOptions)]
        lib.bc_bag_get_many.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.POINTER(BcBuf)]
        lib.bc_buf_release.argtypes = [ctypes.POINTER(BcBuf)]
        lib.bc_bag_close.argtypes = [ctypes.c_void_p]
        lib.bc_errmsg.restype = ctypes.c_char_p
        lib.bc_reader_options_init.argtypes = [ctypes.POINTER(BcReaderOptions),
                                               ctypes.c_uint]
        self.lib = lib
        opts = BcReaderOptions()
        if lib.bc_reader_options_init(ctypes.byref(opts), BC_READER_OPTIONS_VERSION) != 0:
            raise RuntimeError("bc_reader_options_init: " + lib.bc_errmsg().decode())
        opts.max_parallelism = parallelism
        self.bag = ctypes.c_void_p()
        if lib.bc_bag_open(ctypes.byref(self.bag), spec.encode(), ctypes.byref(opts)) != 0:
            raise RuntimeError("bc_bag_open: " + lib.bc_errmsg().decode())

    def get_many(self, indices, outs, count=None):
        """indices: a C-contiguous uint64 numpy array (or its address)."""
        count = len(indices) if count is None else count
        addr = indices if isinstance(indices, int) else indices.ctypes.data
        if self.lib.bc_bag_get_many(self.bag, addr, count, outs) != 0:
            raise RuntimeError("bc_bag_get_many: " + self.lib.bc_errmsg().decode())

    def release(self, outs):
        for k in range(len(outs)):
            self.lib.bc_buf_release(ctypes.byref(outs[k]))

    def close(self):
        self.lib.bc_bag_close(self.bag)


def ensure_static_tls():
    """Re-executes with more static TLS for dlopen.

    libbagcache's TLS block (about 1 KiB: the thread's error message) is
    in the initial-exec model (src/common/guard.c), so every copy of it a
    process dlopens takes static TLS, of which glibc reserves about 1.6 KiB
    for dlopen by default.  The extension (which links the library in) and
    libbagcache.so loaded through ctypes need two copies: without more room
    ctypes fails with "cannot allocate memory in static TLS block"."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.rtld.optional_static_tls" in tunables or not sys.platform.startswith("linux"):
        return
    extra = "glibc.rtld.optional_static_tls=16384"
    os.environ["GLIBC_TUNABLES"] = f"{tunables}:{extra}" if tunables else extra
    os.execv(sys.executable, [sys.executable] + sys.argv)


def use_build(build):
    """Makes the build tree's package importable (BUILD/python/pkg, first on
    sys.path) and returns the path of its libbagcache.so."""
    build = os.path.abspath(build)
    pkg = os.path.join(build, "python", "pkg")
    if os.path.isdir(pkg):
        sys.path.insert(0, pkg)
    return os.path.join(build, ".libs", "libbagcache.so")
