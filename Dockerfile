# The draco image: one image for `draco operator`, `draco webhook` and `draco agent` (the
# chart picks the command). Two stages: the first builds the wheel and installs it with its
# dependencies into a virtualenv, the second copies only that virtualenv onto a slim base
# and runs as a non-root user (the agent's DaemonSet overrides the user: it writes
# root-owned host directories).
#
#   docker build -t draco:0.1.0 .                       # fake driver only
#   docker build --build-arg EXTRAS=nvidia -t draco:0.1.0-nvidia .   # with NVML bindings
#
# `make image` runs this with docker or podman; without either it runs hack/image.sh,
# which makes the same image from Debian packages (python3 3.11 of bookworm) and PyPI and
# writes it as an OCI archive. tests/e2e/test_image.py runs the install steps without an
# engine; tests/cluster runs the image on a node.

# Pinned to a patch release of Python and of Debian's slim image. (Add the digest,
# `@sha256:...`, where you build: our machines cannot reach a registry to read it.)
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# The same three steps as tests/e2e/test_image.py: wheel, clean venv, `draco --version`.
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/draco \
 && wheel="$(ls /wheels/draco-*.whl)" \
 && /opt/draco/bin/pip install "${wheel}${EXTRAS:+[$EXTRAS]}" \
 && /opt/draco/bin/pip uninstall -y pip \
 && /opt/draco/bin/draco --version

# The Tiltfile's target: the final image with the installed package owned by the runtime
# user, so Tilt's live update can sync source files into it. Not for production.
FROM ${PYTHON_IMAGE} AS dev
COPY --from=build --chown=65532:65532 /opt/draco /opt/draco
ENV PATH=/opt/draco/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home nonroot
USER 65532:65532
ENTRYPOINT ["draco"]

# The image (the last stage: what `docker build .` makes).
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="draco" \
      org.opencontainers.image.description="Dynamic Resource Allocation for any cluster" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/draco /opt/draco
ENV PATH=/opt/draco/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# 65532: the "nonroot" uid of distroless images, the one the chart's securityContext sets.
RUN groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home nonroot
USER 65532:65532
ENTRYPOINT ["draco"]
CMD ["--help"]
