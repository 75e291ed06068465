// podresources-client asks a PodResources v1 socket (the kubelet's, or draco's agent's)
// what it knows, with the kubelet's own client package, k8s.io/kubelet's
// pkg/apis/podresources/v1: the one dcgm-exporter builds its pod mapping with. It connects
// the way dcgm-exporter does (grpc passthrough resolver, unix dialer) and prints one JSON
// object:
//
//	{"list": <List>, "allocatable": <GetAllocatableResources>, "get": <Get>,
//	 "gpus": {"<device id>": {"pod": ..., "namespace": ..., "container": ...}}}
//
// The messages are in protojson's form (camelCase field names). "gpus" is the mapping
// dcgm-exporter labels GPU metrics with (its PodMapper without virtual GPUs): the device
// ids of `devices` entries whose resource name is nvidia.com/gpu or starts with
// nvidia.com/mig-, each to the pod, namespace and container that has it. "get" is present
// when -pod namespace/name is given.
//
// Usage: podresources-client -socket /path/to/podresources.sock [-pod ns/name]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type owner struct {
	Pod       string `json:"pod"`
	Namespace string `json:"namespace"`
	Container string `json:"container"`
}

func gpus(list *podresources.ListPodResourcesResponse) map[string]owner {
	out := map[string]owner{}
	for _, pod := range list.GetPodResources() {
		for _, container := range pod.GetContainers() {
			for _, devices := range container.GetDevices() {
				name := devices.GetResourceName()
				if name != "nvidia.com/gpu" && !strings.HasPrefix(name, "nvidia.com/mig-") {
					continue
				}
				for _, id := range devices.GetDeviceIds() {
					out[id] = owner{Pod: pod.GetName(), Namespace: pod.GetNamespace(), Container: container.GetName()}
				}
			}
		}
	}
	return out
}

func raw(message proto.Message) json.RawMessage {
	text, err := protojson.Marshal(message)
	if err != nil {
		fail("encode: %v", err)
	}
	return text
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "podresources-client: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	socket := flag.String("socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the PodResources socket")
	pod := flag.String("pod", "", "also Get this pod (namespace/name)")
	flag.Parse()

	resolver.SetDefaultScheme("passthrough")
	conn, err := grpc.NewClient(*socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
	)
	if err != nil {
		fail("connect %s: %v", *socket, err)
	}
	defer conn.Close()
	client := podresources.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	list, err := client.List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		fail("List: %v", err)
	}
	allocatable, err := client.GetAllocatableResources(ctx, &podresources.AllocatableResourcesRequest{})
	if err != nil {
		fail("GetAllocatableResources: %v", err)
	}
	out := map[string]any{"list": raw(list), "allocatable": raw(allocatable), "gpus": gpus(list)}
	if *pod != "" {
		namespace, name, ok := strings.Cut(*pod, "/")
		if !ok {
			fail("-pod wants namespace/name, not %q", *pod)
		}
		got, err := client.Get(ctx, &podresources.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
		if err != nil {
			fail("Get %s: %v", *pod, err)
		}
		out["get"] = raw(got)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("write: %v", err)
	}
}
