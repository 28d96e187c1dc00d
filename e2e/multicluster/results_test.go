package multicluster_test

import (
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

// The suite's measurements, in `qm load`'s result format so that `qm
// report` and CI read them like any load run: one target per spec (and, for
// load spreading, one per cluster that served), with every allocation's
// latency and outcome. Written to $QM_E2E_OUT when it is set.
type results struct {
	mu     sync.Mutex
	start  time.Time
	recs   map[string]*loadgen.Recorder
	order  []string
	active map[string]time.Duration
}

var measured = &results{start: time.Now(), recs: map[string]*loadgen.Recorder{}, active: map[string]time.Duration{}}

// add records one allocation under target.
func (r *results) add(target string, latency time.Duration, err error) {
	r.mu.Lock()
	rec := r.recs[target]
	if rec == nil {
		rec = loadgen.NewRecorder()
		r.recs[target] = rec
		r.order = append(r.order, target)
	}
	r.mu.Unlock()
	s := int(time.Since(r.start) / time.Second)
	rec.Dispatch(s)
	rec.Add(loadgen.Sample{Second: s, Latency: latency, Code: status.Code(err)})
}

// spent adds a spec's wall time to the targets it recorded.
func (r *results) spent(d time.Duration, targets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range targets {
		r.active[t] += d
	}
}

func (r *results) write(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &loadgen.Result{
		APIVersion: loadgen.APIVersion, Kind: loadgen.Kind,
		Config: loadgen.Config{Mode: "closed", Connections: 1, TimeoutSeconds: 10, Request: "e2e:multicluster"},
		Start:  r.start.UTC(), DurationSeconds: time.Since(r.start).Seconds(), Generators: 1,
	}
	for _, name := range r.order {
		cfg := loadgen.TargetConfig{Name: name, Protocol: "grpc", Call: "allocate"}
		res.Config.Targets = append(res.Config.Targets, cfg)
		rec := r.recs[name]
		if d := r.active[name]; d > 0 {
			rec.Active(0, d)
		}
		res.Targets = append(res.Targets, rec.Result(cfg))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := loadgen.WriteResult(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
