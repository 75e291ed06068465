// Command upstream-allocator runs upstream's structured allocator
// (k8s.io/dynamic-resource-allocation/structured) on allocation problems read as JSON lines
// from stdin and prints one JSON line per problem with the outcome. draco's differential
// test (tests/differential) compares draco's allocator with it; hack/upstream-allocator.sh
// builds it from the Go module proxy.
//
// Input, one object per line:
//
//	{"id": "...", "features": {"listTypeAttributes": true, ...},
//	 "node": {"name": "n1", "labels": {...}},
//	 "classes": [DeviceClass...], "slices": [ResourceSlice...],
//	 "allocated": [ResourceClaim with status.allocation...], "claims": [ResourceClaim...]}
//
// Objects are the stored (defaulted) JSON of resource.k8s.io/v1. Features default to the
// ones a 1.37 scheduler enables by default; "features" switches single ones on or off.
// Allocated claims become the allocated state the way the scheduler builds it (results
// with admin access are skipped, shared results count by share id and consumed capacity).
//
// Output, one object per line:
//
//	{"id": "...", "outcome": "allocated" | "unfit" | "node-error" | "error",
//	 "error": "...", "results": [AllocationResult...]}
//
// "node-error" is an error that affects only this node (ErrFailedAllocationOnNode, for
// example invalid pools); "error" is fatal for the claims.
//
// With "op": "cel" a line asks instead how upstream's CEL environment judges selectors on
// devices:
//
//	{"id": "...", "op": "cel", "features": {...}, "expressions": ["..."],
//	 "devices": [{"driver": "...", "device": Device}]}
//
// and the answer holds one row per expression, one entry per device:
//
//	{"id": "...", "cel": [[{"match": true} | {"error": "..."} | {"compileError": "..."}]]}
//
// With "repeat": N (N > 0) an allocation problem is solved N times, each from a fresh
// allocator (as the scheduler builds one per scheduling cycle) and one CEL cache kept
// across the solves (as the scheduler keeps its compiled expressions), and the answer adds
// "nanos": the wall time of each solve, for benchmarks/allocator_versus_upstream.py.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

type nodeInput struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

type featureInput struct {
	AdminAccess             *bool `json:"adminAccess"`
	PrioritizedList         *bool `json:"prioritizedList"`
	PartitionableDevices    *bool `json:"partitionableDevices"`
	DeviceTaints            *bool `json:"deviceTaints"`
	DeviceBindingAndStatus  *bool `json:"deviceBindingAndStatus"`
	ConsumableCapacity      *bool `json:"consumableCapacity"`
	FractionalCapacityRange *bool `json:"fractionalCapacityRange"`
	ListTypeAttributes      *bool `json:"listTypeAttributes"`
}

type celDevice struct {
	Driver string             `json:"driver"`
	Device resourceapi.Device `json:"device"`
}

type celVerdict struct {
	Match        bool   `json:"match"`
	Error        string `json:"error,omitempty"`
	CompileError string `json:"compileError,omitempty"`
}

type problem struct {
	ID          string                       `json:"id"`
	Op          string                       `json:"op"`
	Expressions []string                     `json:"expressions"`
	Devices     []celDevice                  `json:"devices"`
	Features    featureInput                 `json:"features"`
	Node        nodeInput                    `json:"node"`
	Classes     []*resourceapi.DeviceClass   `json:"classes"`
	Slices      []*resourceapi.ResourceSlice `json:"slices"`
	Allocated   []*resourceapi.ResourceClaim `json:"allocated"`
	Claims      []*resourceapi.ResourceClaim `json:"claims"`
	Repeat      int                          `json:"repeat"`
}

type answer struct {
	ID      string                         `json:"id"`
	Outcome string                         `json:"outcome"`
	Error   string                         `json:"error,omitempty"`
	Results []resourceapi.AllocationResult `json:"results,omitempty"`
	CEL     [][]celVerdict                 `json:"cel,omitempty"`
	Nanos   []int64                        `json:"nanos,omitempty"`
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	classes := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, class := range l {
		classes = append(classes, class)
	}
	return classes, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	class, ok := l[name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return class, nil
}

// defaultFeatures are the allocator features of a kube-scheduler 1.37 with its default
// feature gates (DRAFractionalCapacityRange is off: its default needs
// --min-compatibility-version 1.37; DRAListTypeAttributes and the other alphas are off).
func defaultFeatures() structured.Features {
	return structured.Features{
		AdminAccess:            true,
		PrioritizedList:        true,
		PartitionableDevices:   true,
		DeviceTaints:           true,
		DeviceBindingAndStatus: true,
		ConsumableCapacity:     true,
	}
}

func apply(target *bool, value *bool) {
	if value != nil {
		*target = *value
	}
}

func (p *problem) features() structured.Features {
	f := defaultFeatures()
	apply(&f.AdminAccess, p.Features.AdminAccess)
	apply(&f.PrioritizedList, p.Features.PrioritizedList)
	apply(&f.PartitionableDevices, p.Features.PartitionableDevices)
	apply(&f.DeviceTaints, p.Features.DeviceTaints)
	apply(&f.DeviceBindingAndStatus, p.Features.DeviceBindingAndStatus)
	apply(&f.ConsumableCapacity, p.Features.ConsumableCapacity)
	apply(&f.FractionalCapacityRange, p.Features.FractionalCapacityRange)
	apply(&f.ListTypeAttributes, p.Features.ListTypeAttributes)
	return f
}

// allocatedState mirrors the scheduler's GatherAllocatedState with consumable capacity on.
func allocatedState(claims []*resourceapi.ResourceClaim) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

func celCache(features structured.Features) *cel.Cache {
	return cel.NewCache(100, cel.Features{
		EnableConsumableCapacity: features.ConsumableCapacity,
		EnableListTypeAttributes: features.ListTypeAttributes,
	})
}

// judge evaluates every expression on every device, as the allocator's selectorsMatch does.
func judge(p *problem) (out answer) {
	out.ID = p.ID
	defer func() {
		if r := recover(); r != nil {
			out = answer{ID: p.ID, Outcome: "error", Error: fmt.Sprintf("panic: %v", r)}
		}
	}()
	cache := celCache(p.features())
	ctx := context.Background()
	out.CEL = make([][]celVerdict, len(p.Expressions))
	for i, expression := range p.Expressions {
		row := make([]celVerdict, len(p.Devices))
		compiled := cache.GetOrCompile(expression)
		for j, device := range p.Devices {
			if compiled.Error != nil {
				row[j] = celVerdict{CompileError: compiled.Error.Error()}
				continue
			}
			matches, _, err := compiled.DeviceMatches(ctx, cel.Device{
				Driver:                   device.Driver,
				AllowMultipleAllocations: device.Device.AllowMultipleAllocations,
				Attributes:               device.Device.Attributes,
				Capacity:                 device.Device.Capacity,
			})
			if err != nil {
				row[j] = celVerdict{Error: err.Error()}
				continue
			}
			row[j] = celVerdict{Match: matches}
		}
		out.CEL[i] = row
	}
	return out
}

func solve(p *problem) answer {
	return solveWith(p, celCache(p.features()))
}

func solveWith(p *problem, cache *cel.Cache) (out answer) {
	out.ID = p.ID
	defer func() {
		if r := recover(); r != nil {
			out = answer{ID: p.ID, Outcome: "error", Error: fmt.Sprintf("panic: %v", r)}
		}
	}()
	features := p.features()
	lister := classLister{}
	for _, class := range p.Classes {
		lister[class.Name] = class
	}
	// The scheduler's filter timeout (DRASchedulerFilterTimeout, on by default) is 10s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	allocator, err := structured.NewAllocator(ctx, features, allocatedState(p.Allocated), lister, p.Slices, cache)
	if err != nil {
		out.Outcome, out.Error = "error", err.Error()
		return out
	}
	node := &v1.Node{}
	node.Name = p.Node.Name
	node.Labels = p.Node.Labels
	results, err := allocator.Allocate(ctx, node, p.Claims)
	switch {
	case err != nil && errors.Is(err, structured.ErrFailedAllocationOnNode):
		out.Outcome, out.Error = "node-error", err.Error()
	case err != nil:
		out.Outcome, out.Error = "error", err.Error()
	case results == nil:
		out.Outcome = "unfit"
	default:
		out.Outcome, out.Results = "allocated", results
	}
	return out
}

// bench solves p.Repeat times and reports each solve's wall time beside the last outcome.
// The claims are copied before each solve: the allocator must see the same input each time.
func bench(p *problem) answer {
	nanos := make([]int64, 0, p.Repeat)
	var out answer
	cache := celCache(p.features())
	for i := 0; i < p.Repeat; i++ {
		claims := make([]*resourceapi.ResourceClaim, len(p.Claims))
		for j, claim := range p.Claims {
			claims[j] = claim.DeepCopy()
		}
		q := *p
		q.Claims = claims
		started := time.Now()
		out = solveWith(&q, cache)
		nanos = append(nanos, time.Since(started).Nanoseconds())
	}
	out.Nanos = nanos
	return out
}

func main() {
	reader := bufio.NewReaderSize(os.Stdin, 1<<20)
	writer := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(writer)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			var p problem
			var out answer
			if decodeErr := json.Unmarshal(line, &p); decodeErr != nil {
				out = answer{ID: p.ID, Outcome: "error", Error: "decode input: " + decodeErr.Error()}
			} else if p.Op == "cel" {
				out = judge(&p)
			} else if p.Repeat > 0 {
				out = bench(&p)
			} else {
				out = solve(&p)
			}
			if encodeErr := encoder.Encode(out); encodeErr != nil {
				fmt.Fprintln(os.Stderr, "encode output:", encodeErr)
				os.Exit(2)
			}
			// One answer per line, as soon as it is known: the caller may stream.
			if flushErr := writer.Flush(); flushErr != nil {
				os.Exit(2)
			}
		}
		if err != nil {
			break
		}
	}
}
