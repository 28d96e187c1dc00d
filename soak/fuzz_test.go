package soak

import (
	"os"
	"strings"
	"testing"
	"time"
)

// FuzzReadHistory: any input is read or refused with an error, never a
// panic, and what is read can be checked.
func FuzzReadHistory(f *testing.F) {
	f.Add(`{"type":"run","start":"2026-01-02T03:00:00Z","end":"2026-01-02T03:10:00Z"}
{"type":"request","id":1,"caller":"a","cluster":"a","sent":"2026-01-02T03:00:01Z","answered":"2026-01-02T03:00:02Z","code":"OK","server":"gs-1"}
{"type":"release","id":1,"at":"2026-01-02T03:00:05Z","result":"OK"}
{"type":"fault","kind":"link-cut","start":"2026-01-02T03:00:01Z","end":"2026-01-02T03:00:02Z"}
`)
	f.Add(`{"type":"run"}`)
	f.Fuzz(func(t *testing.T, in string) {
		h, err := ReadHistory(strings.NewReader(in))
		if err != nil {
			return
		}
		Check(h, &Snapshot{Clusters: []ClusterRead{{Name: "a"}}}, Config{})
	})
}

// FuzzParseSchedule: any file is parsed or refused, and a parsed one
// expands.
func FuzzParseSchedule(f *testing.F) {
	for _, name := range []string{"default.yaml", "testdata/valid-full.yaml", "testdata/invalid-too-long.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSchedule(data)
		if err != nil {
			return
		}
		s.Schedule(s.Seed(), time.Hour)
	})
}
