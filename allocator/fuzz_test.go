package allocator_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
)

// FuzzRESTAllocate sends arbitrary bodies through the REST handler, the
// whole path from bytes to answer: it must never panic or hang, and must
// answer 200 with a response or a known error status with a JSON error.
func FuzzRESTAllocate(f *testing.F) {
	for _, r := range goldenRequests {
		f.Add([]byte(r.body))
	}
	f.Add([]byte(`{"gameServerSelectors":[{"matchExpressions":[{"key":"mode","operator":"NotIn","values":["x"]}]}]}`))
	f.Add([]byte(`{"lists":{"players":{"capacity":"100000"}}}`))
	f.Add([]byte(`{"priorities":[{"type":"List","key":"players","order":"Descending"}],"scheduling":"Distributed"}`))
	f.Add([]byte(`{"counters":{"rooms":{"action":"Decrement","amount":"9223372036854775807","capacity":"-5"}}}`))

	cfg, err := memory.ParseConfig([]byte(testFleets))
	if err != nil {
		f.Fatal(err)
	}
	backend := memory.New(cfg, memory.Options{Seed: 1})
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{Mode: mtls.ModeInsecureDisableTLS})
	if err != nil {
		f.Fatal(err)
	}
	svc, err := allocator.NewService(allocator.Options{Backend: backend, Timeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	h := allocator.NewRESTHandler(svc, tlsSrv, 4096, nil)
	ok := map[int]bool{200: true, 400: true, 403: true, 413: true, 429: true, 504: true}

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, allocator.AllocatePath, bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !ok[w.Code] {
			t.Fatalf("HTTP %d for %q: %s", w.Code, body, w.Body)
		}
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("answer is not JSON (%v): %s", err, w.Body)
		}
		if w.Code != 200 {
			if _, has := out["message"]; !has {
				t.Fatalf("error answer without a message: %s", w.Body)
			}
		}
		// Keep the fleet from emptying so later inputs still allocate.
		for _, gs := range backend.Allocated() {
			_, _ = backend.Release(req.Context(), gs.Key(), "")
		}
		backend.Step()
	})
}
