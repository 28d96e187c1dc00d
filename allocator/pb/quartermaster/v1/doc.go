// Package quartermasterv1 is the generated Go code for Quartermaster's own
// allocator extensions (proto package quartermaster.v1, service
// AllocationAdmin: List and Release), kept apart from the Agones API so that
// package never changes. Edit quartermaster.proto and run
// `make generate-proto`; never edit the *.pb.go files by hand.
package quartermasterv1
