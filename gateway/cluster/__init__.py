"""The gateway as several processes over NATS JetStream and PostgreSQL (`bus: {backend: nats}`).

Ingress processes run the channels: what a platform sends is published to the inbound stream
(the platform is acknowledged after the publish ack), and replies are consumed from the
outbound stream and delivered. Worker processes run the agents: one durable pull consumer per
partition (`max_ack_pending=1`, so a chat's turns run one at a time, in order), the turn's
reply recorded in PostgreSQL before it is published and the inbound message acknowledged.

nats-py is imported only by the modules that talk to NATS, and only when a config asks for it.

`gateway.cluster.lease` keeps exactly one active poller per bot account across ingress processes.
"""
