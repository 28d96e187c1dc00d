package kube_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// lockedBuffer collects log lines written by the informer's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// closedPort is a loopback address nothing listens on.
func closedPort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	Expect(ln.Close()).To(Succeed())
	return addr
}

// serviceAccountConfig is a connection to the suite's API server as a new
// ServiceAccount in ns, holding a real token from the TokenRequest API and
// no RBAC at all: the identity a deployed allocator has before its
// ClusterRole is bound.
func serviceAccountConfig(ctx context.Context, ns, name string) *rest.Config {
	cs := api.Core
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(cluster.RESTConfig())
	cfg.BearerToken = tok.Status.Token
	return cfg
}

var _ = Describe("waiting for the first list", func() {
	var ctx context.Context
	var cancel context.CancelFunc
	var logs *lockedBuffer
	var log *slog.Logger
	BeforeEach(func() {
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		DeferCleanup(func() { cancel() })
		logs = &lockedBuffer{}
		log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})

	It("gives up on an unreachable API server after the timeout, saying why as it waits", func() {
		cfg := cluster.RESTConfig()
		cfg.Host = "https://" + closedPort()
		b, err := kube.New(kube.Config{REST: cfg, SyncTimeout: 1500 * time.Millisecond, ProgressInterval: 300 * time.Millisecond, Logger: log})
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		err = b.Start(ctx)
		Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
		var se *kube.SyncError
		Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
		Expect(se.Reason).To(Equal(kube.ReasonUnreachable))
		Expect(err.Error()).To(ContainSubstring("connection refused"))
		Expect(err.Error()).To(ContainSubstring("did not sync within 1.5s"))
		Expect(b.Ready()).To(BeFalse())
		// Progress while waiting, with the reason, more than once.
		Expect(bytes.Count([]byte(logs.String()), []byte("still waiting for the GameServer cache to sync"))).To(BeNumerically(">=", 2), logs.String())
		Expect(logs.String()).To(ContainSubstring("reason=unreachable"))
	})

	It("stops waiting at once when its context ends (SIGTERM), with no timeout set", func() {
		cfg := cluster.RESTConfig()
		cfg.Host = "https://" + closedPort()
		b, err := kube.New(kube.Config{REST: cfg, Logger: log})
		Expect(err).NotTo(HaveOccurred())
		stopCtx, stop := context.WithCancel(ctx)
		time.AfterFunc(300*time.Millisecond, stop)
		start := time.Now()
		err = b.Start(stopCtx)
		Expect(err).To(MatchError(context.Canceled))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
	})

	It("names a ServiceAccount without RBAC as forbidden, and syncs once the role is bound", func() {
		ns := newNamespace(ctx)
		create(ctx, kubetest.GameServer(ns, "gs-1", "blue", "node-1"))
		cfg := serviceAccountConfig(ctx, ns, "allocator")
		b, err := kube.New(kube.Config{REST: cfg, Namespace: ns, SyncTimeout: time.Second, ProgressInterval: 200 * time.Millisecond, Logger: log})
		Expect(err).NotTo(HaveOccurred())
		err = b.Start(ctx)
		var se *kube.SyncError
		Expect(errors.As(err, &se)).To(BeTrue(), "%v", err)
		Expect(se.Reason).To(Equal(kube.ReasonForbidden))
		// The API server's own words name the identity and the verb.
		Expect(err.Error()).To(ContainSubstring(`User "system:serviceaccount:` + ns + `:allocator" cannot list resource "gameservers"`))
		Expect(err.Error()).To(ContainSubstring("ClusterRole"))
		Expect(logs.String()).To(ContainSubstring("reason=forbidden"))

		// The informer kept trying: binding the role is enough.
		cs := api.Core
		_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "allocator"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"agones.dev"}, Resources: []string{"gameservers"},
				Verbs: []string{"get", "list", "watch", "update"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "allocator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "allocator"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "allocator", Namespace: ns}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(b.WaitForSync(ctx, 30*time.Second)).To(Succeed())
		Expect(b.Ready()).To(BeTrue())
		Expect(b.Index().Len()).To(Equal(1))
	})
})
