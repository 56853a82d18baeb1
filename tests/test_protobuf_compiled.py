"""The compiled protobuf decoder (machinery/protobuf.py, second half) against the general one.

`_convert` runs the compiled decoder and hands anything it does not take on to the general decoder (the
straightforward reading of the schema, checked against Go by tests/test_protobuf.py). So the compiled
decoder must, whenever it returns, return exactly what the general one returns (same keys in the same
order, same types: repr equality), and it must take on everything Go writes, or the speed is lost:
* schema-driven random messages of every layout (wrong wire types, fields given twice, packed lists,
  unknown fields, maps with missing or repeated or unsorted keys, odd timestamps, bad raw JSON,
  truncation): either the compiled decoder raises, or its object equals the general decoder's;
* Go's bytes (tests/go/protoref: random objects of every kind, and bench/protobuf_decode's realistic
  ones): decoded without a single fallback, and equal to Go's JSON.
"""
from __future__ import annotations

import base64
import json
import random
import subprocess

import pytest

from bench import protobuf_decode
from machinery import jsonenc, protobuf
from machinery.protobuf import _SCALARS, _Decoder, _fast_decoder
from tests.test_protobuf import _decode, protoref  # noqa: F401  (fixture)

MESSAGES = protobuf.schema()["messages"]


def _varint(n: int) -> bytes:
    n &= (1 << 70) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(num: int, wt: int) -> bytes:
    return _varint(num << 3 | wt)


class Gen:
    """Random protobuf bytes shaped by the schema, mostly well-formed, sometimes not."""

    def __init__(self, rnd: random.Random, odd: float):
        self.r = rnd
        self.odd = odd  # chance of each oddity

    def maybe(self) -> bool:
        return self.r.random() < self.odd

    def text(self) -> bytes:
        r = self.r
        pick = r.randrange(6)
        if pick == 0:
            return b""
        if pick == 1:
            return bytes(r.randrange(256) for _ in range(r.randrange(1, 6)))  # maybe invalid UTF-8
        if pick == 2:
            return "é€ü日本".encode()[: r.randrange(1, 16)]
        return "".join(r.choice("abcXYZ09-./:") for _ in range(r.randrange(1, 12))).encode()

    def varint_value(self) -> int:
        r = self.r
        return r.choice([0, 1, 2, 127, 128, 300, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
                         r.randrange(2**64), r.randrange(2**35), 2**64 + 5 if self.maybe() else 7])

    def ld(self, num: int, payload: bytes) -> bytes:
        return _key(num, 2) + _varint(len(payload)) + payload

    def scalar(self, num: int, typ: str) -> bytes:
        r = self.r
        if self.maybe():  # a wire type other than the field's
            wt = r.choice([0, 1, 2, 5])
            return _key(num, wt) + {0: _varint(self.varint_value()), 1: bytes(8), 2: _varint(1) + b"x",
                                    5: bytes(4)}[wt]
        if typ in ("string", "bytes"):
            return self.ld(num, self.text())
        if typ == "float64":
            return _key(num, 1) + r.randbytes(8)
        if typ == "float32":
            return _key(num, 5) + r.randbytes(4)
        return _key(num, 0) + _varint(self.varint_value())

    def special(self, kind: str, depth: int) -> bytes:
        r = self.r
        if kind in ("time", "microtime"):
            out = b""
            if r.random() < 0.9:
                out += _key(1, 0) + _varint(r.choice([0, 1, 1_700_000_000, r.randrange(4_000_000_000), -5,
                                                       253402300799, 253402300800, 2**63 - 1]))
            if r.random() < 0.6:
                out += _key(2, 0) + _varint(r.choice([0, 999, 1000, 123_456_789, 999_999_999, -1000,
                                                      2**31 - 1, r.randrange(10**9)]))
            if self.maybe():
                out += self.scalar(r.randrange(1, 4), "int64")
            return out
        if kind == "quantity":
            return self.ld(1, r.choice([b"", b"100m", b"1Gi", b"0", "é".encode()])) if r.random() < 0.9 else b""
        if kind == "intorstring":
            out = b""
            for num, typ in ((1, "int64"), (2, "int32"), (3, "string")):
                if r.random() < 0.6:
                    out += self.scalar(num, typ) if typ == "string" or self.maybe() else \
                        _key(num, 0) + _varint(r.choice([0, 1, 2, 80, 2**64 - 1]))
            return out
        if kind == "raw":
            doc = r.choice([b'{"a":1}', b'{"f:x":{".":{}}}', b"[1,2]", b"", b"nul", b'{"k":-0}', b'"\xff"',
                            b"12345678901234567890123"])
            return self.ld(1, doc) if r.random() < 0.9 else b""
        # the schemaor* types: {1, 2}: a schema, schemas, a bool or strings
        props = "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaProps"
        out = b""
        if r.random() < 0.5:
            out += _key(1, 0) + _varint(r.randrange(2)) if kind == "schemaorbool" else \
                self.ld(1, self.message(props, depth + 1))
        if r.random() < 0.5:
            out += self.ld(2, self.text() if kind == "schemaorstringarray" else self.message(props, depth + 1))
        return out

    def value(self, num: int, typ, depth: int) -> bytes:
        if isinstance(typ, str) and typ in _SCALARS:
            return self.scalar(num, typ)
        if isinstance(typ, str) and typ.startswith("msg:"):
            return self.ld(num, self.message(typ[4:], depth + 1))
        if isinstance(typ, list) and typ[0] == "list":
            r = self.r
            elem = typ[1]
            if isinstance(elem, str) and elem in _SCALARS - {"string", "bytes"} and self.maybe():
                return self.ld(num, b"".join(_varint(self.varint_value()) for _ in range(r.randrange(3))))  # packed
            return b"".join(self.value(num, elem, depth) for _ in range(r.randrange(1, 4)))
        if isinstance(typ, list):  # map
            r = self.r
            out = b""
            keys = [self.text() for _ in range(r.randrange(1, 5))]
            if self.maybe():
                keys.append(keys[0])  # repeated key
            for k in keys:
                entry = b""
                if r.random() < 0.9:
                    entry += self.ld(1, k)
                if r.random() < 0.9 and isinstance(typ[2], list):  # ExtraValue: the items in field 1
                    entry += self.ld(2, b"".join(self.ld(1, self.text()) for _ in range(r.randrange(3))))
                elif r.random() < 0.9:
                    entry += self.value(2, typ[2], depth)
                if self.maybe():
                    entry = entry[::-1] if r.random() < 0.3 else entry + self.scalar(3, "string")
                out += self.ld(num, entry)
            return out
        return self.ld(num, self.special(typ, depth))

    def message(self, name: str, depth: int = 0) -> bytes:
        r = self.r
        layout = MESSAGES[name]
        if depth > 4 or not layout:
            return b""
        parts = []
        for num, _, _, typ in layout:
            if r.random() < 0.7 / (1 + depth):
                parts.append(self.value(num, typ, depth))
                if self.maybe():  # given twice
                    parts.append(self.value(num, typ, depth))
        if self.maybe():
            parts.append(self.scalar(900 + r.randrange(5), "string"))  # unknown field
        if self.maybe():
            r.shuffle(parts)
        out = b"".join(parts)
        if self.maybe() and out:
            out = out[: r.randrange(len(out))]  # truncated
        return out


def _general(name: str, raw: bytes):
    try:
        return ("ok", repr(_Decoder().message(name, raw)))
    except (ProtobufError, ValueError, OverflowError, RecursionError) as e:
        return ("error", type(e).__name__)


ProtobufError = protobuf.ProtobufError


@pytest.mark.parametrize("odd", [0.0, 0.05, 0.3])
def test_compiled_equals_general_on_random_messages(odd):
    rnd = random.Random(int(odd * 100) + 7)
    names = sorted(MESSAGES)
    taken = total = 0
    for n in range(4000):
        name = names[n % len(names)]
        raw = Gen(rnd, odd).message(name)
        total += 1
        try:
            got = repr(_fast_decoder(name)(raw, 0, len(raw)))
        except Exception:  # noqa: BLE001 (the general decoder decides)
            continue
        taken += 1
        assert ("ok", got) == _general(name, raw), (name, raw.hex())
        # the same bytes inside a larger buffer (the envelope's): read between start and end only
        pad = b"\x0a\x05" + raw + b"\xff\x01"
        assert repr(_fast_decoder(name)(pad, 2, 2 + len(raw))) == got
    if odd == 0.0:
        assert taken > 0.8 * total, (taken, total)
    else:
        assert taken > 0.05 * total, (taken, total)


def test_decode_and_unwrap_through_the_envelope():
    for av, kind, raw in [("v1", "ConfigMap", b"\x0a\x03\x0a\x01x"), ("", "", b""), ("v1", "Pod", b"")]:
        env = protobuf.MAGIC + Gen(random.Random(1), 0).ld(1, Gen(random.Random(1), 0).ld(1, av.encode())
                                                             + Gen(random.Random(1), 0).ld(2, kind.encode())) \
            + Gen(random.Random(1), 0).ld(2, raw) + Gen(random.Random(1), 0).ld(4, b"")
        assert protobuf.unwrap(env) == protobuf._unwrap(env) == (av, kind, raw)
        if kind:
            assert protobuf.decode_stored(env) == protobuf.decode(env, av, kind)
    bad = protobuf.MAGIC + b"\x1a\x04gzip"
    with pytest.raises(ProtobufError, match="content encoding"):
        protobuf.unwrap(bad)
    with pytest.raises(ProtobufError, match="does not appear"):
        protobuf.decode_stored(b"k8s\x01")


def test_go_objects_take_no_fallback(protoref):  # noqa: F811
    before = protobuf.FALLBACKS[0]
    out = subprocess.run([protoref, "4", "25"], capture_output=True, text=True, timeout=300, check=True).stdout
    for line in out.splitlines():
        case = json.loads(line)
        assert jsonenc.dumps(_decode(case["key"], base64.b64decode(case["pb"]))).decode() == case["json"]
    realistic = protobuf_decode.go_encode(protoref, [make(i) for make in protobuf_decode.KINDS.values()
                                                     for i in range(20)])
    for pb, want in realistic:
        assert jsonenc.dumps(protobuf.decode_stored(pb)).decode() == want
    assert protobuf.FALLBACKS[0] == before
