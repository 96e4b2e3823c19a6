# A stock OpenSSH server (Debian 12's) and tc for netem. See docker-compose.yml.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends openssh-server iproute2 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --shell /bin/bash bench \
    && usermod --password '*' bench \
    && mkdir -p /run/sshd
COPY sshd_config /etc/ssh/sshd_config
COPY netem.sh server-entrypoint.sh /usr/local/lib/bench/
ENTRYPOINT ["sh", "/usr/local/lib/bench/server-entrypoint.sh"]
