package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
)

// renderer shows a run's events: JSON lines on stdout with --json, otherwise one plain line
// per state change on stderr (nothing with --quiet), and the report at the end.
type renderer struct {
	e     *env
	f     *runFlags
	level int
	enc   *json.Encoder
}

func newRenderer(e *env, f *runFlags, level int) *renderer {
	r := &renderer{e: e, f: f, level: level}
	if f.json {
		r.enc = json.NewEncoder(e.stdout)
		r.enc.SetEscapeHTML(false)
	}
	return r
}

func (r *renderer) event(ev event.Event) error {
	if r.enc != nil {
		if err := r.enc.Encode(ev); err != nil {
			return fmt.Errorf("write event: %w", err)
		}
		return nil
	}
	if r.f.quiet || ev.Type == event.RunDone {
		return nil // the summary at the end says how the run ended
	}
	if line := plainLine(ev, r.level); line != "" {
		fmt.Fprintln(r.e.stderr, line)
	}
	return nil
}

func str(d map[string]any, k string) string {
	if v, ok := d[k]; ok && v != nil {
		return fmt.Sprint(v)
	}
	return ""
}

func num(d map[string]any, k string) float64 {
	switch v := d[k].(type) {
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case float64:
		return v
	}
	return 0
}

// plainLine is the one-line form of an event, or "" for events not shown.
func plainLine(ev event.Event, level int) string {
	d := ev.Data
	switch ev.Type {
	case event.RunStarted:
		return fmt.Sprintf("luft: run %s started: %s", ev.RunID, str(d, "workflow"))
	case event.PhaseStarted:
		return fmt.Sprintf("phase %s · %s", str(d, "phase_id"), str(d, "label"))
	case event.PhaseDone:
		return fmt.Sprintf("phase %s done · %s ok, %s failed", str(d, "phase_id"), str(d, "ok"), str(d, "failed"))
	case event.AgentDone:
		name := str(d, "name")
		if name == "" {
			name = str(d, "call_key")
		}
		if str(d, "status") == "ok" {
			cached := ""
			if d["cached"] == true {
				cached = " (cached)"
			}
			return fmt.Sprintf("  ✓ %s · %s · %d tok%s", name, ms(num(d, "elapsed_ms")), int(num(d, "tokens")), cached)
		}
		return fmt.Sprintf("  ✗ %s · %s: %s", name, str(d, "status"), str(d, "error"))
	case event.AgentRetry:
		return fmt.Sprintf("  ↻ %s retry %s in %s: %s", str(d, "call_key"), str(d, "attempt"), ms(num(d, "wait_ms")), str(d, "reason"))
	case event.SchemaRetry:
		return fmt.Sprintf("  ↻ %s output did not match its schema (re-prompt %s): %s", str(d, "call_key"), str(d, "attempt"), str(d, "errors"))
	case event.ParallelStarted:
		return fmt.Sprintf("  ⇉ parallel %s · %s branches", str(d, "span_id"), str(d, "count"))
	case event.ParallelDone:
		return fmt.Sprintf("  ⇇ parallel %s · %s ok, %s failed", str(d, "span_id"), str(d, "ok"), str(d, "failed"))
	case event.PipelineStarted:
		return fmt.Sprintf("  ⇶ pipeline %s · %s items × %s stages", str(d, "span_id"), str(d, "items"), str(d, "total_stages"))
	case event.PipelineDone:
		return fmt.Sprintf("  ⇶ pipeline %s done · %s ok, %s failed", str(d, "span_id"), str(d, "ok"), str(d, "failed"))
	case event.WorkflowStarted:
		return fmt.Sprintf("  ↳ workflow %s", str(d, "path"))
	case event.WorkflowDone:
		if d["ok"] == true {
			return fmt.Sprintf("  ↲ workflow %s done", str(d, "path"))
		}
		return fmt.Sprintf("  ↲ workflow %s failed: %s", str(d, "path"), str(d, "error"))
	case event.Log:
		if levelRank(str(d, "level")) < level {
			return ""
		}
		return fmt.Sprintf("  [%s] %s", str(d, "level"), str(d, "msg"))
	case event.Budget:
		return fmt.Sprintf("  budget set: time_ms=%s agents=%s tokens=%s usd=%s", str(d, "time_ms"), str(d, "agents"), str(d, "tokens"), str(d, "usd"))
	case event.RunDone:
		line := fmt.Sprintf("luft: run %s %s in %s", ev.RunID, str(d, "status"), ms(num(d, "elapsed_ms")))
		if e := str(d, "error"); e != "" {
			line += ": " + e
		}
		return line
	case event.RunSuspended:
		return fmt.Sprintf("luft: run suspended: %s", str(d, "reason"))
	}
	return ""
}

func ms(v float64) string {
	return (time.Duration(v) * time.Millisecond).String()
}

// finish prints the summary and the report and returns the run's exit error.
func (r *renderer) finish(res runtime.Result) error {
	if !r.f.json && !r.f.quiet {
		fmt.Fprintln(r.e.stderr, summary(res))
	}
	if res.Status == runtime.StatusCompleted && res.HasReport {
		text, err := reportText(res.Report)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		// stdout first: a report file that cannot be written must not lose the report.
		if !r.f.json {
			fmt.Fprint(r.e.stdout, text)
		}
		if r.f.output != "" {
			if err := os.WriteFile(r.f.output, []byte(text), 0o644); err != nil {
				return &exitError{code: exitFailed, err: fmt.Errorf("write report to %s: %w", r.f.output, err)}
			}
		}
	}
	if err := errorExit(res); err != nil {
		if r.f.quiet || r.f.json {
			// Errors are still shown in quiet and JSON modes.
			fmt.Fprintf(r.e.stderr, "luft: %s\n", statusMessage(res))
		}
		return err
	}
	return nil
}

func statusMessage(res runtime.Result) string {
	resume := fmt.Sprintf("; resume with: luft run --resume %s", res.RunID)
	switch res.Status {
	case runtime.StatusCancelled:
		return fmt.Sprintf("run %s cancelled%s", res.RunID, resume)
	case runtime.StatusSuspended:
		return fmt.Sprintf("run %s suspended: %v%s", res.RunID, res.Err, resume)
	}
	switch lua.ErrorKindOf(res.Err) {
	case lua.KindSyntax, lua.KindInvalid:
		return fmt.Sprintf("run %s failed: %v", res.RunID, res.Err)
	case lua.KindDivergence:
		return fmt.Sprintf("run %s failed: %v; to run from that call on: luft run --resume %s --allow-changed-script --rerun-from-divergence", res.RunID, res.Err, res.RunID)
	}
	return fmt.Sprintf("run %s failed: %v%s", res.RunID, res.Err, resume)
}

func summary(res runtime.Result) string {
	var b strings.Builder
	mark := map[runtime.Status]string{runtime.StatusCompleted: "✓", runtime.StatusFailed: "✗",
		runtime.StatusCancelled: "■", runtime.StatusSuspended: "⏸"}[res.Status]
	fmt.Fprintf(&b, "%s run %s %s in %s · agents %d ok, %d failed, %d cached · tokens %d in / %d out",
		mark, res.RunID, res.Status, res.Elapsed.Round(time.Millisecond), res.Agents.OK, res.Agents.Failed, res.Agents.Cached,
		res.Usage.Input, res.Usage.Output)
	if res.Cost > 0 {
		fmt.Fprintf(&b, " · $%.4f", res.Cost)
	}
	if res.Err != nil && res.Status != runtime.StatusCompleted {
		fmt.Fprintf(&b, "\nluft: %s", statusMessage(res))
	}
	return b.String()
}

// reportText renders a report: a string, or an object's markdown field, raw; anything else
// as indented JSON. A trailing newline is added when missing.
func reportText(v any) (string, error) {
	text, ok := v.(string)
	if m, isMap := v.(map[string]any); isMap {
		text, ok = m["markdown"].(string)
	}
	if !ok {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "", fmt.Errorf("render report: %w", err)
		}
		text = string(b)
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text, nil
}
