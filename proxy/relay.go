package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
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
// the body, flushed after every read for a stream.
func (t *turn) relay(resp *http.Response) relayed {
	var res relayed
	h := t.w.Header()
	copyHeader(h, resp.Header)
	t.w.WriteHeader(resp.StatusCode)
	t.wrote = true
	rc := http.NewResponseController(t.w)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var (
		lines sseLines
		whole bytes.Buffer
	)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := t.w.Write(buf[:n]); err != nil {
				res.err = err
				return res
			}
			if sse {
				if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
					res.err = err
					return res
				}
				lines.feed(buf[:n], &res)
			} else if resp.StatusCode == http.StatusOK && whole.Len()+n <= maxParsed {
				whole.Write(buf[:n])
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			res.err = rerr
			return res
		}
	}
	if sse {
		lines.end(&res)
	} else if resp.StatusCode == http.StatusOK {
		parseAnswer(whole.Bytes(), &res)
	}
	return res
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
