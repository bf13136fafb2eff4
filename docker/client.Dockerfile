# The cuwire client image: runs CUDA programs here, with no GPU and no CUDA installed, on the GPUs of a
# cuwire server (see docker/README.md). Build from the repository root:
#   docker build -f docker/client.Dockerfile -t cuwire-client .
#
# The official Python image is built with --enable-shared: the client library runs Python inside C and C++
# programs with that libpython. The wheel (the client library compiled into it) is built in a stage of its
# own, so the image that runs has no compiler: nothing is compiled where programs run.
FROM python:3.12.12-slim-bookworm AS build

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /tmp/cuwire-src
COPY pyproject.toml setup.py README.md ./
COPY cuwire ./cuwire
RUN pip wheel --no-cache-dir --no-deps -w /tmp/wheels .

FROM python:3.12.12-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# cuwire and what it depends on (NVIDIA's CUDA runtime among them; gRPC for the Kubernetes device plugin,
# which runs from this image too), in a venv of its own
COPY --from=build /tmp/wheels /tmp/wheels
RUN python3 -m venv /opt/cuwire \
    && /opt/cuwire/bin/pip install --no-cache-dir "$(ls /tmp/wheels/cuwire-*.whl)[kubernetes]" \
    && rm -rf /tmp/wheels

RUN groupadd --system --gid 10001 cuwire \
    && useradd --system --create-home --uid 10001 --gid 10001 cuwire
# CUWIRE_SERVER (and CUWIRE_TOKEN, CUWIRE_TLS_FINGERPRINT) name the server: given with `docker run -e`.
ENV PATH=/opt/cuwire/bin:$PATH \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /home/cuwire

# `docker run IMAGE PROGRAM ARGS...` runs the program through cuwire; its exit code passes through.
ENTRYPOINT ["cuwire", "run", "--"]
CMD ["cuwire", "doctor"]
