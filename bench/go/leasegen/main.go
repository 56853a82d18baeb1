// leasegen renews node Leases exactly as the kubelet's lease controller does (issue 22 §5: kwok cannot drive
// 30,000 nodes on this machine; a compiled generator can), and measures what the server under test answers.
//
// Per node (k8s.io/component-helpers/apimachinery/lease/controller.go, as kubelets and kwok run it):
//
//   - at start, ensure the Lease: GET it, create it when it is missing (holderIdentity = the node,
//     leaseDurationSeconds, renewTime now);
//   - then every renew interval (a quarter of the lease duration), jittered by up to 4 % and counted from
//     the end of the last sync (wait.JitterUntil(sync, interval, 0.04, sliding=true)): PUT the last Lease
//     the server returned with renewTime = now (metav1.MicroTime, microseconds) and the server's
//     resourceVersion as the precondition; on 409 GET the Lease and PUT again, at most 5 attempts
//     (maxUpdateRetries); the answer becomes the next sync's base.
//
// The nodes' phases are spread uniformly over one interval (as a cluster's kubelets are). Each node is a
// goroutine; requests share -conns HTTP/1.1 keep-alive connections (kwok shares one client too).
//
// After -warmup, a window of -duration seconds is measured; one JSON object on stdout:
//
//	{"nodes":N,"interval_s":..,"window_s":..,"expected_per_s":..,"renewals":R,"renewals_per_s":..,
//	 "on_time":..,"conflicts":..,"errors":{"503":..},"p50_ms":..,"p99_ms":..,"max_ms":..,"cpu_s":..}
//
// "renewals" are PUTs answered 200 in the window; latency is each PUT's round trip (409s included);
// "on_time" is the share of the window's renewals that came within 1.1 intervals of the node's previous one
// (the late ones are what a lagging server costs a kubelet); "expected_per_s" is N over the mean period
// (interval x 1.02).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	maxUpdateRetries   = 5
	maxThrottleRetries = 10
)

type config struct {
	base, ns, prefix, token string
	leaseSeconds            int
	interval                time.Duration
	client                  *http.Client
}

type stats struct {
	mu        sync.Mutex
	lat       []float64 // ms, PUT round trips in the window
	renewals  int
	onTime    int
	conflicts int
	errors    map[string]int
}

var measuring atomic.Bool

func (s *stats) put(ms float64, status int, onTime bool) {
	if !measuring.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat = append(s.lat, ms)
	switch {
	case status == 200:
		s.renewals++
		if onTime {
			s.onTime++
		}
	case status == 409:
		s.conflicts++
	default:
		s.errors[strconv.Itoa(status)]++
	}
}

func (s *stats) failed(what string) {
	if !measuring.Load() {
		return
	}
	s.mu.Lock()
	s.errors[what]++
	s.mu.Unlock()
}

func microTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

func (c *config) once(method, url string, body []byte) (int, []byte, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "leasegen")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	retryAfter := time.Second
	if n, e := strconv.Atoi(resp.Header.Get("Retry-After")); e == nil && n > 0 {
		retryAfter = time.Duration(n) * time.Second
	}
	return resp.StatusCode, b, retryAfter, err
}

// do: one request, retried after the server's Retry-After on 429 (too many requests in flight), at most
// maxThrottleRetries times, as client-go's rest client does; each 429 is counted.
func (c *config) do(method, url string, body []byte, s *stats) (int, []byte, error) {
	for i := 0; ; i++ {
		st, b, retryAfter, err := c.once(method, url, body)
		if err != nil || st != 429 || i >= maxThrottleRetries {
			return st, b, err
		}
		s.failed("429")
		time.Sleep(retryAfter)
	}
}

func (c *config) leaseURL(name string) string {
	return c.base + "/apis/coordination.k8s.io/v1/namespaces/" + c.ns + "/leases/" + name
}

// ensure: GET the Lease, create it when missing (backoffEnsureLease).
func (c *config) ensure(name string, s *stats) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		st, b, err := c.do("GET", c.leaseURL(name), nil, s)
		if err == nil && st == 200 {
			return b, nil
		}
		if err == nil && st == 404 {
			lease := map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
				"metadata": map[string]any{"name": name, "namespace": c.ns},
				"spec": map[string]any{"holderIdentity": name, "leaseDurationSeconds": c.leaseSeconds,
					"renewTime": microTime(time.Now())}}
			body, _ := json.Marshal(lease)
			st, b, err = c.do("POST", c.base+"/apis/coordination.k8s.io/v1/namespaces/"+c.ns+"/leases", body, s)
			if err == nil && st == 201 {
				return b, nil
			}
			if err == nil && st == 409 { // created meanwhile: GET it
				continue
			}
		}
		if attempt >= 20 {
			if err == nil {
				err = fmt.Errorf("HTTP %d: %.200s", st, b)
			}
			return nil, err
		}
		time.Sleep(time.Duration(200*(attempt+1)) * time.Millisecond)
	}
}

// node runs one kubelet's lease controller, from the Lease ensured at start, until stop is closed.
func (c *config) node(name string, lease []byte, phase time.Duration, s *stats, stop <-chan struct{}) {
	timer := time.NewTimer(phase)
	defer timer.Stop()
	var last time.Time
	for {
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		base := lease
		for i := 0; i < maxUpdateRetries; i++ {
			body := withRenewTime(base, microTime(time.Now()))
			t0 := time.Now()
			st, b, err := c.do("PUT", c.leaseURL(name), body, s)
			now := time.Now()
			if err != nil {
				s.failed("transport")
				continue
			}
			onTime := !last.IsZero() && now.Sub(last) <= c.interval*11/10
			s.put(float64(now.Sub(t0).Microseconds())/1000, st, onTime)
			if st == 200 {
				lease, last = b, now
				break
			}
			if st == 409 { // the server's copy moved on: GET it and retry
				if l, err := c.ensure(name, s); err == nil {
					base = l
				}
			}
		}
		// sliding: the next period counts from the end of this sync, with up to 4 % jitter
		timer.Reset(c.interval + time.Duration(rand.Float64()*0.04*float64(c.interval)))
	}
}

var renewKey = []byte(`"renewTime":`)

// withRenewTime: the Lease's JSON (as the server returned it) with spec.renewTime set to t. The JSON is kept
// as bytes, not decoded: at thousands of renewals a second, decoding and encoding every Lease would cost the
// generator more CPU than the server under test spends. A Lease without renewTime gets one in its spec.
func withRenewTime(lease []byte, t string) []byte {
	val := []byte(`"` + t + `"`)
	if i := bytes.Index(lease, renewKey); i >= 0 {
		j := i + len(renewKey)
		end := j
		if j < len(lease) && lease[j] == '"' {
			end = j + 1 + bytes.IndexByte(lease[j+1:], '"') + 1
		} else if bytes.HasPrefix(lease[j:], []byte("null")) {
			end = j + 4
		}
		out := make([]byte, 0, len(lease)+8)
		return append(append(append(out, lease[:j]...), val...), lease[end:]...)
	}
	if i := bytes.Index(lease, []byte(`"spec":{`)); i >= 0 {
		j := i + len(`"spec":{`)
		sep := []byte(",")
		if j < len(lease) && lease[j] == '}' {
			sep = nil
		}
		out := make([]byte, 0, len(lease)+48)
		out = append(append(append(out, lease[:j]...), renewKey...), val...)
		return append(append(out, sep...), lease[j:]...)
	}
	return lease
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

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasegen:", err)
		os.Exit(1)
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q * float64(len(xs)))
	if i >= len(xs) {
		i = len(xs) - 1
	}
	return xs[i]
}

func main() {
	server := flag.String("server", "", "the server under test (base URL)")
	ca := flag.String("ca", "", "CA file for https")
	cert := flag.String("cert", "", "client certificate for https")
	key := flag.String("key", "", "client key for https")
	token := flag.String("token", "", "bearer token")
	nodes := flag.Int("nodes", 1000, "simulated nodes (one Lease each)")
	prefix := flag.String("prefix", "lg-", "Lease names: PREFIX000000..")
	ns := flag.String("namespace", "kube-node-lease", "the Leases' namespace")
	leaseSeconds := flag.Int("lease-seconds", 40, "leaseDurationSeconds; the renew interval is a quarter of it")
	warmup := flag.Duration("warmup", 0, "time after every Lease exists before the window (default one interval)")
	duration := flag.Duration("duration", 60*time.Second, "the measured window")
	conns := flag.Int("conns", 128, "HTTP/1.1 keep-alive connections shared by the nodes: requests in flight at "+
		"most (128, as bench.nodes gives kwok's nodeLeaseParallelism, under the apiserver's 200 mutating in flight)")
	setup := flag.Int("setup-parallelism", 64, "Leases ensured at once before the run")
	cpuprofile := flag.String("cpuprofile", "", "write the window's CPU profile here")
	flag.Parse()
	if *server == "" {
		must(fmt.Errorf("-server is required"))
	}
	interval := time.Duration(*leaseSeconds) * time.Second / 4
	if *warmup == 0 {
		*warmup = interval
	}
	tr := &http.Transport{TLSClientConfig: tlsConfig(*ca, *cert, *key), ForceAttemptHTTP2: false,
		MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	c := &config{base: *server, ns: *ns, prefix: *prefix, token: *token, leaseSeconds: *leaseSeconds,
		interval: interval, client: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
	s := &stats{errors: map[string]int{}}
	stop := make(chan struct{})

	// Ensure every Lease (-setup-parallelism at once), then start each node's loop at its phase of the interval.
	t0 := time.Now()
	names := make([]string, *nodes)
	leases := make([][]byte, *nodes)
	var failures atomic.Int64
	work := make(chan int)
	var setupWG sync.WaitGroup
	for w := 0; w < *setup; w++ {
		setupWG.Add(1)
		go func() {
			defer setupWG.Done()
			for i := range work {
				l, err := c.ensure(names[i], s)
				if err != nil {
					failures.Add(1)
					fmt.Fprintln(os.Stderr, "leasegen: ensure", names[i]+":", err)
				}
				leases[i] = l
			}
		}()
	}
	for i := range names {
		names[i] = fmt.Sprintf("%s%06d", *prefix, i)
		work <- i
	}
	close(work)
	setupWG.Wait()
	if failures.Load() > 0 {
		must(fmt.Errorf("%d Leases could not be ensured", failures.Load()))
	}
	var done sync.WaitGroup
	for i := range names {
		done.Add(1)
		phase := time.Duration(float64(interval) * float64(i) / float64(*nodes))
		go func() { defer done.Done(); c.node(names[i], leases[i], phase, s, stop) }()
	}
	fmt.Fprintf(os.Stderr, "leasegen: %d Leases ensured in %.1f s; warming up %s\n", *nodes,
		time.Since(t0).Seconds(), *warmup)
	time.Sleep(*warmup)
	cpu0 := cpuSeconds()
	w0 := time.Now()
	measuring.Store(true)
	fmt.Fprintln(os.Stderr, "leasegen: window starts")
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer f.Close()
	}
	time.Sleep(*duration)
	if *cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	measuring.Store(false)
	fmt.Fprintln(os.Stderr, "leasegen: window ends")
	window := time.Since(w0).Seconds()
	cpu := cpuSeconds() - cpu0
	close(stop)
	done.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	sort.Float64s(s.lat)
	onTime := 0.0
	if s.renewals > 0 {
		onTime = float64(s.onTime) / float64(s.renewals)
	}
	maxMs := 0.0
	if len(s.lat) > 0 {
		maxMs = s.lat[len(s.lat)-1]
	}
	out := map[string]any{"nodes": *nodes, "interval_s": interval.Seconds(), "window_s": window,
		"expected_per_s": float64(*nodes) / (interval.Seconds() * 1.02), "renewals": s.renewals,
		"renewals_per_s": float64(s.renewals) / window, "on_time": onTime, "conflicts": s.conflicts,
		"errors": s.errors, "p50_ms": quantile(s.lat, 0.5), "p99_ms": quantile(s.lat, 0.99), "max_ms": maxMs,
		"cpu_s": cpu, "conns": *conns}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
