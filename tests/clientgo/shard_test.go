package clientgo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// shardInformer: a ConfigMap informer whose lists and watches carry shardSelector. client-go
// v0.37 has metav1.ListOptions.ShardSelector (KEP-5866), set through WithTweakListOptions.
func shardInformer(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, sel string) cache.SharedIndexInformer {
	t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.ShardSelector = sel }))
	inf := f.Core().V1().ConfigMaps().Informer()
	f.Start(ctx.Done())
	sctx, c := context.WithTimeout(ctx, 20*time.Second)
	defer c()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		t.Fatalf("informer (shardSelector %q) did not sync", sel)
	}
	return inf
}

// TestShardedInformers: two informers with complementary shardSelector ranges have disjoint stores
// whose union is an unsharded informer's store, before and after further writes; once with both on
// the fully resident server, once each on a server whose --residency is its range.
func TestShardedInformers(t *testing.T) {
	full := env(t, "APISERVER_URL")
	shardURLs := strings.Split(env(t, "SHARD_URLS"), "\n")
	sels := strings.Split(env(t, "SHARD_SELECTORS"), "\n")
	if len(shardURLs) != 2 || len(sels) != 2 {
		t.Fatalf("want 2 shard URLs and selectors: %q %q", shardURLs, sels)
	}
	cs := clientset(t, full, nil)
	ns := newNamespace(t, cs)
	createMany(t, cs, ns, "s", 200, 16)
	for _, mode := range []string{"full", "resident"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			all := shardInformer(t, ctx, cs, ns, "")
			var parts []cache.SharedIndexInformer
			for i, sel := range sels {
				url := full
				if mode == "resident" {
					url = shardURLs[i]
				}
				parts = append(parts, shardInformer(t, ctx, clientset(t, url, nil), ns, sel))
			}
			check := func() (bool, string) {
				a, b, u := storeState(parts[0].GetStore()), storeState(parts[1].GetStore()), storeState(all.GetStore())
				union := map[string]string{}
				for k, v := range a {
					if _, ok := b[k]; ok {
						return false, "both shards hold " + k
					}
					union[k] = v
				}
				for k, v := range b {
					union[k] = v
				}
				if len(a) == 0 || len(b) == 0 {
					return false, "a shard is empty"
				}
				if d := diffStates(u, union); d != "" {
					return false, d
				}
				want, _ := serverState(t, cs, ns, metav1.ListOptions{})
				return diffStates(want, u) == "", "unsharded vs server: " + diffStates(want, u)
			}
			eventually(t, 10*time.Second, "shards after sync", check)
			writeShardBatch(t, cs, ns, mode)
			eventually(t, 15*time.Second, "shards after writes", check)
		})
	}
}

func writeShardBatch(t *testing.T, cs kubernetes.Interface, ns, tag string) {
	t.Helper()
	createMany(t, cs, ns, "n"+tag, 40, 8)
	off := 0
	if tag == "resident" {
		off = 100
	}
	for i := off; i < off+20; i++ {
		_ = cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), fmt.Sprintf("s%05d", i), metav1.DeleteOptions{})
	}
}
