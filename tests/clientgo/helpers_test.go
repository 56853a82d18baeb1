// Package clientgo runs the real k8s.io/client-go against the prototype apiserver.
// Driven by tests/test_clientgo.py, which starts the servers and passes their URLs:
//
//	APISERVER_URL       a fully resident server with the watch cache over a current etcd
//	APISERVER_ETCD_URL  a --watch-cache=false server over its own etcd (ETCD_URL: that etcd's client URL)
//	SHARD_URLS          two servers with complementary --residency (newline separated)
//	SHARD_SELECTORS     their selectors (newline separated)
package clientgo

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var nsCounter atomic.Int64

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s not set: run through tests/test_clientgo.py", name)
	}
	return v
}

// requestLog records every request URL a client sends.
type requestLog struct {
	mu   sync.Mutex
	urls []string
}

func (l *requestLog) add(u string) { l.mu.Lock(); l.urls = append(l.urls, u); l.mu.Unlock() }
func (l *requestLog) matching(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, u := range l.urls {
		ok := true
		for _, p := range parts {
			if strings.HasPrefix(p, "!") {
				if strings.Contains(u, p[1:]) {
					ok = false
				}
			} else if !strings.Contains(u, p) {
				ok = false
			}
		}
		if ok {
			out = append(out, u)
		}
	}
	return out
}

type logRT struct {
	log  *requestLog
	next http.RoundTripper
}

func (r logRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.log.add(req.Method + " " + req.URL.RequestURI())
	return r.next.RoundTrip(req)
}

// config builds a rest.Config with client-go's defaults: typed clients send protobuf bodies
// for built-in kinds, the dynamic client JSON.
func config(url string, log *requestLog) *rest.Config {
	c := &rest.Config{Host: url, QPS: 2000, Burst: 2000}
	if log != nil {
		c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return logRT{log, rt} }
	}
	return c
}

func clientset(t *testing.T, url string, log *requestLog) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(config(url, log))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func newNamespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	name := fmt.Sprintf("cg-%d-%d", os.Getpid(), nsCounter.Add(1))
	_, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

func cm(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

// createMany creates n ConfigMaps name-%05d with `workers` concurrent clients.
func createMany(t *testing.T, cs kubernetes.Interface, ns, prefix string, n, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += workers {
				_, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(),
					cm(fmt.Sprintf("%s%05d", prefix, i), map[string]string{"i": fmt.Sprint(i)}), metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var msg string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, msg = cond(); ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, msg)
}
