// Command protoref is the reference for machinery/protobuf.py: it fills objects of
// every kind the apiserver decodes from protobuf with random values (randfill),
// encodes each with apimachinery's protobuf serializer (the bytes client-go
// sends), decodes those bytes again as upstream's apiserver does, and prints one
// JSON line per object: {"key": apiVersion/kind, "pb": base64 bytes, "json":
// encoding/json of the decoded object}. The Python test decodes "pb" and must
// produce exactly "json".
//
// Usage: protoref SEED COUNT_PER_KIND
//
// protoref encode: reads JSON objects of those kinds from stdin, one a line, and
// prints the same kind of line for each (the bench's realistic objects:
// bench/protobuf_decode.py).
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/randfill"
)

// schemaFile: the kinds machinery/protobuf.py decodes (tools/k8sproto generates it): $PROTOREF_SCHEMA, else
// found from this source file's directory (the binary runs from a temporary directory; a -trimpath build,
// as tools/build_repo_go.py makes, has no directory to find, so the tests give the path).
func schemaFile() string {
	if p := os.Getenv("PROTOREF_SCHEMA"); p != "" {
		return p
	}
	_, here, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", "machinery", "k8s_proto_schema.json")
}

func main() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{k8sscheme.AddToScheme, apiextv1.AddToScheme,
		apiregv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Group: "meta.k8s.io", Version: "v1"})
	ser := protobuf.NewSerializer(scheme, scheme)
	if len(os.Args) > 1 && os.Args[1] == "encode" {
		encode(scheme, ser)
		return
	}
	seed, _ := strconv.ParseInt(os.Args[1], 10, 64)
	count, _ := strconv.Atoi(os.Args[2])

	// every kind of the committed schema, made by the scheme (DeleteOptions: meta.k8s.io/v1)
	raw, err := os.ReadFile(schemaFile())
	if err != nil {
		panic(err)
	}
	var committed struct{ Kinds map[string]string }
	if err := json.Unmarshal(raw, &committed); err != nil {
		panic(err)
	}
	kinds := map[string]func() runtime.Object{}
	for k := range committed.Kinds {
		i := strings.LastIndex(k, "/")
		gvk := schema.FromAPIVersionAndKind(k[:i], k[i+1:])
		kinds[k] = func() runtime.Object {
			obj, err := scheme.New(gvk)
			if err != nil {
				panic(err)
			}
			return obj
		}
	}
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	jsonDoc := func(c randfill.Continue) []byte {
		// encoding/json's string form: Go keeps raw JSON as written, the decoder re-encodes it.
		k, _ := json.Marshal(c.String(8))
		return []byte(fmt.Sprintf(`{"k":%s,"n":%d,"l":[true,null]}`, k, c.Intn(1000)))
	}
	f := randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 3).MaxDepth(12).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(1<<40), resource.DecimalSI)
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31() - 1<<30)
			} else {
				*v = intstr.FromString(c.String(10))
			}
		},
		func(r *runtime.RawExtension, c randfill.Continue) {
			if c.Bool() {
				r.Raw = jsonDoc(c)
			}
		},
		func(r *metav1.FieldsV1, c randfill.Continue) {
			*r = metav1.FieldsV1{Raw: jsonDoc(c)}
		},
		func(r *apiextv1.JSON, c randfill.Continue) {
			if c.Bool() {
				r.Raw = jsonDoc(c)
			}
		},
		func(t *metav1.Time, c randfill.Continue) {
			if c.Intn(4) > 0 {
				*t = metav1.Unix(c.Int63n(4_000_000_000), c.Int63n(1_000_000_000))
			}
		},
		func(t *metav1.MicroTime, c randfill.Continue) {
			if c.Intn(4) > 0 {
				*t = metav1.NewMicroTime(metav1.Unix(c.Int63n(4_000_000_000), c.Int63n(1_000_000_000)).Time)
			}
		},
	)

	out := json.NewEncoder(os.Stdout)
	for _, k := range keys {
		for i := 0; i < count; i++ {
			obj := kinds[k]()
			f.Fill(obj)
			gvks, _, err := scheme.ObjectKinds(obj)
			if err != nil {
				panic(err)
			}
			gvk := gvks[0]
			if k == "meta.k8s.io/v1/DeleteOptions" {
				gvk = schema.GroupVersionKind{Version: "v1", Kind: "DeleteOptions"}
			}
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			var pb bytes.Buffer
			if err := ser.Encode(obj, &pb); err != nil {
				panic(fmt.Sprintf("%s: %v", k, err))
			}
			into := kinds[k]()
			decoded, _, err := ser.Decode(pb.Bytes(), nil, into)
			if err != nil {
				panic(fmt.Sprintf("%s: decode: %v", k, err))
			}
			decoded.GetObjectKind().SetGroupVersionKind(gvk)
			js, err := json.Marshal(decoded)
			if err != nil {
				// e.g. a float NaN: not a JSON document, so not a case to compare.
				continue
			}
			if err := out.Encode(map[string]string{"key": k, "pb": base64.StdEncoding.EncodeToString(pb.Bytes()),
				"json": string(js)}); err != nil {
				panic(err)
			}
		}
	}
}

// encode: each stdin line a JSON object of a kind the scheme knows.
func encode(scheme *runtime.Scheme, ser *protobuf.Serializer) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var tm metav1.TypeMeta
		if err := json.Unmarshal(in.Bytes(), &tm); err != nil {
			panic(err)
		}
		gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
		obj, err := scheme.New(gvk)
		if err != nil {
			panic(err)
		}
		if err := json.Unmarshal(in.Bytes(), obj); err != nil {
			panic(err)
		}
		var pb bytes.Buffer
		if err := ser.Encode(obj, &pb); err != nil {
			panic(err)
		}
		into, _ := scheme.New(gvk)
		decoded, _, err := ser.Decode(pb.Bytes(), nil, into)
		if err != nil {
			panic(err)
		}
		decoded.GetObjectKind().SetGroupVersionKind(gvk)
		js, err := json.Marshal(decoded)
		if err != nil {
			panic(err)
		}
		if err := out.Encode(map[string]string{"key": tm.APIVersion + "/" + tm.Kind,
			"pb": base64.StdEncoding.EncodeToString(pb.Bytes()), "json": string(js)}); err != nil {
			panic(err)
		}
	}
	if err := in.Err(); err != nil {
		panic(err)
	}
}
