package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// newRESTClient is a client for agones.dev/v1 that speaks JSON. The backend
// reads and writes GameServers as bytes through it (see gameServer); the
// negotiated serializer only decodes the API server's Status errors.
func newRESTClient(cfg *rest.Config) (*rest.RESTClient, error) {
	rc := rest.CopyConfig(cfg)
	gv := GameServerResource.GroupVersion()
	rc.GroupVersion = &gv
	rc.APIPath = "/apis"
	rc.ContentType = runtime.ContentTypeJSON
	rc.AcceptContentTypes = runtime.ContentTypeJSON
	rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(rc)
}

// listWatch lists and watches GameServers in namespace ("" for all), decoding
// them with decodeGameServer. Options pass through unchanged, so the
// reflector's paging, bookmarks and streaming lists (sendInitialEvents)
// work as with client-go's own clients.
func listWatch(c rest.Interface, namespace string) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			res := c.Get().Namespace(namespace).Resource(GameServerResource.Resource).
				VersionedParams(&opts, metav1.ParameterCodec).Do(ctx)
			// Error, not Raw's error: it decodes the API server's Status,
			// whose message says who may not do what.
			if err := res.Error(); err != nil {
				return nil, err
			}
			raw, _ := res.Raw()
			return decodeGameServerList(raw)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			body, err := c.Get().Namespace(namespace).Resource(GameServerResource.Resource).
				VersionedParams(&opts, metav1.ParameterCodec).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return watch.NewStreamWatcher(newWatchDecoder(body),
				apierrors.NewClientErrorReporter(http.StatusInternalServerError, "GET", "ClientWatchDecoding")), nil
		},
	}
}

// maxWatchEvent bounds one watch event, so a broken stream cannot grow the
// buffer without end. etcd's default request limit is 1.5 MiB; an object
// many times larger than that cannot exist.
const maxWatchEvent = 64 << 20

// watchDecoder reads a JSON watch stream: one {"type", "object"} value per
// event. It frames events itself (jsonscan.go) and decodes each object
// once, straight into a gameServer.
type watchDecoder struct {
	body       io.ReadCloser
	buf        []byte
	start, end int // unread bytes are buf[start:end]
}

func newWatchDecoder(body io.ReadCloser) *watchDecoder {
	return &watchDecoder{body: body, buf: make([]byte, 64<<10)}
}

// next reads the next event's type and object. The object's bytes are
// valid until the following call.
func (d *watchDecoder) next() (watch.EventType, []byte, error) {
	for {
		var typ watch.EventType
		var obj []byte
		end, err := scanObject(d.buf[d.start:d.end], func(key string, v []byte) error {
			switch key {
			case "type":
				s, err := unquote(v)
				typ = watch.EventType(s)
				return err
			case "object":
				obj = v
			}
			return nil
		})
		if err == nil {
			d.start += end
			return typ, obj, nil
		}
		if err != errIncomplete {
			return "", nil, fmt.Errorf("watch stream: %w", err)
		}
		if err := d.fill(); err != nil {
			return "", nil, err
		}
	}
}

// fill reads more of the stream, first moving the unread bytes to the front
// and growing the buffer when a single event fills it.
func (d *watchDecoder) fill() error {
	if d.start > 0 {
		d.end = copy(d.buf, d.buf[d.start:d.end])
		d.start = 0
	}
	if d.end == len(d.buf) {
		if len(d.buf) >= maxWatchEvent {
			return fmt.Errorf("watch stream: an event larger than %d bytes", maxWatchEvent)
		}
		d.buf = append(d.buf, make([]byte, len(d.buf))...)
	}
	n, err := d.body.Read(d.buf[d.end:])
	d.end += n
	if n > 0 {
		return nil
	}
	if err == io.EOF && skipSpace(d.buf[:d.end], d.start) < d.end {
		return io.ErrUnexpectedEOF // the stream ended inside an event
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Decode implements watch.Decoder.
func (d *watchDecoder) Decode() (watch.EventType, runtime.Object, error) {
	typ, obj, err := d.next()
	if err != nil {
		return "", nil, err
	}
	switch typ {
	case watch.Error:
		st := &metav1.Status{}
		if err := json.Unmarshal(obj, st); err != nil {
			return "", nil, fmt.Errorf("decoding a watch error: %w", err)
		}
		return typ, st, nil
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		// The object keeps a copy of what it needs; the buffer is reused.
		g, err := decodeGameServer(obj)
		if err != nil {
			return "", nil, err
		}
		return typ, g, nil
	default:
		return "", nil, fmt.Errorf("unknown watch event type %q", typ)
	}
}

// Close implements watch.Decoder.
func (d *watchDecoder) Close() { d.body.Close() }
