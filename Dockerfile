# The omegitops job image: `omegitops` on Python 3.11, with git (GitPython
# drives the git binary to clone, commit and push), running as a non-root user.
#
#   docker build -t ghcr.io/omegitops/omegitops:0.1.0 .
#
# Releases are built by .github/workflows/release.yml from a tag vX.Y.Z.
#
# The jobs in pipelines/ run it as `omegitops reconcile ...` with a read-only
# root filesystem, an emptyDir at /work (the clone) and /tmp.

# A fixed Python patch release on a fixed Debian release, pinned by the digest of
# its multi-platform index, so that a re-pushed tag changes nothing. Bump it on
# purpose: `docker buildx imagetools inspect python:3.11.11-slim-bookworm` (or
# `crane digest python:3.11.11-slim-bookworm`) prints the new digest.
# BASE_IMAGE is an argument only so that a build without a registry (the tests
# build a Debian base of their own, tests/controlplane/node/images.sh) can name
# another base; releases use this default.
ARG BASE_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5
FROM ${BASE_IMAGE}

# The release's version (the git tag without its "v"), set by .github/workflows/release.yml.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="omegitops" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/omegitops/omegitops" \
      org.opencontainers.image.licenses="Apache-2.0"

# No .pyc files in the read-only image, logs unbuffered, pip quiet and offline
# of its own version check. Git never prompts: a missing credential fails the
# run instead of hanging it.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GIT_TERMINAL_PROMPT=0

# git for GitPython; ca-certificates for https remotes.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# Git credentials come from the environment (GIT_USERNAME and GIT_TOKEN from
# the Secret omegitops-git, or a mounted file named by GIT_TOKEN_FILE): omegitops
# hands them to git itself, through a credential helper scoped to the remote's
# host, never in the URL or on the command line. The author of report commits
# is `reconcile --author` (default "omegitops <omegitops@localhost>").

# Install the package (and only what it needs: see .dockerignore). Its dependencies,
# and setuptools that builds it, come from requirements.lock: exact versions, each
# file checked against its sha256, so that two builds of one commit install the same
# bytes. The package itself goes on top with nothing more (--no-deps), built by the
# locked setuptools (--no-build-isolation); pip check fails the build if the lock no
# longer satisfies pyproject.toml. Regenerate the lock after changing the
# dependencies:
#
#   pip-compile --generate-hashes --allow-unsafe --strip-extras --extra kube \
#     --extra git --all-build-deps --no-emit-index-url --no-emit-find-links \
#     --output-file requirements.lock pyproject.toml
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock
COPY pyproject.toml README.md ./
COPY omegitops ./omegitops
RUN pip install --no-cache-dir --no-deps --no-build-isolation '.[all]' \
    && pip check \
    && rm -rf /src

# A numeric, unprivileged user, so that Kubernetes' runAsNonRoot can check it.
RUN groupadd --system --gid 10001 omegitops \
    && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/omegitops \
        --shell /usr/sbin/nologin omegitops \
    && install -d -o 10001 -g 10001 /work
USER 10001:10001
WORKDIR /work

ENTRYPOINT ["omegitops"]
CMD ["--help"]
