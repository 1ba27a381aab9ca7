package host

import (
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
)

// The policy every door applies when it builds a runtime.Service from a config: the
// scheduler's lanes, what a run may record, a script's limits and the paths no agent may
// write.

// ProtectedPaths are luft's own files, which agents may not write even when they lie in
// the workspace: the state dir and the config file in use.
func ProtectedPaths(stateDir string, cfg config.Config) []string {
	out := []string{stateDir}
	if cfg.Path != "" {
		out = append(out, cfg.Path)
	}
	return out
}

// SchedulerConfig is the admission scheduler's configuration: a lane per configured
// backend (its slots, TPM, RPM, replicas and fallback; "ID/*" for its other models) and,
// for every other lane, slots concurrent turns (slots when slotsGiven, else [scheduler]
// slots when set, else slots). Lanes learn what is not configured from the headers of
// their responses; an OpenAI-compatible lane with no configured limits scouts (one turn
// until its first answer) so that the first burst of a run does not meet a 429.
func SchedulerConfig(cfg config.Config, slots int, slotsGiven bool) scheduler.Config {
	if !slotsGiven && cfg.Scheduler.Slots > 0 {
		slots = cfg.Scheduler.Slots
	}
	sc := scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: slots}, SuspendAfter: cfg.Scheduler.SuspendAfter,
		Lanes: map[string]scheduler.LaneConfig{
			"openai/*": {Slots: slots, Scout: true}, // the backend OPENAI_BASE_URL/OPENAI_API_KEY make
		}}
	for id, b := range cfg.Backends {
		n, tpm, rpm, replicas, fallback := cfg.Lane(id)
		if n == 0 {
			n = slots
		}
		lane := scheduler.LaneConfig{Slots: n, TPM: tpm, RPM: rpm, Replicas: 1 + len(replicas), Scout: b.Type == "openai" || b.Type == "anthropic"}
		if fallback != "" {
			lane.Fallback = fallback + "/" + cfg.Backends[fallback].Model
		}
		sc.Lanes[id+"/"+b.Model] = lane
		sc.Lanes[id+"/*"] = lane
	}
	return sc
}

// EventLimits are the config's [limits] on what a run records.
func EventLimits(l config.Limits) runtime.EventLimits {
	return runtime.EventLimits{MaxEventBytes: l.MaxEventBytes, MaxEvents: l.MaxEvents, MaxTotalBytes: l.MaxEventsBytes}
}

// ScriptLimits are the sandbox limits of a run: the config's [limits] on log and report
// sizes, and maxAgentCalls agent() calls (0 = the default, 10,000).
func ScriptLimits(l config.Limits, maxAgentCalls int) lua.Limits {
	return lua.Limits{MaxAgentCalls: maxAgentCalls, MaxLogBytes: l.MaxLogBytes, MaxReportBytes: l.MaxReportBytes}
}
