package acp

import (
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/luft-run/luft/agent"
)

// promptBlocks turns a request into the prompt's text blocks: the system prompt, the
// prompt, and with a schema the instruction to answer with matching JSON. sent is all
// of their text, for estimates.
func promptBlocks(req agent.Request) (blocks []sdk.ContentBlock, sent string, err error) {
	var texts []string
	if strings.TrimSpace(req.System) != "" {
		texts = append(texts, req.System)
	}
	texts = append(texts, req.Prompt)
	if req.Schema != nil {
		schema, err := schemaText(req.Schema)
		if err != nil {
			return nil, "", fmt.Errorf("encoding the schema: %w", err)
		}
		texts = append(texts, "Answer with only a JSON value that matches the JSON Schema below, with no other text "+
			"before or after it (a single ```json fenced block is also accepted).\n\nJSON Schema:\n"+schema)
	}
	for _, t := range texts {
		blocks = append(blocks, sdk.TextBlock(t))
	}
	return blocks, strings.Join(texts, "\n\n"), nil
}

// schemaText is the schema as JSON text; a schema given as text is used as it is.
func schemaText(s any) (string, error) {
	switch v := s.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case json.RawMessage:
		return string(v), nil
	}
	b, err := json.Marshal(s)
	return string(b), err
}

// maxJSONStarts bounds how many '{' and '[' positions extractJSON tries in a long text.
const maxJSONStarts = 200

// extractJSON finds the JSON value in an agent's reply: the whole text, else the first
// ```json (or plain ```) fenced block that parses, else the first complete {...} or
// [...] value in the text.
func extractJSON(text string) (any, bool) {
	if v, ok := parseJSON(text); ok {
		return v, true
	}
	for _, block := range fencedBlocks(text) {
		if v, ok := parseJSON(block); ok {
			return v, true
		}
	}
	tries := 0
	for i := 0; i < len(text) && tries < maxJSONStarts; i++ {
		if text[i] != '{' && text[i] != '[' {
			continue
		}
		tries++
		dec := json.NewDecoder(strings.NewReader(text[i:]))
		var v any
		if dec.Decode(&v) == nil {
			return v, true
		}
	}
	return nil, false
}

func parseJSON(s string) (any, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, false
	}
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return nil, false
	}
	return v, true
}

// fencedBlocks returns the bodies of the text's ``` fenced blocks, those labelled json
// first.
func fencedBlocks(text string) []string {
	var labelled, plain []string
	rest := text
	for {
		i := strings.Index(rest, "```")
		if i < 0 {
			break
		}
		rest = rest[i+3:]
		nl := strings.IndexByte(rest, '\n')
		if nl < 0 {
			break
		}
		label := strings.ToLower(strings.TrimSpace(rest[:nl]))
		body := rest[nl+1:]
		j := strings.Index(body, "```")
		if j < 0 {
			break
		}
		if label == "json" {
			labelled = append(labelled, body[:j])
		} else {
			plain = append(plain, body[:j])
		}
		rest = body[j+3:]
	}
	return append(labelled, plain...)
}
