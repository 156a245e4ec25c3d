# octos-gateway: a slim, non-root image. Build: docker build -t octos-gateway .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system --gid 10001 octos \
    && useradd --system --uid 10001 --gid octos --home-dir /data --shell /usr/sbin/nologin octos

WORKDIR /opt/octos-gateway
COPY pyproject.toml README.md ./
COPY bus ./bus
COPY channels ./channels
COPY config ./config
COPY gateway ./gateway
COPY sessions ./sessions
RUN pip install ".[all]" && rm -rf /root/.cache

COPY examples/docker/gateway.yaml /etc/octos-gateway/gateway.yaml
COPY examples/docker/profiles /etc/octos-gateway/profiles
RUN mkdir -p /data && chown octos:octos /data

USER octos
VOLUME /data
# 8090: health and metrics; 8091: the HTTP API channel and its web chat page.
EXPOSE 8090 8091
# The HEALTHCHECK reflects "alive" (/healthz), not "ready" (/readyz): a channel that is down
# because of a bad token is not fixed by restarting the container, and an orchestrator that
# restarts unhealthy containers would loop. Point load balancers and readiness probes at /readyz.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8090/healthz', timeout=4).status == 200 else 1)"]

ENTRYPOINT ["octos-gateway"]
CMD ["run", "-c", "/etc/octos-gateway/gateway.yaml"]
