package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Relay is `luft mcp serve`: it bridges an MCP client on stdio (newline-delimited
// JSON-RPC) to the daemon's streamable HTTP endpoint, so the runs the client starts live
// in the daemon and outlive it. It is transparent: each message from the client is
// POSTed with the session id; a JSON answer or each message of an SSE answer (progress
// notifications, server requests such as elicitation, then the response) is written to
// the client as one line; the client's answers to server requests are POSTed back.
//
// When the daemon goes away (stopped, killed, restarted) the relay connects again
// (Connect starts a daemon when none runs), replays the client's initialize and
// initialized to get a new session, and sends the message again when it had not reached
// the old daemon, or when sending it twice is harmless (a request other than a tool call,
// or a call of a tool the server's tools/list answer marked read-only or idempotent).
// Any other request whose answer was cut off is answered with a JSON-RPC error that says
// the run goes on in the daemon.
type Relay struct {
	// Connect returns an HTTP client that reaches the daemon and the URL of its MCP
	// endpoint, starting a daemon when none runs. It is called first and after every
	// lost connection.
	Connect func(ctx context.Context) (*http.Client, string, error)
	// Workdir is sent with every request (HeaderWorkdir): the client's relative paths
	// resolve there.
	Workdir string
	// MaxMessage bounds one message from the client; default MaxBody (32 MiB). A longer
	// one is answered with a JSON-RPC error for its id.
	MaxMessage int
	// Session is the session key sent with every request (HeaderSession): the runs the
	// client starts stay its own across the daemon sessions the relay opens; default a
	// random key per Run.
	Session string
	// DrainTimeout bounds how long the relay still waits, once the client closed stdin,
	// for answers to the requests it sent before; default 10 s.
	DrainTimeout time.Duration
	Log          *log.Logger // nil = discarded

	out   io.Writer
	outMu sync.Mutex

	mu        sync.Mutex
	httpc     *http.Client
	url       string
	session   string
	version   string // the protocol version the initialize answer gave
	init      []byte // the client's initialize, replayed on a new session
	inited    []byte // its notifications/initialized
	gen       int    // connection generation, +1 per reconnect
	reconnect sync.Mutex
	// safe are the tools whose calls may be sent again after a connection broke in
	// the middle (read-only or idempotent, as the server's tools/list answer said).
	safe       map[string]bool
	listenOnce sync.Once
	listening  sync.WaitGroup // the listen goroutine, which ends with Run's ctx
}

// listen keeps a GET stream open on the current session once the client is initialized,
// and relays what the daemon sends on it: requests that are not tied to a call of the
// client (mcp-go sends roots/list only there) and notifications. The client's answers
// are POSTed like any message. A stream that ends is opened again, on the new session
// after a reconnect, until ctx ends.
func (r *Relay) listen(ctx context.Context) {
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		r.mu.Lock()
		httpc, url, session, version := r.httpc, r.url, r.session, r.version
		r.mu.Unlock()
		opened := false
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil); err == nil && session != "" {
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", session)
			if version != "" {
				req.Header.Set("Mcp-Protocol-Version", version)
			}
			if r.Workdir != "" {
				req.Header.Set(HeaderWorkdir, r.Workdir)
			}
			req.Header.Set(HeaderSession, r.Session)
			if resp, err := httpc.Do(req); err == nil {
				ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
				if resp.StatusCode == http.StatusOK && ct == "text/event-stream" {
					opened = true
					_, _ = r.relayBody(resp, message{}, r.write)
				}
				resp.Body.Close()
			}
		}
		if opened {
			wait = 100 * time.Millisecond
		} else {
			wait = min(2*wait, 5*time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// errLost is a connection to the daemon that broke after the message was sent.
var errLost = errors.New("the connection to the luft daemon was lost")

// codeDaemonLost is the JSON-RPC error code of a request cut off by a lost daemon
// connection (in the implementation-defined server error range).
const codeDaemonLost = -32001

// Run relays until in ends (the client closed stdin) or ctx is done.
func (r *Relay) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	if r.Log == nil {
		r.Log = log.New(io.Discard, "", 0)
	}
	if r.MaxMessage <= 0 {
		r.MaxMessage = MaxBody
	}
	if r.Session == "" {
		r.Session = newSessionKey()
	}
	r.out = out
	httpc, url, err := r.Connect(ctx)
	if err != nil {
		return err
	}
	r.httpc, r.url = httpc, url
	ctx, cancel := context.WithCancel(ctx)
	defer r.listening.Wait() // after cancel, which ends it
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	// Lines are read on their own goroutine, so ctx ends the relay even while the client
	// sends nothing.
	type read struct {
		line []byte
		id   json.RawMessage // of a line over MaxMessage
		err  error
	}
	lines := make(chan read)
	go func() {
		rd := bufio.NewReaderSize(in, 64<<10)
		for {
			line, id, err := readLine(rd, r.MaxMessage)
			select {
			case lines <- read{line, id, err}:
			case <-ctx.Done():
				return
			}
			if err != nil && !errors.Is(err, errTooLong) {
				return
			}
		}
	}()
	for {
		var got read
		select {
		case got = <-lines:
		case <-ctx.Done():
			r.close()
			return nil
		}
		if errors.Is(got.err, errTooLong) {
			// Answered here: the daemon would refuse it too, and the client's request
			// fails at once (it carries its id) while its session goes on.
			if got.id != nil {
				r.write(errorLine(got.id, codeTooLarge, tooLargeMessage(r.MaxMessage)))
			} else {
				r.Log.Printf("a message of more than %d bytes without an id dropped", r.MaxMessage)
			}
			continue
		}
		if len(bytes.TrimSpace(got.line)) > 0 {
			r.handle(ctx, &wg, got.line)
		}
		if got.err != nil {
			if errors.Is(got.err, io.EOF) {
				r.drain(ctx, &wg)
			}
			cancel()
			r.close()
			if errors.Is(got.err, io.EOF) {
				return nil
			}
			return got.err
		}
	}
}

// drain waits, for at most DrainTimeout, for the answers to what the client asked before
// it closed stdin: a client that pipes its requests in and reads on gets them.
func (r *Relay) drain(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	d := r.DrainTimeout
	if d <= 0 {
		d = 10 * time.Second
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.Log.Printf("stdin closed: %s passed with requests still unanswered; leaving them to the daemon", d)
	case <-ctx.Done():
	}
}

// message is what the relay needs to know of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params struct {
		Name string `json:"name"`
	} `json:"params"`
}

func (m message) isRequest() bool { return m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null" }

func (r *Relay) handle(ctx context.Context, wg *sync.WaitGroup, line []byte) {
	line = bytes.TrimSpace(line)
	var m message
	if line[0] != '[' && json.Unmarshal(line, &m) != nil {
		r.write(errorLine(nil, -32700, "parse error: a message must be one JSON-RPC object per line"))
		return
	}
	switch m.Method {
	case "initialize":
		// The handshake goes first and alone: the client waits for its answer.
		r.mu.Lock()
		r.init = append([]byte(nil), line...)
		r.mu.Unlock()
		r.send(ctx, m, line, true)
		return
	case "notifications/initialized":
		r.mu.Lock()
		r.inited = append([]byte(nil), line...)
		r.mu.Unlock()
		r.send(ctx, m, line, true)
		r.listenOnce.Do(func() {
			r.listening.Add(1)
			go func() {
				defer r.listening.Done()
				r.listen(ctx)
			}()
		})
		return
	}
	// Everything else in parallel: an await long-polls while other calls go on.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.send(ctx, m, line, false)
	}()
}

// send POSTs one message and relays the answer; on a lost daemon it connects again and
// sends again when the message had not reached the daemon.
func (r *Relay) send(ctx context.Context, m message, line []byte, handshake bool) {
	// A new connection gets the client's handshake replayed, except while the handshake
	// itself is being sent: initialize is sent again as it is.
	replay := m.Method != "initialize"
	for attempt := 0; ; attempt++ {
		gen := r.generation()
		err := r.post(ctx, m, line, handshake)
		if err == nil || ctx.Err() != nil {
			return
		}
		var nd *notDelivered
		if !errors.As(err, &nd) && r.resendable(m) && attempt < 3 {
			// The daemon may never have seen it (a kept-alive connection to a daemon that
			// died), and sending it again changes nothing if it did.
			nd = &notDelivered{err}
		}
		if nd == nil || attempt >= 3 {
			r.Log.Printf("relay %s: %v", describe(m), err)
			if m.isRequest() {
				r.write(errorLine(m.ID, codeDaemonLost, fmt.Sprintf("%v while this request was in flight; runs go on in the daemon: send the request again (workflow_await waits for a run)", err)))
			}
			// Connect again now, so the next message finds a session.
			if rerr := r.reconnectFrom(ctx, gen, replay); rerr != nil {
				r.Log.Printf("relay: connect again: %v", rerr)
			}
			return
		}
		r.Log.Printf("relay %s: %v; connecting again", describe(m), nd.err)
		if rerr := r.reconnectFrom(ctx, gen, replay); rerr != nil {
			r.Log.Printf("relay: connect again: %v", rerr)
			if m.isRequest() {
				r.write(errorLine(m.ID, codeDaemonLost, fmt.Sprintf("cannot reach the luft daemon: %v", rerr)))
			}
			return
		}
		if m.Method == "notifications/initialized" {
			return // replayed with the handshake
		}
	}
}

func describe(m message) string {
	if m.Method != "" {
		return m.Method
	}
	return "response " + string(m.ID)
}

// notDelivered is a failure before the daemon took the message (no connection, or a
// session it does not know): sending it again is safe.
type notDelivered struct{ err error }

func (e *notDelivered) Error() string { return e.err.Error() }

func (r *Relay) generation() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// post sends one message on the current connection and writes what comes back.
func (r *Relay) post(ctx context.Context, m message, line []byte, handshake bool) error {
	// Wait for a reconnect under way: its new session is the one to use. The lock is a
	// barrier, held by reconnect alone; a post must not hold it while its request is in
	// flight, or a reconnect would wait for every slow call.
	r.reconnect.Lock()
	//lint:ignore SA2001 the empty critical section is the barrier: it waits for a reconnect that holds the lock
	r.reconnect.Unlock()
	r.mu.Lock()
	httpc, url, session, version := r.httpc, r.url, r.session, r.version
	r.mu.Unlock()
	resp, err := r.do(ctx, httpc, url, session, version, line)
	if err != nil {
		if refused(err) {
			return &notDelivered{err}
		}
		return fmt.Errorf("%w: %v", errLost, err)
	}
	defer resp.Body.Close()
	if m.Method == "initialize" {
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			r.mu.Lock()
			r.session = sid
			r.mu.Unlock()
		}
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && session != "" && !handshake:
		// The daemon does not know the session: it was restarted.
		return &notDelivered{fmt.Errorf("the daemon does not know session %s", session)}
	case resp.StatusCode == http.StatusAccepted:
		return nil
	case resp.StatusCode >= 300:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if m.isRequest() {
			r.write(errorLine(m.ID, -32603, fmt.Sprintf("the luft daemon answered HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))))
		}
		return nil
	}
	answered, err := r.relayBody(resp, m, func(msg []byte) {
		switch m.Method {
		case "initialize":
			r.noteVersion(msg)
		case "tools/list":
			r.noteTools(msg)
		}
		r.write(msg)
	})
	if err != nil && m.isRequest() && !answered {
		return fmt.Errorf("%w: %v", errLost, err)
	}
	return nil
}

// do POSTs a message.
func (r *Relay) do(ctx context.Context, httpc *http.Client, url, session, version string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	if r.Workdir != "" {
		req.Header.Set(HeaderWorkdir, r.Workdir)
	}
	req.Header.Set(HeaderSession, r.Session)
	return httpc.Do(req)
}

// relayBody hands each message of a JSON or SSE answer to emit; answered reports that
// the response to m (its id) came.
func (r *Relay) relayBody(resp *http.Response, m message, emit func([]byte)) (answered bool, err error) {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	isAnswer := func(msg []byte) bool {
		var got struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		return json.Unmarshal(msg, &got) == nil && got.Method == "" && bytes.Equal(got.ID, m.ID)
	}
	if ct != "text/event-stream" {
		b, err := io.ReadAll(io.LimitReader(resp.Body, int64(r.MaxMessage)*2))
		if err != nil {
			return false, err
		}
		if b = bytes.TrimSpace(b); len(b) > 0 {
			emit(b)
			return isAnswer(b), nil
		}
		return false, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), r.MaxMessage*2)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				emit(data)
				answered = answered || isAnswer(data)
				data = nil
			}
		case bytes.HasPrefix(line, []byte("data:")):
			d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, d...)
		}
	}
	if len(data) > 0 {
		emit(data)
		answered = answered || isAnswer(data)
	}
	return answered, sc.Err()
}

// resendable reports whether m may be sent again after the connection broke while it was
// in flight: a request other than a tool call (lists, reads, ping), or a call of a tool
// the server marked read-only or idempotent.
func (r *Relay) resendable(m message) bool {
	if !m.isRequest() || m.Method == "initialize" {
		return false
	}
	if m.Method != "tools/call" {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.safe[m.Params.Name]
}

// noteTools learns from a tools/list answer which tools are safe to call again.
func (r *Relay) noteTools(msg []byte) {
	var ans struct {
		Result struct {
			Tools []struct {
				Name        string `json:"name"`
				Annotations struct {
					ReadOnly   *bool `json:"readOnlyHint"`
					Idempotent *bool `json:"idempotentHint"`
				} `json:"annotations"`
			} `json:"tools"`
		} `json:"result"`
	}
	if json.Unmarshal(msg, &ans) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.safe == nil {
		r.safe = map[string]bool{}
	}
	for _, t := range ans.Result.Tools {
		a := t.Annotations
		r.safe[t.Name] = a.ReadOnly != nil && *a.ReadOnly || a.Idempotent != nil && *a.Idempotent
	}
}

// noteVersion keeps the protocol version of the initialize answer for later requests.
func (r *Relay) noteVersion(msg []byte) {
	var ans struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if json.Unmarshal(msg, &ans) == nil && ans.Result.ProtocolVersion != "" {
		r.mu.Lock()
		r.version = ans.Result.ProtocolVersion
		r.mu.Unlock()
	}
}

// reconnectFrom connects again unless another message already did since generation gen,
// and with replay sends the client's handshake again to get a new session.
func (r *Relay) reconnectFrom(ctx context.Context, gen int, replay bool) error {
	r.reconnect.Lock()
	defer r.reconnect.Unlock()
	if r.generation() != gen {
		return nil
	}
	httpc, url, err := r.Connect(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.httpc, r.url = httpc, url
	r.gen++
	init, inited := r.init, r.inited
	r.mu.Unlock()
	if init == nil || !replay {
		return nil // nothing to replay yet
	}
	if err := r.replay(ctx, init, inited); err != nil {
		return err
	}
	r.Log.Printf("relay: connected again, session %s", r.sessionID())
	return nil
}

func (r *Relay) sessionID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.session
}

// replay sends the client's initialize (under an id of its own, whose answer the client
// never sees) and initialized on the new connection.
func (r *Relay) replay(ctx context.Context, init, inited []byte) error {
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(init, &msg); err != nil {
		return err
	}
	msg["id"] = json.RawMessage(`"luft-relay-reinitialize"`)
	body, _ := json.Marshal(msg)
	r.mu.Lock()
	httpc, url := r.httpc, r.url
	r.mu.Unlock()
	resp, err := r.do(ctx, httpc, url, "", "", body)
	if err != nil {
		return err
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	_, err = r.relayBody(resp, message{ID: msg["id"]}, r.noteVersion)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || sid == "" {
		return fmt.Errorf("initialize again: HTTP %d without a session", resp.StatusCode)
	}
	r.mu.Lock()
	r.session = sid
	version := r.version
	r.mu.Unlock()
	if inited != nil {
		resp, err := r.do(ctx, httpc, url, sid, version, inited)
		if err != nil {
			return err
		}
		resp.Body.Close()
	}
	return nil
}

// close ends the session in the daemon (best effort: the client is gone).
func (r *Relay) close() {
	r.mu.Lock()
	httpc, url, session := r.httpc, r.url, r.session
	r.mu.Unlock()
	if session == "" {
		return
	}
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", session)
	if resp, err := httpc.Do(req); err == nil {
		resp.Body.Close()
	}
}

// refused reports a failure to reach the daemon at all: nothing was sent.
func refused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) ||
		(errors.As(err, &op) && op.Op == "dial")
}

// write sends one message to the client, a line at a time.
func (r *Relay) write(msg []byte) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	if _, err := r.out.Write(append(bytes.TrimSpace(msg), '\n')); err != nil {
		r.Log.Printf("relay: write to the client: %v", err)
	}
}

// errorLine is a JSON-RPC error response.
func errorLine(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	return b
}
