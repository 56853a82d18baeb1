package clientgo

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestProtobufWrites: client-go's typed clientsets send built-in objects (and the DeleteOptions of
// deletes) as application/vnd.kubernetes.protobuf by default. Every write below goes out as
// protobuf; what the server stores must read back equal to what was sent.
func TestProtobufWrites(t *testing.T) {
	url := env(t, "APISERVER_URL")
	c := config(url, nil)
	var mu sync.Mutex
	var ctypes []string
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodGet {
				mu.Lock()
				ctypes = append(ctypes, r.Method+" "+r.Header.Get("Content-Type"))
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := newNamespace(t, cs)

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "pb-cm", Labels: map[string]string{"b": "2", "a": "1"},
			Annotations: map[string]string{"note": "<&> ünïcode"}},
		Data:       map[string]string{"k": "v", "empty": ""},
		BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}},
		Immutable:  ptr.To(false),
	}
	gotCM, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("protobuf create ConfigMap: %v", err)
	}
	if !equality.Semantic.DeepEqual(gotCM.Data, cm.Data) || !equality.Semantic.DeepEqual(gotCM.BinaryData, cm.BinaryData) ||
		!equality.Semantic.DeepEqual(gotCM.Labels, cm.Labels) || *gotCM.Immutable {
		t.Fatalf("ConfigMap read back differs: %+v", gotCM)
	}
	gotCM.Data["k"] = "v2"
	upd, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, gotCM, metav1.UpdateOptions{})
	if err != nil || upd.Data["k"] != "v2" || upd.ResourceVersion == gotCM.ResourceVersion {
		t.Fatalf("protobuf update: %v %+v", err, upd)
	}
	// A stale resourceVersion in a protobuf body is a conflict, as with JSON.
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, gotCM, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale protobuf update: want 409, got %v", err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pb-pod"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"),
						corev1.ResourceMemory: resource.MustParse("64Mi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 5},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
				Env: []corev1.EnvVar{{Name: "E", Value: "1"}},
			}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists,
				TolerationSeconds: ptr.To[int64](0)}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	gotPod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("protobuf create Pod: %v", err)
	}
	// What kube-apiserver stores: the body with SetDefaults_Pod/Container/Probe and the DefaultTolerationSeconds
	// admission plugin applied (machinery/defaults.py; tests/test_http_subresources.py checks them against kube).
	want := pod.Spec.DeepCopy()
	wc := &want.Containers[0]
	wc.TerminationMessagePath, wc.TerminationMessagePolicy = "/dev/termination-log", corev1.TerminationMessageReadFile
	wc.ImagePullPolicy = corev1.PullIfNotPresent
	for _, pr := range []*corev1.Probe{wc.ReadinessProbe, wc.LivenessProbe} {
		pr.TimeoutSeconds, pr.SuccessThreshold, pr.FailureThreshold = 1, 1, 3
		if pr.PeriodSeconds == 0 {
			pr.PeriodSeconds = 10
		}
	}
	wc.ReadinessProbe.HTTPGet.Scheme = corev1.URISchemeHTTP
	for _, key := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
		want.Tolerations = append(want.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
	}
	if !equality.Semantic.DeepEqual(gotPod.Spec.Containers, want.Containers) ||
		!equality.Semantic.DeepEqual(gotPod.Spec.Volumes, want.Volumes) ||
		!equality.Semantic.DeepEqual(gotPod.Spec.Tolerations, want.Tolerations) ||
		*gotPod.Spec.TerminationGracePeriodSeconds != 0 || gotPod.Spec.SchedulerName != "default-scheduler" {
		t.Fatalf("Pod read back differs:\n got %+v\nwant %+v", gotPod.Spec, want)
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pb-svc"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "x"},
		Ports:    []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("http")}}}}
	gotSvc, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil || gotSvc.Spec.Ports[0].TargetPort != intstr.FromString("http") || gotSvc.Spec.Ports[0].Port != 80 {
		t.Fatalf("protobuf create Service: %v %+v", err, gotSvc)
	}

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pb-secret"}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("s3cr3t\x00\xff")}}
	gotSec, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
	if err != nil || string(gotSec.Data["password"]) != "s3cr3t\x00\xff" || gotSec.Type != corev1.SecretTypeOpaque {
		t.Fatalf("protobuf create Secret: %v %+v", err, gotSec)
	}

	renew := metav1.NewMicroTime(time.Date(2026, 11, 30, 6, 0, 0, 123456000, time.UTC))
	lease := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "pb-lease"}, Spec: coordv1.LeaseSpec{
		HolderIdentity: ptr.To("node-1"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &renew}}
	gotLease, err := cs.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil || !gotLease.Spec.RenewTime.Equal(&renew) || *gotLease.Spec.LeaseDurationSeconds != 40 {
		t.Fatalf("protobuf create Lease: %v %+v", err, gotLease)
	}

	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pb-role"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}}
	gotRole, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{})
	if err != nil || !equality.Semantic.DeepEqual(gotRole.Rules, role.Rules) {
		t.Fatalf("protobuf create Role: %v %+v", err, gotRole)
	}

	// DeleteOptions travel as protobuf too: a wrong UID precondition is a conflict, the right one deletes.
	wrong := types.UID("00000000-0000-0000-0000-000000000000")
	err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, "pb-cm", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrong}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("delete with a wrong UID precondition: want 409, got %v", err)
	}
	err = cs.CoreV1().ConfigMaps(ns).Delete(ctx, "pb-cm", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &gotCM.UID}})
	if err != nil {
		t.Fatalf("delete with the right UID precondition: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "pb-cm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted ConfigMap still there: %v", err)
	}
	if err := cs.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("protobuf deletecollection: %v", err)
	}
	if l, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("secrets left after deletecollection: %v %v", err, l)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, ct := range ctypes {
		if !strings.HasSuffix(ct, " application/vnd.kubernetes.protobuf") {
			t.Fatalf("a typed-client write was not protobuf: %q (all: %v)", ct, ctypes)
		}
	}
	if len(ctypes) < 10 {
		t.Fatalf("expected every write to be recorded, got %v", fmt.Sprint(ctypes))
	}
}
