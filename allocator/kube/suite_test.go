package kube_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// TestKubeBackend runs the backend against a real etcd + kube-apiserver
// with Quartermaster's CRDs (kindcluster's local provider).
func TestKubeBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver; skipped under -short")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "kube backend against a real API server")
}

var (
	cluster *kindcluster.Cluster
	api     *kubetest.API // cluster's clients
)

var _ = BeforeSuite(func() {
	bin, err := kindcluster.DefaultBinDir()
	Expect(err).NotTo(HaveOccurred())
	Expect(kindcluster.CheckBinaries(bin, kindcluster.EtcdBinary, kindcluster.APIServerBinary)).To(Succeed())
	cluster, err = kindcluster.Start(context.Background(), kindcluster.Options{Name: "kube-backend", BinDir: bin, EtcdUnsafeNoFsync: true})
	Expect(err).NotTo(HaveOccurred())
	api = kubetest.Clients(GinkgoTB(), cluster)
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(cluster.LogTail())
		}
		Expect(cluster.Stop()).To(Succeed())
	})
})
