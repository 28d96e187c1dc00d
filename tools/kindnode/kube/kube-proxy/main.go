// Command kube-proxy programs the Service rules of a node, built from Go modules for the offline
// kind node image (tools/kindnode). Version strings come from -ldflags
// (mk/kind.mk), as for tools/kube.
package main

import (
	"os"
	// Time zones embedded, so the binary does not rely on the node's.
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	// Registered for their side effects, like the upstream binary: the
	// JSON log format and the client-go and version metrics.
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
