// Command pstest-launcher serves Google's in-memory Pub/Sub fake (pstest) in one of two modes.
//
// Local mode, `pstest-launcher <port>`: serves on 127.0.0.1:<port>, prints "pstest listening on
// ..." on stdout, and stops when its stdin reaches EOF (the parent test process died).
//
// Container mode, `pstest-launcher gcloud beta emulators pubsub start --host-port HOST:PORT`:
// the arguments testcontainers-modules' CloudSdk::pubsub() passes to Google's Cloud SDK image,
// so a stand-in image (FROM scratch, this binary as its entrypoint) can replace that image.
// Serves on HOST:PORT, prints gcloud's ready line on stderr (the stream the module waits on),
// and stops on SIGTERM or SIGINT (a container has no stdin to watch).
package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"cloud.google.com/go/pubsub/v2/pstest"
)

func main() {
	switch {
	case len(os.Args) == 2:
		local(os.Args[1])
	case len(os.Args) >= 6 && os.Args[1] == "gcloud" && os.Args[4] == "pubsub" && os.Args[5] == "start":
		container(os.Args[6:])
	default:
		log.Fatalf("usage: pstest-launcher <port> | pstest-launcher gcloud beta emulators pubsub start --host-port HOST:PORT (got %q)", os.Args[1:])
	}
}

func local(portArg string) {
	port, err := strconv.Atoi(portArg)
	if err != nil {
		log.Fatalf("bad port %q: %v", portArg, err)
	}
	srv := pstest.NewServerWithAddress(fmt.Sprintf("127.0.0.1:%d", port))
	fmt.Printf("pstest listening on %s\n", srv.Addr) // os.Stdout is unbuffered
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

func container(flags []string) {
	address := ""
	for i := 0; i+1 < len(flags); i++ {
		if flags[i] == "--host-port" {
			address = flags[i+1]
		}
	}
	if address == "" {
		log.Fatalf("container mode needs --host-port HOST:PORT (got %q)", flags)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	srv := pstest.NewServerWithAddress(address)
	fmt.Fprintf(os.Stderr, "[pubsub] INFO: Server started, listening on %s (pstest stand-in)\n", srv.Addr)
	<-stop
	srv.Close()
}
