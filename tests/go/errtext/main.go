package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for sc.Scan() {
		raw, err := base64.StdEncoding.DecodeString(sc.Text())
		if err != nil {
			panic(err)
		}
		out := "OK"
		switch os.Args[1] {
		case "unmarshal":
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				out = "ERR " + err.Error()
			}
		case "quote":
			out = strconv.Quote(string(raw))
		}
		fmt.Fprintln(w, base64.StdEncoding.EncodeToString([]byte(out)))
	}
}
