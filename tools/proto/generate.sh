#!/usr/bin/env bash
# Generates the Go code for the allocator's .proto files.
#
#   generate.sh            regenerate in place (make generate-proto)
#   generate.sh --verify   regenerate into a temporary directory and fail if
#                          the committed code differs (make verify-proto)
#
# protoc comes from Debian's protobuf-compiler, installed here when missing so
# that a clean CI machine needs no manual step; the well-known types
# (wrappers.proto, timestamp.proto) come from Debian's libprotobuf-dev. The Go
# plugins are built from this directory's module, which pins their versions:
# protoc-gen-go (the message types), protoc-gen-go-grpc (the services) and
# protoc-gen-go-vtproto (planetscale/vtprotobuf: reflection-free MarshalVT,
# UnmarshalVT and SizeVT methods; the allocator's gRPC codec writes every
# answer with them). UnmarshalVT does not check that proto3 strings are
# UTF-8, so requests are read with the proto library, which does.
#
# Environment: GO (default go), BIN (where the plugins go; default ./bin at
# the repository root).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
GO=${GO:-go}
BIN=${BIN:-$root/bin}

PROTOS=(
  allocator/pb/allocation/allocation.proto
  allocator/pb/quartermaster/v1/quartermaster.proto
)

mode=generate
case "${1:-}" in
  "") ;;
  --verify) mode=verify ;;
  *) echo "usage: $0 [--verify]" >&2; exit 2 ;;
esac

# include_dir prints the directory holding google/protobuf/*.proto, or fails.
include_dir() {
  local cands=() p
  if p=$(command -v protoc 2>/dev/null); then
    cands+=("$(dirname "$(readlink -f "$p")")/../include")
  fi
  if command -v dpkg >/dev/null 2>&1; then
    p=$(dpkg -L libprotobuf-dev 2>/dev/null | grep '/google/protobuf/wrappers.proto$' | head -n1 || true)
    [ -n "$p" ] && cands+=("${p%/google/protobuf/wrappers.proto}")
  fi
  for p in "${cands[@]}"; do
    if [ -f "$p/google/protobuf/wrappers.proto" ] && [ -f "$p/google/protobuf/timestamp.proto" ]; then
      (cd "$p" && pwd)
      return 0
    fi
  done
  return 1
}

ensure_protoc() {
  if command -v protoc >/dev/null 2>&1 && include_dir >/dev/null; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "protoc and the protobuf include files are missing; install Debian's protobuf-compiler and libprotobuf-dev (or your system's equivalent)" >&2
    return 1
  fi
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
      echo "protoc is missing and installing it needs root: apt-get install protobuf-compiler libprotobuf-dev" >&2
      return 1
    fi
  fi
  echo "installing protobuf-compiler and libprotobuf-dev with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Try without refreshing first (fast when the lists are current); a fresh
  # machine has stale or no lists, so refresh and retry on failure.
  if ! "${sudo[@]}" apt-get install -y -q --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null 2>&1; then
    "${sudo[@]}" apt-get update -q >/dev/null
    "${sudo[@]}" apt-get install -y -q --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null
  fi
  include_dir >/dev/null || { echo "protobuf include files not found after installing libprotobuf-dev" >&2; return 1; }
}

build_plugins() {
  mkdir -p "$BIN"
  (cd tools/proto && "$GO" build -o "$BIN/" \
    google.golang.org/protobuf/cmd/protoc-gen-go \
    google.golang.org/grpc/cmd/protoc-gen-go-grpc \
    github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto)
}

# run_protoc OUT: writes the generated files under OUT, mirroring the
# repository layout.
run_protoc() {
  local out=$1 inc
  inc=$(include_dir)
  protoc \
    -I . -I "$inc" \
    --plugin=protoc-gen-go="$BIN/protoc-gen-go" \
    --plugin=protoc-gen-go-grpc="$BIN/protoc-gen-go-grpc" \
    --go_out="$out" --go_opt=paths=source_relative \
    --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
    --plugin=protoc-gen-go-vtproto="$BIN/protoc-gen-go-vtproto" \
    --go-vtproto_out="$out" --go-vtproto_opt=paths=source_relative \
    --go-vtproto_opt=features=marshal+unmarshal+unmarshal_unsafe+size \
    "${PROTOS[@]}"
}

# generated lists the generated files for the protos, relative to the root.
generated() {
  local p
  for p in "${PROTOS[@]}"; do
    echo "${p%.proto}.pb.go"
    echo "${p%.proto}_grpc.pb.go"
    echo "${p%.proto}_vtproto.pb.go"
  done
}

# strip_versions drops the header lines that name the protoc version, so a
# machine with another protoc build does not fail verification on a comment.
strip_versions() { grep -v -E '^// +(- )?protoc +v' "$1" || true; }

ensure_protoc
build_plugins

if [ "$mode" = generate ]; then
  run_protoc .
  echo "generated: $(generated | tr '\n' ' ')"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run_protoc "$tmp"
fail=0
while read -r f; do
  if [ ! -f "$f" ]; then
    echo "missing generated file: $f"; fail=1; continue
  fi
  if ! diff -u <(strip_versions "$f") <(strip_versions "$tmp/$f") >"$tmp/diff" 2>&1; then
    echo "stale generated file: $f"; head -n 40 "$tmp/diff"; fail=1
  fi
done < <(generated)

# The plugin pins are only meaningful if the tools module is tidy.
cp tools/proto/go.mod "$tmp/go.mod.bak"; cp tools/proto/go.sum "$tmp/go.sum.bak"
(cd tools/proto && "$GO" mod tidy)
if ! diff -q tools/proto/go.mod "$tmp/go.mod.bak" >/dev/null || ! diff -q tools/proto/go.sum "$tmp/go.sum.bak" >/dev/null; then
  echo "tools/proto/go.mod or go.sum is not tidy: run 'go mod tidy' in tools/proto"
  cp "$tmp/go.mod.bak" tools/proto/go.mod; cp "$tmp/go.sum.bak" tools/proto/go.sum
  fail=1
fi

if [ "$fail" != 0 ]; then
  echo "generated protobuf code is stale: run 'make generate-proto'"
  exit 1
fi
echo "generated protobuf code is up to date"
