// The Go side of test_go_interop.py: Go's own reading of a holder line.
//
// For each hex-encoded line on stdin it prints "SECONDS NANOS" (the instant
// that time.Parse(time.RFC3339Nano, strings.TrimSpace(line)) gives, as the Go
// library's ReadHolder parses it) or "none". Standard library only.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		raw, err := hex.DecodeString(in.Text())
		if err != nil {
			fmt.Fprintln(out, "bad-hex")
		} else if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(raw))); err != nil {
			fmt.Fprintln(out, "none")
		} else {
			fmt.Fprintln(out, t.Unix(), t.Nanosecond())
		}
		out.Flush()
	}
}
