// Command coredns is CoreDNS with only the plugins kubeadm's Corefile
// uses, built from Go modules for the offline kind node image
// (tools/kindnode): the cluster's DNS, preloaded as the image kubeadm's
// coredns add-on runs.
package main

import (
	"github.com/coredns/coredns/coremain"

	// The plugins of kubeadm's Corefile; each registers itself.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
