# The trainer service: PyTorch, the trainer's dependencies and the FA3 kernels, serving training
# jobs from the spool. It runs with no network and no API keys, the data cache and workspaces
# read-only (see compose.yaml). Each run is a stranger under bubblewrap (trainer/sandbox/untrusted.py):
# the worker runs as root in the container so that it can make the run's mounts, and every run
# drops to uid 65534 with no capabilities.
#
# BASE: a Debian/Ubuntu image with Python and torch (the test builds a CPU one, offline).
# KERNELS: "hub" fetches the FA3 kernels (version 1, as train.py asks for them) from the Hugging
# Face hub; "cache" uses only what lies in docker/kernels-cache/ (a Hugging Face hub cache, e.g.
# a copy of ~/.cache/huggingface/hub from a machine that fetched them); "none" builds without
# them (runs fall back to FlexAttention).
ARG BASE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
FROM ${BASE}

# A C and C++ compiler: on CUDA every run compiles (Triton builds its launchers, inductor its CPU code), and the
# runtime images have none. Python's headers come with the base (the PyTorch images' conda Python has them).
RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap util-linux gcc g++ libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -c "import pathlib, sys, sysconfig; h = pathlib.Path(sysconfig.get_paths()['include'], 'Python.h'); \
sys.exit(0 if h.exists() else f'{h} is missing: torch.compile needs Python headers; use a BASE that has them')"
WORKDIR /app
COPY pyproject.toml ./
COPY docker/constraints.txt ./docker/
RUN mkdir -p agent trainer && touch README.md agent/__init__.py trainer/__init__.py \
    && pip install --no-cache-dir -c docker/constraints.txt ".[train]" && pip uninstall -y autoresearch

ENV HF_HOME=/opt/hf HF_HUB_CACHE=/opt/hf/hub
ARG KERNELS=hub
COPY docker/kernels-cache/ /opt/hf/hub/
COPY docker/fetch_kernels.py /opt/fetch_kernels.py
RUN python /opt/fetch_kernels.py "${KERNELS}" && chmod -R a+rX /opt/hf

COPY README.md ./
COPY agent ./agent
COPY trainer ./trainer
COPY prompts ./prompts
RUN pip install --no-cache-dir --no-deps -e .

# Named volumes take the owner of the directory they are first mounted on: the agent's uid 1000.
# The worker (root) reads the agent's repositories: git must not refuse them as someone else's.
RUN mkdir -p /data /workspaces /spool /scratch && chown 1000:1000 /data /workspaces /spool
ENV HF_HUB_OFFLINE=1 AUTORESEARCH_CACHE=/data \
    GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0=*
ENTRYPOINT ["python", "-m", "trainer.remote.worker", "--spool", "/spool", "--scratch", "/scratch"]
