package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// readOnlyStore is a SQLite store whose disk turns read-only when the test says so:
// every write then fails as SQLite's does on a read-only disk.
type readOnlyStore struct {
	*storage.SQLite
	dir string
	ro  atomic.Bool
}

func (s *readOnlyStore) refused() error {
	return storage.Unwritable(s.dir, "", &os.PathError{Op: "write", Path: filepath.Join(s.dir, storage.DBFile+"-wal"), Err: syscall.EROFS})
}

func (s *readOnlyStore) CreateRun(ctx context.Context, r storage.Run) error {
	if s.ro.Load() {
		return s.refused()
	}
	return s.SQLite.CreateRun(ctx, r)
}

func (s *readOnlyStore) Append(ctx context.Context, id string, evs ...event.Event) ([]event.Event, error) {
	if s.ro.Load() {
		return nil, s.refused()
	}
	return s.SQLite.Append(ctx, id, evs...)
}

func (s *readOnlyStore) AppendAsync(ctx context.Context, id string, evs ...event.Event) func() ([]event.Event, error) {
	if s.ro.Load() {
		err := s.refused()
		return func() ([]event.Event, error) { return nil, err }
	}
	return s.SQLite.AppendAsync(ctx, id, evs...)
}

func (s *readOnlyStore) UpdateRun(ctx context.Context, id string, u storage.RunUpdate) error {
	if s.ro.Load() {
		return s.refused()
	}
	return s.SQLite.UpdateRun(ctx, id, u)
}

func (s *readOnlyStore) RecordRun(ctx context.Context, id string, rec storage.RunRecord) ([]event.Event, error) {
	if s.ro.Load() {
		return nil, s.refused()
	}
	return s.SQLite.RecordRun(ctx, id, rec)
}

func newReadOnlyStore(t *testing.T) *readOnlyStore {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &readOnlyStore{SQLite: st, dir: dir}
}

// errorBody is an OpenAI-shaped error.
type errorBody struct {
	Error struct {
		Message, Type, Code string
	} `json:"error"`
}

// checkRefusal checks the error a client gets for a turn luft could not record.
func checkRefusal(t *testing.T, what string, code int, body []byte, dir string) {
	t.Helper()
	var e errorBody
	if code != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Error.Code != codeUnrecorded || e.Error.Type != "server_error" {
		t.Fatalf("%s: HTTP %d %s, want a 503 OpenAI error with code %s", what, code, body, codeUnrecorded)
	}
	for _, want := range []string{"could not record this turn", dir, "read-only", "another --state-dir"} {
		if !strings.Contains(e.Error.Message, want) {
			t.Errorf("%s: the error does not say %q: %s", what, want, e.Error.Message)
		}
	}
}

// TestUnrecordedTurnRefused: on a state dir that cannot be written, a turn is refused
// before it goes upstream with a 503 that names the state dir, the problem and the fix,
// and the runtime's watcher (the daemon's status) is told; once the state dir can be
// written again, turns are answered and the watcher is told the problem is over.
func TestUnrecordedTurnRefused(t *testing.T) {
	st := newReadOnlyStore(t)
	var sent atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		sent.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer up.Close()
	svc := recordIn(t, st)
	var mu sync.Mutex
	var told []error
	svc.NotifyUnrecorded(func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() })
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Service: svc})
	turnOf := func(run string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, front+"/v1/chat/completions", strings.NewReader(hello2))
		req.Header.Set("x-luft-run-id", run)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAll(t, resp)
	}
	if resp, body := turnOf("r1"); resp.StatusCode != 200 {
		t.Fatalf("turn on a writable state dir: %d %s", resp.StatusCode, body)
	}

	st.ro.Store(true)
	before := sent.Load()
	resp, body := postChat(t, front, hello2)
	checkRefusal(t, "a new run's turn", resp.StatusCode, body, st.dir)
	resp, body = postChat(t, front, `{"model":"m","stream":true,"messages":[{"role":"user","content":"again"}]}`)
	checkRefusal(t, "a streamed turn", resp.StatusCode, body, st.dir)
	if n := sent.Load() - before; n != 0 {
		t.Errorf("%d turns luft could not record were sent upstream", n)
	}
	// A later turn of a run goes upstream while its start is recorded: its answer is
	// withheld.
	resp, body = turnOf("r1")
	checkRefusal(t, "a later turn of a run", resp.StatusCode, body, st.dir)
	mu.Lock()
	if len(told) == 0 || told[len(told)-1] == nil || !strings.Contains(told[len(told)-1].Error(), st.dir) {
		t.Errorf("the runtime's watcher was told %v, want the state dir's failure", told)
	}
	mu.Unlock()

	st.ro.Store(false)
	if resp, body := postChat(t, front, hello2); resp.StatusCode != 200 {
		t.Fatalf("turn once the state dir can be written again: %d %s", resp.StatusCode, body)
	}
	mu.Lock()
	if told[len(told)-1] != nil {
		t.Errorf("the watcher was not told the problem is over: %v", told)
	}
	mu.Unlock()
}

// TestUnrecordedEndWithheld: a turn whose end cannot be recorded (the state dir turned
// read-only while it was upstream) is not answered: the client gets the error in place
// of the answer, or in place of a stream's [DONE].
func TestUnrecordedEndWithheld(t *testing.T) {
	st := newReadOnlyStore(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		st.ro.Store(true)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer up.Close()
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Service: recordIn(t, st)})

	resp, body := postChat(t, front, hello2)
	checkRefusal(t, "a turn whose end was not recorded", resp.StatusCode, body, st.dir)
	if resp.Header.Get("x-luft-run") == "" {
		t.Error("the refusal does not say which run the turn joined")
	}

	st.ro.Store(false)
	resp, body = postChat(t, front, `{"model":"m","stream":true,"messages":[{"role":"user","content":"again"}]}`)
	if resp.StatusCode != 200 || strings.Contains(string(body), "[DONE]") || !strings.Contains(string(body), `"content":"ok"`) {
		t.Fatalf("a stream whose end was not recorded: HTTP %d %s, want its chunks without [DONE]", resp.StatusCode, body)
	}
	var e errorBody
	last := strings.TrimSpace(string(body))
	last = last[strings.LastIndex(last, "data: ")+len("data: "):]
	if err := json.Unmarshal([]byte(last), &e); err != nil || e.Error.Code != codeUnrecorded || !strings.Contains(e.Error.Message, st.dir) {
		t.Fatalf("the stream does not end with the error: %s (%v)", last, err)
	}
}
