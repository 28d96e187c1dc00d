package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/soak"
	"github.com/quartermaster-dev/quartermaster/soakrun"
)

// soakDuration is a duration flag whose parse error says what a duration
// looks like (the flag package's own says only "parse error").
type soakDuration struct{ d *time.Duration }

func (v soakDuration) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v soakDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration with its unit, such as 90s, 5m or 1h30m")
	}
	*v.d = d
	return nil
}

// durationFlag defines a soakDuration flag. The usage must name its
// value in back quotes (`duration`), as the help shows it.
func durationFlag(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(soakDuration{p}, name, usage)
}

// checkSoakNumbers names the first numeric flag out of range.
func checkSoakNumbers(f *soakRunFlags) error {
	switch {
	case f.duration <= 0:
		return fmt.Errorf("--duration must be positive, got %s", f.duration)
	case !(f.rate > 0) || math.IsInf(f.rate, 0):
		return fmt.Errorf("--rate must be positive, got %g", f.rate)
	case f.session < 0:
		return fmt.Errorf("--session must not be negative, got %s", f.session)
	case f.settle < 0:
		return fmt.Errorf("--settle must not be negative, got %s", f.settle)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	case f.check.Examples < 1:
		return fmt.Errorf("--examples must be at least 1, got %d", f.check.Examples)
	case f.check.Window <= 0:
		return fmt.Errorf("--window must be positive, got %s", f.check.Window)
	}
	return nil
}

// checkSoakBinaries checks, before a rig is brought up, that --qm is an
// executable file and that --bin-dir holds the control-plane binaries:
// otherwise the rig would start API servers before failing.
func checkSoakBinaries(f *soakRunFlags) error {
	if f.qm != "" {
		st, err := os.Stat(f.qm)
		switch {
		case err != nil:
			return fmt.Errorf("--qm: %v", err)
		case st.IsDir() || st.Mode()&0o111 == 0:
			return fmt.Errorf("--qm %s: not an executable file", f.qm)
		}
	}
	if f.binDir != "" {
		if err := kindcluster.CheckBinaries(f.binDir, kindcluster.EtcdBinary, kindcluster.APIServerBinary); err != nil {
			return fmt.Errorf("--bin-dir: %v", err)
		}
	}
	return nil
}

// soakNotes says what the run will not do that its flags may have
// meant it to: kinds of the schedule with no fault that ends within
// --duration, and --target clusters without a --kubeconfig (their answers
// go unchecked against objects).
func soakNotes(opt *soakrun.Options) []string {
	var notes []string
	s := opt.Schedule
	if s == nil {
		s = soak.DefaultSchedule()
	}
	seed := opt.Seed
	if seed == 0 {
		seed = s.Seed()
	}
	in := map[string]bool{}
	for _, f := range s.Schedule(seed, opt.Duration) {
		in[f.Kind] = true
	}
	var missing []string
	for _, e := range s.Spec.Faults {
		if !in[e.Kind] && !containsString(missing, e.Kind) {
			missing = append(missing, e.Kind)
		}
	}
	if len(missing) > 0 {
		notes = append(notes, fmt.Sprintf("no %s fault ends within --duration %s (the schedule's times, seed %d): a longer run, or a schedule with earlier faults (first:), injects them",
			strings.Join(missing, ", "), opt.Duration, seed))
	}
	var unread []string
	for _, t := range opt.Targets {
		if _, ok := opt.Kubeconfigs[t.Cluster]; !ok && !containsString(unread, t.Cluster) {
			unread = append(unread, t.Cluster)
		}
	}
	if len(unread) > 0 {
		notes = append(notes, fmt.Sprintf("no --kubeconfig for %s: its GameServers are not read, and what is answered there is not checked against them",
			strings.Join(unread, ", ")))
	}
	return notes
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// soakFileHint says what a file given to qm soak check in the wrong
// place is, when it reads as another of the soak's files.
func soakFileHint(path, want string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	is := ""
	switch {
	case want != "history" && readsAs(data, soak.ReadHistory):
		is = "a history"
	case want != "snapshot" && readsAs(data, soak.ReadSnapshot):
		is = "a snapshot"
	default:
		if _, err := soak.ReadResult(data); err == nil {
			is = "a soak result (qm report reads it)"
		}
	}
	if is == "" {
		return ""
	}
	return fmt.Sprintf("\n%s reads as %s: qm soak check takes HISTORY, then SNAPSHOT (a run writes them as DIR/%s and DIR/%s)",
		path, is, soakrun.HistoryFile, soakrun.SnapshotFile)
}

func readsAs[T any](data []byte, read func(io.Reader) (*T, error)) bool {
	_, err := read(bytes.NewReader(data))
	return err == nil
}
