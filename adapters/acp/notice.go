package acp

import (
	"regexp"
	"strings"
)

// agentNotices are notices agents send as reply text although they are about the agent,
// not the answer: codex-acp passes Codex's warnings on as agent message chunks, with no
// break before the reply that follows ("…cause issues.The answer is 4").
var agentNotices = []*regexp.Regexp{
	// Codex, when the model it was given is not in its model list.
	regexp.MustCompile(`Model metadata for [^\n]*? not found\.(?: Defaulting to fallback metadata[^\n.]*\.)?\s*`),
}

// splitNotice takes the agents' known notices out of a reply chunk: what is left is the
// reply's text, the notices are reported apart.
func splitNotice(chunk string) (text, notice string) {
	var notices []string
	for _, re := range agentNotices {
		chunk = re.ReplaceAllStringFunc(chunk, func(n string) string {
			notices = append(notices, strings.TrimSpace(n))
			return ""
		})
	}
	return chunk, strings.Join(notices, "\n")
}
