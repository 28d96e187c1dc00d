// Package allocation is the generated Go code for Agones' allocator API
// (proto package allocation, service AllocationService), kept wire- and
// JSON-compatible with Agones so its clients work against Quartermaster
// unchanged. Edit allocation.proto and run `make generate-proto`; never edit
// the *.pb.go files by hand.
package allocation
