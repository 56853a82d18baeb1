"""machinery.objects helpers that the write path calls on every request."""
from __future__ import annotations

import datetime

from machinery import objects


def test_now_rfc3339_is_the_current_second_formatted_once(monkeypatch):
    """metav1.Time's encoding (RFC 3339 to the second, UTC, `Z`), formatted once a second: the text follows
    the clock across a second boundary and never lags it."""
    clock = [1_764_979_199.2]
    monkeypatch.setattr(objects.time, "time", lambda: clock[0])
    monkeypatch.setattr(objects, "_stamp", (0, ""))
    assert objects.now_rfc3339() == "2025-12-05T23:59:59Z"
    clock[0] = 1_764_979_199.9
    assert objects.now_rfc3339() == "2025-12-05T23:59:59Z"
    clock[0] = 1_764_979_200.0
    assert objects.now_rfc3339() == "2025-12-06T00:00:00Z"
    monkeypatch.undo()
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    got = datetime.datetime.strptime(objects.now_rfc3339(), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    after = datetime.datetime.now(datetime.timezone.utc)
    assert before <= got <= after
