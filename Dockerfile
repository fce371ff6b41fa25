# syntax=docker/dockerfile:1
#
# The meshdrain image built from source, for a builder with network (CI, a registry's build
# service). `make image` builds the same image offline from binaries compiled on the host
# (scripts/image/Dockerfile.release, the same as this file's last stage).
# Pods use it as an init container that copies meshdrain into a shared emptyDir
# (`meshdrain install /meshdrain`), from which the app container's preStop hook runs it; see
# examples/.
#
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/meshdrain/meshdrain:v0.1.0 --push .
#
# podman 4.3 (Debian 12) does not set BUILDPLATFORM: add --build-arg BUILDPLATFORM=linux/amd64
# (the builder's own platform), or the build stage runs the target's Go image under emulation.

# Fully qualified: podman refuses a short name that neither an alias nor a single search
# registry resolves ("short-name did not resolve"; containers-registries.conf(5)).
ARG GO_IMAGE=docker.io/library/golang:1.26

# The compiler runs on the builder's own platform and cross-compiles for each target: Go needs
# no emulator for that, and an arm64 build under QEMU would take many times longer.
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
# Static (no cgo): the binary is copied into app images whose libc is unknown.
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
      -ldflags "-s -w -X github.com/meshdrain/meshdrain/pkg/cli.Version=${VERSION}" \
      -o /out/meshdrain ./cmd/meshdrain
# Fail the build if the binary is dynamically linked or over the size limit.
RUN bash scripts/check-binary.sh /out/meshdrain
# Smoke test: it runs, and `install` produces an identical executable. Only a binary of the
# builder's own architecture can run here; the others are checked by their size and linking.
RUN if [ "${TARGETOS}/${TARGETARCH}" != "$(go env GOHOSTOS)/$(go env GOHOSTARCH)" ]; then \
      echo "smoke test skipped: a ${TARGETOS}/${TARGETARCH} binary does not run on this builder"; \
    else \
      /out/meshdrain version \
      && mkdir /tmp/shared \
      && /out/meshdrain install /tmp/shared \
      && cmp /out/meshdrain /tmp/shared/meshdrain; \
    fi

# scratch: no shell, no libc, nothing to patch. The binary lives outside /meshdrain so the
# emptyDir can be mounted there.
FROM scratch
ARG VERSION=dev
ARG REVISION
LABEL org.opencontainers.image.title="meshdrain" \
      org.opencontainers.image.description="Kubernetes preStop hook for pods with a service-mesh sidecar: drains inbound traffic before the app stops" \
      org.opencontainers.image.source="https://github.com/meshdrain/meshdrain" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/meshdrain /usr/local/bin/meshdrain
# nonroot (distroless's uid); emptyDir volumes are writable by any uid.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/meshdrain"]
CMD ["install", "/meshdrain"]
