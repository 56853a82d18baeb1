"""Real `python -m nodetier` processes (the node-facing tier) for tests and benchmarks: a free port, /readyz
polled (ready once the tier has loaded its Leases), stopped by pid."""
from __future__ import annotations

import sys

from tests.helpers.apiserver import ApiserverProcess


class NodeTierProcess(ApiserverProcess):
    """A tier in front of `control_plane` (a URL, or `kubeconfig` for an identity); `args` are more flags."""

    def __init__(self, control_plane: str = "", *args: str, kubeconfig: str = "", name: str = "nodetier", **kw):
        super().__init__(name=name, **kw)
        target = ["--kubeconfig", kubeconfig] if kubeconfig else ["--control-plane", control_plane]
        self.argv = [sys.executable, "-m", "nodetier", *target, "--port", str(self.port), *args]
