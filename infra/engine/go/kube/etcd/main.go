// etcd for make cluster-local: the server of the etcd release Kubernetes v1.35.4 itself depends on
// (go.etcd.io/etcd/server/v3 v3.6.5), started with etcd's own command line.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
