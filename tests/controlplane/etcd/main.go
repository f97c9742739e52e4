// Command etcd is the etcd server, built from the Go module proxy at the
// version Kubernetes' own go.mod pins, for the test control plane only.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
