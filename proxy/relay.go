package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/luft-run/luft/agent"
)

// maxParsed bounds what the proxy keeps of a non-streamed answer to read its usage and
// tool_call ids; a longer answer still passes through whole, its usage then estimated.
const maxParsed = 8 << 20

// maxLine bounds one line of a stream kept for parsing.
const maxLine = 1 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// usageJSON is the usage object of an OpenAI-compatible answer.
type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// relayed is what the proxy learned from an answer while passing it on.
type relayed struct {
	ids      []string   // tool_call ids handed out
	use      *usageJSON // the answer's usage, when it had one
	outBytes int        // bytes of generated content and tool-call arguments
	err      error      // the copy broke off (client gone, upstream cut)
}

// usage is the turn's usage: the answer's own, else an estimate.
func (r *relayed) usage(estIn int) agent.Usage {
	if r.use != nil {
		u := agent.Usage{Input: r.use.PromptTokens, Output: r.use.CompletionTokens}
		if r.use.PromptTokensDetails != nil {
			u.Cached = r.use.PromptTokensDetails.CachedTokens
		}
		return u
	}
	return agent.Usage{Input: estIn, Output: (r.outBytes + 3) / 4}
}

// relay passes resp on to the client as it arrives: headers and status as sent, then
// the body, flushed after every read for a stream. What tells the client the answer is
// complete waits for the turn's end to be recorded (deliver): a whole answer of at most
// maxParsed bytes is held with its status and headers, and a stream's closing
// data: [DONE] is held.
func (t *turn) relay(resp *http.Response) relayed {
	var res relayed
	if err := t.started(); err != nil {
		// Nothing of the answer goes to the client without the turn's start recorded; the
		// upstream answered, so the scheduler is told nothing went wrong there.
		writeError(t.w, http.StatusServiceUnavailable, "server_error", codeUnrecorded,
			"luft could not record this turn in its state dir, so it withholds the answer: "+err.Error())
		t.wrote = true
		return res
	}
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	copyHeader(t.w.Header(), resp.Header)
	if sse {
		// Its end may be replaced by an error (deliver): the stream is sent chunked.
		t.w.Header().Del("Content-Length")
		t.w.WriteHeader(resp.StatusCode)
		t.wrote = true
		return t.relayStream(resp, &res)
	}
	var whole bytes.Buffer
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	held := true // the answer so far is in whole, not yet written
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if held && whole.Len()+n > maxParsed {
				// Too long to hold: it passes through, and its usage is estimated.
				held = false
				t.w.WriteHeader(resp.StatusCode)
				t.wrote = true
				if _, err := t.w.Write(whole.Bytes()); err != nil {
					res.err = err
					return res
				}
			}
			if held {
				whole.Write(buf[:n])
			} else if _, err := t.w.Write(buf[:n]); err != nil {
				res.err = err
				return res
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			res.err = rerr
			if held {
				// The upstream broke off: the client gets what came, as it would have.
				t.w.WriteHeader(resp.StatusCode)
				t.wrote = true
				_, _ = t.w.Write(whole.Bytes())
			}
			return res
		}
	}
	if resp.StatusCode == http.StatusOK {
		parseAnswer(whole.Bytes(), &res)
	}
	if held {
		t.held, t.heldHeader, t.status = whole.Bytes(), true, resp.StatusCode
	}
	return res
}

// relayStream passes a stream on, holding back its closing data: [DONE].
func (t *turn) relayStream(resp *http.Response, res *relayed) relayed {
	rc := http.NewResponseController(t.w)
	var lines sseLines
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			out := buf[:n]
			if len(t.held) > 0 {
				// More came after a [DONE]: it was not the end.
				if _, err := t.w.Write(t.held); err != nil {
					res.err = err
					return *res
				}
				t.held = t.held[:0]
			}
			if i := doneAt(out); i >= 0 {
				t.held = append(t.held, out[i:]...)
				out = out[:i]
			}
			if len(out) > 0 {
				if _, err := t.w.Write(out); err != nil {
					res.err = err
					return *res
				}
				if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
					res.err = err
					return *res
				}
			}
			lines.feed(buf[:n], res)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			res.err = rerr
			return *res
		}
	}
	lines.end(res)
	return *res
}

// doneMark is the data line that closes an OpenAI stream.
var doneMark = []byte("data: [DONE]")

// doneAt is where b's closing data: [DONE] begins when b ends with it (and blank
// lines), -1 otherwise.
func doneAt(b []byte) int {
	i := bytes.LastIndex(b, doneMark)
	if i < 0 || len(bytes.Trim(b[i+len(doneMark):], "\r\n")) != 0 || (i > 0 && b[i-1] != '\n') {
		return -1
	}
	return i
}

// deliver gives the client what relay held of the answer once the turn's end is
// recorded; when it could not be, the client is told so instead: a whole answer is
// replaced by the error, and a stream ends with it in place of its [DONE].
func (t *turn) deliver(recordErr error) {
	if recordErr != nil {
		msg := "luft could not record this turn in its state dir, so it withholds the answer: " + recordErr.Error()
		switch {
		case t.heldHeader:
			h := t.w.Header()
			for k := range h {
				if k != "X-Luft-Run" {
					delete(h, k)
				}
			}
			writeError(t.w, http.StatusServiceUnavailable, "server_error", codeUnrecorded, msg)
		case len(t.held) > 0:
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "param": nil, "code": codeUnrecorded}})
			_, _ = t.w.Write(append(append([]byte("data: "), b...), "\n\n"...))
		}
		return
	}
	if t.heldHeader {
		t.w.Header().Set("Content-Length", strconv.Itoa(len(t.held)))
		t.w.WriteHeader(t.status)
		t.wrote = true
	}
	if len(t.held) > 0 {
		_, _ = t.w.Write(t.held)
	}
}

// answerJSON is what the proxy reads of an answer, or of one chunk of a stream (whose
// choices carry a delta instead of a message).
type answerJSON struct {
	Choices []struct {
		Message choiceJSON `json:"message"`
		Delta   choiceJSON `json:"delta"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
}

type choiceJSON struct {
	Content   string        `json:"content"`
	ToolCalls []toolCallRef `json:"tool_calls"`
}

// collect adds the answer's usage, output size and tool_call ids to res.
func (a *answerJSON) collect(res *relayed) {
	if a.Usage != nil {
		res.use = a.Usage
	}
	for _, c := range a.Choices {
		for _, m := range [...]*choiceJSON{&c.Message, &c.Delta} {
			res.outBytes += len(m.Content)
			for _, tc := range m.ToolCalls {
				res.outBytes += len(tc.Function.Name) + len(tc.Function.Arguments)
				if tc.ID != "" {
					res.ids = append(res.ids, tc.ID)
				}
			}
		}
	}
}

// parseAnswer reads usage and tool_call ids from a non-streamed answer.
func parseAnswer(b []byte, res *relayed) {
	var a answerJSON
	if json.Unmarshal(b, &a) != nil {
		res.outBytes = len(b)
		return
	}
	a.collect(res)
}

// sseLines splits a stream into lines across reads and parses its data lines.
type sseLines struct {
	part []byte
	skip bool // the current line grew past maxLine: ignore it to its end
}

func (s *sseLines) feed(b []byte, res *relayed) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !s.skip {
				if len(s.part)+len(b) > maxLine {
					s.part, s.skip = s.part[:0], true
				} else {
					s.part = append(s.part, b...)
				}
			}
			return
		}
		line := b[:i]
		if len(s.part) > 0 {
			s.part = append(s.part, line...)
			line = s.part
		}
		if !s.skip {
			parseEvent(line, res)
		}
		s.part, s.skip = s.part[:0], false
		b = b[i+1:]
	}
}

func (s *sseLines) end(res *relayed) {
	if len(s.part) > 0 && !s.skip {
		parseEvent(s.part, res)
	}
}

// parseEvent reads one line of a stream: a data line's chunk gives content, tool_call
// ids and, in the last chunk of a stream that asked for it, usage.
func parseEvent(line []byte, res *relayed) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return // [DONE]
	}
	if !bytes.Contains(data, []byte(`"tool_calls"`)) && !bytes.Contains(data, []byte(`"usage":{`)) &&
		!bytes.Contains(data, []byte(`"usage": {`)) {
		// Most chunks carry a few characters of text: count them without decoding.
		res.outBytes += contentLen(data)
		return
	}
	var c answerJSON
	if json.Unmarshal(data, &c) == nil {
		c.collect(res)
	}
}

// contentKey starts the text of a chunk's delta.
var contentKey = []byte(`"content":"`)

// contentLen is the length of the first "content" string of a chunk, as it is escaped.
func contentLen(data []byte) int {
	i := bytes.Index(data, contentKey)
	if i < 0 {
		return 0
	}
	rest := data[i+len(contentKey):]
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return len(rest)
}
