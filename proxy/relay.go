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
	ids      []string     // tool-call (and response) ids handed out
	use      *agent.Usage // the answer's usage, when it had one
	outBytes int          // bytes of generated content and tool-call arguments
	err      error        // the copy broke off (client gone, upstream cut)
}

// usage is the turn's usage: the answer's own, else an estimate.
func (r *relayed) usage(estIn int) agent.Usage {
	if r.use != nil {
		return *r.use
	}
	return agent.Usage{Input: estIn, Output: tokensOf(r.outBytes)}
}

// hasID reports whether id is among the ids handed out.
func (r *relayed) hasID(id string) bool {
	for i := len(r.ids) - 1; i >= 0; i-- {
		if r.ids[i] == id {
			return true
		}
	}
	return false
}

// relay passes resp on to the client as it arrives: headers and status as sent, then
// the body, flushed after every read for a stream. What tells the client the answer is
// complete waits for the turn's end to be recorded (deliver): a whole answer of at most
// maxParsed bytes is held with its status and headers, and a stream's closing event
// (the wire's: chat's data: [DONE], Responses' response.completed, Messages'
// message_stop) is held.
func (t *turn) relay(resp *http.Response) relayed {
	var res relayed
	if err := t.started(); err != nil {
		// Nothing of the answer goes to the client without the turn's start recorded; the
		// upstream answered, so the scheduler is told nothing went wrong there.
		t.wire.fail(t.w, http.StatusServiceUnavailable, "server_error", codeUnrecorded,
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
		t.wire.answer(whole.Bytes(), &res)
	}
	if held {
		t.held, t.heldHeader, t.status = whole.Bytes(), true, resp.StatusCode
	}
	return res
}

// relayStream passes a stream on line by line as it arrives (a client acts on whole
// lines only), holding back the event that closes it (see wire.terminal) and whatever
// follows that.
func (t *turn) relayStream(resp *http.Response, res *relayed) relayed {
	rc := http.NewResponseController(t.w)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var (
		part    []byte // the line begun and not ended: not yet sent (unless held), not yet read
		long    bool   // that line outgrew maxLine: it is sent as it comes, and not read
		holding bool   // the closing event has begun: the rest is held
		stopped bool   // held too much after its closing event: nothing more is held
	)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			chunk, in := buf[:n], buf[:n]
			if len(part) > 0 {
				part = append(part, chunk...)
				in = part
			}
			wasHolding := holding
			send := 0       // in[:send] goes to the client now
			var tail []byte // the line begun in in and not ended, kept for the next read
			for start := 0; ; {
				i := bytes.IndexByte(in[start:], '\n')
				if i < 0 {
					rest := in[start:]
					if !holding && !stopped && !long && t.wire.terminal(rest) {
						holding = true
					}
					// The closing event is held anyway, and its line may carry the whole
					// response (the Responses API's usage comes in it): it is read up to
					// maxParsed.
					bound := maxLine
					if holding {
						bound = maxParsed
					}
					if long || len(rest) > bound {
						// Too long to keep whole: it passes through, unread.
						long = true
						if !holding {
							send = len(in)
						}
					} else {
						tail = rest
					}
					break
				}
				if line := in[start : start+i]; !long {
					t.wire.event(line, res)
					if !holding && !stopped && t.wire.terminal(line) {
						holding = true
					}
				}
				long = false
				start += i + 1
				if !holding {
					send = start
				}
			}
			if holding {
				if wasHolding {
					t.held = append(t.held, chunk...)
				} else {
					t.held = append(t.held, in[send:]...)
				}
				if len(t.held) > maxParsed {
					// A stream that goes on long after its closing event: what is held goes
					// to the client, and the rest passes through as it comes.
					if _, err := t.w.Write(t.held); err != nil {
						res.err = err
						return *res
					}
					t.held, holding, stopped = t.held[:0], false, true
					_ = rc.Flush()
					if len(tail) > 0 {
						// The line begun is sent: its rest passes through, unread.
						tail, long = nil, true
					}
				}
			}
			if send > 0 {
				if _, err := t.w.Write(in[:send]); err != nil {
					res.err = err
					return *res
				}
				if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
					res.err = err
					return *res
				}
			}
			part = append(part[:0], tail...)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			res.err = rerr
			return *res
		}
	}
	if len(part) > 0 {
		// The stream ended inside a line.
		t.wire.event(part, res)
		if !holding {
			if _, err := t.w.Write(part); err != nil {
				res.err = err
			}
		}
	}
	return *res
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
			t.wire.fail(t.w, http.StatusServiceUnavailable, "server_error", codeUnrecorded, msg)
		case len(t.held) > 0:
			_, _ = t.w.Write(t.wire.streamError(codeUnrecorded, msg))
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
	if u := a.Usage; u != nil {
		res.use = &agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
		if u.PromptTokensDetails != nil {
			res.use.Cached = u.PromptTokensDetails.CachedTokens
		}
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

// parseEvent reads one line of a stream: a data line's chunk gives content, tool_call
// ids and, in the last chunk of a stream that asked for it, usage.
func parseEvent(line []byte, res *relayed) {
	data, ok := dataOf(line)
	if !ok {
		return // not data, or [DONE]
	}
	if !bytes.Contains(data, []byte(`"tool_calls"`)) && !bytes.Contains(data, []byte(`"usage":{`)) &&
		!bytes.Contains(data, []byte(`"usage": {`)) {
		// Most chunks carry a few characters of text: count them without decoding.
		res.outBytes += stringLen(data, contentKey)
		return
	}
	var c answerJSON
	if json.Unmarshal(data, &c) == nil {
		c.collect(res)
	}
}

// contentKey starts the text of a chunk's delta.
var contentKey = []byte(`"content":"`)
