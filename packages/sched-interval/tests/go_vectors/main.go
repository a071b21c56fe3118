// Command go_vectors prints golden vectors for sched-interval's tests, computed
// by Go's own time.ParseDuration, Duration.String and unicode.IsSpace.
//
// Input (stdin): {"parse": [base64 bytes, ...], "format": [int64, ...]}.
// Output (stdout): {"go": version, "parse": [{"in", "ns" | "err"}], "format":
// [{"ns", "out"}], "space": [code points where unicode.IsSpace is true]}.
//
// Regenerate with: python make_vectors.py (it runs `go run main.go`).
package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"runtime"
	"time"
	"unicode"
)

type input struct {
	Parse  []string `json:"parse"`
	Format []int64  `json:"format"`
}

type parsed struct {
	In  string `json:"in"`
	NS  *int64 `json:"ns,omitempty"`
	Err string `json:"err,omitempty"`
}

type formatted struct {
	NS  int64  `json:"ns"`
	Out string `json:"out"`
}

type output struct {
	Go     string      `json:"go"`
	Parse  []parsed    `json:"parse"`
	Format []formatted `json:"format"`
	Space  []rune      `json:"space"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	out := output{Go: runtime.Version()}
	for _, b64 := range in.Parse {
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			panic(err)
		}
		d, err := time.ParseDuration(string(raw))
		p := parsed{In: b64}
		if err != nil {
			p.Err = err.Error()
		} else {
			ns := int64(d)
			p.NS = &ns
		}
		out.Parse = append(out.Parse, p)
	}
	for _, ns := range in.Format {
		out.Format = append(out.Format, formatted{NS: ns, Out: time.Duration(ns).String()})
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.IsSpace(r) {
			out.Space = append(out.Space, r)
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
