package kind

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestGatewayFromInspect: the host address is the IPv4 gateway of kind's
// network as Docker prints it, in the shapes Docker versions print.
func TestGatewayFromInspect(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      string
		err       string
	}{
		{"ipv4 then ipv6 (kind's own network)", DryRunNetwork, "172.18.0.1", ""},
		{"ipv6 first", `[{"Subnet":"fc00:f853:ccd:e793::/64","Gateway":"fc00:f853:ccd:e793::1"},{"Subnet":"172.19.0.0/16","Gateway":"172.19.0.1"}]`, "172.19.0.1", ""},
		{"no gateway printed: the subnet's first address", `[{"Subnet":"192.168.49.0/24"}]`, "192.168.49.1", ""},
		{"unmasked subnet", `[{"Subnet":"10.89.0.7/24","Gateway":""}]`, "10.89.0.1", ""},
		{"trailing newline", DryRunNetwork + "\n", "172.18.0.1", ""},
		{"a custom gateway is taken as given", `[{"Subnet":"172.30.0.0/16","Gateway":"172.30.5.254"}]`, "172.30.5.254", ""},
		{"ipv6 only", `[{"Subnet":"fc00::/64","Gateway":"fc00::1"}]`, "", "no IPv4 subnet (subnets: fc00::/64)"},
		{"no network", ``, "", "printed nothing"},
		{"not json", `Error: No such network: kind`, "", "want a JSON list of subnets"},
		{"a /31 has no room for a gateway", `[{"Subnet":"10.0.0.0/31"}]`, "", "no gateway and no room"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GatewayFromInspect([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestLinkListen: an IP host address is listened on as it is; a name
// (Docker Desktop's host.docker.internal) cannot be, so every interface is.
func TestLinkListen(t *testing.T) {
	for in, want := range map[string]string{
		"172.18.0.1":           "172.18.0.1",
		"fc00::1":              "fc00::1",
		"host.docker.internal": "0.0.0.0",
	} {
		if got := LinkListen(in); got != want {
			t.Errorf("LinkListen(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLinkEndpoints: every cluster's policies name a distinct link port
// for each cluster, itself included, on the host address; no two links of
// the rig share a port, and none is a caller or API server port.
func TestLinkEndpoints(t *testing.T) {
	top := loadExample(t)
	n := len(top.Spec.Clusters)
	seen := map[string]string{}
	for i, from := range top.Spec.Clusters {
		eps := linkEndpoints(top, i, "172.18.0.1", DefaultLinkPort)
		if len(eps) != n {
			t.Fatalf("%s: endpoints for %d clusters, want %d", from.Name, len(eps), n)
		}
		for _, to := range top.Spec.Clusters {
			if len(eps[to.Name]) != 1 {
				t.Fatalf("%s -> %s: %v, want one endpoint", from.Name, to.Name, eps[to.Name])
			}
			ep := eps[to.Name][0]
			if !strings.HasPrefix(ep, "172.18.0.1:") {
				t.Errorf("%s -> %s: %s, not on the host address", from.Name, to.Name, ep)
			}
			if prev, dup := seen[ep]; dup {
				t.Errorf("%s -> %s and %s share %s", from.Name, to.Name, prev, ep)
			}
			seen[ep] = from.Name + " -> " + to.Name
		}
	}
	if got := linkEndpoints(top, 0, "172.18.0.1", DefaultLinkPort)["cloud"][0]; got != "172.18.0.1:29444" {
		t.Errorf("on-prem -> cloud: %s, want 172.18.0.1:29444", got)
	}
	if got := linkEndpoints(top, 1, "fc00::1", 40000)["cloud"][0]; got != "[fc00::1]:40003" {
		t.Errorf("an IPv6 host address: %s, want [fc00::1]:40003", got)
	}
	for i := range n {
		for _, p := range []int{DefaultCallerPort + i, DefaultAPIServerPort + i} {
			for ep := range seen {
				if strings.HasSuffix(ep, ":"+strconv.Itoa(p)) {
					t.Errorf("link %s takes port %d, a caller or API server port", ep, p)
				}
			}
		}
	}
}

// TestHostAddressFromEnvironment: a host address from the environment
// (Docker Desktop's name here) is used as given: Docker is not asked, the
// links listen on every interface and are dialled by the name, the
// policies name it, and the allocators' certificate is valid for it.
func TestHostAddressFromEnvironment(t *testing.T) {
	top := loadExample(t)
	dry := &DryRun{}
	opts := dryOptions(t, dry)
	t.Setenv(HostAddressEnv, "host.docker.internal")
	r, err := Up(context.Background(), top, opts)
	if err != nil {
		t.Fatal(err)
	}
	steps := strings.Join(dry.Steps(), "\n")
	if strings.Contains(steps, "network inspect") {
		t.Errorf("Docker was asked for the gateway although the environment gave the address:\n%s", steps)
	}
	if want := "# link on-prem -> cloud: listen 0.0.0.0:29444, dialled as host.docker.internal:29444 -> 127.0.0.1:28444"; !strings.Contains(steps, want) {
		t.Errorf("no %q in:\n%s", want, steps)
	}
	policies, err := os.ReadFile(filepath.Join(opts.Dir, "on-prem", "manifests", "40-policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(policies), "- host.docker.internal:29444") {
		t.Errorf("on-prem's policies do not name the link by the host name:\n%s", policies)
	}
	pemCert, err := os.ReadFile(r.Certs.ServerCert())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemCert)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("host.docker.internal"); err != nil {
		t.Errorf("the allocators' certificate: %v", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
