package allocator

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// REST paths. AllocatePath is Agones'; the others carry Quartermaster's own
// List and Release with the same JSON conventions.
const (
	AllocatePath = "/gameserverallocation"
	ListPath     = "/v1/allocations:list"
	ReleasePath  = "/v1/allocations:release"
	// CreatePath and DestroyPath carry Create and Destroy (create.go).
	CreatePath  = "/v1/gameservers:create"
	DestroyPath = "/v1/gameservers:destroy"
)

// NewRESTHandler returns the REST API as an http.Handler, for serving it
// behind a listener of one's own. Callers are identified by their
// connection's TLS state through t.
func NewRESTHandler(svc *Service, t *mtls.Server, maxBytes int, log *slog.Logger) http.Handler {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &restHandler{svc: svc, tls: t, maxBytes: int64(maxBytes), log: log}
}

// restHandler serves the REST API: proto3 JSON over HTTP, with the same
// service, identity and codes as gRPC.
type restHandler struct {
	svc      *Service
	tls      *mtls.Server
	maxBytes int64
	log      *slog.Logger
}

type tlsStateKey struct{}

// withConnTLS records a connection's TLS state in ctx for handlers that
// serve connections net/http does not know to be TLS (those handed over
// by the shared-port listener after its own handshake).
func withConnTLS(ctx context.Context, cs tls.ConnectionState) context.Context {
	return context.WithValue(ctx, tlsStateKey{}, &cs)
}

func (h *restHandler) identity(r *http.Request) (string, error) {
	if h.tls.Mode() != mtls.ModeMTLS || r.TLS != nil {
		return h.tls.IdentifyRequest(r)
	}
	if cs, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
		return mtls.IdentityFromConnectionState(*cs)
	}
	return "", mtls.ErrNoTLS
}

func (h *restHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.Error("panic in REST handler", "path", r.URL.Path, "panic", fmt.Sprint(p))
			writeError(w, status.Error(codes.Internal, "internal error"))
		}
	}()
	switch r.URL.Path {
	case AllocatePath, ListPath, ReleasePath, CreatePath, DestroyPath:
	default:
		writeError(w, status.Errorf(codes.NotFound, "no such path %q: POST %s to allocate", r.URL.Path, AllocatePath))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, "method "+r.Method+" not allowed: use POST")
		return
	}
	id, err := h.identity(r)
	if err != nil {
		writeError(w, status.Errorf(codes.Unauthenticated, "no caller identity: %v", err))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeStatus(w, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
				"request body is larger than the limit of "+strconv.FormatInt(h.maxBytes, 10)+" bytes")
			return
		}
		writeError(w, status.Errorf(codes.InvalidArgument, "reading the request body: %v", err))
		return
	}
	ctx := r.Context()
	var resp proto.Message
	switch r.URL.Path {
	case AllocatePath:
		in, err := wire.DecodeJSONRequest(body)
		if err != nil {
			// Counted and logged like any other failed allocation.
			writeError(w, h.svc.refuse(ctx, id, status.Error(codes.InvalidArgument, err.Error())))
			return
		}
		var key string
		if v := r.Header[keyHeaderName]; len(v) > 0 {
			key = v[0]
		}
		resp, err = h.svc.serve(ctx, id, request{sent: in, headerKey: key})
		if err != nil {
			writeError(w, err)
			return
		}
	case ListPath:
		in := &qmv1.ListRequest{}
		if err := decodeBody(body, in); err != nil {
			writeError(w, err)
			return
		}
		if resp, err = h.svc.List(ctx, id, in); err != nil {
			writeError(w, err)
			return
		}
	case ReleasePath:
		in := &qmv1.ReleaseRequest{}
		if err := decodeBody(body, in); err != nil {
			writeError(w, err)
			return
		}
		if resp, err = h.svc.Release(ctx, id, in); err != nil {
			writeError(w, err)
			return
		}
	case CreatePath:
		in := &qmv1.CreateRequest{}
		if err := decodeBody(body, in); err != nil {
			writeError(w, err)
			return
		}
		if resp, err = h.svc.Create(ctx, id, in); err != nil {
			writeError(w, err)
			return
		}
	case DestroyPath:
		in := &qmv1.DestroyRequest{}
		if err := decodeBody(body, in); err != nil {
			writeError(w, err)
			return
		}
		if resp, err = h.svc.Destroy(ctx, id, in); err != nil {
			writeError(w, err)
			return
		}
	}
	out, err := wire.MarshalJSON(resp)
	if err != nil {
		writeError(w, status.Error(codes.Internal, err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// keyHeaderName is AllocationKeyHeader as net/http keeps header names.
var keyHeaderName = http.CanonicalHeaderKey(AllocationKeyHeader)

func decodeBody(body []byte, m proto.Message) error {
	if len(body) == 0 {
		return nil
	}
	if err := wire.UnmarshalJSON(body, m); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

// writeError answers with err's status in grpc-gateway's JSON error form
// ({"code":N,"message":"...","details":[]}), which Agones' REST clients
// already parse.
func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeStatus(w, HTTPStatus(st.Code()), st.Code(), st.Message())
}

func writeStatus(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	b, _ := json.Marshal(struct {
		Code    int      `json:"code"`
		Message string   `json:"message"`
		Details []string `json:"details"`
	}{int(code), msg, []string{}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}
