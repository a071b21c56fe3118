// go_wire writes, for each hex-encoded line of standard input, what Go's
// encoding/json makes of those bytes as a string: first the trigger Event
// line whose reason they are, then a request payload holding them as a value
// and as a key ({"k":[s],s:1} as the Marshal of a one-key map and a slice).
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
)

type Event struct {
	Kind       string `json:"event"`
	Reason     string `json:"reason,omitempty"`
	DurationMs int64  `json:"duration_ms,omitempty"`
	OK         bool   `json:"ok"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for in.Scan() {
		b, err := hex.DecodeString(in.Text())
		if err != nil {
			panic(err)
		}
		s := string(b)
		if err := enc.Encode(Event{Kind: "done", Reason: s, DurationMs: 7, OK: true}); err != nil {
			panic(err)
		}
		if err := enc.Encode(map[string][]string{s: {s}}); err != nil {
			panic(err)
		}
	}
}
