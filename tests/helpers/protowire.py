"""A minimal protobuf wire encoder for tests: bodies as client-go's protobuf serializer writes them (the `k8s\\0`
magic, a runtime.Unknown with the type meta and the message), built by field number so the HTTP tests need no Go
and check machinery.protobuf's decoder against an encoder that is not its own."""
from __future__ import annotations

from machinery import protobuf


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def field(num: int, payload: bytes | str) -> bytes:
    """A length-delimited field (a string, bytes or an embedded message)."""
    payload = payload.encode() if isinstance(payload, str) else payload
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def int_field(num: int, v: int) -> bytes:
    """A varint field."""
    return varint(num << 3) + varint(v)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """The body of a request or a stored value: the magic and a runtime.Unknown around the message."""
    return protobuf.MAGIC + field(1, field(1, api_version) + field(2, kind)) + field(2, raw)
