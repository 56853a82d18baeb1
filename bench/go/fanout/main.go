// fanout drives watch fan-out at saturation (issue 21, "measure the server, not the client"): N watches on
// one server, each on its own HTTP/1.1 connection, and a writer on another server that raises its rate
// step by step. Compiled, so the figure is the server's: bench.vs_upstream's Python watch clients spent their
// own CPU per event, and its unpaced writer measured queueing at saturation, not a delivery latency.
//
// Each update's ConfigMap carries "seq"; a watcher stamps the receipt time of every line that names a seq.
// Latency is receipt minus the writer's ack of the same seq (negative when the event beats the PUT response).
// One JSON line per step on stdout:
//
//	{"rate":R,"writes":W,"achieved_rate":A,"write_errors":E,"deliveries":D,"expected":W*N,"p50_ms":..,"p99_ms":..,"max_ms":..,"ok":..}
//
// "ok": every event delivered within the drain time and p99 at most -p99-limit. With -stop-on-fail the
// ladder ends at the first step that is not ok (higher rates would only fail harder).
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
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type sample struct {
	seq int32
	at  int64 // ns, wall clock (the writer is in this process: one clock)
}

type watcher struct {
	mu      sync.Mutex
	samples []sample
	count   atomic.Int64 // samples ever taken (the drain's cheap check)
	closed  atomic.Bool
}

func tlsConfig(ca, cert, key string) *tls.Config {
	cfg := &tls.Config{}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		must(err)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg.RootCAs = pool
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		must(err)
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// transport: HTTP/1.1 only (no HTTP/2 multiplexing: one connection per watch, as the targets say).
func transport(cfg *tls.Config, conns int) *http.Transport {
	return &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: false, MaxIdleConnsPerHost: conns,
		MaxConnsPerHost: conns, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

var seqKey = []byte(`"seq":"`)

func (w *watcher) run(client *http.Client, url string, opened *sync.WaitGroup, failed chan<- error) {
	resp, err := client.Get(url)
	if err == nil && resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		err = fmt.Errorf("watch: HTTP %d: %s", resp.StatusCode, body)
	}
	opened.Done()
	if err != nil {
		failed <- err
		return
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 1<<16)
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull { // a line longer than the buffer: read on, the seq is near its end
			rest, err2 := r.ReadBytes('\n')
			line, err = append(append([]byte{}, line...), rest...), err2
		}
		if len(line) > 0 {
			now := time.Now().UnixNano()
			if i := bytes.Index(line, seqKey); i >= 0 {
				j := i + len(seqKey)
				k := bytes.IndexByte(line[j:], '"')
				if k > 0 {
					if n, e := strconv.Atoi(string(line[j : j+k])); e == nil {
						w.mu.Lock()
						w.samples = append(w.samples, sample{int32(n), now})
						w.mu.Unlock()
						w.count.Add(1)
					}
				}
			}
		}
		if err != nil {
			w.closed.Store(true)
			return
		}
	}
}

func main() {
	watchURL := flag.String("watch", "", "the server under test (base URL)")
	writeURL := flag.String("write", "", "the server the writes go to (base URL)")
	ca := flag.String("ca", "", "CA file for https")
	cert := flag.String("cert", "", "client certificate for https")
	key := flag.String("key", "", "client key for https")
	path := flag.String("path", "/api/v1/namespaces/fanout/configmaps", "the collection")
	watchers := flag.Int("watchers", 100, "watches")
	objects := flag.Int("objects", 100, "objects cm-0000.. (existing) the writes cycle through")
	size := flag.Int("size", 1024, "bytes of padding per object")
	rates := flag.String("rates", "50,100,200", "writes/s per step")
	step := flag.Duration("step", 10*time.Second, "the time each rate is held")
	drain := flag.Duration("drain", 10*time.Second, "how long a step's last events may take to arrive")
	p99Limit := flag.Duration("p99-limit", time.Second, "a step is ok with every event delivered and p99 at most this")
	conns := flag.Int("writers", 16, "keep-alive write connections")
	stopOnFail := flag.Bool("stop-on-fail", true, "end the ladder at the first step that is not ok")
	tag := flag.String("tag", strconv.FormatInt(time.Now().UnixNano(), 10), "per-run tag (an identical PUT is a no-op)")
	flag.Parse()
	cfg := tlsConfig(*ca, *cert, *key)

	// The current RV, from a list of the collection on the server under test.
	lc := &http.Client{Transport: transport(cfg, 1), Timeout: 30 * time.Second}
	resp, err := lc.Get(*watchURL + *path + "?limit=1")
	must(err)
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	must(json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()

	ws := make([]*watcher, *watchers)
	var opened sync.WaitGroup
	failed := make(chan error, *watchers)
	url := fmt.Sprintf("%s%s?watch=true&resourceVersion=%s&timeoutSeconds=3600", *watchURL, *path,
		list.Metadata.ResourceVersion)
	for i := range ws {
		ws[i] = &watcher{}
		opened.Add(1)
		go ws[i].run(&http.Client{Transport: transport(cfg, 1)}, url, &opened, failed)
	}
	opened.Wait()
	select {
	case err := <-failed:
		must(err)
	default:
	}
	time.Sleep(time.Second) // the server settles its new watchers

	wc := &http.Client{Transport: transport(cfg, *conns), Timeout: 60 * time.Second}
	pad := strings.Repeat("x", *size)
	seq := 0
	acked := int64(0) // successful writes of all steps so far: what every watcher has to have seen
	out := json.NewEncoder(os.Stdout)
	for _, f := range strings.Split(*rates, ",") {
		rate, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		must(err)
		n := int(rate * step.Seconds())
		first := seq
		acks := make([]int64, n)
		var errs atomic.Int64
		jobs := make(chan int, n)
		var wg sync.WaitGroup
		for c := 0; c < *conns; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range jobs {
					i := s % *objects
					body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%04d","namespace":%q},"data":{"pad":%q,"seq":"%d","run":%q}}`,
						i, nsOf(*path), pad, s, *tag)
					req, _ := http.NewRequest("PUT", fmt.Sprintf("%s%s/cm-%04d", *writeURL, *path, i), strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					r, err := wc.Do(req)
					if err == nil {
						io.Copy(io.Discard, r.Body)
						r.Body.Close()
						if r.StatusCode != 200 {
							err = fmt.Errorf("HTTP %d", r.StatusCode)
						}
					}
					if err != nil {
						errs.Add(1)
						continue
					}
					acks[s-first] = time.Now().UnixNano()
				}
			}()
		}
		t0 := time.Now()
		for k := 0; k < n; k++ { // paced: write k leaves at t0 + k/rate (late ones go at once)
			if d := time.Until(t0.Add(time.Duration(float64(k) / rate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
			jobs <- first + k
		}
		close(jobs)
		wg.Wait()
		wall := time.Since(t0).Seconds()
		seq = first + n
		acked += int64(n) - errs.Load()
		// Drain: until every watcher saw every acked write, or the drain time passed.
		deadline := time.Now().Add(*drain)
		for time.Now().Before(deadline) && !allSeen(ws, acked) {
			time.Sleep(50 * time.Millisecond)
		}
		var lat []float64
		delivered := 0
		closed := 0
		for _, w := range ws {
			w.mu.Lock()
			keep := w.samples[:0]
			for _, s := range w.samples {
				if int(s.seq) >= first && int(s.seq) < seq {
					delivered++
					if a := acks[int(s.seq)-first]; a > 0 {
						lat = append(lat, float64(s.at-a)/1e6)
					}
				} else if int(s.seq) >= seq {
					keep = append(keep, s)
				}
			}
			w.samples = keep
			w.mu.Unlock()
			if w.closed.Load() {
				closed++
			}
		}
		sort.Float64s(lat)
		expected := (n - int(errs.Load())) * *watchers
		res := map[string]any{"rate": rate, "writes": n, "achieved_rate": float64(n) / wall,
			"write_errors": errs.Load(), "deliveries": delivered, "expected": expected,
			"watches_closed": closed, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": pct(lat, 100)}
		ok := delivered >= expected && errs.Load() == 0 && closed == 0 && len(lat) > 0 &&
			pct(lat, 99) <= float64(p99Limit.Milliseconds())
		res["ok"] = ok
		must(out.Encode(res))
		if !ok && *stopOnFail {
			break
		}
	}
}

func allSeen(ws []*watcher, acked int64) bool {
	for _, w := range ws {
		if w.count.Load() < acked {
			return false
		}
	}
	return true
}

func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(float64(len(xs)-1) * p / 100)
	return xs[i]
}

func nsOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+1 < len(parts) {
			return parts[i+1]
		}
	}
	return "default"
}
