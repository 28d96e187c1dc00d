package wire

import (
	"time"

	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TemplateLabel marks a game server made on demand by the AllocationAdmin
// API's Create: its value names the template (allocator.TemplateLabel).
const TemplateLabel = "quartermaster.dev/template"

// AllocationKeyAnnotation carries the idempotency key an allocation was
// made with, on its server (allocator.AllocationKeyAnnotation).
const AllocationKeyAnnotation = "quartermaster.dev/allocation-key"

// AllocationRecord describes an allocation held by owner for the
// AllocationAdmin API's List and Release answers. allocatedAt is when the
// allocation was made; the zero time leaves it unset rather than claiming
// 1970. A nil gs gives a record with only the owner and time.
func AllocationRecord(gs *core.GameServer, owner string, allocatedAt time.Time) *qmv1.Allocation {
	out := &qmv1.Allocation{Owner: owner}
	if !allocatedAt.IsZero() {
		out.AllocatedAt = timestamppb.New(allocatedAt)
	}
	if gs == nil {
		return out
	}
	out.Namespace = gs.Namespace
	out.GameServerName = gs.Name
	out.Address = gs.Address
	out.NodeName = gs.NodeName
	out.Template = gs.Labels[TemplateLabel]
	out.AllocationKey = gs.Annotations[AllocationKeyAnnotation]
	for _, a := range gs.Addresses {
		out.Addresses = append(out.Addresses, &qmv1.Address{Type: a.Type, Address: a.Address})
	}
	for _, p := range gs.Ports {
		out.Ports = append(out.Ports, &qmv1.Port{Name: p.Name, Port: p.Port})
	}
	return out
}

// AllocatedAt reads when a server was last allocated from the annotation
// the core sets on every allocation, for records rebuilt from a server's
// state (after a restart, or from another replica's allocation). ok is false
// when the annotation is missing or unreadable.
func AllocatedAt(gs *core.GameServer) (t time.Time, ok bool) {
	if gs == nil {
		return time.Time{}, false
	}
	if gs.AllocatedAt != 0 {
		return time.Unix(0, gs.AllocatedAt).UTC(), true
	}
	v, found := gs.Annotations[core.LastAllocatedAnnotation]
	if !found {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// ReleaseKey reads which game server a Release request names. The
// namespace defaults as an allocation's does. An empty name is an
// InvalidArgument error naming the field.
func ReleaseKey(in *qmv1.ReleaseRequest) (core.Key, error) {
	k := core.Key{Namespace: in.GetNamespace(), Name: in.GetGameServerName()}
	if k.Namespace == "" {
		k.Namespace = core.DefaultNamespace
	}
	if k.Name == "" {
		return core.Key{}, &core.InvalidRequestError{Errors: []core.FieldError{{
			Field: "gameServerName", Reason: "must not be empty",
		}}}
	}
	return k, nil
}

// DestroyKey reads which game server a Destroy request names, as ReleaseKey.
func DestroyKey(in *qmv1.DestroyRequest) (core.Key, error) {
	return ReleaseKey(&qmv1.ReleaseRequest{Namespace: in.GetNamespace(), GameServerName: in.GetGameServerName()})
}
