package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

type runCommand struct{ e *env }

// confinementText tells the model what a command may read, change and reach, so a
// refused read, write or connection is no surprise.
func (t *runCommand) confinementText() string {
	// The kernel's Landlock only: the full check (sandbox.Check) may start a probe for
	// namespaces, which a tool's description must not cost every process that lists tools.
	if abi, err := sandboxStatus(); err != nil || abi < sandbox.MinABI {
		return "The command gets a minimal environment (no credentials) and $TMPDIR, a private temporary folder."
	}
	net := "It cannot open TCP connections (UDP is not restricted)"
	switch {
	case t.e.conf.anyPort:
		net = "It may open network connections"
	case len(t.e.conf.ports) > 0:
		net = fmt.Sprintf("It may open TCP connections only to the ports %v (UDP is not restricted)", t.e.conf.ports)
	}
	return "The command may change files only inside the workspace, $TMPDIR (a private temporary folder, " +
		"removed afterwards) and $XDG_CACHE_HOME (the workspace's cache folder), and read only those, the system's folders " +
		"and the toolchains'; anything else is refused by the kernel (\"Permission denied\"). " + net +
		". It gets a minimal environment (no credentials)."
}

func (t *runCommand) Spec() Spec {
	allowed := "none: [tools] allow_commands is empty, so every command is refused"
	if len(t.e.allow) > 0 {
		allowed = t.allowList()
	}
	asked := ""
	if t.e.approval == ApprovalAsk {
		allowed = strings.Replace(allowed, ", so every command is refused", "", 1)
		asked = "; another command runs only if the user approves it"
	}
	return Spec{
		Name: "run_command",
		Description: fmt.Sprintf("Run a program in the workspace directory, without a shell: no pipes, "+
			"redirection, ;, &&, variables or command substitution. Give the program in command and its "+
			"arguments in args, or the whole command line in command (words split on spaces, quotes group "+
			"words). Only commands that start with an allowed prefix run, compared word by word%s. Allowed: %s. "+
			"Returns the combined stdout and stderr (capped at %s, keeping the start and the end) and a "+
			"last line \"[exit N]\". Times out after %s. %s", asked, allowed, size(t.e.lim.outputBytes), t.e.timeout, t.confinementText()),
		Parameters: object(map[string]any{
			"command": prop("string", "The program to run (e.g. \"go\"), or a whole command line such as \"go test ./...\"."),
			"args": map[string]any{
				"type":        "array",
				"items":       map[string]any{"type": "string"},
				"description": "Arguments passed to the program as they are, one per element (no shell interpretation).",
			},
		}, "command"),
	}
}

// argv reads run_command's arguments as the program and its arguments.
func (t *runCommand) argv(raw json.RawMessage) ([]string, error) {
	const name = "run_command"
	var a struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
	}
	if err := decodeArgs(name, raw, &a, "{command, args?}"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return nil, errMissing(name, "command")
	}
	words, err := splitWords(a.Command)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %v; commands run without a shell, so give the program and its arguments as plain words, e.g. command=\"go\", args=[\"test\", \"./...\"]",
			name, a.Command, err)
	}
	return append(words, a.Args...), nil
}

// asksApproval reports whether a call with raw may run once a person says yes: the
// policy is ask and the command is well formed but not allowed.
func (t *runCommand) asksApproval(raw json.RawMessage) bool {
	if t.e.approval != ApprovalAsk {
		return false
	}
	argv, err := t.argv(raw)
	return err == nil && !allowed(t.e.allow, argv)
}

func (t *runCommand) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	const name = "run_command"
	argv, err := t.argv(raw)
	if err != nil {
		return "", err
	}
	// Under "ask", a person may let a command the allow-list does not name run once; it
	// runs as confined as any other.
	approved := t.e.approval == ApprovalAsk && isApproved(ctx)
	if len(t.e.allow) == 0 && !approved {
		return "", fmt.Errorf("%s: no commands are allowed in this workspace ([tools] allow_commands in luft.toml is empty); do without running commands", name)
	}
	if !allowed(t.e.allow, argv) && !approved {
		return "", fmt.Errorf("%s: `%s` is not allowed; a command must start with one of: %s (the [tools] allow_commands of luft.toml)",
			name, joinWords(argv), t.allowList())
	}

	if err := t.e.confineCheck(); err != nil {
		return "", fmt.Errorf("%s: `%s` was not run: %v", name, joinWords(argv), err)
	}
	path, err := t.lookPath(argv[0])
	if err != nil {
		return "", err
	}
	// A private temporary folder, removed after the command: the one place outside the
	// workspace a confined command may write.
	tmp, err := os.MkdirTemp("", "luft-cmd-")
	if err != nil {
		return "", fmt.Errorf("%s: cannot create a temporary folder for the command: %v", name, err)
	}
	defer os.RemoveAll(tmp)

	runCtx, cancel := context.WithTimeout(ctx, t.e.timeout)
	defer cancel()
	// A command that prints without end (yes, a runaway loop) is stopped once it has
	// printed far more than could be shown, instead of burning its whole timeout.
	flood, floodCancel := context.WithCancelCause(runCtx)
	defer floodCancel(nil)
	set := map[string]string{"TMPDIR": tmp}
	cache := t.e.commandCache()
	if cache != "" {
		set["XDG_CACHE_HOME"] = cache
	}
	cmd, err := sandbox.Command(flood, t.e.policy(path, tmp, cache), path, argv)
	if err != nil {
		return "", fmt.Errorf("%s: `%s` was not run: %v", name, joinWords(argv), err)
	}
	cmd.Dir = t.e.ws.dir
	cmd.Env = ChildEnv(os.Environ(), t.e.envPass, set)
	out := &capWriter{headMax: t.e.lim.outputBytes / 2, tailMax: t.e.lim.outputBytes - t.e.lim.outputBytes/2,
		stopAt: t.e.lim.outputStop, stop: func() { floodCancel(errFlood) }}
	cmd.Stdout, cmd.Stderr = out, out // the same comparable writer: exec serialises the writes
	// Grandchildren (a test binary under go test) may hold the output pipe open after the
	// process is killed; WaitDelay keeps them from holding the call open too.
	cmd.WaitDelay = 5 * time.Second
	killGroup(cmd)

	err = cmd.Run()
	sandbox.Done(cmd) // what the command left running (in its pids cgroup) ends with it
	var status string
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s: `%s`: %w", name, joinWords(argv), ctx.Err())
	case errors.Is(context.Cause(flood), errFlood):
		status = fmt.Sprintf("[stopped after printing more than %s: the process was killed; print less, e.g. send the output to a file in the workspace and read parts of it]", size(int(t.e.lim.outputStop)))
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		status = fmt.Sprintf("[timed out after %s: the process was killed]", t.e.timeout)
	case err == nil:
		status = "[exit 0]"
	case errors.As(err, &ee):
		if code := ee.ExitCode(); code >= 0 {
			status = fmt.Sprintf("[exit %d]", code)
		} else {
			status = "[" + ee.String() + "]"
		}
	case errors.Is(err, exec.ErrWaitDelay):
		status = "[exit 0; the output was still held open by a background process, which was left behind]"
	default:
		return "", fmt.Errorf("%s: cannot run `%s`: %v", name, joinWords(argv), err)
	}
	text := out.String()
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text + status, nil
}

// commandCache is the cache folder the workspace's commands share ($XDG_CACHE_HOME for
// them, which go's build cache and most tools' caches follow): under the user's cache
// folder, one per workspace, so that a build cache survives between calls without
// commands writing the user's own caches — an entry planted there would run in the
// user's later builds, outside any sandbox. "" when the user has no cache folder.
func (e *env) commandCache() string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		return "" // no cache folder to add to (HOME=/nonexistent, say): none is made up
	}
	sum := sha256.Sum256([]byte(e.ws.real))
	dir := filepath.Join(base, "luft", "commands", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	return dir
}

// lookPath finds the program as a shell would: a name with a slash is a path (relative
// ones are taken from the workspace, where the command runs), any other name is looked
// up on PATH.
func (t *runCommand) lookPath(prog string) (string, error) {
	const name = "run_command"
	if strings.Contains(prog, "/") {
		p := prog
		if !filepath.IsAbs(p) {
			p = filepath.Join(t.e.ws.dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: program %q does not exist (a path with a slash is taken from the workspace)", name, prog)
		}
		return prog, nil
	}
	path, err := exec.LookPath(prog)
	switch {
	case errors.Is(err, exec.ErrDot):
		return "", fmt.Errorf("%s: program %q resolves to the current directory, which is refused; name it by a path such as ./%s, allowed in [tools] allow_commands", name, prog, prog)
	case err != nil:
		return "", fmt.Errorf("%s: program %q was not found on PATH (is it installed?)", name, prog)
	}
	return path, nil
}

// allowList is the allowed commands for messages: "go test; ls".
func (t *runCommand) allowList() string {
	list := make([]string, len(t.e.allow))
	for i, words := range t.e.allow {
		list[i] = joinWords(words)
	}
	return strings.Join(list, "; ")
}

// joinWords is the inverse of splitWords for display: words that need it are single-quoted.
func joinWords(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w != "" && !strings.ContainsAny(w, " \t\\'\";|&><()$`") {
			b.WriteString(w)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(w, "'", `'\''`) + "'")
	}
	return b.String()
}

// ParseAllowList splits [tools] allow_commands entries into words, as run_command and
// CommandAllowed compare them.
func ParseAllowList(entries []string) ([][]string, error) {
	allow := make([][]string, 0, len(entries))
	for _, c := range entries {
		words, err := splitWords(c)
		if err != nil {
			return nil, fmt.Errorf("tools: allow_commands entry %q: %v (give a program and its leading arguments as plain words, e.g. \"go test\")", c, err)
		}
		if len(words) == 0 {
			return nil, fmt.Errorf("tools: allow_commands has an empty entry (remove it, or name a program such as \"go test\")")
		}
		allow = append(allow, words)
	}
	return allow, nil
}

// CommandAllowed reports whether the command line cmdline starts, word by word, with one
// of allow's entries (from ParseAllowList). The line is read as a shell reads plain words;
// one with anything that would make a shell do more (chaining, redirection, expansion,
// a newline) is refused, so "go test ./... && rm -rf ~" is not "go test". It is
// run_command's rule, applied to a command line given whole (a coding agent's execute
// request, which the agent may hand to a shell).
func CommandAllowed(allow [][]string, cmdline string) bool {
	argv, err := splitWords(cmdline)
	return err == nil && allowed(allow, argv)
}

// allowed reports whether argv starts with one of the allowed word lists.
func allowed(allow [][]string, argv []string) bool {
	for _, words := range allow {
		if len(argv) >= len(words) && slices.Equal(argv[:len(words)], words) {
			return true
		}
	}
	return false
}

// splitWords splits a command line into words as a shell splits plain words: blanks
// separate words, single quotes keep everything literally, double quotes keep everything
// but \" and \\, and a backslash outside quotes escapes the next character. Anything
// that would make a shell do more — ; | & > < ( ) $ ` outside single quotes, $ or ` in
// double quotes, a newline anywhere — is an error, since no shell will run it.
func splitWords(s string) ([]string, error) {
	if i := strings.IndexAny(s, "\n\r"); i >= 0 {
		return nil, fmt.Errorf("a newline is shell syntax (one command per call)")
	}
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		quote   rune // 0, '\'' or '"'
		escaped bool
	)
	for _, r := range s {
		switch {
		case escaped:
			if quote == '"' && !strings.ContainsRune("\"\\$`", r) {
				cur.WriteByte('\\') // in double quotes a shell keeps a backslash that escapes nothing
			}
			cur.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch r {
			case '"':
				quote = 0
			case '\\':
				escaped = true
			case '$', '`':
				return nil, fmt.Errorf("%q inside double quotes is shell expansion", r)
			default:
				cur.WriteRune(r)
			}
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == '\'' || r == '"':
			quote = r
			inWord = true
		case r == '\\':
			escaped = true
			inWord = true
		case strings.ContainsRune(";|&><()$`", r):
			return nil, fmt.Errorf("%q is shell syntax", r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if escaped {
		return nil, fmt.Errorf("a trailing backslash escapes nothing")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// capWriter keeps the start and the end of a command's output and counts what it drops
// in between: a failing build or test says most at its end.
type capWriter struct {
	headMax, tailMax int
	head, tail       []byte
	total            int64
	stopAt           int64  // past this many bytes, stop is called once (0: never)
	stop             func() // stops the command
	stopped          bool
}

// errFlood is the cause of a command stopped for printing too much.
var errFlood = errors.New("the command printed too much")

func (w *capWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.total += int64(n)
	if w.stopAt > 0 && w.total > w.stopAt && !w.stopped && w.stop != nil {
		w.stopped = true
		w.stop()
	}
	if room := w.headMax - len(w.head); room > 0 {
		k := min(room, len(p))
		w.head = append(w.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		w.tail = append(w.tail, p...)
		// Let the tail grow to twice its cap before compacting, so copying stays linear.
		if len(w.tail) > 2*w.tailMax {
			w.tail = append(w.tail[:0], w.tail[len(w.tail)-w.tailMax:]...)
		}
	}
	return n, nil
}

func (w *capWriter) String() string {
	tail := w.tail
	if len(tail) > w.tailMax {
		tail = tail[len(tail)-w.tailMax:]
	}
	s := string(w.head)
	if omitted := w.total - int64(len(w.head)) - int64(len(tail)); omitted > 0 {
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += fmt.Sprintf("[… %d bytes of output omitted …]\n", omitted)
	}
	return strings.ToValidUTF8(s+string(tail), "\uFFFD")
}
