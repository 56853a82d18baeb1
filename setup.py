"""Build script for the compiled parts of residency-apiserver.

All metadata lives in pyproject.toml; this file only declares the Cython extensions: every
``ext/*.pyx`` becomes the extension module ``ext.<stem>``. ``pip install -e .`` builds them in
place (next to the .pyx), a regular ``pip install .`` / ``pip wheel .`` puts them in the wheel.
The generated ``.c`` files are build output (ignored by git, excluded from the wheel).
"""

from __future__ import annotations

import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

# Paths must be relative to the project root (setuptools rejects absolute source paths).
os.chdir(os.path.dirname(os.path.abspath(__file__)))

# Mirrors the header line of each .pyx; the .pyx header is the source of truth for readers.
COMPILER_DIRECTIVES = {"language_level": 3, "binding": True}

extensions = [
    Extension(
        "ext." + os.path.splitext(os.path.basename(path))[0],
        [path],
    )
    for path in sorted(glob.glob(os.path.join("ext", "*.pyx")))
]
if not extensions:  # a build without extensions would "succeed" and then fail at import time
    raise SystemExit("setup.py: no ext/*.pyx found; refusing to build without the compiled modules")

setup(ext_modules=cythonize(extensions, compiler_directives=COMPILER_DIRECTIVES))
