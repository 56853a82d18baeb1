"""The node plane's node-facing tier (`python -m nodetier`): kubelets' kubeconfig names it; it proxies the whole
API to the control plane and absorbs the renewals of node Leases in kube-node-lease, forwarding them at a
bounded rate (see `nodetier.leases` for what is absorbed, `nodetier.forwarder` for when it reaches the control
plane, `nodetier.memkv` for where the Leases live)."""
