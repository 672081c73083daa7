// The pod sandbox's pause process for the test node: PID 1 of each pod, it holds
// the pod's namespaces, reaps the orphans handed to it, and exits on SIGINT or
// SIGTERM, as Kubernetes' own pause does. A static binary, so that the image is
// the binary alone.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
