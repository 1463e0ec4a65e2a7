# The agent service: the autoresearch CLI and the loop, talking to the LLM API.
# No torch and no CUDA here: training happens in the trainer service, through the spool.
FROM python:3.11-slim

RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY agent ./agent
COPY trainer ./trainer
COPY prompts ./prompts
# Everything the project needs except torch and kernels, then the project itself without its deps.
RUN pip install --no-cache-dir rustbpe tiktoken pyarrow numpy httpx anthropic openai GitPython tenacity \
        pydantic pydantic-settings typer rich optuna matplotlib \
    && pip install --no-cache-dir --no-deps .

RUN useradd --create-home --uid 1000 researcher
USER researcher
ENV AUTORESEARCH_CACHE=/data AUTORESEARCH_WORKSPACES=/workspaces
ENTRYPOINT ["autoresearch"]
