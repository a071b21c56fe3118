// go_wire answers, line by line on standard input, with what Go's
// encoding/json makes of hex-encoded bytes.
//
// Without arguments, the bytes are a string: it writes the trigger Event line
// whose reason they are, then a request payload holding them as a key and as a
// value (the Marshal of a one-key map of a slice).
//
// With the argument "decode", the bytes are an event line: it writes the Event
// that json.Unmarshal reads from them, encoded again, or "error".
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
	decode := len(os.Args) > 1 && os.Args[1] == "decode"
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
		if decode { // one answer per question: flushed at once
			var e Event
			if json.Unmarshal(b, &e) != nil {
				out.WriteString("error\n")
			} else if err := enc.Encode(e); err != nil {
				panic(err)
			}
			if err := out.Flush(); err != nil {
				panic(err)
			}
			continue
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
