package clientgo

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
)

// TestPagerExactList: 5,000 ConfigMaps listed with client-go's pager (page size 100) while writers
// update, create and delete in the same namespace; the result must equal an Exact list at the first
// page's resourceVersion.
func TestPagerExactList(t *testing.T) {
	url := env(t, "APISERVER_URL")
	cs := clientset(t, url, nil)
	ns := newNamespace(t, cs)
	start := time.Now()
	createMany(t, cs, ns, "p", 5000, 64)
	t.Logf("created 5000 in %v", time.Since(start))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for i := 0; ctx.Err() == nil; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm(fmt.Sprintf("p%05d", r.Intn(5000)), map[string]string{"w": fmt.Sprint(i)}), metav1.UpdateOptions{})
				case 1:
					_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm(fmt.Sprintf("w%d-%d", w, i), nil), metav1.CreateOptions{})
				case 2:
					err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("p%05d", r.Intn(5000)), metav1.DeleteOptions{})
				}
				if err == nil {
					writes.Add(1)
				}
			}
		}(w)
	}
	time.Sleep(200 * time.Millisecond)
	var pages atomic.Int64
	var firstRV string
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err == nil {
			if pages.Add(1) == 1 {
				firstRV = l.ResourceVersion
			} else if l.ResourceVersion != firstRV {
				return nil, fmt.Errorf("page %d at RV %s, first page at %s", pages.Load(), l.ResourceVersion, firstRV)
			}
			if opts.Limit != 100 {
				return nil, fmt.Errorf("page size %d", opts.Limit)
			}
		}
		return l, err
	}))
	p.PageSize = 100
	p.FullListIfExpired = false
	obj, _, err := p.List(ctx, metav1.ListOptions{})
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("pager: %v", err)
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pager: %d items in %d pages at RV %s; %d concurrent writes", len(items), pages.Load(), firstRV, writes.Load())
	if writes.Load() == 0 {
		t.Fatal("writers made no writes during the pager list")
	}
	if pages.Load() < 40 {
		t.Fatalf("expected >= 40 pages, got %d", pages.Load())
	}
	got := map[string]string{}
	for _, o := range items {
		c := o.(*corev1.ConfigMap)
		if _, dup := got[c.Name]; dup {
			t.Fatalf("duplicate %s in paged list", c.Name)
		}
		got[c.Namespace+"/"+c.Name] = c.ResourceVersion
	}
	want, rv := serverState(t, cs, ns, metav1.ListOptions{ResourceVersion: firstRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if rv != firstRV {
		t.Fatalf("Exact list RV %s != %s", rv, firstRV)
	}
	if d := diffStates(want, got); d != "" {
		t.Fatalf("paged list != Exact list at %s: %s", firstRV, d)
	}
}
