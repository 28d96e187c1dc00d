package kube_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
)

// The record of where keyed multi-cluster requests went, shared by two
// replicas (two Backends) through the real API server: a move is refused
// unless from the version its replica last saw, and the refusal says
// where the record is.
var _ = Describe("placements across replicas", func() {
	It("moves a record only from the version last seen, and forgets it after the key window", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		replica := func() forward.Placements {
			b, err := kube.New(kube.Config{REST: cluster.RESTConfig(), Namespace: ns, KeyNamespace: ns, KeyWindow: 2 * time.Second})
			Expect(err).NotTo(HaveOccurred())
			return b.Placements()
		}
		r1, r2 := replica(), replica()
		place := func(p forward.Placements, cluster, version string) (string, string, bool) {
			cur, v, ok, err := p.Place(ctx, "qmk-test", cluster, version)
			Expect(err).NotTo(HaveOccurred())
			return cur, v, ok
		}

		_, v1, ok := place(r1, "east", "")
		Expect(ok).To(BeTrue(), "a new record")
		cur, v, ok := place(r2, "west", "")
		Expect(ok).To(BeFalse(), "the other replica's create over the record")
		Expect([]string{cur, v}).To(Equal([]string{"east", v1}), "the refusal says where the record is")

		_, v2, ok := place(r2, "east", v1) // the other replica's retry, to the same cluster
		Expect(ok).To(BeTrue())
		Expect(v2).NotTo(Equal(v1), "each place gives a new version")
		cur, _, ok = place(r1, "west", v1)
		Expect(ok).To(BeFalse(), "a move from a version changed since")
		Expect(cur).To(Equal("east"))
		_, _, ok = place(r2, "west", v2)
		Expect(ok).To(BeTrue(), "a move from the current version")

		Expect(keyRecordsIn(ctx, ns)).To(Equal(1), "one record, labelled as the key records are (collected with them)")
		time.Sleep(3 * time.Second) // past the key window
		cur, v, ok = place(r1, "north", "")
		Expect(ok).To(BeFalse())
		Expect(cur).To(BeEmpty(), "a record a key window old names no cluster")
		_, _, ok = place(r1, "north", v)
		Expect(ok).To(BeTrue(), "and is placed anew from its version")
	})
})

func keyRecordsIn(ctx context.Context, ns string) int {
	l, err := api.Core.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.KeyRecordLabel})
	Expect(err).NotTo(HaveOccurred())
	return len(l.Items)
}
