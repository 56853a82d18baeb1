// Command jsonref is the Go reference encoder for tests/test_jsonenc.py.
//
// Default mode: reads one JSON document per line from stdin, decodes it with
// json.Decoder+UseNumber into `any`, re-encodes it with json.Marshal and writes
// one line per input. Numbers without '.', 'e' or 'E' stay json.Number (so
// arbitrarily large integers are re-emitted verbatim); numbers with a fraction
// or exponent are converted to float64 so that Go's float64 formatting is what
// gets compared (Python floats vs Go float64).
//
// -strings mode: each input line is base64 (std encoding) of raw bytes; the
// bytes are marshalled as a Go string (invalid UTF-8, control chars, ...).
//
// On error a line "ERROR: <msg>" is written instead, so the line count stays
// in step with the input.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

func floatify(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			n, err := floatify(e)
			if err != nil {
				return nil, err
			}
			t[k] = n
		}
		return t, nil
	case []any:
		for i, e := range t {
			n, err := floatify(e)
			if err != nil {
				return nil, err
			}
			t[i] = n
		}
		return t, nil
	case json.Number:
		if strings.ContainsAny(string(t), ".eE") {
			return t.Float64()
		}
		return t, nil
	}
	return v, nil
}

func main() {
	stringsMode := flag.Bool("strings", false, "input lines are base64 raw bytes, marshal each as a Go string")
	flag.Parse()

	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()

	for {
		line, err := in.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			break
		}
		line = bytes.TrimRight(line, "\r\n")
		var res []byte
		var perr error
		if *stringsMode {
			raw, derr := base64.StdEncoding.DecodeString(string(line))
			if derr != nil {
				perr = derr
			} else {
				res, perr = json.Marshal(string(raw))
			}
		} else {
			dec := json.NewDecoder(bytes.NewReader(line))
			dec.UseNumber()
			var v any
			if perr = dec.Decode(&v); perr == nil {
				if v, perr = floatify(v); perr == nil {
					res, perr = json.Marshal(v)
				}
			}
		}
		if perr != nil {
			fmt.Fprintf(out, "ERROR: %v\n", perr)
		} else {
			out.Write(res)
			out.WriteByte('\n')
		}
		if err != nil {
			break
		}
	}
}
