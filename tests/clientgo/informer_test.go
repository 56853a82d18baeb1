package clientgo

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/consistencydetector"
)

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) { r.mu.Lock(); r.events = append(r.events, s); r.mu.Unlock() }
func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(o interface{}) { c := o.(*corev1.ConfigMap); r.add("ADD " + c.Name + " " + c.Data["v"]) },
		UpdateFunc: func(_, o interface{}) {
			c := o.(*corev1.ConfigMap)
			r.add("UPDATE " + c.Name + " " + c.Data["v"])
		},
		DeleteFunc: func(o interface{}) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			r.add("DELETE " + o.(*corev1.ConfigMap).Name)
		},
	}
}

// storeState: name -> resourceVersion of an informer's store.
func storeState(s cache.Store) map[string]string {
	out := map[string]string{}
	for _, o := range s.List() {
		m := o.(metav1.Object)
		out[m.GetNamespace()+"/"+m.GetName()] = m.GetResourceVersion()
	}
	return out
}

func serverState(t *testing.T, cs kubernetes.Interface, ns string, opts metav1.ListOptions) (map[string]string, string) {
	t.Helper()
	l, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), opts)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	out := map[string]string{}
	for _, c := range l.Items {
		out[c.Namespace+"/"+c.Name] = c.ResourceVersion
	}
	return out, l.ResourceVersion
}

func diffStates(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if b[k] != v {
			d = append(d, fmt.Sprintf("%s: %q vs %q", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			d = append(d, fmt.Sprintf("%s: missing vs %q", k, v))
		}
	}
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("... %d more", len(d)-5))
	}
	return strings.Join(d, "; ")
}

// TestInformerConfigMaps: a SharedInformer from the informer factory syncs and then sees create,
// update and delete in order. Run once with WatchListClient on (default) and once with
// KUBE_FEATURE_WatchListClient=false; KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true makes client-go
// compare the watch-list result with an Exact list and panic (crashing this binary) on a difference.
func TestInformerConfigMaps(t *testing.T) {
	url := env(t, "APISERVER_URL")
	log := &requestLog{}
	cs := clientset(t, url, log)
	ns := newNamespace(t, cs)
	createMany(t, cs, ns, "pre", 50, 8)
	watchList := clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	t.Logf("WatchListClient=%v detector=%v", watchList, consistencydetector.IsDataConsistencyDetectionForWatchListEnabled())

	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().ConfigMaps().Informer()
	rec := &recorder{}
	if _, err := inf.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	syncCtx, c2 := context.WithTimeout(ctx, 20*time.Second)
	defer c2()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatalf("informer did not sync; requests: %v", log.matching())
	}
	want, _ := serverState(t, cs, ns, metav1.ListOptions{})
	if got := storeState(inf.GetStore()); diffStates(want, got) != "" {
		t.Fatalf("store after sync differs from list: %s", diffStates(want, got))
	}
	if len(rec.snapshot()) != 50 {
		t.Fatalf("want 50 initial ADDs, got %d", len(rec.snapshot()))
	}

	wl := log.matching("/configmaps?", "watch=true", "sendInitialEvents=true")
	lists := log.matching("/configmaps?", "!watch=true")
	if watchList {
		if len(wl) == 0 {
			t.Fatalf("watch-list on but no sendInitialEvents watch was sent: %v", log.matching())
		}
		// Only the consistency detector's Exact list may be a LIST.
		for _, u := range lists {
			if !strings.Contains(u, "resourceVersionMatch=Exact") {
				t.Fatalf("watch-list on, yet the reflector fell back to LIST: %v", log.matching())
			}
		}
		if consistencydetector.IsDataConsistencyDetectionForWatchListEnabled() {
			eventually(t, 10*time.Second, "the consistency detector's Exact list", func() (bool, string) {
				return len(log.matching("/configmaps?", "resourceVersionMatch=Exact")) > 0, fmt.Sprint(log.matching())
			})
		}
	} else {
		if len(wl) != 0 || len(lists) == 0 {
			t.Fatalf("watch-list off: want LIST then WATCH, got %v", log.matching())
		}
	}

	before := len(rec.snapshot())
	cms := cs.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, cm("x", map[string]string{"v": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Update(ctx, cm("x", map[string]string{"v": "2"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantEv := []string{"ADD x 1", "UPDATE x 2", "DELETE x"}
	eventually(t, 10*time.Second, "create/update/delete events", func() (bool, string) {
		ev := rec.snapshot()[before:]
		return fmt.Sprint(ev) == fmt.Sprint(wantEv), fmt.Sprint(ev)
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// controllableLW wraps a ListWatch: the test can stop the current watch, hold the reflector's next
// Watch call, and replace the RV it asks for.
type controllableLW struct {
	inner   cache.ListerWatcher
	mu      sync.Mutex
	current watch.Interface
	hold    chan struct{} // non-nil: the next Watch waits until closed
	staleRV string        // non-empty: the next plain watch (not a watch-list) asks for this RV
	lists   int           // LISTs and watch-lists (sendInitialEvents=true) served
	watches []string
}

func (c *controllableLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.inner.List(opts)
}

func (c *controllableLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	c.mu.Lock()
	hold := c.hold
	c.hold = nil
	c.mu.Unlock()
	if hold != nil {
		<-hold
	}
	c.mu.Lock()
	isWL := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if isWL {
		c.lists++
	} else if c.staleRV != "" {
		opts.ResourceVersion = c.staleRV
		c.staleRV = ""
	}
	c.watches = append(c.watches, fmt.Sprintf("rv=%q wl=%v", opts.ResourceVersion, isWL))
	c.mu.Unlock()
	w, err := c.inner.Watch(opts)
	c.mu.Lock()
	c.current = w
	c.mu.Unlock()
	return w, err
}

func (c *controllableLW) stopCurrent() {
	c.mu.Lock()
	w := c.current
	c.mu.Unlock()
	if w != nil {
		w.Stop()
	}
}

func (c *controllableLW) listCount() int { c.mu.Lock(); defer c.mu.Unlock(); return c.lists }

func runControlled(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, ns string) (*controllableLW, cache.SharedIndexInformer) {
	t.Helper()
	base := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, nilSelector())
	lw := &controllableLW{inner: cache.ToListWatcherWithWatchListSemantics(base, cs)}
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	go inf.Run(ctx.Done())
	sctx, c := context.WithTimeout(ctx, 20*time.Second)
	defer c()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return lw, inf
}

func checkRelist(t *testing.T, cs *kubernetes.Clientset, ns string, lw *controllableLW, inf cache.SharedIndexInformer, listsBefore int) {
	t.Helper()
	eventually(t, 30*time.Second, "re-list and convergence", func() (bool, string) {
		want, _ := serverState(t, cs, ns, metav1.ListOptions{})
		got := storeState(inf.GetStore())
		lw.mu.Lock()
		n, ws := lw.lists, fmt.Sprint(lw.watches)
		lw.mu.Unlock()
		d := diffStates(want, got)
		return n > listsBefore && d == "", fmt.Sprintf("lists=%d (before %d) watches=%s diff=%s", n, listsBefore, ws, d)
	})
}

// writeBatch updates, deletes and creates objects the informer does not see while held.
func writeBatch(t *testing.T, cs kubernetes.Interface, ns, tag string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("pre%05d", i)
		c, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Data = map[string]string{"v": tag}
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 10; i < 15; i++ {
		_ = cs.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("pre%05d", i), metav1.DeleteOptions{})
	}
	createMany(t, cs, ns, "new"+tag, 5, 1)
}

// relistAfterOutage starts a controlled informer on a namespace of 30 objects, stops its watch and
// holds the next one (asking for staleRV, if set) while outage runs (writes, compaction, ...), then
// lets it resume and checks that the reflector re-lists and converges to the true state.
func relistAfterOutage(t *testing.T, cs *kubernetes.Clientset, staleRV string, outage func(ns string)) {
	ns := newNamespace(t, cs)
	createMany(t, cs, ns, "pre", 30, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lw, inf := runControlled(t, ctx, cs, ns)
	hold := make(chan struct{})
	lw.mu.Lock()
	lw.hold, lw.staleRV = hold, staleRV
	before := lw.lists
	lw.mu.Unlock()
	lw.stopCurrent()
	outage(ns)
	close(hold)
	checkRelist(t, cs, ns, lw, inf, before)
}

// TestRelistAfterStaleRV: the reflector's next watch asks for an RV older than the watch cache's
// window (RV 2, before the cache's initial list): the server answers 410 and the reflector must
// re-list (watch-list with RV "" or LIST) and converge to the true state.
func TestRelistAfterStaleRV(t *testing.T) {
	cs := clientset(t, env(t, "APISERVER_URL"), nil)
	// RV 2 predates the cache: the server lists configmaps into its cache at start-up, after it
	// created its four system namespaces (revisions 2-5 on a fresh etcd), so resuming from RV 2
	// is "too old" (410) whatever ran before.
	relistAfterOutage(t, cs, "2", func(ns string) { writeBatch(t, cs, ns, "a") })
}

// TestRelistAfterCompaction: against a --watch-cache=false server, etcd is compacted past the
// informer's last RV while its watch is down; the resumed watch gets 410 and the reflector re-lists.
func TestRelistAfterCompaction(t *testing.T) {
	cs := clientset(t, env(t, "APISERVER_ETCD_URL"), nil)
	etcdURL := env(t, "ETCD_URL")
	relistAfterOutage(t, cs, "", func(ns string) {
		writeBatch(t, cs, ns, "b")
		_, rv := serverState(t, cs, ns, metav1.ListOptions{})
		compactEtcd(t, etcdURL, rv)
	})
}
