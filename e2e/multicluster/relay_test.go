package multicluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// relay is a gateway between allocators that turns multi-cluster on for
// every request it passes on, and passes gRPC headers through as an L7
// proxy does: what makes a forwarding loop possible at all, since an
// allocator forwards with multi-cluster off. A policy pointing at a relay
// that points back sends a request round until something stops it; the
// hop list in the headers is what lets the allocator see that it already
// handled the request.
type relay struct {
	allocation.UnimplementedAllocationServiceServer
	next     allocation.AllocationServiceClient
	calls    atomic.Int64
	endpoint string
}

// startRelay serves a relay passing requests on to next. It listens where
// the cluster's allocators reach this process (the host of the link that
// SelfEndpoint names: loopback locally, the host address kind's pods
// reach on kind) with the rig's server certificate, and requires a client
// certificate of the rig's CA, as an allocator does.
func startRelay(cluster string, next *grpc.ClientConn) *relay {
	self := theRig.SelfEndpoint(cluster)
	Expect(self).NotTo(BeEmpty(), "cluster %s has no self endpoint", cluster)
	listenHost, dialHost := "", ""
	for _, l := range theRig.Links().All() {
		if l.Addr() == self {
			listenHost, _, _ = net.SplitHostPort(l.ListenAddr())
			dialHost, _, _ = net.SplitHostPort(l.Addr())
		}
	}
	Expect(dialHost).NotTo(BeEmpty(), "no link listens at %s", self)

	l := theRig.CallerCerts()
	cert, err := tls.LoadX509KeyPair(l.ServerCert(), l.ServerKey())
	Expect(err).NotTo(HaveOccurred())
	ca, err := os.ReadFile(l.CACert())
	Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})
	ln, err := net.Listen("tcp", net.JoinHostPort(listenHost, "0"))
	Expect(err).NotTo(HaveOccurred())
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	r := &relay{next: allocation.NewAllocationServiceClient(next), endpoint: net.JoinHostPort(dialHost, port)}
	srv := grpc.NewServer(grpc.Creds(creds))
	allocation.RegisterAllocationServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	DeferCleanup(srv.Stop)
	return r
}

// Allocate implements allocation.AllocationServiceServer.
func (r *relay) Allocate(ctx context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	r.calls.Add(1)
	out := proto.Clone(in).(*allocation.AllocationRequest)
	if out.MultiClusterSetting == nil {
		out.MultiClusterSetting = &allocation.MultiClusterSetting{}
	}
	out.MultiClusterSetting.Enabled = true
	in2, _ := metadata.FromIncomingContext(ctx)
	pass := metadata.MD{}
	for k, v := range in2 {
		// The transport's own headers are the next hop's to write.
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" || k == "te" {
			continue
		}
		pass[k] = v
	}
	return r.next.Allocate(metadata.NewOutgoingContext(ctx, pass), out)
}
