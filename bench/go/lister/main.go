// lister times lists with a compiled client (issue 21, "measure the server, not the client"): a Python client
// reading a 5 MB list spends 4-6 ms of CPU on the same two cores as the servers it measures. Each URL is
// listed -n times in turn (URL 1, URL 2, ..., then again), each on its own keep-alive connection, the body
// read whole and not decoded: the time from the request to the body's last byte. One JSON object on stdout:
//
//	{"<url>": {"ms": [..], "bytes": B, "status": S}, ...}
//
// A response that is not 200, or whose body is shorter than its Content-Length, is an error (exit 1).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

type result struct {
	Ms     []float64 `json:"ms"`
	Bytes  int64     `json:"bytes"`
	Status int       `json:"status"`
}

func main() {
	urls := flag.String("urls", "", "comma-separated URLs to list in turn")
	n := flag.Int("n", 30, "lists per URL")
	warm := flag.Int("warm", 1, "untimed lists per URL first")
	flag.Parse()
	if *urls == "" {
		fmt.Fprintln(os.Stderr, "lister: -urls is required")
		os.Exit(2)
	}
	list := strings.Split(*urls, ",")
	clients := make([]*http.Client, len(list))
	out := map[string]*result{}
	for i, u := range list {
		// One connection per URL, kept alive; no compression asked (the body as the server writes it).
		clients[i] = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1}}
		out[u] = &result{}
	}
	get := func(i int) (time.Duration, error) {
		t0 := time.Now()
		resp, err := clients[i].Get(list[i])
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		nb, err := io.Copy(io.Discard, resp.Body)
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("%s: HTTP %d", list[i], resp.StatusCode)
		}
		if resp.ContentLength >= 0 && nb != resp.ContentLength {
			return 0, fmt.Errorf("%s: %d bytes of %d", list[i], nb, resp.ContentLength)
		}
		out[list[i]].Bytes, out[list[i]].Status = nb, resp.StatusCode
		return d, nil
	}
	for r := 0; r < *warm+*n; r++ {
		for i := range list {
			d, err := get(i)
			if err != nil {
				fmt.Fprintln(os.Stderr, "lister:", err)
				os.Exit(1)
			}
			if r >= *warm {
				out[list[i]].Ms = append(out[list[i]].Ms, float64(d.Microseconds())/1000)
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "lister:", err)
		os.Exit(1)
	}
}
