"""The front of a sharded slice (issue 11): one apiserver's API served from K residency shards.

`shards` (which shard holds which hash range, health), `wire` (a shard's lists and watches read as they
arrive), `storage` (`FrontStorage`: the storage contract, proxying to one shard or merging K). The process is
`apiserver.front_server.FrontServer` (`python -m apiserver --front --shards URL,...`).
"""
