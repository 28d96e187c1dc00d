# The qm image: one static binary, the allocator (`qm serve`) and the fleet
# agent (`qm agent`) alike; deploy/allocator.yaml and the rig's kind provider
# (kindcluster/kind) run it with their own arguments.
#
#   docker build -t quartermaster.dev/qm:dev .
#
# The build stage's Go must be at least go.mod's `go` line
# (kindcluster/kind's Dockerfile test checks it).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so editing the source reuses the downloaded modules' layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO off: the runtime stage has no C library.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/qm ./cmd/qm

# distroless/static: CA certificates, /etc/passwd with the nonroot user,
# tzdata, and no shell or package manager to attack.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/qm /qm
# 65532 is distroless' nonroot; deploy/allocator.yaml runs as the same ids.
USER 65532:65532
ENTRYPOINT ["/qm"]
