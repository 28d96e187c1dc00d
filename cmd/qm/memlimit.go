package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the container's memory limit the Go
// heap may grow to before the collector works harder to stay under it;
// the rest is for stacks, the runtime and what the kernel counts besides.
const memoryLimitShare = 0.9

// A watching allocator's heap is mostly the cache of what it watches, and
// garbage from decoding watch events; left to GOGC alone, the garbage can
// take the heap to twice what is live, and a container limit that fits the
// cache with room to spare kills the process anyway. So `qm serve` sets
// Go's soft memory limit from the container's cgroup limit, unless the
// user set GOMEMLIMIT.
func applyContainerMemoryLimit(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit, source, err := cgroupMemoryLimit(os.DirFS("/"))
	if err != nil {
		log.Debug("no container memory limit found; the Go heap is bounded by GOGC only", "reason", err)
		return
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Go memory limit set from the container's", "container_limit_bytes", limit, "go_limit_bytes", soft, "from", source)
}

// cgroupMemoryLimit reads this process's memory limit: cgroup v2's
// memory.max for the cgroup named in /proc/self/cgroup (or at the root of
// the cgroup file system, as a container with its own cgroup namespace
// sees it), else cgroup v1's memory.limit_in_bytes. It returns an error
// when there is none or it is unlimited.
func cgroupMemoryLimit(root fs.FS) (int64, string, error) {
	var dirs []string
	if b, err := fs.ReadFile(root, "proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(b)) {
			// v2: "0::/path"; v1: "N:memory:/path" (or with other controllers).
			parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(parts) != 3 {
				continue
			}
			p := strings.TrimPrefix(parts[2], "/")
			switch {
			case parts[0] == "0" && parts[1] == "":
				dirs = append(dirs, path.Join("sys/fs/cgroup", p))
			case strings.Contains(","+parts[1]+",", ",memory,"):
				dirs = append(dirs, path.Join("sys/fs/cgroup/memory", p))
			}
		}
	}
	dirs = append(dirs, "sys/fs/cgroup", "sys/fs/cgroup/memory")
	for _, d := range dirs {
		for _, name := range []string{"memory.max", "memory.limit_in_bytes"} {
			file := path.Join(d, name)
			b, err := fs.ReadFile(root, file)
			if err != nil {
				continue
			}
			v := strings.TrimSpace(string(b))
			if v == "max" {
				return 0, "/" + file, errors.New("/" + file + " is unlimited")
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0, "/" + file, fmt.Errorf("/%s: unreadable limit %q", file, v)
			}
			// cgroup v1 writes "no limit" as the largest page-aligned int64.
			if n >= math.MaxInt64/2 {
				return 0, "/" + file, errors.New("/" + file + " is unlimited")
			}
			return n, "/" + file, nil
		}
	}
	return 0, "", errors.New("no cgroup memory limit file")
}
