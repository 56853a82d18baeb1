"""Compiled (Cython) helpers for hot paths.

Each compiled module ``ext.<name>`` has a pure-Python twin ``ext.<name>_py`` with the same API;
both are tested against each other. This package re-exports the compiled functions and classes:
``fnv1a64*`` (:mod:`ext.fnv`), ``BTree`` (:mod:`ext.btree`, the watch cache's copy-on-write B-tree) and
``Entry``, ``WindowEvent`` and ``Event`` (:mod:`ext.entry`, the cache's per-object record, ``CodecBase`` the base of
what decodes its compressed form, its event window's record and the front's; ``pack_entries``, ``restore_packed`` and ``check_frames``, a warm start's saved entries and their checksums), ``has_float`` (:mod:`ext.jsonscan`, JSON
encoding's float check, and ``needs_slow_loads``, its decoding's check of what orjson reads unlike Go) and ``framed`` (:mod:`ext.framed`, the key-framed lists a front merges).

The compiled modules are REQUIRED: if they are missing (the source tree was never built), importing
``ext`` raises ImportError instead of silently running 100x slower. Build them with::

    pip install -e .        # compiles ext/*.pyx in place

Escape hatch for debugging (pdb into the hash, or a machine without a C compiler): set
``RESIDENCY_PURE_PYTHON=1`` to use the pure-Python twins. ``COMPILED`` tells which one is active.
"""

from __future__ import annotations

import os

__all__ = ["COMPILED", "BTree", "CodecBase", "Entry", "Event", "WindowEvent", "pack_entries", "restore_packed", "check_frames", "slots_filled", "fnv1a64", "fnv1a64_bytes", "fnv1a64_hex", "has_float", "needs_slow_loads", "container_end", "framed"]

_PURE_PYTHON = os.environ.get("RESIDENCY_PURE_PYTHON") == "1"

COMPILED: bool
"""True if the functions exported here come from the compiled modules."""

if _PURE_PYTHON:
    from ext.fnv_py import fnv1a64, fnv1a64_bytes, fnv1a64_hex
    from ext.jsonscan_py import container_end, has_float, needs_slow_loads
    from ext import framed_py as framed

    COMPILED = False

    def __getattr__(name: str):  # PEP 562: the B-tree twin is imported on first use only
        if name == "BTree":
            from ext.btree_py import BTree

            globals()["BTree"] = BTree
            return BTree
        if name in ("CodecBase", "Entry", "Event", "WindowEvent", "pack_entries", "restore_packed", "check_frames",
                    "slots_filled"):
            from ext.entry_py import (CodecBase, Entry, Event, WindowEvent, check_frames, pack_entries, restore_packed,
                                      slots_filled)

            globals().update(CodecBase=CodecBase, Entry=Entry, Event=Event, WindowEvent=WindowEvent,
                             pack_entries=pack_entries, restore_packed=restore_packed, check_frames=check_frames,
                             slots_filled=slots_filled)
            return globals()[name]
        raise AttributeError(f"module 'ext' has no attribute {name!r}")
else:
    try:
        from ext.fnv import fnv1a64, fnv1a64_bytes, fnv1a64_hex
        from ext.btree import BTree
        from ext.entry import (CodecBase, Entry, Event, WindowEvent, check_frames, pack_entries, restore_packed,
                               slots_filled)
        from ext.jsonscan import container_end, has_float, needs_slow_loads
        from ext import framed
    except ImportError as exc:
        raise ImportError(
            f"residency-apiserver: the compiled module {exc.name or 'ext.fnv'} is missing or failed to load "
            f"({exc}). Run `pip install -e .` in the project root, which compiles ext/*.pyx. "
            "To debug without compiled code, set RESIDENCY_PURE_PYTHON=1 (slow pure-Python twins)."
        ) from exc
    COMPILED = True
