package soak

import (
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/yamlfile"
)

// The fault schedule file's version and kind.
const (
	ScheduleAPIVersion = "quartermaster.dev/v1alpha1"
	ScheduleKind       = "SoakSchedule"
)

// Fault kinds a schedule may name.
const (
	FaultReplicaKill      = "replica-kill"      // an allocator replica killed with SIGKILL and restarted
	FaultAPIServerRestart = "apiserver-restart" // an API server restarted
	FaultLinkCut          = "link-cut"          // a link between clusters cut
	FaultLinkSlow         = "link-slow"         // a link slowed
	FaultLinkLossy        = "link-lossy"        // a link that drops connections
	FaultSecretRotate     = "secret-rotate"     // a connection Secret rotated
	FaultFleetScale       = "fleet-scale"       // a fleet scaled down, then back up
	FaultSlowRemote       = "slow-remote"       // a remote allocator that answers slowly
	FaultAnswerLost       = "answer-lost"       // requests reach the allocator, their answers are lost
)

// FaultKinds are the kinds a schedule may name, in the order reports list
// them.
var FaultKinds = []string{
	FaultReplicaKill, FaultAPIServerRestart, FaultLinkCut, FaultLinkSlow,
	FaultLinkLossy, FaultSecretRotate, FaultFleetScale, FaultSlowRemote,
	FaultAnswerLost,
}

// DefaultJitter is how far, as a share of every, an interval between two
// faults of one entry may stray when the entry does not say.
const DefaultJitter = 0.2

// MinFaultDuration is the shortest fault and interval a schedule may
// ask for: a rig cannot act faster, and since a fault fits in its
// interval, it bounds how many faults a run's schedule holds.
const MinFaultDuration = time.Second

// ScheduleFile is a fault schedule: which faults, how often, how long.
type ScheduleFile struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Spec       ScheduleSpec `yaml:"spec"`
}

// ScheduleSpec is the schedule itself.
type ScheduleSpec struct {
	// Seed drives the jitter and the choice of targets; a run's --seed
	// overrides it. Defaults to 1.
	Seed   *uint64      `yaml:"seed"`
	Faults []FaultEntry `yaml:"faults"`
}

// FaultEntry is one kind of fault, repeated through the run.
type FaultEntry struct {
	Kind string `yaml:"kind"`
	// Every is the mean time from one start to the next; Duration how
	// long each lasts. Jitter (0 to below 1) is how far, as a share of
	// Every, each interval may stray from it.
	Every    Duration `yaml:"every"`
	Duration Duration `yaml:"duration"`
	Jitter   *float64 `yaml:"jitter"`
	// First is when the first one starts; without it, a seeded point in
	// the first interval.
	First *Duration `yaml:"first"`
	// Targets are what the fault may hit (a replica, a cluster, a link,
	// a fleet, as the kind needs); each occurrence picks one. Empty
	// leaves the choice to the driver.
	Targets []string `yaml:"targets"`
}

// Duration is a time.Duration written with a unit, like 30s or 2m.
type Duration = yamlfile.Duration

// ScheduledFault is one fault of an expanded schedule, as offsets from
// the run's start.
type ScheduledFault struct {
	Kind       string
	Target     string
	Start, End time.Duration
}

//go:embed default.yaml
var defaultSchedule []byte

// DefaultSchedule is the shipped schedule: every kind of fault, a few
// times in a five-minute run.
func DefaultSchedule() *ScheduleFile {
	f, err := ParseSchedule(defaultSchedule)
	if err != nil {
		// The file is part of the package and its test parses it.
		panic("soak: default.yaml: " + err.Error())
	}
	return f
}

// LoadSchedule reads, decodes, defaults and validates the schedule at path.
func LoadSchedule(path string) (*ScheduleFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := ParseSchedule(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// maxScheduleSize bounds what ParseSchedule reads: a schedule is a page.
const maxScheduleSize = 1 << 20

// scheduleFormat is a schedule file's version, kind and size bound.
var scheduleFormat = yamlfile.Format{Name: "schedule", APIVersion: ScheduleAPIVersion, Kind: ScheduleKind, MaxSize: maxScheduleSize,
	Reword: func(_ []byte, err error) error { return scheduleYAMLError(err) }}

// ParseSchedule decodes a schedule strictly (an unknown field is an
// error), applies defaults and validates it.
func ParseSchedule(data []byte) (*ScheduleFile, error) {
	var f ScheduleFile
	if err := scheduleFormat.Decode(data, &f); err != nil {
		return nil, err
	}
	f.Default()
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// scheduleYAMLError words the decoder's messages for people who never saw
// the Go types.
func scheduleYAMLError(err error) error {
	msg := unknownField.ReplaceAllString(err.Error(), `unknown field "$1"`)
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	return errors.New(msg)
}

// Default fills in what the file left out, before validation, so that
// validation sees the values a run will use.
func (f *ScheduleFile) Default() {
	if f.Spec.Seed == nil {
		one := uint64(1)
		f.Spec.Seed = &one
	}
	for i := range f.Spec.Faults {
		e := &f.Spec.Faults[i]
		if e.Jitter == nil {
			j := DefaultJitter
			e.Jitter = &j
		}
	}
}

// Validate checks a defaulted schedule; an error names the field.
func (f *ScheduleFile) Validate() error {
	if len(f.Spec.Faults) == 0 {
		return errors.New("spec.faults: empty: list at least one fault")
	}
	known := map[string]bool{}
	for _, k := range FaultKinds {
		known[k] = true
	}
	for i, e := range f.Spec.Faults {
		field := fmt.Sprintf("spec.faults[%d]", i)
		switch {
		case e.Kind == "":
			return fmt.Errorf("%s.kind: missing (one of %s)", field, strings.Join(FaultKinds, ", "))
		case !known[e.Kind]:
			return fmt.Errorf("%s.kind: unknown fault kind %q (one of %s)", field, e.Kind, strings.Join(FaultKinds, ", "))
		case e.Every < Duration(MinFaultDuration):
			return fmt.Errorf("%s.every: must be at least %s, got %s", field, MinFaultDuration, time.Duration(e.Every))
		case e.Duration < Duration(MinFaultDuration):
			return fmt.Errorf("%s.duration: must be at least %s, got %s", field, MinFaultDuration, time.Duration(e.Duration))
		case *e.Jitter < 0 || *e.Jitter >= 1:
			return fmt.Errorf("%s.jitter: must be at least 0 and below 1, got %g", field, *e.Jitter)
		case e.First != nil && *e.First < 0:
			return fmt.Errorf("%s.first: must not be negative, got %s", field, time.Duration(*e.First))
		}
		// The shortest interval must still outlast a fault, so that one
		// entry's faults never overlap.
		if shortest := time.Duration(float64(e.Every) * (1 - *e.Jitter)); time.Duration(e.Duration) >= shortest {
			return fmt.Errorf("%s.duration: %s does not fit in the shortest interval (every %s less jitter %g is %s)",
				field, time.Duration(e.Duration), time.Duration(e.Every), *e.Jitter, shortest)
		}
		for j, t := range e.Targets {
			if strings.TrimSpace(t) == "" {
				return fmt.Errorf("%s.targets[%d]: empty", field, j)
			}
		}
	}
	return nil
}

// Seed is the schedule's seed (after Default, always set).
func (f *ScheduleFile) Seed() uint64 {
	if f.Spec.Seed == nil {
		return 1
	}
	return *f.Spec.Seed
}

// Schedule expands the file into the faults of a run of the given
// duration: each fault that ends within it, ordered by start (ties by
// kind, then target). It is pure and the same seed gives the same faults;
// each entry draws from its own stream (seeded by the seed, its kind and
// its place), so editing one entry leaves the others' times alone.
func (f *ScheduleFile) Schedule(seed uint64, duration time.Duration) []ScheduledFault {
	var out []ScheduledFault
	for i, e := range f.Spec.Faults {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s", i, e.Kind)
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		every, length := time.Duration(e.Every), time.Duration(e.Duration)
		jitter := DefaultJitter
		if e.Jitter != nil {
			jitter = *e.Jitter
		}
		var start time.Duration
		if e.First != nil {
			start = time.Duration(*e.First)
		} else {
			start = time.Duration(rng.Float64() * float64(every))
		}
		for start+length <= duration {
			target := ""
			if len(e.Targets) > 0 {
				target = e.Targets[rng.IntN(len(e.Targets))]
			}
			out = append(out, ScheduledFault{Kind: e.Kind, Target: target, Start: start, End: start + length})
			gap := time.Duration(float64(every) * (1 + jitter*(2*rng.Float64()-1)))
			start += gap
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Target < b.Target
	})
	return out
}
