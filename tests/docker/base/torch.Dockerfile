# The test's stand-in for the PyTorch base image: the python stand-in plus a CPU build of torch,
# installed from the wheels in the build context (the ones the host's pip resolves), and Python's headers, which
# the PyTorch images' Python has.
ARG PYTHON=autoresearch-test/python:3.11
FROM ${PYTHON}
RUN apt-get update && apt-get install -y --no-install-recommends python3-dev && rm -rf /var/lib/apt/lists/*
COPY wheels /tmp/wheels
RUN pip install --no-cache-dir --find-links /tmp/wheels /tmp/wheels/torch-*.whl && rm -rf /tmp/wheels
