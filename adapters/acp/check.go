package acp

import (
	"context"
	"os/exec"
	"time"

	"github.com/luft-run/luft/adapters"
)

// Check implements adapters.Checker: the agent's command must be installed. It starts
// nothing (a coding agent may take seconds to start and may ask for a login).
func (b *Backend) Check(context.Context) adapters.CheckReport {
	start := time.Now()
	path, err := exec.LookPath(b.cfg.Command)
	rep := adapters.CheckReport{Latency: time.Since(start), Model: b.cfg.Model}
	if err != nil {
		rep.Error = b.startErr(err).Error()
		return rep
	}
	rep.Reachable = true
	rep.Notes = append(rep.Notes, "command "+path+" is installed; it is started (and speaks ACP) only when an agent runs")
	return rep
}
