"""machinery.http1: the answer heads the front's list connections and the node tier's client parse."""
from __future__ import annotations

import pytest

from machinery import http1


def test_parse_head_reads_status_headers_and_keep_alive():
    h = http1.parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 19\r\n\r\n")
    assert h == (404, {"content-type": "text/plain", "content-length": "19"}, True)
    assert http1.parse_head(b"HTTP/1.1 200 OK\r\nConnection: Close").keep_alive is False
    assert http1.parse_head(b"HTTP/1.0 200 OK").keep_alive is False
    assert http1.parse_head(b"HTTP/1.1 204").status == 204   # (the reason phrase may be left out)


@pytest.mark.parametrize("line", [b"HTTP/1.1 0 ", b"HTTP/1.1 20", b"HTTP/1.1 2000 OK", b"HTTP/1.1 2x0 OK",
                                  b"SSH-2.0-OpenSSH_9.2", b"", b"HTTP/1.1  200 OK"])
def test_parse_head_refuses_what_is_not_an_http_status_line(line):
    with pytest.raises(ValueError):
        http1.parse_head(line + b"\r\nContent-Length: 0\r\n\r\n")


def test_request_head():
    assert http1.request_head("PUT", "/a?b=c", "h:1", {"Accept": "x"}, 3) == \
        b"PUT /a?b=c HTTP/1.1\r\nHost: h:1\r\nAccept: x\r\nContent-Length: 3\r\n\r\n"
    assert http1.request_head("GET", "/", "h", {}) == b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
