// Command testimage is the one program in the container images of the node tests
// (framework.StartNode): the pod sandbox's pause process and the private image's app. It
// prints its name and arguments, so that a test can tell which image a container ran, and
// then waits for SIGTERM or SIGINT, as the kubelet's pause container does. Built static
// (CGO_ENABLED=0), it needs nothing else in the image.
//
// Two commands are for `kubectl exec` into a running container, which has no shell:
// `/testimage echo WORDS...` prints the words on one line and exits, and
// `/testimage cat` copies its stdin to its stdout until end of input and exits.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "echo":
			fmt.Println(strings.Join(os.Args[2:], " "))
			return
		case "cat":
			if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
				fmt.Fprintf(os.Stderr, "testimage cat: %v\n", err)
				os.Exit(1)
			}
			return
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("testimage: %s\n", strings.Join(os.Args, " "))
	<-sig
}
