// Command testimage is the one program in the container images of the node tests
// (framework.StartNode): the pod sandbox's pause process and the private image's app. It
// prints its name and arguments, so that a test can tell which image a container ran, and
// then waits for SIGTERM or SIGINT, as the kubelet's pause container does. Built static
// (CGO_ENABLED=0), it needs nothing else in the image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("testimage: %s\n", strings.Join(os.Args, " "))
	<-sig
}
