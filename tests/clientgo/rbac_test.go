package clientgo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// TestRBACViewInformer: a user bound to `view` in one namespace (RBAC_TOKEN, RBAC_NAMESPACE) runs a
// ConfigMap informer there (list + watch, and the events of objects created meanwhile by RBAC_ADMIN_TOKEN),
// and is refused a write and a cluster-wide list with 403 Forbidden. Driven by tests/test_authz.py against a
// server with --authorization-mode=RBAC, over HTTPS (RBAC_CA: its CA).
func TestRBACViewInformer(t *testing.T) {
	url, ns := env(t, "APISERVER_URL"), env(t, "RBAC_NAMESPACE")
	withToken := func(tok string) *kubernetes.Clientset {
		c := config(url, nil)
		c.BearerToken = tok
		c.TLSClientConfig.CAFile = env(t, "RBAC_CA")
		cs, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	admin, user := withToken(env(t, "RBAC_ADMIN_TOKEN")), withToken(env(t, "RBAC_TOKEN"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("cg-rbac-%d-", os.Getpid())
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm(prefix+"before", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin create: %v", err)
	}

	var mu sync.Mutex
	seen := map[string]bool{}
	f := informers.NewSharedInformerFactoryWithOptions(user, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o interface{}) {
		mu.Lock()
		seen[o.(*corev1.ConfigMap).Name] = true
		mu.Unlock()
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	t.Log("informer synced")
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, cm(prefix+"after", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin create: %v", err)
	}
	eventually(t, 10*time.Second, "the informer sees both ConfigMaps", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return seen[prefix+"before"] && seen[prefix+"after"], fmt.Sprint(seen)
	})

	_, err := user.CoreV1().ConfigMaps(ns).Create(ctx, cm(prefix+"mine", nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `cannot create resource "configmaps"`) {
		t.Fatalf("create as a view user: want 403 Forbidden, got %v", err)
	}
	_, err = user.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "at the cluster scope") {
		t.Fatalf("cluster-wide list as a view user: want 403 Forbidden, got %v", err)
	}
	_, err = user.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("secrets as a view user: want 403 Forbidden, got %v", err)
	}
}
