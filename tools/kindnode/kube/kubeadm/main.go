// Command kubeadm sets up the Kubernetes control plane and joins nodes,
// built from Go modules for the offline kind node image (tools/kindnode).
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func main() {
	kubeadmerrors.HandleError(app.Run())
}
