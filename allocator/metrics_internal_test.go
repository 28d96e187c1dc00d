package allocator

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
)

// TestSourceLabelBound checks that the source label takes cluster names
// up to its bound and counts the rest under _other, so that a policy set
// naming thousands of clusters cannot make thousands of series.
func TestSourceLabelBound(t *testing.T) {
	m := NewMetrics()
	for i := range maxSourceLabels + 10 {
		m.series("default", "f", fmt.Sprintf("cluster-%d", i), codes.OK).outcome.Inc()
	}
	m.series("default", "f", "", codes.Unavailable).outcome.Inc()
	m.series("default", "f", "local", codes.OK).outcome.Inc()

	if n := testutil.CollectAndCount(m.Outcomes); n != maxSourceLabels+2 {
		t.Errorf("%d series, want %d (%d sources, _other, local's failure)", n, maxSourceLabels+2, maxSourceLabels)
	}
	// (Counted before the checks below, which make series of their own.)
	// local holds one place from the start: maxSourceLabels-1 clusters
	// get their own series.
	for _, c := range []struct {
		source, code string
		want         float64
	}{
		{"cluster-0", "OK", 1},
		{fmt.Sprintf("cluster-%d", maxSourceLabels-2), "OK", 1},
		{fmt.Sprintf("cluster-%d", maxSourceLabels-1), "OK", 0},
		{OtherLabel, "OK", 11},
		{"local", "OK", 1},
		{"local", "Unavailable", 1},
	} {
		if got := testutil.ToFloat64(m.Outcomes.WithLabelValues("default", "f", c.source, c.code)); got != c.want {
			t.Errorf("allocations_total{source=%q,code=%s} = %v, want %v", c.source, c.code, got, c.want)
		}
	}
}
