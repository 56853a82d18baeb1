package clientgo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// TestDynamicCRD: a CRD created with the dynamic client; its custom resources through the dynamic
// client (create, get, list, update, patch, delete) and a dynamic informer.
func TestDynamicCRD(t *testing.T) {
	url := env(t, "APISERVER_URL")
	cs := clientset(t, url, nil)
	dc, err := dynamic.NewForConfig(config(url, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	group := fmt.Sprintf("cg%d.example.com", nsCounter.Add(1))
	crd := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]interface{}{"name": "widgets." + group},
		"spec": map[string]interface{}{
			"group": group, "scope": "Namespaced",
			"names": map[string]interface{}{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []interface{}{map[string]interface{}{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]interface{}{"openAPIV3Schema": map[string]interface{}{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	if _, err := dc.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	defer dc.Resource(crdGVR).Delete(context.Background(), "widgets."+group, metav1.DeleteOptions{})
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	ns := newNamespace(t, cs)
	ri := dc.Resource(gvr).Namespace(ns)
	widget := func(name, size string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": group + "/v1", "kind": "Widget",
			"metadata": map[string]interface{}{"name": name, "labels": map[string]interface{}{"app": "w"}},
			"spec":     map[string]interface{}{"size": size},
		}}
	}
	eventually(t, 10*time.Second, "CR served", func() (bool, string) {
		_, err := ri.Create(ctx, widget("w0", "s"), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})

	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, ns, nil)
	inf := f.ForResource(gvr).Informer()
	var mu sync.Mutex
	var events []string
	add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	size := func(o interface{}) string {
		s, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "spec", "size")
		return s
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { add("ADD " + o.(*unstructured.Unstructured).GetName() + " " + size(o)) },
		UpdateFunc: func(_, o interface{}) { add("UPDATE " + o.(*unstructured.Unstructured).GetName() + " " + size(o)) },
		DeleteFunc: func(o interface{}) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			add("DELETE " + o.(*unstructured.Unstructured).GetName())
		},
	})
	f.Start(ctx.Done())
	sctx, c2 := context.WithTimeout(ctx, 20*time.Second)
	defer c2()
	if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
		t.Fatal("dynamic informer did not sync")
	}

	if _, err := ri.Create(ctx, widget("w1", "m"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := ri.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || got.GetUID() == "" || got.GetResourceVersion() == "" {
		t.Fatalf("get: %v %v", got, err)
	}
	unstructured.SetNestedField(got.Object, "l", "spec", "size")
	if _, err := ri.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if _, err := ri.Patch(ctx, "w1", "application/merge-patch+json", []byte(`{"spec":{"size":"xl"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch: %v", err)
	}
	l, err := ri.List(ctx, metav1.ListOptions{LabelSelector: "app=w"})
	if err != nil || len(l.Items) != 2 || l.GetKind() != "WidgetList" {
		t.Fatalf("list: %v kind=%s n=%d", err, l.GetKind(), len(l.Items))
	}
	if err := ri.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "[ADD w0 s ADD w1 m UPDATE w1 l UPDATE w1 xl DELETE w1]"
	eventually(t, 10*time.Second, "dynamic informer events", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(events) == want, fmt.Sprint(events)
	})
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != ns+"/w0" {
		t.Fatalf("store: %v", keys)
	}
}
