# syntax=docker/dockerfile:1
#
# The meshdrain image: one static binary, nothing else. Pods use it as an init container that
# copies meshdrain into a shared emptyDir (`meshdrain install /meshdrain`), from which the app
# container's preStop hook runs it; see examples/.
#
#   docker build -t ghcr.io/meshdrain/meshdrain:v0.1.0 --build-arg VERSION=v0.1.0 .

ARG GO_IMAGE=golang:1.26

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static (no cgo): the binary is copied into app images whose libc is unknown.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/meshdrain/meshdrain/pkg/cli.Version=${VERSION}" \
      -o /out/meshdrain ./cmd/meshdrain
# Fail the build if the binary is dynamically linked or over the size limit.
RUN bash scripts/check-binary.sh /out/meshdrain
# Smoke test: it runs, and `install` produces an identical executable.
RUN /out/meshdrain version \
 && mkdir /tmp/shared \
 && /out/meshdrain install /tmp/shared \
 && cmp /out/meshdrain /tmp/shared/meshdrain

# scratch: no shell, no libc, nothing to patch. The binary lives outside /meshdrain so the
# emptyDir can be mounted there.
FROM scratch
COPY --from=build /out/meshdrain /usr/local/bin/meshdrain
# nonroot (distroless's uid); emptyDir volumes are writable by any uid.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/meshdrain"]
CMD ["install", "/meshdrain"]
