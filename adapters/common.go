package adapters

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/schema"
)

// wait blocks for d or until ctx is done, whichever comes first. It uses a timer rather
// than time.Sleep so that cancellation is prompt.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// estimateUsage approximates tokens as a quarter of the bytes, plus one so that even an
// empty call shows up in token and cost displays.
func estimateUsage(req agent.Request, schemaText, text string) agent.Usage {
	return agent.Usage{
		Input:  (len(req.System)+len(req.Prompt)+len(schemaText))/4 + 1,
		Output: len(text)/4 + 1,
	}
}

// sessionID keeps a caller's session or opens a deterministic new one from the request.
func sessionID(req agent.Request, prefix string) (id string, continued bool) {
	return callSessionID(req, prefix, "")
}

// callSessionID is sessionID for a call with an identity (Call.Key): the new session's id
// depends on the call too, so two calls with the same inputs get two sessions, and a
// resumed call gets its own again.
func callSessionID(req agent.Request, prefix, key string) (id string, continued bool) {
	if req.SessionID != "" {
		return req.SessionID, true
	}
	if key == "" {
		return prefix + "-" + req.Hash()[:12], false
	}
	sum := sha256.Sum256([]byte(key + "\x00" + req.Hash()))
	return prefix + "-" + hex.EncodeToString(sum[:6]), false
}

// snippet is the start of s with whitespace collapsed, cut to n runes.
func snippet(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return strings.TrimRight(string([]rune(s)[:n]), " ") + "..."
}

// maxCachedSchemas bounds a backend's compiled-schema cache; a workflow uses a handful of
// schemas, so overflowing it means something generates them, and starting over is fine.
const maxCachedSchemas = 256

// schemaCache compiles each distinct request schema once per backend instance.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*schema.Schema
}

// compile returns the compiled schema and its JSON text (used for usage estimates).
func (c *schemaCache) compile(raw any) (*schema.Schema, string, error) {
	var text string
	switch s := raw.(type) {
	case string:
		text = s
	case []byte:
		text = string(s)
	case json.RawMessage:
		text = string(s)
	default:
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, "", err
		}
		text = string(b)
	}
	c.mu.Lock()
	if s, ok := c.m[text]; ok {
		c.mu.Unlock()
		return s, text, nil
	}
	c.mu.Unlock()

	// Compile outside the lock: concurrent first uses of one schema may both compile, which
	// is cheaper than serializing every call behind one compile.
	s, err := schema.CompileJSON([]byte(text))
	if err != nil {
		return nil, text, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedSchemas {
		c.m = map[string]*schema.Schema{}
	}
	c.m[text] = s
	c.mu.Unlock()
	return s, text, nil
}

// example answers a structured request with a valid instance seeded by the prompt, and
// returns it with its JSON encoding and the schema text.
func (c *schemaCache) example(req agent.Request) (output any, text, schemaText string, err error) {
	s, schemaText, err := c.compile(req.Schema)
	if err != nil {
		return nil, "", schemaText, err
	}
	v, err := s.Example(req.Prompt)
	if err != nil {
		return nil, "", schemaText, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, "", schemaText, err
	}
	return v, string(b), schemaText, nil
}

func priceOf(u agent.Usage, inPerMTok, outPerMTok float64) *float64 {
	if inPerMTok == 0 && outPerMTok == 0 {
		return nil
	}
	c := float64(u.Input)*inPerMTok/1e6 + float64(u.Output)*outPerMTok/1e6
	return &c
}
