package main

import (
	"os"
	"runtime/pprof"
)

// profileCPU writes this process's CPU profile to path until stop is
// called. qm load profiles itself this way: the load generator's own CPU,
// on a shared machine, is half of what a throughput figure measures.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
