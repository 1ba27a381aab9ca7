package testkit

import (
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The engine's tokenizer is an estimate, not a real BPE: text splits on white space and
// every word counts one token per started 4 characters (runes), so "hello" is 2 tokens and
// "a b c" is 3. It is deterministic and close to the bytes/4 rule of thumb that luft's
// estimator uses, which is what the benchmarks need: agreement between the engine's
// ground truth and the client's estimate up to a small, stable error.

// tokenChars is the number of runes per token within a word.
const tokenChars = 4

// CountTokens returns the number of tokens in text under the engine's tokenizer.
func CountTokens(text string) int {
	n := 0
	eachToken(text, func(string) { n++ })
	return n
}

// Tokenize splits text into the engine's tokens.
func Tokenize(text string) []string {
	var toks []string
	eachToken(text, func(t string) { toks = append(toks, t) })
	return toks
}

// cutTokens returns text up to the end of its n-th token.
func cutTokens(text string, n int) string {
	end, count := 0, 0
	eachToken(text, func(t string) {
		if count < n {
			end = end + strings.Index(text[end:], t) + len(t)
			count++
		}
	})
	return text[:end]
}

func eachToken(text string, f func(string)) {
	for _, w := range strings.FieldsFunc(text, unicode.IsSpace) {
		for len(w) > 0 {
			i, n := 0, 0
			for i < len(w) && n < tokenChars {
				_, size := utf8.DecodeRuneInString(w[i:])
				i += size
				n++
			}
			f(w[:i])
			w = w[i:]
		}
	}
}

// prompt is a request's prompt as the engine sees it: its token count and the chained
// hashes of its full cache blocks (blocks[i] identifies the whole prefix up to the end
// of block i, so two prompts share blocks[0..k] exactly when they share that prefix).
type prompt struct {
	tokens int
	blocks []uint64
}

// renderPrompt tokenizes a request the way a chat template would lay it out: the tool
// declarations first (they are stable across turns), then each message as a role marker
// token followed by its content, tool calls and tool-call id, then the marker that opens
// the assistant's reply. Every marker counts one token.
func renderPrompt(req *ChatRequest, blockSize int) prompt {
	h := fnv.New64a()
	var p prompt
	inBlock := 0
	add := func(tok string) {
		h.Write([]byte(tok))
		h.Write([]byte{0})
		p.tokens++
		inBlock++
		if blockSize > 0 && inBlock == blockSize {
			p.blocks = append(p.blocks, h.Sum64())
			inBlock = 0
		}
	}
	text := func(s string) { eachToken(s, add) }
	if len(req.Tools) > 0 {
		add("<|tools|>")
		for _, t := range req.Tools {
			text(t.Function.Name)
			text(t.Function.Description)
			text(string(t.Function.Parameters))
		}
	}
	for _, m := range req.Messages {
		add("<|" + m.Role + "|>")
		text(m.Name)
		text(string(m.Content))
		for _, c := range m.ToolCalls {
			text(c.ID)
			text(c.Function.Name)
			text(c.Function.Arguments)
		}
		text(m.ToolCallID)
	}
	add("<|assistant|>")
	return p
}
