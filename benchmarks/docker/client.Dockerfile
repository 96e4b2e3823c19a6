# The benchmark client: Python 3.11, this repo with its bench extra, OpenSSH's
# sftp (a baseline) and tc for netem. Built from the repo root; see
# docker-compose.yml. client.Dockerfile.dockerignore keeps .venv and .git out.
FROM python:3.11-slim-bookworm
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-client iproute2 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /repo
COPY . .
RUN pip install --no-cache-dir '.[bench]'
ENTRYPOINT ["sh", "/repo/benchmarks/docker/client-entrypoint.sh"]
