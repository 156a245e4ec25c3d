"""The cluster: the gateway as several processes over NATS JetStream and PostgreSQL.

`cluster.lease` keeps exactly one active poller per bot account across ingress processes.
"""
