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
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		b, err := hex.DecodeString(in.Text())
		if err != nil {
			panic(err)
		}
		enc.Encode(Event{Kind: "done", Reason: string(b), DurationMs: 7, OK: true})
	}
}
