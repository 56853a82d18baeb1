"""Tests for ext.fnv (compiled) and ext.fnv_py (pure-Python twin): 64-bit FNV-1a, SPEC S7.10."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ext.fnv as fnv_c  # no importorskip: a missing compiled module must fail the run loudly
import ext.fnv_py as fnv_py

EXT_DIR = Path(fnv_py.__file__).resolve().parent

# SPEC S7.10 test vectors (input string -> 16 lowercase hex digits).
S7_10_VECTORS = [
    ("", "cbf29ce484222325"),
    ("a", "af63dc4c8601ec8c"),
    ("default", "ebada5168620c5fe"),
    ("kube-system", "df65c7bc1d82b35e"),
    ("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "93754b7248a00eb9"),
    ("6f1c8e0a-3c3e-4b8e-9a55-2f0c1e7d9b10", "e1324157e7400a80"),
]


@pytest.fixture(params=[fnv_py, fnv_c], ids=["py", "c"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    """Both implementations, ids ``py`` and ``c`` (as in aiohttp's test fixtures)."""
    return request.param


@pytest.mark.parametrize(("text", "expected_hex"), S7_10_VECTORS, ids=[repr(v[0]) for v in S7_10_VECTORS])
def test_spec_vectors(impl: ModuleType, text: str, expected_hex: str) -> None:
    """SPEC S7.10 vectors: FNV-1a 64 over the UTF-8 bytes, rendered '0x' + 16 lowercase hex."""
    expected = int(expected_hex, 16)
    assert impl.fnv1a64(text) == expected
    assert impl.fnv1a64_bytes(text.encode("utf-8")) == expected
    assert impl.fnv1a64_hex(text) == "0x" + expected_hex


def test_hex_is_fixed_width(impl: ModuleType) -> None:
    """Leading zero nibbles are kept (fixed width makes string order = numeric order, S7.11)."""
    # Search a small space for a hash whose top nibble is 0 so the padding path is exercised.
    text = next(s for s in (str(i) for i in range(10_000)) if fnv_py.fnv1a64(s) < 1 << 60)
    h = impl.fnv1a64_hex(text)
    assert len(h) == 18 and h.startswith("0x0")
    assert h == h.lower() and int(h, 16) == fnv_py.fnv1a64(text)


def test_textbook_constants(impl: ModuleType) -> None:
    assert impl.FNV64_OFFSET_BASIS == 0xCBF29CE484222325
    assert impl.FNV64_PRIME == 0x100000001B3


def test_non_ascii_uses_utf8(impl: ModuleType) -> None:
    s = "näme-空間-\U0001f600"
    assert impl.fnv1a64(s) == impl.fnv1a64_bytes(s.encode("utf-8"))


def test_type_errors(impl: ModuleType) -> None:
    with pytest.raises(TypeError):
        impl.fnv1a64(b"bytes")
    with pytest.raises(TypeError):
        impl.fnv1a64(None)
    with pytest.raises(TypeError):
        impl.fnv1a64_bytes("str")
    with pytest.raises(TypeError):
        impl.fnv1a64_hex(1)


def test_lone_surrogate_raises(impl: ModuleType) -> None:
    with pytest.raises(UnicodeEncodeError):
        impl.fnv1a64("\ud800")


@given(st.text())
def test_compiled_matches_twin_text(s: str) -> None:
    expected = fnv_py.fnv1a64(s)
    assert fnv_c.fnv1a64(s) == expected
    assert fnv_c.fnv1a64_hex(s) == fnv_py.fnv1a64_hex(s)
    assert 0 <= expected < 1 << 64


@given(st.binary())
def test_compiled_matches_twin_bytes(b: bytes) -> None:
    assert fnv_c.fnv1a64_bytes(b) == fnv_py.fnv1a64_bytes(b)


def test_compiled_module_is_compiled() -> None:
    assert fnv_c.__file__.endswith(".so"), fnv_c.__file__
    assert fnv_c.fnv1a64 is not fnv_py.fnv1a64


def test_package_exports_compiled() -> None:
    import ext

    if os.environ.get("RESIDENCY_PURE_PYTHON") == "1":
        # The debugging escape hatch selects the twin on purpose.
        assert ext.COMPILED is False and ext.fnv1a64 is fnv_py.fnv1a64
        return
    assert ext.COMPILED is True
    assert ext.fnv1a64 is fnv_c.fnv1a64
    assert ext.fnv1a64_bytes is fnv_c.fnv1a64_bytes
    assert ext.fnv1a64_hex is fnv_c.fnv1a64_hex


@pytest.fixture
def ext_without_so(tmp_path: Path) -> Path:
    """A copy of the ext package with only its Python sources (no compiled module)."""
    pkg = tmp_path / "ext"
    pkg.mkdir()
    for src in [EXT_DIR / "__init__.py", *EXT_DIR.glob("*_py.py")]:
        shutil.copy2(src, pkg / src.name)
    return tmp_path


def _import_ext_from(root: Path, pure: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RESIDENCY_PURE_PYTHON"}
    if pure is not None:
        env["RESIDENCY_PURE_PYTHON"] = pure
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(root)!r})
        import ext
        assert ext.__file__.startswith({str(root)!r}), ext.__file__  # the copy, not the source tree
        print("COMPILED", ext.COMPILED, ext.fnv1a64_hex("default"))
        """
    )
    # -I -S: no site-packages, hence no editable-install finder (which would map ext.fnv back to
    # the source tree's compiled module); the copy only needs the stdlib.
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )


def test_missing_compiled_module_fails_loudly(ext_without_so: Path) -> None:
    proc = _import_ext_from(ext_without_so, pure=None)
    assert proc.returncode != 0, proc.stdout
    assert "ImportError" in proc.stderr
    assert "pip install -e ." in proc.stderr
    assert "RESIDENCY_PURE_PYTHON=1" in proc.stderr


def test_missing_compiled_module_other_env_value_still_fails(ext_without_so: Path) -> None:
    proc = _import_ext_from(ext_without_so, pure="0")
    assert proc.returncode != 0, proc.stdout
    assert "pip install -e ." in proc.stderr


def test_pure_python_escape_hatch(ext_without_so: Path) -> None:
    proc = _import_ext_from(ext_without_so, pure="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "COMPILED False 0xebada5168620c5fe"
