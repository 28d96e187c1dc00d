// Command etcd is etcd v3.6.8 built from its Go module, so that tests can run
// a real etcd without Docker or a downloaded release tarball.
//
// It lives in its own module (tools/etcd) so etcd's dependency versions never
// meet the main module's or Kubernetes' in one build list.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
