// Command kube-apiserver is the Kubernetes API server of k8s.io/kubernetes,
// built from Go modules so tests get a real control plane on a machine
// without Docker. The version strings come from -ldflags (see mk/kube.mk):
// without them kubectl cannot parse the server's version.
package main

import (
	"os"
	// The API server formats times in configured zones; embed the zone
	// database so the binary does not depend on the host's.
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	// Registered for their side effects, as the upstream binary does: the
	// JSON log format and the client-go and version metrics.
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
