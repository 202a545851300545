// Command pstest-launcher serves Google's in-memory Pub/Sub fake (pstest) on
// 127.0.0.1:<port> until its stdin reaches EOF (the parent test process dies).
package main

import (
	"fmt"
	"io"
	"log"
	"os"
	"strconv"

	"cloud.google.com/go/pubsub/v2/pstest"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: pstest-launcher <port>")
	}
	port, err := strconv.Atoi(os.Args[1])
	if err != nil {
		log.Fatalf("bad port %q: %v", os.Args[1], err)
	}
	srv := pstest.NewServerWithAddress(fmt.Sprintf("127.0.0.1:%d", port))
	fmt.Printf("pstest listening on %s\n", srv.Addr) // os.Stdout is unbuffered
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}
