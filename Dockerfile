# syntax=docker/dockerfile:1
#
# One image holds the three Argus binaries, so a release is one artifact and
# the orchestrator, the monitor and the argus command-line client can never
# be built from different sources.
#
#   docker build -t argus:latest .
#
#   # orchestrator (the default entrypoint); embedded etcd + FerretDB under
#   # /var/lib/argus unless ARGUS_ETCD_ENDPOINTS / ARGUS_MONGO_URI are set
#   docker run -p 9015:9015 -v argus-data:/var/lib/argus argus:latest
#
#   # monitor: override the entrypoint (the Kubernetes manifests set
#   # command: [/usr/local/bin/monitor])
#   docker run --entrypoint /usr/local/bin/monitor \
#     -v $HOME/.kube/config:/kubeconfig:ro argus:latest --kubeconfig /kubeconfig
#
#   # argus, the command-line client (docs/cli.md)
#   docker run --rm -e ARGUS_SERVER=http://argus:9015 --entrypoint /usr/local/bin/argus \
#     argus:latest wait demo/shop/v1/shop --for ready --timeout 5m
#
# The binaries are static (CGO_ENABLED=0; the embedded FerretDB uses a
# pure-Go SQLite), so the final image needs no libc and no shell.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Modules first: a source change then reuses the downloaded-modules layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY src/ src/
# The caches persist across builds on the builder; nothing of them lands in
# the image. GOOS/GOARCH from the target platform allow cross-builds
# (docker buildx build --platform linux/arm64) without emulating the compiler.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w" -o /out/bin/ ./src/cmd/orchestrator ./src/cmd/monitor ./src/cmd/argus
# The final image has no shell to mkdir with, so the data directory is made
# here and copied with the non-root owner.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="argus" \
      org.opencontainers.image.description="Argus multi-cluster application status: orchestrator, monitor and the argus client" \
      org.opencontainers.image.source="https://github.com/argus-mc/argus" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/bin/orchestrator /out/bin/monitor /out/bin/argus /usr/local/bin/
# Embedded mode keeps etcd and FerretDB data here (data-dir/etcd,
# data-dir/ferretdb); mount a volume on it to keep the data. Unused when both
# external stores are configured. The monitor has no --data-dir flag, so the
# variable does not affect it.
COPY --from=build --chown=65532:65532 /out/data /var/lib/argus
ENV ARGUS_DATA_DIR=/var/lib/argus
WORKDIR /var/lib/argus
# distroless "nonroot" is uid/gid 65532; numeric, so runAsNonRoot can verify it.
USER 65532:65532
# 9016: gRPC status notifications, when --grpc-listen turns them on.
EXPOSE 9015 9016
ENTRYPOINT ["/usr/local/bin/orchestrator"]
