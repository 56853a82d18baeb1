// robustinformer: a client-go informer (dynamic, watch-list on) over one namespaced resource, for the
// robustness suite (tests/robustness, issue 10). It runs until stdin closes; each line "dump" on stdin prints
// one JSON line: {"synced": bool, "items": {name: [resourceVersion, data.op]}, "relists": n}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

func main() {
	server := flag.String("server", "", "apiserver URL")
	ns := flag.String("namespace", "", "namespace")
	group := flag.String("group", "", "API group ('' for core)")
	version := flag.String("version", "v1", "API version")
	resource := flag.String("resource", "configmaps", "resource (plural)")
	flag.Parse()
	cfg := &rest.Config{Host: *server, QPS: -1, Timeout: 30 * time.Second}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	gvr := schema.GroupVersionResource{Group: *group, Version: *version, Resource: *resource}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, *ns, nil)
	inf := f.ForResource(gvr).Informer()
	var adds atomic.Int64
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(interface{}) { adds.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	fmt.Fprintf(os.Stderr, "watch-list client: %v\n", clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient))
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if in.Text() != "dump" {
			continue
		}
		items := map[string][2]string{}
		for _, o := range inf.GetStore().List() {
			u := o.(*unstructured.Unstructured)
			op, _, _ := unstructured.NestedString(u.Object, "data", "op")
			items[u.GetName()] = [2]string{u.GetResourceVersion(), op}
		}
		_ = out.Encode(map[string]interface{}{"synced": inf.HasSynced(), "items": items,
			"adds": strconv.FormatInt(adds.Load(), 10), "lastSyncRV": inf.LastSyncResourceVersion()})
	}
}
