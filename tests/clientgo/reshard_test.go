package clientgo

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestInformerDuringReshard (issue 11 §4): an informer through the front while the front's shard map changes
// (tests/test_front_conformance.py splits a shard between RESHARD_READY and RESHARD_DONE). Every write the test
// makes reaches the informer's handler exactly once and in order, its store ends equal to the server's, and the
// reflector never re-lists (one LIST or watch-list in all), although its watch moved to the new map.
func TestInformerDuringReshard(t *testing.T) {
	cs := clientset(t, env(t, "APISERVER_URL"), nil)
	ready, done := env(t, "RESHARD_READY"), env(t, "RESHARD_DONE")
	ns := newNamespace(t, cs)
	createMany(t, cs, ns, "r", 40, 4)
	base := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", ns, nilSelector())
	lw := &controllableLW{inner: cache.ToListWatcherWithWatchListSemantics(base, cs)} // counts lists and watches
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	var mu sync.Mutex
	seen := map[string][]int64{} // name -> resourceVersions its handler calls carried, in order
	record := func(o interface{}) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		c := o.(*corev1.ConfigMap)
		rv, _ := strconv.ParseInt(c.ResourceVersion, 10, 64)
		mu.Lock()
		seen[c.Name] = append(seen[c.Name], rv)
		mu.Unlock()
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: record, UpdateFunc: func(_, o interface{}) { record(o) },
		DeleteFunc: record})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx.Done())
	sctx, c := context.WithTimeout(ctx, 20*time.Second)
	defer c()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	listsAtSync := lw.listCount()
	// Writes until the split is done, plus a few after it.
	acked := map[string][]int64{}
	write := func(i int) {
		name := fmt.Sprintf("r%05d", i%40)
		got, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		got.Data = map[string]string{"v": fmt.Sprint(i)}
		up, err := cs.CoreV1().ConfigMaps(ns).Update(context.Background(), got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update: %v", err)
		}
		rv, _ := strconv.ParseInt(up.ResourceVersion, 10, 64)
		acked[name] = append(acked[name], rv)
	}
	if err := os.WriteFile(ready, []byte("ready"), 0o644); err != nil {
		t.Fatal(err)
	}
	i := 0
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the split did not finish in time")
		}
		write(i)
		i++
		time.Sleep(20 * time.Millisecond)
	}
	for j := 0; j < 20; j++ {
		write(i)
		i++
	}
	eventually(t, 30*time.Second, "informer convergence", func() (bool, string) {
		want, _ := serverState(t, cs, ns, metav1.ListOptions{})
		d := diffStates(want, storeState(inf.GetStore()))
		return d == "", d
	})
	mu.Lock()
	defer mu.Unlock()
	for name, rvs := range acked {
		got := seen[name]
		// The initial ADD (before the writes) then exactly the acknowledged updates, in order.
		if len(got) != len(rvs)+1 {
			t.Fatalf("%s: handler saw RVs %v, the writes were %v", name, got, rvs)
		}
		for k, rv := range rvs {
			if got[k+1] != rv {
				t.Fatalf("%s: handler saw RVs %v, the writes were %v", name, got, rvs)
			}
		}
	}
	lw.mu.Lock()
	lists, watches := lw.lists, len(lw.watches)
	lw.mu.Unlock()
	t.Logf("writes=%d lists=%d watches=%d", i, lists, watches)
	if lists != listsAtSync {
		t.Fatalf("the reflector re-listed: %d lists after sync (%d at sync)", lists, listsAtSync)
	}
	if watches < 2 {
		t.Fatalf("the watch never moved to the new map (%d watches)", watches)
	}
}
