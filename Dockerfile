# syntax=docker/dockerfile:1
# One image per Cairn component, from one multi-stage build:
#
#   docker build --target storage    -t cairn/storage:0.1.0 .
#   docker build --target controller -t cairn/controller:0.1.0 .
#   docker build --target gateway    -t cairn/gateway:0.1.0 .
#   docker build --target health     -t cairn/health:0.1.0 .
#
# Each image holds one virtual environment (/opt/cairn) with exactly its
# component's locked dependencies (uv.lock, `uv sync --frozen --no-dev`), runs as
# an unprivileged user, and writes nothing but its data volume (storage) and
# /tmp, so it runs with a read-only root filesystem. Its entrypoint is the
# component's console script; arguments are the script's flags.

# Python 3.11 slim, pinned by exact tag and by digest (the multi-platform index),
# so a rebuild gets the same base until someone moves both on purpose.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

# -- build: the locked dependencies, then the workspace's own packages -------------
FROM ${PYTHON_IMAGE} AS build
# uv from PyPI, like ./dev installs it, at the version the lock file was made with;
# only the build stages have it.
RUN pip install --no-cache-dir uv==0.13.9
# The image's own interpreter, never a downloaded one; compiled bytecode in the
# environment (the runtime's root filesystem is read-only, so it is compiled now
# or never); copies, not links, so the environment can move to the runtime stage.
ENV UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/cairn \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1
WORKDIR /src
# The manifests first: the dependency layers are rebuilt only when they change.
COPY pyproject.toml uv.lock ./
COPY libs/common/pyproject.toml libs/common/
COPY libs/client/pyproject.toml libs/client/
COPY services/storage/pyproject.toml services/storage/
COPY services/controller/pyproject.toml services/controller/
COPY services/gateway/pyproject.toml services/gateway/
COPY sidecars/health/pyproject.toml sidecars/health/

FROM build AS build-storage
RUN uv sync --frozen --no-dev --no-install-workspace --package cairn-kv-storage
COPY libs/ libs/
COPY services/storage/ services/storage/
RUN uv sync --frozen --no-dev --no-editable --package cairn-kv-storage

FROM build AS build-controller
RUN uv sync --frozen --no-dev --no-install-workspace --package cairn-kv-controller
COPY libs/ libs/
COPY services/controller/ services/controller/
RUN uv sync --frozen --no-dev --no-editable --package cairn-kv-controller

FROM build AS build-gateway
RUN uv sync --frozen --no-dev --no-install-workspace --package cairn-kv-gateway
COPY libs/ libs/
COPY services/gateway/ services/gateway/
RUN uv sync --frozen --no-dev --no-editable --package cairn-kv-gateway

FROM build AS build-health
RUN uv sync --frozen --no-dev --no-install-workspace --package cairn-kv-health
COPY libs/ libs/
COPY sidecars/health/ sidecars/health/
RUN uv sync --frozen --no-dev --no-editable --package cairn-kv-health

# -- runtime: the base, an unprivileged user, the environment -----------------------
FROM ${PYTHON_IMAGE} AS runtime
# A fixed uid/gid (10001) that the Kubernetes securityContext names too, and the
# mount point of the state a component keeps (the storage pods' data, the
# controller's file store under docker compose) owned by it: a fresh named volume
# takes its ownership from there.
RUN groupadd --system --gid 10001 cairn \
    && useradd --system --uid 10001 --gid cairn --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin cairn \
    && mkdir -p /var/lib/cairn && chown 10001:10001 /var/lib/cairn
ENV PATH=/opt/cairn/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /tmp
USER 10001:10001

FROM runtime AS storage
COPY --from=build-storage /opt/cairn /opt/cairn
VOLUME ["/var/lib/cairn"]
# client gRPC, internal gRPC (coordination, replication), metrics
EXPOSE 6648 6649 9090
ENTRYPOINT ["cairn-storage"]
CMD ["node", "--data-dir=/var/lib/cairn/data", "--host=0.0.0.0", "--metrics-host=0.0.0.0"]

FROM runtime AS controller
COPY --from=build-controller /opt/cairn /opt/cairn
# admin API and heartbeats, metrics
EXPOSE 6650 9091
ENTRYPOINT ["cairn-controller"]
CMD ["--help"]

FROM runtime AS gateway
COPY --from=build-gateway /opt/cairn /opt/cairn
# HTTP, metrics
EXPOSE 8080 9092
ENTRYPOINT ["cairn-gateway"]
CMD ["--help"]

FROM runtime AS health
COPY --from=build-health /opt/cairn /opt/cairn
# probes and status, metrics
EXPOSE 8081 9093
ENTRYPOINT ["cairn-health"]
CMD ["--help"]
