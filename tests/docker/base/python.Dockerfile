# The test's stand-in for python:3.11-slim, built from a Debian image made by mmdebstrap
# (no image registry needed). The build context holds the host's CA bundle, so that pip can
# reach the package index wherever the host can; nothing of it is committed.
ARG DEBIAN=autoresearch-test/debian:bookworm
FROM ${DEBIAN}
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN python3 -m venv /opt/python
ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180
