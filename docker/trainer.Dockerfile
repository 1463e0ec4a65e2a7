# The trainer service: CUDA PyTorch, the trainer's dependencies and the FA3 kernels, serving
# training jobs from the spool. It runs with no network, no API keys, and the data cache and
# workspaces mounted read-only (see compose.yaml).
FROM pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime

RUN apt-get update && apt-get install -y --no-install-recommends git bubblewrap && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agent ./agent
COPY trainer ./trainer
COPY prompts ./prompts
RUN pip install --no-cache-dir .

# Fetch the FlashAttention-3 kernels now, so that runs work offline (HF_HUB_OFFLINE=1).
ENV HF_HOME=/opt/hf
RUN python -c "from huggingface_hub import snapshot_download as get; \
[get(repo) for repo in ('varunneal/flash-attention-3', 'kernels-community/flash-attn3')]" \
    && chmod -R a+rX /opt/hf

RUN useradd --create-home --uid 1000 trainer
USER trainer
ENV HF_HUB_OFFLINE=1 AUTORESEARCH_CACHE=/data TORCHINDUCTOR_CACHE_DIR=/scratch/inductor
ENTRYPOINT ["python", "-m", "trainer.worker", "--spool", "/spool", "--scratch", "/scratch"]
