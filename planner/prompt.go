package planner

import (
	"fmt"
	"strings"
)

const answerRule = "Answer with the whole workflow in one ```lua fenced block: meta with reasoning and phases, " +
	"function main(), report() called once at the end on every path, r.ok checked before r.output is used."

func planPrompt(task string, t Tools) string {
	return "Write a luft workflow for this task.\n\nTask: " + task + "\n\n" + t.prompt() + "\n\n" + answerRule
}

func retryPrompt(first string, prev []byte, reason string, warnings []string) string {
	var b strings.Builder
	b.WriteString(first)
	b.WriteString("\n\nYour previous script:\n\n```lua\n")
	b.WriteString(strings.TrimRight(string(prev), "\n"))
	b.WriteString("\n```\n\n")
	if reason != "" {
		fmt.Fprintf(&b, "was rejected: %s\n", reason)
	} else {
		b.WriteString("is valid, but breaks rules of the skill:\n")
	}
	for _, w := range warnings {
		fmt.Fprintf(&b, "- warning: %s\n", w)
	}
	b.WriteString("\nCorrect it. " + answerRule)
	return b.String()
}

func fixPrompt(f Failure) string {
	var b strings.Builder
	b.WriteString("This luft workflow failed while running.\n\nError: ")
	b.WriteString(f.Error)
	if line := lineOf(f.Script, f.Line); line != "" {
		fmt.Fprintf(&b, "\nFailing line %d: %s", f.Line, line)
	}
	b.WriteString("\n\nThe script:\n\n```lua\n")
	b.WriteString(strings.TrimRight(string(f.Script), "\n"))
	b.WriteString("\n```\n\nFix the bug. Keep every agent call that ran before the failing line exactly as it is " +
		"(same prompt, name, schema and options, in the same order), so its recorded result is reused instead of paid " +
		"for again. " + answerRule)
	return b.String()
}

// lineOf returns line n (1-based) of src, trimmed; "" when out of range.
func lineOf(src []byte, n int) string {
	if n <= 0 {
		return ""
	}
	lines := strings.Split(string(src), "\n")
	if n > len(lines) {
		return ""
	}
	return strings.TrimSpace(lines[n-1])
}
