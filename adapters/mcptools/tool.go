package mcptools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/luft-run/luft/adapters/tools"
)

// maxToolName is the longest function name OpenAI-style APIs accept.
const maxToolName = 64

// ToolError is a tool result the upstream server marked isError: the tool ran and
// failed. Its Error is the result's text alone, which the model sees as "error: ...".
type ToolError struct {
	Tool    string // the exposed name, server__tool
	Message string
}

func (e *ToolError) Error() string { return e.Message }

// tool is one upstream tool offered to luft agents.
type tool struct {
	conn   *conn
	remote string // the tool's name on its server
	spec   tools.Spec
}

var _ tools.Tool = (*tool)(nil)

func newTool(c *conn, mt mcp.Tool) (*tool, error) {
	params, err := parameters(mt)
	if err != nil {
		return nil, fmt.Errorf("%s: tool %q: input schema: %v (the server sent a schema luft cannot read)", c, mt.Name, err)
	}
	desc := mt.Description
	if desc == "" {
		desc = mt.Title
	}
	if desc == "" {
		desc = mt.Annotations.Title
	}
	a := mt.Annotations
	return &tool{
		conn:   c,
		remote: mt.Name,
		spec: tools.Spec{
			Name:        ExposedName(c.server.Name, mt.Name),
			Description: desc,
			Parameters:  params,
			Destructive: isTrue(a.DestructiveHint) && !isTrue(a.ReadOnlyHint),
		},
	}, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// ExposedName is the name a model sees for an upstream server's tool:
// "<server>__<tool>", rewritten to [a-zA-Z0-9_-] and 64 bytes with a hash suffix when
// the plain name does not fit (see the package documentation). server must be a valid
// server name.
func ExposedName(server, remote string) string {
	plain := server + "__" + remote
	if len(plain) <= maxToolName && clean(remote) {
		return plain
	}
	sum := sha256.Sum256([]byte(remote))
	suffix := "_" + hex.EncodeToString(sum[:4])
	var b strings.Builder
	b.WriteString(server + "__")
	for _, r := range remote {
		if b.Len() >= maxToolName-len(suffix) {
			break
		}
		if r < 128 && isNameByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + suffix
}

func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// parameters renders the tool's input schema as a JSON object.
func parameters(mt mcp.Tool) (map[string]any, error) {
	var data []byte
	var err error
	if mt.RawInputSchema != nil {
		data = mt.RawInputSchema
	} else if data, err = json.Marshal(mt.InputSchema); err != nil {
		return nil, err
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		return nil, err
	}
	if schema == nil {
		schema = map[string]any{}
	}
	if t, _ := schema["type"].(string); t == "" {
		schema["type"] = "object"
	}
	// mcp-go writes "required": [] for a schema without it; drop the noise.
	if req, ok := schema["required"].([]any); ok && len(req) == 0 {
		delete(schema, "required")
	}
	return schema, nil
}

// Spec returns the tool's description for a model. Its Parameters are a fresh copy.
func (t *tool) Spec() tools.Spec {
	s := t.spec
	s.Parameters = cloneJSON(s.Parameters).(map[string]any)
	return s
}

// Call runs the tool on its server.
func (t *tool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	name := t.spec.Name
	raw, err := objectArgs(args)
	if err != nil {
		return "", fmt.Errorf("tool %s: %v (send a JSON object that matches the tool's parameters)", name, err)
	}
	if t.conn.closed.Load() {
		return "", fmt.Errorf("tool %s: %s is closed (the tool was called after its Upstream was closed)", name, t.conn)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = t.remote
	req.Params.Arguments = raw
	res, err := t.conn.client.CallTool(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("tool %s: call abandoned: %w", name, context.Cause(ctx))
		}
		return "", t.callError(err)
	}
	text := render(res)
	if res.IsError {
		if text == "" {
			text = "the tool failed without saying why"
		}
		return "", &ToolError{Tool: name, Message: text}
	}
	return text, nil
}

// callError explains a tools/call that got no result: either the server could not be
// reached or it answered with a JSON-RPC error.
func (t *tool) callError(err error) error {
	c := t.conn
	if c.closed.Load() {
		return fmt.Errorf("tool %s: %s was closed during the call", t.spec.Name, c)
	}
	var te *transport.Error
	if !errors.As(err, &te) {
		return fmt.Errorf("tool %s: %s refused tools/call %q: %v", t.spec.Name, c, t.remote, err)
	}
	msg := fmt.Sprintf("tool %s: %s: tools/call %q failed: ", t.spec.Name, c, t.remote)
	var urlErr *url.Error
	switch {
	case errors.Is(err, transport.ErrTransportClosed) && c.server.Command != "":
		msg += "the connection is closed (the server exited)"
		if tl := c.stderrTail(); tl != "" {
			msg += "; its stderr ends: " + tl
		}
	case errors.Is(err, transport.ErrTransportClosed):
		msg += "the connection is closed"
	case errors.As(err, &urlErr):
		msg += fmt.Sprintf("cannot reach the server: %v (is it still running?)", urlErr.Err)
	default:
		msg += unwrapTransport(err).Error()
	}
	return errors.New(msg)
}

// objectArgs checks that the model's arguments are a JSON object; none (or null) is {}.
func objectArgs(args json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(trimmed) {
		return nil, errors.New("arguments are not valid JSON")
	}
	if trimmed[0] != '{' {
		return nil, errors.New("arguments are not a JSON object")
	}
	return json.RawMessage(trimmed), nil
}

// render turns a tool result into the text the model gets.
func render(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if p := renderContent(c); p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		if len(res.RawStructuredContent) > 0 {
			return string(res.RawStructuredContent)
		}
		if res.StructuredContent != nil {
			if b, err := json.Marshal(res.StructuredContent); err == nil {
				return string(b)
			}
		}
	}
	return strings.Join(parts, "\n")
}

func renderContent(c mcp.Content) string {
	switch c := c.(type) {
	case mcp.TextContent:
		return c.Text
	case *mcp.TextContent:
		return c.Text
	case mcp.ImageContent:
		return fmt.Sprintf("[image %s, %d bytes, not shown]", orUnknown(c.MIMEType), base64Size(c.Data))
	case mcp.AudioContent:
		return fmt.Sprintf("[audio %s, %d bytes, not shown]", orUnknown(c.MIMEType), base64Size(c.Data))
	case mcp.ResourceLink:
		return fmt.Sprintf("[resource link %s: %s]", c.URI, c.Name)
	case mcp.EmbeddedResource:
		switch r := c.Resource.(type) {
		case mcp.TextResourceContents:
			return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
		case *mcp.TextResourceContents:
			return fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text)
		case mcp.BlobResourceContents:
			return fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", r.URI, orUnknown(r.MIMEType), base64Size(r.Blob))
		case *mcp.BlobResourceContents:
			return fmt.Sprintf("[resource %s, %s, %d bytes, not shown]", r.URI, orUnknown(r.MIMEType), base64Size(r.Blob))
		}
		return "[resource, not shown]"
	}
	return fmt.Sprintf("[%T content, not shown]", c)
}

func orUnknown(mime string) string {
	if mime == "" {
		return "of unknown type"
	}
	return mime
}

// base64Size is the decoded size of standard base64 data.
func base64Size(s string) int {
	n := len(s) / 4 * 3
	if len(s)%4 != 0 {
		n += len(s) % 4 * 3 / 4
	}
	return n - strings.Count(s[max(0, len(s)-2):], "=")
}

func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			m[k] = cloneJSON(x)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, x := range v {
			s[i] = cloneJSON(x)
		}
		return s
	}
	return v
}
