// writer sends writes (or GETs) with a compiled client (issue 21: "throughput ratios ... with compiled
// clients"): Python client processes on the same two cores took CPU from the servers they measured. The
// operations come from a JSON-lines file, one {"m": method, "p": path, "b": body} per line (the body a string,
// empty for a GET); -clients goroutines each take every clients-th operation in order and send them one at a
// time on a keep-alive HTTP/1.1 connection of their own, all starting together. One JSON object on stdout:
//
//	{"n": N, "wall_s": S, "per_s": R, "p50_ms": .., "p99_ms": .., "max_ms": .., "statuses": {"201": N}}
//
// wall_s runs from the common start to the last answer. An answer that is not 2xx ends the run (exit 1).
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

type op struct {
	M string `json:"m"`
	P string `json:"p"`
	B string `json:"b"`
}

func tlsConfig(ca, cert, key string) *tls.Config {
	cfg := &tls.Config{}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		must(err)
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			must(fmt.Errorf("no certificate in %s", ca))
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		must(err)
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}

func main() {
	base := flag.String("base", "", "the server (base URL)")
	opsFile := flag.String("ops", "", "JSON-lines file of operations")
	clients := flag.Int("clients", 16, "keep-alive connections, one goroutine each")
	ca := flag.String("ca", "", "CA file for https")
	cert := flag.String("cert", "", "client certificate for https")
	key := flag.String("key", "", "client key for https")
	flag.Parse()
	if *base == "" || *opsFile == "" || *clients < 1 {
		fmt.Fprintln(os.Stderr, "writer: -base and -ops are required, -clients >= 1")
		os.Exit(2)
	}
	f, err := os.Open(*opsFile)
	must(err)
	var ops []op
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var o op
		must(json.Unmarshal(sc.Bytes(), &o))
		ops = append(ops, o)
	}
	must(sc.Err())
	f.Close()
	cfg := tlsConfig(*ca, *cert, *key)
	lat := make([][]float64, *clients)
	statuses := make([]map[int]int, *clients)
	errs := make(chan error, *clients)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ends := make([]time.Time, *clients)
	for k := 0; k < *clients; k++ {
		ready.Add(1)
		done.Add(1)
		go func(k int) {
			defer done.Done()
			// HTTP/1.1, one connection (TLSNextProto empty: no HTTP/2), kept alive between requests.
			c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg,
				ForceAttemptHTTP2: false, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true,
				TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
			statuses[k] = map[int]int{}
			// one warm-up request, so the TLS handshake is not in the first latency
			if resp, err := c.Get(*base + "/version"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			ready.Done()
			<-start
			for i := k; i < len(ops); i += *clients {
				o := ops[i]
				var body io.Reader
				if o.B != "" {
					body = bytes.NewReader([]byte(o.B))
				}
				req, err := http.NewRequest(o.M, *base+o.P, body)
				if err != nil {
					errs <- err
					return
				}
				if o.B != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				req.Header.Set("Accept", "application/json")
				t0 := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(t0)
				if err != nil {
					errs <- err
					return
				}
				if resp.StatusCode/100 != 2 {
					errs <- fmt.Errorf("%s %s: HTTP %d", o.M, o.P, resp.StatusCode)
					return
				}
				statuses[k][resp.StatusCode]++
				lat[k] = append(lat[k], float64(d.Nanoseconds())/1e6)
			}
			ends[k] = time.Now()
		}(k)
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	select {
	case err := <-errs:
		must(err)
	default:
	}
	var all []float64
	st := map[string]int{}
	last := t0
	for k := range lat {
		all = append(all, lat[k]...)
		for s, n := range statuses[k] {
			st[strconv.Itoa(s)] += n
		}
		if ends[k].After(last) {
			last = ends[k]
		}
	}
	sort.Float64s(all)
	pct := func(p float64) float64 { // nearest rank, as bench/report.py's pct
		if len(all) == 0 {
			return 0
		}
		i := int(math.Ceil(p/100*float64(len(all)))) - 1
		return all[max(0, min(len(all)-1, i))]
	}
	wall := last.Sub(t0).Seconds()
	out := map[string]any{"n": len(all), "wall_s": wall, "p50_ms": pct(50), "p99_ms": pct(99),
		"max_ms": pct(100), "statuses": st}
	if wall > 0 {
		out["per_s"] = float64(len(all)) / wall
	} else {
		out["per_s"] = 0.0
	}
	must(json.NewEncoder(os.Stdout).Encode(out))
}
