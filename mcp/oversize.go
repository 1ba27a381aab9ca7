package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// A message over MaxBody (a line on stdio, a request body over HTTP) is refused with a
// JSON-RPC error that carries its id, so the client's request fails at once with a
// reason and its connection and session go on. The message is read to its end without
// being kept: idScanner finds its top-level id wherever it is (the TypeScript SDK writes
// it last) in constant memory.

// codeTooLarge is the JSON-RPC error code of a message over the size limit (Invalid
// Request: it is refused before it is parsed).
const codeTooLarge = -32600

// maxDrain bounds how much of an oversized HTTP body is read to find its id; past it the
// request is answered without an id and the connection is closed.
const maxDrain = 8 * MaxBody

func tooLargeMessage(limit int) string {
	return fmt.Sprintf("message of more than %d bytes refused: an MCP message to luft may have %d bytes (a workflow script %d): pass larger inputs as files the script reads",
		limit, limit, MaxScript)
}

// idScanner is fed a JSON-RPC message in pieces and keeps only its top-level "id".
type idScanner struct {
	started, other bool // other: the message is not a JSON object (a batch, garbage)
	depth          int
	inStr, esc     bool
	expectKey      bool   // the next string at depth 1 is a key
	readingKey     bool   // the string being read is such a key
	key            []byte // that key, its first bytes
	lastKey        string
	armed          bool // after `"id":`, before its value
	capturing      bool
	id             []byte
	overflow       bool
	found          bool
}

const maxIDBytes = 256

func (s *idScanner) Write(p []byte) (int, error) {
	for _, c := range p {
		s.byte(c)
	}
	return len(p), nil
}

func (s *idScanner) byte(c byte) {
	if s.other || (s.started && s.depth == 0) {
		return
	}
	space := c == ' ' || c == '\t' || c == '\n' || c == '\r'
	if !s.started {
		if space {
			return
		}
		s.started = true
		if c != '{' {
			s.other = true
			return
		}
		s.depth, s.expectKey = 1, true
		return
	}
	if s.armed && !space {
		s.armed, s.capturing = false, true
	}
	if s.capturing && !s.inStr && s.depth == 1 && (c == ',' || c == '}') {
		s.capturing, s.found = false, !s.overflow
	}
	if s.capturing {
		if len(s.id) < maxIDBytes {
			s.id = append(s.id, c)
		} else {
			s.overflow = true
		}
	}
	if s.inStr {
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = false
			if s.readingKey {
				s.readingKey, s.lastKey = false, string(s.key)
			}
			return
		}
		if s.readingKey && len(s.key) < 8 {
			s.key = append(s.key, c)
		}
		return
	}
	switch c {
	case '"':
		s.inStr = true
		if s.depth == 1 && s.expectKey {
			s.readingKey, s.expectKey, s.key = true, false, s.key[:0]
		}
	case ':':
		if s.depth == 1 && s.lastKey == "id" && !s.found {
			s.armed, s.id, s.overflow = true, s.id[:0], false
		}
	case ',':
		if s.depth == 1 {
			s.expectKey, s.lastKey = true, ""
		}
	case '{', '[':
		s.depth++
	case '}', ']':
		s.depth--
	}
}

// ID is the message's id as JSON-RPC allows it (a string or a number), or nil.
func (s *idScanner) ID() json.RawMessage {
	if !s.found {
		return nil
	}
	id := bytes.TrimSpace(s.id)
	var v any
	if json.Unmarshal(id, &v) != nil {
		return nil
	}
	switch v.(type) {
	case string, float64:
		return json.RawMessage(id)
	}
	return nil
}

// answerTooLarge answers an HTTP request whose body is over MaxBody: with a JSON-RPC
// error for its id (HTTP 200, as any answer to a request), or HTTP 413 with the error
// when it has none (a notification, a batch, a body past maxDrain).
func answerTooLarge(w http.ResponseWriter, body io.Reader) {
	var sc idScanner
	n, err := io.Copy(&sc, io.LimitReader(body, maxDrain))
	id := sc.ID()
	status := http.StatusOK
	if id == nil || err != nil || n >= maxDrain {
		status = http.StatusRequestEntityTooLarge
		if n >= maxDrain {
			w.Header().Set("Connection", "close")
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorLine(id, codeTooLarge, tooLargeMessage(MaxBody)))
}

var errTooLong = errors.New("message too long")

// readLine reads one line of at most limit bytes. A longer one is read to its end without
// being kept and reported as errTooLong, with its id when it has one.
func readLine(rd *bufio.Reader, limit int) ([]byte, json.RawMessage, error) {
	var buf []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		if len(buf)+len(chunk) > limit {
			var sc idScanner
			sc.Write(buf)
			sc.Write(chunk)
			for errors.Is(err, bufio.ErrBufferFull) {
				chunk, err = rd.ReadSlice('\n')
				sc.Write(chunk)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, nil, err
			}
			return nil, sc.ID(), errTooLong
		}
		if len(buf)+len(chunk) > cap(buf) {
			// Doubling (append grows a large slice by a quarter) keeps what a long line
			// allocates on its way to the limit near twice its length.
			nb := make([]byte, len(buf), min(max(2*cap(buf), len(buf)+len(chunk)), limit+1))
			copy(nb, buf)
			buf = nb
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, nil, err
	}
}

// lineWriter writes whole messages to w, one at a time.
type lineWriter struct {
	mu    sync.Mutex
	w     io.Writer
	order *progressOrder // counts the progress lines written; nil = not counted
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	l.order.wroteLine(p) // counted even when it failed: no result waits for it
	return n, err
}

// boundLines passes the lines of in of at most max bytes on to the reader it returns; a
// longer one is answered on out with a JSON-RPC error and dropped. Closing the reader
// ends the copy at its next line.
func boundLines(in io.Reader, max int, out io.Writer) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		rd := bufio.NewReaderSize(in, 64<<10)
		for {
			line, id, err := readLine(rd, max)
			if errors.Is(err, errTooLong) {
				if id != nil {
					_, _ = out.Write(append(errorLine(id, codeTooLarge, tooLargeMessage(max)), '\n'))
				}
				continue
			}
			if len(line) > 0 {
				if _, werr := pw.Write(line); werr != nil {
					return
				}
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}
