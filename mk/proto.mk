# Protobuf code generation for the allocator's APIs (allocator/pb/...).
# tools/proto/generate.sh does the work: it installs Debian's protoc when it
# is missing, builds the pinned plugins from the tools/proto module into
# $(BIN), and runs protoc.

GENERATE_TARGETS += generate-proto
VERIFY_DEPS      += verify-proto

.PHONY: generate-proto verify-proto

## generate-proto: regenerate the committed *.pb.go files from the .proto files.
generate-proto:
	GO="$(GO)" BIN="$(BIN)" bash tools/proto/generate.sh

## verify-proto: fail if the committed generated code is stale.
verify-proto:
	GO="$(GO)" BIN="$(BIN)" bash tools/proto/generate.sh --verify
