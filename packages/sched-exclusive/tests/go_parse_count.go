// The Go side of test_counter_go.py: the Go library's reading of the counter.
//
// For each hex-encoded content on stdin it prints what the Go library's
// parseCount gives: strconv.Atoi(strings.TrimSpace(content)), 0 on an error
// or below zero. Standard library only.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func parseCount(raw string) int {
	n, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		raw, err := hex.DecodeString(in.Text())
		if err != nil {
			fmt.Fprintln(out, "bad-hex")
		} else {
			fmt.Fprintln(out, parseCount(string(raw)))
		}
		out.Flush()
	}
}
