"""Builds bagcache._bagcache with pip against an installed libbagcache.

    pip install --no-build-isolation ./python

finds the library with `pkg-config bagcache` (set PKG_CONFIG_PATH for a
prefix of your own).  The autotools build (`make`, `make install` in the
top directory) builds the same extension without pip, linking the library
in statically; this file is for installing into a virtual environment or
building a wheel.
"""

import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def pkg_config(*args):
    cmd = [os.environ.get("PKG_CONFIG", "pkg-config"), *args, "bagcache"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise SystemExit(
            "bagcache: `%s` failed: %s\nInstall libbagcache (make install in the "
            "source tree) and point PKG_CONFIG_PATH at its lib/pkgconfig."
            % (" ".join(cmd), detail.strip()))
    return out.strip()


cflags = shlex.split(pkg_config("--cflags"))
libs = shlex.split(pkg_config("--libs"))
libdir = pkg_config("--variable=libdir")
# A library outside the loader's default path is found through an rpath.
rpath = [] if libdir in ("/usr/lib", "/usr/lib64", "/lib", "/lib64") else [
    "-Wl,-rpath," + libdir]

# python/src is layered in folders (module.c on top of core/, bagz/, views/,
# loadit/, train/); every file includes its headers from python/src.
sources = sorted(
    os.path.relpath(os.path.join(folder, name), HERE)
    for folder, _, names in os.walk(os.path.join(HERE, "src"))
    for name in names if name.endswith(".c"))

setup(
    ext_modules=[
        Extension(
            "bagcache._bagcache",
            sources=sources,
            include_dirs=["src"],
            depends=[os.path.join("src", "core", "bcpy.h"),
                     os.path.join("src", "loadit", "loadit.h")],
            # Only PyInit__bagcache is exported (as in the autotools build).
            extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden"] + cflags,
            extra_link_args=libs + rpath,
        )
    ],
)
