// k8s-strict decodes every object of a multi-document YAML stream (what `helm template` prints)
// strictly against the Kubernetes API types (client-go's scheme), KEDA's CRD types
// (keda.sh/v1alpha1), the Prometheus Operator's (monitoring.coreos.com/v1) and KubeRay's
// (ray.io/v1: RayJob, RayCluster): an unknown field, a duplicate field, a wrong type or an unknown
// kind is an error. It prints one line per object and exits 1 if any object fails.
//
//	helm template deploy/helm/streamer | k8s-strict
//	k8s-strict < deploy/engines/ray-job.yaml
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

func main() {
	for name, add := range map[string]func(*runtime.Scheme) error{
		"KEDA": kedav1alpha1.AddToScheme, "the Prometheus Operator": monitoringv1.AddToScheme,
		"KubeRay": rayv1.AddToScheme} {
		if err := add(scheme.Scheme); err != nil {
			fmt.Fprintf(os.Stderr, "registering %s's types: %v\n", name, err)
			os.Exit(2)
		}
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	reader := utilyaml.NewYAMLReader(bufio.NewReader(os.Stdin))
	failed, objects := 0, 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "reading the YAML stream:", err)
			os.Exit(2)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // an empty document (a template that rendered nothing)
		}
		objects++
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil { // strict: unknown or duplicate fields; or a wrong type, an unknown kind
			failed++
			fmt.Printf("FAIL %v: %v\n", gvk, err)
			continue
		}
		fmt.Printf("ok   %s/%s %s\n", gvk.GroupVersion().String(), gvk.Kind, name(obj))
	}
	if objects == 0 {
		fmt.Fprintln(os.Stderr, "no objects on stdin")
		os.Exit(2)
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func name(obj runtime.Object) string {
	if m, ok := obj.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}
