# The agent service: the autoresearch CLI and the loop, talking to the LLM API.
# No torch and no CUDA here: training happens in the trainer service, through the spool.
# BASE: any Debian-based image with Python >= 3.10 and pip (the test builds its own, offline).
ARG BASE=python:3.11-slim
FROM ${BASE}

RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# The dependencies first (pinned by docker/constraints.txt), so that code changes rebuild only the last layers.
COPY pyproject.toml ./
COPY docker/constraints.txt ./docker/
RUN mkdir -p agent trainer && touch README.md agent/__init__.py trainer/__init__.py \
    && pip install --no-cache-dir -c docker/constraints.txt . && pip uninstall -y autoresearch
COPY README.md ./
COPY agent ./agent
COPY trainer ./trainer
COPY prompts ./prompts
# Editable, so that the CLI finds prompts/ (its default --program) next to its code in /app.
RUN pip install --no-cache-dir --no-deps -e .

# Named volumes take the owner of the directory they are first mounted on: researcher (uid 1000).
RUN useradd --create-home --uid 1000 researcher \
    && mkdir -p /data /workspaces /spool && chown researcher:researcher /data /workspaces /spool
USER researcher
ENV AUTORESEARCH_CACHE=/data AUTORESEARCH_WORKSPACES=/workspaces
ENTRYPOINT ["autoresearch"]
