// Package crds holds Quartermaster's CustomResourceDefinitions: Agones'
// GameServer and Fleet (agones.dev/v1) and GameServerAllocationPolicy
// (multicluster.agones.dev/v1), with lean structural schemas that keep every
// field Agones writes.
//
// The YAML files are the source of truth (kubectl apply -f deploy/crds/);
// they are embedded here so test rigs and tools install exactly the same
// definitions without finding the repository on disk.
package crds

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed *.yaml
var files embed.FS

// File is one CRD manifest.
type File struct {
	Name string // file name, for messages
	YAML []byte
}

// All returns every CRD manifest, sorted by file name so installs and
// dry-run output are stable.
func All() []File {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		panic(err) // the pattern is constant; it cannot be malformed
	}
	sort.Strings(names)
	out := make([]File, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			panic(err) // embedded at build time; reading cannot fail
		}
		out = append(out, File{Name: n, YAML: b})
	}
	return out
}
