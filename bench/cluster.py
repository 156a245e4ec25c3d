"""The cluster: turns per second with 1, 2 and 4 worker processes, and the JetStream path's cost.

Workers are real `run --role worker` processes on the NATS server of `OCTOS_BENCH_NATS` (default
the local one) and a PostgreSQL database of the run's own. The bench publishes 64 chats' messages
straight to the inbound stream and counts the replies on the outbound subjects. The echo agent
takes 50 ms per turn and each worker runs at most `WORKER_MAX_TURNS` turns at once (an agent's
capacity per worker), so more workers should mean proportionally more turns per second (target:
4 workers at least 3.2x one). Every figure counts replies published to the outbound stream from
the first publish to the last reply: start-up is not in it, the tail of the busiest partition
is. The ceiling is 40 turns/s per worker; what it loses beyond the agent's 50 ms is the worker's
own path (the partition sweep, PostgreSQL's claim, load, append and record, the reply's publish
and the ack) and, with 4 workers on a 2-core machine shared with NATS, PostgreSQL, the bench and
whatever else runs, the cores.

The per-turn cost of the JetStream path: one chat, one request at a time through the HTTP API of
a `--role all` process on the nats bus, against the same process on the in-process bus (both with
sessions in PostgreSQL, so only the bus differs). Its worker is bounded like the others, so the
figure includes how soon an idle worker sees a new message (an arrival wakes it; it once waited
for its next sweep, `fetch_wait_s`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import aiohttp
import nats
from nats.js.errors import NotFoundError

from bench.report import Figure
from bench.sessions_postgres import bench_database
from bus import InboundMessage
from gateway.cluster.codec import InboundEnvelope
from gateway.cluster.streams import ClusterNames
from tests.support.daemon import DaemonProcess, free_port

SUITE = "cluster"
NATS_URL = os.environ.get("OCTOS_BENCH_NATS", "nats://127.0.0.1:4222")
CHATS = 64
MESSAGES_PER_CHAT = 5
PARTITIONS = 64
WORKER_MAX_TURNS = 2
AGENT_DELAY_S = 0.05
WORKER_COUNTS = (1, 2, 4)
LATENCY_REQUESTS = 100
START_TIMEOUT_S = 60.0
ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


#: pieces 2: the echo agent waits delay_s once between them, 50 ms per turn.
SLOW_AGENT = f"{{type: echo, delay_s: {AGENT_DELAY_S}, pieces: 2}}"
#: For the bus's own cost: an instant agent, one piece (nothing streamed).
INSTANT_AGENT = "{type: echo, pieces: 1}"


def _config(directory: Path, prefix: str, dsn: str, *, bus: str, channels: str, agent: str) -> Path:
    (directory / "profiles").mkdir(parents=True, exist_ok=True)
    # followup: every message is a turn of its own (collect would join a chat's backlog).
    (directory / "profiles" / "bench.yaml").write_text(
        f"agent: {agent}\nqueue_mode: followup\nchannels: {channels}\n"
    )
    nats_bus = (
        f'{{backend: nats, nats: {{url: "{NATS_URL}", stream_prefix: {prefix}, '
        f"partitions: {PARTITIONS}, worker_max_turns: {WORKER_MAX_TURNS}, fetch_wait_s: 0.2}}}}"
    )
    config = directory / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            data_dir: data
            profiles_dir: profiles
            http: {{host: 127.0.0.1, port: 0}}
            logging: {{level: info, format: json}}
            bus: {nats_bus if bus == "nats" else "{backend: memory}"}
            store: {{backend: postgres, dsn: "{dsn}"}}
            """
        )
    )
    return config


async def _started(config: Path, *args: str, ready: str) -> DaemonProcess:
    daemon = DaemonProcess(config, *args, "--http-port", "0", env=ENV)
    await daemon.start()
    await daemon.wait_log(lambda event: event.get("event") == ready, START_TIMEOUT_S)
    return daemon


async def _stop(daemons: list[DaemonProcess]) -> None:
    for daemon in daemons:
        if daemon.process is not None and daemon.process.returncode is None:
            daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        await daemon.wait(START_TIMEOUT_S)


async def _delete_streams(prefix: str) -> None:
    client = await nats.connect(NATS_URL)
    try:
        for suffix in ("IN", "OUT", "DEAD"):
            try:
                await client.jetstream().delete_stream(f"{prefix}_{suffix}")
            except NotFoundError:
                continue
    finally:
        await client.close()


async def _turns_per_second(workers: int, dsn: str) -> float:
    prefix = f"BENCH{secrets.token_hex(4).upper()}"
    names = ClusterNames(prefix, PARTITIONS)
    with tempfile.TemporaryDirectory(prefix="octos-bench-cluster-") as tmp:
        config = _config(Path(tmp), prefix, dsn, bus="nats", channels="[]", agent=SLOW_AGENT)
        daemons = [
            await _started(config, "--role", "worker", ready="cluster.worker_running")
            for _ in range(workers)
        ]
        client = await nats.connect(NATS_URL)
        try:
            total = CHATS * MESSAGES_PER_CHAT
            done = asyncio.Event()
            replies = 0

            async def count(_msg: object) -> None:
                nonlocal replies
                replies += 1
                if replies == total:
                    done.set()

            await client.subscribe(f"{prefix}.out.>", cb=count)
            js = client.jetstream()
            started = time.perf_counter()
            for index in range(MESSAGES_PER_CHAT):
                for chat in range(CHATS):
                    message = InboundMessage(
                        channel="telegram",
                        sender_id="1",
                        chat_id=f"chat-{chat}",
                        content=f"message {index}",
                    )
                    envelope = InboundEnvelope("bench", f"{prefix}-{chat}-{index}", message)
                    partition = names.partition_of_chat("bench", message)
                    await js.publish(
                        names.inbound_subject(partition),
                        envelope.body(),
                        headers=envelope.headers(envelope.inbound_id),
                    )
            await asyncio.wait_for(done.wait(), START_TIMEOUT_S * 2)
            elapsed = time.perf_counter() - started
        finally:
            await client.close()
            await _stop(daemons)
            await _delete_streams(prefix)
    return total / elapsed


async def _request_latency_s(bus: str, dsn: str) -> float:
    """Median seconds per request through the API of one `--role all` process."""
    prefix = f"BENCH{secrets.token_hex(4).upper()}"
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="octos-bench-cluster-") as tmp:
        channels = f"[{{type: api, port: {port}}}]"
        config = _config(Path(tmp), prefix, dsn, bus=bus, channels=channels, agent=INSTANT_AGENT)
        daemon = await _started(config, ready="api.web_chat_ready")
        samples = []
        try:
            async with aiohttp.ClientSession() as http:
                for index in range(LATENCY_REQUESTS + 5):
                    body = {"chat_id": f"latency-{bus}", "content": f"ping {index}"}
                    began = time.perf_counter()
                    async with http.post(f"http://127.0.0.1:{port}/v1/chat", json=body) as reply:
                        assert reply.status == 200, await reply.text()
                        await reply.read()
                    if index >= 5:  # the first few warm the connections up
                        samples.append(time.perf_counter() - began)
        finally:
            await _stop([daemon])
            if bus == "nats":
                await _delete_streams(prefix)
    return statistics.median(samples)


async def _measure() -> list[Figure]:
    async with bench_database(SUITE) as dsn:
        if dsn is None:
            return []
        rates = {n: await _turns_per_second(n, dsn) for n in WORKER_COUNTS}
        memory_s = await _request_latency_s("memory", dsn)
        nats_s = await _request_latency_s("nats", dsn)
    figures = [
        Figure(SUITE, f"turns/s, {n} worker{'s' if n > 1 else ''}", round(rate, 1), "turns/s")
        for n, rate in rates.items()
    ]
    for n in WORKER_COUNTS[1:]:
        ratio = rates[n] / rates[1]
        target = 0.8 * n
        figures.append(
            Figure(
                SUITE,
                f"{n} workers / 1 worker",
                round(ratio, 2),
                "ratio",
                target=f">= {target:g}" if n == 4 else None,
                ok=ratio >= target if n == 4 else None,
            )
        )
    figures += [
        Figure(SUITE, "API turn, in-process bus", round(memory_s * 1000, 2), "ms"),
        Figure(SUITE, "API turn, JetStream bus", round(nats_s * 1000, 2), "ms"),
        Figure(SUITE, "JetStream overhead per turn", round((nats_s - memory_s) * 1000, 2), "ms"),
        Figure(SUITE, "JetStream / in-process turn", round(nats_s / memory_s, 2), "ratio"),
    ]
    return figures


def run() -> list[Figure]:
    try:
        return asyncio.run(_measure())
    except OSError as error:
        print(f"{SUITE}: left out (NATS at {NATS_URL}: {error})", file=sys.stderr)
        return []
