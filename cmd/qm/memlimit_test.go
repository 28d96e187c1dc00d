package main

import (
	"testing"
	"testing/fstest"
)

func TestCgroupMemoryLimit(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, c := range []struct {
		name    string
		files   fstest.MapFS
		want    int64
		wantErr bool
	}{
		{"v2 with a cgroup path", fstest.MapFS{
			"proc/self/cgroup":                          file("0::/kubepods/pod1/c1\n"),
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": file("1073741824\n"),
			"sys/fs/cgroup/memory.max":                  file("max\n"),
		}, 1 << 30, false},
		{"v2 in its own cgroup namespace", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("536870912\n"),
		}, 512 << 20, false},
		{"v2 unlimited", fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("max\n"),
		}, 0, true},
		{"v1", fstest.MapFS{
			"proc/self/cgroup": file("12:cpu,cpuacct:/x\n11:memory:/kubepods/pod2\n"),
			"sys/fs/cgroup/memory/kubepods/pod2/memory.limit_in_bytes": file("268435456\n"),
		}, 256 << 20, false},
		{"v1 unlimited", fstest.MapFS{
			"proc/self/cgroup":                           file("11:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
		}, 0, true},
		{"garbage", fstest.MapFS{
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, 0, true},
		{"none", fstest.MapFS{}, 0, true},
	} {
		got, source, err := cgroupMemoryLimit(c.files)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("%s: %d from %s, %v; want %d (error %v)", c.name, got, source, err, c.want, c.wantErr)
		}
	}
}
