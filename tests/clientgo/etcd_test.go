package clientgo

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
)

func nilSelector() fields.Selector { return fields.Everything() }

// compactEtcd compacts etcd at rev through its JSON gRPC gateway (no etcd client dependency).
func compactEtcd(t *testing.T, etcdURL, rev string) {
	t.Helper()
	body := fmt.Sprintf(`{"revision":%q,"physical":true}`, rev)
	r, err := http.Post(etcdURL+"/v3/kv/compaction", "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("compaction: %d %s", r.StatusCode, b)
	}
}
