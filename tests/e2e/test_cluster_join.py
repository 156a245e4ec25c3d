"""Cluster processes joining NATS as docker compose starts them: together with a JetStream
cluster still electing its leader, or before NATS is up at all. A process waits (within
`bus.nats.connect_timeout_s`) rather than exiting, and says it is not ready until it joined."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import nats
import pytest

from config.bus import NatsConfig
from gateway.cluster.streams import stream_configs
from tests.e2e.cluster_daemons import cluster_config, processes
from tests.e2e.conftest import DAEMON_ENV, logged
from tests.support.daemon import DaemonProcess, free_port
from tests.support.nats import NATS_URL
from tests.support.nats_cluster import nats_servers
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

API_PROFILE = "agent: {type: echo}\nchannels: [{type: api, port: 0}]\n"


def role(config: Path, name: str, *extra: str) -> DaemonProcess:
    return DaemonProcess(config, "--role", name, "--http-port", "0", *extra, env=DAEMON_ENV)


async def ask(port: int, content: str) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{port}/v1/chat",
            json={"chat_id": "join", "content": content},
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response,
    ):
        assert response.status == 200, await response.text()
        reply: str = (await response.json())["reply"]
        return reply


async def test_processes_started_with_a_forming_nats_cluster_join_it(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    api_port = free_port()
    async with nats_servers(tmp_path / "nats", 3) as servers, processes() as running:
        config = cluster_config(
            tmp_path,
            {fresh_scope(): API_PROFILE},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            url=servers.url,
            # Room for a loaded test machine; the default (10 s) is ample on an idle one.
            extra_nats=", replicas: 3, connect_timeout_s: 30",
        )
        # One server of three up: no JetStream leader can be elected until another comes.
        await servers.start(1)
        running += [
            role(config, "ingress", "--api-port", str(api_port)),
            role(config, "worker"),
            role(config, "worker"),
        ]
        await asyncio.gather(*(daemon.start() for daemon in running))
        for daemon in running:
            await daemon.wait_log(logged("cluster.join_waiting"))  # JetStream did not answer
            status, body = await daemon.get("/readyz")
            assert status == 503, body
        await servers.start()  # the other two, while the processes keep trying
        await servers.wait_meta_leader()
        await running[0].wait_log(logged("api.web_chat_ready"))  # the ingress's listener
        for daemon in running:
            await daemon.wait_log(logged("profile.started"))  # after it joined
            status, body = await daemon.get("/readyz")
            assert status == 200, body
        assert await ask(api_port, "hello, cluster") == "hello, cluster"
        client = await nats.connect(servers.url.split(","))
        try:
            js = client.jetstream()
            # The streams and the ingress's lease bucket (a stream too) survive a lost server.
            for name in ("IN", "OUT", "DEAD"):
                assert (await js.stream_info(f"{nats_prefix}_{name}")).config.num_replicas == 3
            assert (await js.stream_info(f"KV_{nats_prefix}_LEASES")).config.num_replicas == 3
        finally:
            await client.close()


async def test_readyz_is_503_until_nats_comes_up_and_the_process_joins(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    async with nats_servers(tmp_path / "nats", 1) as servers, processes() as running:
        config = cluster_config(
            tmp_path,
            {fresh_scope(): API_PROFILE},
            prefix=nats_prefix,
            dsn=postgres_dsn,
            url=servers.url,
            extra_nats=", connect_timeout_s: 60",
        )
        worker = role(config, "worker")
        running.append(worker)
        await worker.start()  # listening: /readyz answers while NATS is still unreachable
        status, body = await worker.get("/readyz")
        assert status == 503, body
        assert json.loads(body)["cluster"]["joined"] is False
        await servers.start()
        await worker.wait_log(logged("cluster.joined"))
        await worker.wait_log(logged("profile.started"))
        status, body = await worker.get("/readyz")
        assert status == 200, body
        assert json.loads(body)["cluster"]["joined"] is True


async def test_streams_half_created_by_a_failed_start_are_completed(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    nats_config = NatsConfig(stream_prefix=nats_prefix, partitions=8)
    client = await nats.connect(NATS_URL)
    try:
        js = client.jetstream()
        inbound, outbound, _dead = stream_configs(nats_config)
        await js.add_stream(inbound)
        await js.add_stream(outbound)
        async with processes() as running:
            config = cluster_config(
                tmp_path, {fresh_scope(): API_PROFILE}, prefix=nats_prefix, dsn=postgres_dsn
            )
            worker = role(config, "worker")
            running.append(worker)
            await worker.start()
            await worker.wait_log(logged("cluster.joined"))
        assert (await js.stream_info(f"{nats_prefix}_DEAD")).config.subjects == [
            f"{nats_prefix}.dead.*"
        ]
    finally:
        await client.close()


async def test_a_refusal_is_not_waited_out(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    # Three replicas on one server: JetStream refuses the streams, and no wait will change that.
    config = cluster_config(
        tmp_path,
        {fresh_scope(): API_PROFILE},
        prefix=nats_prefix,
        dsn=postgres_dsn,
        extra_nats=", replicas: 3, connect_timeout_s: 300",
    )
    worker = role(config, "worker")
    async with processes() as running:
        running.append(worker)
        await worker.start()
        assert await worker.wait() == 69
    failed = [event for event in worker.logs if event.get("event") == "cluster.join_failed"]
    assert "replicas > 1 not supported in non-clustered mode" in failed[0]["error"]
    assert worker.count_logged("cluster.join_waiting") == 0
