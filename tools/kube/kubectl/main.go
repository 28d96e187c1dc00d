// Command kubectl is the Kubernetes CLI built from k8s.io/kubectl, matched to
// the kube-apiserver in this module so `kubectl apply --dry-run=server`
// tests talk to a server of the same version.
package main

import (
	"k8s.io/component-base/cli"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	// RunNoErrOutput leaves printing the error to CheckErr, which knows
	// kubectl's error kinds and exit codes.
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		cmdutil.CheckErr(err)
	}
}
